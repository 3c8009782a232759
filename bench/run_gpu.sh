#!/usr/bin/env bash
# Issue 15's bench: rackready beside nccl-tests and torchtitan, in one sitting.
#   bash bench/run_gpu.sh                          everything (about 11-13 minutes on 2x H200)
#   ONLY=build,nccl,coll,gemm bash bench/run_gpu.sh    then    ONLY=fsdp,titan bash bench/run_gpu.sh
#   ROUNDS=N (default 3): nccl-tests and the collectives alternated N times (env..gemm took 265 s)
# Parts (ONLY, comma list): env build nccl coll gemm fsdp titan hbm xfer.
# Work folder W (BENCH_W, default /tmp/rr-bench) survives between calls on a warm machine, so
# two calls make one sitting; each call ends with bench/compare.py over everything in W and
# copies results.md, results.json and the logs to $OUT.
# Sources (git-ignored, never committed; the bench builds them, nothing else fetches them):
#   bench/.sources/nccl-tests   NVIDIA/nccl-tests at v2.19.6 (built here with the NCCL torch loads)
#   bench/.sources/torchtitan   pytorch/torchtitan at v0.2.2 (torchtitan/ and tests/assets/tokenizer)
#   bench/.sources/wheels       (optional) wheels torchtitan needs, installed with --no-index
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
OUT=${OUT:-/tmp/bench-out}
W=${BENCH_W:-/tmp/rr-bench}
SRC=$REPO/bench/.sources
NCCL_TESTS_PIN=2.19.6
TITAN_PIN=0.2.2
ONLY=${ONLY:-env,build,nccl,coll,gemm,fsdp,titan}
mkdir -p "$OUT" "$W"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True PYTORCH_ALLOC_CONF=expandable_segments:True
N=$(python3 -c 'import torch; print(torch.cuda.device_count())')
LOG=$W/bench.log
PEAK=989.4  # H200 SXM dense bf16 TFLOP/s (datasheet), as the profile
echo "$(date -u +%FT%TZ) ONLY=$ONLY bash bench/run_gpu.sh (N=$N, W=$W)" >> "$W/command.txt"

want() { [[ ",$ONLY," == *",$1,"* ]]; }
# part NAME LIMIT_S CMD...: run with a time limit; output in W/logs/NAME.log (and bench.log),
# seconds and rc in W/timing.tsv
mkdir -p "$W/logs"
part() {
  local name=$1 limit=$2 t0=$SECONDS rc; shift 2
  echo "== $name (limit ${limit}s)" | tee -a "$LOG"
  timeout --kill-after=10 "$limit" "$@" > "$W/logs/$name.log" 2>&1; rc=$?
  cat "$W/logs/$name.log" >> "$LOG"
  printf '%s\t%s\t%s\n' "$name" "$((SECONDS - t0))" "$rc" | tee -a "$W/timing.tsv"
  return $rc
}
# torchrun on every GPU of this machine, as a command line (part runs it under timeout)
TR=(python3 -m torch.distributed.run --standalone --nproc-per-node "$N")

if want env; then
  {
    date -u; hostname; nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv
    nvidia-smi topo -m 2>/dev/null | head -5
    python3 -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())), "python", sys.version.split()[0])'
    echo "nccl-tests source: $(grep -ho 'NCCL_TESTS_VERSION "[^"]*"' "$SRC"/nccl-tests/src/common.h 2>/dev/null || echo absent) (pin $NCCL_TESTS_PIN)"
    echo "torchtitan source: $(grep -m1 -ho '^version = "[^"]*"' "$SRC"/torchtitan/pyproject.toml 2>/dev/null || cat "$SRC"/torchtitan/assets/version.txt 2>/dev/null || echo absent) (pin $TITAN_PIN)"
    echo "NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE"
  } > "$W/env.txt" 2>&1
  cat "$W/env.txt"
fi

# --- nccl-tests, built against the libnccl torch itself loads (same NCCL both columns) ---
NT_BUILD=$W/nccl-tests-build
nccl_home() {  # a folder with include/nccl.h and lib/libnccl.so: torch's pip NCCL, else the system's
  python3 - "$W/nccl-home" <<'PY'
import glob, os, sys, site
home = sys.argv[1]
roots = site.getsitepackages() + [site.getusersitepackages()]
for r in roots:
    for inc in glob.glob(os.path.join(r, "nvidia", "**", "include", "nccl.h"), recursive=True):
        base = os.path.dirname(os.path.dirname(inc))
        libs = sorted(glob.glob(os.path.join(base, "lib", "libnccl.so*")))
        if libs:
            os.makedirs(os.path.join(home, "lib"), exist_ok=True)
            link = os.path.join(home, "include")
            if not os.path.exists(link):
                os.symlink(os.path.dirname(inc), link)
            for name in ("libnccl.so", "libnccl.so.2"):
                dst = os.path.join(home, "lib", name)
                if not os.path.exists(dst):
                    os.symlink(libs[-1], dst)
            print(home); sys.exit(0)
for inc in ("/usr/include/nccl.h", "/usr/local/include/nccl.h"):
    if os.path.exists(inc):
        print(os.path.dirname(os.path.dirname(inc))); sys.exit(0)
sys.exit(1)
PY
}
if want build; then
  if [ ! -f "$SRC/nccl-tests/src/common.h" ]; then
    echo "nccl-tests: no source in bench/.sources/nccl-tests (fetch NVIDIA/nccl-tests v$NCCL_TESTS_PIN there); not built" | tee -a "$W/env.txt"
  elif [ -x "$NT_BUILD/all_reduce_perf" ]; then
    echo "nccl-tests: already built in $NT_BUILD"
  else
    NVCC=$(command -v nvcc || ls /usr/local/cuda*/bin/nvcc 2>/dev/null | head -1)
    NH=$(nccl_home)
    if [ -z "$NVCC" ] || [ -z "$NH" ]; then
      echo "nccl-tests: cannot build (nvcc: ${NVCC:-none}; nccl.h: ${NH:-none})" | tee -a "$W/env.txt"
    else
      CH=$(dirname "$(dirname "$NVCC")")
      rm -rf "$W/nccl-tests-src"; cp -r "$SRC/nccl-tests" "$W/nccl-tests-src"  # the source tree stays clean
      part build_nccl_tests 300 make -C "$W/nccl-tests-src/src" -j"$(nproc)" MPI=0 \
        BUILDDIR="$NT_BUILD" CUDA_HOME="$CH" NCCL_HOME="$NH" \
        NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" \
        || echo "nccl-tests: build failed (see bench.log)" | tee -a "$W/env.txt"
      echo "nccl-tests: built with $NVCC, NCCL from $NH" >> "$W/env.txt"
    fi
  fi
fi
# --- nccl-tests and rackready's collectives, alternated ROUNDS times in this sitting: the
# machine's own drift between minutes (nccl-tests moved up to 9 % between runs) lands on both
# sides alike, and compare.py takes each column's median over the rounds. rackready: the same
# sizes and flags, both modes, eager (what the check runs); in round 1 also the loop captured
# as a CUDA graph (no torch call cost) and the buffers from torch's allocator (for contrast)
ROUNDS=${ROUNDS:-3}
nccl_tests_round() {
  local r=$1 op NH
  mkdir -p "$W/nccl-tests/r$r"
  NH=$(nccl_home)
  for op in all_reduce all_gather reduce_scatter alltoall sendrecv broadcast; do
    # the fixtures' flags, 64 MiB..4 GiB; both columns (out-of-place, in-place) in one run
    LD_LIBRARY_PATH="$NH/lib:${LD_LIBRARY_PATH:-}" part "nccl-tests_${op}_r$r" 90 \
      "$NT_BUILD/${op}_perf" -b 64M -e 4G -f 4 -g "$N" -d bfloat16 -w 5 -n 20
    cp "$W/logs/nccl-tests_${op}_r$r.log" "$W/nccl-tests/r$r/$op.txt"
  done
}
COLL=(-m validation.workloads.collectives --sizes 64M:4G:x4 --modes out_of_place,in_place
      --warmup 5 --iters 20 --repeats 3 --pair-size 0)
for r in $(seq 1 "$ROUNDS"); do
  if want nccl && [ -x "$NT_BUILD/all_reduce_perf" ]; then nccl_tests_round "$r"; fi
  if want coll; then
    part "collectives_r$r" 180 "${TR[@]}" "${COLL[@]}" --out "$W/coll/r$r"
    if [ "$r" = 1 ]; then
      part collectives_graph 180 "${TR[@]}" "${COLL[@]}" --out "$W/coll_graph" --graph on
      part collectives_torch_alloc 180 "${TR[@]}" "${COLL[@]}" --out "$W/coll_torch_alloc" \
        --alloc torch
    fi
  fi
done

if want gemm; then
  mkdir -p "$W/bare"
  part gemm_bare 60 "${TR[@]}" bench/gemm_bare.py "$W/bare" 16384 20
  part gemm_burnin 90 "${TR[@]}" -m validation.workloads.gemm_burnin --out "$W/gemm" --duration-s 25 \
    --fp8-share 0 --ramp-s 5 --side 16384
fi
want hbm && part hbm 120 "${TR[@]}" -m validation.workloads.hbm --out "$W/hbm" --bits 0:64:8 --random-passes 1
want xfer && part transfers 60 "${TR[@]}" -m validation.workloads.transfers --out "$W/xfer"

# --- the reference job at torchtitan's shape: llama3-8b, seq 8192, batch 1, compiled ---
if want fsdp; then
  part fsdp8b_none 200 "${TR[@]}" -m validation.workloads.fsdp_train --out "$W/fsdp8b_none" \
    --shape llama3-8b --seq 8192 --steps 20 --timing-skip 4 --ac none --compile --peak-tflops $PEAK
  part fsdp8b_selective 200 "${TR[@]}" -m validation.workloads.fsdp_train --out "$W/fsdp8b_selective" \
    --shape llama3-8b --seq 8192 --steps 10 --timing-skip 4 --ac selective --compile --peak-tflops $PEAK
fi

# --- torchtitan at the same shape (its llama3_8b.toml: AdamW 3e-4, clipping 1.0), AC none and selective ---
if want titan; then
  if [ ! -f "$SRC/torchtitan/torchtitan/train.py" ]; then
    echo "torchtitan: no source in bench/.sources/torchtitan (pytorch/torchtitan v$TITAN_PIN); not run" | tee -a "$W/env.txt"
  else
    TT_PATH=$SRC/torchtitan
    missing=$(python3 -c 'import importlib.util as u; print(" ".join(m for m in ("torchdata","tokenizers","tyro","einops","fsspec") if u.find_spec(m) is None))')
    if [ -n "$missing" ] && [ -d "$SRC/wheels" ]; then
      python3 -m pip install -q --no-index --no-deps --target "$W/titan-deps" "$SRC"/wheels/*.whl >> "$LOG" 2>&1
      TT_PATH=$TT_PATH:$W/titan-deps
    fi
    # torchtitan's data and tensorboard imports only; the model, FSDP, compile and AC are its own
    python3 -c 'import datasets, tensorboard' 2>/dev/null || TT_PATH=$TT_PATH:$REPO/bench/titan_shims
    echo "torchtitan PYTHONPATH: $TT_PATH" >> "$W/env.txt"
    # text for its tokenizer (c4_test's data.json is a large file the mirror may lack); the
    # tokens feed the same 8B model either way, so speed and memory do not depend on them
    mkdir -p "$W/c4_test"
    [ -s "$W/c4_test/data.json" ] || PYTHONPATH=$REPO/bench/titan_shims python3 -c '
import json, sys; from datasets import _synthetic
sys.stdout.write("".join(json.dumps(r) + "\n" for r in _synthetic(20000)))' > "$W/c4_test/data.json"
    for ac in none selective; do
      (cd "$SRC/torchtitan" && PYTHONPATH="$TT_PATH" part "titan_$ac" 200 "${TR[@]}" -m torchtitan.train \
        --job.config_file torchtitan/models/llama3/train_configs/llama3_8b.toml \
        --job.dump_folder "$W/titan-out-$ac" --training.steps 12 --training.dataset c4_test \
        --training.dataset_path "$W/c4_test" --model.hf_assets_path tests/assets/tokenizer \
        --metrics.log_freq 1 --profiling.no_enable_profiling --metrics.no_enable_tensorboard \
        --compile.enable --activation_checkpoint.mode "$ac")
      cp "$W/logs/titan_$ac.log" "$W/titan_$ac.log"
    done
  fi
fi

grep -E 'Error|error:' "$LOG" | grep -v -E 'errors.html|error_file' | tail -8
python3 bench/compare.py "$W" --out "$OUT/results.md" --json "$OUT/results.json" > /dev/null
cp "$W/env.txt" "$W/timing.tsv" "$W/command.txt" "$OUT/" 2>/dev/null
tar czf "$OUT/raw.tgz" -C "$W" --exclude='nccl-tests-*' --exclude='titan-*' --exclude='nccl-home' \
  --exclude='c4_test' --exclude='bench.log' --exclude='logs' . 2>/dev/null
tail -c 1500000 "$LOG" > "$OUT/bench.log.tail"
cat "$OUT/results.md"
