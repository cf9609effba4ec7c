#!/usr/bin/env python3
"""Checks a `hat train export --format hf` folder with Hugging Face transformers: it loads with
AutoTokenizer and AutoModelForCausalLM; the tokenizer gives the same ids as hat's on assorted
texts; the chat template renders; and greedy decoding gives the same tokens, with the same
log-probabilities (f32, 1e-3 absolute), as hat's engine on the same folder.

Run with the venv of bench_pytorch.sh (torch, transformers):
  ~/.cache/hat/torch-venv/bin/python crates/train/scripts/check_hf_export.py FOLDER [hat binary]
Exits non-zero on the first mismatch.
"""

import json
import subprocess
import sys
import tempfile

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

TEXTS = [
    "hi Mia, is the hoodie available in size M? how much?",
    "  leading spaces, tabs\tand\nnew lines\n\n",
    "numbers 1234567 and 3.14159, prices ¥299 / $45.50",
    "中文评论：这个多少钱？还有货吗",
    "emoji 🤖🎉 and accents: café naïve ẞ İ",
    "<|im_start|>user\nspecial tokens in text<|im_end|>",
]

CHATS = [
    [{"role": "user", "content": "hi, is the hoodie in stock?"}],
    [
        {"role": "system", "content": "You are Mia, the AI host of a live-shopping stream."},
        {"role": "user", "content": "[comment] momo123: human or ai??"},
    ],
]


def hat(binary, *args):
    out = subprocess.run([binary, *args], check=True, capture_output=True, text=True)
    return out.stdout


def main():
    folder = sys.argv[1]
    binary = sys.argv[2] if len(sys.argv) > 2 else "target/release/hat"
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model.eval()
    print(f"loaded {type(model).__name__} and {type(tok).__name__} from {folder}")

    for text in TEXTS:
        ours = json.loads(hat(binary, "model", "tokenize", "--model", folder, text))
        theirs = tok.encode(text, add_special_tokens=False)
        if ours != theirs:
            sys.exit(f"tokenizer mismatch on {text!r}:\n  hat          {ours}\n  transformers {theirs}")
    print(f"tokenizer: {len(TEXTS)} texts tokenised identically")

    for chat in CHATS:
        ids = tok.apply_chat_template(chat, add_generation_prompt=True, return_dict=False)
        if hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        with torch.no_grad():
            # an explicit mask: the pad token is <|im_end|>, which the prompt contains, and
            # generate would otherwise mask those positions out as padding
            out = model.generate(
                torch.tensor([ids]),
                attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                max_new_tokens=16,
                do_sample=False,
                output_logits=True,
                return_dict_in_generate=True,
                eos_token_id=None,
                pad_token_id=tok.pad_token_id,
            )
        theirs = out.sequences[0, len(ids):].tolist()
        lp = [
            torch.log_softmax(l[0].float(), -1)[t].item() for l, t in zip(out.logits, theirs)
        ]
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(chat, f)
        text = hat(
            binary, "generate", "--model", folder, "--format", "f32", "--chat", f.name,
            "--max-tokens", "16", "--json",
        )
        mine = json.loads(text.strip().splitlines()[-1])
        n = min(len(mine["tokens"]), len(theirs))
        if mine["tokens"][:n] != theirs[:n] or n == 0:
            sys.exit(f"greedy mismatch on {chat}:\n  hat          {mine['tokens']}\n  transformers {theirs}")
        worst = max(abs(a - b) for a, b in zip(mine["logprobs"][:n], lp[:n]))
        if worst > 1e-3:
            sys.exit(f"log-probabilities differ by {worst:.2e} on {chat}")
        print(f"greedy: {n} tokens identical, log-probabilities within {worst:.1e}: {tok.decode(theirs)!r}")
    print("ok")


if __name__ == "__main__":
    main()
