//! Instruction ids and their arguments: parsing `kwargs` into a configured [`Instruction`].

use regex::Regex;
use serde_json::{Map, Value};

use crate::checks::{self, Relation};
use crate::error::IfevalError;
use crate::text::{is_blank, py_trim};

/// The 25 registered instruction ids, in upstream registry order.
pub const INSTRUCTION_IDS: [&str; 25] = [
    "keywords:existence",
    "keywords:frequency",
    "keywords:forbidden_words",
    "keywords:letter_frequency",
    "language:response_language",
    "length_constraints:number_sentences",
    "length_constraints:number_paragraphs",
    "length_constraints:number_words",
    "length_constraints:nth_paragraph_first_word",
    "detectable_content:number_placeholders",
    "detectable_content:postscript",
    "detectable_format:number_bullet_lists",
    "detectable_format:constrained_response",
    "detectable_format:number_highlighted_sections",
    "detectable_format:multiple_sections",
    "detectable_format:json_format",
    "detectable_format:title",
    "combination:two_responses",
    "combination:repeat_prompt",
    "startend:end_checker",
    "change_case:capital_word_frequency",
    "change_case:english_capital",
    "change_case:english_lowercase",
    "punctuation:no_comma",
    "startend:quotation",
];

/// One configured instruction: the id's check with its normalised arguments.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Instruction {
    KeywordsExistence {
        keywords: Vec<Regex>,
    },
    KeywordsFrequency {
        keyword: Regex,
        relation: Relation,
        frequency: i64,
    },
    ForbiddenWords {
        words: Vec<Regex>,
    },
    LetterFrequency {
        letter: String,
        relation: Relation,
        frequency: i64,
    },
    ResponseLanguage {
        language: String,
    },
    NumberSentences {
        relation: Relation,
        num_sentences: i64,
    },
    NumberParagraphs {
        num_paragraphs: i64,
    },
    NumberWords {
        relation: Relation,
        num_words: i64,
    },
    NthParagraphFirstWord {
        num_paragraphs: i64,
        nth_paragraph: i64,
        first_word: String,
    },
    NumberPlaceholders {
        num_placeholders: i64,
    },
    Postscript {
        marker: Regex,
    },
    NumberBulletLists {
        num_bullets: i64,
    },
    ConstrainedResponse,
    NumberHighlightedSections {
        num_highlights: i64,
    },
    MultipleSections {
        splitter: Regex,
        num_sections: i64,
    },
    JsonFormat,
    Title,
    TwoResponses,
    RepeatPrompt {
        prompt_to_repeat: String,
    },
    EndChecker {
        end_phrase: String,
    },
    CapitalWordFrequency {
        relation: Relation,
        capital_frequency: i64,
    },
    EnglishCapital,
    EnglishLowercase,
    NoComma,
    Quotation,
}

/// Longest keyword, splitter or postscript marker accepted (the IFEval data's longest is a
/// few words); longer ones are refused instead of compiling huge regexes.
pub const MAX_PATTERN_CHARS: usize = 1000;

/// Typed access to one instruction's kwargs, remembering which keys were used.
struct Args<'a> {
    id: &'a str,
    map: &'a Map<String, Value>,
    used: Vec<&'static str>,
}

impl<'a> Args<'a> {
    fn get(&mut self, arg: &'static str) -> Result<&'a Value, IfevalError> {
        self.used.push(arg);
        match self.map.get(arg) {
            None | Some(Value::Null) => Err(IfevalError::MissingArgument {
                id: self.id.to_string(),
                arg,
            }),
            Some(v) => Ok(v),
        }
    }

    fn invalid(&self, arg: &str, reason: impl Into<String>) -> IfevalError {
        IfevalError::InvalidArgument {
            id: self.id.to_string(),
            arg: arg.to_string(),
            reason: reason.into(),
        }
    }

    fn int(&mut self, arg: &'static str) -> Result<i64, IfevalError> {
        let v = self.get(arg)?;
        v.as_i64().ok_or_else(|| {
            let why = if v.is_u64() {
                format!(
                    "{v} is larger than the largest integer a check takes ({})",
                    i64::MAX
                )
            } else {
                format!("expected an integer, got {v}")
            };
            self.invalid(arg, why)
        })
    }

    fn string(&mut self, arg: &'static str) -> Result<String, IfevalError> {
        let v = self.get(arg)?;
        v.as_str()
            .map(str::to_string)
            .ok_or_else(|| self.invalid(arg, format!("expected a string, got {v}")))
    }

    fn strings(&mut self, arg: &'static str) -> Result<Vec<String>, IfevalError> {
        let v = self.get(arg)?;
        let err = || self.invalid(arg, format!("expected a list of strings, got {v}"));
        v.as_array()
            .ok_or_else(err)?
            .iter()
            .map(|s| s.as_str().map(str::to_string).ok_or_else(err))
            .collect()
    }

    /// A string that becomes (part of) a regex: at most [`MAX_PATTERN_CHARS`] characters, so
    /// the compiled regex stays small whatever a record holds.
    fn pattern(&mut self, arg: &'static str) -> Result<String, IfevalError> {
        let s = self.string(arg)?;
        self.short(arg, s)
    }

    fn patterns(&mut self, arg: &'static str) -> Result<Vec<String>, IfevalError> {
        let v = self.strings(arg)?;
        v.into_iter().map(|s| self.short(arg, s)).collect()
    }

    fn short(&self, arg: &str, s: String) -> Result<String, IfevalError> {
        let n = s.chars().count();
        if n > MAX_PATTERN_CHARS {
            return Err(self.invalid(
                arg,
                format!("{n} characters; at most {MAX_PATTERN_CHARS} are accepted"),
            ));
        }
        Ok(s)
    }

    fn relation(&mut self, arg: &'static str) -> Result<Relation, IfevalError> {
        let s = self.string(arg)?;
        Relation::parse(&s).ok_or_else(|| {
            self.invalid(
                arg,
                format!("`{s}` is neither \"less than\" nor \"at least\""),
            )
        })
    }

    /// Rejects any non-null key that the instruction does not take.
    fn finish(self) -> Result<(), IfevalError> {
        for (k, v) in self.map {
            if !v.is_null() && !self.used.contains(&k.as_str()) {
                return Err(IfevalError::UnexpectedArgument {
                    id: self.id.to_string(),
                    arg: k.clone(),
                });
            }
        }
        Ok(())
    }
}

fn keyword_list(words: &[String]) -> Vec<Regex> {
    words
        .iter()
        .map(|w| checks::keywords::keyword_regex(w))
        .collect()
}

impl Instruction {
    /// Configures the check named `id` with `kwargs`, normalising arguments as upstream's
    /// `build_description` does. Missing or ill-typed arguments are errors (upstream would
    /// draw random values, which only makes sense when generating prompts).
    pub fn new(id: &str, kwargs: &Map<String, Value>) -> Result<Self, IfevalError> {
        let mut a = Args {
            id,
            map: kwargs,
            used: Vec::new(),
        };
        use Instruction as I;
        let ins = match id {
            "keywords:existence" => I::KeywordsExistence {
                keywords: keyword_list(&a.patterns("keywords")?),
            },
            "keywords:frequency" => I::KeywordsFrequency {
                keyword: checks::keywords::keyword_regex(py_trim(&a.pattern("keyword")?)),
                frequency: a.int("frequency")?,
                relation: a.relation("relation")?,
            },
            "keywords:forbidden_words" => {
                let mut words = a.patterns("forbidden_words")?;
                words.sort();
                words.dedup();
                I::ForbiddenWords {
                    words: keyword_list(&words),
                }
            }
            "keywords:letter_frequency" => {
                let letter = py_trim(&a.string("letter")?).to_lowercase();
                if letter.is_empty() {
                    return Err(a.invalid("letter", "empty"));
                }
                I::LetterFrequency {
                    letter,
                    frequency: a.int("let_frequency")?,
                    relation: a.relation("let_relation")?,
                }
            }
            "language:response_language" => I::ResponseLanguage {
                language: a.string("language")?,
            },
            "length_constraints:number_sentences" => I::NumberSentences {
                num_sentences: a.int("num_sentences")?,
                relation: a.relation("relation")?,
            },
            "length_constraints:number_paragraphs" => I::NumberParagraphs {
                num_paragraphs: a.int("num_paragraphs")?,
            },
            "length_constraints:number_words" => I::NumberWords {
                num_words: a.int("num_words")?,
                relation: a.relation("relation")?,
            },
            "length_constraints:nth_paragraph_first_word" => I::NthParagraphFirstWord {
                num_paragraphs: a.int("num_paragraphs")?,
                nth_paragraph: a.int("nth_paragraph")?,
                first_word: a.string("first_word")?.to_lowercase(),
            },
            "detectable_content:number_placeholders" => I::NumberPlaceholders {
                num_placeholders: a.int("num_placeholders")?,
            },
            "detectable_content:postscript" => I::Postscript {
                marker: checks::content::postscript_regex(py_trim(
                    &a.pattern("postscript_marker")?,
                )),
            },
            "detectable_format:number_bullet_lists" => I::NumberBulletLists {
                num_bullets: a.int("num_bullets")?,
            },
            "detectable_format:constrained_response" => I::ConstrainedResponse,
            "detectable_format:number_highlighted_sections" => I::NumberHighlightedSections {
                num_highlights: a.int("num_highlights")?,
            },
            "detectable_format:multiple_sections" => I::MultipleSections {
                splitter: checks::format::section_regex(py_trim(&a.pattern("section_spliter")?)),
                num_sections: a.int("num_sections")?,
            },
            "detectable_format:json_format" => I::JsonFormat,
            "detectable_format:title" => I::Title,
            "combination:two_responses" => I::TwoResponses,
            "combination:repeat_prompt" => I::RepeatPrompt {
                prompt_to_repeat: a.string("prompt_to_repeat")?,
            },
            "startend:end_checker" => I::EndChecker {
                end_phrase: py_trim(&a.string("end_phrase")?).to_lowercase(),
            },
            "change_case:capital_word_frequency" => I::CapitalWordFrequency {
                capital_frequency: a.int("capital_frequency")?,
                relation: a.relation("capital_relation")?,
            },
            "change_case:english_capital" => I::EnglishCapital,
            "change_case:english_lowercase" => I::EnglishLowercase,
            "punctuation:no_comma" => I::NoComma,
            "startend:quotation" => I::Quotation,
            _ => return Err(IfevalError::UnknownInstruction { id: id.to_string() }),
        };
        a.finish()?;
        Ok(ins)
    }

    /// Upstream `check_following(text)`, without the blank-response guard.
    pub fn check_text(&self, r: &str) -> bool {
        use checks::*;
        use Instruction as I;
        match self {
            I::KeywordsExistence { keywords } => keywords::existence(r, keywords),
            I::KeywordsFrequency {
                keyword,
                relation,
                frequency,
            } => keywords::frequency(r, keyword, *relation, *frequency),
            I::ForbiddenWords { words } => keywords::forbidden_words(r, words),
            I::LetterFrequency {
                letter,
                relation,
                frequency,
            } => keywords::letter_frequency(r, letter, *relation, *frequency),
            I::ResponseLanguage { language } => language::response_language(r, language),
            I::NumberSentences {
                relation,
                num_sentences,
            } => length::number_sentences(r, *relation, *num_sentences),
            I::NumberParagraphs { num_paragraphs } => length::number_paragraphs(r, *num_paragraphs),
            I::NumberWords {
                relation,
                num_words,
            } => length::number_words(r, *relation, *num_words),
            I::NthParagraphFirstWord {
                num_paragraphs,
                nth_paragraph,
                first_word,
            } => length::nth_paragraph_first_word(r, *num_paragraphs, *nth_paragraph, first_word),
            I::NumberPlaceholders { num_placeholders } => {
                content::number_placeholders(r, *num_placeholders)
            }
            I::Postscript { marker } => content::postscript(r, marker),
            I::NumberBulletLists { num_bullets } => format::number_bullet_lists(r, *num_bullets),
            I::ConstrainedResponse => format::constrained_response(r),
            I::NumberHighlightedSections { num_highlights } => {
                format::number_highlighted_sections(r, *num_highlights)
            }
            I::MultipleSections {
                splitter,
                num_sections,
            } => format::multiple_sections(r, splitter, *num_sections),
            I::JsonFormat => format::json_format(r),
            I::Title => format::title(r),
            I::TwoResponses => combination::two_responses(r),
            I::RepeatPrompt { prompt_to_repeat } => combination::repeat_prompt(r, prompt_to_repeat),
            I::EndChecker { end_phrase } => startend::end_checker(r, end_phrase),
            I::CapitalWordFrequency {
                relation,
                capital_frequency,
            } => case::capital_word_frequency(r, *relation, *capital_frequency),
            I::EnglishCapital => case::english_capital(r),
            I::EnglishLowercase => case::english_lowercase(r),
            I::NoComma => punctuation::no_comma(r),
            I::Quotation => startend::quotation(r),
        }
    }

    /// Strict verdict: the response is non-blank and passes the check as is.
    pub fn check_strict(&self, response: &str) -> bool {
        !is_blank(response) && self.check_text(response)
    }

    /// Loose verdict: some non-blank variant of the response (see [`crate::loose`]) passes.
    pub fn check_loose(&self, response: &str) -> bool {
        crate::loose::variants(response)
            .iter()
            .any(|v| !is_blank(v) && self.check_text(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn kw(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn every_id_is_known() {
        for id in INSTRUCTION_IDS {
            match Instruction::new(id, &Map::new()) {
                Ok(_) | Err(IfevalError::MissingArgument { .. }) => {}
                Err(e) => panic!("{id}: {e}"),
            }
        }
    }

    /// Issue 13: a 3 MB keyword, splitter or postscript panicked with `CompiledTooBig`.
    #[test]
    fn huge_patterns_are_argument_errors_not_panics() {
        let big = "k".repeat(3_000_000);
        for (id, args) in [
            ("keywords:existence", json!({"keywords": ["ok", big]})),
            (
                "keywords:frequency",
                json!({"keyword": big, "frequency": 2, "relation": "at least"}),
            ),
            (
                "keywords:forbidden_words",
                json!({"forbidden_words": [big]}),
            ),
            (
                "detectable_content:postscript",
                json!({"postscript_marker": big}),
            ),
            (
                "detectable_format:multiple_sections",
                json!({"section_spliter": big, "num_sections": 2}),
            ),
        ] {
            match Instruction::new(id, &kw(args)) {
                Err(IfevalError::InvalidArgument { reason, .. }) => {
                    assert!(reason.contains("at most 1000"), "{id}: {reason}")
                }
                other => panic!("{id}: {other:?}"),
            }
        }
    }

    #[test]
    fn argument_errors() {
        assert!(matches!(
            Instruction::new("nope:x", &Map::new()),
            Err(IfevalError::UnknownInstruction { .. })
        ));
        let e = Instruction::new(
            "keywords:frequency",
            &kw(json!({"keyword": "a", "frequency": 2})),
        )
        .unwrap_err();
        assert!(
            matches!(
                e,
                IfevalError::MissingArgument {
                    arg: "relation",
                    ..
                }
            ),
            "{e}"
        );
        let e = Instruction::new(
            "keywords:frequency",
            &kw(json!({"keyword": "a", "frequency": 2, "relation": "at most"})),
        )
        .unwrap_err();
        assert!(matches!(e, IfevalError::InvalidArgument { .. }), "{e}");
        let e = Instruction::new("punctuation:no_comma", &kw(json!({"extra": 1}))).unwrap_err();
        assert!(matches!(e, IfevalError::UnexpectedArgument { .. }), "{e}");
        // Null values (as in other copies of the data set) are treated as absent.
        assert!(Instruction::new("punctuation:no_comma", &kw(json!({"extra": null}))).is_ok());
    }

    #[test]
    fn blank_response_fails_everything() {
        let i = Instruction::new("punctuation:no_comma", &Map::new()).unwrap();
        assert!(!i.check_strict(" \n\t"));
        assert!(!i.check_loose(""));
        assert!(i.check_strict("fine"));
    }

    #[test]
    fn normalises_arguments() {
        let i = Instruction::new(
            "startend:end_checker",
            &kw(json!({"end_phrase": "  Is there anything else? "})),
        )
        .unwrap();
        assert!(i.check_strict("ok. is there anything else?"));
        let i = Instruction::new(
            "keywords:letter_frequency",
            &kw(json!({"letter": " Q ", "let_frequency": 2, "let_relation": "at least"})),
        )
        .unwrap();
        assert!(i.check_strict("Qq"));
    }
}
