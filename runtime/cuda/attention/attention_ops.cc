// CUDA kernels of ONNX Attention (opset 23, 24), org.onnxtrain Attention (graph/passes/fusion.h's
// fused form, with the row logsumexp as output 4) and org.onnxtrain AttentionGrad, mirroring
// the CPU kernels of runtime/cpu/matmul/attention.cc: the same geometry and checks
// (runtime/ops/shapes/attention_shapes.h), the products on cuBLAS (strided-batched over the batch,
// one call per query head), the bias, softmax and softmax gradient in attention_kernels.cu.
// The probabilities are materialised ([batch, q_heads, q_len, total_len], made once per plan);
// AttentionGrad recomputes them from Q and K and ignores the forward's Y and logsumexp.
// Not on CUDA yet: past_key/past_value caches, the present outputs, qk_matmul_output.
#include <string>

#include "graph/op_domains.h"
#include "runtime/cuda/attention/attention_kernels.h"
#include "runtime/cuda/tensor/copy_kernels.h"
#include "runtime/cuda/cuda_common.h"
#include "runtime/cuda/math_kernels.h"
#include "runtime/ops/shapes/attention_shapes.h"
#include "runtime/ops/checks/kernel_util.h"

namespace ot::cuda {
namespace {

// A row-major [rows x cols] matrix per batch entry: base pointer, leading dimension, and the
// elements between batch entries.
struct Mat {
  const float* p;
  int64_t ld, stride;
};

// c[b] = alpha op(a[b]) op(b[b]) + beta c[b] for b < batch, row-major, on cuBLAS (column-major:
// c^T = op(b)^T op(a)^T with the operands swapped).
void BatchedGemm(cublasHandle_t handle, cublasComputeType_t compute, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                 float alpha, Mat a, Mat b, float beta, float* c, int64_t ldc, int64_t stride_c, int64_t batch) {
  if (m == 0 || n == 0 || batch == 0) return;
  OT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                             static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha,
                                             b.p, CUDA_R_32F, static_cast<int>(b.ld), b.stride, a.p, CUDA_R_32F,
                                             static_cast<int>(a.ld), a.stride, &beta, c, CUDA_R_32F,
                                             static_cast<int>(ldc), stride_c, static_cast<int>(batch), compute,
                                             CUBLAS_GEMM_DEFAULT));
}

// What both kernels share: the plan's geometry, the cuBLAS math, the bias parameters.
class AttentionBase : public OpKernel {
 public:
  using OpKernel::OpKernel;

 protected:
  void Check(const KernelContext& ctx) {
    for (int64_t v : {g_.q_len, g_.total_len, g_.head_size, g_.v_head_size, g_.batch})
      if (v > INT32_MAX) Unsupported("a dimension above 2^31 on CUDA");
    if (g_.total_len == 0 || g_.head_size == 0) Unsupported("attention over no keys or empty heads on CUDA");
    (void)ctx;
    compute_ = AllowTf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F_PEDANTIC;
  }
  attention::ScoreBias Bias(const KernelContext& ctx, int mask_input, int nonpad_input) const {
    attention::ScoreBias b;
    b.batch = g_.batch;
    b.q_heads = g_.q_heads;
    b.q_len = g_.q_len;
    b.total_len = g_.total_len;
    b.past_len = g_.past_len;
    if (const Tensor* m = g_.has_mask ? ctx.OptionalInput(mask_input) : nullptr) {
      b.mask = m->raw();
      b.mask_bool = g_.mask_bool;
      b.mask_len = g_.mask_len;
      for (int d = 0; d < 4; ++d) b.mask_strides[d] = g_.mask_strides[static_cast<size_t>(d)];
    }
    b.causal = g_.causal;
    if (const Tensor* n = g_.has_nonpad ? ctx.OptionalInput(nonpad_input) : nullptr) b.nonpad = n->data<int64_t>();
    b.softcap = g_.softcap;
    return b;
  }
  // S = scale Q.K^T for every (batch, query head) into `s` [batch, q_heads, q_len, total_len].
  void Scores(cublasHandle_t handle, const float* q, const float* k, float* s) const {
    const int64_t block = g_.q_len * g_.total_len;
    for (int64_t h = 0; h < g_.q_heads; ++h) {
      const int64_t kvh = h / g_.GroupSize();
      BatchedGemm(handle, compute_, false, true, g_.q_len, g_.total_len, g_.head_size, g_.scale,
                  {q + h * g_.q.head, g_.q.pos, g_.q.batch}, {k + kvh * g_.k.head, g_.k.pos, g_.k.batch}, 0.f,
                  s + h * block, g_.total_len, g_.q_heads * block, g_.batch);
    }
  }

  AttentionGeometry g_;
  cublasComputeType_t compute_ = CUBLAS_COMPUTE_32F_PEDANTIC;
};

// Attention(Q, K, V[, attn_mask][, past_key, past_value][, nonpad_kv_seqlen]) -> Y (and, for
// org.onnxtrain Attention, the row logsumexp as output 4).
class AttentionKernel final : public AttentionBase {
 public:
  using AttentionBase::AttentionBase;
  void Prepare(KernelContext& ctx) override {
    g_ = PlanAttention(node_, ctx.Input(0), ctx.Input(1), ctx.Input(2), ctx.OptionalInput(3), ctx.OptionalInput(4),
                       ctx.OptionalInput(5), ctx.OptionalInput(6));
    if (ctx.OptionalInput(4) || ctx.OptionalInput(5)) Unsupported("past_key/past_value caches on CUDA");
    if (ctx.HasOutput(1) || ctx.HasOutput(2) || ctx.HasOutput(3))
      Unsupported("the present_key/present_value and qk_matmul_output outputs on CUDA");
    Check(ctx);
    ctx.SetOutput(0, DType::kFloat32, g_.y_shape);
    ctx.SetOutput(4, DType::kFloat32, {g_.batch, g_.q_heads, g_.q_len});
    ctx.SetOutput(5, DType::kFloat32, {0});  // the probabilities: kept by the CPU kernel only (AttentionGrad's input 8)
    probs_ = Tensor::Empty(DType::kFloat32, {g_.batch, g_.q_heads, g_.q_len, g_.total_len}, device_);
  }
  void Compute(KernelContext& ctx) override {
    const DeviceContext& dc = Context(device_.index);
    float* p = probs_.data<float>();
    Scores(dc.cublas, ctx.Input(0).data<float>(), ctx.Input(1).data<float>(), p);
    attention::AddScoreBias(Bias(ctx, 3, 6), p, nullptr, dc.compute);
    attention::SoftmaxRows(p, g_.batch * g_.q_heads * g_.q_len, g_.total_len,
                           ctx.HasOutput(4) ? ctx.Output(4).data<float>() : nullptr, dc.compute);
    math::CheckLaunch("Attention");
    const float* v = ctx.Input(2).data<float>();
    float* y = ctx.Output(0).data<float>();
    const int64_t block = g_.q_len * g_.total_len;
    for (int64_t h = 0; h < g_.q_heads; ++h) {
      const int64_t kvh = h / g_.GroupSize();
      BatchedGemm(dc.cublas, compute_, false, false, g_.q_len, g_.v_head_size, g_.total_len, 1.f,
                  {p + h * block, g_.total_len, g_.q_heads * block}, {v + kvh * g_.v.head, g_.v.pos, g_.v.batch}, 0.f,
                  y + h * g_.y.head, g_.y.pos, g_.y.batch, g_.batch);
    }
  }

 private:
  Tensor probs_;
};

// AttentionGrad(dY, Q, K, V[, attn_mask][, nonpad_kv_seqlen][, Y, logsumexp[, probs]]) -> dQ, dK, dV, dScores
// (probs, the CPU forward's kept probabilities, is empty here: this kernel recomputes them).
class AttentionGradKernel final : public AttentionBase {
 public:
  using AttentionBase::AttentionBase;
  void Prepare(KernelContext& ctx) override {
    g_ = PlanAttention(node_, ctx.Input(1), ctx.Input(2), ctx.Input(3), ctx.OptionalInput(4), nullptr, nullptr,
                       ctx.OptionalInput(5));
    Check(ctx);
    const Tensor& dy = ctx.Input(0);
    if (dy.dtype() != DType::kFloat32 || dy.shape() != g_.y_shape)
      Fail("dY " + dy.Describe() + " must be float " + ShapeString(g_.y_shape) + ", the shape of Attention's Y");
    for (int i = 0; i < 3; ++i) {
      ctx.SetOutput(i, DType::kFloat32, ctx.Input(i + 1).shape());
      scratch_[i] = ctx.HasOutput(i) ? Tensor() : Tensor::Empty(DType::kFloat32, ctx.Input(i + 1).shape(), device_);
    }
    ctx.SetOutput(3, DType::kFloat32, {g_.batch, g_.q_heads, g_.q_len, g_.has_mask ? g_.mask_len : g_.total_len});
    const Shape scores = {g_.batch, g_.q_heads, g_.q_len, g_.total_len};
    probs_ = Tensor::Empty(DType::kFloat32, scores, device_);
    dprobs_ = Tensor::Empty(DType::kFloat32, scores, device_);
    capped_ = g_.softcap > 0 ? Tensor::Empty(DType::kFloat32, scores, device_) : Tensor();
  }
  void Compute(KernelContext& ctx) override {
    const DeviceContext& dc = Context(device_.index);
    const float* dy = ctx.Input(0).data<float>();
    const float* q = ctx.Input(1).data<float>();
    const float* k = ctx.Input(2).data<float>();
    const float* v = ctx.Input(3).data<float>();
    float* out[3];
    for (int i = 0; i < 3; ++i) out[i] = ctx.HasOutput(i) ? ctx.Output(i).data<float>() : scratch_[i].data<float>();
    float* p = probs_.data<float>();
    float* dp = dprobs_.data<float>();
    float* capped = capped_.defined() ? capped_.data<float>() : nullptr;
    const int64_t rows = g_.batch * g_.q_heads * g_.q_len, block = g_.q_len * g_.total_len;
    Scores(dc.cublas, q, k, p);
    attention::AddScoreBias(Bias(ctx, 4, 5), p, capped, dc.compute);
    attention::SoftmaxRows(p, rows, g_.total_len, nullptr, dc.compute);
    for (int64_t h = 0; h < g_.q_heads; ++h) {  // dP = dY.V^T
      const int64_t kvh = h / g_.GroupSize();
      BatchedGemm(dc.cublas, compute_, false, true, g_.q_len, g_.total_len, g_.v_head_size, 1.f,
                  {dy + h * g_.y.head, g_.y.pos, g_.y.batch}, {v + kvh * g_.v.head, g_.v.pos, g_.v.batch}, 0.f,
                  dp + h * block, g_.total_len, g_.q_heads * block, g_.batch);
    }
    attention::SoftmaxGradRows(p, dp, capped, g_.softcap, rows, g_.total_len, dc.compute);
    math::CheckLaunch("AttentionGrad");
    if (ctx.HasOutput(3)) {  // dScores: the first mask_len columns of dS
      const int64_t cols = g_.has_mask ? g_.mask_len : g_.total_len;
      StridedCopy(dp, {g_.total_len, 1}, 0, ctx.Output(3).raw(), {rows, cols}, sizeof(float), dc.compute);
    }
    for (int64_t h = 0; h < g_.q_heads; ++h) {
      const int64_t kvh = h / g_.GroupSize();
      const float beta = h % g_.GroupSize() == 0 ? 0.f : 1.f;  // dK, dV sum over the group's query heads
      const Mat ds = {dp + h * block, g_.total_len, g_.q_heads * block};
      const Mat pm = {p + h * block, g_.total_len, g_.q_heads * block};
      BatchedGemm(dc.cublas, compute_, false, false, g_.q_len, g_.head_size, g_.total_len, g_.scale, ds,
                  {k + kvh * g_.k.head, g_.k.pos, g_.k.batch}, 0.f, out[0] + h * g_.q.head, g_.q.pos, g_.q.batch,
                  g_.batch);
      BatchedGemm(dc.cublas, compute_, true, false, g_.total_len, g_.head_size, g_.q_len, g_.scale, ds,
                  {q + h * g_.q.head, g_.q.pos, g_.q.batch}, beta, out[1] + kvh * g_.k.head, g_.k.pos, g_.k.batch,
                  g_.batch);
      BatchedGemm(dc.cublas, compute_, true, false, g_.total_len, g_.v_head_size, g_.q_len, 1.f, pm,
                  {dy + h * g_.y.head, g_.y.pos, g_.y.batch}, beta, out[2] + kvh * g_.v.head, g_.v.pos, g_.v.batch,
                  g_.batch);
    }
  }

 private:
  Tensor scratch_[3], probs_, dprobs_, capped_;
};

OT_REGISTER_CUDA_KERNEL("Attention", 23, kLatestOpset, AttentionKernel);
OT_REGISTER_KERNEL(kGradDomain, "Attention", 1, kLatestOpset, DeviceType::kCUDA, AttentionKernel);
OT_REGISTER_KERNEL(kGradDomain, "AttentionGrad", 1, kLatestOpset, DeviceType::kCUDA, AttentionGradKernel);

}  // namespace
}  // namespace ot::cuda
