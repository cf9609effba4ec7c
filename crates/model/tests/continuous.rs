//! Continuous batching on the tiny llama fixture: requests that join a running batch and
//! leave it between steps get the answers they get decoded alone.

mod common;

use std::collections::BTreeMap;

use common::*;
use hat_model::{ContinuousBatch, FinishReason, GenerateOutput, GenerateRequest};

/// Requests of several shapes: a shared cached prefix (69 tokens: decoding shares whole
/// blocks of 64 keys), a prompt that begins differently, a sampled one with a repetition
/// penalty, one that repeats itself (drafts), and one that may generate nothing.
fn requests(ids: &[u32]) -> Vec<GenerateRequest> {
    let start = long_start(ids, 64);
    let shared = |n: usize, max: usize| GenerateRequest {
        cache_prefix_len: Some(69),
        ..GenerateRequest::new([start.as_slice(), &ids[..n]].concat(), max)
    };
    vec![
        shared(11, 9),
        shared(7, 3),
        GenerateRequest {
            sampling: sampled_with_penalty(),
            ..shared(9, 12)
        },
        GenerateRequest::new(ids[1..8].to_vec(), 6),
        shared(8, 0),
        GenerateRequest::new(repeating_prompt(ids), 40),
        shared(10, 1),
    ]
}

/// Adds request `i` before step `at[i]`, steps until every request ended, and returns the
/// outputs by request, checking each ends exactly once and that the text streamed for it
/// while it decoded is its answer's text.
fn run(
    eng: &hat_model::Engine,
    reqs: &[GenerateRequest],
    at: &[usize],
) -> (Vec<GenerateOutput>, usize) {
    let mut batch = ContinuousBatch::new();
    let mut ids = BTreeMap::new();
    let mut out: BTreeMap<usize, GenerateOutput> = BTreeMap::new();
    let mut streamed: BTreeMap<usize, String> = BTreeMap::new();
    let mut most_rows = 0;
    let mut step = 0;
    while out.len() < reqs.len() {
        for (i, r) in reqs.iter().enumerate() {
            if at[i] == step {
                let id = batch.add(eng, r.clone()).unwrap();
                ids.insert(id, i);
            }
        }
        most_rows = most_rows.max(batch.rows());
        let ended = batch
            .step_streaming(eng, &mut |id, text| {
                let i = ids[&id];
                assert!(!out.contains_key(&i), "text for request {i} after it ended");
                streamed.entry(i).or_default().push_str(text);
            })
            .unwrap();
        for (id, o) in ended {
            let i = ids[&id];
            let got = streamed.remove(&i).unwrap_or_default();
            assert_eq!(got, o.text, "request {i}: streamed text");
            assert!(out.insert(i, o).is_none(), "request {i} ended twice");
        }
        step += 1;
        assert!(step < 500, "the batch never emptied");
    }
    assert!(batch.is_empty());
    assert_eq!(batch.running(), 0);
    (out.into_values().collect(), most_rows)
}

#[test]
fn requests_joining_and_leaving_a_running_batch_get_their_answers_alone() {
    let e = expected("llama");
    let reqs = requests(&e.ids);
    // two start together, others join while they decode, one after the first ones ended
    let at = [0, 0, 2, 3, 3, 5, 20];
    for format in ["original", "q8_0"] {
        let eng = llama_engine(format);
        eng.set_shared_prefix_min(Some(1));
        for speculate in [false, true] {
            eng.set_speculative(speculate);
            let (outs, most_rows) = run(&eng, &reqs, &at);
            assert!(most_rows >= 3, "{format}: at most {most_rows} rows at once");
            for (i, (r, c)) in reqs.iter().zip(&outs).enumerate() {
                let alone = eng.generate(r, None).unwrap();
                assert_eq!(alone.tokens, c.tokens, "{format} request {i}");
                assert_eq!(alone.text, c.text, "{format} request {i}");
                assert_eq!(alone.finish, c.finish, "{format} request {i}");
                // quantised weights (an f16 cache): the same bits, as decoding a row does not
                // depend on the rows beside it, on a shared prefix, or on drafts checked
                // several tokens at a time; f32 weights run `gemm`'s products, whose single
                // row sums in another order than a row among several
                if format == "q8_0" {
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&alone.logprobs), bits(&c.logprobs), "request {i}");
                }
                for (x, y) in alone.logprobs.iter().zip(&c.logprobs) {
                    assert!((x - y).abs() < 2e-3, "{format} request {i}: {x} vs {y}");
                }
                assert_eq!(c.prompt_tokens, r.prompt.len());
            }
            assert_eq!(outs[4].tokens.len(), 0);
            assert_eq!(outs[4].finish, FinishReason::Length);
            // the q8_0 cache is f16: rows under the cached prefix keep it once
            if format == "q8_0" {
                assert!(
                    outs.iter().any(|o| o.shared_prefix_tokens >= 64),
                    "no row decoded over a shared prefix"
                );
            }
            if speculate {
                // the request that repeats itself ends alone, with drafts
                assert!(outs[5].accepted_tokens > 0, "{format}: no draft taken");
            } else {
                assert!(outs.iter().all(|o| o.drafted_tokens == 0));
            }
        }
    }
}

/// Every order of joining gives the same answers: a request's answer does not depend on
/// which others share its steps.
#[test]
fn the_answers_do_not_depend_on_when_requests_join() {
    let e = expected("llama");
    let reqs = requests(&e.ids);
    let eng = llama_engine("q8_0");
    eng.set_shared_prefix_min(Some(1));
    let (first, _) = run(&eng, &reqs, &[0, 0, 0, 0, 0, 0, 0]);
    for at in [[6, 5, 4, 3, 2, 1, 0], [0, 1, 1, 8, 8, 2, 3]] {
        let (other, _) = run(&eng, &reqs, &at);
        for (i, (a, b)) in first.iter().zip(&other).enumerate() {
            assert_eq!(a.tokens, b.tokens, "request {i}, joins {at:?}");
        }
    }
}

/// `generate_continuous` hands back every request's answer, in order, as decoded alone,
/// whatever the width.
#[test]
fn many_requests_decode_continuously_in_their_order() {
    let e = expected("llama");
    let reqs = requests(&e.ids);
    let eng = llama_engine("q8_0");
    let alone: Vec<GenerateOutput> = reqs
        .iter()
        .map(|r| eng.generate(r, None).unwrap())
        .collect();
    for width in [1, 2, 3, 16] {
        let outs = eng.generate_continuous(reqs.clone(), width).unwrap();
        assert_eq!(outs.len(), reqs.len());
        for (i, (a, c)) in alone.iter().zip(&outs).enumerate() {
            assert_eq!(a.tokens, c.tokens, "width {width}, request {i}");
            assert_eq!(c.prompt_tokens, reqs[i].prompt.len());
        }
    }
    assert!(eng.generate_continuous(Vec::new(), 4).unwrap().is_empty());
}

#[test]
fn a_request_that_cannot_run_is_refused_and_changes_nothing() {
    let e = expected("llama");
    let eng = llama_engine("q8_0");
    let mut batch = ContinuousBatch::new();
    let ok = GenerateRequest::new(e.ids[..6].to_vec(), 4);
    let id = batch.add(&eng, ok.clone()).unwrap();
    batch.step(&eng).unwrap();
    assert!(batch
        .add(&eng, GenerateRequest::new(Vec::new(), 4))
        .is_err());
    let too_long = GenerateRequest::new(e.ids[..6].to_vec(), eng.model.max_positions());
    assert!(batch.add(&eng, too_long).is_err());
    assert_eq!(batch.running(), 1);
    let mut ended = Vec::new();
    while !batch.is_empty() {
        ended.extend(batch.step(&eng).unwrap());
    }
    assert_eq!(ended.len(), 1);
    assert_eq!(ended[0].0, id);
    assert_eq!(ended[0].1.tokens, eng.generate(&ok, None).unwrap().tokens);
}
