// Row loops of the softmax cross-entropy loss and its gradient over contiguous float32 rows
// (a language model's [N*T, V] scores: 2,048 rows of 50,257 classes are ~400 MB a step).
// The C library's exp is a scalar call (double exp per class took 8% of a GPT-2-shaped
// step); these use activation_math.h's FastExp (relative error below 2e-7) for the sums and an
// exponential evaluated in double for the gradient's probabilities, in loops that GCC
// vectorises, compiled for AVX-512, AVX2 and the baseline (OT_VECTOR_CLONES).
#pragma once

#include <cstdint>

namespace ot {
namespace cpu {

// log(sum_c exp(x[c])), shifted by the row's maximum so that no exponential overflows; the
// sum is taken in float over chunks of 512 classes and in double across chunks. A row whose
// maximum is infinite returns that maximum; a NaN anywhere gives NaN.
double RowLogSumExp(const float* x, int64_t n);

// out[c] = x[c] - shift, subtracted in double and rounded once.
void RowShifted(const float* x, int64_t n, double shift, float* out);

// out[c] = exp(log_prob[c]) * scale: the softmax probabilities scaled by the position's
// gradient scale (the caller takes the scale off the label's class).
void RowExpScaled(const float* log_prob, int64_t n, float scale, float* out);

}  // namespace cpu
}  // namespace ot
