//! Generation behaviour on the tiny llama fixture: batching, prefix cache, log-probs,
//! stop tokens and strings, streaming, and errors.

mod common;

use candle_core::{Device, Tensor};
use common::*;
use hat_model::{Error, FinishReason, GenerateRequest, LoadOptions, SamplingParams};

fn eng() -> hat_model::Engine {
    engine(load_gguf("llama", LoadOptions::default()))
}

#[test]
fn batched_generation_equals_one_by_one() {
    batched_equals_one_by_one(eng(), true);
}

/// Re-quantised weights run the VNNI kernels and an f16 KV cache (direct decode, widened
/// prefill, left-padded batch rows).
#[test]
fn batched_generation_equals_one_by_one_on_quantised_weights() {
    let opts = LoadOptions {
        format: "q8_0".parse().unwrap(),
        ..LoadOptions::default()
    };
    let eng = engine(load_gguf("llama", opts));
    assert_eq!(eng.model.kv_dtype(), candle_core::DType::F16);
    batched_equals_one_by_one(eng, false);
}

fn batched_equals_one_by_one(eng: hat_model::Engine, check_greedy: bool) {
    let e = expected("llama");
    // Rows finish at different steps (2, 6, 7, 10 tokens), so finished rows are muted
    // while the others decode; the longest prompt (no padding) finishes first.
    let reqs: Vec<GenerateRequest> = [(11usize, 2usize), (5, 10), (8, 6)]
        .iter()
        .map(|&(n, max)| GenerateRequest::new(e.ids[..n].to_vec(), max))
        .chain(std::iter::once(GenerateRequest {
            sampling: SamplingParams {
                temperature: 0.8,
                top_p: 0.9,
                seed: 3,
                ..Default::default()
            },
            ..GenerateRequest::new(e.ids[2..9].to_vec(), 7)
        }))
        .collect();
    let batch = eng.generate_batch(&reqs).unwrap();
    eng.set_mute_finished_rows(false);
    let kept = eng.generate_batch(&reqs).unwrap();
    eng.set_mute_finished_rows(true);
    for (r, b) in reqs.iter().zip(&batch) {
        let single = eng.generate(r, None).unwrap();
        assert_eq!(b.tokens.len(), r.max_new_tokens);
        assert_eq!(single.tokens, b.tokens);
        for (x, y) in single.logprobs.iter().zip(&b.logprobs) {
            assert!((x - y).abs() < 1e-3);
        }
    }
    for (b, k) in batch.iter().zip(&kept) {
        assert_eq!(b.tokens, k.tokens, "muting finished rows changed an answer");
    }
    if check_greedy {
        assert_eq!(batch[0].tokens, e.greedy[..2].to_vec());
    }
}

fn q8_engine() -> hat_model::Engine {
    llama_engine("q8_0")
}

/// A batch whose rows begin with the same keys and values keeps them once; decoding over
/// it gives every row the logits it gets from its own full copy.
#[test]
fn a_shared_prefix_decodes_like_copies_in_every_row() {
    let e = expected("llama");
    let eng = q8_engine();
    let m = &eng.model;
    let prefill = |cache: &mut hat_model::Cache, ids: &[u32]| {
        let t = Tensor::new(ids, &Device::Cpu)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        m.forward(&t, cache, true).unwrap();
    };
    // three rows extend one cache of 70 tokens (bit-equal prefix), by 4, 1 and 3 tokens
    let start = [long_start(&e.ids, 64), e.ids[..6].to_vec()].concat();
    let mut base = m.new_cache(1);
    prefill(&mut base, &start);
    let rows: Vec<_> = [&e.ids[6..10], &e.ids[6..7], &e.ids[8..11]]
        .iter()
        .map(|tail| {
            let mut c = base.clone();
            prefill(&mut c, tail);
            c
        })
        .collect();
    // shared in whole blocks of 64 keys; the other 6 common positions stay in each row
    let mut shared = hat_model::Cache::stack_shared(&rows, 1).unwrap();
    assert_eq!(shared.shared_len(), 64);
    assert_eq!(shared.len(), 10);
    let mut copies = hat_model::Cache::stack(&rows).unwrap();
    assert_eq!(copies.shared_len(), 0);
    for step in 0..3u32 {
        let ids = Tensor::new(&[[5 + step], [9], [17 + step]], &Device::Cpu).unwrap();
        let a = m.forward(&ids, &mut shared, true).unwrap();
        let b = m.forward(&ids, &mut copies, true).unwrap();
        // the same bits: each row's keys are cut into the same blocks either way
        let d = max_abs_diff(&a, &b);
        assert!(d == 0.0, "step {step}: logits differ by {d}");
    }
    // not below the minimum (65 common positions hold one whole block), and not where the
    // first position already differs
    assert_eq!(
        hat_model::Cache::stack_shared(&rows, 65)
            .unwrap()
            .shared_len(),
        0
    );
    let mut other = m.new_cache(1);
    prefill(&mut other, &e.ids[1..8]);
    let mixed = [rows[0].clone(), other];
    assert_eq!(
        hat_model::Cache::stack_shared(&mixed, 1)
            .unwrap()
            .shared_len(),
        0
    );
    // f32 caches (the parity format) are stacked as before
    let f32m = load_gguf("llama", LoadOptions::default());
    let mut c = f32m.new_cache(1);
    let t = Tensor::new(&e.ids[..6], &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    f32m.forward(&t, &mut c, true).unwrap();
    let two = [c.clone(), c];
    assert_eq!(
        hat_model::Cache::stack_shared(&two, 1)
            .unwrap()
            .shared_len(),
        0
    );
}

/// Requests that share a prompt prefix through the prefix cache decode in one batch over
/// one copy of it, with the answers they get one by one.
#[test]
fn batched_generation_over_a_shared_prefix_equals_one_by_one() {
    let e = expected("llama");
    let eng = q8_engine();
    eng.set_shared_prefix_min(Some(1));
    let start = long_start(&e.ids, 64);
    let reqs: Vec<GenerateRequest> = [(11usize, 6usize), (7, 9), (9, 3)]
        .iter()
        .map(|&(n, max)| GenerateRequest {
            cache_prefix_len: Some(69),
            ..GenerateRequest::new([start.as_slice(), &e.ids[..n]].concat(), max)
        })
        .collect();
    let batch = eng.generate_batch(&reqs).unwrap();
    // a whole block of the prefix cache's 69 positions
    assert!(
        batch.iter().all(|b| b.shared_prefix_tokens == 64),
        "no shared prefix"
    );
    eng.set_shared_prefix_min(None);
    let copies = eng.generate_batch(&reqs).unwrap();
    assert!(copies.iter().all(|b| b.shared_prefix_tokens == 0));
    for ((r, b), c) in reqs.iter().zip(&batch).zip(&copies) {
        let single = eng.generate(r, None).unwrap();
        assert_eq!(b.tokens.len(), r.max_new_tokens);
        assert_eq!(single.tokens, b.tokens);
        assert_eq!(c.tokens, b.tokens);
        // the same bits one by one, in a batch, with the prefix shared or copied
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&single.logprobs), bits(&b.logprobs));
        assert_eq!(bits(&c.logprobs), bits(&b.logprobs));
    }
}

#[test]
fn prefix_cache_hits_and_never_goes_stale() {
    let e = expected("llama");
    let eng = eng();
    let plain = eng
        .generate(&GenerateRequest::new(e.ids.clone(), 8), None)
        .unwrap();
    let req = GenerateRequest {
        cache_prefix_len: Some(6),
        ..GenerateRequest::new(e.ids.clone(), 8)
    };
    let first = eng.generate(&req, None).unwrap();
    let second = eng.generate(&req, None).unwrap();
    assert_eq!(first.cached_tokens, 0);
    assert_eq!(second.cached_tokens, 6);
    assert_eq!(first.tokens, plain.tokens);
    assert_eq!(second.tokens, plain.tokens);
    // a different prefix must not reuse the entry
    let mut other = e.ids.clone();
    other[2] = (other[2] + 1) % 96;
    let changed = eng
        .generate(
            &GenerateRequest {
                cache_prefix_len: Some(6),
                ..GenerateRequest::new(other.clone(), 8)
            },
            None,
        )
        .unwrap();
    assert_eq!(changed.cached_tokens, 0);
    let fresh = engine(load_gguf("llama", LoadOptions::default()));
    assert_eq!(
        changed.tokens,
        fresh
            .generate(&GenerateRequest::new(other, 8), None)
            .unwrap()
            .tokens
    );
    // whole prompt cached
    let exact = GenerateRequest {
        cache_prefix_len: Some(11),
        ..GenerateRequest::new(e.ids.clone(), 8)
    };
    eng.generate(&exact, None).unwrap();
    let again = eng.generate(&exact, None).unwrap();
    assert_eq!(again.cached_tokens, 11);
    assert_eq!(again.tokens, plain.tokens);
    // many requests do not grow the cache beyond its entries
    let (n, bytes, hits, _) = eng.prefix_cache_stats();
    for _ in 0..20 {
        eng.generate(&req, None).unwrap();
    }
    let (n2, bytes2, hits2, _) = eng.prefix_cache_stats();
    assert_eq!((n, bytes), (n2, bytes2));
    assert!(hits2 >= hits + 20);
}

#[test]
fn logprobs_are_model_log_softmax() {
    let e = expected("llama");
    let out = eng()
        .generate(&GenerateRequest::new(e.ids.clone(), 1), None)
        .unwrap();
    let last = e.logits.get(e.ids.len() - 1).unwrap();
    let lsm = candle_nn::ops::log_softmax(&last, 0)
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    assert!((out.logprobs[0] - lsm[out.tokens[0] as usize]).abs() < 1e-4);
    assert!(out.logprobs[0] <= 0.0);
}

#[test]
fn stop_tokens_strings_max_tokens_and_streaming() {
    let e = expected("llama");
    let eng = eng();
    let stop_tok = e.greedy[3];
    let first = e.greedy.iter().position(|&t| t == stop_tok).unwrap();
    let r = eng
        .generate(
            &GenerateRequest {
                stop_tokens: vec![stop_tok],
                ..GenerateRequest::new(e.ids.clone(), 12)
            },
            None,
        )
        .unwrap();
    assert_eq!(r.finish, FinishReason::StopToken(stop_tok));
    assert_eq!(r.tokens.len(), first + 1);
    // dummy tokenizer: token i decodes to "t{i} "
    let stop = format!("t{} ", e.greedy[2]);
    let mut streamed = String::new();
    let mut count = 0;
    let mut cb = |ev: &hat_model::TokenEvent| {
        streamed.push_str(ev.text_delta);
        count += 1;
        true
    };
    let r = eng
        .generate(
            &GenerateRequest {
                stop_strings: vec![stop.clone()],
                ..GenerateRequest::new(e.ids.clone(), 12)
            },
            Some(&mut cb),
        )
        .unwrap();
    assert_eq!(r.finish, FinishReason::StopString(stop.clone()));
    assert!(!r.text.contains(&stop));
    assert_eq!(streamed, r.text);
    assert_eq!(count, r.tokens.len());
    let r = eng
        .generate(&GenerateRequest::new(e.ids.clone(), 5), None)
        .unwrap();
    assert_eq!((r.finish, r.tokens.len()), (FinishReason::Length, 5));
    let mut stop_early = |ev: &hat_model::TokenEvent| ev.index < 2;
    let r = eng
        .generate(
            &GenerateRequest::new(e.ids.clone(), 10),
            Some(&mut stop_early),
        )
        .unwrap();
    assert_eq!((r.finish, r.tokens.len()), (FinishReason::Cancelled, 3));
}

#[test]
fn clear_errors() {
    let e = expected("llama");
    let eng = eng();
    let too_long = eng
        .generate(&GenerateRequest::new(e.ids.clone(), 500), None)
        .unwrap_err();
    assert!(
        matches!(too_long, Error::ContextOverflow { context: 128, .. }),
        "{too_long}"
    );
    let bad = GenerateRequest {
        sampling: SamplingParams {
            temperature: -0.5,
            ..Default::default()
        },
        ..GenerateRequest::new(e.ids.clone(), 5)
    };
    assert!(matches!(
        eng.generate(&bad, None),
        Err(Error::InvalidSampling(_))
    ));
    assert!(matches!(
        eng.generate(&GenerateRequest::new(vec![], 5), None),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        eng.generate(&GenerateRequest::new(vec![1000], 5), None),
        Err(Error::InvalidArgument(_))
    ));
    let missing = hat_model::load(
        std::path::Path::new("/nonexistent/model.gguf"),
        LoadOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(missing, Error::ModelNotFound(_)));
    // forward past the context
    let m = load_gguf("llama", LoadOptions::default());
    let ids = Tensor::zeros((1, 129), candle_core::DType::U32, &Device::Cpu).unwrap();
    assert!(matches!(
        m.forward(&ids, &mut m.new_cache(1), true),
        Err(Error::ContextOverflow { .. })
    ));
}

#[test]
fn unsupported_architecture_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.json"), r#"{"model_type": "mamba"}"#).unwrap();
    let err = hat_model::load(dir.path(), LoadOptions::default()).unwrap_err();
    assert!(
        matches!(err, Error::UnsupportedArchitecture(ref a) if a == "mamba"),
        "{err}"
    );
}

fn rss_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

#[test]
fn no_leak_across_many_requests() {
    let e = expected("llama");
    let eng = eng();
    let req = GenerateRequest {
        cache_prefix_len: Some(5),
        ..GenerateRequest::new(e.ids.clone(), 12)
    };
    for _ in 0..20 {
        eng.generate(&req, None).unwrap();
    }
    let Some(before) = rss_kib() else {
        eprintln!("skipping RSS check: /proc/self/status unavailable");
        return;
    };
    for _ in 0..200 {
        eng.generate(&req, None).unwrap();
        eng.generate_batch(&[req.clone(), req.clone()]).unwrap();
    }
    let after = rss_kib().unwrap();
    // 600 requests on a 0.3 MB model: anything kept per request would show up here
    assert!(
        after < before + 16 * 1024,
        "RSS grew from {before} KiB to {after} KiB"
    );
    assert_eq!(eng.prefix_cache_stats().0, 1);
}

#[test]
fn a_cached_whole_prompt_starts_the_next_turn() {
    let e = expected("llama");
    let eng = eng();
    let first = GenerateRequest {
        cache_whole_prompt: true,
        ..GenerateRequest::new(e.ids[..8].to_vec(), 4)
    };
    assert_eq!(eng.generate(&first, None).unwrap().cached_tokens, 0);
    // the next turn: the same prompt, continued
    let next = GenerateRequest {
        cache_whole_prompt: true,
        ..GenerateRequest::new(e.ids.clone(), 8)
    };
    let out = eng.generate(&next, None).unwrap();
    assert_eq!(out.cached_tokens, 8);
    let fresh = engine(load_gguf("llama", LoadOptions::default()));
    assert_eq!(
        out.tokens,
        fresh
            .generate(&GenerateRequest::new(e.ids.clone(), 8), None)
            .unwrap()
            .tokens
    );
}

/// A reply-only agent turn: suppressed tokens never open the answer, alone or in a batch,
/// and the rows around it decode as before.
#[test]
fn suppressed_tokens_never_open_an_answer() {
    let eng = eng();
    let e = expected("llama");
    let free = GenerateRequest::new(e.ids[..6].to_vec(), 4);
    let plain = eng.generate(&free, None).unwrap();
    let first = plain.tokens[0];
    let held = GenerateRequest {
        suppress_at_start: vec![first],
        ..free.clone()
    };
    let out = eng.generate(&held, None).unwrap();
    assert_ne!(out.tokens[0], first);
    // the reported log-probability is the unconstrained model's
    assert!(out.logprobs[0] < plain.logprobs[0]);
    let other = GenerateRequest::new(e.ids[1..9].to_vec(), 4);
    let batch = eng.generate_batch(&[held, other.clone()]).unwrap();
    assert_eq!(batch[0].tokens, out.tokens);
    assert_eq!(batch[1].tokens, eng.generate(&other, None).unwrap().tokens);
}

#[test]
fn tokens_opening_a_call_are_the_starts_of_its_opener() {
    let eng = eng();
    let tok = &eng.tokenizer;
    // a token of two or more visible characters, and an opener that continues it
    let (id, text) = (0..tok.vocab_size() as u32)
        .filter_map(|i| Some((i, String::from_utf8(tok.token_bytes(i)).ok()?)))
        .find(|(i, t)| t.trim().len() >= 2 && !tok.eog_tokens().contains(i))
        .expect("a multi-character token");
    let opener = format!("{}\u{1}zz", text.trim_start());
    let banned = eng.tokens_opening(&opener);
    assert!(banned.contains(&id));
    for eog in tok.eog_tokens() {
        assert!(
            banned.contains(eog),
            "end-of-generation token {eog} allowed"
        );
    }
    for &b in &banned {
        if tok.eog_tokens().contains(&b) {
            continue;
        }
        let t = String::from_utf8(tok.token_bytes(b)).unwrap();
        let t = t.trim_start();
        assert!(
            !t.is_empty() && (opener.starts_with(t) || t.starts_with(&opener)),
            "token {b} ({t:?}) does not open {opener:?}"
        );
    }
}

/// Prompt-lookup speculation changes the time, not the answer: greedy and sampled requests
/// (with a repetition penalty, stop strings and streaming) give the same tokens, text and
/// log-probabilities with it on and off, on f32 and re-quantised weights; the greedy answer
/// runs into a loop, so drafts are proposed, taken and missed.
#[test]
fn speculative_decoding_gives_the_answers_of_plain_decoding() {
    let e = expected("llama");
    // a prompt that repeats itself, so the lookup finds drafts
    let prompt = repeating_prompt(&e.ids);
    let reqs = [
        GenerateRequest::new(prompt.clone(), 80),
        GenerateRequest {
            sampling: sampled_with_penalty(),
            ..GenerateRequest::new(prompt.clone(), 24)
        },
        GenerateRequest::new(e.ids[..5].to_vec(), 1),
    ];
    for format in ["original", "q8_0"] {
        let eng = llama_engine(format);
        let (mut drafted, mut accepted) = (0, 0);
        // one request with speculation `on` or off: the answer and the text it streamed
        let streamed = |r: &GenerateRequest, on: bool| {
            eng.set_speculative(on);
            let mut text = String::new();
            let out = eng
                .generate(
                    r,
                    Some(&mut |ev: &hat_model::TokenEvent| {
                        text.push_str(ev.text_delta);
                        true
                    }),
                )
                .unwrap();
            (out, text)
        };
        for r in &reqs {
            let (plain, plain_text) = streamed(r, false);
            let (fast, fast_text) = streamed(r, true);
            assert_eq!(plain.tokens, fast.tokens, "{format}");
            assert_eq!(plain.text, fast.text, "{format}");
            assert_eq!(plain_text, fast_text, "{format}");
            assert_eq!(plain.finish, fast.finish, "{format}");
            for (a, b) in plain.logprobs.iter().zip(&fast.logprobs) {
                assert!((a - b).abs() < 2e-3, "{format}: {a} vs {b}");
            }
            assert_eq!(plain.drafted_tokens, 0);
            assert!(fast.accepted_tokens <= fast.drafted_tokens);
            drafted += fast.drafted_tokens;
            accepted += fast.accepted_tokens;
        }
        // taken drafts exercise the multi-token pass and the cache rollback after a miss
        assert!(
            accepted > 0 && drafted > accepted,
            "{format}: {accepted} of {drafted}"
        );
        // in a batch, the last row left decoding speculates beside its muted neighbours
        let batch = [
            reqs[0].clone(),
            GenerateRequest::new(e.ids[1..7].to_vec(), 2),
            reqs[1].clone(),
        ];
        eng.set_speculative(false);
        let plain = eng.generate_batch(&batch).unwrap();
        let alone: Vec<_> = batch
            .iter()
            .map(|r| eng.generate(r, None).unwrap())
            .collect();
        eng.set_speculative(true);
        let fast = eng.generate_batch(&batch).unwrap();
        for ((p, f), a) in plain.iter().zip(&fast).zip(&alone) {
            assert_eq!(p.tokens, f.tokens, "{format}");
            assert_eq!(p.text, f.text, "{format}");
            assert_eq!(a.tokens, f.tokens, "{format}");
            for (x, y) in p.logprobs.iter().zip(&f.logprobs) {
                assert!((x - y).abs() < 2e-3, "{format}: {x} vs {y}");
            }
        }
        assert!(
            fast.iter().map(|o| o.accepted_tokens).sum::<usize>() > 0,
            "{format}: the last row took no draft"
        );
    }
}

/// Tool names constrained at decode time: after the opener the answer holds a known name,
/// alone and in a batch, and an answer that never opens a slot is the free one. (The
/// fixture's tokens are `t0 `, `t1 `, ...: the opener is the first answer token's text, the
/// names are two tokens' texts.)
#[test]
fn a_name_slot_holds_only_known_names() {
    let eng = eng();
    let e = expected("llama");
    let free = GenerateRequest::new(e.ids[..6].to_vec(), 12);
    let plain = eng.generate(&free, None).unwrap();
    let text_of = |t: &[u32]| String::from_utf8(eng.tokenizer.decode_bytes(t, true)).unwrap();
    let opener = text_of(&plain.tokens[..1]);
    let names: Vec<String> = [7u32, 8, 9]
        .into_iter()
        .filter(|&t| t != plain.tokens[1])
        .take(2)
        .map(|t| text_of(&[t]).trim().to_string())
        .collect();
    let slots = hat_model::NameSlots::new(&[opener.as_str()], &names).unwrap();
    let named = GenerateRequest {
        check: Some(std::sync::Arc::new(slots.clone())),
        ..free.clone()
    };
    let out = eng.generate(&named, None).unwrap();
    let text = eng.tokenizer.decode_bytes(&out.tokens, true);
    assert!((0..text.len()).all(|i| slots.admits(&text[..i], &text[i..i + 1])));
    // the same first token, then a name instead of the free answer's second token
    assert_eq!(out.tokens[0], plain.tokens[0]);
    assert!(
        names.contains(&text_of(&out.tokens[1..2]).trim().to_string()),
        "{names:?} {:?} {:?}",
        text_of(&plain.tokens),
        String::from_utf8_lossy(&text)
    );
    // log-probabilities of the unconstrained model
    assert_eq!(out.logprobs[0], plain.logprobs[0]);
    assert!(out.logprobs[1] < plain.logprobs[1]);
    let other = GenerateRequest::new(e.ids[1..9].to_vec(), 6);
    let batch = eng.generate_batch(&[named, other.clone()]).unwrap();
    assert_eq!(batch[0].tokens, out.tokens);
    assert_eq!(batch[1].tokens, eng.generate(&other, None).unwrap().tokens);
    // a slot the answer never opens changes nothing
    let unseen = hat_model::NameSlots::new(&["\u{1}never"], &["qq"]).unwrap();
    let far = GenerateRequest {
        check: Some(std::sync::Arc::new(unseen)),
        ..free.clone()
    };
    assert_eq!(eng.generate(&far, None).unwrap().tokens, plain.tokens);
}

/// A check that finds an answer complete once it holds `bytes` bytes and admits every token.
#[derive(Debug)]
struct CompleteAt {
    bytes: usize,
}

impl hat_model::TextCheck for CompleteAt {
    fn admits(&self, _before: &[u8], _token: &[u8]) -> bool {
        true
    }

    fn complete(&self, answer: &[u8]) -> bool {
        answer.len() >= self.bytes
    }
}

/// A check that finds the answer complete ends it at the token that completed it, with the
/// free answer's tokens up to there: alone, streamed, in a batch and in a continuous batch.
#[test]
fn an_answer_the_check_finds_complete_ends_there() {
    let eng = eng();
    let e = expected("llama");
    let free = GenerateRequest::new(e.ids[..6].to_vec(), 12);
    let plain = eng.generate(&free, None).unwrap();
    assert_eq!(plain.finish, FinishReason::Length);
    // the fixture's tokens decode to `t{i} `: complete within the fourth token
    let upto: usize = (0..4)
        .map(|k| {
            eng.tokenizer
                .decode_bytes(&plain.tokens[k..k + 1], true)
                .len()
        })
        .sum();
    let req = GenerateRequest {
        check: Some(std::sync::Arc::new(CompleteAt { bytes: upto - 1 })),
        ..free.clone()
    };
    let mut streamed = String::new();
    let mut cb = |ev: &hat_model::TokenEvent| {
        streamed.push_str(ev.text_delta);
        true
    };
    let out = eng.generate(&req, Some(&mut cb)).unwrap();
    assert_eq!(out.finish, FinishReason::Complete);
    assert_eq!(out.tokens, plain.tokens[..4]);
    assert_eq!(streamed, out.text);
    let other = GenerateRequest::new(e.ids[1..9].to_vec(), 6);
    let batch = eng.generate_batch(&[req.clone(), other.clone()]).unwrap();
    assert_eq!(
        (&batch[0].tokens, &batch[0].finish),
        (&out.tokens, &out.finish)
    );
    assert_eq!(batch[1].tokens, eng.generate(&other, None).unwrap().tokens);
    let mut cont = hat_model::ContinuousBatch::new();
    cont.add(&eng, other).unwrap();
    let id = cont.add(&eng, req).unwrap();
    let mut ended = None;
    for _ in 0..50 {
        if let Some((_, o)) = cont.step(&eng).unwrap().into_iter().find(|(r, _)| *r == id) {
            ended = Some(o);
            break;
        }
    }
    let ended = ended.expect("the completed row left the continuous batch");
    assert_eq!((ended.tokens, ended.finish), (out.tokens, out.finish));
    // a check that never finds it complete changes nothing
    let never = GenerateRequest {
        check: Some(std::sync::Arc::new(CompleteAt { bytes: usize::MAX })),
        ..free
    };
    assert_eq!(eng.generate(&never, None).unwrap().tokens, plain.tokens);
}

/// A check that refuses every token but the ones in `allow`.
#[derive(Debug)]
struct RefuseBut {
    allow: Vec<u8>,
}

impl hat_model::TextCheck for RefuseBut {
    fn admits(&self, _before: &[u8], token: &[u8]) -> bool {
        token.iter().all(|b| self.allow.contains(b))
    }
}

/// A check that refuses every token cannot stop the answer: the sampler falls back to the
/// model's own choice, and each such token is counted, alone and in a batch, so a serving run
/// can tell a check that failed open; a check that held counts none.
#[test]
fn tokens_sampled_past_a_check_that_refuses_everything_are_counted() {
    let eng = eng();
    let e = expected("llama");
    let free = GenerateRequest::new(e.ids[..6].to_vec(), 8);
    let plain = eng.generate(&free, None).unwrap();
    assert_eq!(plain.unchecked_tokens, 0);
    let refuse = GenerateRequest {
        check: Some(std::sync::Arc::new(RefuseBut { allow: vec![] })),
        ..free.clone()
    };
    let out = eng.generate(&refuse, None).unwrap();
    assert_eq!(out.tokens, plain.tokens);
    assert_eq!(out.unchecked_tokens, out.tokens.len());
    let batch = eng.generate_batch(&[refuse, free.clone()]).unwrap();
    assert_eq!(batch[0].unchecked_tokens, batch[0].tokens.len());
    assert_eq!(batch[1].unchecked_tokens, 0);
    // a check that admits what the model writes counts nothing
    let bytes: Vec<u8> = (0..=255).collect();
    let held = GenerateRequest {
        check: Some(std::sync::Arc::new(RefuseBut { allow: bytes })),
        ..free
    };
    let out = eng.generate(&held, None).unwrap();
    assert_eq!((out.tokens, out.unchecked_tokens), (plain.tokens, 0));
}

/// An answer that falls into a loop ends there with `stop_loops`, keeping the loop's first
/// copy: the same tokens, log-probabilities and text as the plain answer's start, alone
/// (with and without speculation), in a batch and in a continuous batch.
#[test]
fn a_looping_answer_ends_after_its_first_copy() {
    let e = expected("llama");
    let eng = eng();
    let mut looped = 0;
    // prompts of one token, repeated, make the fixture loop within its context
    let prompts =
        (0..e.ids.len()).flat_map(|t| [vec![e.ids[t]], vec![e.ids[t]; 4], e.ids[t..].to_vec()]);
    for (start, prompt) in prompts.enumerate() {
        let plain_req = GenerateRequest::new(prompt.clone(), 128 - prompt.len());
        let plain = eng.generate(&plain_req, None).unwrap();
        // the first point at which the plain answer's tail is a loop
        let Some((n, keep)) = (1..=plain.tokens.len())
            .find_map(|n| hat_model::repetition::loop_start(&plain.tokens[..n]).map(|k| (n, k)))
        else {
            continue;
        };
        looped += 1;
        let req = GenerateRequest {
            stop_loops: true,
            ..plain_req.clone()
        };
        for speculate in [true, false] {
            eng.set_speculative(speculate);
            let r = eng.generate(&req, None).unwrap();
            assert_eq!(r.finish, FinishReason::Loop, "prompt from {start}");
            assert_eq!(
                r.tokens,
                plain.tokens[..keep],
                "prompt from {start}, seen at {n}"
            );
            assert_eq!(r.logprobs, plain.logprobs[..keep]);
            assert_eq!(r.text, eng.tokenizer.decode(&plain.tokens[..keep], true));
            assert!(plain.text.starts_with(&r.text));
        }
        eng.set_speculative(true);
        let batch = eng
            .generate_batch(&[req.clone(), GenerateRequest::new(e.ids.clone(), 4)])
            .unwrap();
        assert_eq!(batch[0].finish, FinishReason::Loop);
        assert_eq!(batch[0].tokens, plain.tokens[..keep]);
        let continuous = eng
            .generate_continuous(vec![GenerateRequest::new(e.ids.clone(), 4), req.clone()], 2)
            .unwrap();
        assert_eq!(continuous[1].finish, FinishReason::Loop);
        assert_eq!(continuous[1].tokens, plain.tokens[..keep]);
        assert_eq!(continuous[1].text, batch[0].text);
    }
    assert!(
        looped > 0,
        "no prompt of the fixture loops: the test checks nothing"
    );
}
