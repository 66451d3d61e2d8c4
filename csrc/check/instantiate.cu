// Compile check without torch (scripts/check_cuda_compile.sh): instantiates every kernel template of one op
// for fp32, fp16 and bf16, so `nvcc -c` compiles exactly the device code the extension contains. The op is
// chosen with -DSPECDEC_CHECK_<OP> so the script can compile the ops in parallel.
#if defined(SPECDEC_CHECK_TREE_ATTENTION)
#include "../tree_attention.cuh"
namespace ta = specdec::tree_attention;
template cudaError_t ta::launch<float>(const ta::Params&, cudaStream_t);
template cudaError_t ta::launch<__half>(const ta::Params&, cudaStream_t);
template cudaError_t ta::launch<__nv_bfloat16>(const ta::Params&, cudaStream_t);
#elif defined(SPECDEC_CHECK_SMART_EXPAND)
#include "../smart_expand.cuh"
namespace se = specdec::smart_expand;
template cudaError_t se::launch<float>(const se::TopkParams&, const se::SelectParams&, int, cudaStream_t);
template cudaError_t se::launch<__half>(const se::TopkParams&, const se::SelectParams&, int, cudaStream_t);
template cudaError_t se::launch<__nv_bfloat16>(const se::TopkParams&, const se::SelectParams&, int, cudaStream_t);
#elif defined(SPECDEC_CHECK_LOGPROB)
#include "../logprob.cuh"
namespace lp = specdec::logprob;
template cudaError_t lp::launch_token<float>(const lp::TokenParams&, cudaStream_t);
template cudaError_t lp::launch_token<__half>(const lp::TokenParams&, cudaStream_t);
template cudaError_t lp::launch_token<__nv_bfloat16>(const lp::TokenParams&, cudaStream_t);
template cudaError_t lp::launch_logits<float>(const lp::LogitsParams&, cudaStream_t);
template cudaError_t lp::launch_logits<__half>(const lp::LogitsParams&, cudaStream_t);
template cudaError_t lp::launch_logits<__nv_bfloat16>(const lp::LogitsParams&, cudaStream_t);
template cudaError_t lp::launch_path_mean<int32_t>(const lp::PathParams<int32_t>&, cudaStream_t);
template cudaError_t lp::launch_path_mean<int64_t>(const lp::PathParams<int64_t>&, cudaStream_t);
#else
#error "define one of SPECDEC_CHECK_TREE_ATTENTION, SPECDEC_CHECK_SMART_EXPAND, SPECDEC_CHECK_LOGPROB"
#endif
