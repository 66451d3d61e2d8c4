// K2, batched top-k expansion with SMART's marginal-ratio test: CUDA kernel templates (contract:
// specdec/ops/smart_expand.py, docs/kernels.md, K2). No torch headers; the torch-facing launcher is smart_expand.cu.
//
// Two launches, no host sync between them, the same split as the Triton kernels:
// 1. topk_kernel, one block per (row, frontier slot): a block-wide radix select over the slot's V logits
//    finds the k-th largest value (4 passes of 8-bit digits, shared-memory histograms; the first pass also
//    computes the log-sum-exp), one more pass collects the k children (ties at the threshold: lowest token
//    ids, ranked in index order with a CUB block scan), and a rank sort orders them.
// 2. select_kernel, one block per row: rank-sorts the F*k candidates by path log-prob, scans their
//    probabilities with a CUB block scan (L_j), runs the SMART test and keeps the prefix before the first
//    failure.
// Ordering everywhere follows one unique 64-bit key per element (desc_key): value descending, then index
// ascending, so results do not depend on scheduling.
#pragma once

#include <cub/block/block_scan.cuh>
#include <cstring>

#include "common.cuh"

namespace specdec {
namespace smart_expand {

constexpr int kThreads = 256;
constexpr int kMaxK = 1024;           // children per frontier slot the top-k kernel handles
constexpr int kMaxCandidates = 8192;  // F * k per row the select kernel handles (80 KiB of shared memory)

struct TopkParams {
  const void* logits;   // [B, F, V] T-typed, any strides
  const float* flogp;   // [B, F] contiguous; -inf marks an inactive slot
  int64_t* tok;         // [B, F, K] out: children by rank, -1 for inactive slots
  float* clogp;         // [B, F, K] out: path log-probs, -inf for inactive slots
  int F, K;
  int64_t V;
  int64_t x_b, x_f, x_v;
};

struct SelectParams {
  const int64_t* tok;        // [B, F*K] from the top-k kernel
  const float* clogp;        // [B, F*K]
  const int64_t* tree_size;  // [B]
  const float* expected_len; // [B]
  const float* num_paths;    // [B]
  const float* cost;         // [5]: c0, lambda, gamma, delta, rho
  int64_t* out_tok;          // [B, F*K] sorted by path log-prob
  int64_t* out_slot;         // [B, F*K]
  float* out_logp;           // [B, F*K]
  bool* out_keep;            // [B, F*K]
  int64_t* out_size;         // [B]
  float* out_len;            // [B]
  float alpha;
  int budget, FK, K;
  bool paper;                // benefit P / num_paths (true) or P (false)
};

// ------------------------------------------------------------------------ pure logic (host-tested)

__host__ __device__ inline int32_t float_bits(float x) {
#ifdef __CUDA_ARCH__
  return __float_as_int(x);
#else
  int32_t i;
  std::memcpy(&i, &x, sizeof(i));
  return i;
#endif
}

__host__ __device__ inline float bits_float(int32_t i) {
#ifdef __CUDA_ARCH__
  return __int_as_float(i);
#else
  float x;
  std::memcpy(&x, &i, sizeof(x));
  return x;
#endif
}

// Signed integer of the same order as the float (-0.0 folded into +0.0, so the two tie).
__host__ __device__ inline int32_t ordered(float x) {
  const int32_t bits = float_bits(x == 0.0f ? 0.0f : x);
  return bits >= 0 ? bits : bits ^ 0x7FFFFFFF;
}
__host__ __device__ inline float unordered(int32_t o) { return bits_float(o >= 0 ? o : o ^ 0x7FFFFFFF); }

// Unique key sorting like (x descending, idx ascending); the reference's _desc_key, 0 <= idx < 2^31.
__host__ __device__ inline int64_t desc_key(float x, int64_t idx) {
  return (int64_t(ordered(x)) * (int64_t(1) << 32)) | int64_t(0x7FFFFFFF - idx);
}
__host__ __device__ inline int64_t key_index(int64_t key) { return 0x7FFFFFFF - (key & 0xFFFFFFFF); }
__host__ __device__ inline float key_value(int64_t key) { return unordered(int32_t(key >> 32)); }

// The float's order as an unsigned integer (radix select digits): larger float, larger integer.
__host__ __device__ inline uint32_t radix_bits(float x) { return uint32_t(ordered(x)) ^ 0x80000000u; }

// One radix-select step: given the histogram of the current digit among elements matching the prefix so
// far, and `need` (>= 1) elements still to take from the top, return the digit holding the need-th largest
// and reduce `need` by the count of elements in larger digits. Invariant: 1 <= need <= hist[digit] after.
__host__ __device__ inline int select_digit(const int* hist, int* need) {
  int above = 0;
  for (int d = 255; d > 0; --d) {
    if (above + hist[d] >= *need) {
      *need -= above;
      return d;
    }
    above += hist[d];
  }
  *need -= above;
  return 0;
}

// SMART's cost model C(n) and dC(n) with the operations of smart_cost (n^rho = exp(rho log n)).
__host__ __device__ inline void smart_cost(const float* c, float n, float* value, float* slope) {
  const float log_n = logf(n);
  const float grow = expf(c[3] * expf(c[4] * log_n));
  *value = c[0] + c[1] * n + c[2] * (grow - 1.0f);
  *slope = c[1] + c[2] * c[3] * c[4] * expf((c[4] - 1.0f) * log_n) * grow;
}

// Candidate j of a row joins iff it is active, alpha dL / dC(|T|_j) > L_j / C(|T|_j) and |T|_j + 1 <= budget.
__host__ __device__ inline bool smart_joins(float path, float tree_len, float n, const float* cost, float num_paths,
                                            bool paper, float alpha, int budget) {
  float value, slope;
  smart_cost(cost, n, &value, &slope);
  const float prob = expf(path);
  const float gain = paper ? prob / num_paths : prob;
  return path != -INFINITY && (alpha * gain / slope > tree_len / value) && (n + 1.0f <= float(budget));
}

// ------------------------------------------------------------------------ kernels

// Grid: (B * F,); kThreads threads; dynamic shared memory 2 * K int64 keys.
template <typename T>
__global__ void __launch_bounds__(kThreads) topk_kernel(const TopkParams p) {
  using Scan = cub::BlockScan<int, kThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  __shared__ int hist[256];
  __shared__ Lse warp_lse[kThreads / 32];
  __shared__ uint32_t prefix_s;
  __shared__ int need_s, taken_s;
  extern __shared__ __align__(16) int64_t keys[];  // [K] selected, then [K] sorted
  const int tid = threadIdx.x;
  const int64_t pid = blockIdx.x, b = pid / p.F, f = pid % p.F;
  const T* row = static_cast<const T*>(p.logits) + b * p.x_b + f * p.x_f;
  const float parent = p.flogp[pid];
  if (parent == -INFINITY) {  // inactive slot: read nothing
    for (int j = tid; j < p.K; j += kThreads) {
      p.tok[pid * p.K + j] = -1;
      p.clogp[pid * p.K + j] = -INFINITY;
    }
    return;
  }

  // Radix select: after the 4 passes prefix_s is the k-th largest value's radix bits and need_s is how
  // many elements equal to it belong to the top k (the others above it all do).
  uint32_t prefix = 0, mask = 0;
  int need = p.K;
  Lse lse{-INFINITY, 0.0f};
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int d = tid; d < 256; d += kThreads) hist[d] = 0;
    __syncthreads();
    for (int64_t v = tid; v < p.V; v += kThreads) {
      const float x = to_float(row[v * p.x_v]);
      if (shift == 24) lse = lse_add(lse, x);
      const uint32_t u = radix_bits(x);
      if ((u & mask) == prefix) atomicAdd(&hist[(u >> shift) & 0xFF], 1);
    }
    __syncthreads();
    if (tid == 0) {
      int left = need;
      const int digit = select_digit(hist, &left);
      need_s = left;
      prefix_s = prefix | (uint32_t(digit) << shift);
    }
    __syncthreads();
    need = need_s;
    prefix = prefix_s;
    mask |= 0xFFu << shift;
    __syncthreads();  // hist is cleared by the next pass
  }

  // Log-sum-exp of the row: per-thread partials merged in a fixed order (deterministic).
  if (tid == 0) taken_s = 0;
  const Lse total = block_lse(lse, warp_lse);
  // total.s >= 1 on a row with a finite logit (its maximum adds exp(0)); the floor keeps others finite.
  const float log_z = total.m + logf(fmaxf(total.s, 1.0f));

  // Collect: every element above the threshold, and the first `need` equal to it in index order.
  int ties_before = 0;  // equal elements in earlier chunks (the same in every thread)
  for (int64_t v0 = 0; v0 < p.V; v0 += kThreads) {
    const int64_t v = v0 + tid;
    float x = 0.0f;
    uint32_t u = 0;
    if (v < p.V) {
      x = to_float(row[v * p.x_v]);
      u = radix_bits(x);
    }
    const int tie = v < p.V && u == prefix;
    int rank, chunk_ties;
    Scan(scan_storage).ExclusiveSum(tie, rank, chunk_ties);
    const bool take = v < p.V && (u > prefix || (tie && ties_before + rank < need));
    if (take) keys[atomicAdd(&taken_s, 1)] = desc_key(x, v);
    ties_before += chunk_ties;
    __syncthreads();  // scan_storage is reused by the next chunk
  }
  __syncthreads();

  // Rank sort of the K unique keys, descending; then the children's tokens and path log-probs.
  int64_t* sorted = keys + p.K;
  for (int j = tid; j < p.K; j += kThreads) {
    const int64_t key = keys[j];
    int rank = 0;
    for (int i = 0; i < p.K; ++i) rank += keys[i] > key;
    sorted[rank] = key;
  }
  __syncthreads();
  for (int j = tid; j < p.K; j += kThreads) {
    const int64_t key = sorted[j];
    p.tok[pid * p.K + j] = key_index(key);
    p.clogp[pid * p.K + j] = parent + (key_value(key) - log_z);
  }
}

// Grid: (B,); kThreads threads; dynamic shared memory FK * (8 + 4 + 4) bytes.
__global__ void __launch_bounds__(kThreads) select_kernel(const SelectParams p) {
  using Scan = cub::BlockScan<float, kThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  __shared__ float cost[5];
  __shared__ int first_fail;
  extern __shared__ __align__(16) int64_t keys[];  // [FK] keys, then [FK] int sorted sources, [FK] float cumsum
  int* src_of = reinterpret_cast<int*>(keys + p.FK);
  float* incl = reinterpret_cast<float*>(src_of + p.FK);
  const int tid = threadIdx.x;
  const int64_t b = blockIdx.x, row = b * p.FK;
  if (tid < 5) cost[tid] = p.cost[tid];
  if (tid == 0) first_fail = p.FK;
  for (int j = tid; j < p.FK; j += kThreads) keys[j] = desc_key(p.clogp[row + j], j);
  __syncthreads();
  for (int j = tid; j < p.FK; j += kThreads) {  // rank sort: unique keys, so ranks are a permutation
    const int64_t key = keys[j];
    int rank = 0;
    for (int i = 0; i < p.FK; ++i) rank += keys[i] > key;
    src_of[rank] = j;
  }
  __syncthreads();

  const int64_t size = p.tree_size[b];
  const float length = p.expected_len[b], paths = p.num_paths[b];
  float carry = 0.0f;  // sum of P over earlier chunks
  for (int j0 = 0; j0 < p.FK; j0 += kThreads) {
    const int j = j0 + tid;
    const float path = j < p.FK ? p.clogp[row + src_of[j]] : -INFINITY;
    const float prob = expf(path);
    float sum, chunk;
    Scan(scan_storage).InclusiveSum(prob, sum, chunk);
    sum += carry;
    if (j < p.FK) {
      incl[j] = sum;
      const float tree_len = length + sum - prob;  // L_j, the reference's cumsum - P
      if (!smart_joins(path, tree_len, float(size + j), cost, paths, p.paper, p.alpha, p.budget))
        atomicMin(&first_fail, j);
    }
    carry += chunk;
    __syncthreads();
  }
  __syncthreads();
  const int kept = first_fail;
  for (int j = tid; j < p.FK; j += kThreads) {
    const int src = src_of[j];
    p.out_tok[row + j] = p.tok[row + src];
    p.out_slot[row + j] = src / p.K;
    p.out_logp[row + j] = p.clogp[row + src];
    p.out_keep[row + j] = j < kept;
  }
  if (tid == 0) {
    p.out_size[b] = size + kept;
    p.out_len[b] = kept > 0 ? length + incl[kept - 1] : length;
  }
}

// ------------------------------------------------------------------------ host-side launch

inline size_t select_smem_bytes(int FK) { return size_t(FK) * (8 + 4 + 4); }

// Both launches; the caller checked shapes, 1 <= K <= min(V, kMaxK), F * K <= kMaxCandidates, and
// allocated the [B, F, K] intermediates (tok, clogp) that both params share.
template <typename T>
cudaError_t launch(const TopkParams& tp, const SelectParams& sp, int B, cudaStream_t stream) {
  if (B == 0) return cudaSuccess;
  if (tp.F > 0) {
    topk_kernel<T><<<unsigned(int64_t(B) * tp.F), kThreads, 2 * tp.K * sizeof(int64_t), stream>>>(tp);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  const size_t smem = select_smem_bytes(sp.FK);
  cudaError_t err = cudaFuncSetAttribute(select_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  if (err != cudaSuccess) return err;
  select_kernel<<<unsigned(B), kThreads, smem, stream>>>(sp);
  return cudaGetLastError();
}

}  // namespace smart_expand
}  // namespace specdec
