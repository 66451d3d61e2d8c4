// The one registration of specdec's CUDA ops: schemas in the `specdec` namespace (torch.ops.specdec.*,
// visible to torch.compile) and their CUDA implementations. Shape inference for tracing and torch.compile
// (the "fake" kernels) is registered in Python, specdec/ops/_cuda.py, when this extension is loaded.
// The module itself has no Python functions: importing specdec._C only runs these registrations.
#include <Python.h>
#include <torch/library.h>

#include "ops.h"

TORCH_LIBRARY(specdec, m) {
  m.def("tree_attention(Tensor q, Tensor k, Tensor v, Tensor start, Tensor length, Tensor tree_mask, float scale, "
        "int num_splits) -> Tensor");
  m.def("smart_expand(Tensor logits, Tensor frontier_logp, Tensor tree_size, Tensor expected_len, Tensor num_paths, "
        "Tensor cost, int k, float alpha, int budget, bool paper) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
  m.def("token_logprob(Tensor hidden, Tensor weight, Tensor targets, Tensor? bias, int splits) -> Tensor");
  m.def("token_logprob_from_logits(Tensor logits, Tensor targets) -> Tensor");
  m.def("path_mean(Tensor logp, Tensor parents, Tensor num_nodes) -> Tensor");
}

TORCH_LIBRARY_IMPL(specdec, CUDA, m) {
  m.impl("tree_attention", &specdec::tree_attention_cuda);
  m.impl("smart_expand", &specdec::smart_expand_cuda);
  m.impl("token_logprob", &specdec::token_logprob_cuda);
  m.impl("token_logprob_from_logits", &specdec::token_logprob_from_logits_cuda);
  m.impl("path_mean", &specdec::path_mean_cuda);
}

extern "C" PyMODINIT_FUNC PyInit__C(void) {
  static PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", "specdec's CUDA kernels (torch.ops.specdec)", -1,
                               nullptr};
  return PyModule_Create(&module);
}
