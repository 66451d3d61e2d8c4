#!/usr/bin/env bash
# Compile check of the CUDA extension's sources without a GPU (CI runs it; ~1.5 minutes on 2 cores):
#   1. every kernel template instantiated for fp32/fp16/bf16 (csrc/check/instantiate.cu, one op per TU, no
#      torch headers) with nvcc -c for sm_80 and sm_90, with the flags torch's CUDAExtension adds;
#   2. the torch-facing launchers csrc/*.cu against torch's headers, in one TU (csrc/check/launchers.cu; device
#      side syntax-checked only: its device code is what step 1 compiled);
#   3. csrc/bindings.cpp with g++ -fsyntax-only against torch's headers;
#   4. the kernels' pure logic (csrc/check/host_test.cu) built for the host and run on the CPU.
# Fails on any error. Without nvcc: fails under CI (CI=true), else says so and exits 0.
# Usage: scripts/check_cuda_compile.sh [PYTHON]   (PYTHON: an interpreter with torch, default python3)
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${1:-python3}
CSRC=${SPECDEC_CSRC:-csrc}  # the tests point this at a copy with a planted error
if ! command -v nvcc >/dev/null; then
  if [ "${CI:-}" = "true" ]; then echo "check_cuda_compile: nvcc not found (CI needs it)"; exit 1; fi
  echo "check_cuda_compile: skipped, nvcc not found"; exit 0
fi
TORCH=$("$PYTHON" -c "import os, torch; print(os.path.dirname(torch.__file__))") || { echo "check_cuda_compile: torch not importable by $PYTHON"; exit 1; }
PYINC=$("$PYTHON" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
# torch.utils.cpp_extension.COMMON_NVCC_FLAGS: no implicit half/bfloat16 conversions in the kernels.
NVFLAGS=(-std=c++17 -D__CUDA_NO_HALF_OPERATORS__ -D__CUDA_NO_HALF_CONVERSIONS__ -D__CUDA_NO_BFLOAT16_CONVERSIONS__
         -D__CUDA_NO_HALF2_OPERATORS__ --expt-relaxed-constexpr)
ARCHS=(-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90)
TORCHINC=(-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE -isystem "$TORCH/include" -isystem "$TORCH/include/torch/csrc/api/include")
started=$(date +%s)

# name, command...: run in the background, log to $OUT/name.log, record status in $OUT/name.rc
job() {
  local name=$1; shift
  ( s=$(date +%s); "$@" >"$OUT/$name.log" 2>&1; rc=$?; echo $rc >"$OUT/$name.rc"
    echo "  $name: $([ $rc = 0 ] && echo ok || echo FAILED) ($(( $(date +%s) - s )) s)" ) &
}
report() {
  status=0
  for rc in "$OUT"/*.rc; do
    name=$(basename "$rc" .rc)
    if [ "$(cat "$rc")" != 0 ]; then status=1; echo "---- $name"; head -c 4000 "$OUT/$name.log"; fi
  done
  grep -h "passed" "$OUT/host_test.log" 2>/dev/null
  echo "== check_cuda_compile: $([ $status = 0 ] && echo OK || echo FAILED) in $(( $(date +%s) - started )) s"
}
# Stop at the first failure (its log is printed below): kill the other jobs of this script and wait them out.
failfast() {
  if grep -qv '^0$' "$OUT"/*.rc 2>/dev/null; then
    for pid in $(jobs -rp); do pkill -TERM -P "$pid" 2>/dev/null; kill "$pid" 2>/dev/null; done
    wait; report; exit 1
  fi
}
throttle() { while [ "$(jobs -rp | wc -l)" -ge "${JOBS:-2}" ]; do wait -n; failfast; done; }

echo "== check_cuda_compile ($(nvcc --version | tail -1 | cut -c1-40); torch $("$PYTHON" -c 'import torch; print(torch.__version__)'))"
# Longest first (tree attention: 18 kernels x 2 targets), so the rest fills the other core.
for op in TREE_ATTENTION SMART_EXPAND LOGPROB; do
  job "kernels_${op,,}_sm80_sm90" nvcc -c "${NVFLAGS[@]}" -Werror all-warnings "${ARCHS[@]}" -DSPECDEC_CHECK_$op \
      "$CSRC/check/instantiate.cu" -o "$OUT/$op.o"
  throttle
done
job host_test bash -c "nvcc ${NVFLAGS[*]} -arch=sm_90 $CSRC/check/host_test.cu -o $OUT/host_test && $OUT/host_test"
throttle
# torch's headers use C++20 bit-field initialisers (torch >= 2.13 builds with -std=c++20; 2.11 with c++17).
job launchers nvcc -c "${NVFLAGS[@]}" -arch=sm_90 -fdevice-syntax-only -diag-suppress 3306 -Xcompiler -Wno-c++20-extensions \
    "${TORCHINC[@]}" "$CSRC/check/launchers.cu" -o "$OUT/launchers.o"
throttle
job bindings g++ -std=c++17 -fsyntax-only -Wall -Werror -Wno-c++20-extensions "${TORCHINC[@]}" -isystem "$PYINC" \
    -isystem "$CUDA_HOME/include" "$CSRC/bindings.cpp"
while [ -n "$(jobs -rp)" ]; do wait -n; failfast; done

report
exit $status
