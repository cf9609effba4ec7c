//! The five HSA families, one file each, plus the helpers they share
//! (naming styles, word-bounded renames, seeded picks).
//!
//! Every family implements [`Transform`]; [`all`] lists them in the fixed
//! order [`crate::augment`] applies them.

use std::collections::BTreeSet;

use rand::seq::SliceRandom;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Map, Value};

use hat_harness::spec::{BindingSpec, ToolSpec};
use hat_harness::HarnessSpec;

use crate::banks::DistractorTool;
use crate::manifest::{Applied, Family};
use crate::pool::Pool;

pub mod hooks;
pub mod prompt;
pub mod skill_content;
pub mod skill_ids;
pub mod tool_schemas;

/// One family of task-preserving transformations.
pub trait Transform {
    fn family(&self) -> Family;
    /// Applies some of the family's transformations, drawing every choice
    /// from `rng` and every pool-split parameter from `pool`. Returns what it
    /// did (empty when nothing applied to this spec).
    fn apply(&self, spec: &mut HarnessSpec, rng: &mut ChaCha8Rng, pool: Pool) -> Vec<Applied>;
}

/// One sub-transformation of a family.
pub(crate) type SubOp = fn(&mut HarnessSpec, &mut ChaCha8Rng, Pool) -> Vec<Applied>;

/// The families in application order.
pub fn all() -> Vec<Box<dyn Transform>> {
    vec![
        Box::new(skill_ids::SkillIds),
        Box::new(skill_content::SkillContent),
        Box::new(tool_schemas::ToolSchemas),
        Box::new(prompt::PromptStructure),
        Box::new(hooks::HookFunctions),
    ]
}

/// Which of `n` sub-transformations to run: each with probability `p`, at
/// least one.
pub(crate) fn choose_ops(rng: &mut ChaCha8Rng, probs: &[f64]) -> Vec<bool> {
    let mut on: Vec<bool> = probs.iter().map(|p| rng.gen_bool(*p)).collect();
    if !on.iter().any(|b| *b) {
        let i = rng.gen_range(0..on.len());
        on[i] = true;
    }
    on
}

pub(crate) fn pick<'a, T>(rng: &mut ChaCha8Rng, items: &'a [T]) -> &'a T {
    &items[rng.gen_range(0..items.len())]
}

/// A value of `items` other than `current` when there is one.
pub(crate) fn pick_other<'a>(
    rng: &mut ChaCha8Rng,
    items: &'a [&'a str],
    current: &str,
) -> Option<&'a str> {
    let others: Vec<&str> = items.iter().copied().filter(|s| *s != current).collect();
    others.choose(rng).copied()
}

/// Lower-case words of an identifier (`check_stock`, `checkStock`, `check-stock`).
pub(crate) fn split_words(name: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        if c == '_' || c == '-' || c == '.' || c == ' ' {
            if !cur.is_empty() {
                words.push(std::mem::take(&mut cur));
            }
            prev_lower = false;
            continue;
        }
        if c.is_ascii_uppercase() && prev_lower && !cur.is_empty() {
            words.push(std::mem::take(&mut cur));
        }
        prev_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        cur.push(c.to_ascii_lowercase());
    }
    if !cur.is_empty() {
        words.push(cur);
    }
    words
}

fn capitalize(w: &str) -> String {
    let mut c = w.chars();
    match c.next() {
        Some(f) => f.to_ascii_uppercase().to_string() + c.as_str(),
        None => String::new(),
    }
}

/// Renders words in a naming style (see `banks::TOOL_NAME_STYLES` and
/// `banks::PARAM_NAME_STYLES`). `opaque`, `codename` and `serial` ignore the
/// words and draw a meaningless name from `rng`.
pub(crate) fn style_name<S: AsRef<str>>(words: &[S], style: &str, rng: &mut ChaCha8Rng) -> String {
    let w: Vec<&str> = words.iter().map(AsRef::as_ref).collect();
    let name = match style {
        "camel" => w
            .iter()
            .enumerate()
            .map(|(i, x)| if i == 0 { x.to_string() } else { capitalize(x) })
            .collect(),
        "pascal" => w.iter().map(|x| capitalize(x)).collect(),
        "ada" => w
            .iter()
            .map(|x| capitalize(x))
            .collect::<Vec<_>>()
            .join("_"),
        "kebab" => w.join("-"),
        "flat" => w.concat(),
        "screaming" => w
            .iter()
            .map(|x| x.to_ascii_uppercase())
            .collect::<Vec<_>>()
            .join("_"),
        "opaque" => format!("t_{}", rng.gen_range(1000..10000)),
        "codename" => {
            let (a, b) = crate::banks::CODENAME_WORDS;
            format!("{}_{}", pick(rng, a), pick(rng, b))
        }
        "serial" => {
            const CHARS: &[u8] = b"abcdefghjkmnpqrstuvwxyz23456789";
            let code: String = (0..4)
                .map(|_| CHARS[rng.gen_range(0..CHARS.len())] as char)
                .collect();
            format!("{}_{code}", pick(rng, crate::banks::SERIAL_PREFIXES))
        }
        _ => w.join("_"),
    };
    let name: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
        .take(60)
        .collect();
    if name.is_empty() {
        "x".into()
    } else {
        name
    }
}

/// `name`, or `name` with a numeric suffix, not in `taken`; inserts it.
pub(crate) fn unique(name: &str, sep: &str, taken: &mut BTreeSet<String>) -> String {
    let mut out = name.to_string();
    let mut i = 2;
    while taken.contains(&out) {
        out = format!("{name}{sep}{i}");
        i += 1;
    }
    taken.insert(out.clone());
    out
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Replaces whole-identifier occurrences of `old` (not inside a longer
/// identifier) by `new`.
pub(crate) fn replace_word(text: &str, old: &str, new: &str) -> String {
    if old.is_empty() || !text.contains(old) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(pos) = rest.find(old) {
        let before = rest[..pos].chars().next_back();
        let after = rest[pos + old.len()..].chars().next();
        let bounded =
            before.is_none_or(|c| !is_ident_char(c)) && after.is_none_or(|c| !is_ident_char(c));
        out.push_str(&rest[..pos]);
        out.push_str(if bounded { new } else { old });
        rest = &rest[pos + old.len()..];
    }
    out.push_str(rest);
    out
}

/// A `noop` tool from the distractor bank.
pub(crate) fn distractor_tool(d: &DistractorTool) -> ToolSpec {
    let mut props = Map::new();
    for (name, ty, desc) in d.params {
        props.insert(name.to_string(), json!({"type": ty, "description": desc}));
    }
    let required: Vec<&str> = d.params.iter().map(|p| p.0).collect();
    let mut schema = Map::new();
    schema.insert("type".into(), json!("object"));
    schema.insert("properties".into(), Value::Object(props));
    if !required.is_empty() {
        schema.insert("required".into(), json!(required));
    }
    ToolSpec {
        name: d.name.to_string(),
        description: d.description.to_string(),
        input_schema: Value::Object(schema),
        binding: BindingSpec {
            op: "noop".into(),
            args: Default::default(),
        },
        extra: Map::new(),
    }
}

/// Template variables (`{{ viewer }}`) a text uses, sorted.
pub(crate) fn template_vars(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let Some(end) = rest[start..].find("}}") else {
            break;
        };
        out.insert(rest[start + 2..start + end].trim().to_string());
        rest = &rest[start + end + 2..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn words_and_styles() {
        assert_eq!(split_words("checkStock"), vec!["check", "stock"]);
        assert_eq!(
            split_words("check_stock-now"),
            vec!["check", "stock", "now"]
        );
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let w = ["stock", "lookup"];
        assert_eq!(style_name(&w, "snake", &mut rng), "stock_lookup");
        assert_eq!(style_name(&w, "camel", &mut rng), "stockLookup");
        assert_eq!(style_name(&w, "pascal", &mut rng), "StockLookup");
        assert_eq!(style_name(&w, "ada", &mut rng), "Stock_Lookup");
        assert_eq!(style_name(&w, "kebab", &mut rng), "stock-lookup");
        assert_eq!(style_name(&w, "flat", &mut rng), "stocklookup");
        let o = style_name(&w, "opaque", &mut rng);
        assert!(o.starts_with("t_") && o.len() == 6, "{o}");
        for _ in 0..50 {
            let c = style_name(&w, "codename", &mut rng);
            let (a, b) = c.split_once('_').unwrap();
            assert!(crate::banks::CODENAME_WORDS.0.contains(&a), "{c}");
            assert!(crate::banks::CODENAME_WORDS.1.contains(&b), "{c}");
            let s = style_name(&w, "serial", &mut rng);
            let (p, code) = s.split_once('_').unwrap();
            assert!(crate::banks::SERIAL_PREFIXES.contains(&p), "{s}");
            assert!(code.len() == 4 && !code.contains("stock"), "{s}");
            assert!(!s.starts_with("t_"), "{s}");
        }
    }

    #[test]
    fn replace_word_respects_identifier_boundaries() {
        assert_eq!(
            replace_word("call pin_product, then pin_products", "pin_product", "x"),
            "call x, then pin_products"
        );
        assert_eq!(replace_word("max_price.", "max_price", "budget"), "budget.");
    }

    #[test]
    fn unique_names_and_vars() {
        let mut taken = BTreeSet::from(["a".to_string()]);
        assert_eq!(unique("a", "_", &mut taken), "a_2");
        assert_eq!(
            template_vars("Thank {{ viewer }} for {{gift}}"),
            BTreeSet::from(["viewer".to_string(), "gift".to_string()])
        );
    }
}
