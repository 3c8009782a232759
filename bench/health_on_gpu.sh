#!/usr/bin/env bash
# The health gate on a real GPU machine, N times in a row, as a scheduler's prolog runs it.
#   RUNS=20 bash bench/health_on_gpu.sh
# Each run is a fresh process (`python3 -m validation health`), timed from outside with
# `date +%s.%N`; its one line and its textfile (per-check durations) are kept. The profile is
# scoped to what the machine has, as bench/validate_on_gpu.sh scopes it.
# Results: $OUT/health.tar.gz (one .prom and one .line per run) and $OUT/health.tsv
# (run, exit, wall s, line).
set -u
OUT=${OUT:-/tmp/health-out}
mkdir -p "$OUT"
PROFILE=${PROFILE:-xe9680-h200}
GPUS=$(nvidia-smi -L | wc -l)
WITHOUT=${WITHOUT:-rdma,nvme,raid,nvswitch,fabric-manager,nccl-tests,fio,dcgm}
W=/tmp/rr-health
rm -rf "$W"; mkdir -p "$W"
printf 'run\texit\twall_s\tline\n' > "$OUT/health.tsv"
for i in $(seq "${RUNS:-20}"); do
  mkdir -p "$W/$i"
  t0=$(date +%s.%N)
  line=$(python3 -m validation health --profile "$PROFILE" --gpus "$GPUS" --without "$WITHOUT" \
         --textfile-dir "$W/$i" 2>"$W/$i/stderr")
  rc=$?
  t1=$(date +%s.%N)
  echo "$line" > "$W/$i/line"
  printf '%s\t%s\t%.3f\t%s\n' "$i" "$rc" "$(awk "BEGIN{print $t1 - $t0}")" "$line" >> "$OUT/health.tsv"
done
tar -C "$W" -czf "$OUT/health.tar.gz" .
cat "$OUT/health.tsv"
