#!/usr/bin/env bash
# Trains the stage-1 model of record from the base model in one resumable command: the legs
# of docs/results.md that led to leg 5 with replay drawn 8 times an epoch, extended to 120
# steps (lsqa 79.1 / hvqa 62.4 / IFEval 23.8; 500 one-pack steps in all), each with the recipe
# it was published with (rebuilt from the base model in session 39 with binary dc19b11: lsqa
# 80.9 / hvqa 56.5 / IFEval 20.0, a rerun's spread from the published figures below):
#   leg 1  failing kinds weighted, shared scenes, 120 steps, f32 products  -> runs/chain-sc-leg1
#   leg 2  + 16 first-turn extras a scene, 60 steps, bf16 products          -> runs/chain-sc-ft16-bf16-leg2
#   leg 3  the same on fresh data, 100 steps                                -> runs/chain-sc-ft16-bf16-leg3
#   leg 4  the same on fresh data, 100 steps (lsqa 80.6 / hvqa 57.4)        -> runs/chain-sc-ft16-bf16-leg4
#   leg 5  the same on fresh data with the base model's checked answers to 600 general
#          prompts (seed 41) drawn 8 times an epoch, 60 steps                -> runs/chain-sc-ft16-rp600x8-bf16-leg5
#          then 60 more (`--resume --max-steps 120`, the schedule restarted) -> runs/chain-sc-ft16-rp600x8-bf16-leg5-s120
# Legs 4 and 5-s120 are evaluated (lsqa, hvqa, IFEval; `runs/eval-chain-sc-ft16-bf16-leg4`,
# `runs/eval-chain-sc-ft16-rp600x8-bf16-leg5-s120`; `...-ft16-...` without -bf16 with
# MATMUL=f32); evaluate an earlier leg with its `hsa_chain.sh` line below
# without NO_EVAL and with this script's KIND_WEIGHTS and SCENE=1 (without them the leg's name
# differs and a new leg is trained). Rerunning the command
# resumes: a finished leg is skipped, a leg with checkpoints resumes, so it can be spread over
# several sessions while `runs/` survives.
# Cost on 2 Zen 5 cores with AVX-512 BF16: ~1.3 h (leg 1, f32) + ~0.75 + 0.9 + 0.9 + 1.3 h of
# training, a few minutes of data per leg, ~20 min of replay answers, ~25 min of evaluation
# per evaluated leg; peak memory ~14 GB.
# bf16 products need AVX-512 BF16: on other CPUs set MATMUL=f32 (slower, not the published
# recipe). The training data drawn today differs from the published legs' (commit 57e8b28
# added link-number forms to the training split), so expect the scores near, not at, theirs.
# WITH_REPLAY=N is the untried IFEval lever of issue 10: every leg also trains on the base
# model's checked answers to N general prompts (`hat data replay`, drawn per leg with seed
# 40 + leg; ~15-25 min a leg on two cores since 2e900e0), legs and evaluation named with -rpN
# (runs/chain-sc-rpN-leg1, ..., runs/eval-chain-sc-ft16-rpN-bf16-leg4); not a published recipe.
# WITH_REPLAY_REPEAT=K (with WITH_REPLAY) draws those answers K times an epoch in every leg
# (`hat train sft --repeat`; a single leg 5 gave IFEval 14.6 / 16.7 / 22.2 at K = 1 / 4 / 8,
# docs/results.md), named -rpNxK. With WITH_REPLAY the script ends at leg 4 (leg 5's replay
# is the published recipe's own).
# Usage: [HAT=path/to/hat] [MATMUL=f32] [WITH_REPLAY=600 [WITH_REPLAY_REPEAT=8]] crates/train/scripts/model_of_record.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
chain=crates/train/scripts/hsa_chain.sh
export KIND_WEIGHTS=compare=3,recommend_budget=3,product_fact=3,final_price=3,variant_stock=3,cue_pin=2,nonexistent_product=2,after_sales=2,followup=2,chinese=2,prompt_injection=2,cue_flash_sale=2
export SCENE=1
mm=${MATMUL:-bf16}
[ "$mm" = bf16 ] || [ "$mm" = f32 ] || { echo "MATMUL='$mm' is not f32 or bf16" >&2; exit 2; }
rp=${WITH_REPLAY:-}
[ -z "$rp" ] || [[ "$rp" =~ ^[1-9][0-9]*$ ]] || { echo "WITH_REPLAY='$rp' is not a number of prompts (e.g. 600)" >&2; exit 2; }
rk=${WITH_REPLAY_REPEAT:-}
[ -z "$rk" ] || [ -n "$rp" ] || { echo "WITH_REPLAY_REPEAT=K repeats the replay answers: set WITH_REPLAY=N as well" >&2; exit 2; }
[ -z "$rk" ] || [[ "$rk" =~ ^[1-9][0-9]*$ ]] || { echo "WITH_REPLAY_REPEAT='$rk' is not a number of times (e.g. 8)" >&2; exit 2; }
# every leg's recipe in full: nothing set in the caller's environment leaks into a leg
unset STEPS FIRST FROM REPLAY REPLAY_REPEAT RECOVERY CALLW NO_EVAL ELEMENT KEYWORD
tag=; replay=()
[ -n "$rp" ] && { tag=-rp$rp; replay=(REPLAY=$rp); }
[ -n "$rk" ] && { tag=-rp${rp}x$rk; replay=(REPLAY=$rp REPLAY_REPEAT=$rk); }
NO_EVAL=1 MATMUL= env "${replay[@]}" "$chain" 1
NO_EVAL=1 MATMUL=$mm FIRST=16 STEPS=60 FROM=runs/chain-sc$tag-leg1-hf env "${replay[@]}" "$chain" 2
NO_EVAL=1 MATMUL=$mm FIRST=16 STEPS=100 env "${replay[@]}" "$chain" 3
MATMUL=$mm FIRST=16 STEPS=100 env "${replay[@]}" "$chain" 4
m=-bf16; [ "$mm" = f32 ] && m=
if [ -n "$rp" ]; then
  echo "model of record (with WITH_REPLAY, leg 4): runs/chain-sc-ft16$tag$m-leg4/model-q8_0.gguf"
  exit 0
fi
# leg 5: the published row reused leg 1's replay answers (seed 41); drawn again the same way
hat=${HAT:-target/release/hat}
[ -f runs/replay-sc-rp600-leg5.jsonl ] || "$hat" data replay --model default --prompts 600 \
  --samples 4 --max-tokens 512 --seed 41 --out runs/replay-sc-rp600-leg5.jsonl --resume
NO_EVAL=1 MATMUL=$mm FIRST=16 STEPS=60 REPLAY=600 REPLAY_REPEAT=8 FROM=runs/chain-sc-ft16$m-leg4-hf "$chain" 5
leg5=runs/chain-sc-ft16-rp600x8$m-leg5
out=$leg5-s120
if [ ! -f $out/model-q8_0.gguf ]; then
  # the extension runs in a copy, so the 60-step leg stays what the chain script skips
  [ -d $out ] || { rm -rf $out.tmp; cp -r $leg5 $out.tmp; rm -f $out.tmp/model-*.gguf; mv $out.tmp $out; }
  "$hat" train sft --out $out --resume --max-steps 120
fi
[ -d $out-hf ] || "$hat" train export $out --format hf --out $out-hf
ev=runs/eval-chain-sc-ft16-rp600x8$m-leg5-s120
if [ ! -f $ev/lsqa/results.json ] || [ ! -f $ev/hvqa/results.json ] || [ ! -f $ev/ifeval/results.json ]; then
  again=(); [ -d $ev ] && again=(--resume)
  "$hat" eval --model $out/model-q8_0.gguf --format original --threads 2 \
    --suite lsqa,hvqa,ifeval --batch 8 --max-tokens 128 --ifeval-max-tokens 512 --out $ev "${again[@]}"
fi
echo "model of record: $out/model-q8_0.gguf"
