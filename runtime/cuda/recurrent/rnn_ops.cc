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
// element-wise kernel per step does the cell. The gradient ops recompute the forward (saving
// each step's pre-activations and states) and ignore the forward's Y input. dB and dP are
// column sums in double, a thread per column (deterministic; no atomics anywhere).
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

rnn::Cell ToCell(RnnCell c) {
  return c == RnnCell::kLSTM ? rnn::Cell::kLSTM : c == RnnCell::kGRU ? rnn::Cell::kGRU : rnn::Cell::kRNN;
}

Tensor Floats(Shape shape, const Device& device) { return Tensor::Empty(DType::kFloat32, std::move(shape), device); }

void Zero(Tensor& t, cudaStream_t stream) {
  if (t.numel() > 0) OT_CUDA_CHECK(cudaMemsetAsync(t.raw(), 0, t.nbytes(), stream));
}

const float* OptionalData(const KernelContext& ctx, int i) {
  const Tensor* t = ctx.OptionalInput(i);
  return t ? t->data<float>() : nullptr;
}

// The cell loop of one node on the device, for fixed shapes.
class RnnRunner {
 public:
  void Prepare(const Node& node, const RnnSpec& spec, const Device& device, bool for_grad) {
    node_ = &node;
    s_ = spec;
    device_ = device;
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
    lens_host_.assign(static_cast<size_t>(B), static_cast<int>(s_.seq));
    lens_ = Tensor::FromHost(HostTensor::FromVector(lens_host_, {B}), device);
    max_len_ = s_.seq;
    if (!for_grad) return;
    pre_ = Floats({rows, GH}, device);
    hprev_ = Floats({rows, H}, device);
    const bool lstm = s_.cell == RnnCell::kLSTM, gru = s_.cell == RnnCell::kGRU;
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

  // sequence_lens (input 4), when given: copied to the host, checked, and uploaded as int32.
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
      lens_host_[b] = static_cast<int>(lens[b]);
      max_len_ = std::max(max_len_, lens[b]);
    }
    OT_CUDA_CHECK(cudaMemcpyAsync(lens_.raw(), lens_host_.data(), lens_host_.size() * sizeof(int),
                                  cudaMemcpyHostToDevice, stream));
    OT_CUDA_CHECK(cudaStreamSynchronize(stream));  // lens_host_ may change on the next run
  }

  rnn::Geometry Geometry(int64_t d) const {
    rnn::Geometry g;
    g.cell = ToCell(s_.cell);
    g.seq = s_.seq;
    g.batch = s_.batch;
    g.hidden = s_.hidden;
    g.gates = s_.gates;
    g.dirs = s_.dirs;
    g.d = d;
    g.layout = s_.layout;
    g.backward = s_.Backward(d);
    g.linear_before_reset = s_.linear_before_reset;
    const float clip = s_.has_clip ? s_.clip : INFINITY;
    g.clip = clip;
    auto act = [&](int k) { return s_.acts[static_cast<size_t>(d * s_.acts_per_dir + k)]; };
    if (s_.cell == RnnCell::kLSTM) {
      g.lstm.f = act(0);
      g.lstm.g = act(1);
      g.lstm.h = act(2);
      g.lstm.clip = clip;
      g.lstm.input_forget = s_.input_forget;
    } else if (s_.cell == RnnCell::kGRU) {
      g.gru.f = act(0);
      g.gru.g = act(1);
      g.gru.clip = clip;
    } else {
      g.rnn_f = act(0);
    }
    return g;
  }

  struct Inputs {
    const float *x = nullptr, *w = nullptr, *r = nullptr, *b = nullptr, *init_h = nullptr, *init_c = nullptr,
                *p = nullptr;
  };
  Inputs Read(const KernelContext& ctx) const {
    Inputs in;
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

  rnn::Params DirParams(const Inputs& in, int64_t d) const {
    const int64_t GH = s_.gates * s_.hidden;
    rnn::Params prm;
    if (in.b) {
      prm.wb = in.b + d * 2 * GH;
      prm.rb = prm.wb + GH;
    }
    if (in.p) prm.p = in.p + d * 3 * s_.hidden;
    return prm;
  }

  // One direction's forward. y, y_h, y_c may be null; `save` keeps what the backward needs.
  void ForwardDirection(const DeviceContext& dc, const Inputs& in, int64_t d, float* y, float* y_h, float* y_c,
                        bool save) {
    const cudaStream_t st = dc.compute;
    const rnn::Geometry g = Geometry(d);
    const rnn::Params prm = DirParams(in, d);
    const int64_t H = s_.hidden, GH = s_.gates * H, B = s_.batch, rows = s_.seq * B, I = s_.input;
    const bool gru = s_.cell == RnnCell::kGRU, lbr = s_.linear_before_reset;
    const float* r = in.r + d * GH * H;
    rnn::Saved sv;
    if (save) {
      for (Tensor* t : {&pre_, &hprev_, &cprev_, &cnew_, &extra_}) Zero(*t, st);
      sv = SavedPointers();
    }
    rnn::LoadState(g, in.init_h, h_.data<float>(), st);
    if (s_.cell == RnnCell::kLSTM) rnn::LoadState(g, in.init_c, c_.data<float>(), st);
    Gemm(dc.cublas, false, true, rows, GH, I, in.x, I, in.w + d * GH * I, I, 0.f, xw_.data<float>(), GH, st);
    const int64_t n_rec = gru && !lbr ? 2 * H : GH;  // gates whose recurrent GEMM uses h_prev
    const int* lens = lens_.data<int>();
    for (int64_t s = 0; s < max_len_; ++s) {
      Gemm(dc.cublas, false, true, B, n_rec, H, h_.data<float>(), H, r, H, 0.f, hr_.data<float>(), GH, st);
      rnn::ForwardStep(g, s, lens, xw_.data<float>(), hr_.data<float>(), prm, h_.data<float>(), c_.data<float>(),
                       pre_batch_.data<float>(), sv, y, rh_.data<float>(), st);
      if (gru && !lbr) {
        Gemm(dc.cublas, false, true, B, H, H, rh_.data<float>(), H, r + 2 * H * H, H, 0.f, hrh_.data<float>(), H, st);
        rnn::GruForwardFinish(g, s, lens, xw_.data<float>(), hrh_.data<float>(), prm, h_.data<float>(),
                              pre_batch_.data<float>(), sv, y, st);
      }
    }
    if (y_h) rnn::StoreState(g, h_.data<float>(), y_h, st);
    if (y_c) rnn::StoreState(g, c_.data<float>(), y_c, st);
  }

  struct Grads {
    float *dx = nullptr, *dw = nullptr, *dr = nullptr, *db = nullptr, *dinit_h = nullptr, *dinit_c = nullptr,
          *dp = nullptr;
  };

  // One direction's backward, after ForwardDirection(save) of the same direction.
  void BackwardDirection(const DeviceContext& dc, const Inputs& in, int64_t d, const float* dy, const float* dy_h,
                         const float* dy_c, const Grads& gr) {
    const cudaStream_t st = dc.compute;
    const rnn::Geometry g = Geometry(d);
    const rnn::Params prm = DirParams(in, d);
    const int64_t H = s_.hidden, GH = s_.gates * H, B = s_.batch, rows = s_.seq * B, I = s_.input;
    const bool lstm = s_.cell == RnnCell::kLSTM, gru = s_.cell == RnnCell::kGRU, lbr = s_.linear_before_reset;
    const float* r = in.r + d * GH * H;
    const rnn::Saved sv = SavedPointers();
    Zero(dax_, st);
    Zero(dah_, st);
    float* dah = gru && lbr ? dah_.data<float>() : dax_.data<float>();
    float* dh = dh_.data<float>();
    float* dhn = dhn_.data<float>();
    rnn::LoadState(g, dy_h, dh, st);
    if (lstm) rnn::LoadState(g, dy_c, dc_.data<float>(), st);
    const int64_t n_rec = gru && !lbr ? 2 * H : GH;
    const int* lens = lens_.data<int>();
    for (int64_t s = max_len_ - 1; s >= 0; --s) {
      rnn::BackwardStep(g, s, lens, dy, sv, prm, dh, dc_.data<float>(), dhn, dg_.data<float>(), dax_.data<float>(),
                        dah_.data<float>(), st);
      if (gru && !lbr) {
        Gemm(dc.cublas, false, false, B, H, H, dg_.data<float>() + 2 * H, GH, r + 2 * H * H, H, 0.f,
             drh_.data<float>(), H, st);
        rnn::GruResetBackward(g, s, lens, drh_.data<float>(), sv, dhn, dg_.data<float>(), dax_.data<float>(), st);
      }
      Gemm(dc.cublas, false, false, B, H, n_rec, dg_.data<float>(), GH, r, H, 1.f, dhn, H, st);
      std::swap(dh, dhn);
    }
    if (gr.dinit_h) rnn::StoreState(g, dh, gr.dinit_h, st);
    if (gr.dinit_c) rnn::StoreState(g, dc_.data<float>(), gr.dinit_c, st);
    const float* dax = dax_.data<float>();
    if (gr.dx) Gemm(dc.cublas, false, false, rows, I, GH, dax, GH, in.w + d * GH * I, I, d == 0 ? 0.f : 1.f, gr.dx, I, st);
    if (gr.dw) Gemm(dc.cublas, true, false, GH, I, rows, dax, GH, in.x, I, 0.f, gr.dw + d * GH * I, I, st);
    if (gr.dr) {
      float* drp = gr.dr + d * GH * H;
      if (gru && !lbr) {
        Gemm(dc.cublas, true, false, 2 * H, H, rows, dah, GH, hprev_.data<float>(), H, 0.f, drp, H, st);
        Gemm(dc.cublas, true, false, H, H, rows, dah + 2 * H, GH, extra_.data<float>(), H, 0.f, drp + 2 * H * H, H,
             st);
      } else {
        Gemm(dc.cublas, true, false, GH, H, rows, dah, GH, hprev_.data<float>(), H, 0.f, drp, H, st);
      }
    }
    if (gr.db) rnn::BiasGrad(rows, GH, dax, dah, gr.db + d * 2 * GH, st);
    if (gr.dp) rnn::PeepholeGrad(rows, H, dax, cprev_.data<float>(), cnew_.data<float>(), gr.dp + d * 3 * H, st);
  }

  const RnnSpec& spec() const { return s_; }

 private:
  rnn::Saved SavedPointers() {
    rnn::Saved sv;
    auto p = [](Tensor& t) { return t.numel() > 0 ? t.data<float>() : nullptr; };
    sv.pre = p(pre_);
    sv.hprev = p(hprev_);
    sv.cprev = p(cprev_);
    sv.cnew = p(cnew_);
    sv.extra = p(extra_);
    return sv;
  }

  const Node* node_ = nullptr;
  RnnSpec s_;
  Device device_;
  int64_t max_len_ = 0;
  std::vector<int> lens_host_;
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
    const RnnRunner::Inputs in = runner_.Read(ctx);
    for (int64_t d = 0; d < spec_.dirs; ++d) runner_.ForwardDirection(dc, in, d, y, y_h, y_c, false);
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
    spec_ = PlanRnn(node_, kCell, opset_, ctx);
    const int n = RnnNumForwardInputs(kCell);
    const int n_out = kCell == RnnCell::kLSTM ? 3 : 2;
    for (int i = 0; i <= n_out; ++i) {  // dY, dY_h[, dY_c], then the forward's Y
      const Tensor* g = ctx.OptionalInput(n + i);
      const Shape& want = i == 0 || i == n_out ? spec_.y : spec_.y_h;
      if (g && (g->dtype() != DType::kFloat32 || g->shape() != want))
        Fail("input " + std::to_string(n + i) + " " + g->Describe() + " is not float" + ShapeString(want));
    }
    for (int i = 0; i < 3; ++i) ctx.SetOutput(i, DType::kFloat32, ctx.Input(i).shape());
    ctx.SetOutput(3, DType::kFloat32, {spec_.dirs, 2 * spec_.gates * spec_.hidden});
    ctx.SetOutput(4, DType::kFloat32, spec_.y_h);
    if (kCell == RnnCell::kLSTM) {
      ctx.SetOutput(5, DType::kFloat32, spec_.y_h);
      ctx.SetOutput(6, DType::kFloat32, {spec_.dirs, 3 * spec_.hidden});
    }
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
    const RnnRunner::Inputs in = runner_.Read(ctx);
    auto out = [&](int i) { return ctx.HasOutput(i) ? ctx.Output(i).data<float>() : nullptr; };
    RnnRunner::Grads g;
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
    for (int64_t d = 0; d < spec_.dirs; ++d) {
      runner_.ForwardDirection(dc, in, d, nullptr, nullptr, nullptr, true);
      runner_.BackwardDirection(dc, in, d, dy, dy_h, dy_c, g);
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
