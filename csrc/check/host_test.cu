// Host-side tests of the kernels' pure logic (the __host__ __device__ functions of the .cuh files): index
// math, the log-sum-exp merges, the radix-select steps and SMART's test, run on the CPU. Built with nvcc and
// run by scripts/check_cuda_compile.sh; no GPU needed. Prints one line per failure and a closing count.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "../logprob.cuh"
#include "../smart_expand.cuh"
#include "../tree_attention.cuh"

static int passed = 0, failed = 0;

#define CHECK(cond)                                                       \
  do {                                                                    \
    if (cond) {                                                           \
      ++passed;                                                           \
    } else {                                                              \
      ++failed;                                                           \
      std::printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);         \
    }                                                                     \
  } while (0)

static bool close(double a, double b, double tol = 1e-6) { return std::fabs(a - b) <= tol * (1.0 + std::fabs(b)); }

namespace ta = specdec::tree_attention;
namespace se = specdec::smart_expand;
namespace lp = specdec::logprob;

// The splits' prefix ranges tile [start, min(length, S)) exactly, in order, each a whole number of tiles
// except the last non-empty one, and the tree region goes to the last split only.
static void test_split_range() {
  std::mt19937 rng(0);
  for (int trial = 0; trial < 2000; ++trial) {
    const int64_t S = 1 + rng() % 3000;
    const int64_t length = rng() % (S + 1);
    const int64_t start = length ? rng() % (length + 1) : 0;
    const int splits = 1 + rng() % 32;
    const int bn = (trial % 2) ? 64 : 32;
    int64_t covered = start, end = std::min(length, S);
    bool ok = true;
    for (int s = 0; s < splits; ++s) {
      int64_t lo, hi;
      ta::split_range(start, length, S, splits, s, bn, &lo, &hi);
      if (hi <= lo) continue;  // an empty split
      ok &= lo == covered;     // contiguous, in order
      ok &= (hi - lo) % bn == 0 || hi == end;
      covered = hi;
    }
    ok &= covered == std::max(start, end);
    CHECK(ok);
    CHECK(ta::tree_region(length, S, 2, splits, splits - 1) == std::min<int64_t>(64, S - length));
    CHECK(splits == 1 || ta::tree_region(length, S, 2, splits, 0) == 0);
  }
}

static void test_clip_and_head_dims() {
  CHECK(ta::clip_word(0xFFFFFFFFu, 0, 40) == 0xFFFFFFFFu);
  CHECK(ta::clip_word(0xFFFFFFFFu, 32, 40) == 0xFFu);  // slots 32..39 of the region
  CHECK(ta::clip_word(0xFFFFFFFFu, 64, 40) == 0u);
  CHECK(ta::clip_word(0x80000001u, 0, 31) == 1u);
  CHECK(ta::padded_head_dim(16) == 64 && ta::padded_head_dim(24) == 64 && ta::padded_head_dim(64) == 64);
  CHECK(ta::padded_head_dim(96) == 128 && ta::padded_head_dim(256) == 256 && ta::padded_head_dim(257) == 0);
}

// Shared memory of every tree-attention instantiation fits sm_80 (the static_asserts say so too).
template <typename T, int DP> static void print_config() {
  using Tl = ta::Tiles<T, DP>;
  using Small = ta::Config<T, DP, 16, Tl::BN, Tl::STAGES>;
  using Large = ta::Config<T, DP, Tl::BM_LARGE, Tl::BN, Tl::STAGES>;
  std::printf("tree_attention %-6s D<=%-3d BM 16/%d BN %d stages %d: %6d / %6d bytes of shared memory\n",
              sizeof(T) == 4 ? "fp32" : "16-bit", DP, Tl::BM_LARGE, Tl::BN, Tl::STAGES, Small::kBytes, Large::kBytes);
  CHECK(Large::kBytes <= 163 * 1024 && Small::kBytes <= Large::kBytes);
}

// The other kernels' dynamic shared memory at their limits fits sm_80's opt-in maximum (163 KiB).
static void test_shared_memory_limits() {
  CHECK(lp::path_smem_bytes(lp::kMaxPathNodes) <= 163 * 1024);
  CHECK(se::select_smem_bytes(se::kMaxCandidates) <= 163 * 1024);
  CHECK(2 * se::kMaxK * sizeof(int64_t) <= 48 * 1024);  // topk_kernel launches without the opt-in
}

static void test_merge_weights() {
  // Two splits at lse 1 and 2 (base 2): weights 0.5 and 1; a split that saw nothing weighs 0.
  const float lse[3] = {1.0f, 2.0f, -INFINITY};
  float w[3];
  CHECK(close(ta::merge_weights(lse, 3, w), 1.5) && close(w[0], 0.5) && close(w[1], 1.0) && w[2] == 0.0f);
  const float none[2] = {-INFINITY, -INFINITY};
  CHECK(ta::merge_weights(none, 2, w) == 0.0f);
  // Merging split softmaxes reproduces the unsplit one: scores {0, 1, 3} split as {0, 1} | {3}.
  const double e0 = 1, e1 = std::exp2(1.0), e3 = std::exp2(3.0);
  const double v[3] = {2.0, -1.0, 5.0};
  const float parts_lse[2] = {float(std::log2(e0 + e1)), 3.0f};
  const double part0 = (e0 * v[0] + e1 * v[1]) / (e0 + e1), part1 = v[2];
  const float total = ta::merge_weights(parts_lse, 2, w);
  CHECK(close((w[0] * part0 + w[1] * part1) / total, (e0 * v[0] + e1 * v[1] + e3 * v[2]) / (e0 + e1 + e3), 1e-6));
}

static void test_keys() {
  // desc_key sorts like (value descending, index ascending); -0.0 ties +0.0; key_value/key_index invert it.
  const std::vector<float> xs = {3.0f, -0.0f, 0.0f, -INFINITY, -2.5f, 3.0f, 1e-30f, -1e-30f, INFINITY, -7.0f};
  std::vector<int> by_key(xs.size()), by_hand(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) by_key[i] = by_hand[i] = int(i);
  std::sort(by_key.begin(), by_key.end(), [&](int a, int b) { return se::desc_key(xs[a], a) > se::desc_key(xs[b], b); });
  std::stable_sort(by_hand.begin(), by_hand.end(), [&](int a, int b) { return xs[a] > xs[b]; });
  CHECK(by_key == by_hand);
  for (size_t i = 0; i < xs.size(); ++i) {
    const int64_t key = se::desc_key(xs[i], int64_t(i));
    CHECK(se::key_index(key) == int64_t(i));
    CHECK(se::key_value(key) == xs[i]);  // -0.0 comes back as +0.0, which compares equal
  }
  CHECK(se::desc_key(-0.0f, 4) == se::desc_key(0.0f, 4));
  for (size_t i = 0; i + 1 < xs.size(); ++i)
    for (size_t j = 0; j < xs.size(); ++j)
      CHECK((xs[i] < xs[j]) == (se::radix_bits(xs[i]) < se::radix_bits(xs[j])));
}

// The kernel's radix select replayed on the host with the same steps: 4 passes of 8-bit digits, then
// everything above the threshold and the first `need` equal to it; compared with a full sort.
static std::vector<int64_t> radix_topk(const std::vector<float>& x, int k) {
  uint32_t prefix = 0, mask = 0;
  int need = k;
  for (int shift = 24; shift >= 0; shift -= 8) {
    int hist[256] = {0};
    for (float v : x) {
      const uint32_t u = se::radix_bits(v);
      if ((u & mask) == prefix) ++hist[(u >> shift) & 0xFF];
    }
    const int digit = se::select_digit(hist, &need);
    prefix |= uint32_t(digit) << shift;
    mask |= 0xFFu << shift;
  }
  std::vector<int64_t> keys;
  int ties = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const uint32_t u = se::radix_bits(x[i]);
    if (u > prefix || (u == prefix && ties++ < need)) keys.push_back(se::desc_key(x[i], int64_t(i)));
  }
  std::sort(keys.rbegin(), keys.rend());
  return keys;
}

static void test_radix_select() {
  std::mt19937 rng(1);
  for (int trial = 0; trial < 300; ++trial) {
    const int V = 1 + rng() % 500;
    std::vector<float> x(V);
    for (auto& v : x) {
      switch (trial % 3) {
        case 0: v = std::normal_distribution<float>(0.0f, 3.0f)(rng); break;
        case 1: v = float(int(rng() % 4)); break;  // many exact ties
        default: v = (rng() % 5 == 0) ? -INFINITY : -float(rng() % 1000) / 7.0f;
      }
    }
    const int k = 1 + rng() % V;
    std::vector<int64_t> all(V);
    for (int i = 0; i < V; ++i) all[i] = se::desc_key(x[i], i);
    std::sort(all.rbegin(), all.rend());
    all.resize(k);
    CHECK(radix_topk(x, k) == all);
  }
  int hist[256] = {0};
  hist[200] = 3, hist[100] = 5, hist[0] = 2;
  int need = 4;
  CHECK(se::select_digit(hist, &need) == 100 && need == 1);
  need = 10;
  CHECK(se::select_digit(hist, &need) == 0 && need == 2);
}

static void test_smart() {
  const float cost[5] = {0.5f, 0.1f, 0.2f, 0.05f, 1.5f};
  float value, slope;
  se::smart_cost(cost, 4.0f, &value, &slope);  // n^rho = 8, exp(0.4)
  CHECK(close(value, 0.5 + 0.4 + 0.2 * (std::exp(0.4) - 1.0), 1e-6));
  CHECK(close(slope, 0.1 + 0.03 * std::exp(0.4), 1e-6));
  // smart_expand's docstring example: C(n) = 1 + 0.1 n, alpha 1, "expected", P = 0.5, 0.3, 0.15, 0.05
  // from a root-only tree: the first three join, the fourth does not.
  const float linear[5] = {1.0f, 0.1f, 0.0f, 0.0f, 1.0f};
  const float probs[4] = {0.5f, 0.3f, 0.15f, 0.05f};
  float L = 1.0f;
  int kept = 0;
  for (int j = 0; j < 4; ++j) {
    if (!se::smart_joins(std::log(probs[j]), L, float(1 + j), linear, 1.0f, false, 1.0f, 100)) break;
    L += probs[j];
    ++kept;
  }
  CHECK(kept == 3 && close(L, 1.95, 1e-6));
  // The paper's rule with 2 paths keeps two; a budget of 3 stops the third even though its ratio passes.
  CHECK(se::smart_joins(std::log(0.3f), 1.5f, 2.0f, linear, 2.0f, true, 1.0f, 100));
  CHECK(!se::smart_joins(std::log(0.15f), 1.8f, 3.0f, linear, 2.0f, true, 1.0f, 100));
  CHECK(!se::smart_joins(std::log(0.15f), 1.8f, 3.0f, linear, 1.0f, false, 1.0f, 3));
  CHECK(!se::smart_joins(-INFINITY, 1.0f, 1.0f, linear, 1.0f, false, 1.0f, 100));
}

static void test_lse() {
  const std::vector<float> xs = {0.5f, -INFINITY, 3.0f, -2.0f, 3.0f, 10.0f, -INFINITY};
  double ref = 0.0;
  for (float x : xs) ref += std::exp(double(x) - 10.0);
  specdec::Lse a{-INFINITY, 0.0f}, b{-INFINITY, 0.0f};
  for (size_t i = 0; i < xs.size(); ++i) (i % 2 ? a : b) = specdec::lse_add(i % 2 ? a : b, xs[i]);
  const specdec::Lse m = specdec::lse_merge(a, b);
  CHECK(close(m.m + std::log(m.s), 10.0 + std::log(ref), 1e-6));
  const specdec::Lse empty = specdec::lse_merge({-INFINITY, 0.0f}, {-INFINITY, 0.0f});
  CHECK(empty.m == -INFINITY && empty.s == 0.0f);
  // token_logprob's split merge: logits {1, 2 | 4, -inf}, target logit 2 -> 2 - log(e + e^2 + e^4).
  const float mx[2] = {2.0f, 4.0f};
  const float sm[2] = {float(std::exp(-1.0) + 1.0), 1.0f};
  const float tg[2] = {2.0f, 0.0f};
  CHECK(close(lp::merge_partials(mx, sm, tg, 2, 1), 2.0 - std::log(std::exp(1.0) + std::exp(2.0) + std::exp(4.0)), 1e-6));
}

int main() {
  test_split_range();
  test_clip_and_head_dims();
  print_config<float, 64>();
  print_config<float, 128>();
  print_config<float, 256>();
  print_config<__half, 128>();
  print_config<__half, 256>();
  test_shared_memory_limits();
  test_merge_weights();
  test_keys();
  test_radix_select();
  test_smart();
  test_lse();
  std::printf("host logic: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
