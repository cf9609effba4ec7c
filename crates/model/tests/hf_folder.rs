//! A Hugging Face folder loads end to end: `tokenizer.json` (byte-level BPE with a Split
//! regex, trained with the `tokenizers` library) gives the same ids as `tokenizers`, and
//! the chat template comes from `tokenizer_config.json`.

mod common;

use common::fixture;
use hat_model::chat_template::ChatInput;
use hat_model::{Engine, LoadOptions};

#[test]
fn tokenizer_json_ids_equal_hf_tokenizers() {
    let dir = fixture("qwen2");
    let tok = hat_model::loader::load_tokenizer(&dir).unwrap();
    let cases: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("tokenizer_expected.json")).unwrap(),
    )
    .unwrap();
    for c in cases.as_array().unwrap() {
        let text = c["text"].as_str().unwrap();
        let want: Vec<u32> = serde_json::from_value(c["ids"].clone()).unwrap();
        let got = tok.encode(text, true).unwrap();
        assert_eq!(got, want, "{text:?}");
        assert_eq!(tok.decode(&got, false), text);
    }
    assert_eq!(tok.eos(), tok.token_id("<|im_end|>"));
}

#[test]
fn folder_loads_with_chat_template() {
    let engine = Engine::load(&fixture("qwen2"), LoadOptions::default()).unwrap();
    assert_eq!(engine.info.config.arch, hat_model::Architecture::Qwen2);
    let text = engine
        .render_chat(&ChatInput {
            messages: vec![serde_json::json!({"role": "user", "content": "hi"})],
            tools: None,
            add_generation_prompt: true,
        })
        .unwrap();
    assert_eq!(
        text,
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    );
}
