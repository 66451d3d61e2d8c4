// K1, tree-mask attention: CUDA kernel templates (contract: specdec/ops/tree_attention.py, docs/kernels.md, K1).
// No torch headers; the torch-facing launcher is tree_attention.cu.
//
// One thread block owns BM packed query rows of one (batch row b, KV head) pair, exactly as the Triton
// kernel does: row r of the block is global row gr = m_tile * BM + r, which is tree node t = gr / GROUP of
// query head kvh * GROUP + gr % GROUP (GROUP = Hq / Hkv), so each K/V tile is read once for the whole
// query-head group. The block walks a list of key tiles of BN slots:
//   tiles 0 .. n_prefix-1: the prefix [lo, hi) of this split, every row sees every slot (no mask);
//   tiles n_prefix ..    : the tree region [length, length + tree_end) (last split only), slot length + m
//                          visible to a row iff bit m of its mask word is set; tiles with no visible bit
//                          for any row of the block are skipped before anything is loaded.
// K/V tiles are double-buffered in shared memory with cp.async (sm_80+), slots no row sees zero-filled
// (never read: they may hold NaN). Scores S = Q K^T and O += P V run on tensor cores through nvcuda::wmma
// for fp16/bf16 (fp32 accumulation) and on FMA for fp32 (fp32 stays fp32: no TF32). Because wmma's
// fragment layout is unspecified, the online softmax works on S staged in shared memory and the running
// output O lives in shared memory (fp32), loaded into accumulator fragments for each P V product.
// Softmax is in base 2 (scale arrives multiplied by log2 e). With num_splits > 1 each split writes its
// normalised partial output and log-sum-exp, and tree_attention_merge_kernel combines them.
#pragma once

#include <mma.h>

#include "common.cuh"

namespace specdec {
namespace tree_attention {

constexpr int kThreads = 128;  // 4 warps
constexpr int kWarps = kThreads / 32;
constexpr int kMaxHeadDim = 256;
constexpr int kMaxSharedBytes = 160 * 1024;  // under sm_80's 163 KiB opt-in limit (sm_90: 227 KiB)

struct Params {
  const void* q;  // [B, Hq, T, D] T-typed, any strides
  const void* k;  // [B, Hkv, S, D]
  const void* v;  // [B, Hkv, S, D]
  const int64_t* start;   // [B] contiguous
  const int64_t* length;  // [B] contiguous
  const int32_t* mask;    // [B, T, W] little-endian ancestor bits, any strides
  void* out;              // [B, Hq, T, D] T-typed (num_splits == 1), any strides
  float* part;            // [B, Hq, T, num_splits, D] contiguous fp32 partials (num_splits > 1)
  float* lse;             // [B, Hq, T, num_splits] contiguous fp32 base-2 log-sum-exp (num_splits > 1)
  float scale_log2;       // softmax scale * log2(e)
  int B, Hq, Hkv, group, T, D, W, num_splits;
  int64_t S;
  int64_t q_b, q_h, q_t, q_d;
  int64_t k_b, k_h, k_s, k_d;
  int64_t v_b, v_h, v_s, v_d;
  int64_t m_b, m_t, m_w;
  int64_t o_b, o_h, o_t, o_d;
  bool vec_kv;  // k, v rows may be copied in 16-byte chunks (aligned, unit d-stride, D % chunk == 0)
};

// ------------------------------------------------------------------------ pure index logic (host-tested)

// The prefix slots [lo, hi) of split `split` out of `num_splits`: the row's prefix [start, min(length, S))
// cut into equal chunks rounded up to whole tiles of bn slots, as the Triton kernel cuts it. Invariant: the
// splits' ranges are disjoint, in order, and their union is the prefix; a split past the end is empty.
__host__ __device__ inline void split_range(int64_t start, int64_t length, int64_t S, int num_splits, int split,
                                            int bn, int64_t* lo, int64_t* hi) {
  const int64_t end = length < S ? length : S;
  const int64_t prefix = end - start > 0 ? end - start : 0;
  const int64_t chunk = cdiv(cdiv(prefix, num_splits), bn) * bn;
  *lo = start + split * chunk;
  const int64_t h = *lo + chunk;
  *hi = h < end ? h : end;
}

// Slots of the tree region a split visits: min(32 W, S - length) for the last split, else none.
__host__ __device__ inline int64_t tree_region(int64_t length, int64_t S, int W, int num_splits, int split) {
  if (split != num_splits - 1) return 0;
  const int64_t room = S - length > 0 ? S - length : 0;
  return 32LL * W < room ? 32LL * W : room;
}

// Mask word covering region slots [first, first + 32), with the bits at or past tree_end cleared.
__host__ __device__ inline uint32_t clip_word(uint32_t bits, int64_t first, int64_t tree_end) {
  const int64_t valid = tree_end - first;
  if (valid >= 32) return bits;
  if (valid <= 0) return 0u;
  return bits & ((1u << valid) - 1u);
}

// Padded head dim of the kernel instantiation serving head dim D (0 when D is above kMaxHeadDim). Small
// heads share the 64 instantiation: fewer kernels to build, and such models are tiny anyway.
__host__ __device__ inline int padded_head_dim(int D) {
  return D <= 64 ? 64 : D <= 128 ? 128 : D <= 256 ? 256 : 0;
}

// Log-sum-exp merge of n split partials (base 2): out = sum_s w_s part_s / sum_s w_s with
// w_s = 2^(lse_s - max lse); splits that saw nothing have lse = -inf and weight 0. Returns sum_s w_s and
// writes the weights; a row no split saw gets total 0 (its output is 0). Fixed order: deterministic.
__host__ __device__ inline float merge_weights(const float* lse, int n, float* w) {
  float m = -INFINITY;
  for (int s = 0; s < n; ++s) m = fmaxf(m, lse[s]);
  const float safe = m == -INFINITY ? 0.0f : m;
  float total = 0.0f;
  for (int s = 0; s < n; ++s) {
    w[s] = exp2f(lse[s] - safe);
    total += w[s];
  }
  return total;
}

// ------------------------------------------------------------------------ tile configuration

template <typename T, int DP, int BM, int BN, int STAGES>
struct Config {
  static constexpr bool kTensorCores = sizeof(T) == 2;
  static constexpr int kChunk = 16 / sizeof(T);   // elements per 16-byte copy
  static constexpr int LDT = DP + kChunk;          // padded rows of Q, K, V (16 bytes of padding)
  static constexpr int LDP = BN + kChunk;          // padded rows of P
  static constexpr int LDS = BN + 4;               // padded rows of S (fp32)
  static constexpr int LDO = DP + 4;               // padded rows of O (fp32)
  static constexpr int WPT = BN / 32;              // mask words per tile row
  static constexpr int align(int bytes) { return (bytes + 127) / 128 * 128; }
  static constexpr int kQ = 0;
  static constexpr int kK = kQ + align(BM * LDT * sizeof(T));
  static constexpr int kV = kK + align(STAGES * BN * LDT * sizeof(T));
  static constexpr int kS = kV + align(STAGES * BN * LDT * sizeof(T));
  static constexpr int kP = kS + align(BM * LDS * 4);
  static constexpr int kO = kP + align(BM * LDP * sizeof(T));
  static constexpr int kRow = kO + align(BM * LDO * 4);  // m, l: fp32 [BM] each
  static constexpr int kWords = kRow + align(2 * BM * 4);  // uint32 [2][BM][WPT]
  static constexpr int kColw = kWords + align(2 * BM * WPT * 4);  // uint32 [2][WPT]
  static constexpr int kBytes = kColw + align(2 * WPT * 4);
  static_assert(BN % 32 == 0 && BM % 16 == 0 && DP % 16 == 0, "tiles: whole mask words and wmma tiles");
  static_assert(STAGES == 1 || STAGES == 2, "one or two K/V buffers");
  static_assert(kBytes <= kMaxSharedBytes, "shared memory above the sm_80 limit");
};

// The instantiation a launch uses: BM = 16 rows for decode-sized groups (GROUP * T <= 16), else 64 rows
// for 16-bit inputs with D <= 128 (32 otherwise). fp32 keeps 32-slot tiles; fp32 at D = 256 has a single
// K/V buffer (two would need 272 KiB).
template <typename T, int DP> struct Tiles {
  static constexpr bool k16 = sizeof(T) == 2;
  static constexpr int BM_LARGE = (k16 && DP <= 128) ? 64 : 32;
  static constexpr int BN = (k16 && DP <= 128) ? 64 : 32;
  static constexpr int STAGES = (!k16 && DP > 128) ? 1 : 2;
};

// ------------------------------------------------------------------------ the kernel

template <typename T, int DP, int BM, int BN, int STAGES>
struct Block {
  using C = Config<T, DP, BM, BN, STAGES>;
  const Params& p;
  char* smem;
  int tid, warp, lane;
  int64_t b, kvh, row0, rows_total;
  int64_t lo, hi, length, tree_end;
  int n_prefix, n_tiles;

  __device__ T* Qs() const { return reinterpret_cast<T*>(smem + C::kQ); }
  __device__ T* Ks(int s) const { return reinterpret_cast<T*>(smem + C::kK) + s * BN * C::LDT; }
  __device__ T* Vs(int s) const { return reinterpret_cast<T*>(smem + C::kV) + s * BN * C::LDT; }
  __device__ float* Ss() const { return reinterpret_cast<float*>(smem + C::kS); }
  __device__ T* Ps() const { return reinterpret_cast<T*>(smem + C::kP); }
  __device__ float* Os() const { return reinterpret_cast<float*>(smem + C::kO); }
  __device__ float* Ms() const { return reinterpret_cast<float*>(smem + C::kRow); }
  __device__ float* Ls() const { return Ms() + BM; }
  __device__ uint32_t* Words(int s) const { return reinterpret_cast<uint32_t*>(smem + C::kWords) + s * BM * C::WPT; }
  __device__ uint32_t* Colw(int s) const { return reinterpret_cast<uint32_t*>(smem + C::kColw) + s * C::WPT; }

  // First tile id >= i that some row of the block sees; n_tiles when none. Tree tiles get their clipped mask
  // words in Words(s) and the OR over rows in Colw(s). Every thread calls it (it holds barriers); buffer s
  // must be free (its last tile finished before the caller's last barrier).
  __device__ int find_tile(int i, int s) {
    for (; i < n_tiles; ++i) {
      if (i < n_prefix) return i;
      const int64_t m0 = int64_t(i - n_prefix) * BN;
      if (tid < C::WPT) Colw(s)[tid] = 0u;
      __syncthreads();
      int any = 0;
      for (int idx = tid; idx < BM * C::WPT; idx += kThreads) {
        const int r = idx / C::WPT, w = idx % C::WPT;
        const int64_t gr = row0 + r, word = m0 / 32 + w;
        uint32_t bits = 0u;
        if (gr < rows_total && word < p.W) {
          const int64_t t = gr / p.group;
          bits = clip_word(static_cast<uint32_t>(p.mask[b * p.m_b + t * p.m_t + word * p.m_w]), m0 + 32 * w, tree_end);
        }
        Words(s)[r * C::WPT + w] = bits;
        if (bits) {
          any = 1;
          atomicOr(&Colw(s)[w], bits);
        }
      }
      if (__syncthreads_or(any)) return i;
    }
    return n_tiles;
  }

  // Slot of column c of tile i, and whether any row reads it (else its K/V are zero-filled, never read).
  __device__ int64_t tile_base(int i) const {
    return i < n_prefix ? lo + int64_t(i) * BN : length + int64_t(i - n_prefix) * BN;
  }
  __device__ bool column_live(int i, int s, int c) const {
    if (i < n_prefix) return tile_base(i) + c < hi;
    return (Colw(s)[c / 32] >> (c % 32)) & 1u;
  }

  __device__ void load_tile(int i, int s) {
    const int64_t base = tile_base(i);
    const T* k = static_cast<const T*>(p.k) + b * p.k_b + kvh * p.k_h;
    const T* v = static_cast<const T*>(p.v) + b * p.v_b + kvh * p.v_h;
    constexpr int CPR = DP / C::kChunk;  // 16-byte chunks per padded row
    for (int idx = tid; idx < BN * CPR; idx += kThreads) {
      const int c = idx / CPR, d0 = (idx % CPR) * C::kChunk;
      const bool live = column_live(i, s, c) && d0 < p.D;
      const int64_t slot = base + c;
      T* kd = Ks(s) + c * C::LDT + d0;
      T* vd = Vs(s) + c * C::LDT + d0;
      if (p.vec_kv) {
        cp_async_16(kd, live ? k + slot * p.k_s + d0 : k, live ? 16 : 0);
        cp_async_16(vd, live ? v + slot * p.v_s + d0 : v, live ? 16 : 0);
      } else {
#pragma unroll
        for (int e = 0; e < C::kChunk; ++e) {
          const bool ok = live && d0 + e < p.D;
          kd[e] = ok ? k[slot * p.k_s + (d0 + e) * p.k_d] : zero_value<T>();
          vd[e] = ok ? v[slot * p.v_s + (d0 + e) * p.v_d] : zero_value<T>();
        }
      }
    }
  }

  // S = (Q K^T) * scale_log2 for tile buffer s.
  __device__ void scores(int s) {
    if constexpr (C::kTensorCores) {
      using namespace nvcuda;
      for (int tile = warp; tile < (BM / 16) * (BN / 16); tile += kWarps) {
        const int i = tile / (BN / 16), j = tile % (BN / 16);
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::fill_fragment(acc, 0.0f);
        for (int kk = 0; kk < DP / 16; ++kk) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> kt;  // (d, n) at K[n][d]
          wmma::load_matrix_sync(a, Qs() + 16 * i * C::LDT + 16 * kk, C::LDT);
          wmma::load_matrix_sync(kt, Ks(s) + 16 * j * C::LDT + 16 * kk, C::LDT);
          wmma::mma_sync(acc, a, kt, acc);
        }
        for (int e = 0; e < acc.num_elements; ++e) acc.x[e] *= p.scale_log2;
        wmma::store_matrix_sync(Ss() + 16 * i * C::LDS + 16 * j, acc, C::LDS, wmma::mem_row_major);
      }
    } else {
      for (int idx = tid; idx < BM * BN; idx += kThreads) {
        const int r = idx / BN, c = idx % BN;
        const T* qr = Qs() + r * C::LDT;
        const T* kr = Ks(s) + c * C::LDT;
        float dot = 0.0f;
        for (int d = 0; d < p.D; ++d) dot = fmaf(to_float(qr[d]), to_float(kr[d]), dot);
        Ss()[r * C::LDS + c] = dot * p.scale_log2;
      }
    }
  }

  // Online softmax over tile i (buffer s): P = 2^(S - m_new) where visible, else 0; l = l * alpha + sum P;
  // O rows scaled by alpha = 2^(m_old - m_new). A row with nothing visible so far keeps m = -inf, l = 0
  // and O = 0 (its safe maximum is 0, so alpha = 2^-inf = 0).
  __device__ void softmax(int i, int s) {
    constexpr int PER_LANE = BN / 32;
    for (int r = warp; r < BM; r += kWarps) {
      float x[PER_LANE];
      float tile_max = -INFINITY;
#pragma unroll
      for (int u = 0; u < PER_LANE; ++u) {
        const int c = lane + 32 * u;
        const bool vis = i < n_prefix ? tile_base(i) + c < hi : (Words(s)[r * C::WPT + u] >> lane) & 1u;
        x[u] = vis ? Ss()[r * C::LDS + c] : -INFINITY;
        tile_max = fmaxf(tile_max, x[u]);
      }
      tile_max = warp_max(tile_max);
      const float m_old = Ms()[r];
      const float m_new = fmaxf(m_old, tile_max);
      const float m_safe = m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = exp2f(m_old - m_safe);
      float sum = 0.0f;
#pragma unroll
      for (int u = 0; u < PER_LANE; ++u) {
        const float pr = x[u] == -INFINITY ? 0.0f : exp2f(x[u] - m_safe);
        Ps()[r * C::LDP + lane + 32 * u] = from_float<T>(pr);
        sum += pr;
      }
      sum = warp_sum(sum);
      __syncwarp();
      if (lane == 0) {
        Ms()[r] = m_new;
        Ls()[r] = Ls()[r] * alpha + sum;
      }
      for (int d = lane; d < DP; d += 32) Os()[r * C::LDO + d] *= alpha;
    }
  }

  // O += P V for tile buffer s.
  __device__ void accumulate(int s) {
    if constexpr (C::kTensorCores) {
      using namespace nvcuda;
      for (int tile = warp; tile < (BM / 16) * (DP / 16); tile += kWarps) {
        const int i = tile / (DP / 16), j = tile % (DP / 16);
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::load_matrix_sync(acc, Os() + 16 * i * C::LDO + 16 * j, C::LDO, wmma::mem_row_major);
        for (int kk = 0; kk < BN / 16; ++kk) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> vf;  // (n, d) at V[n][d]
          wmma::load_matrix_sync(a, Ps() + 16 * i * C::LDP + 16 * kk, C::LDP);
          wmma::load_matrix_sync(vf, Vs(s) + 16 * kk * C::LDT + 16 * j, C::LDT);
          wmma::mma_sync(acc, a, vf, acc);
        }
        wmma::store_matrix_sync(Os() + 16 * i * C::LDO + 16 * j, acc, C::LDO, wmma::mem_row_major);
      }
    } else {
      for (int idx = tid; idx < BM * p.D; idx += kThreads) {
        const int r = idx / p.D, d = idx % p.D;
        const T* pr = Ps() + r * C::LDP;
        const T* vc = Vs(s) + d;
        float acc = Os()[r * C::LDO + d];
        for (int c = 0; c < BN; ++c) acc = fmaf(to_float(pr[c]), to_float(vc[c * C::LDT]), acc);
        Os()[r * C::LDO + d] = acc;
      }
    }
  }

  __device__ void run() {
    const int split = blockIdx.z;
    // Q rows (packed heads), zero beyond D and beyond the last row; O = 0, m = -inf, l = 0.
    const T* q = static_cast<const T*>(p.q);
    for (int idx = tid; idx < BM * DP; idx += kThreads) {
      const int r = idx / DP, d = idx % DP;
      const int64_t gr = row0 + r;
      T value = zero_value<T>();
      if (gr < rows_total && d < p.D) {
        const int64_t t = gr / p.group, h = kvh * p.group + gr % p.group;
        value = q[b * p.q_b + h * p.q_h + t * p.q_t + d * p.q_d];
      }
      Qs()[r * C::LDT + d] = value;
      Os()[r * C::LDO + d] = 0.0f;
    }
    for (int r = tid; r < BM; r += kThreads) {
      Ms()[r] = -INFINITY;
      Ls()[r] = 0.0f;
    }
    __syncthreads();

    int cur = find_tile(0, 0);
    if (STAGES == 2 && cur < n_tiles) load_tile(cur, 0);
    cp_async_commit();
    int s = 0;
    while (cur < n_tiles) {
      int next = n_tiles;
      if constexpr (STAGES == 2) {
        next = find_tile(cur + 1, s ^ 1);  // buffer s ^ 1 is free: its tile finished at the last barrier
        if (next < n_tiles) load_tile(next, s ^ 1);
        cp_async_commit();
        cp_async_wait<1>();  // everything but the newest group (the next tile) has landed
      } else {
        load_tile(cur, 0);
        cp_async_commit();
        cp_async_wait<0>();
      }
      __syncthreads();
      scores(s);
      __syncthreads();
      softmax(cur, s);
      __syncthreads();
      accumulate(s);
      __syncthreads();
      if constexpr (STAGES == 1) next = find_tile(cur + 1, 0);
      cur = next;
      s = STAGES == 2 ? s ^ 1 : 0;
    }
    cp_async_wait<0>();

    // Epilogue: O / l (0 for a row that saw nothing), or the split's partial and log-sum-exp.
    for (int idx = tid; idx < BM * p.D; idx += kThreads) {
      const int r = idx / p.D, d = idx % p.D;
      const int64_t gr = row0 + r;
      if (gr >= rows_total) continue;
      const float l = Ls()[r];
      const float o = l > 0.0f ? Os()[r * C::LDO + d] / l : 0.0f;
      const int64_t t = gr / p.group, h = kvh * p.group + gr % p.group;
      if (p.num_splits == 1) {
        static_cast<T*>(p.out)[b * p.o_b + h * p.o_h + t * p.o_t + d * p.o_d] = from_float<T>(o);
      } else {
        p.part[(((b * p.Hq + h) * p.T + t) * p.num_splits + split) * p.D + d] = o;
      }
    }
    if (p.num_splits > 1) {
      for (int r = tid; r < BM; r += kThreads) {
        const int64_t gr = row0 + r;
        if (gr >= rows_total) continue;
        const int64_t t = gr / p.group, h = kvh * p.group + gr % p.group;
        const float l = Ls()[r];
        p.lse[((b * p.Hq + h) * p.T + t) * p.num_splits + split] = l > 0.0f ? Ms()[r] + log2f(l) : -INFINITY;
      }
    }
  }
};

// Grid: (cdiv(GROUP * T, BM), B * Hkv, num_splits); kThreads threads; Config::kBytes dynamic shared memory.
template <typename T, int DP, int BM, int BN, int STAGES>
__global__ void __launch_bounds__(kThreads) tree_attention_kernel(const Params p) {
  extern __shared__ __align__(128) char smem[];
  Block<T, DP, BM, BN, STAGES> blk{p, smem};
  blk.tid = threadIdx.x;
  blk.warp = threadIdx.x / 32;
  blk.lane = threadIdx.x % 32;
  const int64_t bh = blockIdx.y;
  blk.b = bh / p.Hkv;
  blk.kvh = bh % p.Hkv;
  blk.row0 = int64_t(blockIdx.x) * BM;
  blk.rows_total = int64_t(p.group) * p.T;
  blk.length = p.length[blk.b];
  split_range(p.start[blk.b], blk.length, p.S, p.num_splits, blockIdx.z, BN, &blk.lo, &blk.hi);
  blk.tree_end = tree_region(blk.length, p.S, p.W, p.num_splits, blockIdx.z);
  blk.n_prefix = blk.hi > blk.lo ? int(cdiv(blk.hi - blk.lo, BN)) : 0;
  blk.n_tiles = blk.n_prefix + int(cdiv(blk.tree_end, BN));
  blk.run();
}

// One warp per query row (B * Hq * T rows): out[row] = sum_s w_s part[row, s] / sum_s w_s.
template <typename T>
__global__ void tree_attention_merge_kernel(const Params p) {
  const int64_t row = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= int64_t(p.B) * p.Hq * p.T) return;
  const int64_t t = row % p.T, h = (row / p.T) % p.Hq, b = row / (int64_t(p.T) * p.Hq);
  float w[32];  // num_splits <= 32 (checked by the launcher)
  const float total = merge_weights(p.lse + row * p.num_splits, p.num_splits, w);
  const float inv = total > 0.0f ? 1.0f / total : 0.0f;
  for (int d = lane; d < p.D; d += 32) {
    float acc = 0.0f;
    for (int s = 0; s < p.num_splits; ++s) acc += w[s] * p.part[(row * p.num_splits + s) * p.D + d];
    static_cast<T*>(p.out)[b * p.o_b + h * p.o_h + t * p.o_t + d * p.o_d] = from_float<T>(acc * inv);
  }
}

// ------------------------------------------------------------------------ host-side launch

constexpr int kMaxSplits = 32;

template <typename T, int DP, int BM>
cudaError_t launch_config(const Params& p, cudaStream_t stream) {
  using Tl = Tiles<T, DP>;
  using C = Config<T, DP, BM, Tl::BN, Tl::STAGES>;
  auto kernel = tree_attention_kernel<T, DP, BM, Tl::BN, Tl::STAGES>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kBytes);
  if (err != cudaSuccess) return err;
  const dim3 grid(unsigned(cdiv(int64_t(p.group) * p.T, BM)), unsigned(p.B * p.Hkv), unsigned(p.num_splits));
  kernel<<<grid, kThreads, C::kBytes, stream>>>(p);
  return cudaGetLastError();
}

template <typename T, int DP>
cudaError_t launch_head_dim(const Params& p, cudaStream_t stream) {
  if (int64_t(p.group) * p.T <= 16) return launch_config<T, DP, 16>(p, stream);
  return launch_config<T, DP, Tiles<T, DP>::BM_LARGE>(p, stream);
}

// Launch the attention (and the merge when p.num_splits > 1). The caller checked shapes, D <= 256,
// 1 <= num_splits <= kMaxSplits, and allocated part/lse when splitting.
template <typename T>
cudaError_t launch(const Params& p, cudaStream_t stream) {
  if (p.B == 0 || p.T == 0 || p.Hq == 0) return cudaSuccess;
  cudaError_t err;
  switch (padded_head_dim(p.D)) {
    case 64: err = launch_head_dim<T, 64>(p, stream); break;
    case 128: err = launch_head_dim<T, 128>(p, stream); break;
    case 256: err = launch_head_dim<T, 256>(p, stream); break;
    default: return cudaErrorInvalidValue;
  }
  if (err != cudaSuccess || p.num_splits == 1) return err;
  const int64_t rows = int64_t(p.B) * p.Hq * p.T;
  tree_attention_merge_kernel<T><<<unsigned(cdiv(rows, kWarps)), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace tree_attention
}  // namespace specdec
