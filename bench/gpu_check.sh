#!/usr/bin/env bash
# The device check, one script for one lease (bare H200 image: Python 3.12, torch 2.11, Triton 3.6,
# transformers 5.17, pytest and pytest-benchmark present; no network). Run from the repo root:
#     OUT=/some/dir bash bench/gpu_check.sh
# Writes under $OUT: env.txt, gpu-tests.txt, bench.txt, e2e.txt and gpu_check.tgz (junit XML,
# microbenchmark CSV/JSON, end-to-end results and plots). Budget: about 8 minutes; each stage has its own timeout so one slow stage
# cannot eat the others.
set -uo pipefail
# The device tool brings back at most 8 files from $OUT: the logs come back as they are, everything else
# (CSV/JSON/XML/PNG) in one tarball.
OUT=${OUT:-bench/out/gpu}
mkdir -p "$OUT"
DATA=$(mktemp -d)
trap 'tar czf "$OUT/gpu_check.tgz" -C "$DATA" . ; ls -la "$OUT"' EXIT
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 SPECDEC_BENCH_OUT="$DATA"

{
  date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  python3 -c "import sys, torch, triton, transformers; print('python', sys.version.split()[0], '| torch', torch.__version__, '| triton', triton.__version__, '| transformers', transformers.__version__, '| cuda', torch.version.cuda, '|', torch.cuda.get_device_name())"
  git rev-parse HEAD 2>/dev/null || true
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

echo "== gpu tests"
timeout 240 python3 -m pytest tests -m gpu -q -rs -p no:cacheprovider --junitxml "$DATA/gpu-tests.xml" 2>&1 | tee "$OUT/gpu-tests.txt"

echo "== microbenchmarks"
timeout 300 python3 -m pytest bench -q -p no:cacheprovider --benchmark-only --benchmark-columns=median,iqr \
  2>&1 | tail -n 60 | tee "$OUT/bench.txt"

echo "== parity: plain decoding through specdec's loop vs generate() (embedded target)"
timeout 120 python3 bench/parity.py --device cuda --models demo-target --new-tokens 64 1024 --contexts 64 512 960 \
  --repeats 3 --out "$DATA" 2>&1 | tail -n 12 | tee "$OUT/parity.txt"

echo "== end to end (embedded pair, Spec-Bench prompts)"
timeout 120 python3 bench/e2e.py --device cuda --prompt-sets spec_bench --num-prompts 16 --batch-sizes 1 4 16 \
  --max-new-tokens 64 --out "$DATA" 2>&1 | tail -n 30 | tee "$OUT/e2e.txt"
echo "== done"
