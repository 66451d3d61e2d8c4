// Small helpers shared by the torch-facing launchers (*.cu): device checks, the current stream, launch errors.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <cuda_runtime.h>

namespace specdec {

inline void check_cuda(const at::Tensor& t, const at::Tensor& ref, const char* name) {
  TORCH_CHECK(t.is_cuda() && t.device() == ref.device(), name, ": expected a tensor on ", ref.device(), ", got ",
              t.device());
}

inline cudaStream_t current_stream(const at::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
}

inline void check_launch(cudaError_t err, const char* op) {
  TORCH_CHECK(err == cudaSuccess, "specdec ", op, ": kernel launch failed: ", cudaGetErrorString(err));
}

}  // namespace specdec
