#!/usr/bin/env bash
# The training step side by side with PyTorch, in one run on this machine: `hat bench train`
# measures its workloads and writes them (--dump); bench_pytorch.py measures the same tokens,
# positions, attention visibility and scored rows in PyTorch (f32, SDPA, full fine-tune, AdamW),
# one process per workload, with the same thread count. Prints one table with the ratios.
#
# PyTorch comes from PyPI (torch==2.15.0, transformers) into $HAT_HOME/torch-venv (default
# ~/.cache/hat/torch-venv), installed once; PyPI's Linux wheel brings its CUDA libraries along
# (~4 GB of disk), which a CPU run loads but never uses.
# Usage: crates/train/scripts/bench_pytorch.sh DATA.jsonl [hat binary] [threads]
#   DATA: `hat data gen --group 16` output; the hat binary defaults to target/release/hat.
#
# The AVX2 class on an AVX-512 machine: BENCH_ISA=avx2 holds both to AVX2+FMA. hat runs with
# HAT_SIMD=avx2, and its binary must be built without AVX-512 GEMMs
# (`cargo build --release -p hat --no-default-features`: the header then says `f32 gemm:
# fma`); PyTorch runs with ATEN_CPU_CAPABILITY=avx2, MKL_ENABLE_INSTRUCTIONS=AVX2 and
# ONEDNN_MAX_CPU_ISA=AVX2.
set -euo pipefail
DATA="${1:?usage: bench_pytorch.sh DATA.jsonl [hat binary] [threads]}"
HAT="${2:-target/release/hat}"
THREADS="${3:-2}"
TORCH=2.15.0
HOME_DIR="${HAT_HOME:-$HOME/.cache/hat}"
VENV="$HOME_DIR/torch-venv"
HERE="$(cd "$(dirname "$0")" && pwd)"
if ! "$VENV/bin/python" -c "import torch, transformers; assert torch.__version__.startswith('$TORCH')" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "torch==$TORCH" transformers numpy "setuptools>=77"
fi
if [ "${BENCH_ISA:-}" = avx2 ]; then
  export HAT_SIMD=avx2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2
elif [ -n "${BENCH_ISA:-}" ]; then
  echo "BENCH_ISA is avx2 or unset (got $BENCH_ISA)" >&2
  exit 2
fi
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
RAYON_NUM_THREADS="$THREADS" "$HAT" bench train --data "$DATA" --json --dump "$WORK" > "$WORK/hat.txt"
# the first line is the CPU header; the rest is the JSON array of rows
head -1 "$WORK/hat.txt"
if [ "${BENCH_ISA:-}" = avx2 ] && head -1 "$WORK/hat.txt" | grep -q "f32 gemm: avx512"; then
  echo "BENCH_ISA=avx2 needs a hat built with --no-default-features (its GEMMs use AVX-512)" >&2
  exit 2
fi
tail -n +2 "$WORK/hat.txt" > "$WORK/hat.json"
for w in "$WORK"/workload-*.json; do
  # a workload PyTorch cannot run (killed for memory) is a row of the table, not the end of it
  OMP_NUM_THREADS="$THREADS" "$VENV/bin/python" "$HERE/bench_pytorch.py" "$w" --threads "$THREADS" >> "$WORK/torch.jsonl" || {
    rc=$?
    python3 -c 'import json,sys; w=json.load(open(sys.argv[1])); print(json.dumps({"name": w["name"], "tokens": sum(len(s["ids"]) for s in w["sequences"]), "failed": "exit " + sys.argv[2] + (" (killed: out of memory)" if sys.argv[2] == "137" else "")}))' "$w" "$rc" >> "$WORK/torch.jsonl"
  }
done
python3 - "$WORK/hat.json" "$WORK/torch.jsonl" <<'EOF'
import json, sys
hat = json.load(open(sys.argv[1]))
torch = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
ok = [t for t in torch if "failed" not in t]
if ok:
    print(f"PyTorch {ok[0]['torch']}, {ok[0]['threads']} threads, CPU capability {ok[0].get('capability', '?')}")
print("| workload | tokens | hat tok/s | PyTorch tok/s | ratio | hat peak GB | PyTorch peak GB |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for h, t in zip(hat, torch):
    assert h["name"] == t["name"] and h["tokens"] == t["tokens"], (h, t)
    hp = "-" if h["peak_rss_gb"] is None else f"{h['peak_rss_gb']:.2f}"
    if "failed" in t:
        print(f"| {h['name']} | {h['tokens']} | {h['tokens_per_s']:.1f} | failed: {t['failed']} | - | {hp} | - |")
        continue
    print(f"| {h['name']} | {h['tokens']} | {h['tokens_per_s']:.1f} | {t['tokens_per_s']:.1f} | "
          f"{h['tokens_per_s'] / t['tokens_per_s']:.2f}x | {hp} | {t['peak_rss_gb']:.2f} |")
EOF
