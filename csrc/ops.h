// The torch-facing entry points of specdec's CUDA kernels, registered as torch.ops.specdec.* by
// bindings.cpp. Each checks shapes, dtypes and devices (TORCH_CHECK), allocates and launches on the current
// stream; the Python launchers in specdec/ops/ validate the same things first with ValueErrors.
#pragma once

#include <optional>
#include <tuple>

#include <ATen/core/Tensor.h>

namespace specdec {

at::Tensor tree_attention_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& start,
                               const at::Tensor& length, const at::Tensor& tree_mask, double scale,
                               int64_t num_splits);

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> smart_expand_cuda(
    const at::Tensor& logits, const at::Tensor& frontier_logp, const at::Tensor& tree_size,
    const at::Tensor& expected_len, const at::Tensor& num_paths, const at::Tensor& cost, int64_t k, double alpha,
    int64_t budget, bool paper);

at::Tensor token_logprob_cuda(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                              const std::optional<at::Tensor>& bias, int64_t splits);

at::Tensor token_logprob_from_logits_cuda(const at::Tensor& logits, const at::Tensor& targets);

at::Tensor path_mean_cuda(const at::Tensor& logp, const at::Tensor& parents, const at::Tensor& num_nodes);

}  // namespace specdec
