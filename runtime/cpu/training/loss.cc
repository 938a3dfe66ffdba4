// Classification losses on the CPU: SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss
// (opsets 12 and 13; later opsets did not change them). No library provides these, so
// they are plain loops over scores laid out as [N, C, D] (D = product of d1...dk):
//   NLL: loss[n, d] = -weight[c] * input[n, c, d], with c = labels[n, d]
//   SCE: the same on log_prob = log_softmax(scores, axis 1), computed stably as
//        x - (max + log(sum(exp(x - max)))) with the sum in double (float32 rows with the
//        classes contiguous: float sums of 512 classes, vectorised; softmax_rows.h).
// Positions whose label equals ignore_index contribute 0 and have weight 0. Reductions sum
// in double; "mean" divides by the sum of the weights of the positions not ignored (the
// count of them without a weight input). When every label is ignored that is 0 / 0 = NaN,
// which is also the answer of ONNX's reference implementation and of PyTorch.
// Any other label outside [0, C) is an error naming the batch index and the value.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/ops/checks/kernel_util.h"
#include "graph/op_domains.h"
#include "runtime/core/kernel_registry.h"
#include "runtime/cpu/training/softmax_rows.h"
#include "runtime/ops/checks/train_checks.h"

namespace ot {
namespace cpu {
namespace {

class ClassificationLossKernel final : public OpKernel {
 public:
  explicit ClassificationLossKernel(const KernelInfo& info)
      : OpKernel(info), softmax_(info.node.op_type == "SoftmaxCrossEntropyLoss") {}

  void Prepare(KernelContext& ctx) override {
    const Tensor& scores = ctx.Input(0);
    const Tensor& labels = ctx.Input(1);
    const Tensor* weight = ctx.OptionalInput(2);
    dtype_ = scores.dtype();
    if (dtype_ != DType::kFloat32 && dtype_ != DType::kFloat64) Unsupported("data type " + DTypeName(dtype_));
    const Shape expected_labels = CheckLossLabels(node_, scores, labels);
    N_ = scores.dim(0);
    C_ = scores.dim(1);
    spatial_shape_.assign(expected_labels.begin() + 1, expected_labels.end());
    D_ = NumElements(spatial_shape_);
    if (weight && (weight->dtype() != dtype_ || weight->shape() != Shape{C_}))
      Fail("weight must be " + DTypeName(dtype_) + "[" + std::to_string(C_) + "], got " + weight->Describe());

    const LossAttrs attrs = ReadLossAttrs(node_);
    reduce_ = attrs.reduce;
    mean_ = attrs.mean;
    has_ignore_index_ = attrs.has_ignore_index;
    ignore_index_ = attrs.ignore_index;

    ctx.SetOutput(0, dtype_, reduce_ ? Shape{} : expected_labels);
    if (softmax_) ctx.SetOutput(1, dtype_, scores.shape());
  }

  void Compute(KernelContext& ctx) override {
    bool int64_labels = ctx.Input(1).dtype() == DType::kInt64;
    if (dtype_ == DType::kFloat32) int64_labels ? Run<float, int64_t>(ctx) : Run<float, int32_t>(ctx);
    else int64_labels ? Run<double, int64_t>(ctx) : Run<double, int32_t>(ctx);
  }

 private:
  template <typename T, typename Label> void Run(KernelContext& ctx) const {
    const T* x = ctx.Input(0).data<T>();
    const Label* labels = ctx.Input(1).data<Label>();
    const Tensor* weight_tensor = ctx.OptionalInput(2);
    const T* weight = weight_tensor ? weight_tensor->data<T>() : nullptr;
    T* loss = ctx.Output(0).data<T>();
    T* log_prob = softmax_ && ctx.HasOutput(1) ? ctx.Output(1).data<T>() : nullptr;

    // Every (n, d) position on its own (in parallel: a language model has thousands of rows
    // of 50k classes), then the sums in position order, so that the result does not depend on
    // the thread count.
    const int64_t positions = N_ * D_;
    std::vector<double> element_loss(static_cast<size_t>(positions), 0.0), element_weight(element_loss);
    std::vector<uint8_t> bad(static_cast<size_t>(positions), 0);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < positions; ++r) {
      const int64_t n = r / D_, d = r % D_;
      const T* x_nd = x + n * C_ * D_ + d;  // class c at x_nd[c * D_]
      const int64_t label = static_cast<int64_t>(labels[r]);
      const bool ignored = has_ignore_index_ && label == ignore_index_;
      double log_sum_exp = 0;
      if (softmax_ && (!ignored || log_prob)) {
        T* out = log_prob ? log_prob + n * C_ * D_ + d : nullptr;
        if constexpr (std::is_same_v<T, float>) {
          if (D_ == 1) {  // contiguous rows (classes last): the vectorised row loops
            log_sum_exp = RowLogSumExp(x_nd, C_);
            if (out) RowShifted(x_nd, C_, log_sum_exp, out);
          }
        }
        if (!std::is_same_v<T, float> || D_ != 1) {
          log_sum_exp = LogSumExp(x_nd);
          if (out)
            for (int64_t c = 0; c < C_; ++c) out[c * D_] = static_cast<T>(x_nd[c * D_] - log_sum_exp);
        }
      }
      if (ignored) continue;
      if (label < 0 || label >= C_) {
        bad[static_cast<size_t>(r)] = 1;
        continue;
      }
      const double w = weight ? static_cast<double>(weight[label]) : 1.0;
      const double picked = static_cast<double>(x_nd[label * D_]) - log_sum_exp;  // log_sum_exp is 0 for NLL
      element_loss[static_cast<size_t>(r)] = -w * picked;
      element_weight[static_cast<size_t>(r)] = w;
    }
    double loss_sum = 0, weight_sum = 0;
    for (int64_t r = 0; r < positions; ++r) {
      if (bad[static_cast<size_t>(r)]) FailLabel(static_cast<int64_t>(labels[r]), r / D_, r % D_);
      loss_sum += element_loss[static_cast<size_t>(r)];
      weight_sum += element_weight[static_cast<size_t>(r)];
      if (!reduce_) loss[r] = static_cast<T>(element_loss[static_cast<size_t>(r)]);
    }
    if (reduce_) loss[0] = static_cast<T>(mean_ ? loss_sum / weight_sum : loss_sum);
  }

  // log(sum_c exp(x[c * D_])), shifted by the maximum so that exp never overflows.
  template <typename T> double LogSumExp(const T* x) const {
    double max_value = -std::numeric_limits<double>::infinity();
    for (int64_t c = 0; c < C_; ++c) max_value = std::max(max_value, static_cast<double>(x[c * D_]));
    if (std::isinf(max_value)) return max_value;
    double sum = 0;
    for (int64_t c = 0; c < C_; ++c) sum += std::exp(static_cast<double>(x[c * D_]) - max_value);
    return max_value + std::log(sum);
  }

  [[noreturn]] void FailLabel(int64_t label, int64_t n, int64_t d) const {
    std::string where = "batch index " + std::to_string(n);
    if (!spatial_shape_.empty()) {
      Shape index(spatial_shape_.size());
      for (size_t i = spatial_shape_.size(); i-- > 0;) {
        index[i] = d % spatial_shape_[i];
        d /= spatial_shape_[i];
      }
      where += ", position " + ShapeString(index);
    }
    Fail("label " + std::to_string(label) + " at " + where + " is outside [0, " + std::to_string(C_) + ")" +
         (has_ignore_index_ ? " and is not ignore_index " + std::to_string(ignore_index_) : std::string()));
  }

  const bool softmax_;
  DType dtype_ = DType::kUndefined;
  int64_t N_ = 0, C_ = 0, D_ = 0;
  Shape spatial_shape_;
  bool reduce_ = false, mean_ = false;
  bool has_ignore_index_ = false;
  int64_t ignore_index_ = 0;
};

OT_REGISTER_CPU_KERNEL("SoftmaxCrossEntropyLoss", 12, kLatestOpset, ClassificationLossKernel);
OT_REGISTER_CPU_KERNEL("NegativeLogLikelihoodLoss", 12, kLatestOpset, ClassificationLossKernel);
// The loss the autodiff pass attaches to models older than opset 12.
OT_REGISTER_KERNEL(kGradDomain, "SoftmaxCrossEntropyLoss", 1, kLatestOpset, DeviceType::kCPU, ClassificationLossKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
