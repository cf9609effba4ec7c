//! The broad general prompt set: the basic set's requests with zero to three verifiable
//! constraints each, drawn from 31 kinds in several wordings (length in words and sentences,
//! case, keywords and their frequency, letters, language, bullets, sections, paragraphs,
//! placeholders, highlights, endings, postscripts, repeating the request, two answers, ...).
//!
//! Why: the basic set gives half its prompts one of 18 constraints in one wording each, and a
//! model fine-tuned on it with replay answers still lost whole kinds of instruction it never
//! practised (response language, keyword frequency, commas over a long answer) and every
//! prompt that combines several. A model that is to follow instructions it has not seen needs
//! many kinds, in several wordings, combined. Constraints that cannot hold together (lowercase
//! and capitals, two openings, two endings, JSON and anything else) are never drawn together:
//! each claims parts of the answer ([`slot`]) and two constraints never share one.

use std::collections::HashSet;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::json;

use super::prompts::{Check, Prompt, Repair, KEYWORDS, TASKS, TOPICS};

/// Parts of an answer a constraint governs; constraints of one prompt claim disjoint parts.
mod slot {
    pub const START: u16 = 1;
    pub const END: u16 = 1 << 1;
    pub const CASE: u16 = 1 << 2;
    pub const LENGTH: u16 = 1 << 3;
    /// The answer's division into paragraphs, sections, parts or answers.
    pub const LAYOUT: u16 = 1 << 4;
    /// The language the words are in (English keywords and phrases claim it too).
    pub const LANGUAGE: u16 = 1 << 5;
    pub const KEYWORD: u16 = 1 << 6;
    pub const COMMA: u16 = 1 << 7;
    pub const ALL: u16 = u16::MAX;
}

/// The values one constraint is filled with, drawn from the prompt's generator.
struct Draw<'a> {
    rng: &'a mut ChaCha8Rng,
    /// The request the constraints are added to (what `combination:repeat_prompt` repeats).
    task: &'a str,
    /// Its topic (a repaired answer's title).
    topic: &'a str,
}

impl Draw<'_> {
    fn pick<'s>(&mut self, xs: &[&'s str]) -> &'s str {
        xs.choose(self.rng).copied().unwrap_or("")
    }
    fn int(&mut self, lo: u32, hi: u32) -> u32 {
        self.rng.gen_range(lo..=hi)
    }
    fn keyword(&mut self) -> &'static str {
        KEYWORDS.choose(self.rng).copied().unwrap_or("river")
    }
}

/// One kind of constraint: the parts of the answer it claims, and how to word it, check it
/// and, where an edit by program can, repair an answer that misses it.
struct Kind {
    slots: u16,
    make: fn(&mut Draw) -> (String, Check, Option<Repair>),
}

fn ifeval(id: &str, kwargs: serde_json::Value) -> Check {
    Check::ifeval(id, kwargs)
}

const ENDINGS: &[&str] = &[
    "That is all for today.",
    "Thanks for reading!",
    "Let me know if you have any other questions.",
    "Hope this helps.",
    "See you next time.",
];
const FIRST_WORDS: &[&str] = &["Honestly", "Well", "Today", "Imagine", "Sure"];
const LANGUAGES: &[(&str, &str)] = &[
    ("fr", "French"),
    ("es", "Spanish"),
    ("de", "German"),
    ("it", "Italian"),
    ("pt", "Portuguese"),
];
const ORDINALS: &[&str] = &["first", "second", "third", "fourth"];

const KINDS: &[Kind] = &[
    Kind {
        slots: slot::LENGTH,
        make: |d| {
            let n = d.int(4, 30) * 10;
            let t = d.pick(&[
                "Keep it under {n} words.",
                "Use fewer than {n} words.",
                "Your whole answer must be shorter than {n} words.",
            ]);
            let check = ifeval(
                "length_constraints:number_words",
                json!({"num_words": n, "relation": "less than"}),
            );
            (t.replace("{n}", &n.to_string()), check, None)
        },
    },
    Kind {
        slots: slot::LENGTH,
        make: |d| {
            let n = d.int(4, 30) * 10;
            let t = d.pick(&[
                "Use at least {n} words.",
                "Write no fewer than {n} words.",
                "The answer should be {n} words long or longer.",
            ]);
            let check = ifeval(
                "length_constraints:number_words",
                json!({"num_words": n, "relation": "at least"}),
            );
            (t.replace("{n}", &n.to_string()), check, None)
        },
    },
    Kind {
        slots: slot::LENGTH,
        make: |d| {
            let n = d.int(3, 9);
            let t = d.pick(&[
                "Answer in fewer than {n} sentences.",
                "Use less than {n} sentences in total.",
            ]);
            let check = ifeval(
                "length_constraints:number_sentences",
                json!({"num_sentences": n, "relation": "less than"}),
            );
            (t.replace("{n}", &n.to_string()), check, None)
        },
    },
    Kind {
        slots: slot::LENGTH,
        make: |d| {
            let n = d.int(5, 15);
            let t = d.pick(&[
                "Write at least {n} sentences.",
                "Your answer needs {n} sentences or more.",
            ]);
            let check = ifeval(
                "length_constraints:number_sentences",
                json!({"num_sentences": n, "relation": "at least"}),
            );
            (t.replace("{n}", &n.to_string()), check, None)
        },
    },
    Kind {
        slots: slot::LAYOUT,
        make: |d| {
            let n = d.int(2, 6);
            let t = d.pick(&[
                "Write exactly {n} bullet points using markdown dashes.",
                "Give exactly {n} points, each on its own line starting with \"- \".",
            ]);
            (
                t.replace("{n}", &n.to_string()),
                Check::DashBullets(n as usize),
                None,
            )
        },
    },
    Kind {
        slots: slot::LAYOUT,
        make: |d| {
            let n = d.int(2, 6);
            let t = d.pick(&[
                "Make it a list of exactly {n} items, each line starting with an asterisk like \"* item\".",
                "Format the answer as exactly {n} markdown list items written \"* ...\", and no other list items.",
            ]);
            let check = ifeval(
                "detectable_format:number_bullet_lists",
                json!({"num_bullets": n}),
            );
            (t.replace("{n}", &n.to_string()), check, None)
        },
    },
    Kind {
        slots: slot::CASE,
        make: |d| {
            let t = d.pick(&[
                "Write everything in lowercase letters, with no capitals at all.",
                "Use only lowercase letters; not a single capital letter.",
            ]);
            (
                t.into(),
                ifeval("change_case:english_lowercase", json!({})),
                Some(Repair::Lowercase),
            )
        },
    },
    Kind {
        slots: slot::CASE | slot::LANGUAGE,
        make: |d| {
            let t = d.pick(&[
                "Write the whole answer in capital letters.",
                "Your entire reply must be in English and in UPPERCASE letters only.",
            ]);
            (
                t.into(),
                ifeval("change_case:english_capital", json!({})),
                Some(Repair::Uppercase),
            )
        },
    },
    Kind {
        slots: slot::CASE,
        make: |d| {
            let n = d.int(2, 5);
            let t = d.pick(&[
                "Stress key ideas by writing at least {n} words in ALL CAPITALS.",
                "Include at least {n} words written entirely in capital letters.",
            ]);
            let check = ifeval(
                "change_case:capital_word_frequency",
                json!({"capital_frequency": n, "capital_relation": "at least"}),
            );
            (t.replace("{n}", &n.to_string()), check, None)
        },
    },
    Kind {
        slots: slot::KEYWORD | slot::LANGUAGE,
        make: |d| {
            let (k1, k2) = (d.keyword(), d.keyword());
            let k2 = if k1 == k2 { "bridge" } else { k2 };
            let t = d.pick(&[
                "Mention the words \"{k1}\" and \"{k2}\" somewhere in the answer.",
                "Be sure to use the words {k1} and {k2}.",
            ]);
            let check = ifeval("keywords:existence", json!({"keywords": [k1, k2]}));
            (t.replace("{k1}", k1).replace("{k2}", k2), check, None)
        },
    },
    Kind {
        slots: slot::KEYWORD | slot::LANGUAGE,
        make: |d| {
            let k = d.keyword();
            let n = d.int(2, 4);
            let t = d.pick(&[
                "Use the word \"{k}\" at least {n} times.",
                "The word {k} should appear {n} times or more.",
            ]);
            let check = ifeval(
                "keywords:frequency",
                json!({"keyword": k, "frequency": n, "relation": "at least"}),
            );
            (
                t.replace("{k}", k).replace("{n}", &n.to_string()),
                check,
                None,
            )
        },
    },
    Kind {
        slots: 0,
        make: |d| {
            let w = d.pick(&["very", "really", "thing", "good", "important", "also"]);
            let t = d.pick(&[
                "Do not use the word \"{w}\" anywhere.",
                "Avoid the word {w} completely.",
            ]);
            let check = ifeval("keywords:forbidden_words", json!({"forbidden_words": [w]}));
            (t.replace("{w}", w), check, None)
        },
    },
    Kind {
        slots: 0,
        make: |d| {
            let l = d.pick(&["e", "a", "o", "t", "s", "n"]);
            let n = d.int(5, 20);
            let t = d.pick(&[
                "The letter \"{l}\" must appear at least {n} times in your answer.",
                "Use the letter {l} {n} times or more.",
            ]);
            let check = ifeval(
                "keywords:letter_frequency",
                json!({"letter": l, "let_frequency": n, "let_relation": "at least"}),
            );
            (
                t.replace("{l}", l).replace("{n}", &n.to_string()),
                check,
                None,
            )
        },
    },
    Kind {
        slots: slot::LANGUAGE,
        make: |d| {
            let (code, name) = *LANGUAGES.choose(d.rng).unwrap_or(&("fr", "French"));
            let t = d.pick(&[
                "Write your entire answer in {l}; no other language is allowed.",
                "Reply only in {l}.",
            ]);
            let check = ifeval("language:response_language", json!({"language": code}));
            (t.replace("{l}", name), check, None)
        },
    },
    Kind {
        slots: slot::END | slot::LANGUAGE,
        make: |d| {
            let e = d.pick(ENDINGS);
            let t = d.pick(&[
                "Finish with the exact sentence \"{e}\"",
                "End your answer with the phrase \"{e}\" and write nothing after it.",
            ]);
            let check = ifeval("startend:end_checker", json!({"end_phrase": e}));
            (t.replace("{e}", e), check, Some(Repair::Append(e.into())))
        },
    },
    Kind {
        slots: slot::START,
        make: |d| {
            let t = d.pick(&[
                "Give the answer a title in double angle brackets, like <<my title>>.",
                "Start with a title wrapped in double angular brackets, such as <<a title>>.",
            ]);
            let mut cs = d.topic.chars();
            let title = cs
                .next()
                .map(|c| c.to_uppercase().collect::<String>() + cs.as_str());
            let repair = Repair::Prepend(format!("<<{}>>", title.unwrap_or_default()));
            (
                t.into(),
                ifeval("detectable_format:title", json!({})),
                Some(repair),
            )
        },
    },
    Kind {
        slots: slot::LAYOUT,
        make: |d| {
            let n = d.int(2, 4);
            let t = d.pick(&[
                "Split it into {n} paragraphs separated by a line with three asterisks.",
                "Write {n} paragraphs, with the markdown divider *** between each two.",
            ]);
            let check = ifeval(
                "length_constraints:number_paragraphs",
                json!({"num_paragraphs": n}),
            );
            (t.replace("{n}", &n.to_string()), check, None)
        },
    },
    Kind {
        slots: slot::LAYOUT,
        make: |d| {
            let n = d.int(2, 4);
            let i = d.rng.gen_range(0..n as usize);
            let w = d.pick(&["Also", "First", "Finally", "Today", "Many", "People"]);
            let t = d.pick(&[
                "Write exactly {n} paragraphs separated by blank lines; the {i} paragraph must begin with the word \"{w}\".",
                "Use {n} paragraphs, divided by empty lines, and start the {i} one with \"{w}\".",
            ]);
            let check = ifeval(
                "length_constraints:nth_paragraph_first_word",
                json!({"num_paragraphs": n, "nth_paragraph": i + 1, "first_word": w}),
            );
            let t = t
                .replace("{n}", &n.to_string())
                .replace("{i}", ORDINALS[i])
                .replace("{w}", w);
            (t, check, None)
        },
    },
    Kind {
        slots: slot::LAYOUT,
        make: |d| {
            let n = d.int(2, 4);
            let s = d.pick(&["Section", "SECTION", "Part", "Chapter"]);
            let t = d.pick(&[
                "Divide the answer into {n} sections, each starting with \"{s} X\" where X is its number.",
                "Organise it as {n} numbered sections marked {s} 1, {s} 2 and so on.",
            ]);
            let check = ifeval(
                "detectable_format:multiple_sections",
                json!({"section_spliter": s, "num_sections": n}),
            );
            (
                t.replace("{n}", &n.to_string()).replace("{s}", s),
                check,
                None,
            )
        },
    },
    Kind {
        slots: slot::START | slot::END,
        make: |d| {
            let t = d.pick(&[
                "Put the whole answer inside double quotation marks.",
                "Wrap your entire response in double quotes.",
            ]);
            (
                t.into(),
                ifeval("startend:quotation", json!({})),
                Some(Repair::Quote),
            )
        },
    },
    Kind {
        slots: slot::ALL,
        make: |d| {
            let t = d.pick(&[
                "Format the whole answer as valid JSON.",
                "Your entire output must be JSON; you may wrap it in a markdown code block.",
            ]);
            (
                t.into(),
                ifeval("detectable_format:json_format", json!({})),
                Some(Repair::Json),
            )
        },
    },
    Kind {
        slots: slot::COMMA,
        make: |d| {
            let t = d.pick(&[
                "Do not use any commas.",
                "Avoid commas entirely in your reply.",
                "Write it without a single comma.",
            ]);
            (
                t.into(),
                ifeval("punctuation:no_comma", json!({})),
                Some(Repair::NoCommas),
            )
        },
    },
    Kind {
        slots: slot::END,
        make: |d| {
            let m = d.pick(&["P.S.", "P.P.S"]);
            let t = d.pick(&[
                "Add a postscript at the end starting with {m}",
                "At the very end, add a note that begins with {m}",
            ]);
            let check = ifeval(
                "detectable_content:postscript",
                json!({"postscript_marker": m}),
            );
            let note = d.pick(&[
                "Thanks for reading!",
                "Have a great day.",
                "Feel free to ask if anything is unclear.",
            ]);
            let repair = Repair::Append(format!("{m} {note}"));
            (t.replace("{m}", m), check, Some(repair))
        },
    },
    Kind {
        slots: 0,
        make: |d| {
            let n = d.int(1, 3);
            let t = d.pick(&[
                "Highlight at least {n} phrases in bold with markdown.",
                "Put at least {n} key phrases in **bold**.",
            ]);
            (
                t.replace("{n}", &n.to_string()),
                Check::BoldPhrases(n as usize),
                None,
            )
        },
    },
    Kind {
        slots: 0,
        make: |d| {
            let n = d.int(1, 4);
            let t = d.pick(&[
                "Highlight at least {n} sections with markdown, i.e. *highlighted section*.",
                "Mark at least {n} parts of the answer in italics with single asterisks, like *this*.",
            ]);
            let check = ifeval(
                "detectable_format:number_highlighted_sections",
                json!({"num_highlights": n}),
            );
            (t.replace("{n}", &n.to_string()), check, None)
        },
    },
    Kind {
        slots: 0,
        make: |d| {
            let n = d.int(1, 3);
            let t = d.pick(&[
                "Include at least {n} placeholders in square brackets, such as [name].",
                "Leave at least {n} blanks for the reader to fill in, written like [date] or [city].",
            ]);
            let check = ifeval(
                "detectable_content:number_placeholders",
                json!({"num_placeholders": n}),
            );
            (t.replace("{n}", &n.to_string()), check, None)
        },
    },
    Kind {
        slots: slot::START | slot::LANGUAGE,
        make: |d| {
            let w = d.pick(FIRST_WORDS);
            let t = d.pick(&[
                "Begin the answer with the word \"{w}\".",
                "The first word of your reply must be \"{w}\".",
            ]);
            (
                t.replace("{w}", w),
                Check::FirstWord(w.to_lowercase()),
                Some(Repair::FirstWord(w.into())),
            )
        },
    },
    Kind {
        slots: slot::LAYOUT,
        make: |d| {
            let t = d.pick(&[
                "Answer in two sections, labelled PART 1 and PART 2.",
                "Structure the reply as PART 1 followed by PART 2.",
            ]);
            (t.into(), Check::TwoParts, None)
        },
    },
    Kind {
        slots: slot::END,
        make: |d| {
            let t = d.pick(&[
                "Include a question for the reader at the end.",
                "Close with a question to the reader.",
            ]);
            let q = d.pick(&[
                "What do you think?",
                "Which part would you try first?",
                "Do you have any questions about it?",
            ]);
            (
                t.into(),
                Check::EndsWithQuestion,
                Some(Repair::Append(q.into())),
            )
        },
    },
    Kind {
        slots: slot::LAYOUT,
        make: |d| {
            let t = d.pick(&[
                "Give two different answers, separated by six asterisks: ******.",
                "Write two distinct versions, and put a line of six asterisks (******) between them.",
            ]);
            (
                t.into(),
                ifeval("combination:two_responses", json!({})),
                None,
            )
        },
    },
    Kind {
        slots: slot::START,
        make: |d| {
            let t = d.pick(&[
                "First copy the first sentence of this message word for word, then answer it.",
                "Start by repeating the request's first sentence exactly as written, then give your answer.",
            ]);
            let check = ifeval(
                "combination:repeat_prompt",
                json!({"prompt_to_repeat": d.task}),
            );
            (t.into(), check, Some(Repair::Prepend(d.task.to_string())))
        },
    },
];

/// Whether a kind claiming `slots` can join constraints claiming `taken`: no part claimed
/// twice, and a kind that claims the whole answer (JSON) stands alone, even beside kinds
/// that claim no part.
fn fits(slots: u16, taken: u16, used: &[usize]) -> bool {
    slots & taken == 0 && (used.is_empty() || (slots != slot::ALL && taken != slot::ALL))
}

/// How many constraints a prompt gets: none, one, two or three, with these weights.
const COUNT_WEIGHTS: [u32; 4] = [2, 4, 3, 1];

/// `n` broad general prompts, reproducible from `seed`.
pub fn general(n: usize, seed: u64) -> Vec<Prompt> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x4252_4f41_4421);
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(n);
    let total: u32 = COUNT_WEIGHTS.iter().sum();
    let mut misses = 0;
    while out.len() < n && misses < 10_000 {
        let topic = TOPICS.choose(&mut rng).copied().unwrap_or("tea");
        let task = TASKS
            .choose(&mut rng)
            .copied()
            .unwrap_or("Explain {t}.")
            .replace("{t}", topic);
        let mut pick = rng.gen_range(0..total);
        let mut want = 0;
        while pick >= COUNT_WEIGHTS[want] {
            pick -= COUNT_WEIGHTS[want];
            want += 1;
        }
        let mut text = task.clone();
        let mut checks = Vec::new();
        let mut repairs = Vec::new();
        let mut taken = 0u16;
        let mut used = Vec::new();
        for _ in 0..want {
            let free: Vec<usize> = (0..KINDS.len())
                .filter(|&k| fits(KINDS[k].slots, taken, &used) && !used.contains(&k))
                .collect();
            let Some(&k) = free.choose(&mut rng) else {
                break;
            };
            used.push(k);
            taken |= KINDS[k].slots;
            let (words, check, repair) = (KINDS[k].make)(&mut Draw {
                rng: &mut rng,
                task: &task,
                topic,
            });
            text = format!("{text} {words}");
            checks.push(check);
            repairs.extend(repair);
        }
        if seen.insert(text.clone()) {
            let mut p = Prompt::user(format!("broad-{}", out.len()), text, checks);
            p.repairs = repairs;
            out.push(p);
            misses = 0;
        } else {
            misses += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broad_prompts_are_distinct_reproducible_and_combine_constraints() {
        let a = general(2000, 9);
        assert_eq!(a.len(), 2000);
        let b = general(2000, 9);
        assert!(a.iter().zip(&b).all(|(x, y)| x.request() == y.request()));
        let set: HashSet<&str> = a.iter().map(|p| p.request()).collect();
        assert_eq!(set.len(), 2000);
        assert!(a.iter().all(|p| !p.request().contains('{')));
        let by_count = |k: usize| a.iter().filter(|p| p.checks.len() == k).count();
        // weights 2 : 4 : 3 : 1 of 10; a few draws of three find no third free kind
        assert!((300..500).contains(&by_count(0)), "{}", by_count(0));
        assert!((650..950).contains(&by_count(1)), "{}", by_count(1));
        assert!(by_count(2) + by_count(3) > 600);
        assert!(by_count(3) > 100);
    }

    #[test]
    fn every_kind_is_drawn_and_no_prompt_combines_kinds_that_share_a_slot() {
        let mut drawn = vec![0usize; KINDS.len()];
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        for _ in 0..20 {
            for (k, kind) in KINDS.iter().enumerate() {
                let (words, _, _) = (kind.make)(&mut Draw {
                    rng: &mut rng,
                    task: "Explain tea.",
                    topic: "tea",
                });
                assert!(!words.contains('{'), "kind {k}: {words}");
                drawn[k] += 1;
            }
        }
        assert!(drawn.iter().all(|&d| d == 20));
        // a JSON prompt has no other constraint, and lowercase never meets capitals
        for p in general(3000, 2) {
            let t = p.request();
            if t.contains("JSON") {
                assert_eq!(p.checks.len(), 1, "{t}");
            }
            let lower = t.contains("lowercase");
            let upper = t.contains("capital letters.") || t.contains("UPPERCASE");
            assert!(!(lower && upper), "{t}");
        }
    }

    #[test]
    fn repeat_prompt_checks_the_request_the_prompt_starts_with() {
        let p = general(3000, 4)
            .into_iter()
            .find(|p| p.request().contains("word for word") && p.checks.len() == 1)
            .expect("a repeat-the-request prompt among 3,000");
        let task = p
            .request()
            .split(" First copy")
            .next()
            .unwrap_or("")
            .to_string();
        let good = format!("{task} Here is my answer.");
        assert!(p.checks[0].passes(&good), "{}", p.request());
        assert!(!p.checks[0].passes("Here is my answer."));
    }

    /// An answer that says what it says, with none of the forms asked for: repaired, it
    /// meets every constraint of a prompt whose constraints all have a repair.
    #[test]
    fn repairs_make_a_plain_answer_meet_every_repairable_constraint() {
        let plain = "Composting turns food scraps into soil, and it is easy to start at home. \
                     You need a bin, some leaves and a little patience.";
        let ps = general(4000, 6);
        let all: Vec<&Prompt> = ps
            .iter()
            .filter(|p| !p.checks.is_empty() && p.repairs.len() == p.checks.len())
            .collect();
        assert!(all.len() > 400, "{}", all.len());
        let mut kinds = HashSet::new();
        for p in &all {
            let fixed = Repair::apply_all(&p.repairs, plain);
            for (c, r) in p.checks.iter().zip(&p.repairs) {
                kinds.insert(std::mem::discriminant(r));
                assert!(c.passes(&fixed), "{}\n{fixed}\n{c:?}", p.request());
            }
        }
        assert_eq!(kinds.len(), 8, "every kind of edit was tried");
        // and the plain answer itself meets none of the ones it was repaired for
        let single: Vec<&&Prompt> = all.iter().filter(|p| p.checks.len() == 1).collect();
        assert!(single.iter().all(|p| !p.checks[0].passes(plain)));
    }

    #[test]
    fn checks_tell_a_compliant_answer_from_a_non_compliant_one() {
        let no_comma = ifeval("punctuation:no_comma", json!({}));
        assert!(no_comma.passes("Tea is old and loved"));
        assert!(!no_comma.passes("Tea, old and loved"));
        let french = ifeval("language:response_language", json!({"language": "fr"}));
        assert!(french.passes(
            "Le thé est une boisson très ancienne que beaucoup de gens aiment boire le matin."
        ));
        assert!(!french.passes("Tea is a very old drink that many people like in the morning."));
        let freq = ifeval(
            "keywords:frequency",
            json!({"keyword": "river", "frequency": 2, "relation": "at least"}),
        );
        assert!(freq.passes("The river is wide. A river runs."));
        assert!(!freq.passes("The river is wide."));
    }
}
