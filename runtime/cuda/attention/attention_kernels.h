// Our own CUDA kernels for the parts of Attention and AttentionGrad between the cuBLAS
// products (runtime/cuda/attention/attention_ops.cc): the mask, causal, padding and softcap
// terms on the scores, the row softmax (with the row logsumexp), and the softmax's input
// gradient. The formulas are runtime/ops/math/attention_math.h's, as on the CPU. Scores are
// dense [batch, q_heads, q_len, total_len] float32; launches are asynchronous.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ot::cuda::attention {

struct ScoreBias {
  int64_t batch = 0, q_heads = 0, q_len = 0, total_len = 0, past_len = 0;
  const void* mask = nullptr;  // null: none
  bool mask_bool = false;
  int64_t mask_len = 0;
  int64_t mask_strides[4] = {};  // over [batch, q_heads, q_len, mask_len]
  bool causal = false;
  const int64_t* nonpad = nullptr;  // [batch] valid key counts, or null
  float softcap = 0.f;              // 0: none
};

// s += mask (or -inf where a bool mask is false or beyond a short mask), -inf for causal and
// padded keys, then the softcap; `capped` (may be null) receives a copy of the result.
void AddScoreBias(const ScoreBias& b, float* s, float* capped, cudaStream_t stream);

// Row softmax in place over rows of `cols`; lse[r] = max + log(sum) where lse is not null.
void SoftmaxRows(float* s, int64_t rows, int64_t cols, float* lse, cudaStream_t stream);

// dp = SoftmaxInputGrad(p, dp, sum_j p * dp) per row, times SoftcapDerivative(capped) when
// softcap > 0.
void SoftmaxGradRows(const float* p, float* dp, const float* capped, float softcap, int64_t rows, int64_t cols,
                     cudaStream_t stream);

}  // namespace ot::cuda::attention
