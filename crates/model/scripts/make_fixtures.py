#!/usr/bin/env python3
"""Generates the parity fixtures in crates/model/tests/fixtures/ (committed; CI never runs this).

Tiny randomly initialised llama and qwen2 models are built with Hugging Face transformers
(PyTorch, f32). For each we save:
  <arch>/config.json, <arch>/model.safetensors   the HF folder our loader reads
  <arch>/model.gguf                              the same weights written as GGUF the way
                                                 llama.cpp's converter does (llama q/k permuted
                                                 for interleaved rope; qwen2 not permuted)
  <arch>/expected.safetensors                    input_ids, logits (f32), greedy continuation

Setup (CPU is enough):  python3 -m venv /tmp/pyref && /tmp/pyref/bin/pip install torch transformers gguf numpy
Run:                    /tmp/pyref/bin/python crates/model/scripts/make_fixtures.py
"""

import os
import sys

import numpy as np
import torch
from safetensors.torch import save_file
import gguf
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")

COMMON = dict(
    vocab_size=96,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
    rms_norm_eps=1e-5,
    rope_theta=10000.0,
    torch_dtype="float32",
)


def randomise(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.15 * torch.randn(p.shape, generator=g))


def permute(w, n_head):
    # llama.cpp convert_hf_to_gguf.py LlamaModel.permute
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(path, arch, cfg, sd):
    w = gguf.GGUFWriter(path, arch)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    theta = getattr(cfg, "rope_parameters", None) or {}
    w.add_rope_freq_base(float(theta.get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    w.add_vocab_size(cfg.vocab_size)
    names = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }
    per_layer = {
        "input_layernorm.weight": "attn_norm.weight",
        "post_attention_layernorm.weight": "ffn_norm.weight",
        "self_attn.q_proj.weight": "attn_q.weight",
        "self_attn.k_proj.weight": "attn_k.weight",
        "self_attn.v_proj.weight": "attn_v.weight",
        "self_attn.q_proj.bias": "attn_q.bias",
        "self_attn.k_proj.bias": "attn_k.bias",
        "self_attn.v_proj.bias": "attn_v.bias",
        "self_attn.o_proj.weight": "attn_output.weight",
        "mlp.gate_proj.weight": "ffn_gate.weight",
        "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight",
    }
    for k, t in sd.items():
        a = t.detach().numpy().astype(np.float32)
        if k in names:
            n = names[k]
        else:
            parts = k.split(".")
            i = parts[2]
            n = f"blk.{i}." + per_layer[".".join(parts[3:])]
        if arch == "llama" and n.endswith("attn_q.weight"):
            a = permute(a, cfg.num_attention_heads)
        if arch == "llama" and n.endswith("attn_k.weight"):
            a = permute(a, cfg.num_key_value_heads)
        w.add_tensor(n, np.ascontiguousarray(a))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def make(arch, cls, cfg_cls, seed, tie):
    torch.manual_seed(seed)
    cfg = cfg_cls(**COMMON, tie_word_embeddings=tie)
    model = cls(cfg).eval()
    randomise(model, seed)
    d = os.path.join(OUT, arch)
    os.makedirs(d, exist_ok=True)
    model.save_pretrained(d, safe_serialization=True)
    for f in ("generation_config.json",):
        p = os.path.join(d, f)
        if os.path.exists(p):
            os.remove(p)
    sd = {k: v for k, v in model.state_dict().items() if not (tie and k == "lm_head.weight")}
    write_gguf(os.path.join(d, "model.gguf"), arch, cfg, sd)
    g = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(0, cfg.vocab_size, (1, 11), generator=g)
    with torch.no_grad():
        logits = model(ids).logits[0].float()
        gen = model.generate(ids, max_new_tokens=12, do_sample=False, pad_token_id=0, eos_token_id=None)
    cont = gen[0, ids.shape[1]:]
    save_file(
        {
            "input_ids": ids[0].to(torch.int64).contiguous(),
            "logits": logits.contiguous(),
            "greedy": cont.to(torch.int64).contiguous(),
        },
        os.path.join(d, "expected.safetensors"),
    )
    print(arch, "logits", tuple(logits.shape), "greedy", cont.tolist())


if __name__ == "__main__":
    import transformers

    print("torch", torch.__version__, "transformers", transformers.__version__, file=sys.stderr)
    make("llama", LlamaForCausalLM, LlamaConfig, 1234, tie=False)
    make("qwen2", Qwen2ForCausalLM, Qwen2Config, 4321, tie=True)


def make_tokenizer():
    """A small byte-level BPE in Hugging Face `tokenizers` (Qwen2-style Split regex + ByteLevel,
    special tokens), saved as tests/fixtures/qwen2/tokenizer.json with expected encodings."""
    import json
    from tokenizers import Tokenizer, Regex, models, pre_tokenizers, trainers, decoders

    pattern = (
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    )
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    corpus = [
        "Live shopping: the host shows a red jacket, size M, price 49.99 dollars.",
        "Viewers ask about delivery, returns, colours and sizes. 直播间今天有优惠！",
        "The capital of France is Paris. Don't won't I'll we've they're it's 🎉🔥",
    ] * 20
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer)
    d = os.path.join(OUT, "qwen2")
    tok.save(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(
            {
                "eos_token": "<|im_end|>",
                "pad_token": "<|endoftext|>",
                "add_bos_token": False,
                "chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
            },
            f,
        )
    texts = [
        "Hello world! The price is 1234.56 dollars.",
        "直播间今天有优惠，红色外套只要99元！",
        "Emoji 🎉🔥👍 and  spaces\n\nnewlines\t tabs",
        "<|im_start|>user\nIs the red jacket waterproof?<|im_end|>\n",
        "Don't won't I'll we've THEY'RE it's",
    ]
    cases = [{"text": t, "ids": tok.encode(t).ids} for t in texts]
    with open(os.path.join(d, "tokenizer_expected.json"), "w") as f:
        json.dump(cases, f, ensure_ascii=False)
    print("tokenizer", tok.get_vocab_size(), "tokens")


if __name__ == "__main__":
    make_tokenizer()
