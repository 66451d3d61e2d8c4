// K3, ValuSpec scoring: CUDA kernel templates (contracts: specdec/ops/logprob.py, docs/kernels.md, K3).
// No torch headers; the torch-facing launcher is logprob.cu.
//
// token_logprob never writes the [N, V] logits: block (row block, split) computes BN x BV logit tiles of
// its vocabulary split (wmma with fp32 accumulation for fp16/bf16, FMA for fp32), folds each into per-row
// running (max, sum of exp) and picks up the target's logit, then writes one partial per row to [S, N]
// buffers; merge_kernel folds the S partials of a row in split order 0..S-1 (deterministic), as the Triton
// kernels do. token_logprob_from_logits streams each row once (one block per row); path_mean averages
// along root-to-node paths by pointer jumping, in the reference's order of additions.
#pragma once

#include <mma.h>

#include "common.cuh"

namespace specdec {
namespace logprob {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int BN = 64;  // rows (nodes) per block
constexpr int BV = 64;  // vocabulary columns per tile
constexpr int BK = 32;  // hidden-size chunk staged in shared memory
// path_mean: T per row. The kernel keeps 24 bytes per node in shared memory (double-buffered total, count,
// jump): 4096 nodes = 96 KiB. 8192 (192 KiB) would exceed sm_80's 163 KiB opt-in limit, and
// cudaFuncSetAttribute would fail there for T above 6954.
constexpr int kMaxPathNodes = 4096;

struct TokenParams {
  const void* hidden;      // [N, d] T-typed, any strides
  const void* weight;      // [V, d] T-typed, any strides
  const void* bias;        // [V] T-typed contiguous, or nullptr
  const int64_t* targets;  // [N] contiguous
  float* part_max;         // [S, N] per-split max logit
  float* part_sum;         // [S, N] per-split sum of exp(logit - max)
  float* part_tgt;         // [S, N] target logit if it lies in the split, else 0
  float* out;              // [N]
  int64_t N, V;
  int D, splits, tiles_per_split;
  int64_t h_n, h_d, w_v, w_d;
};

struct LogitsParams {
  const void* logits;      // [N, V] T-typed, any strides
  const int64_t* targets;  // [N] contiguous
  float* out;              // [N]
  int64_t N, V, x_n, x_v;
};

template <typename I>
struct PathParams {
  const float* logp;       // [B, T] any strides
  const I* parents;        // [B, T] any strides, -1 for the root
  const int64_t* num_nodes;  // [B] contiguous
  float* out;              // [B, T] contiguous
  int B, T, rounds;        // rounds = max(1, ceil(log2 T))
  int64_t l_b, l_t, p_b, p_t;
};

// ------------------------------------------------------------------------ pure logic (host-tested)

// Fold the per-split partials of one row in split order: target logit - log-sum-exp. A row's total is
// >= 1 (the split holding the maximum adds exp(0)); the floor keeps rows with no finite logit finite.
__host__ __device__ inline float merge_partials(const float* mx, const float* sm, const float* tg, int splits,
                                                int64_t stride) {
  float row_max = -INFINITY;
  for (int s = 0; s < splits; ++s) row_max = fmaxf(row_max, mx[s * stride]);
  const float safe = row_max == -INFINITY ? 0.0f : row_max;
  float total = 0.0f, tgt = 0.0f;
  for (int s = 0; s < splits; ++s) {
    total += sm[s * stride] * expf(mx[s * stride] - safe);
    tgt += tg[s * stride];
  }
  return tgt - (row_max + logf(fmaxf(total, 1.0f)));
}

// ------------------------------------------------------------------------ token_logprob

template <typename T>
struct TokenTiles {
  static constexpr bool kTensorCores = sizeof(T) == 2;
  static constexpr int LDH = BK + 16 / sizeof(T);  // padded rows of the hidden / weight chunks
  static constexpr int LDS = BV + 4;
  static constexpr int kFrags = (BN / 16) * (BV / 16) / kWarps;  // accumulator tiles per warp
  static constexpr int kPerThread = BN * BV / kThreads;          // fp32 path: logits per thread
};

// Grid: (cdiv(N, BN), splits); kThreads threads; static shared memory (~30 KiB).
template <typename T>
__global__ void __launch_bounds__(kThreads) token_logprob_kernel(const TokenParams p) {
  using L = TokenTiles<T>;
  __shared__ __align__(128) T hs[BN * L::LDH];
  __shared__ __align__(128) T ws[BV * L::LDH];
  __shared__ __align__(128) float ss[BN * L::LDS];
  __shared__ float run_max[BN], run_sum[BN], run_tgt[BN];
  __shared__ int64_t target[BN];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t row0 = int64_t(blockIdx.x) * BN;
  const int split = blockIdx.y;
  const T* h = static_cast<const T*>(p.hidden);
  const T* w = static_cast<const T*>(p.weight);
  const T* bias = static_cast<const T*>(p.bias);
  for (int r = tid; r < BN; r += kThreads) {
    run_max[r] = -INFINITY;
    run_sum[r] = 0.0f;
    run_tgt[r] = 0.0f;
    target[r] = row0 + r < p.N ? p.targets[row0 + r] : -1;
  }
  const int64_t first = int64_t(split) * p.tiles_per_split;
  const int64_t n_tiles = cdiv(p.V, BV);
  const int64_t last = first + p.tiles_per_split < n_tiles ? first + p.tiles_per_split : n_tiles;
  __syncthreads();

  for (int64_t tile = first; tile < last; ++tile) {
    const int64_t v0 = tile * BV;
    // Logits tile ss[r][c] = hidden[row0 + r] . weight[v0 + c], fp32.
    if constexpr (L::kTensorCores) {
      using namespace nvcuda;
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[L::kFrags];
#pragma unroll
      for (int f = 0; f < L::kFrags; ++f) wmma::fill_fragment(acc[f], 0.0f);
      for (int d0 = 0; d0 < p.D; d0 += BK) {
        for (int idx = tid; idx < BN * BK; idx += kThreads) {
          const int r = idx / BK, kk = idx % BK;
          const bool ok = row0 + r < p.N && d0 + kk < p.D;
          hs[r * L::LDH + kk] = ok ? h[(row0 + r) * p.h_n + (d0 + kk) * p.h_d] : zero_value<T>();
          const bool okw = v0 + r < p.V && d0 + kk < p.D;  // BV == BN: the same loop fills the weight chunk
          ws[r * L::LDH + kk] = okw ? w[(v0 + r) * p.w_v + (d0 + kk) * p.w_d] : zero_value<T>();
        }
        __syncthreads();
#pragma unroll
        for (int f = 0; f < L::kFrags; ++f) {
          const int t = warp + f * kWarps, i = t / (BV / 16), j = t % (BV / 16);
#pragma unroll
          for (int kk = 0; kk < BK / 16; ++kk) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> bt;  // (d, v) at W[v][d]
            wmma::load_matrix_sync(a, hs + 16 * i * L::LDH + 16 * kk, L::LDH);
            wmma::load_matrix_sync(bt, ws + 16 * j * L::LDH + 16 * kk, L::LDH);
            wmma::mma_sync(acc[f], a, bt, acc[f]);
          }
        }
        __syncthreads();
      }
#pragma unroll
      for (int f = 0; f < L::kFrags; ++f) {
        const int t = warp + f * kWarps, i = t / (BV / 16), j = t % (BV / 16);
        wmma::store_matrix_sync(ss + 16 * i * L::LDS + 16 * j, acc[f], L::LDS, wmma::mem_row_major);
      }
    } else {
      float acc[L::kPerThread];
#pragma unroll
      for (int e = 0; e < L::kPerThread; ++e) acc[e] = 0.0f;
      for (int d0 = 0; d0 < p.D; d0 += BK) {
        for (int idx = tid; idx < BN * BK; idx += kThreads) {
          const int r = idx / BK, kk = idx % BK;
          const bool ok = row0 + r < p.N && d0 + kk < p.D;
          hs[r * L::LDH + kk] = ok ? h[(row0 + r) * p.h_n + (d0 + kk) * p.h_d] : zero_value<T>();
          const bool okw = v0 + r < p.V && d0 + kk < p.D;
          ws[r * L::LDH + kk] = okw ? w[(v0 + r) * p.w_v + (d0 + kk) * p.w_d] : zero_value<T>();
        }
        __syncthreads();
#pragma unroll
        for (int e = 0; e < L::kPerThread; ++e) {
          const int idx = tid + e * kThreads, r = idx / BV, c = idx % BV;
          for (int kk = 0; kk < BK; ++kk)
            acc[e] = fmaf(to_float(hs[r * L::LDH + kk]), to_float(ws[c * L::LDH + kk]), acc[e]);
        }
        __syncthreads();
      }
#pragma unroll
      for (int e = 0; e < L::kPerThread; ++e) {
        const int idx = tid + e * kThreads;
        ss[(idx / BV) * L::LDS + idx % BV] = acc[e];
      }
    }
    __syncthreads();
    // Fold the tile into each row's running (max, sum); one warp per row, two columns per lane.
    for (int r = warp; r < BN; r += kWarps) {
      float x[BV / 32];
      float tile_max = -INFINITY;
#pragma unroll
      for (int u = 0; u < BV / 32; ++u) {
        const int64_t v = v0 + lane + 32 * u;
        x[u] = -INFINITY;
        if (v < p.V) x[u] = ss[r * L::LDS + lane + 32 * u] + (bias ? to_float(bias[v]) : 0.0f);
        tile_max = fmaxf(tile_max, x[u]);
        if (v == target[r]) run_tgt[r] += x[u];  // one lane of one tile holds the target
      }
      tile_max = warp_max(tile_max);
      const float m_old = run_max[r];
      const float m_new = fmaxf(m_old, tile_max);
      const float safe = m_new == -INFINITY ? 0.0f : m_new;
      float sum = 0.0f;
#pragma unroll
      for (int u = 0; u < BV / 32; ++u) sum += expf(x[u] - safe);
      sum = warp_sum(sum);
      __syncwarp();
      if (lane == 0) {
        run_sum[r] = run_sum[r] * expf(m_old - safe) + sum;
        run_max[r] = m_new;
      }
    }
    __syncthreads();
  }
  for (int r = tid; r < BN; r += kThreads) {
    if (row0 + r >= p.N) continue;
    const int64_t o = int64_t(split) * p.N + row0 + r;
    p.part_max[o] = run_max[r];
    p.part_sum[o] = run_sum[r];
    p.part_tgt[o] = run_tgt[r];
  }
}

// Grid: (cdiv(N, kThreads),): out[n] = target logit - log-sum-exp, the splits folded in order.
__global__ void merge_kernel(const TokenParams p) {
  const int64_t n = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (n >= p.N) return;
  p.out[n] = merge_partials(p.part_max + n, p.part_sum + n, p.part_tgt + n, p.splits, p.N);
}

// ------------------------------------------------------------------------ token_logprob_from_logits

constexpr int kRowThreads = 256;

// Grid: (N,); kRowThreads threads. A target outside [0, V) contributes a logit of 0 (validate=True in the
// launcher rejects it), as in the Triton kernel.
template <typename T>
__global__ void __launch_bounds__(kRowThreads) logits_logprob_kernel(const LogitsParams p) {
  __shared__ Lse scratch[kRowThreads / 32];
  const int64_t n = blockIdx.x;
  const T* row = static_cast<const T*>(p.logits) + n * p.x_n;
  Lse acc{-INFINITY, 0.0f};
  for (int64_t v = threadIdx.x; v < p.V; v += kRowThreads) acc = lse_add(acc, to_float(row[v * p.x_v]));
  const Lse total = block_lse(acc, scratch);
  if (threadIdx.x == 0) {
    const int64_t t = p.targets[n];
    const float tgt = t >= 0 && t < p.V ? to_float(row[t * p.x_v]) : 0.0f;
    p.out[n] = tgt - (total.m + logf(fmaxf(total.s, 1.0f)));
  }
}

// ------------------------------------------------------------------------ path_mean

constexpr int kPathThreads = 256;

// Grid: (B,); kPathThreads threads; dynamic shared memory 2 * T * 12 bytes (double-buffered total, count,
// jump). After round r, node i's (total, count) cover its 2^r nearest non-root path nodes, itself included;
// each round reads only the previous buffer, so the additions happen in the reference's order.
template <typename I>
__global__ void __launch_bounds__(kPathThreads) path_mean_kernel(const PathParams<I> p) {
  extern __shared__ __align__(16) float path_smem[];
  float* total[2] = {path_smem, path_smem + p.T};
  int* count[2] = {reinterpret_cast<int*>(path_smem + 2 * p.T), reinterpret_cast<int*>(path_smem + 3 * p.T)};
  int* jump[2] = {reinterpret_cast<int*>(path_smem + 4 * p.T), reinterpret_cast<int*>(path_smem + 5 * p.T)};
  const int64_t b = blockIdx.x;
  const int64_t nodes = p.num_nodes[b];
  for (int i = threadIdx.x; i < p.T; i += kPathThreads) {
    const bool scored = i > 0 && i < nodes;  // real non-root nodes
    const int64_t parent = scored ? int64_t(p.parents[b * p.p_b + i * p.p_t]) : -1;
    jump[0][i] = scored && parent < i ? int(parent) : -1;
    total[0][i] = scored ? p.logp[b * p.l_b + i * p.l_t] : 0.0f;
    count[0][i] = scored ? 1 : 0;
  }
  __syncthreads();
  int cur = 0;
  for (int round = 0; round < p.rounds; ++round) {
    const int nxt = cur ^ 1;
    for (int i = threadIdx.x; i < p.T; i += kPathThreads) {
      const int j = jump[cur][i];
      const bool has = j >= 0;
      const int s = has ? j : 0;
      total[nxt][i] = total[cur][i] + (has ? total[cur][s] : 0.0f);
      count[nxt][i] = count[cur][i] + (has ? count[cur][s] : 0);
      jump[nxt][i] = has ? jump[cur][s] : -1;
    }
    __syncthreads();
    cur = nxt;
  }
  for (int i = threadIdx.x; i < p.T; i += kPathThreads) {
    const int c = count[cur][i];
    p.out[b * p.T + i] = c > 0 ? total[cur][i] / float(c) : 0.0f;
  }
}

// ------------------------------------------------------------------------ host-side launches

// The caller checked shapes and allocated [splits, N] partials; splits * tiles_per_split covers V.
template <typename T>
cudaError_t launch_token(const TokenParams& p, cudaStream_t stream) {
  if (p.N == 0) return cudaSuccess;
  token_logprob_kernel<T><<<dim3(unsigned(cdiv(p.N, BN)), unsigned(p.splits)), kThreads, 0, stream>>>(p);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  merge_kernel<<<unsigned(cdiv(p.N, kThreads)), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_logits(const LogitsParams& p, cudaStream_t stream) {
  if (p.N == 0) return cudaSuccess;
  logits_logprob_kernel<T><<<unsigned(p.N), kRowThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

inline size_t path_smem_bytes(int T) { return size_t(T) * 6 * 4; }

// The caller checked 1 <= T <= kMaxPathNodes.
template <typename I>
cudaError_t launch_path_mean(const PathParams<I>& p, cudaStream_t stream) {
  if (p.B == 0) return cudaSuccess;
  const size_t smem = path_smem_bytes(p.T);
  cudaError_t err = cudaFuncSetAttribute(path_mean_kernel<I>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  if (err != cudaSuccess) return err;
  path_mean_kernel<I><<<unsigned(p.B), kPathThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace logprob
}  // namespace specdec
