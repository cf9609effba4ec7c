#!/usr/bin/env bash
# The HSA-SFT chain of docs/results.md ("Training tool names that mean nothing"), from the base
# model, leg after leg, each on fresh data: 30% of the HSA groups with meaningless tool names,
# 1,000 production trajectories, 120 one-pack steps (`--preset cpu`), then an hf export that
# the next leg starts from, and a full evaluation. Resumable: rerun the same command; a leg
# whose model exists is skipped, a leg with checkpoints resumes.
# Each leg takes about 65-75 min of training on 2 Zen 5 cores (AVX-512; ~4 h on 2 AVX2-only
# Zen 3 cores, 67 tokens/s: there, set STEPS) and ~20 min of
# evaluation; peak memory ~14 GB (do not run another training or `hat train pipeline` beside it
# on 24 GiB). Outputs: runs/chain-legK (run, checkpoints, GGUF exports), runs/chain-legK-hf,
# runs/eval-chain-legK.
# Usage: [HAT=path/to/hat] crates/train/scripts/hsa_chain.sh LEG...
#   legs 1 2 3 ...; leg k draws seeds 19+2k (HSA), 20+2k (production), 29+2k (extra HSA groups
#   with meaningless names); leg k > 1 starts from leg k-1's export.
#   KIND_WEIGHTS=compare=3,variant_stock=3,... passes `--kind-weights` to the data generated
#   while it is set (a leg whose data files exist keeps them; docs/results.md "A third leg
#   with the failing task kinds drawn more often"). STEPS=N trains N one-pack steps a leg
#   instead of the preset's 120 (`--max-steps`). SCENE=1 (any value but 0 or empty) draws a
#   leg's data with `--shared-scene` (each group of 16 is one scene: identical system prompts, so a pack holds
#   the whole group; files named *-sc.jsonl; docs/results.md "Shared scenes").
#   REPLAY=N mixes into each leg's SFT data `hat data replay` answers of the base model to N
#   general prompts (seed 40+k; the base model's, not the previous leg's: its general answers
#   are the ones to keep; docs/results.md "Replay in stage 1"); legs named chain-sc-rpN-legK.
#   REPLAY_REPEAT=K (with REPLAY) draws the replay answers K times an epoch (`--repeat`), a
#   larger share of the steps from the same answers; legs named chain-sc-rpNxK-legK.
#   RECOVERY=P passes `--recovery P` to the data generated while it is set: a share P of the
#   trajectories first look up a wrong product and correct it (docs/training.md); data files
#   and legs named with -rcP (e.g. chain-sc-rc0.4-leg4). FROM=DIR starts the first leg named
#   from DIR instead of the previous leg's export (e.g. FROM=runs/chain-sc-leg3-hf).
#   FIRST=N passes `--first-turns N` to the data generated while it is set (N more tasks per
#   scene written up to the teacher's first turn; needs SCENE=1) and trains with `--pack 16+N`;
#   data files and legs named with -ftN (docs/training.md "First-turn extras").
#   MATMUL=bf16 trains with bf16 products (`--matmul bf16`, CPUs with AVX-512 BF16); legs
#   named chain...-bf16-legK (the data files are the same as without it).
#   CALLW=K counts the loss of tool-calling turns K times (`--call-weight K`); legs named
#   chain...-cwK-legK (the data files are the same as without it).
#   ELEMENT=P passes `--element-syntaxes P` to the HSA data generated while it is set (not the
#   production data): a share P of the augmented states writes its calls in an element-family
#   syntax (`<exec fn="name">{...}</exec>`; docs/harness-format.md); data files and legs named
#   with -elP (e.g. chain-sc-el0.7-ft16-bf16-leg5).
#   KEYWORD=P the same with `--keyword-syntaxes P` (`RUN name(key="value")`); with ELEMENT,
#   the two add up to at most 1; data files and legs named with -kwP.
#   NO_EVAL=1 (any value but 0 or empty) skips a leg's evaluation (a leg the next one starts from; evaluate it later by
#   running the same command without it).
set -euo pipefail
cd "$(dirname "$0")/../../.."
HAT=${HAT:-target/release/hat}
weights=()
[ -n "${KIND_WEIGHTS:-}" ] && weights=(--kind-weights "$KIND_WEIGHTS")
steps=()
[ -n "${STEPS:-}" ] && steps=(--max-steps "$STEPS")
scene=(); sc=
[ "${SCENE:-0}" != 0 ] && { scene=(--shared-scene); sc=-sc; }
rp=
if [ -n "${REPLAY:-}" ]; then
  [[ "$REPLAY" =~ ^[1-9][0-9]*$ ]] || { echo "REPLAY='$REPLAY' is not a number of prompts (e.g. 600)" >&2; exit 2; }
  rp=-rp$REPLAY
fi
rx=$rp; repeat_k=
if [ -n "${REPLAY_REPEAT:-}" ]; then
  [ -n "$rp" ] || { echo "REPLAY_REPEAT=K repeats the replay answers: set REPLAY=N as well" >&2; exit 2; }
  [[ "$REPLAY_REPEAT" =~ ^[1-9][0-9]*$ ]] || { echo "REPLAY_REPEAT='$REPLAY_REPEAT' is not a number of times (e.g. 4)" >&2; exit 2; }
  rx=${rp}x$REPLAY_REPEAT; repeat_k=$REPLAY_REPEAT
fi
rc=; recovery=()
if [ -n "${RECOVERY:-}" ]; then
  [[ "$RECOVERY" =~ ^(0(\.[0-9]+)?|1(\.0+)?)$ ]] || { echo "RECOVERY='$RECOVERY' is not a share from 0 to 1 (e.g. 0.4)" >&2; exit 2; }
  rc=-rc$RECOVERY; recovery=(--recovery "$RECOVERY")
fi
el=; element=()
if [ -n "${ELEMENT:-}" ]; then
  [[ "$ELEMENT" =~ ^(0(\.[0-9]+)?|1(\.0+)?)$ ]] || { echo "ELEMENT='$ELEMENT' is not a share from 0 to 1 (e.g. 0.7)" >&2; exit 2; }
  el=-el$ELEMENT; element=(--element-syntaxes "$ELEMENT")
fi
kw=; keyword=()
if [ -n "${KEYWORD:-}" ]; then
  [[ "$KEYWORD" =~ ^(0(\.[0-9]+)?|1(\.0+)?)$ ]] || { echo "KEYWORD='$KEYWORD' is not a share from 0 to 1 (e.g. 0.3)" >&2; exit 2; }
  kw=-kw$KEYWORD; keyword=(--keyword-syntaxes "$KEYWORD")
fi
ft=; first=(); pack=()
if [ -n "${FIRST:-}" ]; then
  [[ "$FIRST" =~ ^[1-9][0-9]*$ ]] || { echo "FIRST='$FIRST' is not a number of tasks (e.g. 16)" >&2; exit 2; }
  [ -n "$sc" ] || { echo "FIRST=N adds first-turn tasks to shared scenes: set SCENE=1 as well" >&2; exit 2; }
  ft=-ft$FIRST; first=(--first-turns "$FIRST"); pack=(--pack $((16 + FIRST)))
fi
d=$sc$rc$el$kw$ft
mm=; matmul=()
if [ -n "${MATMUL:-}" ]; then
  [ "$MATMUL" = bf16 ] || [ "$MATMUL" = f32 ] || { echo "MATMUL='$MATMUL' is not f32 or bf16" >&2; exit 2; }
  matmul=(--matmul "$MATMUL"); [ "$MATMUL" = bf16 ] && mm=-bf16
fi
cw=; callw=()
if [ -n "${CALLW:-}" ]; then
  [[ "$CALLW" =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "CALLW='$CALLW' is not a loss weight (e.g. 3)" >&2; exit 2; }
  cw=-cw$CALLW; callw=(--call-weight "$CALLW")
fi
mm=$mm$cw
[ -x "$HAT" ] || { echo "no hat binary at $HAT: cargo build --release -p hat, or set HAT" >&2; exit 2; }
[ $# -gt 0 ] || { echo "usage: crates/train/scripts/hsa_chain.sh LEG... (e.g. 1 2 3)" >&2; exit 2; }
prev=default
for leg in "$@"; do
  [[ "$leg" =~ ^[1-9][0-9]*$ ]] || { echo "leg '$leg' is not a leg number (1, 2, 3 ...)" >&2; exit 2; }
  s1=$((19 + 2 * leg)); s2=$((20 + 2 * leg)); s3=$((29 + 2 * leg))
  out=runs/chain$d$rx$mm-leg$leg
  [ "$leg" -gt 1 ] && prev=runs/chain$d$rx$mm-leg$((leg - 1))-hf
  [ -n "${FROM:-}" ] && [ "$leg" = "$1" ] && prev=$FROM
  echo "leg $leg: seeds $s1/$s2/$s3 from $prev -> $out ($(date -u +%H:%M))"
  if [ ! -f "$out/model-q8_0.gguf" ]; then
    [ -f runs/chain-hsa-s$s1$d.jsonl ] || {
      $HAT data gen --tasks 2000 --variants 120 --group 16 --seed $s1 "${weights[@]}" "${scene[@]}" "${recovery[@]}" "${first[@]}" "${element[@]}" "${keyword[@]}" --force --out runs/hsa-v120-s$s1$d.jsonl
      $HAT data gen --tasks 8000 --variants 480 --group 16 --seed $s3 "${weights[@]}" "${scene[@]}" "${recovery[@]}" "${first[@]}" "${element[@]}" "${keyword[@]}" --force --out runs/hsa-v480-s$s3$d.jsonl
      python3 - runs/hsa-v120-s$s1$d.jsonl runs/hsa-v480-s$s3$d.jsonl runs/chain-hsa-s$s1$d.jsonl $((16 + ${FIRST:-0})) <<'PY'
import json, re, sys
CODE = ('amber', 'cobalt', 'crimson', 'dusty', 'golden', 'hazel', 'ivory', 'jade', 'lunar',
        'misty', 'olive', 'quiet', 'rapid', 'silver', 'solar', 'swift', 'velvet', 'windy')
def meaningless(line):
    names = [t['function']['name'] for t in json.loads(line)['tools']]
    return any(re.fullmatch(r'(fn|op|api|x|svc)_[a-z2-9]{4}(_\d+)?', x)
               or (x.split('_')[0] in CODE and re.fullmatch(r'[a-z]+_[a-z]+(_\d+)?', x))
               for x in names)
# a group is a scene's 16 tasks and its first-turn extras (FIRST)
G = int(sys.argv[4])
groups = lambda f: (lambda ls: [ls[i:i + G] for i in range(0, len(ls), G)])(open(f).readlines())
base, big = groups(sys.argv[1]), groups(sys.argv[2])
nm = [g for g in base if meaningless(g[0])]
keep = nm + [g for g in base if not meaningless(g[0])][:87] + [g for g in big if meaningless(g[0])][:38 - len(nm)]
open(sys.argv[3], 'w').writelines(l for g in keep for l in g)
print(len(keep), 'groups,', len([g for g in keep if meaningless(g[0])]), 'with meaningless names')
PY
    }
    [ -f runs/fh-s$s2$d.jsonl ] || $HAT data gen --tasks 1000 --variants 0 --group 16 --seed $s2 "${weights[@]}" "${scene[@]}" "${recovery[@]}" "${first[@]}" --out runs/fh-s$s2$d.jsonl
    extra=; repeat=()
    if [ -n "$rp" ]; then
      extra=,runs/replay$sc$rp-leg$leg.jsonl
      [ -n "$repeat_k" ] && repeat=(--repeat runs/replay$sc$rp-leg$leg.jsonl=$repeat_k)
      [ -f runs/replay$sc$rp-leg$leg.jsonl ] || $HAT data replay --model default --prompts $REPLAY \
        --samples 4 --max-tokens 512 --seed $((40 + leg)) --out runs/replay$sc$rp-leg$leg.jsonl --resume
    fi
    resume=()
    ls "$out"/checkpoints/*/state.json >/dev/null 2>&1 && resume=(--resume)
    $HAT train sft --data runs/chain-hsa-s$s1$d.jsonl,runs/fh-s$s2$d.jsonl$extra --model $prev --preset cpu --out $out "${steps[@]}" "${resume[@]}" "${matmul[@]}" "${pack[@]}" "${callw[@]}" "${repeat[@]}"
  fi
  [ -d "$out-hf" ] || $HAT train export $out --format hf --out $out-hf
  ev=runs/eval-chain$d$rx$mm-leg$leg
  if [ "${NO_EVAL:-0}" != 0 ]; then
    echo "leg $leg: evaluation skipped (NO_EVAL)"
  elif [ ! -f $ev/lsqa/results.json ] || [ ! -f $ev/hvqa/results.json ] || [ ! -f $ev/ifeval/results.json ]; then
    again=()
    [ -d $ev ] && again=(--resume)
    $HAT eval --model $out/model-q8_0.gguf --format original --threads 2 \
      --suite lsqa,hvqa,ifeval --batch 8 --max-tokens 128 --ifeval-max-tokens 512 \
      --out $ev "${again[@]}"
  fi
  echo "leg $leg done ($(date -u +%H:%M))"
done
echo "chain rc 0"
