// K2 smart_expand: the torch-facing launcher (checks, allocation, dispatch on dtype). Kernels:
// smart_expand.cuh; contract: specdec/ops/smart_expand.py.
#include <ATen/ops/empty.h>

#include "ops.h"
#include "smart_expand.cuh"
#include "torch_utils.h"

namespace specdec {

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> smart_expand_cuda(
    const at::Tensor& logits, const at::Tensor& frontier_logp, const at::Tensor& tree_size,
    const at::Tensor& expected_len, const at::Tensor& num_paths, const at::Tensor& cost, int64_t k, double alpha,
    int64_t budget, bool paper) {
  namespace se = smart_expand;
  TORCH_CHECK(logits.dim() == 3, "smart_expand: logits must be [B, F, V]");
  const int64_t B = logits.size(0), F = logits.size(1), V = logits.size(2);
  TORCH_CHECK(k >= 1 && k <= V && k <= se::kMaxK, "smart_expand: k must be in [1, min(V, ", se::kMaxK, ")]");
  TORCH_CHECK(F * k <= se::kMaxCandidates, "smart_expand: F * k must be at most ", se::kMaxCandidates);
  TORCH_CHECK(V < (int64_t(1) << 31), "smart_expand: V must be below 2^31");
  TORCH_CHECK(frontier_logp.sizes() == at::IntArrayRef({B, F}) && frontier_logp.scalar_type() == at::kFloat,
              "smart_expand: frontier_logp must be [B, F] float32");
  TORCH_CHECK(tree_size.dim() == 1 && tree_size.size(0) == B, "smart_expand: tree_size must be [B]");
  TORCH_CHECK(expected_len.dim() == 1 && expected_len.size(0) == B && expected_len.scalar_type() == at::kFloat,
              "smart_expand: expected_len must be [B] float32");
  TORCH_CHECK(num_paths.dim() == 1 && num_paths.size(0) == B, "smart_expand: num_paths must be [B]");
  TORCH_CHECK(cost.dim() == 1 && cost.size(0) == 5 && cost.scalar_type() == at::kFloat,
              "smart_expand: cost must be [5] float32");
  for (const auto& [t, name] : {std::pair{&frontier_logp, "frontier_logp"}, {&tree_size, "tree_size"},
                                {&expected_len, "expected_len"}, {&num_paths, "num_paths"}, {&cost, "cost"}})
    check_cuda(*t, logits, name);
  const c10::cuda::CUDAGuard guard(logits.device());
  const auto f32 = logits.options().dtype(at::kFloat), i64 = logits.options().dtype(at::kLong);
  const at::Tensor flogp = frontier_logp.contiguous(), size64 = tree_size.to(at::kLong).contiguous();
  const at::Tensor len = expected_len.contiguous(), paths = num_paths.to(at::kFloat).contiguous();
  const at::Tensor cost_c = cost.contiguous();
  const at::Tensor cand_tok = at::empty({B, F * k}, i64), cand_logp = at::empty({B, F * k}, f32);
  at::Tensor tokens = at::empty({B, F * k}, i64), slots = at::empty({B, F * k}, i64);
  at::Tensor logp = at::empty({B, F * k}, f32), keep = at::empty({B, F * k}, logits.options().dtype(at::kBool));
  at::Tensor new_size = at::empty({B}, i64), new_len = at::empty({B}, f32);

  se::TopkParams tp{};
  tp.logits = logits.data_ptr();
  tp.flogp = flogp.data_ptr<float>();
  tp.tok = cand_tok.data_ptr<int64_t>();
  tp.clogp = cand_logp.data_ptr<float>();
  tp.F = int(F), tp.K = int(k), tp.V = V;
  tp.x_b = logits.stride(0), tp.x_f = logits.stride(1), tp.x_v = logits.stride(2);
  se::SelectParams sp{};
  sp.tok = cand_tok.data_ptr<int64_t>();
  sp.clogp = cand_logp.data_ptr<float>();
  sp.tree_size = size64.data_ptr<int64_t>();
  sp.expected_len = len.data_ptr<float>();
  sp.num_paths = paths.data_ptr<float>();
  sp.cost = cost_c.data_ptr<float>();
  sp.out_tok = tokens.data_ptr<int64_t>();
  sp.out_slot = slots.data_ptr<int64_t>();
  sp.out_logp = logp.data_ptr<float>();
  sp.out_keep = keep.data_ptr<bool>();
  sp.out_size = new_size.data_ptr<int64_t>();
  sp.out_len = new_len.data_ptr<float>();
  sp.alpha = float(alpha), sp.budget = int(budget), sp.FK = int(F * k), sp.K = int(k), sp.paper = paper;

  const cudaStream_t stream = current_stream(logits);
  cudaError_t err;
  switch (logits.scalar_type()) {
    case at::kFloat: err = se::launch<float>(tp, sp, int(B), stream); break;
    case at::kHalf: err = se::launch<__half>(tp, sp, int(B), stream); break;
    case at::kBFloat16: err = se::launch<__nv_bfloat16>(tp, sp, int(B), stream); break;
    default: TORCH_CHECK(false, "smart_expand: logits must be float32, float16 or bfloat16, got ", logits.scalar_type());
  }
  check_launch(err, "smart_expand");
  return {tokens, slots, logp, keep, new_size, new_len};
}

}  // namespace specdec
