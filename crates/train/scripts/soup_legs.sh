#!/usr/bin/env bash
# The soup of docs/results.md "Session 43" in one resumable command: four 40-step legs from the
# model of record that differ only in their agent data or loss weighting (broad_replay_leg.sh
# as published, with DECISION=4, with AGENT=rq and with AGENT=sl; none evaluated alone), their
# uniform average (`hat train soup`), and its evaluation. Published (session 43, from the four
# runs made one by one with the same configs, binaries 0d2e056 / 845a290 / c2999aa / 714fae3;
# soup 88b0b9f): lsqa 82.5 / hvqa 57.6 / IFEval 26.2. This script was written after them and not
# run end to end here: a rerun lands within a rerun's spread (5-14 items a suite), not on those
# exact figures.
#   legs   4 x 40 steps, ~17-20 min each        -> runs/broad-leg-s53{,-dw4,-rq,-sl}
#   soup   seconds                              -> runs/soup-s53-q8_0.gguf
#   eval   lsqa, hvqa, ifeval, ~15 min          -> runs/eval-soup-s53
# Needs what broad_replay_leg.sh needs (model_of_record.sh's files in runs/). Cost on 2 Zen 5
# cores with AVX-512 BF16: ~95 min (plus the broad replay answers, 21 min, if not there yet).
# Usage: [HAT=path/to/hat] [MATMUL=f32] crates/train/scripts/soup_legs.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
hat=${HAT:-target/release/hat}
[ -x "$hat" ] || { echo "no hat binary at $hat: cargo build --release -p hat, or set HAT" >&2; exit 2; }
leg=crates/train/scripts/broad_replay_leg.sh
HAT=$hat EVAL=0 $leg
HAT=$hat EVAL=0 DECISION=4 $leg
HAT=$hat EVAL=0 AGENT=rq $leg
HAT=$hat EVAL=0 AGENT=sl $leg
soup=runs/soup-s53-q8_0.gguf
[ -f $soup ] || "$hat" train soup runs/broad-leg-s53/model-hf runs/broad-leg-s53-dw4/model-hf \
  runs/broad-leg-s53-rq/model-hf runs/broad-leg-s53-sl/model-hf --out $soup
ev=runs/eval-soup-s53
if [ ! -f $ev/lsqa/results.json ] || [ ! -f $ev/hvqa/results.json ] || [ ! -f $ev/ifeval/results.json ]; then
  again=(); [ -d $ev ] && again=(--resume)
  "$hat" eval --model $soup --format original --threads 2 --suite lsqa,hvqa,ifeval \
    --batch 8 --max-tokens 128 --ifeval-max-tokens 512 --out $ev "${again[@]}"
fi
echo "soup: $soup; scores in $ev"
