// LSTM, GRU and RNN (ONNX, opset 7 on) and their gradients LSTMGrad, GRUGrad and RNNGrad
// (org.onnxtrain) on CUDA, mirroring runtime/cpu/recurrent/rnn.cc: the same Prepare checks
// (runtime/ops/shapes/rnn_shapes.h), the same inputs and outputs, the same per-element cell
// math (runtime/ops/math/rnn_cell_math.h, run by rnn_kernels.cu).
//
// Why not cuDNN's RNN API (cudnnRNNForward, cudnnRNNBackwardData_v8/BackwardWeights_v8): it
// cannot express what ONNX's recurrent ops allow and the CPU kernel supports (peepholes,
// clip, input_forget, activations other than its fixed ones, GRU with linear_before_reset
// 0, which is ONNX's default while cuDNN's GRU is linear_before_reset 1), so a general path
// of our own is needed anyway; and cuDNN would take the exactly-matching cases through a
// weight repacking (ONNX's iofc / zrh gate order into cuDNN's, W and R per layer) that no
// test can check without a GPU. One path keeps every case on code whose per-element math the
// CPU tests run: what remains CUDA-only is the launches, the indexing and the GEMM calls,
// which tests/cuda/cuda_recurrent_test.cc compares with the CPU runtime on a GPU host.
//
// The work is in cuBLAS GEMMs, as on the CPU: one projects every step's input at once
// (X [seq*batch, input] W^T), one per step applies R to the hidden state (GRU without
// linear_before_reset: a second one for (r * h_prev) Rh^T), and the backward's dX, dW and
// dR are one GEMM each per direction over the pre-activation gradients of every step; one
// element-wise kernel per step does the cell. The order of that work is RnnStepDriver's and
// each kernel's body is a function of runtime/ops/math/rnn_steps.h: the CPU test
// rnn_cell_math_test runs the same driver and bodies on a host backend against the CPU
// kernel, so what only a GPU can check is the launches and the cuBLAS calls (this file's
// Gemm: row-major through cuBLAS's column-major). The gradient ops recompute the forward
// (saving each step's pre-activations and states) and ignore the forward's Y input. dB and
// dP are column sums in double, a thread per column (deterministic; no atomics anywhere).
// sequence_lens, when given, is copied to the host (a synchronisation) to be checked as the
// CPU checks it.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "graph/op_domains.h"
#include "runtime/cuda/cuda_common.h"
#include "runtime/cuda/math_kernels.h"
#include "runtime/cuda/recurrent/rnn_kernels.h"
#include "runtime/ops/shapes/rnn_shapes.h"

namespace ot::cuda {
namespace {

// Row-major C = op(A) op(B) + beta C on cuBLAS (column-major: C^T = op(B)^T op(A)^T).
void Gemm(cublasHandle_t handle, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc, cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (beta == 0.f) OT_CUDA_CHECK(cudaMemset2DAsync(c, ldc * sizeof(float), 0, n * sizeof(float), m, stream));
    return;  // beta is 0 or 1 here
  }
  const float alpha = 1.f;
  const cublasComputeType_t compute = AllowTf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F_PEDANTIC;
  OT_CUBLAS_CHECK(cublasGemmEx(handle, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                               static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b, CUDA_R_32F,
                               static_cast<int>(ldb), a, CUDA_R_32F, static_cast<int>(lda), &beta, c, CUDA_R_32F,
                               static_cast<int>(ldc), compute, CUBLAS_GEMM_DEFAULT));
}

Tensor Floats(Shape shape, const Device& device) { return Tensor::Empty(DType::kFloat32, std::move(shape), device); }

float* Ptr(Tensor& t) { return t.numel() > 0 ? t.data<float>() : nullptr; }

const float* OptionalData(const KernelContext& ctx, int i) {
  const Tensor* t = ctx.OptionalInput(i);
  return t ? t->data<float>() : nullptr;
}

// The backend of RnnStepDriver (runtime/ops/math/rnn_steps.h) on one device: cuBLAS and the
// kernels of rnn_kernels.cu, on the compute stream.
struct CudaSteps {
  const DeviceContext& dc;

  void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
            int64_t ldb, float beta, float* c, int64_t ldc) {
    cuda::Gemm(dc.cublas, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc, dc.compute);
  }
  void Zero(float* p, int64_t count) {
    if (p && count > 0) OT_CUDA_CHECK(cudaMemsetAsync(p, 0, static_cast<size_t>(count) * sizeof(float), dc.compute));
  }
  void LoadState(const RnnStepGeometry& g, const float* src, float* dst) { rnn::LoadState(g, src, dst, dc.compute); }
  void StoreState(const RnnStepGeometry& g, const float* src, float* dst) { rnn::StoreState(g, src, dst, dc.compute); }
  void ForwardStep(const RnnStepGeometry& g, int64_t s, const int* lens, const float* xw, const float* hr,
                   const RnnStepParams& prm, float* h, float* c, float* pre_batch, const RnnSaved& sv, float* y,
                   float* rh) {
    rnn::ForwardStep(g, s, lens, xw, hr, prm, h, c, pre_batch, sv, y, rh, dc.compute);
  }
  void GruForwardFinish(const RnnStepGeometry& g, int64_t s, const int* lens, const float* xw, const float* hrh,
                        const RnnStepParams& prm, float* h, float* pre_batch, const RnnSaved& sv, float* y) {
    rnn::GruForwardFinish(g, s, lens, xw, hrh, prm, h, pre_batch, sv, y, dc.compute);
  }
  void BackwardStep(const RnnStepGeometry& g, int64_t s, const int* lens, const float* dy, const RnnSaved& sv,
                    const RnnStepParams& prm, const float* dh, float* dcell, float* dhn, float* dg, float* dax,
                    float* dah) {
    rnn::BackwardStep(g, s, lens, dy, sv, prm, dh, dcell, dhn, dg, dax, dah, dc.compute);
  }
  void GruResetBackward(const RnnStepGeometry& g, int64_t s, const int* lens, const float* drh, const RnnSaved& sv,
                        float* dhn, float* dg, float* dax) {
    rnn::GruResetBackward(g, s, lens, drh, sv, dhn, dg, dax, dc.compute);
  }
  void BiasGrad(int64_t rows, int64_t gh, const float* dax, const float* dah, float* db) {
    rnn::BiasGrad(rows, gh, dax, dah, db, dc.compute);
  }
  void PeepholeGrad(int64_t rows, int64_t hidden, const float* dax, const float* cprev, const float* cnew, float* dp) {
    rnn::PeepholeGrad(rows, hidden, dax, cprev, cnew, dp, dc.compute);
  }
};

// The device buffers of one node for fixed shapes, and its sequence lengths.
class RnnRunner {
 public:
  void Prepare(const Node& node, const RnnSpec& spec, const Device& device, bool for_grad) {
    node_ = &node;
    s_ = spec;
    for (int64_t v : {spec.seq * spec.batch, spec.gates * spec.hidden, spec.input})
      if (v > INT32_MAX) throw UnsupportedError(node.Describe() + ": a dimension above 2^31 on CUDA");
    const int64_t rows = s_.seq * s_.batch, GH = s_.gates * s_.hidden, B = s_.batch, H = s_.hidden;
    xw_ = Floats({rows, GH}, device);
    hr_ = Floats({B, GH}, device);
    pre_batch_ = Floats({B, GH}, device);
    h_ = Floats({B, H}, device);
    c_ = Floats({B, H}, device);
    rh_ = Floats({B, H}, device);
    hrh_ = Floats({B, H}, device);
    lens_host_.assign(static_cast<size_t>(B), static_cast<int32_t>(s_.seq));
    lens_ = Tensor::FromHost(HostTensor::FromVector(lens_host_, {B}), device);
    max_len_ = s_.seq;
    if (!for_grad) return;
    const bool lstm = s_.cell == RnnCell::kLSTM, gru = s_.cell == RnnCell::kGRU;
    pre_ = Floats({rows, GH}, device);
    hprev_ = Floats({rows, H}, device);
    if (lstm) {
      cprev_ = Floats({rows, H}, device);
      cnew_ = Floats({rows, H}, device);
    }
    if (gru) extra_ = Floats({rows, H}, device);
    dax_ = Floats({rows, GH}, device);
    if (gru && s_.linear_before_reset) dah_ = Floats({rows, GH}, device);
    dg_ = Floats({B, GH}, device);
    dh_ = Floats({B, H}, device);
    dc_ = Floats({B, H}, device);
    dhn_ = Floats({B, H}, device);
    drh_ = Floats({B, H}, device);
  }

  // sequence_lens (input 4), when given: copied to the host, checked as the CPU checks it,
  // and uploaded as int32.
  void ReadLens(const KernelContext& ctx, cudaStream_t stream) {
    const Tensor* l = s_.has_seq_lens ? ctx.OptionalInput(4) : nullptr;
    if (!l) return;
    const HostTensor host = l->ToHost();
    std::vector<int64_t> values(static_cast<size_t>(s_.batch));
    for (int64_t b = 0; b < s_.batch; ++b)
      values[static_cast<size_t>(b)] =
          host.dtype == DType::kInt32 ? host.Data<int32_t>()[b] : host.Data<int64_t>()[b];
    const std::vector<int64_t> lens = CheckSequenceLens(*node_, s_, values);
    max_len_ = 0;
    for (size_t b = 0; b < lens.size(); ++b) {
      lens_host_[b] = static_cast<int32_t>(lens[b]);
      max_len_ = std::max(max_len_, lens[b]);
    }
    OT_CUDA_CHECK(cudaMemcpyAsync(lens_.raw(), lens_host_.data(), lens_host_.size() * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, stream));
    OT_CUDA_CHECK(cudaStreamSynchronize(stream));  // lens_host_ may change on the next run
  }

  RnnStepBuffers Buffers() {
    RnnStepBuffers b;
    b.xw = Ptr(xw_);
    b.hr = Ptr(hr_);
    b.pre_batch = Ptr(pre_batch_);
    b.h = Ptr(h_);
    b.c = Ptr(c_);
    b.rh = Ptr(rh_);
    b.hrh = Ptr(hrh_);
    b.saved.pre = Ptr(pre_);
    b.saved.hprev = Ptr(hprev_);
    b.saved.cprev = Ptr(cprev_);
    b.saved.cnew = Ptr(cnew_);
    b.saved.extra = Ptr(extra_);
    b.dax = Ptr(dax_);
    b.dah = Ptr(dah_);
    b.dg = Ptr(dg_);
    b.dh = Ptr(dh_);
    b.dc = Ptr(dc_);
    b.dhn = Ptr(dhn_);
    b.drh = Ptr(drh_);
    b.lens = lens_.numel() > 0 ? lens_.data<int32_t>() : nullptr;
    b.max_len = max_len_;
    return b;
  }

  RnnStepInputs Read(const KernelContext& ctx) const {
    RnnStepInputs in;
    in.x = OptionalData(ctx, 0);
    in.w = OptionalData(ctx, 1);
    in.r = OptionalData(ctx, 2);
    in.b = OptionalData(ctx, 3);
    in.init_h = OptionalData(ctx, 5);
    if (s_.cell == RnnCell::kLSTM) {
      in.init_c = OptionalData(ctx, 6);
      in.p = OptionalData(ctx, 7);
    }
    return in;
  }

 private:
  const Node* node_ = nullptr;
  RnnSpec s_;
  int64_t max_len_ = 0;
  std::vector<int32_t> lens_host_;
  Tensor lens_, xw_, hr_, pre_batch_, h_, c_, rh_, hrh_;
  Tensor pre_, hprev_, cprev_, cnew_, extra_, dax_, dah_, dg_, dh_, dc_, dhn_, drh_;
};

// No unit to compute (every output is empty or zero); a sequence of length 0 runs as any
// other (Y_h is then initial_h, and initial_h's gradient dY_h).
bool Empty(const RnnSpec& s) { return s.batch == 0 || s.hidden == 0; }

template <RnnCell kCell>
class RnnKernel final : public OpKernel {
 public:
  explicit RnnKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    spec_ = PlanRnn(node_, kCell, opset_, ctx);
    ctx.SetOutput(0, DType::kFloat32, spec_.y);
    ctx.SetOutput(1, DType::kFloat32, spec_.y_h);
    if (kCell == RnnCell::kLSTM) ctx.SetOutput(2, DType::kFloat32, spec_.y_h);
    runner_.Prepare(node_, spec_, device_, false);
  }

  void Compute(KernelContext& ctx) override {
    const DeviceContext& dc = Context(device_.index);
    auto out = [&](int i) { return ctx.HasOutput(i) ? ctx.Output(i).data<float>() : nullptr; };
    float* y = out(0);
    float* y_h = out(1);
    float* y_c = kCell == RnnCell::kLSTM ? out(2) : nullptr;
    if (y && ctx.Output(0).numel() > 0) OT_CUDA_CHECK(cudaMemsetAsync(y, 0, ctx.Output(0).nbytes(), dc.compute));
    if (Empty(spec_)) {
      for (int i = 1; i < (kCell == RnnCell::kLSTM ? 3 : 2); ++i)
        if (ctx.HasOutput(i) && ctx.Output(i).numel() > 0)
          OT_CUDA_CHECK(cudaMemsetAsync(ctx.Output(i).raw(), 0, ctx.Output(i).nbytes(), dc.compute));
      return;
    }
    runner_.ReadLens(ctx, dc.compute);
    const RnnStepInputs in = runner_.Read(ctx);
    CudaSteps steps{dc};
    for (int64_t d = 0; d < spec_.dirs; ++d)
      RnnStepDriver<CudaSteps>(steps, RnnDirectionGeometry(spec_, d), runner_.Buffers()).Forward(in, y, y_h, y_c, false);
    math::CheckLaunch(node_.op_type.c_str());
  }

 private:
  RnnSpec spec_;
  RnnRunner runner_;
};

template <RnnCell kCell>
class RnnGradKernel final : public OpKernel {
 public:
  explicit RnnGradKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    spec_ = PrepareRnnGradOutputs(node_, kCell, opset_, ctx);
    runner_.Prepare(node_, spec_, device_, true);
  }

  void Compute(KernelContext& ctx) override {
    const DeviceContext& dc = Context(device_.index);
    const int n = RnnNumForwardInputs(kCell);
    const int n_outputs = kCell == RnnCell::kLSTM ? 7 : 5;
    // Every output starts at zero: the GEMMs below overwrite them where there is work.
    for (int i = 0; i < n_outputs; ++i)
      if (ctx.HasOutput(i) && ctx.Output(i).numel() > 0)
        OT_CUDA_CHECK(cudaMemsetAsync(ctx.Output(i).raw(), 0, ctx.Output(i).nbytes(), dc.compute));
    if (Empty(spec_)) return;
    runner_.ReadLens(ctx, dc.compute);
    const RnnStepInputs in = runner_.Read(ctx);
    auto out = [&](int i) { return ctx.HasOutput(i) ? ctx.Output(i).data<float>() : nullptr; };
    RnnStepGrads g;
    g.dx = out(0);
    g.dw = out(1);
    g.dr = out(2);
    g.db = out(3);
    g.dinit_h = out(4);
    if (kCell == RnnCell::kLSTM) {
      g.dinit_c = out(5);
      g.dp = out(6);
    }
    const float* dy = OptionalData(ctx, n);
    const float* dy_h = OptionalData(ctx, n + 1);
    const float* dy_c = kCell == RnnCell::kLSTM ? OptionalData(ctx, n + 2) : nullptr;
    CudaSteps steps{dc};
    for (int64_t d = 0; d < spec_.dirs; ++d) {
      RnnStepDriver<CudaSteps> driver(steps, RnnDirectionGeometry(spec_, d), runner_.Buffers());
      driver.Forward(in, nullptr, nullptr, nullptr, true);
      driver.Backward(in, dy, dy_h, dy_c, g);
    }
    math::CheckLaunch(node_.op_type.c_str());
  }

 private:
  RnnSpec spec_;
  RnnRunner runner_;
};

OT_REGISTER_CUDA_KERNEL("LSTM", 7, kLatestOpset, RnnKernel<RnnCell::kLSTM>);
OT_REGISTER_CUDA_KERNEL("GRU", 7, kLatestOpset, RnnKernel<RnnCell::kGRU>);
OT_REGISTER_CUDA_KERNEL("RNN", 7, kLatestOpset, RnnKernel<RnnCell::kRNN>);
OT_REGISTER_KERNEL(kGradDomain, "LSTMGrad", 1, kLatestOpset, DeviceType::kCUDA, RnnGradKernel<RnnCell::kLSTM>);
OT_REGISTER_KERNEL(kGradDomain, "GRUGrad", 1, kLatestOpset, DeviceType::kCUDA, RnnGradKernel<RnnCell::kGRU>);
OT_REGISTER_KERNEL(kGradDomain, "RNNGrad", 1, kLatestOpset, DeviceType::kCUDA, RnnGradKernel<RnnCell::kRNN>);

}  // namespace
}  // namespace ot::cuda
