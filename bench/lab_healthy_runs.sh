#!/usr/bin/env bash
# False alarms count as much as misses: N healthy lab validations in a row, none may FAIL.
#   bash bench/lab_healthy_runs.sh [N]     (needs a provisioned lab: invoke lab.up && invoke provision)
# Prints one line per run (exit code, node outcomes, wall seconds) and ends non-zero on any
# FAIL or error. Each run is a full `invoke validate --inventory lab` (node suites + rack step).
set -u
N=${1:-10}
cd "$(dirname "$0")/.."
INVOKE=${INVOKE:-.venv/bin/invoke}
OUT=${OUT:-runs/healthy}
mkdir -p "$OUT"
bad=0
for i in $(seq 1 "$N"); do
  t0=$SECONDS
  "$INVOKE" validate --inventory lab --out "$OUT/run$i" --report-formats json > "$OUT/run$i.log" 2>&1
  rc=$?
  outcomes=$(python3 - "$OUT/run$i" <<'PY'
import json, sys
from pathlib import Path
rows = []
for j in sorted(Path(sys.argv[1]).glob("*/judgement.json")):
    d = json.loads(j.read_text())
    fails = [v.get("metric") or v.get("check")
             for key in ("verdicts", "fleet_verdicts", "rack_verdicts")
             for v in d.get(key, []) if v.get("outcome") == "fail"]
    rows.append(f"{j.parent.name}={d.get('outcome')}" + (f" ({', '.join(map(str, fails[:4]))})" if fails else ""))
print(" ".join(rows) or "no judgement")
PY
)
  echo "run $i: rc=$rc wall=$((SECONDS - t0)) s $outcomes"
  { [ "$rc" -ne 0 ] || [[ "$outcomes" != *PASS* ]] || [[ "$outcomes" == *FAIL* ]] || [[ "$outcomes" == *INCOMPLETE* ]]; } && bad=$((bad + 1))
done
echo "healthy runs: $N, with a FAIL, error or incomplete node: $bad"
[ "$bad" -eq 0 ]
