// Small device kernels the cuDNN kernels need where cuDNN has no routine with the
// CPU runtime's semantics (defined in cudnn_kernels.cu): batch-norm statistics
// bookkeeping, explicit spatial padding for convolutions whose pads differ at the two
// ends, and pooling over windows cuDNN cannot describe (uneven pads, ceil_mode,
// dilations). All run asynchronously on the given stream and return the launch status;
// pointers are device pointers to float data.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ot::cuda {

// After cuDNN's batch-norm training forward, which gives the batch mean and, as its
// running variance at factor 1, the unbiased batch variance of `count` values per
// channel: per channel c (runtime/ops/math/batchnorm_math.h)
//   saved_var[c]        = PopulationVariance(unbiased_var[c], count)
//   running_mean_out[c] = RunningStatistic(running_mean_in[c], batch_mean[c], 1, momentum)
//   running_var_out[c]  = RunningStatistic(running_var_in[c], unbiased_running ? unbiased_var[c] : saved_var[c], 1, momentum)
// (ONNX momentum semantics, with PyTorch's unbiased running variance when the node asks,
// as the CPU kernel). Outputs may be null (not wanted) and may alias the inputs of the
// same role.
cudaError_t BatchNormFinishStats(cudaStream_t stream, int64_t channels, double count, bool unbiased_running,
                                 float momentum, const float* batch_mean, const float* unbiased_var,
                                 const float* running_mean_in, const float* running_var_in, float* running_mean_out,
                                 float* running_var_out, float* saved_var);

// inv_std[c] = 1 / sqrt(var[c] + epsilon): the saved variance of BatchNormTraining in the
// form cuDNN's backward reads.
cudaError_t BatchNormInvStd(cudaStream_t stream, int64_t channels, float epsilon, const float* var, float* inv_std);

// dX of Sigmoid (dY * Y * (1 - Y)) or Tanh (dY * (1 - Y^2)) from the forward output Y:
// cuDNN's activation backward does not document whether it reads Y or X for these, and
// the gradient ops have only Y.
enum class OutputActivation { kSigmoid, kTanh };
cudaError_t ActivationGradFromOutput(cudaStream_t stream, OutputActivation act, int64_t n, const float* dy,
                                     const float* y, float* dx);

// Spatial geometry of N x C x D1 x ... data, up to three spatial dimensions (unused
// trailing ones have size 1, kernel 1, stride 1, dilation 1, pad 0).
constexpr int kMaxSpatialDims = 3;
struct SpatialGeometry {
  int64_t planes = 0;                    // N * C
  int64_t in[kMaxSpatialDims] = {1, 1, 1};
  int64_t out[kMaxSpatialDims] = {1, 1, 1};
  int64_t pad_begin[kMaxSpatialDims] = {0, 0, 0};
  // Pooling windows only:
  int64_t kernel[kMaxSpatialDims] = {1, 1, 1};
  int64_t stride[kMaxSpatialDims] = {1, 1, 1};
  int64_t dilation[kMaxSpatialDims] = {1, 1, 1};
};

// padded[p, o...] = x[p, o - pad_begin...] inside x, `fill` elsewhere; `in` is x's spatial
// size, `out` the padded one.
cudaError_t PadSpatial(cudaStream_t stream, const SpatialGeometry& g, float fill, const float* x, float* padded);
// x_grad[p, i...] = padded_grad[p, i + pad_begin...]: the inverse crop of PadSpatial.
cudaError_t CropSpatial(cudaStream_t stream, const SpatialGeometry& g, const float* padded_grad, float* x_grad);

enum class PoolMode { kMax, kAverageIncludePad, kAverageExcludePad };

// Pooling with ONNX's window semantics (taps at o * stride - pad_begin + k * dilation):
// max over the taps inside the input; averages divide by the window size
// (kAverageIncludePad) or by the taps inside the input (kAverageExcludePad).
cudaError_t PoolForward(cudaStream_t stream, PoolMode mode, const SpatialGeometry& g, const float* x, float* y);
// dX of PoolForward from dY and X (max: to the first maximum of each window), written
// whole: each element sums the windows over it in a fixed order (deterministic, no atomics).
cudaError_t PoolBackward(cudaStream_t stream, PoolMode mode, const SpatialGeometry& g, const float* x,
                         const float* dy, float* dx);

}  // namespace ot::cuda
