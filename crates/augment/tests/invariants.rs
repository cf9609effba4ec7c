//! Invariants of Harness-State Augmentation over many seeds and both pools:
//! variants compile, round-trip through files, keep every canonical
//! operation reachable with the same canonical arguments, keep every check
//! satisfiable, use held-out parameters when asked, and are reproducible.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use hat_augment::{augment, banks, load_spec, write_variants, Family, Pool, Variant};
use hat_harness::harness::tools_by_op;
use hat_harness::hooks::{Action, CheckRule};
use hat_harness::{Backend, Harness, HarnessSpec, Op};

const SEEDS: u64 = 200;

fn base_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../harnesses/livestream")
}

fn base() -> HarnessSpec {
    load_spec(&base_dir()).expect("the production harness is valid")
}

/// Representative canonical arguments per operation (enum values in the maps).
fn canonical(op: Op) -> Map<String, Value> {
    let v = match op {
        Op::Product | Op::Coupons | Op::Pin => json!({"product": "P3"}),
        Op::Stock => json!({"product": "P3", "size": "M", "color": "black"}),
        Op::Quote => json!({"product": "P3", "quantity": 2, "coupon": "C1"}),
        Op::Shipping => json!({"product": "P3", "region": "Sichuan"}),
        Op::Search => json!({"query": "hoodie", "category": "apparel", "max_price": 200}),
        Op::Faq => json!({"topic": "returns", "product": "P3"}),
        Op::FlashSale => json!({"product": "P3", "minutes": 10, "discount_pct": 20}),
    };
    v.as_object().unwrap().clone()
}

struct Echo;
impl Backend for Echo {
    fn call(&self, _op: Op, args: &Map<String, Value>) -> Result<Value, String> {
        Ok(Value::Object(args.clone()))
    }
}

fn variants(pool: Pool) -> impl Iterator<Item = (u64, Variant)> {
    let base = base();
    (0..SEEDS).map(move |seed| {
        (
            seed,
            augment(&base, seed, pool).unwrap_or_else(|e| panic!("{e}")),
        )
    })
}

#[test]
fn variants_compile_and_round_trip_through_files() {
    let tmp = tempfile::tempdir().unwrap();
    for pool in Pool::ALL {
        for (seed, v) in variants(pool) {
            let h = Harness::compile(v.spec.clone(), None)
                .unwrap_or_else(|e| panic!("{pool} {seed}: {e}"));
            assert_eq!(h.hash, v.manifest.hash);
            let dir = tmp.path().join(format!("{pool}-{seed}"));
            v.spec.write_to(&dir).unwrap();
            let loaded = Harness::load(&dir).unwrap_or_else(|e| panic!("{pool} {seed}: {e}"));
            assert_eq!(
                loaded.hash, h.hash,
                "{pool} {seed}: hash differs after writing"
            );
            assert_eq!(loaded.spec, v.spec, "{pool} {seed}");
            assert!(v
                .spec
                .manifest
                .harness
                .version
                .ends_with(&format!("+hsa.{pool}.{seed}")));
            assert!(
                v.manifest.families().len() >= 2,
                "{pool} {seed}: {:?}",
                v.manifest.applied
            );
        }
    }
}

#[test]
fn every_op_stays_reachable_with_the_same_canonical_arguments() {
    let base_h = Harness::compile(base(), None).unwrap();
    let ops: Vec<Op> = tools_by_op(&base_h).keys().copied().collect();
    assert_eq!(ops.len(), Op::ALL.len());
    for pool in Pool::ALL {
        for (seed, v) in variants(pool) {
            let h = Harness::compile(v.spec.clone(), None).unwrap();
            for &op in &ops {
                let args = canonical(op);
                let call = h
                    .call_for(op, &args)
                    .unwrap_or_else(|| panic!("{pool} {seed}: {op} unreachable"));
                let tool = h.tool(&call.name).unwrap();
                let back = tool
                    .binding
                    .to_canonical(&call.arguments)
                    .unwrap_or_else(|e| panic!("{pool} {seed} {op}: {e}"));
                assert_eq!(back, args, "{pool} {seed} {op}: {:?}", call);
                let d = h.dispatch(&call, &Echo, &mut Vec::new());
                assert!(d.ok, "{pool} {seed} {op}: {} {}", call.arguments, d.result);
                assert_eq!(d.canonical.as_ref(), Some(&args));
                // The call survives the harness's own call syntax.
                let text = h.syntax.format(&call);
                let parsed = h
                    .syntax
                    .parse(&text)
                    .unwrap_or_else(|e| panic!("{pool} {seed}: {e:?} in {text}"));
                assert_eq!(parsed.calls, vec![call], "{pool} {seed}: {text}");
            }
        }
    }
}

fn check_rules(h: &Harness) -> Vec<&CheckRule> {
    h.hooks
        .iter()
        .filter_map(|x| match &x.action {
            Action::Check { rule, .. } => Some(rule),
            _ => None,
        })
        .collect()
}

#[test]
fn every_check_stays_satisfiable() {
    let vars = json!({"viewer": "lily", "gift": "rose"});
    for pool in Pool::ALL {
        for (seed, v) in variants(pool) {
            let h = Harness::compile(v.spec.clone(), None).unwrap();
            let c = h.reply_constraints(&vars);
            assert!(
                c.max_chars >= banks::MIN_REPLY_CHARS,
                "{pool} {seed}: {}",
                c.max_chars
            );
            assert!(c.ends_with.len() <= 1, "{pool} {seed}: {:?}", c.ends_with);
            let phrases: Vec<&String> = c.require.iter().chain(&c.ends_with).collect();
            assert!(phrases
                .iter()
                .all(|p| p.chars().count() <= banks::MAX_PHRASE_CHARS));
            assert!(
                phrases.iter().map(|p| p.chars().count()).sum::<usize>()
                    <= banks::MAX_PHRASES_TOTAL
            );
            // A plain reply carrying the required phrases and the sign-off passes every check.
            let mut reply =
                String::from("The hoodie is 199 yuan with link 3, and it comes in black.");
            for r in &c.require {
                reply = format!("{reply} {r}");
            }
            if let Some(e) = c.ends_with.first() {
                reply = format!("{reply} {e}");
            }
            assert!(reply.chars().count() <= c.max_chars);
            for rule in check_rules(&h) {
                let bad = rule.violations(&reply, &vars);
                assert!(bad.is_empty(), "{pool} {seed}: {reply:?} breaks {bad:?}");
            }
            // Inject notes keep the variables their event provides.
            let notes = h.inject_notes(hat_harness::EventKind::ViewerJoin, &vars);
            assert!(
                notes.iter().all(|n| n.contains("lily")),
                "{pool} {seed}: {notes:?}"
            );
        }
    }
}

#[test]
fn heldout_variants_use_heldout_parameters_and_train_variants_do_not() {
    let heldout_orders: Vec<String> = hat_augment::heldout_parameters()
        .into_iter()
        .find(|p| p.1 == "section order")
        .unwrap()
        .2;
    for (seed, v) in variants(Pool::Heldout) {
        assert!(
            v.manifest.uses_heldout(),
            "{seed}: {:?}",
            v.manifest.applied
        );
    }
    for (seed, v) in variants(Pool::Train) {
        assert!(!v.manifest.uses_heldout(), "{seed}");
        let m = &v.spec.manifest;
        assert!(
            !banks::FORMATS.heldout.contains(&m.prompt.format.as_str()),
            "{seed}"
        );
        assert!(
            !banks::CALL_SYNTAXES
                .heldout
                .contains(&m.calls.syntax.as_str()),
            "{seed}"
        );
        assert!(
            !heldout_orders.contains(&m.prompt.sections.join(",")),
            "{seed}"
        );
        assert!(
            !banks::PERSONA_NAMES
                .heldout
                .contains(&m.persona.name.as_str()),
            "{seed}"
        );
        for t in &v.spec.tools {
            assert!(
                !banks::DISTRACTOR_TOOLS
                    .heldout
                    .iter()
                    .any(|d| d.name == t.name),
                "{seed}: {}",
                t.name
            );
        }
    }
}

#[test]
fn every_family_and_transformation_is_exercised() {
    let mut seen: BTreeMap<(Family, String), usize> = BTreeMap::new();
    for pool in Pool::ALL {
        for (_, v) in variants(pool) {
            for a in v.manifest.applied {
                *seen.entry((a.family, a.name)).or_default() += 1;
            }
        }
    }
    for name in [
        "rename_skills",
        "reword",
        "reorder_bullets",
        "layout",
        "distractor_skill",
        "distractor_tools",
        "rename_tools",
        "rename_params",
        "rename_enum_values",
        "nest_params",
        "reorder_properties",
        "optional_param",
        "rewrite_descriptions",
        "section_order",
        "format",
        "persona",
        "call_syntax",
        "reply_max_chars",
        "check_max_chars",
        "forbid_add",
        "forbid_remove",
        "sign_off",
        "require_phrase",
        "inject_notes",
        "remove_hook",
    ] {
        assert!(
            seen.keys().any(|k| k.1 == name),
            "{name} never applied: {seen:?}"
        );
    }
}

#[test]
fn augmenting_a_variant_again_still_works() {
    // Second-generation variants exercise flattening and composed value maps.
    let base = base();
    let mut flattened = 0;
    for seed in 0..60u64 {
        let v1 = augment(&base, seed, Pool::Train).unwrap();
        let v2 =
            augment(&v1.spec, seed + 1000, Pool::Heldout).unwrap_or_else(|e| panic!("{seed}: {e}"));
        flattened += v2
            .manifest
            .applied
            .iter()
            .filter(|a| a.name == "flatten_params")
            .count();
        let h = Harness::compile(v2.spec, None).unwrap();
        for op in Op::ALL {
            let args = canonical(op);
            let call = h.call_for(op, &args).unwrap();
            assert_eq!(
                h.tool(&call.name)
                    .unwrap()
                    .binding
                    .to_canonical(&call.arguments)
                    .unwrap(),
                args,
                "{seed} {op}"
            );
        }
    }
    assert!(flattened > 0);
}

fn read_all(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(
                    p.strip_prefix(dir).unwrap().to_path_buf(),
                    std::fs::read(&p).unwrap(),
                );
            }
        }
    }
    out
}

#[test]
fn same_seed_gives_byte_identical_output() {
    let (a, b, c) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    for pool in Pool::ALL {
        let sa = write_variants(&base_dir(), 12, 42, pool, a.path()).unwrap();
        let sb = write_variants(&base_dir(), 12, 42, pool, b.path()).unwrap();
        write_variants(&base_dir(), 12, 43, pool, c.path()).unwrap();
        assert_eq!(sa.families, sb.families);
        let (fa, fb, fc) = (read_all(a.path()), read_all(b.path()), read_all(c.path()));
        assert!(
            fa.contains_key(Path::new("manifest.json"))
                && fa.contains_key(Path::new("v011/harness.toml"))
        );
        assert_eq!(fa, fb, "{pool}");
        assert_ne!(fa, fc, "{pool}");
        if pool == Pool::Heldout {
            assert_eq!(sa.heldout_variants, 12);
        }
        let manifest: Vec<hat_augment::VariantEntry> =
            serde_json::from_slice(&fa[Path::new("manifest.json")]).unwrap();
        assert_eq!(manifest.len(), 12);
        for e in manifest {
            assert_eq!(Harness::load(&a.path().join(&e.dir)).unwrap().hash, e.hash);
        }
    }
}

#[test]
fn a_broken_base_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("harness.toml"), "[harness]\nname = \n").unwrap();
    let e = write_variants(tmp.path(), 1, 0, Pool::Train, &tmp.path().join("out")).unwrap_err();
    assert!(matches!(e, hat_augment::AugmentError::Base { .. }), "{e}");
}
