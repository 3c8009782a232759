#!/usr/bin/env bash
# The reference job beside torchtitan v0.2.2 on one GPU, at the llama3-1b shape, seq 8192,
# compiled, AC none and selective, all in one call:
#   bash bench/titan_1b_compare.sh        (OUT: where the logs go, default /tmp/titan-1b)
# Sources (git-ignored, never committed): bench/.sources/torchtitan (pytorch/torchtitan at
# v0.2.2: torchtitan/ and tests/assets/tokenizer) and bench/.sources/wheels (torchdata,
# tokenizers, tyro and its dependencies, einops, fsspec), installed with --no-index.
# torchtitan gets its "1B" flavor from bench/titan_shims/titan_1b.py.
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-/tmp/titan-1b}
STEPS=${STEPS:-20}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True PYTORCH_ALLOC_CONF=expandable_segments:True
{ date -u; python3 -V; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__)'; } | tee "$OUT/env.txt"
DEPS=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --target "$DEPS" "$REPO"/bench/.sources/wheels/*.whl
TT=$REPO/bench/.sources/torchtitan
TP=$TT:$DEPS
python3 -c 'import datasets, tensorboard' 2>/dev/null || TP=$TP:$REPO/bench/titan_shims
DATA=$(mktemp -d)
PYTHONPATH=$REPO/bench/titan_shims python3 -c '
import json, sys; from datasets import _synthetic
sys.stdout.write("".join(json.dumps(r) + "\n" for r in _synthetic(20000)))' > "$DATA/data.json"
TR=(python3 -m torch.distributed.run --standalone --nproc-per-node 1)
for ac in none selective; do
  (cd "$TT" && PYTHONPATH="$TP" timeout 280 "${TR[@]}" "$REPO/bench/titan_shims/titan_1b.py" \
    --job.config_file torchtitan/models/llama3/train_configs/llama3_8b.toml --model.flavor 1B \
    --job.dump_folder "$DATA/titan-$ac" --training.steps "$STEPS" --training.dataset c4_test \
    --training.dataset_path "$DATA" --model.hf_assets_path tests/assets/tokenizer \
    --metrics.log_freq 1 --profiling.no_enable_profiling --metrics.no_enable_tensorboard \
    --compile.enable --activation_checkpoint.mode "$ac") > "$OUT/titan-$ac.log" 2>&1
  echo "titan $ac rc=$?"
  timeout 200 "${TR[@]}" -m validation.workloads.fsdp_train --out "$DATA/ours-$ac" \
    --shape llama3-1b --seq 8192 --steps "$STEPS" --timing-skip 4 --ac "$ac" --compile \
    --peak-tflops 989.4 > "$OUT/ours-$ac.log" 2>&1
  echo "ours $ac rc=$?"
  cat "$DATA"/ours-"$ac"/*.jsonl > "$OUT/ours-$ac.jsonl" 2>/dev/null
done
python3 "$REPO/bench/titan_1b_summary.py" "$OUT" | tee "$OUT/summary.md"
