// Shared device helpers of specdec's CUDA kernels: dtype conversions, cp.async, warp reductions.
// No torch headers (docs/architecture.md): this file and the <op>.cuh templates compile with plain nvcc, which is how
// CI checks them (scripts/check_cuda_compile.sh).
//
// torch's CUDAExtension compiles with -D__CUDA_NO_HALF_CONVERSIONS__ -D__CUDA_NO_BFLOAT16_CONVERSIONS__
// (and the operator variants), so every conversion here is an explicit intrinsic: no implicit
// float <-> __half / __nv_bfloat16 conversion may appear anywhere in the kernels.
#pragma once

#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace specdec {

// ------------------------------------------------------------------------------------ conversions
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

template <typename T> __device__ __forceinline__ T zero_value() { return from_float<T>(0.0f); }

// ------------------------------------------------------------------------------------ integer math
__host__ __device__ constexpr int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
__host__ __device__ constexpr int round_up(int a, int b) { return (a + b - 1) / b * b; }

// ------------------------------------------------------------------------------------ cp.async (sm_80+)
// 16-byte asynchronous copy global -> shared. `bytes` is 16 or 0: with 0 nothing is read from `src`
// (which must still be a valid address expression) and the 16 shared bytes are zero-filled.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, int bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned saddr = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(saddr), "l"(src), "r"(bytes));
#else
  // Older targets (never built by default): a synchronous copy with the same zero-fill semantics.
  const int4 value = bytes ? *reinterpret_cast<const int4*>(src) : make_int4(0, 0, 0, 0);
  *reinterpret_cast<int4*>(dst) = value;
#endif
}

__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

// Wait until at most N committed groups of this thread are still in flight.
template <int N> __device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// ------------------------------------------------------------------------------------ warp reductions
// Butterfly reductions over the 32 lanes: every lane ends with the result, and the combination order
// is fixed by the lane ids, so results are deterministic.
__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// ------------------------------------------------------------------------------------ log-sum-exp
// Running log-sum-exp pairs (natural base): max m and sum of exp(x - m). Fold one value, merge two
// partials; -inf values add nothing, and an empty pair is {-inf, 0}.
struct Lse {
  float m, s;
};
__host__ __device__ inline Lse lse_add(Lse a, float x) {
  if (x == -INFINITY) return a;
  if (x > a.m) return {x, a.s * expf(a.m - x) + 1.0f};
  return {a.m, a.s + expf(x - a.m)};
}
__host__ __device__ inline Lse lse_merge(Lse a, Lse b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.0f};
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

// Block-wide merge of every thread's pair: butterflies within each warp, then warp 0's fixed-order fold
// of the warp results, so the result is deterministic. `scratch` holds blockDim.x / 32 pairs; every thread
// gets the result. Contains barriers: call from all threads.
__device__ inline Lse block_lse(Lse x, Lse* scratch) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const Lse other{__shfl_xor_sync(0xffffffffu, x.m, offset), __shfl_xor_sync(0xffffffffu, x.s, offset)};
    x = lse_merge(x, other);
  }
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = x;
  __syncthreads();
  Lse total = scratch[0];
  for (int w = 1; w < int(blockDim.x / 32); ++w) total = lse_merge(total, scratch[w]);
  __syncthreads();
  return total;
}

}  // namespace specdec
