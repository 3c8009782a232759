#!/usr/bin/env bash
# The node-side suite on a real GPU machine, as `invoke validate` runs it on a node.
#   LEVELS="quick standard" bash bench/validate_on_gpu.sh
#   REPEAT=N: each level N times in a row (runs <level>-1 .. <level>-N), for false-fail counts
#   SITE=FILE.yml: per-node settings, as `python -m validation run --site` takes them (e.g.
#   workloads: {fsdp: {steps: 20, ckpt_step: 10}} to try a level's parameters before changing it)
# Results: $OUT/<level>.tar.gz (the run directory; unpack and `invoke report --run DIR`)
# and $OUT/timing.txt. The profile is scoped to what the machine has (its GPUs; it has
# no ConnectX, NVMe RAID, NVSwitch device files, fabric manager service, nccl-tests, fio or DCGM):
# those checks are reported not applicable, never passed.
set -u
OUT=${OUT:-/tmp/validate-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
PROFILE=${PROFILE:-xe9680-h200}
GPUS=$(nvidia-smi -L | wc -l)
WITHOUT=${WITHOUT:-rdma,nvme,raid,nvswitch,fabric-manager,nccl-tests,fio,dcgm}
RUNS=/tmp/rr-runs
rm -rf "$RUNS"; mkdir -p "$RUNS"
: > "$OUT/timing.txt"
run() {  # run LEVEL NAME [extra args]
  local level=$1 name=$2; shift 2
  local t0=$SECONDS
  timeout "${LIMIT_S:-560}" python3 -m validation run --profile "$PROFILE" --gpus "$GPUS" --without "$WITHOUT" \
      --level "$level" --out "$RUNS/$name/$(hostname)" ${SITE:+--site "$SITE"} "$@" > "$RUNS/$name.stdout" 2> "$RUNS/$name.stderr"
  local rc=$?
  echo "$name: level=$level rc=$rc wall=$((SECONDS - t0)) s" | tee -a "$OUT/timing.txt"
  # the run directory without the reference job's checkpoint and any file over 2 MiB (what
  # comes back is capped); the controller names what is missing when it judges the run
  (cd "$RUNS" && find "$name" -type f -size +2M > "$RUNS/$name.big")
  tar -C "$RUNS" --exclude="ckpt" -X "$RUNS/$name.big" -czf "$OUT/$name.tar.gz" "$name"
  cat "$RUNS/$name.big" >> "$OUT/left-out.txt"
}
python3 -m validation checks > "$OUT/checks.txt" 2>&1
for level in ${LEVELS:-quick}; do
  if [ "$level" = quick ] && [ "${REPEAT:-1}" = 1 ]; then
    # part 1 alone (inventory and health checks, no workloads): the "seconds" budget
    run quick part1 --only "$(python3 - <<'PY'
from validation.checks.registry import all_checks
print(",".join(n for n, c in all_checks().items() if "torch" not in c.needs))
PY
)"
  fi
  if [ "${REPEAT:-1}" = 1 ]; then
    run "$level" "$level"
  else
    for i in $(seq "$REPEAT"); do run "$level" "$level-$i"; done
  fi
done
tail -n 3 "$RUNS"/*.stderr
cat "$OUT/timing.txt"
