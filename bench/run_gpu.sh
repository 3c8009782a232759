#!/usr/bin/env bash
# Everything the bench compares, side by side in one call (about 8 minutes on 2x H200).
#   bash bench/run_gpu.sh            (results under $OUT, table printed last)
set -u
OUT=${OUT:-/tmp/bench-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
N=$(python3 -c 'import torch; print(torch.cuda.device_count())')
W=$OUT/w; mkdir -p "$W"
LOG=$OUT/bench.log
{
  date -u; nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv
  python3 -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), "python", sys.version.split()[0])'
  python3 -c 'import yaml; print("pyyaml", yaml.__version__)' || echo "pyyaml missing"
  python3 -c 'import pynvml; print("nvidia-ml-py ok")' || echo "pynvml missing"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
tr() { timeout "$1" python3 -m torch.distributed.run --standalone --nproc-per-node "$2" "${@:3}" >> "$LOG" 2>&1 || echo "FAILED($?): ${*:3}" | tee -a "$LOG"; }
s=$SECONDS
want() { [ -z "${ONLY:-}" ] || [[ ",$ONLY," == *",$1,"* ]]; }
want coll && tr 150 "$N" -m validation.workloads.collectives --out "$W/coll" --sizes 64M:4G:x4 --pair-size 1G --ops all_reduce,all_gather,reduce_scatter,alltoall,broadcast,sendrecv
echo "collectives $((SECONDS-s)) s"; s=$SECONDS
want gemm && mkdir -p "$W/bare" && tr 60 "$N" bench/gemm_bare.py "$W/bare" 16384 30
echo "bare gemm $((SECONDS-s)) s"; s=$SECONDS
want gemm && tr 90 "$N" -m validation.workloads.gemm_burnin --out "$W/gemm" --duration-s 40 --fp8-share 0.25 --ramp-s 5 --side 16384
echo "burn-in $((SECONDS-s)) s"; s=$SECONDS
want hbm && tr 120 "$N" -m validation.workloads.hbm --out "$W/hbm" --bits 0:64:8 --random-passes 1
echo "hbm $((SECONDS-s)) s"; s=$SECONDS
want xfer && tr 60 "$N" -m validation.workloads.transfers --out "$W/xfer"
echo "transfers $((SECONDS-s)) s"; s=$SECONDS
want fsdp8b && tr 150 "$N" -m validation.workloads.fsdp_train --out "$W/fsdp8b" --shape llama3-8b --seq 8192 --steps 10 --ac none --peak-tflops 989.4
want fsdp8bc && tr 240 "$N" -m validation.workloads.fsdp_train --out "$W/fsdp8b_compile" --shape llama3-8b --seq 8192 --steps 12 --timing-skip 4 --ac none --compile --peak-tflops 989.4
want fsdp8b && { grep -q fsdp.mfu "$W"/fsdp8b/*.jsonl 2>/dev/null || tr 150 "$N" -m validation.workloads.fsdp_train --out "$W/fsdp8b_ac" --shape llama3-8b --seq 8192 --steps 10 --ac every:4 --peak-tflops 989.4; }
echo "fsdp 8b $((SECONDS-s)) s"; s=$SECONDS
want quick && tr 180 "$N" -m validation.workloads.fsdp_train --out "$W/quick" --shape llama3-1b --seq 8192 --steps 16 --ckpt-step 8 --ckpt-dir /tmp/ckpt --peak-tflops 989.4
echo "quick reference job $((SECONDS-s)) s (target <= 180)"; s=$SECONDS
want scale && tr 90 1 -m validation.workloads.fsdp_train --out "$W/scale1" --shape llama3-1b --seq 8192 --steps 10 --peak-tflops 989.4
want scale && tr 90 "$N" -m validation.workloads.fsdp_train --out "$W/scale2" --shape llama3-1b --seq 8192 --steps 10 --peak-tflops 989.4
echo "scaling $((SECONDS-s)) s"
grep -E 'error|Error' "$LOG" | grep -v -E 'errors.html|error_file' | tail -5
python3 bench/summarize.py "$W" > /dev/null  # references: tests/fixtures/hgx-h200-2gpu
cp "$W/results.json" "$W/table.md" "$OUT/" ; tar czf "$OUT/raw.tgz" -C "$W" . ; tail -c 2000000 "$LOG" > "$OUT/bench.log.tail"; rm -f "$LOG"
cat "$OUT/table.md"
