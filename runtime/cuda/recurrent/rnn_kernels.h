// The element-wise device kernels of the CUDA recurrent ops (runtime/cuda/recurrent/rnn_ops.cc):
// one thread per hidden unit of a batch entry, one launch per step, each running the
// per-element body of runtime/ops/math/rnn_steps.h of the same name (documented there), which a
// CPU test runs too. Float32; asynchronous on the given stream.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/ops/math/rnn_steps.h"

namespace ot::cuda::rnn {

void LoadState(const RnnStepGeometry& g, const float* src, float* dst, cudaStream_t stream);
void StoreState(const RnnStepGeometry& g, const float* src, float* dst, cudaStream_t stream);
void ForwardStep(const RnnStepGeometry& g, int64_t s, const int* lens, const float* xw, const float* hr,
                 const RnnStepParams& prm, float* h, float* c, float* pre_batch, const RnnSaved& sv, float* y,
                 float* rh, cudaStream_t stream);
void GruForwardFinish(const RnnStepGeometry& g, int64_t s, const int* lens, const float* xw, const float* hrh,
                      const RnnStepParams& prm, float* h, float* pre_batch, const RnnSaved& sv, float* y,
                      cudaStream_t stream);
void BackwardStep(const RnnStepGeometry& g, int64_t s, const int* lens, const float* dy, const RnnSaved& sv,
                  const RnnStepParams& prm, const float* dh, float* dc, float* dhn, float* dg, float* dax, float* dah,
                  cudaStream_t stream);
void GruResetBackward(const RnnStepGeometry& g, int64_t s, const int* lens, const float* drh, const RnnSaved& sv,
                      float* dhn, float* dg, float* dax, cudaStream_t stream);
// A thread per column (dB) or peephole entry (dP), each summing its rows in order.
void BiasGrad(int64_t rows, int64_t gh, const float* dax, const float* dah, float* db, cudaStream_t stream);
void PeepholeGrad(int64_t rows, int64_t hidden, const float* dax, const float* cprev, const float* cnew, float* dp,
                  cudaStream_t stream);

}  // namespace ot::cuda::rnn
