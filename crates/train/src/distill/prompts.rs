//! Prompts for on-policy distillation: general instructions (generated here, or read from a
//! JSONL file) and live-stream prompts (the opening of `hat data gen` trajectories), with
//! exact and near duplicates of evaluation prompts removed.
//!
//! The generator writes requests of many kinds (explain, list, write, compare, plan, ...) on
//! many topics, half of them with a verifiable constraint (length, case, keywords, format,
//! ending, ...); the broad set ([`GeneralSet::Broad`], `broad.rs`) gives the same requests up
//! to three constraints of 31 kinds. It is our own text; IFEval's 541 prompts are only used to
//! exclude anything that resembles them ([`exclude_near`]).

use std::collections::HashSet;
use std::io::BufRead;
use std::path::Path;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

use hat_harness::{Message, Role};

use crate::error::{io, Result, TrainError};

/// Where a prompt came from; it decides which teacher scores the student's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A general instruction: scored by the general teacher (the base model by default).
    General,
    /// A live-stream turn: scored by the stream teacher (the starting model by default), so
    /// distillation keeps what stage 1 taught.
    Stream,
}

/// One prompt: the conversation the student answers.
#[derive(Debug, Clone)]
pub struct Prompt {
    pub id: String,
    pub messages: Vec<Message>,
    pub source: Source,
    /// What a compliant answer satisfies: the generator's constraint, checked by program
    /// (empty for unconstrained and file prompts).
    pub checks: Vec<Check>,
    /// Edits that make an answer meet one of `checks` without changing what it says (only
    /// the broad set writes them; `hat data replay --repair` uses them).
    pub repairs: Vec<Repair>,
}

/// An edit by program that makes an answer satisfy one constraint: its case, its quotes,
/// a line before or after it, a first word, its commas, a JSON wrapper. A model that cannot
/// yet follow such an instruction on its own never writes a passing answer to learn from;
/// its answer, edited, shows it what following the instruction looks like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Repair {
    Lowercase,
    Uppercase,
    /// The whole answer inside double quotation marks.
    Quote,
    /// A line and a blank line before the answer (a repeated request, a `<<title>>`).
    Prepend(String),
    /// The word and a comma before the answer, whose first letter is lowered (unless "I").
    FirstWord(String),
    /// A blank line and a line after the answer (an ending phrase, a postscript, a question).
    Append(String),
    /// Every comma removed (", " becomes " ").
    NoCommas,
    /// The answer as the string value of `{"answer": ...}`.
    Json,
}

impl Repair {
    /// When an edit is made, among a prompt's: the added words first (so that the commas
    /// they bring go too), then the commas, the JSON wrapper, the case, and the quotes
    /// around everything last.
    fn order(&self) -> u8 {
        match self {
            Repair::Prepend(_) | Repair::FirstWord(_) | Repair::Append(_) => 0,
            Repair::NoCommas => 1,
            Repair::Json => 2,
            Repair::Lowercase | Repair::Uppercase => 3,
            Repair::Quote => 4,
        }
    }

    fn apply(&self, answer: &str) -> String {
        let a = answer.trim();
        match self {
            Repair::Lowercase => a.to_lowercase(),
            Repair::Uppercase => a.to_uppercase(),
            Repair::Quote => format!("\"{}\"", a.trim_matches('"')),
            Repair::Prepend(line) => format!("{line}\n\n{a}"),
            Repair::FirstWord(w) => {
                let keep = a.starts_with("I ") || a.starts_with("I'");
                let mut cs = a.chars();
                let first = cs.next().map(|c| {
                    if keep {
                        c.to_string()
                    } else {
                        c.to_lowercase().to_string()
                    }
                });
                format!("{w}, {}{}", first.unwrap_or_default(), cs.as_str())
            }
            Repair::Append(line) => format!("{a}\n\n{line}"),
            Repair::NoCommas => a.replace(", ", " ").replace(',', ""),
            Repair::Json => serde_json::to_string_pretty(&serde_json::json!({ "answer": a }))
                .unwrap_or_default(),
        }
    }

    /// `answer` with every edit of `repairs` made, in their order.
    pub fn apply_all(repairs: &[Repair], answer: &str) -> String {
        let mut rs: Vec<&Repair> = repairs.iter().collect();
        rs.sort_by_key(|r| r.order());
        rs.iter()
            .fold(answer.trim().to_string(), |text, r| r.apply(&text))
    }
}

/// One verifiable constraint of a generated prompt: an IFEval instruction with its arguments
/// where IFEval's check says what the prompt asks, or a check of its own where IFEval's would
/// accept more (its highlights count italics, its sections "at least", its bullets `*` too) or
/// has none.
#[derive(Debug, Clone)]
pub enum Check {
    Ifeval(hat_ifeval::Instruction),
    /// The first word, ignoring case, quotes and markdown marks.
    FirstWord(String),
    /// The last non-blank line ends with a question mark.
    EndsWithQuestion,
    /// Exactly this many markdown dash bullets (`- item` lines; rules like `---` are not).
    DashBullets(usize),
    /// At least this many `**bold**` phrases.
    BoldPhrases(usize),
    /// Sections headed `PART 1` and `PART 2`, once each, and no other `PART n`.
    TwoParts,
}

impl Check {
    pub(super) fn ifeval(id: &str, kwargs: serde_json::Value) -> Self {
        let map = kwargs.as_object().cloned().unwrap_or_default();
        // the arguments are built here, from the generator's own values
        Check::Ifeval(
            hat_ifeval::Instruction::new(id, &map)
                .unwrap_or_else(|e| panic!("generator constraint {id} {map:?}: {e}")),
        )
    }

    /// Whether `answer` satisfies the constraint (IFEval's strict verdict for its ones).
    pub fn passes(&self, answer: &str) -> bool {
        match self {
            Check::Ifeval(i) => i.check_strict(answer),
            Check::FirstWord(w) => answer
                .split(|c: char| !c.is_alphanumeric())
                .find(|t| !t.is_empty())
                .is_some_and(|f| f.eq_ignore_ascii_case(w)),
            Check::EndsWithQuestion => answer
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .is_some_and(|l| {
                    l.trim_end()
                        .trim_end_matches(['*', '_', '"', '\'', ')', '\u{201d}', '\u{2019}'])
                        .ends_with('?')
                }),
            Check::DashBullets(n) => {
                let bullets = answer
                    .lines()
                    .filter(|l| {
                        let t = l.trim_start();
                        t.starts_with("- ") && !t[2..].trim().is_empty()
                    })
                    .count();
                bullets == *n
            }
            Check::BoldPhrases(n) => {
                let parts: Vec<&str> = answer.split("**").collect();
                // odd pieces sit between an opening and a closing `**`
                let bold = parts
                    .iter()
                    .enumerate()
                    .filter(|(i, t)| {
                        i % 2 == 1
                            && *i + 1 < parts.len()
                            && !t.trim().is_empty()
                            && !t.contains('\n')
                    })
                    .count();
                bold >= *n
            }
            Check::TwoParts => {
                let mut seen = Vec::new();
                let mut rest = answer;
                while let Some(at) = rest.find("PART") {
                    let after = rest[at + 4..].trim_start_matches([' ', '\t']);
                    let digits: String = after.chars().take_while(|c| c.is_ascii_digit()).collect();
                    if !digits.is_empty() {
                        seen.push(digits);
                    }
                    rest = &rest[at + 4..];
                }
                seen == ["1", "2"]
            }
        }
    }
}

impl Prompt {
    pub(super) fn user(id: String, text: String, checks: Vec<Check>) -> Self {
        Self {
            id,
            messages: vec![Message::user(text)],
            source: Source::General,
            checks,
            repairs: Vec::new(),
        }
    }
    /// The text of the last user turn (what duplicate checks compare).
    pub fn request(&self) -> &str {
        self.messages
            .iter()
            .rev()
            .find(|m| m.role == Role::User)
            .map(|m| m.content.as_str())
            .unwrap_or("")
    }
}

pub(super) const TOPICS: &[&str] = &[
    "composting at home",
    "the history of the bicycle",
    "learning a second language as an adult",
    "how vaccines train the immune system",
    "saving money on groceries",
    "the water cycle",
    "remote work",
    "training for a first 10k run",
    "why the sky is blue",
    "keeping houseplants alive",
    "the basics of budgeting",
    "electric cars",
    "the invention of the printing press",
    "how bees make honey",
    "public libraries",
    "sleep and memory",
    "a weekend trip to the mountains",
    "starting a vegetable garden",
    "how a refrigerator works",
    "the rules of chess",
    "volunteering",
    "time management for students",
    "coral reefs",
    "making bread from scratch",
    "the first moon landing",
    "recycling plastics",
    "how credit scores work",
    "board games for families",
    "the benefits of walking",
    "writing a good cover letter",
    "solar panels",
    "the life cycle of a butterfly",
    "how to prepare for a job interview",
    "ancient Egyptian pyramids",
    "learning to play the guitar",
    "food waste",
    "how rainbows form",
    "a small bakery opening in town",
    "smartphone battery care",
    "the importance of bees for farming",
    "jazz music",
    "migrating birds",
    "a museum visit with children",
    "cloud computing",
    "the metric system",
    "drinking enough water",
    "how earthquakes happen",
    "a neighbourhood clean-up day",
    "online privacy",
    "the Olympic Games",
    "tea and its origins",
    "a robot that learns to paint",
    "city parks",
    "how to fix a flat bicycle tyre",
    "the solar system",
    "teamwork",
    "a rainy afternoon",
    "desert animals",
    "the internet's early days",
    "mindful breathing",
    "how glaciers move",
    "a lighthouse keeper",
    "open-source software",
    "packing for a long flight",
    "photosynthesis",
    "a friendly dragon",
    "the role of a referee",
    "wind energy",
    "writing a thank-you note",
    "how maps are made",
];

pub(super) const TASKS: &[&str] = &[
    "Explain {t} to a ten-year-old.",
    "Write a short blog post about {t}.",
    "Give me some practical tips about {t}.",
    "Write a short story involving {t}.",
    "Write a poem about {t}.",
    "Summarize the main ideas behind {t}.",
    "What are the pros and cons of {t}?",
    "Write an email to a friend about {t}.",
    "Describe {t} as if you were a tour guide.",
    "Write a product description for a book on {t}.",
    "Create a short quiz with answers about {t}.",
    "Write a speech for a school assembly on {t}.",
    "Plan a one-week beginner schedule related to {t}.",
    "Write a dialogue between two people discussing {t}.",
    "Give three surprising facts about {t}.",
    "Write a limerick about {t}.",
    "Compare two different viewpoints on {t}.",
    "Write a news-style headline and a short article about {t}.",
    "Answer this question: why should anyone care about {t}?",
    "Write a short advertisement for a workshop on {t}.",
];

/// Constraints a checker could verify; `{n}`, `{k1}`, `{k2}`, `{w}` are filled in.
const CONSTRAINTS: &[&str] = &[
    "Keep it under {n} words.",
    "Use at least {n} words.",
    "Write exactly {b} bullet points using markdown dashes.",
    "Write everything in lowercase letters, with no capitals at all.",
    "Write the whole answer in capital letters.",
    "Mention the words \"{k1}\" and \"{k2}\" somewhere in the answer.",
    "Do not use the word \"{w}\" anywhere.",
    "Finish with the exact sentence \"That is all for today.\"",
    "Give the answer a title in double angle brackets, like <<my title>>.",
    "Split it into {p} paragraphs separated by a line with three asterisks.",
    "Put the whole answer inside double quotation marks.",
    "Format the whole answer as valid JSON.",
    "Do not use any commas.",
    "Add a postscript at the end starting with P.P.S.",
    "Highlight at least {h} phrases in bold with markdown.",
    "Begin the answer with the word \"Honestly\".",
    "Answer in two sections, labelled PART 1 and PART 2.",
    "Include a question for the reader at the end.",
];

/// The values a constraint's blanks were filled with.
struct Fill<'a> {
    n: u32,
    b: u32,
    p: u32,
    h: u32,
    k1: &'a str,
    k2: &'a str,
    w: &'a str,
}

/// The check of `CONSTRAINTS[i]` with its blanks filled by `v`.
fn constraint_check(i: usize, v: &Fill) -> Check {
    use serde_json::json;
    let c = Check::ifeval;
    match i {
        0 => c(
            "length_constraints:number_words",
            json!({"num_words": v.n, "relation": "less than"}),
        ),
        1 => c(
            "length_constraints:number_words",
            json!({"num_words": v.n, "relation": "at least"}),
        ),
        2 => Check::DashBullets(v.b as usize),
        3 => c("change_case:english_lowercase", json!({})),
        4 => c("change_case:english_capital", json!({})),
        5 => c("keywords:existence", json!({"keywords": [v.k1, v.k2]})),
        6 => c(
            "keywords:forbidden_words",
            json!({"forbidden_words": [v.w]}),
        ),
        7 => c(
            "startend:end_checker",
            json!({"end_phrase": "That is all for today."}),
        ),
        8 => c("detectable_format:title", json!({})),
        9 => c(
            "length_constraints:number_paragraphs",
            json!({"num_paragraphs": v.p}),
        ),
        10 => c("startend:quotation", json!({})),
        11 => c("detectable_format:json_format", json!({})),
        12 => c("punctuation:no_comma", json!({})),
        13 => c(
            "detectable_content:postscript",
            json!({"postscript_marker": "P.P.S"}),
        ),
        14 => Check::BoldPhrases(v.h as usize),
        15 => Check::FirstWord("honestly".into()),
        16 => Check::TwoParts,
        _ => Check::EndsWithQuestion,
    }
}

pub(super) const KEYWORDS: &[&str] = &[
    "window", "harvest", "signal", "gentle", "orbit", "lantern", "ladder", "river", "puzzle",
    "market", "compass", "shadow", "velvet", "engine", "meadow", "ticket",
];

/// Which generator writes the general prompts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GeneralSet {
    /// Half the prompts with one of 18 constraints, one wording each ([`general`]); the set
    /// every published run before session 41 used.
    #[default]
    Basic,
    /// Zero to three constraints a prompt, of 31 kinds in several wordings
    /// ([`super::broad::general`]).
    Broad,
}

impl GeneralSet {
    pub fn name(self) -> &'static str {
        match self {
            GeneralSet::Basic => "basic",
            GeneralSet::Broad => "broad",
        }
    }

    /// `n` prompts of this set, reproducible from `seed`.
    pub fn generate(self, n: usize, seed: u64) -> Vec<Prompt> {
        match self {
            GeneralSet::Basic => general(n, seed),
            GeneralSet::Broad => super::broad::general(n, seed),
        }
    }
}

impl std::str::FromStr for GeneralSet {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "basic" => Ok(GeneralSet::Basic),
            "broad" => Ok(GeneralSet::Broad),
            _ => Err(format!("`{s}` is not a prompt set: give basic or broad")),
        }
    }
}

/// `n` generated general prompts of the basic set, reproducible from `seed`.
pub fn general(n: usize, seed: u64) -> Vec<Prompt> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x4449_5354_494c);
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(n);
    // the space is ~70 x 20 x 19 x fillers; stop once new prompts have become rare
    let mut misses = 0;
    while out.len() < n && misses < 10_000 {
        let topic = TOPICS.choose(&mut rng).copied().unwrap_or("tea");
        let mut text = TASKS
            .choose(&mut rng)
            .copied()
            .unwrap_or("Explain {t}.")
            .replace("{t}", topic);
        let mut checks = Vec::new();
        if rng.gen_bool(0.5) {
            // `choose`, not an index draw, so that a seed gives the prompts it always gave
            let c = CONSTRAINTS.choose(&mut rng).copied().unwrap_or("");
            let ci = CONSTRAINTS.iter().position(|x| *x == c).unwrap_or(0);
            let mut kw = KEYWORDS.choose_multiple(&mut rng, 3).copied();
            let (k1, k2, w) = (
                kw.next().unwrap_or("river"),
                kw.next().unwrap_or("orbit"),
                kw.next().unwrap_or("very"),
            );
            // drawn in this order whatever the constraint, for the same reason
            let v = Fill {
                n: rng.gen_range(4..=30) * 10,
                b: rng.gen_range(2..=6),
                p: rng.gen_range(2..=4),
                h: rng.gen_range(1..=3),
                k1,
                k2,
                w,
            };
            let c = c
                .replace("{n}", &v.n.to_string())
                .replace("{b}", &v.b.to_string())
                .replace("{p}", &v.p.to_string())
                .replace("{h}", &v.h.to_string())
                .replace("{k1}", k1)
                .replace("{k2}", k2)
                .replace("{w}", w);
            text = format!("{text} {c}");
            checks.push(constraint_check(ci, &v));
        }
        if seen.insert(text.clone()) {
            out.push(Prompt::user(format!("gen-{}", out.len()), text, checks));
            misses = 0;
        } else {
            misses += 1;
        }
    }
    out
}

#[derive(Deserialize)]
struct PromptLine {
    #[serde(default)]
    prompt: Option<String>,
    #[serde(default)]
    messages: Option<Vec<Message>>,
}

/// Prompts from a JSONL file: each line `{"prompt": "..."}` or `{"messages": [...]}` (a
/// conversation ending with a user turn). A line that does not parse is an error naming file
/// and line.
pub fn read_jsonl(path: &Path) -> Result<Vec<Prompt>> {
    let f = std::fs::File::open(path).map_err(io(path.display()))?;
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = crate::tokens::jsonl_line(path, i, line)?;
        let line = line.trim().trim_start_matches('\u{feff}');
        if line.is_empty() {
            continue;
        }
        let bad = |message: String| TrainError::Data {
            file: path.display().to_string(),
            line: i + 1,
            message,
        };
        let p: PromptLine = serde_json::from_str(line).map_err(|e| {
            bad(format!(
                "not a prompt ({e}); each line must be {{\"prompt\": \"...\"}} or {{\"messages\": [...]}}"
            ))
        })?;
        let id = format!("{}:{}", path.display(), i + 1);
        let prompt = match (p.prompt, p.messages) {
            (Some(t), None) if !t.trim().is_empty() => Prompt::user(id, t, Vec::new()),
            (None, Some(m)) if m.last().is_some_and(|m| m.role == Role::User) => Prompt {
                id,
                messages: m,
                source: Source::General,
                checks: Vec::new(),
                repairs: Vec::new(),
            },
            _ => {
                return Err(bad(
                    "give either a non-empty `prompt` or `messages` ending with a user turn".into(),
                ))
            }
        };
        out.push(prompt);
    }
    Ok(out)
}

/// Live-stream prompts: each trajectory of a `hat data gen` file up to the teacher's first
/// turn (the harness's system prompt, a scene's scripted earlier turns, and the viewer
/// event). A scripted turn is an untrained assistant turn answered by a viewer; a recovery
/// detour, untrained too, is answered by tools and is the teacher's first turn.
pub fn stream(path: &Path) -> Result<Vec<Prompt>> {
    Ok(crate::tokens::read_jsonl(path)?
        .into_iter()
        .filter_map(|t| {
            let m = &t.record.messages;
            let first =
                (0..m.len()).find(|&k| m[k].trained() || hat_harness::chat::opens_detour(m, k))?;
            (first > 0).then(|| Prompt {
                id: t.id,
                messages: t.record.messages[..first].to_vec(),
                source: Source::Stream,
                checks: Vec::new(),
                repairs: Vec::new(),
            })
        })
        .collect())
}

fn words(s: &str) -> Vec<String> {
    s.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

fn shingles(s: &str, k: usize) -> HashSet<String> {
    let w = words(s);
    if w.len() < k {
        return HashSet::from([w.join(" ")]);
    }
    w.windows(k).map(|x| x.join(" ")).collect()
}

/// Drops prompts that equal or resemble one of `against` (ignoring case and punctuation):
/// the same words, or at least `threshold` of the prompt's word 5-grams found in one text of
/// `against`. Returns the kept prompts and how many were dropped.
pub fn exclude_near(
    prompts: Vec<Prompt>,
    against: &[String],
    threshold: f64,
) -> (Vec<Prompt>, usize) {
    let exact: HashSet<String> = against.iter().map(|a| words(a).join(" ")).collect();
    let refs: Vec<HashSet<String>> = against.iter().map(|a| shingles(a, 5)).collect();
    let mut dropped = 0;
    let kept = prompts
        .into_iter()
        .filter(|p| {
            let text = p.request();
            let near = exact.contains(&words(text).join(" ")) || {
                let mine = shingles(text, 5);
                refs.iter().any(|r| {
                    let shared = mine.iter().filter(|s| r.contains(*s)).count();
                    shared as f64 >= threshold * mine.len().max(1) as f64
                })
            };
            dropped += near as usize;
            !near
        })
        .collect();
    (kept, dropped)
}

/// IFEval's prompts (the evaluation set distillation must never train on).
pub fn ifeval_prompts() -> Vec<String> {
    hat_ifeval::builtin_inputs()
        .into_iter()
        .map(|r| r.prompt)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_prompts_are_distinct_reproducible_and_filled_in() {
        let a = general(500, 3);
        assert_eq!(a.len(), 500);
        let b = general(500, 3);
        assert!(a.iter().zip(&b).all(|(x, y)| x.request() == y.request()));
        let set: HashSet<&str> = a.iter().map(|p| p.request()).collect();
        assert_eq!(set.len(), 500);
        assert!(
            a.iter().all(|p| !p.request().contains('{')),
            "unfilled slot"
        );
        assert_ne!(general(5, 4)[0].request(), a[0].request());
    }

    #[test]
    fn every_constraint_has_a_check_that_tells_compliant_answers_apart() {
        let v = Fill {
            n: 40,
            b: 3,
            p: 2,
            h: 2,
            k1: "river",
            k2: "orbit",
            w: "ladder",
        };
        let long = "word ".repeat(60);
        // (a compliant answer, a violating one) per constraint, in CONSTRAINTS' order
        let cases: [(&str, &str); 18] = [
            ("A short answer.", &long),
            (&long, "Too short."),
            ("Intro\n- a\n- b\n- c\n---", "* a\n* b\n* c"),
            ("all lowercase here.", "Not all lowercase."),
            ("ALL CAPS HERE.", "Not caps."),
            ("The river and its orbit.", "Only the river."),
            ("No such word here.", "Climb the ladder."),
            (
                "Done. That is all for today.",
                "That is all for today. More.",
            ),
            ("<<Bees>>\nText.", "Bees\nText."),
            ("One.\n***\nTwo.", "One.\n\nTwo."),
            ("\"Quoted answer.\"", "Not quoted."),
            ("{\"a\": 1}", "a: 1"),
            ("No commas at all.", "Yes, commas."),
            ("Text.\nP.P.S. More.", "Text. PS more."),
            ("**one** and **two**", "**one** and *two*"),
            ("Honestly\u{2014}I think so.", "It is honestly fine."),
            (
                "PART 1\nFirst.\nPART 2\nSecond.",
                "PART 1\nFirst.\nPART 2\nSecond.\nPART 3\nThird.",
            ),
            (
                "Text.\nWhat do you think?\u{201d}",
                "What do you think? Text.",
            ),
        ];
        assert_eq!(cases.len(), CONSTRAINTS.len());
        for (i, (ok, bad)) in cases.iter().enumerate() {
            let c = constraint_check(i, &v);
            assert!(
                c.passes(ok),
                "constraint {i} ({}) rejects {ok:?}",
                CONSTRAINTS[i]
            );
            assert!(
                !c.passes(bad),
                "constraint {i} ({}) accepts {bad:?}",
                CONSTRAINTS[i]
            );
        }
        // the generator attaches the check of the constraint it wrote, and none otherwise
        let ps = general(400, 5);
        for p in &ps {
            let constrained = CONSTRAINTS.iter().any(|c| {
                let head = c.split('{').next().unwrap_or(c);
                p.request().contains(head)
            });
            assert_eq!(p.checks.len(), usize::from(constrained), "{}", p.request());
        }
        assert!(ps.iter().any(|p| p.checks.is_empty()) && ps.iter().any(|p| !p.checks.is_empty()));
    }

    #[test]
    fn ifeval_prompts_and_their_near_copies_are_excluded() {
        let ifeval = ifeval_prompts();
        assert_eq!(ifeval.len(), 541);
        let copy = Prompt::user("c".into(), ifeval[7].to_uppercase(), Vec::new());
        let near = Prompt::user(
            "n".into(),
            format!("Please: {} Thanks!", ifeval[12]),
            Vec::new(),
        );
        let other = Prompt::user(
            "o".into(),
            "Explain composting at home to a ten-year-old.".into(),
            Vec::new(),
        );
        let (kept, dropped) = exclude_near(vec![copy, near, other], &ifeval, 0.5);
        assert_eq!(dropped, 2);
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].id, "o");
        // few generated prompts resemble IFEval's (those that do share a stock phrase such as
        // "what are the pros and cons of", and are dropped)
        let (kept, dropped) = exclude_near(general(2000, 1), &ifeval, 0.5);
        assert_eq!(kept.len() + dropped, 2000);
        assert!(
            dropped < 100,
            "{dropped} generated prompts resemble IFEval's"
        );
    }

    #[test]
    fn a_bad_prompt_line_is_named_by_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.jsonl");
        std::fs::write(&p, "{\"prompt\": \"hi\"}\n\n{\"messages\": [{\"role\": \"assistant\", \"content\": \"x\"}]}\n").unwrap();
        let e = read_jsonl(&p).unwrap_err().to_string();
        assert!(e.contains("p.jsonl:3"), "{e}");
        std::fs::write(&p, "{\"prompt\": \"hi\"}\n").unwrap();
        assert_eq!(read_jsonl(&p).unwrap()[0].request(), "hi");
    }

    #[test]
    fn stream_prompts_end_before_the_teachers_first_turn() {
        let rec = |messages: &str| {
            format!(
                r#"{{"messages":{messages},"tools":[],"harness_name":"h","harness_hash":"x","variant":"base","call_syntax":"json-tags","task_id":"t","task_type":"followup","split":"train","lang":"en","calls":[],"teacher":"oracle","score":{{}}}}"#
            )
        };
        let history = r#"[{"role":"system","content":"S"},{"role":"user","content":"in white?"},{"role":"assistant","content":"yes","weight":0},{"role":"user","content":"and black?"},{"role":"assistant","content":"call"},{"role":"tool","content":"7","name":"t"},{"role":"assistant","content":"7 left"}]"#;
        let detour = r#"[{"role":"system","content":"S"},{"role":"user","content":"price of no.3?"},{"role":"assistant","content":"wrong call","weight":0},{"role":"tool","content":"{}","name":"t"},{"role":"assistant","content":"right call"},{"role":"tool","content":"9","name":"t"},{"role":"assistant","content":"9"}]"#;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("d.jsonl");
        std::fs::write(&p, format!("{}\n{}\n", rec(history), rec(detour))).unwrap();
        let got: Vec<Vec<String>> = stream(&p)
            .unwrap()
            .iter()
            .map(|q| q.messages.iter().map(|m| m.content.clone()).collect())
            .collect();
        // the scripted turn stays in the prompt; the detour is the teacher's, so it does not
        assert_eq!(got[0], ["S", "in white?", "yes", "and black?"]);
        assert_eq!(got[1], ["S", "price of no.3?"]);
    }
}
