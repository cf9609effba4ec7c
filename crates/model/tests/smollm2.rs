//! Smoke test with the real SmolLM2-135M-Instruct file. Runs when the file is present
//! (`hat model fetch`, or `HAT_SMOLLM2=path`), and is skipped with a printed reason otherwise.
//! Token ids and the first 30 greedy tokens of three chats are compared with llama.cpp's
//! (recorded by `scripts/make_llamacpp_reference.py` into `tests/fixtures/smollm2_llamacpp.json`).

use std::path::PathBuf;

use hat_model::chat_template::ChatInput;
use hat_model::{Engine, GenerateRequest, LoadOptions};

fn model_file() -> Option<PathBuf> {
    let p = std::env::var_os("HAT_SMOLLM2")
        .map(PathBuf::from)
        .unwrap_or_else(hat_model::fetch::default_model_path);
    if p.exists() {
        Some(p)
    } else {
        eprintln!(
            "skipping SmolLM2 smoke test: {} not found (run `hat model fetch` or set HAT_SMOLLM2)",
            p.display()
        );
        None
    }
}

fn reference() -> Option<serde_json::Value> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/smollm2_llamacpp.json");
    match std::fs::read_to_string(&p) {
        Ok(s) => Some(serde_json::from_str(&s).unwrap()),
        Err(_) => {
            eprintln!("skipping SmolLM2 smoke test: {} missing", p.display());
            None
        }
    }
}

/// Greedy tokens of the shipped Q4_1 file that must equal llama.cpp's. Both engines quantise
/// activations to int8 per 32-value block, so a 1e-7 difference in summation order can flip
/// one rounding and move logits by ~1 (measured: our own prefill and token-by-token decode
/// of the same text differ by up to 0.8 in Q4_1 and 0.7 in Q8_0, but by 5e-5 in f32); greedy
/// decoding then parts ways at the first near-tie. Exact agreement is therefore checked on
/// the same weights dequantised to f32 (`greedy_f32`), where it must hold for all 30 tokens.
const MIN_SAME_Q4_1: usize = 1;

fn load(path: &std::path::Path, format: &str) -> Engine {
    let opts = LoadOptions {
        format: format.parse().unwrap(),
        ..LoadOptions::default()
    };
    Engine::load(path, opts).unwrap()
}

/// Number of our greedy tokens whose text is a prefix of llama.cpp's output (all `n` when the
/// whole text is equal).
fn same_tokens(engine: &Engine, case: &serde_json::Value) -> (usize, usize) {
    let messages = case["messages"].as_array().unwrap().clone();
    let prompt = engine
        .render_chat(&ChatInput {
            messages,
            tools: None,
            add_generation_prompt: true,
        })
        .unwrap();
    let ids = engine.encode(&prompt).unwrap();
    let want_ids: Vec<u32> = serde_json::from_value(case["prompt_ids"].clone()).unwrap();
    assert_eq!(ids, want_ids, "prompt ids");
    let n = case["n"].as_u64().unwrap() as usize;
    let out = engine
        .generate(&GenerateRequest::new(ids, n), None)
        .unwrap();
    assert!(out.logprobs.iter().all(|l| l.is_finite() && *l <= 0.0));
    let want = case["text"].as_str().unwrap();
    let mut same = 0;
    while same < out.tokens.len()
        && want.starts_with(&engine.tokenizer.decode(&out.tokens[..=same], true))
    {
        same += 1;
    }
    if out.text == want {
        same = n; // identical up to the stop token (or all n tokens)
    }
    eprintln!(
        "{same}/{n} greedy tokens equal llama.cpp's for {}\n  hat:       {:?}\n  llama.cpp: {want:?}",
        case["messages"], out.text
    );
    (same, n)
}

#[test]
fn smollm2_matches_llama_cpp() {
    let Some(path) = model_file() else { return };
    let Some(r) = reference() else { return };
    let engine = load(&path, "original");
    let c = engine.model.config();
    assert_eq!(
        (c.num_layers, c.hidden_size, c.num_heads, c.num_kv_heads),
        (30, 576, 9, 3)
    );
    assert_eq!(engine.tokenizer.special_count(), 17);
    for case in r["tokenize"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let want: Vec<u32> = serde_json::from_value(case["ids"].clone()).unwrap();
        assert_eq!(
            engine.tokenizer.encode(text, true).unwrap(),
            want,
            "tokenize {text:?}"
        );
    }
    for case in r["greedy"].as_array().unwrap() {
        let (same, _) = same_tokens(&engine, case);
        assert!(
            same >= MIN_SAME_Q4_1,
            "Q4_1: only {same} tokens equal llama.cpp's"
        );
    }
    let f32_engine = load(&path, "f32");
    for case in r["greedy_f32"].as_array().unwrap() {
        let (same, n) = same_tokens(&f32_engine, case);
        assert_eq!(same, n, "f32: only {same} of {n} tokens equal llama.cpp's");
    }
}

/// A prompt gives the same answer, bit for bit, whatever prefix of it the prefix cache holds:
/// the part after a hit (one token, a few, a chunk) is computed as the whole prompt computes
/// it. A tail of up to 16 tokens took decoding's attention kernels before, which sum in
/// another order; after int8 activation rounding that moved logits by up to ~0.8 here, and
/// an evaluation's answers then depended on what earlier items had left in the cache.
#[test]
fn an_answer_does_not_depend_on_the_cached_prefix() {
    let Some(path) = model_file() else { return };
    let fresh = || load(&path, "original");
    let engine = fresh();
    let system = "You are Mia, the AI host of a live-shopping stream. Style: warm, upbeat, \
                  concise. Only state prices, stock and coupons that a tool returned. "
        .repeat(12);
    let prompt = engine
        .render_chat(&ChatInput {
            messages: vec![
                serde_json::json!({"role": "system", "content": system}),
                serde_json::json!({"role": "user", "content": "[comment] lily: is the hoodie in M? how much?"}),
            ],
            tools: None,
            add_generation_prompt: true,
        })
        .unwrap();
    let ids = engine.encode(&prompt).unwrap();
    let n = ids.len();
    assert!(n > 400, "{n} tokens");
    let whole = engine
        .generate(&GenerateRequest::new(ids.clone(), 12), None)
        .unwrap();
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for cut in [n - 1, n - 2, n - 10, n - 16, n - 17, n - 100, 300] {
        let eng = fresh();
        eng.generate(
            &GenerateRequest {
                cache_prefix_len: Some(cut),
                ..GenerateRequest::new(ids[..cut + 1].to_vec(), 1)
            },
            None,
        )
        .unwrap();
        let hit = eng
            .generate(&GenerateRequest::new(ids.clone(), 12), None)
            .unwrap();
        assert_eq!(hit.cached_tokens, cut);
        assert_eq!(hit.tokens, whole.tokens, "{cut} of {n} tokens cached");
        assert_eq!(
            bits(&hit.logprobs),
            bits(&whole.logprobs),
            "{cut} of {n} tokens cached"
        );
    }
}

/// An answer is the same bits decoded alone, in a batch (its prompt's start shared or
/// copied), continuously beside others, and with or without drafts: on the real model the
/// decode kernels' split of a key range followed the batch's shape before, and log-probs
/// moved by up to ~0.07.
#[test]
fn an_answer_does_not_depend_on_its_batch() {
    let Some(path) = model_file() else { return };
    let engine = load(&path, "original");
    let system = "You are Mia, the AI host of a live-shopping stream. Style: warm, upbeat, \
                  concise. Only state prices, stock and coupons that a tool returned. "
        .repeat(10);
    let reqs: Vec<GenerateRequest> = [
        "is the hoodie in M? how much?",
        "any coupons today?",
        "hi Mia!",
        "are you a real person?",
    ]
    .iter()
    .map(|q| {
        let prompt = engine
            .render_chat(&ChatInput {
                messages: vec![
                    serde_json::json!({"role": "system", "content": system}),
                    serde_json::json!({"role": "user", "content": format!("[comment] lily: {q}")}),
                ],
                tools: None,
                add_generation_prompt: true,
            })
            .unwrap();
        GenerateRequest {
            cache_prefix_len: Some(300),
            ..GenerateRequest::new(engine.encode(&prompt).unwrap(), 16)
        }
    })
    .collect();
    let bits = |o: &hat_model::GenerateOutput| {
        (
            o.tokens.clone(),
            o.logprobs.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        )
    };
    engine.set_speculative(false);
    let alone: Vec<_> = reqs
        .iter()
        .map(|r| bits(&engine.generate(r, None).unwrap()))
        .collect();
    engine.set_speculative(true);
    let batch = engine.generate_batch(&reqs).unwrap();
    assert!(
        batch[0].shared_prefix_tokens >= 256,
        "the batch shared no prefix"
    );
    for (how, outs) in [
        (
            "with drafts",
            reqs.iter()
                .map(|r| engine.generate(r, None).unwrap())
                .collect(),
        ),
        ("in a batch", batch),
        (
            "continuously, 3 at a time",
            engine.generate_continuous(reqs.clone(), 3).unwrap(),
        ),
    ] {
        let outs: Vec<hat_model::GenerateOutput> = outs;
        for (i, (a, o)) in alone.iter().zip(&outs).enumerate() {
            assert_eq!(*a, bits(o), "request {i} {how}");
        }
    }
}
