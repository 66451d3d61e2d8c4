// Compile check of the torch-facing launchers (scripts/check_cuda_compile.sh): the three csrc/*.cu files in
// one translation unit, so torch's headers are parsed once rather than three times.
#include "../logprob.cu"
#include "../smart_expand.cu"
#include "../tree_attention.cu"
