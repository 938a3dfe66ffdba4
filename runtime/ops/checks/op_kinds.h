// Plain descriptions of ops, one definition for the CPU and CUDA kernels and the CUDA
// device code (so this header includes nothing): the element-wise binary ops and the
// reductions as enums, the optimizers' attributes as structs.
#pragma once

namespace ot {

enum class BinaryOp {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kPow,
  kMax,
  kMin,
  kEqual,
  kLess,
  kLessOrEqual,
  kGreater,
  kGreaterOrEqual
};

enum class ReduceOp { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kSumSquare, kLogSum, kLogSumExp };

// Attributes of Momentum, Adagrad and Adam (ai.onnx.preview.training).
struct MomentumParams {
  float alpha = 0, beta = 0, norm = 0;
  bool nesterov = false;
};
struct AdagradParams {
  float decay = 0, epsilon = 0, norm = 0;
};
struct AdamParams {
  float alpha = 0, beta = 0, epsilon = 0, norm = 0, norm_post = 0;
};

}  // namespace ot
