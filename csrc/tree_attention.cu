// K1 tree attention: the torch-facing launcher (checks, allocation, dispatch on dtype). Kernels:
// tree_attention.cuh; contract: specdec/ops/tree_attention.py.
#include <ATen/ops/empty.h>

#include "ops.h"
#include "torch_utils.h"
#include "tree_attention.cuh"

namespace specdec {

at::Tensor tree_attention_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& start,
                               const at::Tensor& length, const at::Tensor& tree_mask, double scale,
                               int64_t num_splits) {
  namespace ta = tree_attention;
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "tree_attention: q, k, v must be 4-D");
  const int64_t B = q.size(0), Hq = q.size(1), T = q.size(2), D = q.size(3);
  TORCH_CHECK(k.sizes() == v.sizes() && k.size(0) == B && k.size(3) == D, "tree_attention: k, v must be [B, Hkv, S, D]");
  const int64_t Hkv = k.size(1);
  TORCH_CHECK(Hkv > 0 && Hq % Hkv == 0, "tree_attention: Hq must be a multiple of Hkv");
  TORCH_CHECK(k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(),
              "tree_attention: q, k, v must share one dtype");
  TORCH_CHECK(D >= 1 && D <= ta::kMaxHeadDim, "tree_attention: head dim must be in [1, ", ta::kMaxHeadDim, "]");
  TORCH_CHECK(start.dim() == 1 && start.size(0) == B && length.dim() == 1 && length.size(0) == B,
              "tree_attention: start and length must be [B]");
  TORCH_CHECK(tree_mask.dim() == 3 && tree_mask.size(0) == B && tree_mask.size(1) == T &&
                  tree_mask.size(2) * 32 >= T && tree_mask.scalar_type() == at::kInt,
              "tree_attention: tree_mask must be [B, T, >= ceil(T/32)] int32");
  TORCH_CHECK(num_splits >= 1 && num_splits <= ta::kMaxSplits, "tree_attention: num_splits must be in [1, ",
              ta::kMaxSplits, "]");
  for (const auto& [t, name] : {std::pair{&k, "k"}, {&v, "v"}, {&start, "start"}, {&length, "length"},
                                {&tree_mask, "tree_mask"}})
    check_cuda(*t, q, name);
  const c10::cuda::CUDAGuard guard(q.device());
  const at::Tensor start64 = start.to(at::kLong).contiguous(), length64 = length.to(at::kLong).contiguous();
  at::Tensor out = at::empty(q.sizes(), q.options());
  at::Tensor part, lse;

  ta::Params p{};
  p.q = q.data_ptr();
  p.k = k.data_ptr();
  p.v = v.data_ptr();
  p.start = start64.data_ptr<int64_t>();
  p.length = length64.data_ptr<int64_t>();
  p.mask = tree_mask.data_ptr<int32_t>();
  p.out = out.data_ptr();
  if (num_splits > 1) {
    part = at::empty({B, Hq, T, num_splits, D}, q.options().dtype(at::kFloat));
    lse = at::empty({B, Hq, T, num_splits}, q.options().dtype(at::kFloat));
    p.part = part.data_ptr<float>();
    p.lse = lse.data_ptr<float>();
  }
  p.scale_log2 = float(scale * 1.4426950408889634);
  p.B = int(B), p.Hq = int(Hq), p.Hkv = int(Hkv), p.group = int(Hq / Hkv), p.T = int(T), p.D = int(D);
  p.W = int(tree_mask.size(2)), p.num_splits = int(num_splits), p.S = k.size(2);
  p.q_b = q.stride(0), p.q_h = q.stride(1), p.q_t = q.stride(2), p.q_d = q.stride(3);
  p.k_b = k.stride(0), p.k_h = k.stride(1), p.k_s = k.stride(2), p.k_d = k.stride(3);
  p.v_b = v.stride(0), p.v_h = v.stride(1), p.v_s = v.stride(2), p.v_d = v.stride(3);
  p.m_b = tree_mask.stride(0), p.m_t = tree_mask.stride(1), p.m_w = tree_mask.stride(2);
  p.o_b = out.stride(0), p.o_h = out.stride(1), p.o_t = out.stride(2), p.o_d = out.stride(3);
  // 16-byte cp.async chunks need unit d-stride, aligned base pointers and strides, and whole chunks in D.
  const int64_t chunk = 16 / q.element_size();
  auto aligned = [chunk](const at::Tensor& t) {
    return t.stride(3) == 1 && reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 && t.stride(0) % chunk == 0 &&
           t.stride(1) % chunk == 0 && t.stride(2) % chunk == 0;
  };
  p.vec_kv = D % chunk == 0 && aligned(k) && aligned(v);

  const cudaStream_t stream = current_stream(q);
  cudaError_t err;
  switch (q.scalar_type()) {
    case at::kFloat: err = ta::launch<float>(p, stream); break;
    case at::kHalf: err = ta::launch<__half>(p, stream); break;
    case at::kBFloat16: err = ta::launch<__nv_bfloat16>(p, stream); break;
    default: TORCH_CHECK(false, "tree_attention: dtype must be float32, float16 or bfloat16, got ", q.scalar_type());
  }
  check_launch(err, "tree_attention");
  return out;
}

}  // namespace specdec
