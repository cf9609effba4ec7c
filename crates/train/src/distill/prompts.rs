//! Prompts for on-policy distillation: general instructions (generated here, or read from a
//! JSONL file) and live-stream prompts (the opening of `hat data gen` trajectories), with
//! exact and near duplicates of evaluation prompts removed.
//!
//! The generator writes requests of many kinds (explain, list, write, compare, plan, ...) on
//! many topics, half of them with a verifiable constraint (length, case, keywords, format,
//! ending, ...). It is our own text; IFEval's 541 prompts are only used to exclude anything
//! that resembles them ([`exclude_near`]).

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
}

impl Prompt {
    fn user(id: String, text: String) -> Self {
        Self {
            id,
            messages: vec![Message::user(text)],
            source: Source::General,
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

const TOPICS: &[&str] = &[
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

const TASKS: &[&str] = &[
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

const KEYWORDS: &[&str] = &[
    "window", "harvest", "signal", "gentle", "orbit", "lantern", "ladder", "river", "puzzle",
    "market", "compass", "shadow", "velvet", "engine", "meadow", "ticket",
];

/// `n` generated general prompts, reproducible from `seed`.
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
        if rng.gen_bool(0.5) {
            let c = CONSTRAINTS.choose(&mut rng).copied().unwrap_or("");
            let mut kw = KEYWORDS.choose_multiple(&mut rng, 3).copied();
            let (k1, k2, w) = (
                kw.next().unwrap_or("river"),
                kw.next().unwrap_or("orbit"),
                kw.next().unwrap_or("very"),
            );
            let c = c
                .replace("{n}", &(rng.gen_range(4..=30) * 10).to_string())
                .replace("{b}", &rng.gen_range(2..=6).to_string())
                .replace("{p}", &rng.gen_range(2..=4).to_string())
                .replace("{h}", &rng.gen_range(1..=3).to_string())
                .replace("{k1}", k1)
                .replace("{k2}", k2)
                .replace("{w}", w);
            text = format!("{text} {c}");
        }
        if seen.insert(text.clone()) {
            out.push(Prompt::user(format!("gen-{}", out.len()), text));
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
        let line = line.map_err(io(path.display()))?;
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
            (Some(t), None) if !t.trim().is_empty() => Prompt::user(id, t),
            (None, Some(m)) if m.last().is_some_and(|m| m.role == Role::User) => Prompt {
                id,
                messages: m,
                source: Source::General,
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

/// Live-stream prompts: each trajectory of a `hat data gen` file up to its first assistant
/// turn (the harness's system prompt and the viewer event).
pub fn stream(path: &Path) -> Result<Vec<Prompt>> {
    Ok(crate::tokens::read_jsonl(path)?
        .into_iter()
        .filter_map(|t| {
            let first = t
                .record
                .messages
                .iter()
                .position(|m| m.role == Role::Assistant)?;
            (first > 0).then(|| Prompt {
                id: t.id,
                messages: t.record.messages[..first].to_vec(),
                source: Source::Stream,
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
    fn ifeval_prompts_and_their_near_copies_are_excluded() {
        let ifeval = ifeval_prompts();
        assert_eq!(ifeval.len(), 541);
        let copy = Prompt::user("c".into(), ifeval[7].to_uppercase());
        let near = Prompt::user("n".into(), format!("Please: {} Thanks!", ifeval[12]));
        let other = Prompt::user(
            "o".into(),
            "Explain composting at home to a ten-year-old.".into(),
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
}
