// Our own CUDA kernels for the ops no library routine covers (elementwise.cu, reduce.cu,
// loss_optimizer.cu), declared as host-callable launchers, plus the host-side helpers the
// kernel classes share (broadcast indexers, the device error flag). Every launcher is
// asynchronous on the stream it is given and takes device pointers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "graph/dtype.h"
#include "runtime/ops/checks/op_kinds.h"
#include "runtime/ops/math/optimizer_math.h"

namespace ot::cuda::math {

// Most dimensions a broadcast or reduction handles after merging contiguous ones.
constexpr int kMaxDims = 8;
// Most inputs one broadcast kernel reads (Where reads three).
constexpr int kMaxOperands = 3;

// Element offsets of up to kMaxOperands inputs for a row-major output index: operand k's
// element for output i is at sum_d index_d(i) * strides[k][d] (stride 0 where broadcast).
// `rank` <= 1 means every operand is contiguous or a scalar (offset = i * strides[k][0]).
struct BroadcastIndexer {
  int rank = 0;
  int64_t dims[kMaxDims] = {};
  int64_t strides[kMaxOperands][kMaxDims] = {};
};

// Builds the indexer of `inputs` numpy-broadcast to `out`, with dimensions merged where
// every operand is contiguous across them. Returns false when more than kMaxDims remain.
bool MakeBroadcastIndexer(const std::vector<int64_t>& out, const std::vector<std::vector<int64_t>>& inputs,
                          BroadcastIndexer* indexer);

using BinaryOp = ::ot::BinaryOp;
enum class UnaryOp {
  kAbs,
  kNeg,
  kExp,
  kLog,
  kSqrt,
  kReciprocal,
  kCeil,
  kFloor,
  kRound,
  kLeakyRelu,
  kSoftplus
};
using ReduceOp = ::ot::ReduceOp;

// --- elementwise.cu -------------------------------------------------------------------
// Each returns false when the data type (combination) has no instantiation.

// out[i] = op(a[..], b[..]) over n outputs; comparisons write bool (uint8). Integer Div
// by zero writes 0 and sets *error_flag to 1.
bool LaunchBinary(BinaryOp op, DType type, const void* a, const void* b, void* out, int64_t n,
                  const BroadcastIndexer& ix, long long* error_flag, cudaStream_t stream);
// Pow with base and exponent of possibly different types (out has the base's type).
bool LaunchPow(DType base_type, DType exponent_type, const void* a, const void* b, void* out, int64_t n,
               const BroadcastIndexer& ix, cudaStream_t stream);
// out[i] = x[..] converted (numpy broadcast copy; used for one-input Sum/Max/Min).
bool LaunchBroadcastCopy(DType type, const void* x, void* out, int64_t n, const BroadcastIndexer& ix,
                         cudaStream_t stream);
// data[i] /= divisor in the element type (Mean over its inputs).
bool LaunchDivideBy(DType type, void* data, int64_t n, int64_t divisor, cudaStream_t stream);
// y = op(x); alpha is LeakyRelu's slope.
bool LaunchUnary(UnaryOp op, DType type, const void* x, void* y, int64_t n, float alpha, cudaStream_t stream);
// y = min(max(x, lo), hi). Each bound is read from a device scalar of x's type when its
// pointer is given, else from the attribute value when given (host pointer, converted
// to the type), else it is the type's limit.
bool LaunchClip(DType type, const void* x, void* y, int64_t n, const void* lo_ptr, const void* hi_ptr,
                const double* lo_attr, const double* hi_attr, cudaStream_t stream);
// Element conversion with the CPU Cast's rules (float -> integer saturates, NaN -> 0;
// bool is 0/1). float16 is not handled.
bool LaunchCast(DType from, DType to, const void* x, void* y, int64_t n, cudaStream_t stream);
// out[i] = cond[..] ? x[..] : y[..] for elements of `elem_size` bytes (1, 2, 4 or 8).
bool LaunchWhere(size_t elem_size, const uint8_t* cond, const void* x, const void* y, void* out, int64_t n,
                 const BroadcastIndexer& ix, cudaStream_t stream);
// dx = x > 0 ? dy : alpha * dy (float32).
void LaunchLeakyReluGrad(const float* dy, const float* x, float* dx, int64_t n, float alpha, cudaStream_t stream);
// out[i] = g[..] * scale (float32), g broadcast to the output (ReduceGrad).
void LaunchBroadcastScale(const float* g, float* out, int64_t n, const BroadcastIndexer& ix, float scale,
                          cudaStream_t stream);
// Dropout in training mode with a Philox stream keyed by `seed`: keep = u >= ratio,
// y = keep ? x / (1 - ratio) : 0, mask = keep. ratio comes from *ratio_ptr (float or
// double, as ratio_type says) when given, else `ratio`; *training_ptr (bool) when given
// decides training (else training). Inference or ratio 0 copies x and sets the mask.
// A ratio outside [0, 1) in training writes nothing but sets *error_flag to 1.
bool LaunchDropout(DType type, const void* x, void* y, uint8_t* mask, int64_t n, const void* ratio_ptr,
                   DType ratio_type, float ratio, const uint8_t* training_ptr, uint64_t seed, long long* error_flag,
                   cudaStream_t stream);
// dx = mask ? dy * scale : 0, scale = ratio >= 1 ? 0 : 1 / (1 - ratio), ratio from
// *ratio_ptr (float) when given.
void LaunchDropoutGrad(const float* dy, const uint8_t* mask, float* dx, int64_t n, const float* ratio_ptr,
                       float ratio, cudaStream_t stream);
// Fills n elements of `type` with one (bool, float, double).
bool LaunchFillOnes(DType type, void* data, int64_t n, cudaStream_t stream);

// --- reduce.cu ------------------------------------------------------------------------
// A reduction of a row-major input into `out_numel` outputs: output o reduces the
// elements at offset kept_offset(o) + reduced_offset(r) for r < reduced_count, where
// kept/reduced describe the input's dimensions split into kept and reduced ones (each
// with the input's strides). Accumulates in double for floating types.
struct ReduceIndexer {
  int kept_rank = 0;
  int64_t kept_dims[kMaxDims] = {};
  int64_t kept_strides[kMaxDims] = {};
  int reduced_rank = 0;
  int64_t reduced_dims[kMaxDims] = {};
  int64_t reduced_strides[kMaxDims] = {};
};
// Splits `in` into kept and reduced dimensions (reduced[d] true), merging neighbours.
// False when more than kMaxDims remain on either side.
bool MakeReduceIndexer(const std::vector<int64_t>& in, const std::vector<bool>& reduced, ReduceIndexer* indexer);
bool LaunchReduce(ReduceOp op, DType type, const void* x, void* y, int64_t out_numel, int64_t reduced_count,
                  const ReduceIndexer& ix, cudaStream_t stream);
// ArgMax/ArgMin along one axis of [outer, axis, inner]; int64 output.
bool LaunchArgExtreme(bool is_max, bool select_last, DType type, const void* x, int64_t* y, int64_t outer,
                      int64_t axis, int64_t inner, cudaStream_t stream);

// --- loss_optimizer.cu ----------------------------------------------------------------
// SoftmaxCrossEntropyLoss (softmax) / NegativeLogLikelihoodLoss on scores [N, C, D].
// Labels int32 or int64. `scratch` holds 2 * N * D doubles. Labels outside [0, C) that
// are not ignored contribute nothing and set *error_flag to 1 + their flat position.
struct LossParams {
  int64_t n = 0, c = 0, d = 0;
  bool softmax = false;
  bool reduce = false, mean = false;
  bool has_ignore_index = false;
  int64_t ignore_index = 0;
};
bool LaunchClassificationLoss(const LossParams& p, DType type, const void* scores, const void* labels,
                              bool int64_labels, const void* weight, void* loss, void* log_prob, double* scratch,
                              long long* error_flag, cudaStream_t stream);
// Gradients: dScores from dY (scalar for sum/mean, per position for none), log_prob
// (softmax) or nothing (NLL), labels and weight, float32. `scratch` holds one double
// (the weight sum). `reduction_none` / `mean` as the forward.
void LaunchClassificationLossGrad(const LossParams& p, const float* dy, const float* log_prob, const void* labels,
                                  bool int64_labels, const float* weight, float* dx, double* scratch,
                                  long long* error_flag, cudaStream_t stream);

// Optimizers: lr and step are device scalars (float, int64). Unrequested outputs are null.
using MomentumParams = ::ot::MomentumParams;
void LaunchMomentum(const MomentumParams& p, const float* lr, const int64_t* step, const float* x, const float* g,
                    const float* v, float* x_new, float* v_new, int64_t n, cudaStream_t stream);
using AdagradParams = ::ot::AdagradParams;
void LaunchAdagrad(const AdagradParams& p, const float* lr, const int64_t* step, const float* x, const float* g,
                   const float* h, float* x_new, float* h_new, int64_t n, cudaStream_t stream);
using AdamParams = ::ot::AdamParams;
void LaunchAdam(const AdamParams& p, const float* lr, const int64_t* step, const float* x, const float* g,
                const float* v, const float* h, float* x_new, float* v_new, float* h_new, int64_t n,
                cudaStream_t stream);
// org.onnxtrain AdamW (runtime/ops/math/optimizer_math.h): m, v the moments.
void LaunchAdamW(const ::ot::AdamWParams& p, const float* lr, const int64_t* step, const float* x, const float* g,
                 const float* m, const float* v, float* x_new, float* m_new, float* v_new, int64_t n,
                 cudaStream_t stream);
// org.onnxtrain RMSprop (runtime/ops/math/optimizer_math.h): state[k] / state_new[k] for the
// p.States() states in order (S, A if centered, B if momentum > 0); state_new[k] may be null.
void LaunchRmsprop(const ::ot::RmspropParams& p, const float* lr, const float* x, const float* g,
                   const float* const* state, float* const* state_new, float* x_new, int64_t n, cudaStream_t stream);

// The compute stream of a device (Context(device).compute).
cudaStream_t ComputeStream(int device);

// Checks a launch was accepted (cudaGetLastError), throwing ot::Error naming `what`.
void CheckLaunch(const char* what);

// A device-side error word that kernels set and the host reads without waiting: after
// each launch an async copy brings it to pinned host memory, and the next Compute reads
// what has arrived there. So an error surfaces at the latest one run after it happened
// (the kernels never read out of bounds meanwhile). Nothing here waits or allocates in
// Compute, so a plan with these kernels can still be captured into a CUDA graph; graph
// replays keep copying the flag, and the executor asks each kernel's
// OpKernel::CheckDeviceErrors (which polls it) around every replay.
class DeviceErrorFlag {
 public:
  DeviceErrorFlag() = default;
  ~DeviceErrorFlag();
  DeviceErrorFlag(const DeviceErrorFlag&) = delete;
  DeviceErrorFlag& operator=(const DeviceErrorFlag&) = delete;
  // Allocates on first use (call from Prepare).
  void Init(int device);
  long long* device_ptr() const { return device_; }
  // Queues the copy of the flag to the host after the kernels just launched on `stream`.
  void Publish(cudaStream_t stream);
  // The value that has arrived on the host so far (0: no error seen yet).
  long long Poll() const;

 private:
  long long* device_ = nullptr;
  long long* host_ = nullptr;  // pinned
};

}  // namespace ot::cuda::math
