#!/usr/bin/env bash
# The device check, one script for one lease (bare H200 image: Python 3.12, torch 2.11, Triton 3.6,
# transformers 5.17, pytest and pytest-benchmark present; no network). Run from the repo root:
#     OUT=/some/dir bash bench/gpu_check.sh
# Writes under $OUT: env.txt, gpu-tests.txt (+ junit xml), micro-*.json/csv (microbenchmarks),
# bench.txt, e2e results. Budget: about 8 minutes; each stage has its own timeout so one slow stage
# cannot eat the others.
set -uo pipefail
OUT=${OUT:-bench/out/gpu}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 SPECDEC_BENCH_OUT="$OUT"

{
  date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  python3 -c "import sys, torch, triton, transformers; print('python', sys.version.split()[0], '| torch', torch.__version__, '| triton', triton.__version__, '| transformers', transformers.__version__, '| cuda', torch.version.cuda, '|', torch.cuda.get_device_name())"
  git rev-parse HEAD 2>/dev/null || true
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

echo "== gpu tests"
timeout 240 python3 -m pytest tests -m gpu -q -rs -p no:cacheprovider --junitxml "$OUT/gpu-tests.xml" 2>&1 | tee "$OUT/gpu-tests.txt"

echo "== microbenchmarks"
timeout 300 python3 -m pytest bench -q -p no:cacheprovider --benchmark-only --benchmark-columns=median,iqr \
  2>&1 | tail -n 60 | tee "$OUT/bench.txt"

echo "== end to end (embedded pair, Spec-Bench prompts)"
timeout 120 python3 bench/e2e.py --device cuda --prompt-sets spec_bench --num-prompts 16 --batch-sizes 1 4 16 \
  --max-new-tokens 64 --out "$OUT" 2>&1 | tail -n 30 | tee "$OUT/e2e.txt"
echo "== done"
