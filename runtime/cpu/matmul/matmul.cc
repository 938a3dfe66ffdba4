// Matrix products on the CPU: Gemm (opsets 1-13) and MatMul (opsets 1-13, numpy.matmul
// semantics). Float32 runs on oneDNN's matmul primitive, built once per shape in Prepare;
// double (Gemm, MatMul) and int32/int64 (MatMul) run on a plain loop.
//
// Why dnnl::matmul and not dnnl_sgemm for Gemm: measured on the 2-core development
// machine (oneDNN 2.6.3, AVX-512 "brg" kernels, 2 threads), Y = 0.5 * A * B^T + C[N]:
//   SimpleNN fc   [32,784]  x [784,10]^T: matmul primitive 6.0-6.5 us, dnnl_sgemm 7.1-7.4 us
//   ResNet34 fc   [128,512] x [512,10]^T: matmul primitive 9.4-10.1 us, dnnl_sgemm 12.0-12.1 us
// dnnl_sgemm has to re-dispatch on every call and needs C broadcast into Y beforehand
// (its beta scales Y), while the primitive is planned once and fuses the bias. So:
//   - transA / transB are strides on the A and B memory descriptors (no copies);
//   - alpha is the output scale;
//   - C enters as a binary-add post-op, which oneDNN applies after the output scale:
//     Y = alpha * A * B + C', where C' is C itself when beta == 1, else beta * C in a
//     kernel-owned buffer. (oneDNN 2.6 adds the matmul *bias* argument before the output
//     scale, alpha * (A * B + bias), so the post-op is the exact form.)
//   - a C of shape [M, 1] makes oneDNN fall back to its reference kernel (hundreds of
//     times slower), so that one is expanded to [M, N] in the buffer instead.
// As in BLAS, beta == 0 means C is not read at all.
// Large float32 products without C (the backward's data and weight gradients) go to
// dnnl_sgemm instead: measured on the 2-core Zen 4 (oneDNN 2.6.3, one thread, CPU time,
// median of 41 calls), ViT's products at 2080 rows and K or N of 192-768 ran at 94-105
// GFLOP/s through the matmul primitive and 103-111 through dnnl_sgemm (dW of [2080, 768] x
// [2080, 192]: 6.7 against 6.0 ms); at two threads (fastest of 41 calls) the weight
// gradients 174-200 against 214-223 GFLOP/s and the data gradients even. Its per-call
// dispatch is a few microseconds on milliseconds.
// Under --amp bf16 the graph casts A and B to bfloat16 (graph/passes/amp_pass.h): both kernels
// then run oneDNN's bfloat16 matmul with a float32 result (C stays float32).
// org.onnxtrain Gemm is Gemm (opset 13) with attribute relu=1: max(Y, 0), a oneDNN eltwise
// post-op after C's (graph/passes/fusion.h FuseMatMulBias: a Linear layer's bias and ReLU).
// org.onnxtrain MatMulAdd(A, B, bias) = MatMul(A, B) + bias, bias float32 [N] (or [1]) over
// the last dimension: MatMul followed by the Add of a Linear layer's bias, fused in the
// training graph (graph/passes/fusion.h FuseMatMulBias); the bias is oneDNN's matmul bias,
// added as the product's rows are written (no second pass over the output).
#include <string>
#include <unordered_map>
#include <vector>

#include "graph/op_domains.h"
#include "runtime/cpu/layout/dnnl_util.h"
#include "runtime/ops/checks/kernel_util.h"
#include "runtime/core/kernel_registry.h"
#include "runtime/ops/shapes/op_shapes.h"

namespace ot {
namespace cpu {
namespace {

// Where element (row, col) of a matrix lies relative to its first element.
struct MatrixStrides {
  int64_t row;
  int64_t col;
};

// Accumulator type of the loop kernels: double for floating point, int64 for integers.
template <typename T> struct AccumulatorOf { using type = double; };
template <> struct AccumulatorOf<int32_t> { using type = int64_t; };
template <> struct AccumulatorOf<int64_t> { using type = int64_t; };

// y[M, N] (dense) = a[M, K] * b[K, N], with a and b addressed through strides.
template <typename T>
void LoopMatMul(const T* a, MatrixStrides as, const T* b, MatrixStrides bs, int64_t M, int64_t K, int64_t N, T* y) {
  using Acc = typename AccumulatorOf<T>::type;
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      Acc sum = 0;
      for (int64_t k = 0; k < K; ++k) sum += static_cast<Acc>(a[m * as.row + k * as.col]) * b[k * bs.row + n * bs.col];
      y[m * N + n] = static_cast<T>(sum);
    }
  }
}

// C of a Gemm seen as a matrix of rows x cols, each 1 or equal to Y's dimension.
struct BroadcastMatrix {
  int64_t rows = 1;
  int64_t cols = 1;
  int64_t At(int64_t m, int64_t n) const { return (rows == 1 ? 0 : m) * cols + (cols == 1 ? 0 : n); }
};

// The result type of a product of `operands`: float32 for bfloat16 (--amp bf16), else theirs.
DType ResultType(DType operands) { return operands == DType::kBFloat16 ? DType::kFloat32 : operands; }

// bfloat16 operands come in pairs (the graph casts both), with a float32 C.
void CheckBFloat16Operands(const Tensor& a, const Tensor& b, const Tensor* c) {
  if (a.dtype() != DType::kBFloat16 && b.dtype() != DType::kBFloat16) return;
  if (a.dtype() != b.dtype())
    throw UnsupportedError("matrix product of " + a.Describe() + " and " + b.Describe() +
                           ": bfloat16 products take two bfloat16 operands");
  if (c && c->dtype() != DType::kFloat32)
    throw UnsupportedError("Gemm: C is " + c->Describe() + "; with bfloat16 A and B it must be float32");
}

// Multiply-adds from which a float32 Gemm without C runs on dnnl_sgemm (see above); smaller
// products keep the primitive, planned once, whose call costs less.
constexpr int64_t kSgemmMinMultiplies = int64_t{1} << 22;

class GemmKernel final : public OpKernel {
 public:
  explicit GemmKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    args_ = PrimitiveArgs();
    const Tensor& a = ctx.Input(0);
    const Tensor& b = ctx.Input(1);
    const Tensor* c = ctx.OptionalInput(2);
    dtype_ = a.dtype();
    if (dtype_ != DType::kFloat32 && dtype_ != DType::kFloat64 && dtype_ != DType::kBFloat16)
      Unsupported("data type " + DTypeName(dtype_));
    CheckBFloat16Operands(a, b, c);
    const GemmShape g = ReadGemm(node_, node_.domain == kGradDomain ? 13 : static_cast<int>(opset_), a, b, c);
    relu_ = node_.domain == kGradDomain && node_.GetInt("relu", 0) != 0;
    alpha_ = g.alpha;
    beta_ = g.beta;
    M_ = g.M;
    K_ = g.K;
    N_ = g.N;
    a_strides_ = g.trans_a ? MatrixStrides{1, M_} : MatrixStrides{K_, 1};
    b_strides_ = g.trans_b ? MatrixStrides{1, K_} : MatrixStrides{N_, 1};
    use_c_ = c != nullptr && beta_ != 0.f;
    c_shape_ = c ? BroadcastMatrix{g.c_rows, g.c_cols} : BroadcastMatrix{};
    ctx.SetOutput(0, ResultType(dtype_), {M_, N_});
    primitive_ready_ = false;
    by_sgemm_ = dtype_ == DType::kFloat32 && !use_c_ && !relu_ && M_ * N_ * K_ >= kSgemmMinMultiplies;
    if (dtype_ != DType::kFloat64 && M_ * N_ * K_ > 0 && !by_sgemm_) BuildPrimitive();
    if (dtype_ == DType::kBFloat16 && !primitive_ready_ && M_ * N_ > 0)
      Unsupported("bfloat16 operands with an empty inner dimension");
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& a = ctx.Input(0);
    const Tensor& b = ctx.Input(1);
    const Tensor* c = use_c_ ? &ctx.Input(2) : nullptr;
    Tensor& y = ctx.Output(0);
    if (M_ * N_ == 0) return;
    if (by_sgemm_) {
      // Row-major: A is [M, K] (lda K) or, transposed, [K, M] (lda M); B likewise.
      const dnnl_status_t status =
          dnnl_sgemm(a_strides_.col == 1 ? 'N' : 'T', b_strides_.col == 1 ? 'N' : 'T', M_, N_, K_, alpha_,
                     a.data<float>(), a_strides_.col == 1 ? K_ : M_, b.data<float>(), b_strides_.col == 1 ? N_ : K_, 0.f,
                     y.data<float>(), N_);
      if (status != dnnl_success) Fail("dnnl_sgemm failed (status " + std::to_string(static_cast<int>(status)) + ")");
      return;
    }
    if (!primitive_ready_) {
      if (dtype_ == DType::kFloat32) ComputeByLoop<float>(a, b, c, y);
      else ComputeByLoop<double>(a, b, c, y);
      return;
    }
    args_.Set(DNNL_ARG_SRC, a_desc_, a.raw());
    args_.Set(DNNL_ARG_WEIGHTS, b_desc_, b.raw());
    args_.Set(DNNL_ARG_DST, y_desc_, y.raw());
    if (c) {
      const float* c_data = c->data<float>();
      if (!c_buffer_.empty()) {
        FillCBuffer(c_data);
        c_data = c_buffer_.data();
      }
      args_.Set(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, c_desc_, c_data);
    }
    primitive_.execute(Stream(), args_.map());
    Stream().wait();
  }

 private:
  // Checks that C broadcasts to [M, N] (exactly [M, N] for opsets < 7 with broadcast=0).
  void BuildPrimitive() {
    using dt = dnnl::memory::data_type;
    a_desc_ = dnnl::memory::desc({M_, K_}, ToDnnl(dtype_), {a_strides_.row, a_strides_.col});
    b_desc_ = dnnl::memory::desc({K_, N_}, ToDnnl(dtype_), {b_strides_.row, b_strides_.col});
    y_desc_ = PlainDesc({M_, N_}, dt::f32);
    dnnl::primitive_attr attr;
    if (alpha_ != 1.f) attr.set_output_scales(0, {alpha_});
    c_buffer_.clear();
    expand_c_ = false;
    dnnl::post_ops ops;
    if (use_c_) {
      // [M, 1] with N > 1 is the one broadcast oneDNN's fast kernels lack: expand it.
      expand_c_ = c_shape_.cols == 1 && N_ > 1 && c_shape_.rows > 1;
      Shape c_dims = expand_c_ ? Shape{M_, N_} : Shape{c_shape_.rows, c_shape_.cols};
      if (expand_c_ || beta_ != 1.f) c_buffer_.resize(static_cast<size_t>(NumElements(c_dims)));
      c_desc_ = PlainDesc(c_dims, dt::f32);
      ops.append_binary(dnnl::algorithm::binary_add, c_desc_);
    }
    if (relu_) ops.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
    attr.set_post_ops(ops);
    auto pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_desc_, b_desc_, y_desc_), attr, Engine());
    primitive_ = dnnl::matmul(pd);
    primitive_ready_ = true;
  }

  // c_buffer_ = beta * C, broadcast to [M, N] when expand_c_.
  void FillCBuffer(const float* c) {
    if (expand_c_) {
      for (int64_t m = 0; m < M_; ++m)
        for (int64_t n = 0; n < N_; ++n) c_buffer_[static_cast<size_t>(m * N_ + n)] = beta_ * c[c_shape_.At(m, n)];
    } else {
      for (size_t i = 0; i < c_buffer_.size(); ++i) c_buffer_[i] = beta_ * c[i];
    }
  }

  // Double, and the degenerate float shapes (K == 0) oneDNN has no primitive for.
  template <typename T> void ComputeByLoop(const Tensor& a, const Tensor& b, const Tensor* c, Tensor& y) const {
    T* out = y.data<T>();
    LoopMatMul(a.data<T>(), a_strides_, b.data<T>(), b_strides_, M_, K_, N_, out);
    const T alpha = static_cast<T>(alpha_), beta = static_cast<T>(beta_);
    for (int64_t m = 0; m < M_; ++m) {
      for (int64_t n = 0; n < N_; ++n) {
        T& v = out[m * N_ + n];
        v = alpha * v + (c ? beta * c->data<T>()[c_shape_.At(m, n)] : T(0));
        if (relu_ && v < T(0)) v = T(0);
      }
    }
  }

  DType dtype_ = DType::kUndefined;
  float alpha_ = 1.f, beta_ = 1.f;
  int64_t M_ = 0, K_ = 0, N_ = 0;
  MatrixStrides a_strides_{0, 0}, b_strides_{0, 0};
  bool use_c_ = false;
  bool by_sgemm_ = false;  // a large float32 product without C: dnnl_sgemm
  bool relu_ = false;      // org.onnxtrain Gemm's relu=1
  BroadcastMatrix c_shape_;
  bool expand_c_ = false;
  bool primitive_ready_ = false;
  dnnl::memory::desc a_desc_, b_desc_, c_desc_, y_desc_;
  PrimitiveArgs args_;
  dnnl::matmul primitive_;
  std::vector<float> c_buffer_;  // beta * C (possibly expanded), refilled each Compute
};

// numpy.matmul: 1-D operands get a dimension prepended (A) or appended (B) that the output
// drops; leading batch dimensions broadcast.
class MatMulKernel final : public OpKernel {
 public:
  explicit MatMulKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    args_ = PrimitiveArgs();
    const Tensor& a = ctx.Input(0);
    const Tensor& b = ctx.Input(1);
    dtype_ = a.dtype();
    if (dtype_ != DType::kFloat32 && dtype_ != DType::kFloat64 && dtype_ != DType::kInt32 &&
        dtype_ != DType::kInt64 && dtype_ != DType::kBFloat16)
      Unsupported("data type " + DTypeName(dtype_));
    CheckBFloat16Operands(a, b, nullptr);
    if (b.dtype() != dtype_) Fail("inputs have different data types (" + a.Describe() + ", " + b.Describe() + ")");
    if (a.rank() == 0 || b.rank() == 0) Fail("operands must have rank >= 1, got " + a.Describe() + " and " + b.Describe());
    Shape a_shape = a.rank() == 1 ? Shape{1, a.dim(0)} : a.shape();
    Shape b_shape = b.rank() == 1 ? Shape{b.dim(0), 1} : b.shape();
    M_ = a_shape[a_shape.size() - 2];
    K_ = a_shape.back();
    N_ = b_shape.back();
    if (b_shape[b_shape.size() - 2] != K_)
      Fail("inner dimensions differ: " + ShapeString(a.shape()) + " x " + ShapeString(b.shape()));
    Shape a_batch(a_shape.begin(), a_shape.end() - 2), b_batch(b_shape.begin(), b_shape.end() - 2);
    Shape out_batch = BroadcastShapes(a_batch, b_batch, node_);
    Shape out_shape = out_batch;
    if (a.rank() > 1) out_shape.push_back(M_);
    if (b.rank() > 1) out_shape.push_back(N_);
    ctx.SetOutput(0, ResultType(dtype_), out_shape);
    bias_ = ctx.OptionalInput(2);
    if (bias_) {
      if (bias_->dtype() != DType::kFloat32 || bias_->rank() != 1 || (bias_->dim(0) != N_ && bias_->dim(0) != 1) ||
          b.rank() < 2)
        Fail("MatMulAdd's bias " + bias_->Describe() + " must be float32 [" + std::to_string(N_) + "] or [1]");
      if (dtype_ != DType::kFloat32 && dtype_ != DType::kBFloat16) Unsupported("MatMulAdd on " + DTypeName(dtype_));
    }

    primitive_ready_ = false;
    PlanBatchOffsets(a_batch, b_batch, out_batch);
    if ((dtype_ == DType::kFloat32 || dtype_ == DType::kBFloat16) && NumElements(out_shape) > 0 && K_ > 0)
      BuildPrimitive(a_batch, b_batch, out_batch);
    if ((dtype_ == DType::kBFloat16 || bias_) && !primitive_ready_ && NumElements(out_shape) > 0)
      Unsupported("bfloat16 operands or a bias with an empty inner dimension");
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& a = ctx.Input(0);
    const Tensor& b = ctx.Input(1);
    Tensor& y = ctx.Output(0);
    if (y.numel() == 0) return;
    if (primitive_ready_) {
      args_.Set(DNNL_ARG_SRC, a_desc_, a.raw());
      args_.Set(DNNL_ARG_WEIGHTS, b_desc_, b.raw());
      args_.Set(DNNL_ARG_DST, y_desc_, y.raw());
      if (const Tensor* bias = ctx.OptionalInput(2)) args_.Set(DNNL_ARG_BIAS, bias_desc_, bias->raw());
      primitive_.execute(Stream(), args_.map());
      Stream().wait();
      return;
    }
    switch (dtype_) {
      case DType::kFloat32: return ComputeByLoop<float>(a, b, y);
      case DType::kFloat64: return ComputeByLoop<double>(a, b, y);
      case DType::kInt32: return ComputeByLoop<int32_t>(a, b, y);
      default: return ComputeByLoop<int64_t>(a, b, y);
    }
  }

 private:
  // For each output matrix, the index of the A and B matrices it multiplies.
  void PlanBatchOffsets(const Shape& a_batch, const Shape& b_batch, const Shape& out_batch) {
    std::vector<int64_t> a_strides = BroadcastStrides(a_batch, out_batch);
    std::vector<int64_t> b_strides = BroadcastStrides(b_batch, out_batch);
    int64_t count = NumElements(out_batch);
    a_matrix_.assign(static_cast<size_t>(count), 0);
    b_matrix_.assign(static_cast<size_t>(count), 0);
    for (int64_t i = 0; i < count; ++i) {
      int64_t rest = i;
      for (size_t d = out_batch.size(); d-- > 0;) {
        int64_t index = rest % out_batch[d];
        rest /= out_batch[d];
        a_matrix_[static_cast<size_t>(i)] += index * a_strides[d];
        b_matrix_[static_cast<size_t>(i)] += index * b_strides[d];
      }
    }
  }

  void BuildPrimitive(const Shape& a_batch, const Shape& b_batch, const Shape& out_batch) {
    Shape a_dims, b_dims, y_dims;
    if (NumElements(b_batch) == 1) {
      // One B for every batch: fold A's batch dimensions into its rows.
      int64_t rows = NumElements(a_batch) * M_;
      a_dims = {rows, K_};
      b_dims = {K_, N_};
      y_dims = {rows, N_};
    } else {
      // oneDNN broadcasts batch dimensions of size 1 when both operands have the same rank.
      size_t rank = out_batch.size() + 2;
      if (rank > DNNL_MAX_NDIMS) Unsupported("rank " + std::to_string(rank) + " (oneDNN handles up to 12)");
      a_dims = PadLeft(a_batch, rank - 2);
      b_dims = PadLeft(b_batch, rank - 2);
      y_dims = out_batch;
      a_dims.insert(a_dims.end(), {M_, K_});
      b_dims.insert(b_dims.end(), {K_, N_});
      y_dims.insert(y_dims.end(), {M_, N_});
    }
    a_desc_ = PlainDesc(a_dims, dtype_);
    b_desc_ = PlainDesc(b_dims, dtype_);
    y_desc_ = PlainDesc(y_dims, DType::kFloat32);
    if (bias_) {
      Shape bias_dims(y_dims.size(), 1);
      bias_dims.back() = bias_->dim(0);
      bias_desc_ = PlainDesc(bias_dims, DType::kFloat32);
    }
    auto pd = bias_ ? dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_desc_, b_desc_, bias_desc_, y_desc_), Engine())
                    : dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_desc_, b_desc_, y_desc_), Engine());
    primitive_ = dnnl::matmul(pd);
    primitive_ready_ = true;
  }

  static Shape PadLeft(const Shape& s, size_t rank) {
    Shape out(rank - s.size(), 1);
    out.insert(out.end(), s.begin(), s.end());
    return out;
  }

  template <typename T> void ComputeByLoop(const Tensor& a, const Tensor& b, Tensor& y) const {
    const MatrixStrides as{K_, 1}, bs{N_, 1};
    for (size_t i = 0; i < a_matrix_.size(); ++i) {
      LoopMatMul(a.data<T>() + a_matrix_[i] * M_ * K_, as, b.data<T>() + b_matrix_[i] * K_ * N_, bs, M_, K_, N_,
                 y.data<T>() + static_cast<int64_t>(i) * M_ * N_);
    }
  }

  DType dtype_ = DType::kUndefined;
  int64_t M_ = 0, K_ = 0, N_ = 0;
  std::vector<int64_t> a_matrix_, b_matrix_;
  bool primitive_ready_ = false;
  dnnl::memory::desc a_desc_, b_desc_, y_desc_, bias_desc_;
  const Tensor* bias_ = nullptr;  // MatMulAdd's input 2, during Prepare
  PrimitiveArgs args_;
  dnnl::matmul primitive_;
};

OT_REGISTER_CPU_KERNEL("Gemm", 1, kLatestOpset, GemmKernel);
OT_REGISTER_CPU_KERNEL("MatMul", 1, kLatestOpset, MatMulKernel);
OT_REGISTER_KERNEL(kGradDomain, "Gemm", 1, kLatestOpset, DeviceType::kCPU, GemmKernel);
OT_REGISTER_KERNEL(kGradDomain, "MatMulAdd", 1, kLatestOpset, DeviceType::kCPU, MatMulKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
