#!/usr/bin/env bash
# Everything the published stage-1 rows need, from the base model, in one resumable command:
# the model of record (model_of_record.sh: legs 1-5, ~5.5 h of training on 2 Zen 5 cores with
# AVX-512 BF16), the four 40-step soup members and their soup (soup_legs.sh, ~95 min), and the
# soup served (`--call-grammar`, ~8 min). Rerun the same command after an interruption: every
# finished step is skipped, a killed training run resumes from its checkpoint. The machine's
# disk was lost twice (sessions 37 and 44), so this is how a new machine gets the models back;
# it spans three sessions of 3 hours.
#   model of record  runs/chain-sc-ft16-rp600x8-bf16-leg5-s120{,-hf}  (eval: runs/eval-chain-sc-ft16-rp600x8-bf16-leg5-s120)
#   soup             runs/soup-s53-q8_0.gguf                           (eval: runs/eval-soup-s53)
#   soup served      runs/eval-soup-s53-cg
# Usage: [HAT=path/to/hat] [MATMUL=f32] crates/train/scripts/rebuild.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
hat=${HAT:-target/release/hat}
[ -x "$hat" ] || { echo "no hat binary at $hat: cargo build --release -p hat, or set HAT" >&2; exit 2; }
"$hat" model fetch >/dev/null   # a no-op once the verified file is there
HAT=$hat crates/train/scripts/model_of_record.sh
HAT=$hat crates/train/scripts/soup_legs.sh
ev=runs/eval-soup-s53-cg
if [ ! -f $ev/lsqa/results.json ] || [ ! -f $ev/hvqa/results.json ]; then
  again=(); [ -d $ev ] && again=(--resume)
  "$hat" eval --model runs/soup-s53-q8_0.gguf --format original --threads 2 --suite hvqa,lsqa \
    --batch 8 --max-tokens 128 --call-grammar --out $ev "${again[@]}"
fi
echo "rebuilt: runs/soup-s53-q8_0.gguf (free: runs/eval-soup-s53, served: $ev)"
