#!/usr/bin/env bash
# Second device call of 2026-12-04: the fixed GPU tests, the datastore and flex benchmarks, planner traces.
set -uo pipefail
export PYTHONPATH="$PWD:/tmp/site" PYTHONUNBUFFERED=1 SPECDEC_CACHE=/tmp/sc
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
T0=$(date +%s)
echo "== build"; SPECDEC_BUILD_CUDA=1 TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 timeout 90 python3 setup.py -q build_ext --inplace > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - T0 )) s"
echo "== tests"; timeout 90 python3 -m pytest -q -p no:cacheprovider -n 4 -rfE tests/ops/test_cuda_kernels.py tests/ops/test_triton_tree_metadata.py tests/ops/test_triton_tree_attention.py -m gpu -k "identity or resolution or uses_the_kernel" 2>&1 | tail -n 15
echo "== flex + datastore"; SPECDEC_BENCH_OUT=$OUT/bench SPECDEC_BENCH_STORE_SIZES=1000000 timeout 90 python3 -m pytest -q -p no:cacheprovider --benchmark-only --benchmark-columns=median \
  "bench/bench_tree_attention.py::test_tree_attention[flex-8-64-4096]" bench/bench_datastore.py 2>&1 | grep -v "^test_\|^---\|^Name\|^$" | tail -n 40 > $OUT/flex_ds.txt; tail -n 12 $OUT/flex_ds.txt
echo "== traces $(( $(date +%s) - T0 )) s"
timeout 75 python3 bench/plan_trace.py --method eagle-smart --batch 1 --device cuda --out $OUT/trace_eagle_b1.txt 2>&1 | grep -v Loading | tail -n 5
timeout 60 python3 bench/plan_trace.py --method smart --batch 1 --device cuda --out $OUT/trace_smart_b1.txt 2>&1 | grep -v Loading | tail -n 5
echo "== plain-step profiles $(( $(date +%s) - T0 )) s"
timeout 50 python3 gpu2/plainprof.py eagle-smart cuda > $OUT/plainprof_eagle.txt 2>&1; grep -E "^(ar|eagle-smart) [0-9]" $OUT/plainprof_eagle.txt
timeout 40 python3 gpu2/plainprof.py smart cuda > $OUT/plainprof_smart.txt 2>&1; grep -E "^(ar|smart) [0-9]" $OUT/plainprof_smart.txt
echo "== done $(( $(date +%s) - T0 )) s"
