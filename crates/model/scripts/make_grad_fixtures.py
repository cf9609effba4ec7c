#!/usr/bin/env python3
"""Generates the PyTorch gradient fixtures in crates/model/tests/fixtures/<arch>/grads.safetensors
(committed; CI never runs this): the loss and the gradient of every parameter of the tiny llama
and qwen2 fixture models (make_fixtures.py) on two inputs, computed by transformers in f32:

  causal   one 24-token sequence, scored at 9 of its rows
  packed   a 10-token prefix and three conversations of 7, 6 and 5 tokens packed after it:
           each conversation sees the prefix and itself (a 4-D additive attention mask, eager attention), its
           positions continue from the end of the prefix, and rows in the prefix and in every
           conversation are scored

The loss is the mean negative log-likelihood over the scored rows. Stored per input NAME:
NAME.ids, NAME.positions, NAME.prefix_end, NAME.segment_start, NAME.loss_rows, NAME.targets
(int64), NAME.loss (f32 scalar) and NAME.grad.<parameter name> (f32, Hugging Face names).
crates/model/tests/grad.rs checks the training path against them (1e-4 relative).

Setup: the venv of crates/train/scripts/bench_pytorch.sh, or python3 -m venv /tmp/pyref &&
/tmp/pyref/bin/pip install torch transformers safetensors
Run:   python crates/model/scripts/make_grad_fixtures.py
"""

import os

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")


def causal_case(g, vocab):
    t = 24
    ids = torch.randint(0, vocab, (t,), generator=g)
    rows = torch.tensor([2, 3, 7, 8, 9, 15, 16, 21, 22])
    return dict(
        ids=ids,
        positions=torch.arange(t),
        prefix_end=torch.zeros(t, dtype=torch.long),
        segment_start=torch.zeros(t, dtype=torch.long),
        loss_rows=rows,
        targets=torch.randint(0, vocab, (len(rows),), generator=g),
    )


def packed_case(g, vocab):
    prefix, segs = 10, [7, 6, 5]
    t = prefix + sum(segs)
    ids = torch.randint(0, vocab, (t,), generator=g)
    positions = list(range(prefix))
    a = [0] * prefix
    b = [0] * prefix
    start = prefix
    for n in segs:
        positions += list(range(prefix, prefix + n))
        a += [prefix] * n
        b += [start] * n
        start += n
    rows = torch.tensor([4, 9, 10, 12, 16, 17, 19, 22, 23, 25, 27])
    return dict(
        ids=ids,
        positions=torch.tensor(positions),
        prefix_end=torch.tensor(a),
        segment_start=torch.tensor(b),
        loss_rows=rows,
        targets=torch.randint(0, vocab, (len(rows),), generator=g),
    )


def loss_and_grads(model, case):
    t = len(case["ids"])
    i = torch.arange(t).unsqueeze(1)
    j = torch.arange(t).unsqueeze(0)
    a = case["prefix_end"].unsqueeze(1)
    b = case["segment_start"].unsqueeze(1)
    sees = ((j <= i) & ((j < a) | (j >= b))).view(1, 1, t, t)
    # additive form: eager attention adds the mask to the scores
    mask = torch.zeros(1, 1, t, t).masked_fill(~sees, torch.finfo(torch.float32).min)
    model.zero_grad(set_to_none=True)
    out = model(
        input_ids=case["ids"].unsqueeze(0),
        position_ids=case["positions"].unsqueeze(0),
        attention_mask=mask,
    )
    logits = out.logits[0, case["loss_rows"]]
    loss = F.cross_entropy(logits, case["targets"], reduction="mean")
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    return loss.detach(), grads


def main():
    for arch, seed in [("llama", 11), ("qwen2", 12)]:
        folder = os.path.join(FIXTURES, arch)
        model = AutoModelForCausalLM.from_pretrained(
            folder, dtype=torch.float32, attn_implementation="eager"
        )
        model.train()
        g = torch.Generator().manual_seed(seed)
        vocab = model.config.vocab_size
        out = {}
        for name, case in [("causal", causal_case(g, vocab)), ("packed", packed_case(g, vocab))]:
            loss, grads = loss_and_grads(model, case)
            for k, v in case.items():
                out[f"{name}.{k}"] = v.to(torch.int64).contiguous()
            out[f"{name}.loss"] = loss.reshape(1).float()
            for k, v in grads.items():
                out[f"{name}.grad.{k}"] = v.float().contiguous()
            print(arch, name, "loss", float(loss), "params", len(grads))
        save_file(out, os.path.join(folder, "grads.safetensors"))


if __name__ == "__main__":
    main()
