// Matrix products on CUDA with cuBLAS: Gemm and MatMul (numpy.matmul semantics, batch
// dimensions broadcast), float32 and float64, mirroring runtime/cpu/matmul/matmul.cc.
//
// cuBLAS is column-major; a row-major [M, N] matrix is its column-major transpose, so
// Y = op(A) * op(B) is computed as Y^T = op(B)^T * op(A)^T with the operands swapped and
// no copies. Float32 uses pedantic fp32 math (CUBLAS_COMPUTE_32F_PEDANTIC), or TF32
// tensor cores when --tf32 allowed it (read when the plan is made).
// --amp fp16: float16 operands and output (CUDA_R_16F) with float32 accumulation
// (CUBLAS_COMPUTE_32F, tensor cores), as autocast's float16 products.
// Gemm's C is broadcast into Y by a strided copy and enters as cuBLAS's beta * Y. MatMul
// batches run as one strided-batched call when the batch offsets of A and B are evenly
// spaced (plain batches, or one operand broadcast), else one call per output matrix.
#include <string>
#include <vector>

#include "runtime/ops/checks/kernel_util.h"
#include "runtime/cuda/tensor/copy_kernels.h"
#include "runtime/cuda/cuda_common.h"
#include "runtime/ops/shapes/op_shapes.h"

namespace ot::cuda {
namespace {

// One (batched) row-major product y = alpha * op(a) * op(b) + beta * y, all dense.
struct GemmCall {
  bool trans_a = false, trans_b = false;
  int64_t M = 0, N = 0, K = 0;
  int64_t stride_a = 0, stride_b = 0, stride_y = 0;  // elements between batch matrices
  int64_t batch = 1;
};

class CublasProduct {
 public:
  // Checks the data type and fixes the math for this plan.
  void Prepare(DType dtype, const Node& node) {
    dtype_ = dtype;
    if (dtype == DType::kFloat32) {
      data_type_ = CUDA_R_32F;
      compute_ = AllowTf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F_PEDANTIC;
    } else if (dtype == DType::kFloat64) {
      data_type_ = CUDA_R_64F;
      compute_ = CUBLAS_COMPUTE_64F;
    } else if (dtype == DType::kFloat16) {
      data_type_ = CUDA_R_16F;
      compute_ = CUBLAS_COMPUTE_32F;  // float32 accumulation; alpha and beta are float
    } else {
      throw UnsupportedError(node.op_type + ": data type " + DTypeName(dtype) +
                             " on CUDA (float, double, and float16 under --amp fp16)");
    }
  }

  void Run(cublasHandle_t handle, const GemmCall& c, double alpha, const void* a, const void* b, double beta,
           void* y, const Node& node) const {
    for (int64_t v : {c.M, c.N, c.K, c.batch})
      if (v > INT32_MAX) throw UnsupportedError(node.op_type + ": a matrix dimension above 2^31 on CUDA");
    const int M = static_cast<int>(c.M), N = static_cast<int>(c.N), K = static_cast<int>(c.K);
    const int lda = c.trans_a ? M : K;
    const int ldb = c.trans_b ? K : N;
    const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
    const bool float_scalars = dtype_ != DType::kFloat64;  // 32F compute (float and half data)
    const void* alpha_p = float_scalars ? static_cast<const void*>(&alpha_f) : &alpha;
    const void* beta_p = float_scalars ? static_cast<const void*>(&beta_f) : &beta;
    OT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle, c.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                               c.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, alpha_p, b, data_type_,
                                               ldb, c.stride_b, a, data_type_, lda, c.stride_a, beta_p, y, data_type_,
                                               N, c.stride_y, static_cast<int>(c.batch), compute_,
                                               CUBLAS_GEMM_DEFAULT));
  }

  // y[n] *= beta (Gemm with K == 0).
  void Scale(cublasHandle_t handle, int64_t n, double beta, void* y) const {
    if (dtype_ == DType::kFloat32) {
      const float b = static_cast<float>(beta);
      OT_CUBLAS_CHECK(cublasSscal(handle, static_cast<int>(n), &b, static_cast<float*>(y), 1));
    } else if (dtype_ == DType::kFloat16) {
      const float b = static_cast<float>(beta);
      OT_CUBLAS_CHECK(cublasScalEx(handle, static_cast<int>(n), &b, CUDA_R_32F, y, CUDA_R_16F, 1, CUDA_R_32F));
    } else {
      OT_CUBLAS_CHECK(cublasDscal(handle, static_cast<int>(n), &beta, static_cast<double*>(y), 1));
    }
  }

  size_t element_size() const { return DTypeSize(dtype_); }

 private:
  DType dtype_ = DType::kFloat32;
  cudaDataType data_type_ = CUDA_R_32F;
  cublasComputeType_t compute_ = CUBLAS_COMPUTE_32F_PEDANTIC;
};

class GemmKernel final : public OpKernel {
 public:
  explicit GemmKernel(const KernelInfo& info) : OpKernel(info), ctx_(Context(info.device.index)) {}

  void Prepare(KernelContext& ctx) override {
    const Tensor& a = ctx.Input(0);
    const Tensor& b = ctx.Input(1);
    const Tensor* c = ctx.OptionalInput(2);
    const DType dtype = a.dtype();
    product_.Prepare(dtype, node_);
    for (const Tensor* t : {&b, c})
      if (t && t->dtype() != dtype) Fail("inputs have different data types (" + a.Describe() + ", " + t->Describe() + ")");
    const GemmShape g = ReadGemm(node_, static_cast<int>(opset_), a, b, c);
    call_ = GemmCall{};
    call_.trans_a = g.trans_a;
    call_.trans_b = g.trans_b;
    alpha_ = g.alpha;
    beta_ = g.beta;
    call_.M = g.M;
    call_.K = g.K;
    call_.N = g.N;
    use_c_ = c != nullptr && beta_ != 0.f;
    if (c) c_strides_ = {g.c_rows == 1 ? 0 : g.c_cols, g.c_cols == 1 ? 0 : 1};
    ctx.SetOutput(0, dtype, {call_.M, call_.N});
  }

  void Compute(KernelContext& ctx) override {
    Tensor& y = ctx.Output(0);
    if (y.numel() == 0) return;
    if (use_c_) {
      StridedCopy(ctx.Input(2).raw(), c_strides_, 0, y.raw(), {call_.M, call_.N}, product_.element_size(), ctx_.compute);
    }
    if (call_.K == 0) {  // Y = beta * C, or 0
      if (!use_c_) OT_CUDA_CHECK(cudaMemsetAsync(y.raw(), 0, y.nbytes(), ctx_.compute));
      else if (beta_ != 1.f) product_.Scale(ctx_.cublas, y.numel(), beta_, y.raw());
      return;
    }
    product_.Run(ctx_.cublas, call_, alpha_, ctx.Input(0).raw(), ctx.Input(1).raw(), use_c_ ? beta_ : 0.0, y.raw(),
                 node_);
  }

 private:
  // Checks that C broadcasts to [M, N] (exactly [M, N] for opsets < 7 with broadcast=0)
  // and keeps its strides over [M, N].
  DeviceContext& ctx_;
  CublasProduct product_;
  GemmCall call_;
  double alpha_ = 1, beta_ = 1;
  bool use_c_ = false;
  std::vector<int64_t> c_strides_;
};

// numpy.matmul: 1-D operands get a dimension prepended (A) or appended (B) that the output
// drops; leading batch dimensions broadcast.
class MatMulKernel final : public OpKernel {
 public:
  explicit MatMulKernel(const KernelInfo& info) : OpKernel(info), ctx_(Context(info.device.index)) {}

  void Prepare(KernelContext& ctx) override {
    const Tensor& a = ctx.Input(0);
    const Tensor& b = ctx.Input(1);
    const DType dtype = a.dtype();
    product_.Prepare(dtype, node_);
    if (b.dtype() != dtype) Fail("inputs have different data types (" + a.Describe() + ", " + b.Describe() + ")");
    if (a.rank() == 0 || b.rank() == 0) Fail("operands must have rank >= 1, got " + a.Describe() + " and " + b.Describe());
    const Shape a_shape = a.rank() == 1 ? Shape{1, a.dim(0)} : a.shape();
    const Shape b_shape = b.rank() == 1 ? Shape{b.dim(0), 1} : b.shape();
    call_ = GemmCall{};
    call_.M = a_shape[a_shape.size() - 2];
    call_.K = a_shape.back();
    call_.N = b_shape.back();
    if (b_shape[b_shape.size() - 2] != call_.K)
      Fail("inner dimensions differ: " + ShapeString(a.shape()) + " x " + ShapeString(b.shape()));
    const Shape a_batch(a_shape.begin(), a_shape.end() - 2), b_batch(b_shape.begin(), b_shape.end() - 2);
    const Shape out_batch = BroadcastShapes(a_batch, b_batch, node_);
    Shape out_shape = out_batch;
    if (a.rank() > 1) out_shape.push_back(call_.M);
    if (b.rank() > 1) out_shape.push_back(call_.N);
    ctx.SetOutput(0, dtype, out_shape);
    PlanBatches(a_batch, b_batch, out_batch);
  }

  void Compute(KernelContext& ctx) override {
    Tensor& y = ctx.Output(0);
    if (y.numel() == 0) return;
    if (call_.K == 0) {
      OT_CUDA_CHECK(cudaMemsetAsync(y.raw(), 0, y.nbytes(), ctx_.compute));
      return;
    }
    const auto* a = static_cast<const char*>(ctx.Input(0).raw());
    const auto* b = static_cast<const char*>(ctx.Input(1).raw());
    auto* out = static_cast<char*>(y.raw());
    if (a_matrix_.empty()) {  // one strided-batched call
      product_.Run(ctx_.cublas, call_, 1.0, a, b, 0.0, out, node_);
      return;
    }
    const int64_t es = static_cast<int64_t>(product_.element_size());
    GemmCall one = call_;
    one.batch = 1;
    for (size_t i = 0; i < a_matrix_.size(); ++i)
      product_.Run(ctx_.cublas, one, 1.0, a + a_matrix_[i] * call_.M * call_.K * es,
                   b + b_matrix_[i] * call_.K * call_.N * es, 0.0,
                   out + static_cast<int64_t>(i) * call_.M * call_.N * es, node_);
  }

 private:
  // Chooses between one strided-batched call (a_matrix_ empty) and one call per output
  // matrix (a_matrix_ and b_matrix_ hold the operands' matrix indices).
  void PlanBatches(const Shape& a_batch, const Shape& b_batch, const Shape& out_batch) {
    a_matrix_.clear();
    b_matrix_.clear();
    const int64_t count = NumElements(out_batch);
    if (NumElements(b_batch) == 1 && NumElements(a_batch) == count) {
      // One B for every batch: fold A's batch dimensions into its rows.
      call_.M *= count;
      return;
    }
    const std::vector<int64_t> a_strides = BroadcastStrides(a_batch, out_batch);
    const std::vector<int64_t> b_strides = BroadcastStrides(b_batch, out_batch);
    std::vector<int64_t> a_index(static_cast<size_t>(count), 0), b_index(static_cast<size_t>(count), 0);
    for (int64_t i = 0; i < count; ++i) {
      int64_t rest = i;
      for (size_t d = out_batch.size(); d-- > 0;) {
        const int64_t index = rest % out_batch[d];
        rest /= out_batch[d];
        a_index[static_cast<size_t>(i)] += index * a_strides[d];
        b_index[static_cast<size_t>(i)] += index * b_strides[d];
      }
    }
    const int64_t step_a = count > 1 ? a_index[1] - a_index[0] : 0;
    const int64_t step_b = count > 1 ? b_index[1] - b_index[0] : 0;
    bool even = true;
    for (int64_t i = 0; i < count; ++i)
      even = even && a_index[static_cast<size_t>(i)] == i * step_a && b_index[static_cast<size_t>(i)] == i * step_b;
    if (even) {
      call_.batch = count;
      call_.stride_a = step_a * call_.M * call_.K;
      call_.stride_b = step_b * call_.K * call_.N;
      call_.stride_y = call_.M * call_.N;
      return;
    }
    a_matrix_ = std::move(a_index);
    b_matrix_ = std::move(b_index);
  }

  DeviceContext& ctx_;
  CublasProduct product_;
  GemmCall call_;
  std::vector<int64_t> a_matrix_, b_matrix_;
};

OT_REGISTER_CUDA_KERNEL("Gemm", 1, kLatestOpset, GemmKernel);
OT_REGISTER_CUDA_KERNEL("MatMul", 1, kLatestOpset, MatMulKernel);

}  // namespace
}  // namespace ot::cuda
