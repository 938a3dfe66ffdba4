// The device kernels of runtime/cuda/recurrent/rnn_kernels.h: grid-stride loops, one thread per
// (batch entry, hidden unit) or per column, over the per-element bodies of
// runtime/ops/math/rnn_steps.h (which tests/unit/runtime/rnn_cell_math_test.cc runs on the host).
#include "runtime/cuda/recurrent/rnn_kernels.h"

#include "runtime/cuda/launch_check.h"
#include "runtime/cuda/math_device.h"

namespace ot::cuda::rnn {
namespace {

constexpr int kThreads = 256;

__global__ void LoadStateKernel(RnnStepGeometry g, const float* src, float* dst) {
  OT_GRID_LOOP(i, g.batch * g.hidden) RnnLoadStateAt(g, src, dst, i);
}

__global__ void StoreStateKernel(RnnStepGeometry g, const float* src, float* dst) {
  OT_GRID_LOOP(i, g.batch * g.hidden) RnnStoreStateAt(g, src, dst, i);
}

__global__ void ForwardStepKernel(RnnStepGeometry g, int64_t s, const int* lens, const float* xw, const float* hr,
                                  RnnStepParams prm, float* h, float* c, float* pre_batch, RnnSaved sv, float* y,
                                  float* rh) {
  OT_GRID_LOOP(i, g.batch * g.hidden) RnnForwardStepAt(g, s, lens, xw, hr, prm, h, c, pre_batch, sv, y, rh, i);
}

__global__ void GruForwardFinishKernel(RnnStepGeometry g, int64_t s, const int* lens, const float* xw,
                                       const float* hrh, RnnStepParams prm, float* h, float* pre_batch, RnnSaved sv,
                                       float* y) {
  OT_GRID_LOOP(i, g.batch * g.hidden) RnnGruForwardFinishAt(g, s, lens, xw, hrh, prm, h, pre_batch, sv, y, i);
}

__global__ void BackwardStepKernel(RnnStepGeometry g, int64_t s, const int* lens, const float* dy, RnnSaved sv,
                                   RnnStepParams prm, const float* dh, float* dc, float* dhn, float* dg, float* dax,
                                   float* dah) {
  OT_GRID_LOOP(i, g.batch * g.hidden) RnnBackwardStepAt(g, s, lens, dy, sv, prm, dh, dc, dhn, dg, dax, dah, i);
}

__global__ void GruResetBackwardKernel(RnnStepGeometry g, int64_t s, const int* lens, const float* drh, RnnSaved sv,
                                       float* dhn, float* dg, float* dax) {
  OT_GRID_LOOP(i, g.batch * g.hidden) RnnGruResetBackwardAt(g, s, lens, drh, sv, dhn, dg, dax, i);
}

__global__ void BiasGradKernel(int64_t rows, int64_t gh, const float* dax, const float* dah, float* db) {
  OT_GRID_LOOP(j, gh) RnnBiasGradAt(rows, gh, dax, dah, db, j);
}

__global__ void PeepholeGradKernel(int64_t rows, int64_t hidden, const float* dax, const float* cprev,
                                   const float* cnew, float* dp) {
  OT_GRID_LOOP(k, 3 * hidden) RnnPeepholeGradAt(rows, hidden, dax, cprev, cnew, dp, k);
}

unsigned Blocks(const RnnStepGeometry& g) { return math::GridBlocks(g.batch * g.hidden, kThreads); }

}  // namespace

void LoadState(const RnnStepGeometry& g, const float* src, float* dst, cudaStream_t stream) {
  LoadStateKernel<<<Blocks(g), kThreads, 0, stream>>>(g, src, dst);
  OT_CUDA_CHECK_LAUNCH("LoadStateKernel");
}

void StoreState(const RnnStepGeometry& g, const float* src, float* dst, cudaStream_t stream) {
  StoreStateKernel<<<Blocks(g), kThreads, 0, stream>>>(g, src, dst);
  OT_CUDA_CHECK_LAUNCH("StoreStateKernel");
}

void ForwardStep(const RnnStepGeometry& g, int64_t s, const int* lens, const float* xw, const float* hr,
                 const RnnStepParams& prm, float* h, float* c, float* pre_batch, const RnnSaved& sv, float* y,
                 float* rh, cudaStream_t stream) {
  ForwardStepKernel<<<Blocks(g), kThreads, 0, stream>>>(g, s, lens, xw, hr, prm, h, c, pre_batch, sv, y, rh);
  OT_CUDA_CHECK_LAUNCH("ForwardStepKernel");
}

void GruForwardFinish(const RnnStepGeometry& g, int64_t s, const int* lens, const float* xw, const float* hrh,
                      const RnnStepParams& prm, float* h, float* pre_batch, const RnnSaved& sv, float* y,
                      cudaStream_t stream) {
  GruForwardFinishKernel<<<Blocks(g), kThreads, 0, stream>>>(g, s, lens, xw, hrh, prm, h, pre_batch, sv, y);
  OT_CUDA_CHECK_LAUNCH("GruForwardFinishKernel");
}

void BackwardStep(const RnnStepGeometry& g, int64_t s, const int* lens, const float* dy, const RnnSaved& sv,
                  const RnnStepParams& prm, const float* dh, float* dc, float* dhn, float* dg, float* dax, float* dah,
                  cudaStream_t stream) {
  BackwardStepKernel<<<Blocks(g), kThreads, 0, stream>>>(g, s, lens, dy, sv, prm, dh, dc, dhn, dg, dax, dah);
  OT_CUDA_CHECK_LAUNCH("BackwardStepKernel");
}

void GruResetBackward(const RnnStepGeometry& g, int64_t s, const int* lens, const float* drh, const RnnSaved& sv,
                      float* dhn, float* dg, float* dax, cudaStream_t stream) {
  GruResetBackwardKernel<<<Blocks(g), kThreads, 0, stream>>>(g, s, lens, drh, sv, dhn, dg, dax);
  OT_CUDA_CHECK_LAUNCH("GruResetBackwardKernel");
}

void BiasGrad(int64_t rows, int64_t gh, const float* dax, const float* dah, float* db, cudaStream_t stream) {
  BiasGradKernel<<<math::GridBlocks(gh, kThreads), kThreads, 0, stream>>>(rows, gh, dax, dah, db);
  OT_CUDA_CHECK_LAUNCH("BiasGradKernel");
}

void PeepholeGrad(int64_t rows, int64_t hidden, const float* dax, const float* cprev, const float* cnew, float* dp,
                  cudaStream_t stream) {
  PeepholeGradKernel<<<math::GridBlocks(3 * hidden, kThreads), kThreads, 0, stream>>>(rows, hidden, dax, cprev, cnew,
                                                                                       dp);
  OT_CUDA_CHECK_LAUNCH("PeepholeGradKernel");
}

}  // namespace ot::cuda::rnn
