#!/usr/bin/env python3
"""One training step of SmolLM2-135M in PyTorch on the CPU, on a workload `hat bench train --dump`
wrote, for the side-by-side in bench_pytorch.sh. Prints one JSON line.

The peer as the issue names it: transformers' Llama, f32, SDPA attention, full fine-tune,
torch.optim.AdamW, the thread count of the run. Weights are random with SmolLM2-135M's shape:
a step's time and memory do not depend on the values. The loss is computed the way a careful
PyTorch user would: the final hidden states are gathered at the scored rows and only those go
through the 49,152-wide output layer. A packed sequence gets its visibility as a 4-D boolean
attention mask (query i sees keys [0, prefix_end[i]) and [segment_start[i], i]) and its
position ids. Run one workload per process so the peak RSS is that workload's.
"""

import argparse
import json
import resource
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

SMOLLM2_135M = dict(
    vocab_size=49152,
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    max_position_embeddings=8192,
    rms_norm_eps=1e-5,
    rope_theta=100000.0,
    tie_word_embeddings=True,
    hidden_act="silu",
)


def mask_of(seq):
    t = len(seq["ids"])
    i = torch.arange(t).unsqueeze(1)
    j = torch.arange(t).unsqueeze(0)
    a = torch.tensor(seq["prefix_end"]).unsqueeze(1)
    b = torch.tensor(seq["segment_start"]).unsqueeze(1)
    causal_only = bool((a == 0).all() and (b == 0).all())
    if causal_only:
        return None
    sees = (j <= i) & ((j < a) | (j >= b))
    return sees.view(1, 1, t, t)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workload")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    with open(args.workload) as f:
        work = json.load(f)

    cfg = LlamaConfig(**SMOLLM2_135M)
    cfg._attn_implementation = "sdpa"
    model = LlamaForCausalLM(cfg).float()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-9, weight_decay=0.01)

    seqs = []
    for s in work["sequences"]:
        seqs.append(
            dict(
                ids=torch.tensor(s["ids"]).unsqueeze(0),
                pos=torch.tensor(s["positions"]).unsqueeze(0),
                mask=mask_of(s),
                rows=torch.tensor(s["loss_rows"]),
                targets=torch.tensor(s["targets"]),
            )
        )
    total = sum(len(s["targets"]) for s in seqs)

    def step():
        opt.zero_grad(set_to_none=True)
        for s in seqs:
            out = model.model(input_ids=s["ids"], position_ids=s["pos"], attention_mask=s["mask"])
            h = out.last_hidden_state[0, s["rows"]]
            logits = model.lm_head(h)
            loss = F.cross_entropy(logits, s["targets"], reduction="sum") / total
            loss.backward()
        opt.step()

    step()  # warm-up (allocates the optimiser state)
    times = []
    for _ in range(max(1, args.repeats)):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    secs = statistics.median(times)
    tokens = sum(s["ids"].shape[1] for s in seqs)
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 / 1024
    print(
        json.dumps(
            dict(
                name=work["name"],
                tokens=tokens,
                loss_tokens=total,
                seconds=secs,
                tokens_per_s=tokens / secs,
                peak_rss_gb=peak_gb,
                torch=torch.__version__,
                threads=args.threads,
                capability=torch.backends.cpu.get_cpu_capability(),
            )
        )
    )


if __name__ == "__main__":
    sys.exit(main())
