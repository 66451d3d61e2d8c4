// K3 token_logprob, token_logprob_from_logits, path_mean: the torch-facing launchers (checks, allocation,
// dispatch on dtype). Kernels: logprob.cuh; contracts: specdec/ops/logprob.py.
#include <ATen/ops/empty.h>

#include "logprob.cuh"
#include "ops.h"
#include "torch_utils.h"

namespace specdec {

at::Tensor token_logprob_cuda(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                              const std::optional<at::Tensor>& bias, int64_t splits) {
  namespace lp = logprob;
  TORCH_CHECK(hidden.dim() == 2 && weight.dim() == 2 && weight.size(1) == hidden.size(1) && weight.size(0) >= 1,
              "token_logprob: hidden, weight must be [N, d] and [V >= 1, d]");
  TORCH_CHECK(weight.scalar_type() == hidden.scalar_type(), "token_logprob: hidden and weight must share one dtype");
  const int64_t N = hidden.size(0), V = weight.size(0);
  TORCH_CHECK(targets.dim() == 1 && targets.size(0) == N, "token_logprob: targets must be [N]");
  check_cuda(weight, hidden, "weight");
  check_cuda(targets, hidden, "targets");
  at::Tensor bias_c;
  if (bias.has_value()) {
    TORCH_CHECK(bias->dim() == 1 && bias->size(0) == V && bias->scalar_type() == weight.scalar_type(),
                "token_logprob: bias must be [V] with weight's dtype");
    check_cuda(*bias, hidden, "bias");
    bias_c = bias->contiguous();
  }
  const c10::cuda::CUDAGuard guard(hidden.device());
  const at::Tensor targets64 = targets.to(at::kLong).contiguous();
  const int64_t tiles = cdiv(V, lp::BV);
  const int64_t per_split = cdiv(tiles, std::max<int64_t>(1, std::min(splits, tiles)));
  const int64_t used = cdiv(tiles, per_split);  // splits that get at least one tile
  const auto f32 = hidden.options().dtype(at::kFloat);
  at::Tensor out = at::empty({N}, f32), parts = at::empty({3, used, N}, f32);

  lp::TokenParams p{};
  p.hidden = hidden.data_ptr();
  p.weight = weight.data_ptr();
  p.bias = bias.has_value() ? bias_c.data_ptr() : nullptr;
  p.targets = targets64.data_ptr<int64_t>();
  p.part_max = parts.data_ptr<float>();
  p.part_sum = p.part_max + used * N;
  p.part_tgt = p.part_sum + used * N;
  p.out = out.data_ptr<float>();
  p.N = N, p.V = V, p.D = int(hidden.size(1)), p.splits = int(used), p.tiles_per_split = int(per_split);
  p.h_n = hidden.stride(0), p.h_d = hidden.stride(1), p.w_v = weight.stride(0), p.w_d = weight.stride(1);
  const cudaStream_t stream = current_stream(hidden);
  cudaError_t err;
  switch (hidden.scalar_type()) {
    case at::kFloat: err = lp::launch_token<float>(p, stream); break;
    case at::kHalf: err = lp::launch_token<__half>(p, stream); break;
    case at::kBFloat16: err = lp::launch_token<__nv_bfloat16>(p, stream); break;
    default: TORCH_CHECK(false, "token_logprob: dtype must be float32, float16 or bfloat16, got ", hidden.scalar_type());
  }
  check_launch(err, "token_logprob");
  return out;
}

at::Tensor token_logprob_from_logits_cuda(const at::Tensor& logits, const at::Tensor& targets) {
  namespace lp = logprob;
  TORCH_CHECK(logits.dim() == 2 && logits.size(1) >= 1, "token_logprob_from_logits: logits must be [N, V >= 1]");
  TORCH_CHECK(targets.dim() == 1 && targets.size(0) == logits.size(0), "token_logprob_from_logits: targets must be [N]");
  check_cuda(targets, logits, "targets");
  const c10::cuda::CUDAGuard guard(logits.device());
  const at::Tensor targets64 = targets.to(at::kLong).contiguous();
  at::Tensor out = at::empty({logits.size(0)}, logits.options().dtype(at::kFloat));
  lp::LogitsParams p{};
  p.logits = logits.data_ptr();
  p.targets = targets64.data_ptr<int64_t>();
  p.out = out.data_ptr<float>();
  p.N = logits.size(0), p.V = logits.size(1), p.x_n = logits.stride(0), p.x_v = logits.stride(1);
  const cudaStream_t stream = current_stream(logits);
  cudaError_t err;
  switch (logits.scalar_type()) {
    case at::kFloat: err = lp::launch_logits<float>(p, stream); break;
    case at::kHalf: err = lp::launch_logits<__half>(p, stream); break;
    case at::kBFloat16: err = lp::launch_logits<__nv_bfloat16>(p, stream); break;
    default: TORCH_CHECK(false, "token_logprob_from_logits: dtype must be float32, float16 or bfloat16, got ",
                         logits.scalar_type());
  }
  check_launch(err, "token_logprob_from_logits");
  return out;
}

template <typename I>
static cudaError_t launch_path_mean(const at::Tensor& logp, const at::Tensor& parents, const at::Tensor& nodes,
                                    at::Tensor& out) {
  logprob::PathParams<I> p{};
  p.logp = logp.data_ptr<float>();
  p.parents = parents.data_ptr<I>();
  p.num_nodes = nodes.data_ptr<int64_t>();
  p.out = out.data_ptr<float>();
  p.B = int(logp.size(0)), p.T = int(logp.size(1));
  int rounds = 0;
  while ((int64_t(1) << rounds) < p.T) ++rounds;  // ceil(log2 T)
  p.rounds = rounds > 1 ? rounds : 1;
  p.l_b = logp.stride(0), p.l_t = logp.stride(1), p.p_b = parents.stride(0), p.p_t = parents.stride(1);
  return logprob::launch_path_mean<I>(p, current_stream(logp));
}

at::Tensor path_mean_cuda(const at::Tensor& logp, const at::Tensor& parents, const at::Tensor& num_nodes) {
  TORCH_CHECK(logp.dim() == 2 && logp.size(1) >= 1 && logp.scalar_type() == at::kFloat,
              "path_mean: logp must be [B, T >= 1] float32");
  TORCH_CHECK(logp.size(1) <= logprob::kMaxPathNodes, "path_mean: T must be at most ", logprob::kMaxPathNodes);
  TORCH_CHECK(parents.sizes() == logp.sizes(), "path_mean: parents must be [B, T] like logp");
  TORCH_CHECK(num_nodes.dim() == 1 && num_nodes.size(0) == logp.size(0), "path_mean: num_nodes must be [B]");
  check_cuda(parents, logp, "parents");
  check_cuda(num_nodes, logp, "num_nodes");
  const c10::cuda::CUDAGuard guard(logp.device());
  const at::Tensor nodes64 = num_nodes.to(at::kLong).contiguous();
  at::Tensor out = at::empty(logp.sizes(), logp.options());
  cudaError_t err;
  switch (parents.scalar_type()) {
    case at::kInt: err = launch_path_mean<int32_t>(logp, parents, nodes64, out); break;
    case at::kLong: err = launch_path_mean<int64_t>(logp, parents, nodes64, out); break;
    default: TORCH_CHECK(false, "path_mean: parents must be int32 or int64, got ", parents.scalar_type());
  }
  check_launch(err, "path_mean");
  return out;
}

}  // namespace specdec
