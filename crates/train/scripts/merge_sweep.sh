#!/usr/bin/env bash
# Weight interpolation (WiSE-FT) of a fine-tuned model toward its base at several ratios, each
# evaluated on lsqa, hvqa and IFEval the way the model of record is: how much general ability
# (IFEval) comes back per point of task skill (lsqa, hvqa) given up, without training.
#   merge  hat train merge MODEL --base BASE --ratio R --format q8_0  -> runs/merge/NAME-rR-q8_0.gguf
#   eval   hat eval ... --suite lsqa,hvqa,ifeval                       -> runs/eval-merge-NAME-rR
# Rerunning resumes: a merged file is kept, an evaluation with results for every suite is
# skipped, one cut off part-way resumes (`--resume`).
# Cost on 2 Zen 5 cores (AVX-512): a few seconds a merge, ~25 min of evaluation a ratio.
# Usage: [HAT=path/to/hat] [BASE=default] [SUITES=lsqa,hvqa,ifeval] \
#          crates/train/scripts/merge_sweep.sh MODEL NAME RATIO...
#   MODEL  the fine-tuned model: a Hugging Face folder (a run's `-hf` export) or a GGUF file
#   NAME   a short name for the files (e.g. mor-s120)
#   RATIO  0 < R <= 2 (1 is the fine-tuned model itself; 0.8 keeps 80% of the fine-tuning)
# Example (the model of record of model_of_record.sh):
#   crates/train/scripts/merge_sweep.sh runs/chain-sc-ft16-rp600x8-bf16-leg5-s120-hf mor-s120 0.9 0.8 0.6
set -euo pipefail
cd "$(dirname "$0")/../../.."
[ $# -ge 3 ] || { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
model=$1 name=$2; shift 2
hat=${HAT:-target/release/hat}
base=${BASE:-default}
suites=${SUITES:-lsqa,hvqa,ifeval}
[ -x "$hat" ] || { echo "no hat binary at $hat: cargo build --release -p hat, or set HAT" >&2; exit 2; }
[ -e "$model" ] || { echo "$model: no such model (a Hugging Face folder or a GGUF file)" >&2; exit 2; }
[[ "$name" =~ ^[A-Za-z0-9._-]+$ ]] || { echo "NAME '$name' must be letters, digits, '.', '_' or '-'" >&2; exit 2; }
for r in "$@"; do
  [[ "$r" =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "RATIO '$r' is not a number such as 0.8" >&2; exit 2; }
done
mkdir -p runs/merge
for r in "$@"; do
  out=runs/merge/$name-r$r-q8_0.gguf
  [ -f "$out" ] || "$hat" train merge "$model" --base "$base" --ratio "$r" --format q8_0 --out "$out"
  ev=runs/eval-merge-$name-r$r
  missing=0
  for s in ${suites//,/ }; do [ -f $ev/$s/results.json ] || missing=1; done
  if [ $missing = 1 ]; then
    again=(); [ -d $ev ] && again=(--resume)
    "$hat" eval --model "$out" --format original --threads 2 --suite "$suites" --batch 8 \
      --max-tokens 128 --ifeval-max-tokens 512 --out $ev "${again[@]}"
  fi
done
# one line a ratio: the score of each suite (results.json's "score", 0-100)
for r in "$@"; do
  ev=runs/eval-merge-$name-r$r
  line="$name r=$r"
  for s in ${suites//,/ }; do
    v=$(python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))['score'],1))" $ev/$s/results.json 2>/dev/null || echo -)
    line="$line  $s $v"
  done
  echo "$line"
done
