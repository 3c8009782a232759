#!/usr/bin/env bash
# bench/mem_profile.py over torchtitan v0.2.2 and the reference job at llama3-1b, seq 8192,
# compiled, 4 steps each (step 3 broken down), for each AC mode in $ACS (default: none
# selective), plus the job as it was before its memory fixes (final norm as the formula,
# rotary tables made per step) in the AC modes of $BEFORE (default none). A run that would
# start after $BUDGET s (default 420) is skipped. Each run's step stats and peak table go to
# $OUT/summary.txt as it ends, everything to $OUT/mem_profile.tgz. Sources as
# bench/titan_1b_compare.sh.
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-/tmp/mem-profile}
ACS=${ACS:-none selective}
W=$(mktemp -d)
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True PYTORCH_ALLOC_CONF=expandable_segments:True
python3 -m pip install -q --no-index --no-deps --target "$W/deps" "$REPO"/bench/.sources/wheels/*.whl
TT=$REPO/bench/.sources/torchtitan
TP=$TT:$W/deps
python3 -c 'import datasets, tensorboard' 2>/dev/null || TP=$TP:$REPO/bench/titan_shims
PYTHONPATH=$REPO/bench/titan_shims python3 -c '
import json, sys; from datasets import _synthetic
sys.stdout.write("".join(json.dumps(r) + "\n" for r in _synthetic(2000)))' > "$W/data.json"
python3 "$REPO/bench/mem_profile.py" --probe-norm 2>&1 | tee "$W/probe.log"
TR=(python3 -m torch.distributed.run --standalone --nproc-per-node 1)
P=$REPO/bench/mem_profile.py
OURS=(--shape llama3-1b --seq 8192 --steps 4 --timing-skip 2 --compile --peak-tflops 989.4)
mkdir -p "$OUT"
report() {  # the run's step stats and the head of its peak table
  { echo "== $1 rc=$2 (${SECONDS}s)"; cat "$W/$1/steps.jsonl" "$W/$1/peak.txt" 2>/dev/null \
      | head -40; } >> "$OUT/summary.txt"
}
late() { [ "$SECONDS" -gt "${BUDGET:-420}" ] && echo "skipped $1 (${SECONDS}s)"; }
for ac in $ACS; do
  late "titan-$ac" && continue
  (cd "$TT" && PYTHONPATH="$TP" timeout 170 "${TR[@]}" "$P" --prog titan --out "$W/titan-$ac" \
    -- --job.config_file torchtitan/models/llama3/train_configs/llama3_8b.toml \
    --model.flavor 1B --job.dump_folder "$W/tt-$ac" --training.steps 4 \
    --training.dataset c4_test --training.dataset_path "$W" \
    --model.hf_assets_path tests/assets/tokenizer --metrics.log_freq 1 \
    --profiling.no_enable_profiling --metrics.no_enable_tensorboard --compile.enable \
    --activation_checkpoint.mode "$ac") > "$W/titan-$ac.log" 2>&1
  rc=$?; echo "titan $ac rc=$rc"; report "titan-$ac" $rc
  variants=(ours)
  [[ " ${BEFORE:-none} " == *" $ac "* ]] && variants+=(before)
  for v in "${variants[@]}"; do
    late "$v-$ac" && continue
    flag=(); [ "$v" = before ] && flag=(--formula-norm --rope-per-step)
    timeout 150 "${TR[@]}" "$P" --prog ours --out "$W/$v-$ac" "${flag[@]}" -- \
      --out "$W/job-$v-$ac" --ac "$ac" "${OURS[@]}" > "$W/$v-$ac.log" 2>&1
    rc=$?; echo "$v $ac rc=$rc"; report "$v-$ac" $rc
  done
done
tar -C "$W" -czf "$OUT/mem_profile.tgz" --exclude 'deps' --exclude 'data.json' --exclude 'tt-*' .
grep -h 'probe-norm' "$W/probe.log"; grep -h 'step [0-9]*: peak\|reached by' "$W"/*/peak.txt
