// The activation functions of the recurrent cells (LSTM, GRU, RNN) over a row of n
// values, with ONNX's clip: pre-activations beyond +-clip are cut off (and have no
// gradient). Pass infinity for no clip.
#pragma once

#include <cstdint>

#include "runtime/ops/shapes/rnn_shapes.h"

namespace ot {
namespace cpu {

// y = f(clip(x)).
void RnnActivate(const RnnActivation& a, float clip, const float* x, float* y, int64_t n);
// dx = dy * f'(x), 0 where |x| > clip. dx must not alias x or dy.
void RnnActivateGrad(const RnnActivation& a, float clip, const float* x, const float* dy, float* dx, int64_t n);
// As RnnActivateGrad, given also y = f(clip(x)): sigmoid and tanh take their derivative
// from y (no exp); the others from x.
void RnnActivateGradFromOutput(const RnnActivation& a, float clip, const float* x, const float* y, const float* dy,
                               float* dx, int64_t n);

}  // namespace cpu
}  // namespace ot
