//! End-to-end checks of the trainer on a tiny model: packing is exact, assistant masks are
//! exact, a killed run resumes to bit-identical weights, and an export loads with the same
//! logits.

mod common;

use std::collections::HashMap;

use candle_core::Tensor;
use hat_harness::{Message, Role};
use hat_model::train::{Packed, TrainModel};
use hat_train::config::SftConfig;
use hat_train::pack::{pack, pack_group, PackConfig};
use hat_train::tokens::{Encoder, Sample};

fn rel(a: &[f32], b: &[f32]) -> f32 {
    let scale = b.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-12);
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs() / scale)
        .fold(0.0, f32::max)
}

/// The loss and every gradient of `packed` equal those of its samples computed one by one.
fn assert_packed_equals_one_by_one(model: &TrainModel, packed: &Packed, samples: &[&Sample]) {
    let (lp, np) = model.loss(packed).unwrap();
    let gp = common::grads_of(model, &lp);
    let mut sum = 0f32;
    let mut n = 0;
    let mut gs: HashMap<String, Vec<f32>> = HashMap::new();
    for s in samples {
        let mut seq = Packed::causal(s.tokens.clone(), &s.mask).unwrap();
        if !s.weight.is_empty() {
            seq.weights = (1..s.tokens.len())
                .filter(|&i| s.mask[i])
                .map(|i| s.weight[i])
                .collect();
        }
        let (l, k) = model.loss(&seq).unwrap();
        sum += l.to_scalar::<f32>().unwrap();
        n += k;
        for (name, g) in common::grads_of(model, &l) {
            let acc = gs.entry(name).or_insert_with(|| vec![0.0; g.len()]);
            acc.iter_mut().zip(g).for_each(|(a, b)| *a += b);
        }
    }
    assert_eq!(np, n);
    let lpv = lp.to_scalar::<f32>().unwrap();
    assert!(
        (lpv - sum).abs() / sum.abs() < 1e-4,
        "packed {lpv} vs {sum}"
    );
    for (name, g) in &gp {
        let r = rel(g, &gs[name]);
        assert!(r < 1e-4, "{name}: relative difference {r}");
        assert!(
            g.iter().all(|x| x.is_finite()) && g.iter().any(|&x| x != 0.0),
            "{name}"
        );
    }
}

/// The tiny fixture model, loaded for training (the folder lives as long as the guard).
fn tiny_train_model() -> (tempfile::TempDir, TrainModel) {
    let dir = tempfile::tempdir().unwrap();
    let path = common::tiny_model(dir.path(), 7);
    let model = TrainModel::load(&path).unwrap().model;
    (dir, model)
}

#[test]
fn packed_loss_and_gradients_equal_one_by_one() {
    let (_dir, model) = tiny_train_model();
    let vocab = model.config().vocab_size as u32;
    let prefix: Vec<u32> = (0..40).map(|i| (i * 7 + 3) % vocab).collect();
    let samples: Vec<Sample> = (0..4)
        .map(|k| {
            let mut tokens = prefix.clone();
            let n = 10 + 5 * k;
            tokens.extend((0..n).map(|i| ((i * 13 + k * 31 + 5) as u32) % vocab));
            let mask = (0..tokens.len()).map(|i| i >= 38 && i % 3 != 0).collect();
            Sample {
                id: format!("s{k}"),
                tokens,
                mask,
                weight: Vec::new(),
            }
        })
        .collect();
    let refs: Vec<&Sample> = samples.iter().collect();
    let packed = pack_group(&refs, prefix.len() - 2).unwrap();
    assert!(packed.len() < samples.iter().map(|s| s.tokens.len()).sum::<usize>());
    assert_packed_equals_one_by_one(&model, &packed, &refs);
}

/// Short conversations that share no prefix worth packing on (replay answers) are packed
/// together by `merge_below`, and still compute exactly what they would alone.
#[test]
fn short_loners_packed_together_equal_one_by_one() {
    let (_dir, model) = tiny_train_model();
    let vocab = model.config().vocab_size as u32;
    let samples: Vec<Sample> = (0..3)
        .map(|k| {
            // two tokens in common (a short default system prompt), then their own
            let mut tokens = vec![1, 2];
            tokens.extend((0..12 + 4 * k).map(|i| ((i * 11 + k * 17 + 3) as u32) % vocab));
            let mask = (0..tokens.len()).map(|i| i >= 4).collect();
            Sample {
                id: format!("r{k}"),
                tokens,
                mask,
                weight: Vec::new(),
            }
        })
        .collect();
    let cfg = PackConfig {
        max_tokens: 1024,
        max_conversations: 8,
        min_prefix: 8,
        merge_below: 64,
    };
    let packs = pack(&samples, &cfg).unwrap();
    assert_eq!(packs.len(), 1, "three loners in one pack");
    let refs: Vec<&Sample> = packs[0].members.iter().map(|&i| &samples[i]).collect();
    assert_eq!(refs.len(), 3);
    assert_packed_equals_one_by_one(&model, &packs[0].seq, &refs);
}

/// Per-token loss weights survive packing: the packed weighted loss and gradients are the
/// weighted ones of the samples computed one by one, and a pack mixing weighted and plain
/// samples counts the plain ones once.
#[test]
fn weighted_packed_loss_equals_weighted_one_by_one() {
    let (_d, model) = tiny_train_model();
    let vocab = model.config().vocab_size;
    let prefix: Vec<u32> = (0..30).map(|i| (i * 7 + 3) as u32 % vocab as u32).collect();
    let samples: Vec<Sample> = (0..3)
        .map(|k| {
            let mut tokens = prefix.clone();
            tokens.extend((0..20).map(|i| ((i * 11 + k * 17 + 1) as u32) % vocab as u32));
            let mask: Vec<bool> = (0..tokens.len()).map(|i| i >= 32).collect();
            let weight = if k == 1 {
                Vec::new()
            } else {
                (0..tokens.len())
                    .map(|i| if i < 40 { 3.0 } else { 1.0 })
                    .collect()
            };
            Sample {
                id: format!("w{k}"),
                tokens,
                mask,
                weight,
            }
        })
        .collect();
    let refs: Vec<&Sample> = samples.iter().collect();
    let packed = pack_group(&refs, prefix.len()).unwrap();
    assert_eq!(packed.weights.len(), packed.targets.len());
    assert_eq!(packed.weights.iter().filter(|&&w| w == 3.0).count(), 2 * 8);
    assert_packed_equals_one_by_one(&model, &packed, &refs);
}

fn msgs(turns: &[(Role, &str)]) -> Vec<Message> {
    turns
        .iter()
        .map(|(r, c)| Message {
            role: *r,
            content: c.to_string(),
            name: (*r == Role::Tool).then(|| "lookup".to_string()),
            weight: None,
        })
        .collect()
}

fn encoder(template: &str) -> Encoder {
    let tok = hat_model::loader::load_tokenizer(&common::fixture_dir()).unwrap();
    Encoder::new(tok, Some(template)).unwrap()
}

const SMOLLM2_TEMPLATE: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

const QWEN2_STYLE: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/// The text of the tokens a sample's mask puts the loss on.
fn learned_text(enc: &Encoder, s: &Sample) -> String {
    let learned: Vec<u32> = s
        .tokens
        .iter()
        .zip(&s.mask)
        .filter(|(_, m)| **m)
        .map(|(t, _)| *t)
        .collect();
    enc.tokenizer().decode(&learned, false)
}

#[test]
fn the_mask_covers_assistant_tokens_and_their_end_of_turn_only() {
    let conv = msgs(&[
        (Role::System, "be brief"),
        (Role::User, "hi"),
        (Role::Assistant, "hello there"),
        (Role::Tool, "42"),
        (Role::Assistant, "it is 42"),
    ]);
    for template in [SMOLLM2_TEMPLATE, QWEN2_STYLE] {
        let enc = encoder(template);
        let s = enc.encode("c", &conv).unwrap();
        assert_eq!(
            learned_text(&enc, &s),
            "hello there<|im_end|>it is 42<|im_end|>"
        );
        // within a limit the same sample; past it the tokens alone, for the caller to drop
        let within = enc.encode_within("c", &conv, s.tokens.len()).unwrap();
        assert_eq!((&within.tokens, &within.mask), (&s.tokens, &s.mask));
        let past = enc.encode_within("c", &conv, s.tokens.len() - 1).unwrap();
        assert_eq!(past.tokens, s.tokens);
        assert!(past.mask.iter().all(|m| !m));
    }
}

#[test]
fn a_call_weight_counts_the_turns_a_tool_result_follows() {
    let conv = msgs(&[
        (Role::User, "hi"),
        (Role::Assistant, "call"),
        (Role::Tool, "42"),
        (Role::Assistant, "it is 42"),
    ]);
    for template in [SMOLLM2_TEMPLATE, QWEN2_STYLE] {
        let plain = encoder(template).encode("c", &conv).unwrap();
        assert!(plain.weight.is_empty());
        let enc = encoder(template).with_call_weight(3.0);
        let s = enc.encode("c", &conv).unwrap();
        assert_eq!(
            (s.tokens.clone(), s.mask.clone()),
            (plain.tokens, plain.mask)
        );
        let text = |w: f32| {
            let ids: Vec<u32> = (0..s.tokens.len())
                .filter(|&i| s.mask[i] && s.weight[i] == w)
                .map(|i| s.tokens[i])
                .collect();
            enc.tokenizer().decode(&ids, false)
        };
        assert_eq!(text(3.0), "call<|im_end|>");
        assert_eq!(text(1.0), "it is 42<|im_end|>");
    }
}

#[test]
fn a_decision_weight_counts_each_turns_first_token_and_the_call_values() {
    use hat_data::Record;
    use hat_harness::ToolCall;
    use hat_train::tokens::Trajectory;
    let conv = msgs(&[
        (Role::User, "is no.3 in stock"),
        (
            Role::Assistant,
            r#"<tool_call>{"name":"get","arguments":{"id":"P5"}}</tool_call>"#,
        ),
        (Role::Tool, r#"{"id":"P5","stock":7}"#),
        (Role::Assistant, "P5 has 7 left, P51 none"),
    ]);
    let record = |tools: serde_json::Value, calls: Vec<ToolCall>| Trajectory {
        id: "t".into(),
        record: Record {
            messages: conv.clone(),
            tools,
            harness_name: "h".into(),
            harness_hash: "x".into(),
            variant: "base".into(),
            call_syntax: "json-tags".into(),
            task_id: "t".into(),
            task_type: "variant_stock".into(),
            split: "train".into(),
            lang: "en".into(),
            calls,
            teacher: "oracle".into(),
            score: serde_json::Value::Null,
        },
    };
    let call = ToolCall {
        name: "get".into(),
        arguments: serde_json::json!({"id": "P5"}),
    };
    let agent = record(serde_json::json!([{"type": "function"}]), vec![call]);
    let general = record(serde_json::json!([]), vec![]);
    for template in [SMOLLM2_TEMPLATE, QWEN2_STYLE] {
        let plain = encoder(template).encode("t", &conv).unwrap();
        let enc = encoder(template).with_decision_weight(4.0);
        let s = enc.encode_record(&agent, usize::MAX).unwrap();
        assert_eq!((&s.tokens, &s.mask), (&plain.tokens, &plain.mask));
        // the first token of each trained turn
        let starts: Vec<usize> = (1..s.mask.len())
            .filter(|&i| s.mask[i] && !s.mask[i - 1])
            .collect();
        assert_eq!(starts.len(), 2);
        assert!(starts.iter().all(|&i| s.weight[i] == 4.0));
        // beyond them, only the tokens spelling the tool and the value; the reply's `P5` is phrasing
        let rest: Vec<u32> = (0..s.tokens.len())
            .filter(|&i| s.weight[i] == 4.0 && !starts.contains(&i))
            .map(|i| s.tokens[i])
            .collect();
        let text = enc.tokenizer().decode(&rest, false);
        assert!(text.contains("P5") && text.contains("get"), "{text:?}");
        assert!(!text.contains("name") && !text.contains("left"), "{text:?}");
        assert!(s.weight.iter().all(|&w| w == 1.0 || w == 4.0));
        // a general answer is left alone; an encoder without the weight too
        let g = enc.encode_record(&general, usize::MAX).unwrap();
        assert!(g.weight.is_empty());
        let p = encoder(template).encode_record(&agent, usize::MAX).unwrap();
        assert!(p.weight.is_empty());
        // with a call weight too, a token counts the larger of the two
        let both = encoder(template)
            .with_call_weight(3.0)
            .with_decision_weight(2.0);
        let b = both.encode_record(&agent, usize::MAX).unwrap();
        assert_eq!(b.weight[starts[0]], 3.0);
        assert_eq!(b.weight[starts[1]], 2.0);
    }
}

#[test]
fn an_assistant_turn_with_weight_0_is_context() {
    // a recovery detour: the wrong call is not learned, the correction and reply are
    let plain = msgs(&[
        (Role::User, "hi"),
        (Role::Assistant, "wrong call"),
        (Role::Tool, "error"),
        (Role::Assistant, "right call"),
        (Role::Tool, "42"),
        (Role::Assistant, "it is 42"),
    ]);
    let mut conv = plain.clone();
    conv[1] = conv[1].clone().untrained();
    for template in [SMOLLM2_TEMPLATE, QWEN2_STYLE] {
        let enc = encoder(template);
        let s = enc.encode("c", &conv).unwrap();
        assert_eq!(
            learned_text(&enc, &s),
            "right call<|im_end|>it is 42<|im_end|>"
        );
        // the tokens are the same as without the weight: only the mask differs
        let plain = enc.encode("c", &plain).unwrap();
        assert_eq!(plain.tokens, s.tokens);
        assert!(plain.mask.iter().filter(|m| **m).count() > s.mask.iter().filter(|m| **m).count());
    }
}

#[test]
fn a_weight_other_than_0_or_1_is_an_error_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let good = r#"{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yo","weight":0}],"tools":[],"harness_name":"h","harness_hash":"x","variant":"base","call_syntax":"json-tags","task_id":"t","task_type":"chitchat","split":"train","lang":"en","calls":[],"teacher":"oracle","score":{}}"#;
    let path = dir.path().join("d.jsonl");
    std::fs::write(
        &path,
        format!(
            "{good}\n{}\n",
            good.replace(r#""weight":0"#, r#""weight":2"#)
        ),
    )
    .unwrap();
    let e = hat_train::tokens::read_jsonl(&path)
        .unwrap_err()
        .to_string();
    assert!(e.contains("d.jsonl:2:") && e.contains("weight: 2"), "{e}");
    std::fs::write(&path, format!("{good}\n")).unwrap();
    let t = hat_train::tokens::read_jsonl(&path).unwrap();
    assert_eq!(t[0].record.messages[1].weight, Some(0));
}

#[test]
fn a_template_that_rewrites_earlier_turns_is_refused() {
    // renders the last message differently, so prefixes change when a turn is added
    let bad = "{% for m in messages %}{% if loop.last %}[{{ m.content }}]{% else %}{{ m.content }}{% endif %}{% endfor %}";
    let enc = encoder(bad);
    let conv = msgs(&[
        (Role::User, "hi"),
        (Role::Assistant, "yo"),
        (Role::User, "ok"),
    ]);
    let e = enc.encode("sample-9", &conv).unwrap_err().to_string();
    assert!(
        e.contains("prefix-preserving") && e.contains("sample-9"),
        "{e}"
    );
}

fn run_cfg(model: &std::path::Path, data: &std::path::Path, steps: usize) -> SftConfig {
    let mut c = SftConfig::preset("smoke").unwrap();
    c.model = model.to_path_buf();
    c.data = vec![data.to_path_buf()];
    c.max_steps = steps;
    c.tokens_per_step = 40;
    c.save_every = 1;
    c.eval_every = 2;
    c.export = vec![];
    c.optim.lr = 1e-2;
    c.optim.warmup_steps = 1;
    c.pack = PackConfig {
        max_tokens: 1024,
        max_conversations: 3,
        min_prefix: 8,
        merge_below: 0,
    };
    c
}

fn weights(run: &std::path::Path) -> HashMap<String, Vec<f32>> {
    common::checkpoint_weights(run)
}

#[test]
fn a_killed_run_resumes_to_bit_identical_weights_and_exports() {
    let dir = tempfile::tempdir().unwrap();
    let model = common::tiny_model(&dir.path().join("m"), 3);
    let data = dir.path().join("d.jsonl");
    common::write_jsonl(&data, &common::dataset());
    let straight = dir.path().join("a");
    let cfg = run_cfg(&model, &data, 4);
    hat_train::sft::run(&cfg, &straight, false, &mut |_| {}).unwrap();
    // "killed" after 2 steps, then resumed to 4
    let split = dir.path().join("b");
    hat_train::sft::run(&run_cfg(&model, &data, 2), &split, false, &mut |_| {}).unwrap();
    hat_train::sft::run(&cfg, &split, true, &mut |_| {}).unwrap();
    let (wa, wb) = (weights(&straight), weights(&split));
    assert_eq!(wa, wb, "resumed weights differ");
    let start = weights_of_model(&model);
    assert_ne!(start["blk.0.attn_q.weight"], wa["blk.0.attn_q.weight"]);
    // the loss went down on the training data
    let losses = common::losses(&straight);
    assert_eq!(losses.len(), 4);
    assert!(losses[3] < losses[0], "{losses:?}");
    let lines: Vec<hat_train::stage::StepMetrics> =
        std::fs::read_to_string(split.join("metrics.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
    assert_eq!(lines.len(), 4);
    // wall time holds the steps' time and keeps growing across the resume
    for w in lines.windows(2) {
        assert!(w[1].wall_seconds >= w[0].wall_seconds, "{w:?}");
    }
    for m in &lines {
        assert!(m.wall_seconds >= m.seconds && m.seconds > 0.0, "{m:?}");
    }

    // export: the GGUF loads in the inference engine with the trained logits
    let loaded = TrainModel::load(&model).unwrap();
    let trained = loaded.model;
    let ck = hat_train::checkpoint::latest(&straight).unwrap().unwrap();
    assert_eq!(
        hat_train::checkpoint::load_weights(&ck, &trained).unwrap(),
        4
    );
    let (diff, engine) = export_and_compare(&trained, &model, &dir.path().join("m.gguf"));
    assert!(engine.chat_template.is_some());
    assert!(diff < 1e-3, "exported logits differ by {diff}");
}

/// Exports `trained` (started from `source`) as an f32 GGUF at `gguf`, loads it in the
/// inference engine and returns the largest logit difference on a short sequence, and the
/// loaded model.
fn export_and_compare(
    trained: &TrainModel,
    source: &std::path::Path,
    gguf: &std::path::Path,
) -> (f32, hat_model::Loaded) {
    hat_train::export::gguf(trained, source, "f32", gguf).unwrap();
    let ids: Vec<u32> = vec![5, 9, 17, 33, 2, 8, 40];
    let want = trained
        .logits(&Packed::causal(ids.clone(), &[true; 7]).unwrap())
        .unwrap();
    let engine = hat_model::load(
        gguf,
        hat_model::LoadOptions {
            format: hat_model::WeightFormat::F32,
            ..Default::default()
        },
    )
    .unwrap();
    let x = Tensor::from_slice(&ids, (1, 7), &candle_core::Device::Cpu).unwrap();
    let mut cache = engine.model.new_cache(1);
    let got = engine
        .model
        .forward(&x, &mut cache, false)
        .unwrap()
        .squeeze(0)
        .unwrap();
    let diff = common::max_abs_diff(&got.narrow(0, 0, 6).unwrap(), &want);
    (diff, engine)
}

fn weights_of_model(path: &std::path::Path) -> HashMap<String, Vec<f32>> {
    vars_of(&TrainModel::load(path).unwrap().model)
}

#[test]
fn a_bad_dataset_line_is_named_by_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d.jsonl");
    let good = common::dataset()[0].to_string();
    // a byte-order mark before the first record is not an error (line 1 parses)
    std::fs::write(&data, format!("\u{feff}{good}\n\n{{\"messages\": 3}}\n")).unwrap();
    let e = hat_train::tokens::read_jsonl(&data)
        .unwrap_err()
        .to_string();
    assert!(e.contains("d.jsonl:3:"), "{e}");
    // a byte that is not UTF-8 (a Latin-1 export) is named by line too
    let mut bytes = format!("{good}\n").into_bytes();
    bytes.extend(b"{\"messages\": \"caf\xe9\"}\n");
    std::fs::write(&data, bytes).unwrap();
    let e = hat_train::tokens::read_jsonl(&data)
        .unwrap_err()
        .to_string();
    assert!(e.contains("d.jsonl:2:") && e.contains("not UTF-8"), "{e}");
}

#[test]
fn a_diverging_run_stops_and_keeps_its_last_good_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let model = common::tiny_model(&dir.path().join("m"), 5);
    let data = dir.path().join("d.jsonl");
    common::write_jsonl(&data, &common::dataset());
    let run = dir.path().join("r");
    let mut cfg = run_cfg(&model, &data, 40);
    // With both betas 0, AdamW is sign descent: every weight with a gradient moves by exactly
    // the learning rate. At 1e38 the first step stays finite (f32 ends at 3.4e38) and a few
    // more of the same sign overflow in the optimiser itself, whatever a CPU's kernels
    // do with huge activations. (lr 1e6 relied on the forward pass overflowing, which an AVX2
    // machine's kernels did not do within 40 steps.)
    cfg.optim.lr = 1e38;
    cfg.optim.beta1 = 0.0;
    cfg.optim.beta2 = 0.0;
    cfg.optim.clip_norm = 0.0;
    cfg.optim.weight_decay = 0.0;
    let err = hat_train::sft::run(&cfg, &run, false, &mut |_| {}).unwrap_err();
    assert!(
        matches!(err, hat_train::TrainError::Diverged { .. }),
        "expected divergence, got {err}"
    );
    // every checkpoint left behind is complete and loads
    let last = hat_train::checkpoint::latest(&run).unwrap().unwrap();
    let trained = TrainModel::load(&model).unwrap().model;
    let sizes: Vec<usize> = trained.vars().iter().map(|(_, v)| v.elem_count()).collect();
    let mut opt = hat_train::optim::AdamW::new(cfg.optim, &sizes);
    let st = hat_train::checkpoint::load(&last, &trained, &mut opt).unwrap();
    assert!(st.step >= 1);
    for (_, v) in trained.vars() {
        let w = v
            .as_tensor()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        assert!(w.iter().all(|x| x.is_finite()));
    }
}

fn vars_of(model: &TrainModel) -> HashMap<String, Vec<f32>> {
    model
        .vars()
        .iter()
        .map(|(n, v)| {
            let t = v.as_tensor().flatten_all().unwrap();
            (n.clone(), t.to_vec1::<f32>().unwrap())
        })
        .collect()
}

#[test]
fn a_hugging_face_export_round_trips_through_gguf_exactly() {
    // llama+bias: the q/k biases follow their rows into the other rotary order
    for arch in ["qwen2", "llama", "llama+bias"] {
        let dir = tempfile::tempdir().unwrap();
        let hf = common::tiny_model_arch(&dir.path().join("hf"), 7, arch);
        let start = TrainModel::load(&hf).unwrap().model;
        // HF -> GGUF (llama q/k permuted for the interleaved rotary layout) -> HF
        let gguf = dir.path().join("m.gguf");
        hat_train::export::export(&start, &hf, "f32", &gguf).unwrap();
        let from_gguf = TrainModel::load(&gguf).unwrap().model;
        let back = dir.path().join("back");
        hat_train::export::export(&from_gguf, &gguf, "hf", &back).unwrap();
        for f in ["config.json", "tokenizer.json", "tokenizer_config.json"] {
            assert!(back.join(f).is_file(), "{arch}: no {f}");
        }
        let cfg: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(back.join("config.json")).unwrap())
                .unwrap();
        assert_eq!(cfg["model_type"], arch.trim_end_matches("+bias"));
        let reloaded = TrainModel::load(&back).unwrap();
        assert_eq!(vars_of(&reloaded.model), vars_of(&start), "{arch}");
        // the rebuilt tokenizer and chat template are the original ones
        let text = "Products: red coat 99, blue hat 12.\n  <|im_end|> é";
        let original = hat_model::loader::load_tokenizer(&hf).unwrap();
        assert_eq!(
            reloaded.tokenizer.encode(text, false).unwrap(),
            original.encode(text, false).unwrap()
        );
        assert_eq!(
            reloaded.chat_template,
            hat_model::hf::HfFolder::open(&hf).unwrap().chat_template()
        );
        let seq = Packed::causal(vec![5, 9, 17, 33, 2, 8, 40], &[true; 7]).unwrap();
        let a = start.logits(&seq).unwrap();
        let b = from_gguf.logits(&seq).unwrap();
        let diff = common::max_abs_diff(&a, &b);
        assert!(diff < 1e-4, "{arch}: GGUF logits differ by {diff}");
        // a second export replaces the first; a folder that is not an export is refused
        hat_train::export::export(&from_gguf, &gguf, "hf", &back).unwrap();
        let e = hat_train::export::export(&from_gguf, &gguf, "hf", dir.path())
            .unwrap_err()
            .to_string();
        assert!(e.contains("not an earlier export"), "{e}");
    }
}

#[test]
fn lora_trains_only_adapters_merges_them_on_export_and_resumes_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let model = common::tiny_model(&dir.path().join("m"), 3);
    let data = dir.path().join("d.jsonl");
    common::write_jsonl(&data, &common::dataset());
    let lora_cfg = |steps| {
        let mut c = run_cfg(&model, &data, steps);
        c.lora = Some(hat_train::config::LoraConfig {
            rank: 4,
            alpha: 8.0,
            ..Default::default()
        });
        c
    };
    let straight = dir.path().join("a");
    hat_train::sft::run(&lora_cfg(4), &straight, false, &mut |_| {}).unwrap();
    let w = weights(&straight);
    // only adapters are trained and saved: 7 linears x 2 blocks x (A, B)
    assert_eq!(w.len(), 28, "{:?}", w.keys().collect::<Vec<_>>());
    assert!(w
        .keys()
        .all(|k| k.ends_with(".lora_a") || k.ends_with(".lora_b")));
    // B starts at zero; every B moved, so every adapter received gradients
    for (k, v) in w.iter().filter(|(k, _)| k.ends_with(".lora_b")) {
        assert!(v.iter().any(|x| *x != 0.0), "{k} never moved");
    }
    let losses = common::losses(&straight);
    assert!(losses[3] < losses[0], "{losses:?}");
    // killed after 2 steps, resumed to 4
    let split = dir.path().join("b");
    hat_train::sft::run(&lora_cfg(2), &split, false, &mut |_| {}).unwrap();
    hat_train::sft::run(&lora_cfg(4), &split, true, &mut |_| {}).unwrap();
    assert_eq!(w, weights(&split), "resumed adapters differ");

    // export merges W + (alpha/rank) B A: the engine computes the adapted model's logits
    std::fs::write(straight.join("config.toml"), lora_cfg(4).to_toml()).unwrap();
    let (trained, source, step) = hat_train::checkpoint::load_run(&straight).unwrap();
    assert_eq!((source.as_path(), step), (model.as_path(), 4));
    let (diff, _) = export_and_compare(&trained, &model, &dir.path().join("m.gguf"));
    assert!(diff < 1e-3, "merged export logits differ by {diff}");
    // frozen weights are exported unchanged; adapted ones are not
    let base = weights_of_model(&model);
    let merged: HashMap<String, Vec<f32>> = trained
        .weights()
        .unwrap()
        .into_iter()
        .map(|(k, v)| (k, v.flatten_all().unwrap().to_vec1::<f32>().unwrap()))
        .collect();
    assert_eq!(merged["output_norm.weight"], base["output_norm.weight"]);
    assert_ne!(merged["blk.0.attn_q.weight"], base["blk.0.attn_q.weight"]);
    // a bad target is named
    let mut bad = lora_cfg(1);
    bad.lora.as_mut().unwrap().targets = vec!["qq".into()];
    let e = hat_train::sft::run(&bad, &dir.path().join("c"), false, &mut |_| {})
        .unwrap_err()
        .to_string();
    assert!(e.contains("`qq`"), "{e}");
}

/// A stage for the loop's own rules: a real gradient on the steps listed in `learn`, nothing
/// on the others; checkpoints allowed only on the steps in `savable`.
struct Scripted {
    learn: Vec<usize>,
    savable: Vec<usize>,
    updated: Vec<usize>,
    step: usize,
}

impl hat_train::stage::Stage for Scripted {
    fn step(
        &mut self,
        model: &TrainModel,
        state: &mut hat_train::checkpoint::RunState,
        grads: &mut [Vec<f32>],
    ) -> hat_train::error::Result<hat_train::stage::StepWork> {
        self.step = state.step;
        if !self.learn.contains(&state.step) {
            return Ok(hat_train::stage::StepWork::default());
        }
        let (_, v) = &model.vars()[0];
        let loss = v.as_tensor().sqr()?.sum_all()?;
        hat_train::stage::add_gradients(model, &loss, grads)?;
        Ok(hat_train::stage::StepWork {
            loss: loss.to_scalar::<f32>()? as f64,
            tokens: 1,
            loss_tokens: 1,
            ..Default::default()
        })
    }
    fn validate(&mut self, _model: &TrainModel) -> hat_train::error::Result<Option<f64>> {
        Ok(None)
    }
    fn updated(
        &mut self,
        _model: &TrainModel,
        state: &hat_train::checkpoint::RunState,
    ) -> hat_train::error::Result<()> {
        self.updated.push(state.step);
        Ok(())
    }
    fn can_checkpoint(&self) -> bool {
        self.savable.contains(&self.step)
    }
}

fn scripted_run(stage: &mut Scripted, model: &TrainModel, out: &std::path::Path, steps: usize) {
    let src = out.join("src");
    let settings = hat_train::stage::LoopSettings {
        source: &src,
        max_steps: steps,
        eval_every: steps,
        save_every: 2,
        keep: 10,
        export: &[],
        optim: hat_train::optim::AdamWConfig::default(),
        matmul: hat_train::config::Matmul::F32,
    };
    hat_train::stage::train(&settings, model, stage, out, false, &mut |_| {}).unwrap();
}

#[test]
fn a_step_with_nothing_to_learn_leaves_the_weights_and_the_optimiser_alone() {
    let scripted = || Scripted {
        learn: vec![0],
        savable: (0..10).collect(),
        updated: vec![],
        step: 0,
    };
    let run = tempfile::tempdir().unwrap();
    // one learning step, against the same step followed by two with no signal (Adam's
    // moments are non-zero after the first: an update on a zero gradient would move weights)
    let (_d1, once) = tiny_train_model();
    let pristine = vars_of(&once);
    scripted_run(&mut scripted(), &once, &run.path().join("once"), 1);
    assert_ne!(vars_of(&once), pristine, "step 0 learned");
    let (_d2, three) = tiny_train_model();
    let mut s = scripted();
    scripted_run(&mut s, &three, &run.path().join("three"), 3);
    assert_eq!(vars_of(&once), vars_of(&three));
    assert_eq!(
        s.updated,
        vec![1],
        "only the learning step updated the weights"
    );
    let m: Vec<serde_json::Value> = std::fs::read_to_string(run.path().join("three/metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(m.len(), 3);
    assert_eq!(m[1]["grad_norm"], 0.0);
    assert_eq!(m[1]["loss_tokens"], 0);
}

#[test]
fn a_due_checkpoint_waits_until_the_stage_can_resume_from_it() {
    let (_d, model) = tiny_train_model();
    let run = tempfile::tempdir().unwrap();
    // save_every 2: due after steps 2 and 4; the stage allows it only after steps 3 and 6
    // (state.step 2 and 5 while stepping), and the last step always saves
    let mut s = Scripted {
        learn: (0..10).collect(),
        savable: vec![2, 5],
        updated: vec![],
        step: 0,
    };
    scripted_run(&mut s, &model, run.path(), 7);
    let mut saved: Vec<String> = std::fs::read_dir(run.path().join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("step-"))
        .collect();
    saved.sort();
    assert_eq!(saved, vec!["step-000003", "step-000006", "step-000007"]);
}

#[test]
fn a_repeated_file_puts_its_packs_in_an_epoch_k_times_and_leaves_the_rest_as_they_were() {
    let dir = tempfile::tempdir().unwrap();
    let (agent, replay) = (
        dir.path().join("agent.jsonl"),
        dir.path().join("replay.jsonl"),
    );
    common::write_jsonl(&agent, &common::dataset());
    let answers: Vec<serde_json::Value> = (0..4)
        .map(|k| {
            common::record(
                &format!("replay-{k}"),
                "be helpful",
                &[
                    ("user", &format!("question {k}?")),
                    ("assistant", &format!("answer {k}.")),
                ],
            )
        })
        .collect();
    common::write_jsonl(&replay, &answers);
    let enc = encoder(SMOLLM2_TEMPLATE);
    let mut once = run_cfg(dir.path(), &agent, 1);
    once.data.push(replay.clone());
    once.val_fraction = 0.2;
    let mut thrice = once.clone();
    thrice.repeat.insert(replay.clone(), 3);
    thrice.validate().unwrap();
    let a = hat_train::sft::prepare(&once, &enc, 4096).unwrap();
    let b = hat_train::sft::prepare(&thrice, &enc, 4096).unwrap();
    let ids = |p: &hat_train::pack::Pack| p.seq.ids.clone();
    let is_replay = |p: &hat_train::pack::Pack| {
        enc.tokenizer()
            .decode(&p.seq.ids, false)
            .contains("be helpful")
    };
    // the held-out trajectories and the agent packs are the same
    assert_eq!(
        a.val.iter().map(ids).collect::<Vec<_>>(),
        b.val.iter().map(ids).collect::<Vec<_>>()
    );
    let agent_packs = |p: &hat_train::sft::Prepared| {
        let mut v: Vec<Vec<u32>> = p.train.iter().filter(|p| !is_replay(p)).map(ids).collect();
        v.sort();
        v
    };
    assert_eq!(agent_packs(&a), agent_packs(&b));
    // the replay file's training answers: each one three times, in whole packs
    let replay_answers = |p: &hat_train::sft::Prepared| -> Vec<String> {
        let text: String = p
            .train
            .iter()
            .filter(|p| is_replay(p))
            .map(|p| enc.tokenizer().decode(&p.seq.ids, false))
            .collect();
        let mut v: Vec<String> = (0..4)
            .flat_map(|k| {
                let a = format!("answer {k}.");
                std::iter::repeat_n(a.clone(), text.matches(&a).count())
            })
            .collect();
        v.sort();
        v
    };
    let (ra, rb) = (replay_answers(&a), replay_answers(&b));
    assert!(!ra.is_empty());
    let mut thrice_ra: Vec<String> = ra
        .iter()
        .flat_map(|x| [x.clone(), x.clone(), x.clone()])
        .collect();
    thrice_ra.sort();
    assert_eq!(rb, thrice_ra);
    assert_eq!(
        b.by_file.iter().map(|f| f.repeat).collect::<Vec<_>>(),
        [1, 3]
    );
    assert_eq!(b.by_file, {
        let mut f = a.by_file.clone();
        f[1].repeat = 3;
        f
    });
}
