#!/usr/bin/env bash
# Leg 7 of docs/results.md in one resumable command: 40 more one-pack SFT steps from the model
# of record (model_of_record.sh) with the base model's answers to the broad prompt set, some
# repaired (`hat data replay --prompt-set broad --repair`), then its evaluation and its r 0.9
# merge toward the base model (merge_sweep.sh). Published (session 41, binary 0d2e056): lsqa
# 80.6 / hvqa 55.9 / IFEval 25.3; merged 82.5 / 57.9 / 24.5.
#   replay  --prompts 900 --seed 53: 468 answers, 20.7 min       -> runs/replay-broad-rep-p900-s53.jsonl
#   leg     40 steps, lr 2e-4, bf16 products, 19.6 min            -> runs/broad-leg-s53 (config.toml inside)
#   eval    ifeval, lsqa, hvqa, ~13 min                           -> runs/eval-broad-leg-s53
#   merge   r 0.9, evaluated the same way, ~13 min                -> runs/eval-merge-broad-leg-s53-r0.9
# The leg trains on leg 5's files, which model_of_record.sh leaves in runs/: its HSA and
# production-harness trajectories (runs/chain-hsa-s29-sc-ft16.jsonl, runs/fh-s30-sc-ft16.jsonl)
# and its replay answers (runs/replay-sc-rp600-leg5.jsonl, drawn 4 times an epoch), and the
# broad answers drawn 6 times (47% of the loss). Rerunning resumes every step.
# Cost on 2 Zen 5 cores with AVX-512 BF16: ~75 min; bf16 products need AVX-512 BF16 (on other
# CPUs set MATMUL=f32: slower, not the published recipe).
# DECISION=K counts the decision tokens of the agent trajectories K times (`hat train sft
# --decision-weight K`: each turn's first token, a call's tool name and argument values); the
# leg is then named broad-leg-sSEED-dwK.
# AGENT=rq trains on the two agent files with their operator cues rephrased (rephrase_cues.py,
# seed 42), AGENT=sl on them with half the scenes' product listings shuffled (shuffle_listing.py,
# fraction 0.5, seed 43); the rewritten files are written beside the originals once and the leg
# is named ...-rq / ...-sl. EVAL=0 stops after training (no evaluation, no merge): soup_legs.sh
# builds its members that way.
# Usage: [HAT=path/to/hat] [MATMUL=f32] [SEED=53] [DECISION=4] [AGENT=rq|sl] [EVAL=0] [START=model-hf-folder] crates/train/scripts/broad_replay_leg.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
hat=${HAT:-target/release/hat}
mm=${MATMUL:-bf16}
seed=${SEED:-53}
dw=${DECISION:-1}
start=${START:-runs/chain-sc-ft16-rp600x8-bf16-leg5-s120-hf}
agent=${AGENT:-}
evaluate=${EVAL:-1}
[ -z "$agent" ] || [ "$agent" = rq ] || [ "$agent" = sl ] || { echo "AGENT='$agent' is not rq or sl" >&2; exit 2; }
[ "$evaluate" = 0 ] || [ "$evaluate" = 1 ] || { echo "EVAL='$evaluate' is not 0 or 1" >&2; exit 2; }
[ "$mm" = bf16 ] || [ "$mm" = f32 ] || { echo "MATMUL='$mm' is not f32 or bf16" >&2; exit 2; }
[[ "$seed" =~ ^[0-9]+$ ]] || { echo "SEED='$seed' is not a number" >&2; exit 2; }
[[ "$dw" =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "DECISION='$dw' is not a number" >&2; exit 2; }
[ -x "$hat" ] || { echo "no hat binary at $hat: cargo build --release -p hat, or set HAT" >&2; exit 2; }
[ -e "$start" ] || { echo "$start: no such model; run crates/train/scripts/model_of_record.sh first, or set START" >&2; exit 2; }
for f in runs/chain-hsa-s29-sc-ft16.jsonl runs/fh-s30-sc-ft16.jsonl runs/replay-sc-rp600-leg5.jsonl; do
  [ -f $f ] || { echo "$f: missing; model_of_record.sh writes it (leg 5's data)" >&2; exit 2; }
done
replay=runs/replay-broad-rep-p900-s$seed.jsonl
[ -f $replay ] || "$hat" data replay --model default --prompt-set broad --repair --prompts 900 \
  --samples 4 --max-tokens 512 --seed $seed --batch 16 --threads 2 --out $replay --resume
name=broad-leg-s$seed
weights=""
if [ "$dw" != 1 ]; then
  name=$name-dw$dw
  weights="decision_weight = $dw"
fi
hsa=runs/chain-hsa-s29-sc-ft16.jsonl
fh=runs/fh-s30-sc-ft16.jsonl
if [ -n "$agent" ]; then
  for f in chain-hsa-s29-sc-ft16 fh-s30-sc-ft16; do
    [ -f runs/$f-$agent.jsonl ] && continue
    # both scripts rename their output into place when done
    case $agent in
      rq) crates/train/scripts/rephrase_cues.py runs/$f.jsonl runs/$f-$agent.jsonl 42 ;;
      sl) crates/train/scripts/shuffle_listing.py runs/$f.jsonl runs/$f-$agent.jsonl 0.5 43 ;;
    esac
  done
  hsa=runs/chain-hsa-s29-sc-ft16-$agent.jsonl
  fh=runs/fh-s30-sc-ft16-$agent.jsonl
  name=$name-$agent
fi
out=runs/$name
cfg=runs/$name.toml
cat > $cfg <<EOF
model = "$start"
data = [
    "$hsa",
    "$fh",
    "runs/replay-sc-rp600-leg5.jsonl",
    "$replay",
]
seed = 6
max_steps = 40
tokens_per_step = 1
val_fraction = 0.02
val_max = 64
eval_every = 20
save_every = 10
keep = 2
on_too_long = "error"
export = ["q8_0", "hf"]
matmul = "$mm"
$weights

[optim]
lr = 0.0002
min_lr_ratio = 0.1
warmup_steps = 4
beta1 = 0.9
beta2 = 0.95
eps = 0.00000001
weight_decay = 0.01
clip_norm = 1.0

[pack]
max_tokens = 8192
max_conversations = 32
min_prefix = 64
merge_below = 1024

[repeat]
"runs/replay-sc-rp600-leg5.jsonl" = 4
"$replay" = 6
EOF
if [ ! -f $out/model-q8_0.gguf ]; then
  resume=(); ls $out/checkpoints/*/state.json >/dev/null 2>&1 && resume=(--resume)
  "$hat" train sft --config $cfg --out $out "${resume[@]}"
fi
if [ "$evaluate" = 0 ]; then
  echo "leg: $out/model-q8_0.gguf (not evaluated: EVAL=0)"
  exit 0
fi
ev=runs/eval-$name
if [ ! -f $ev/lsqa/results.json ] || [ ! -f $ev/hvqa/results.json ] || [ ! -f $ev/ifeval/results.json ]; then
  again=(); [ -d $ev ] && again=(--resume)
  "$hat" eval --model $out/model-q8_0.gguf --format original --threads 2 --suite ifeval,lsqa,hvqa \
    --batch 8 --max-tokens 128 --ifeval-max-tokens 512 --out $ev "${again[@]}"
fi
HAT=$hat crates/train/scripts/merge_sweep.sh $out/model-hf $name 0.9
echo "leg: $out/model-q8_0.gguf; merged: runs/merge/$name-r0.9-q8_0.gguf"
