// LSTM, GRU and RNN (ONNX, opset 7 on) and their gradients LSTMGrad, GRUGrad and RNNGrad
// (org.onnxtrain) on the CPU: a cell loop over dnnl_sgemm.
//
// Why not oneDNN's RNN primitives: they have no per-entry sequence_lens, no clip, and
// none of ONNX's other activations (vanilla_rnn: relu, tanh, sigmoid only), which ONNX's
// backend cases and ONNX models use; and they need ONNX's gates reordered (iofc -> ifco,
// zrh -> uro) into their own weight layout, a copy per call. (Not measured against them.)
// The work is in GEMMs: one GEMM projects every step's input at once (X [seq*batch,
// input] times W^T), one GEMM per step applies R to the hidden state, and the backward
// gathers every step's gate gradients so that dX, dW and dR are one GEMM each per direction.
//
//   LSTM(X, W, R[, B, sequence_lens, initial_h, initial_c, P]) -> Y, Y_h, Y_c
//   GRU / RNN(X, W, R[, B, sequence_lens, initial_h]) -> Y, Y_h
//   LSTMGrad(the 8 LSTM inputs, dY, dY_h, dY_c[, Y]) -> dX, dW, dR, dB, dinitial_h, dinitial_c, dP
//   GRUGrad / RNNGrad(the 6 inputs, dY, dY_h[, Y]) -> dX, dW, dR, dB, dinitial_h
// Absent gradients of outputs are zeros. The gradient ops recompute the forward's gate
// pre-activations and states (with the forward's Y given, every step's h_prev is known and
// the recurrent GEMMs run over all steps at once; only LSTM's cell state is walked step by
// step, element-wise), then walk the steps backwards.
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "graph/op_domains.h"
#include "runtime/cpu/recurrent/rnn_activations.h"
#include "runtime/core/kernel_registry.h"
#include "runtime/ops/math/rnn_cell_math.h"
#include "runtime/ops/shapes/rnn_shapes.h"

namespace ot {
namespace cpu {
namespace {

// Row-major C = alpha * op(A) * op(B) + beta * C.
void Gemm(char ta, char tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
          int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.f ? 0.f : beta * c[i * ldc + j];
    return;
  }
  if (dnnl_sgemm(ta, tb, m, n, k, 1.f, a, lda, b, ldb, beta, c, ldc) != dnnl_success)
    throw Error("dnnl_sgemm failed in a recurrent kernel");
}

constexpr float kNoClip = std::numeric_limits<float>::infinity();

// The forward inputs of one node, as raw pointers (nullptr when absent).
struct RnnInputs {
  const float *x = nullptr, *w = nullptr, *r = nullptr, *b = nullptr, *init_h = nullptr, *init_c = nullptr,
              *p = nullptr;
};

RnnInputs ReadInputs(const KernelContext& ctx, RnnCell cell) {
  auto f = [&](int i) { return ctx.OptionalInput(i) ? ctx.OptionalInput(i)->data<float>() : nullptr; };
  RnnInputs in;
  in.x = f(0);
  in.w = f(1);
  in.r = f(2);
  in.b = f(3);
  in.init_h = f(5);
  if (cell == RnnCell::kLSTM) {
    in.init_c = f(6);
    in.p = f(7);
  }
  return in;
}

// What the backward needs of one direction's forward, per row of X (seq*batch rows; rows
// a batch entry's sequence does not reach stay zero).
struct RnnSaved {
  std::vector<float> pre;          // [rows, gates*hidden] gate pre-activations, before clip
  std::vector<float> act;          // [rows, gates*hidden] the gates' values (f or g of pre)
  std::vector<float> hc;           // LSTM: [rows, hidden] h(c_t)
  std::vector<float> hprev;        // [rows, hidden] state entering the step
  std::vector<float> cprev, cnew;  // LSTM: cell state entering and leaving the step
  std::vector<float> extra;        // GRU: h_prev*Rh^T + Rbh (linear_before_reset) or r*h_prev
};

// The cell loop of one node for fixed shapes: Forward (optionally saving for the
// backward) and Backward.
class RnnRunner {
 public:
  void Plan(const RnnSpec& spec, std::vector<int64_t> lens) {
    s_ = spec;
    lens_ = std::move(lens);
    max_len_ = 0;
    for (int64_t l : lens_) max_len_ = std::max(max_len_, l);
    const int64_t rows = s_.seq * s_.batch, gh = s_.gates * s_.hidden, bh = s_.batch * s_.hidden;
    xw_.resize(static_cast<size_t>(rows * gh));
    hr_.resize(static_cast<size_t>(s_.batch * gh));
    pre_.resize(static_cast<size_t>(s_.batch * gh));
    for (auto* v : {&h_, &c_, &t1_, &t2_, &t3_, &t4_, &t5_, &zt_, &rt_, &rh_, &hrh_})
      v->resize(static_cast<size_t>(bh));
    bsum_.resize(static_cast<size_t>(gh));
    rowbuf_.resize(static_cast<size_t>(6 * s_.hidden * omp_get_max_threads()));
  }

  // y, y_h, y_c may be null; saved (one per direction) may be null. known_y: the node's Y
  // from an earlier run of the same forward (the gradient ops get it), which gives every
  // step's h_prev at once, so the recurrent GEMMs run over all steps together instead of
  // one per step (requires saved).
  void Forward(const RnnInputs& in, float* y, float* y_h, float* y_c, std::vector<RnnSaved>* saved,
               const float* known_y = nullptr) {
    if (y) std::fill(y, y + NumElements(s_.y), 0.f);
    const int64_t rows = s_.seq * s_.batch;
    for (int64_t d = 0; d < s_.dirs; ++d) {
      RnnSaved* sv = nullptr;
      if (saved) {
        sv = &(*saved)[static_cast<size_t>(d)];
        const size_t rh = static_cast<size_t>(rows * s_.hidden);
        sv->pre.assign(static_cast<size_t>(rows * s_.gates * s_.hidden), 0.f);
        sv->act.resize(sv->pre.size());
        sv->hprev.assign(rh, 0.f);
        if (s_.cell == RnnCell::kLSTM) {
          sv->cprev.assign(rh, 0.f);
          sv->cnew.assign(rh, 0.f);
          sv->hc.resize(rh);
        }
        if (s_.cell == RnnCell::kGRU) sv->extra.assign(rh, 0.f);
      }
      ForwardDirection(in, d, y, y_h, y_c, sv, known_y);
    }
  }

  struct Grads {
    float *dx = nullptr, *dw = nullptr, *dr = nullptr, *db = nullptr, *dinit_h = nullptr, *dinit_c = nullptr,
          *dp = nullptr;
  };

  void Backward(const RnnInputs& in, const std::vector<RnnSaved>& saved, const float* dy, const float* dy_h,
                const float* dy_c, const Grads& g) {
    for (int64_t d = 0; d < s_.dirs; ++d) BackwardDirection(in, saved[static_cast<size_t>(d)], d, dy, dy_h, dy_c, g);
  }

 private:
  const RnnActivation& Act(int64_t d, int k) const { return s_.acts[static_cast<size_t>(d * s_.acts_per_dir + k)]; }
  // Six rows of `hidden` floats of scratch for the calling thread.
  float* Scratch() { return rowbuf_.data() + 6 * s_.hidden * omp_get_thread_num(); }
  // Whether a step's element-wise work over the batch entries is worth threads.
  bool ParallelSteps() const { return s_.batch > 1 && s_.batch * s_.gates * s_.hidden >= 8192; }
  float Clip() const { return s_.has_clip ? s_.clip : kNoClip; }
  bool Active(int64_t s, int64_t b) const { return s < lens_[static_cast<size_t>(b)]; }
  int64_t Step(int64_t d, int64_t s, int64_t b) const {
    return s_.Backward(d) ? lens_[static_cast<size_t>(b)] - 1 - s : s;
  }

  // Fills sv->hprev from Y (or initial_h at each entry's first step), then
  // hr_all_ = h_prev R^T over all rows (the z and r gates only for GRU without
  // linear_before_reset, whose h gate gets (r * h_prev) Rh^T in hrh_all_).
  void RecurrentTermsFromY(const RnnInputs& in, int64_t d, const float* known_y, RnnSaved* sv) {
    const int64_t H = s_.hidden, GH = s_.gates * H, Bn = s_.batch, rows = s_.seq * Bn;
    const float* r = in.r + d * GH * H;
    const bool gru = s_.cell == RnnCell::kGRU, lbr = s_.linear_before_reset;
    for (int64_t s = 0; s < max_len_; ++s)
      for (int64_t b = 0; b < Bn; ++b) {
        if (!Active(s, b)) continue;
        const int64_t t = Step(d, s, b);
        const float* src = s == 0 ? (in.init_h ? in.init_h + s_.StateOffset(d, b) : nullptr)
                                  : known_y + s_.YOffset(s_.Backward(d) ? t + 1 : t - 1, d, b);
        float* dst = sv->hprev.data() + s_.Row(t, b) * H;
        if (src) std::copy(src, src + H, dst);
        else std::fill(dst, dst + H, 0.f);
      }
    hr_all_.resize(static_cast<size_t>(rows * GH));
    const int64_t n_rec = gru && !lbr ? 2 * H : GH;
    Gemm('N', 'T', rows, n_rec, H, sv->hprev.data(), H, r, H, 0.f, hr_all_.data(), GH);
    if (!gru || lbr) return;
    // r for every row, then (r * h_prev) Rh^T in one GEMM.
    const float clip = Clip();
    std::vector<float>& rh = sv->extra;
    float* rg = Scratch();
    for (int64_t row = 0; row < rows; ++row) {
      float* a = rg + H;
      const float* xw = xw_.data() + row * GH;
      const float* hr = hr_all_.data() + row * GH;
      for (int64_t j = 0; j < H; ++j) a[j] = xw[H + j] + bsum_[static_cast<size_t>(H + j)] + hr[H + j];
      RnnActivate(Act(d, 0), clip, a, rg, H);
      const float* hp = sv->hprev.data() + row * H;
      for (int64_t j = 0; j < H; ++j) rh[static_cast<size_t>(row * H + j)] = rg[j] * hp[j];
    }
    hrh_all_.resize(static_cast<size_t>(rows * H));
    Gemm('N', 'T', rows, H, H, rh.data(), H, r + 2 * H * H, H, 0.f, hrh_all_.data(), H);
  }

  void ForwardDirection(const RnnInputs& in, int64_t d, float* y, float* y_h, float* y_c, RnnSaved* sv,
                        const float* known_y) {
    const int64_t H = s_.hidden, G = s_.gates, GH = G * H, Bn = s_.batch, rows = s_.seq * Bn;
    const float* w = in.w + d * GH * s_.input;
    const float* r = in.r + d * GH * H;
    const float* wb = in.b ? in.b + d * 2 * GH : nullptr;
    const float* rb = wb ? wb + GH : nullptr;
    const float* p = in.p ? in.p + d * 3 * H : nullptr;
    const bool gru = s_.cell == RnnCell::kGRU, lbr = s_.linear_before_reset;
    const float clip = Clip();
    Gemm('N', 'T', rows, GH, s_.input, in.x, s_.input, w, s_.input, 0.f, xw_.data(), GH);
    // Biases added to every gate's pre-activation; GRU's Rbh goes inside the h gate.
    for (int64_t j = 0; j < GH; ++j)
      bsum_[static_cast<size_t>(j)] = wb ? wb[j] + (gru && j >= 2 * H ? 0.f : rb[j]) : 0.f;
    for (int64_t b = 0; b < Bn; ++b)
      for (int64_t j = 0; j < H; ++j) {
        const size_t k = static_cast<size_t>(b * H + j);
        h_[k] = in.init_h ? in.init_h[s_.StateOffset(d, b) + j] : 0.f;
        c_[k] = in.init_c ? in.init_c[s_.StateOffset(d, b) + j] : 0.f;
      }
    const int64_t n_rec = gru && !lbr ? 2 * H : GH;  // gates whose recurrent GEMM uses h_prev
    if (known_y) RecurrentTermsFromY(in, d, known_y, sv);
    for (int64_t s = 0; s < max_len_; ++s) {
      if (!known_y) Gemm('N', 'T', Bn, n_rec, H, h_.data(), H, r, H, 0.f, hr_.data(), GH);
      // Each batch entry reads and writes only its own rows.
#pragma omp parallel for schedule(static) if (ParallelSteps())
      for (int64_t b = 0; b < Bn; ++b) {
        if (!Active(s, b)) continue;
        float* gi = Scratch();
        float* gf = gi + H;
        float* gc = gf + H;
        float* go = gc + H;
        float* hc = go + H;
        float* gh = hc + H;
        const int64_t t = Step(d, s, b), row = s_.Row(t, b);
        float* a = sv ? sv->pre.data() + row * GH : pre_.data() + b * GH;
        const float* xw = xw_.data() + row * GH;
        const float* hr = known_y ? hr_all_.data() + row * GH : hr_.data() + b * GH;
        // GRU's h gate takes its recurrent term below (r * (h_prev Rh^T + Rbh) or (r * h_prev) Rh^T).
        const int64_t n_direct = gru ? 2 * H : GH;
        for (int64_t j = 0; j < GH; ++j) a[j] = xw[j] + bsum_[static_cast<size_t>(j)] + (j < n_direct ? hr[j] : 0.f);
        float* hp = h_.data() + b * H;
        if (sv && !known_y) std::copy(hp, hp + H, sv->hprev.data() + row * H);
        if (s_.cell == RnnCell::kLSTM) {
          float* cp = c_.data() + b * H;
          if (sv) std::copy(cp, cp + H, sv->cprev.data() + row * H);
          if (p)
            for (int64_t j = 0; j < H; ++j) {
              a[j] += p[j] * cp[j];
              a[2 * H + j] += p[2 * H + j] * cp[j];
            }
          RnnActivate(Act(d, 0), clip, a, gi, H);
          if (s_.input_forget) {
            for (int64_t j = 0; j < H; ++j) gf[j] = 1.f - gi[j];
          } else {
            RnnActivate(Act(d, 0), clip, a + 2 * H, gf, H);
          }
          RnnActivate(Act(d, 1), clip, a + 3 * H, gc, H);
          for (int64_t j = 0; j < H; ++j) cp[j] = LstmNewCell(gf[j], cp[j], gi[j], gc[j]);
          if (p)
            for (int64_t j = 0; j < H; ++j) a[H + j] += p[H + j] * cp[j];
          RnnActivate(Act(d, 0), clip, a + H, go, H);
          RnnActivate(Act(d, 2), kNoClip, cp, hc, H);
          for (int64_t j = 0; j < H; ++j) hp[j] = go[j] * hc[j];
          if (sv) {
            std::copy(cp, cp + H, sv->cnew.data() + row * H);
            std::copy(hc, hc + H, sv->hc.data() + row * H);
            float* act = sv->act.data() + row * GH;  // i, o, f, c as in W
            std::copy(gi, gi + H, act);
            std::copy(go, go + H, act + H);
            std::copy(gf, gf + H, act + 2 * H);
            std::copy(gc, gc + H, act + 3 * H);
          }
        } else if (gru) {
          float* z = zt_.data() + b * H;
          float* rg = rt_.data() + b * H;
          RnnActivate(Act(d, 0), clip, a, z, H);
          RnnActivate(Act(d, 0), clip, a + H, rg, H);
          if (sv) {
            std::copy(z, z + H, sv->act.data() + row * GH);
            std::copy(rg, rg + H, sv->act.data() + row * GH + H);
          }
          if (lbr) {
            for (int64_t j = 0; j < H; ++j) {
              const float lin = hr[2 * H + j] + (rb ? rb[2 * H + j] : 0.f);
              a[2 * H + j] += rg[j] * lin;
              if (sv) sv->extra[static_cast<size_t>(row * H + j)] = lin;
            }
            RnnActivate(Act(d, 1), clip, a + 2 * H, gh, H);
            if (sv) std::copy(gh, gh + H, sv->act.data() + row * GH + 2 * H);
            for (int64_t j = 0; j < H; ++j) hp[j] = GruNewHidden(z[j], gh[j], hp[j]);
          } else {
            for (int64_t j = 0; j < H; ++j) rh_[static_cast<size_t>(b * H + j)] = rg[j] * hp[j];
            if (sv && !known_y) std::copy(rh_.data() + b * H, rh_.data() + (b + 1) * H, sv->extra.data() + row * H);
          }
        } else {
          RnnActivate(Act(d, 0), clip, a, hp, H);
          if (sv) std::copy(hp, hp + H, sv->act.data() + row * GH);
        }
        if (y && !(gru && !lbr)) std::copy(hp, hp + H, y + s_.YOffset(t, d, b));
      }
      if (gru && !lbr) {
        // h gate: a_h = XWh + Wbh + (r * h_prev) Rh^T + Rbh, after every entry's r is known.
        if (!known_y) {
          for (int64_t b = 0; b < Bn; ++b)
            if (!Active(s, b)) std::fill(rh_.data() + b * H, rh_.data() + (b + 1) * H, 0.f);
          Gemm('N', 'T', Bn, H, H, rh_.data(), H, r + 2 * H * H, H, 0.f, hrh_.data(), H);
        }
#pragma omp parallel for schedule(static) if (ParallelSteps())
        for (int64_t b = 0; b < Bn; ++b) {
          if (!Active(s, b)) continue;
          float* gh = Scratch();
          const int64_t t = Step(d, s, b), row = s_.Row(t, b);
          float* a = sv ? sv->pre.data() + row * GH : pre_.data() + b * GH;
          const float* hrh = known_y ? hrh_all_.data() + row * H : hrh_.data() + b * H;
          for (int64_t j = 0; j < H; ++j) a[2 * H + j] += hrh[j] + (rb ? rb[2 * H + j] : 0.f);
          RnnActivate(Act(d, 1), clip, a + 2 * H, gh, H);
          if (sv) std::copy(gh, gh + H, sv->act.data() + row * GH + 2 * H);
          float* hp = h_.data() + b * H;
          const float* z = zt_.data() + b * H;
          for (int64_t j = 0; j < H; ++j) hp[j] = GruNewHidden(z[j], gh[j], hp[j]);
          if (y) std::copy(hp, hp + H, y + s_.YOffset(t, d, b));
        }
      }
    }
    for (int64_t b = 0; b < Bn; ++b) {
      if (y_h) std::copy(h_.data() + b * H, h_.data() + (b + 1) * H, y_h + s_.StateOffset(d, b));
      if (y_c) std::copy(c_.data() + b * H, c_.data() + (b + 1) * H, y_c + s_.StateOffset(d, b));
    }
  }

  void BackwardDirection(const RnnInputs& in, const RnnSaved& sv, int64_t d, const float* dy, const float* dy_h,
                         const float* dy_c, const Grads& g) {
    const int64_t H = s_.hidden, G = s_.gates, GH = G * H, Bn = s_.batch, rows = s_.seq * Bn, I = s_.input;
    const float* r = in.r + d * GH * H;
    const float* p = in.p ? in.p + d * 3 * H : nullptr;
    const bool lstm = s_.cell == RnnCell::kLSTM, gru = s_.cell == RnnCell::kGRU, lbr = s_.linear_before_reset;
    const float clip = Clip();
    // dax: gradient of each row's gate pre-activations (feeds dX, dW, dWb); for GRU with
    // linear_before_reset, dah holds the h gate's gradient of h_prev*Rh^T + Rbh instead.
    dax_.assign(static_cast<size_t>(rows * GH), 0.f);
    if (gru && lbr) dah_.assign(static_cast<size_t>(rows * GH), 0.f);
    dg_.resize(static_cast<size_t>(Bn * GH));
    std::vector<float>& dh = t1_;
    std::vector<float>& dc = t2_;
    std::vector<float>& dhn = t3_;
    std::vector<float>& drh = t4_;
    for (int64_t b = 0; b < Bn; ++b)
      for (int64_t j = 0; j < H; ++j) {
        const size_t k = static_cast<size_t>(b * H + j);
        dh[k] = dy_h ? dy_h[s_.StateOffset(d, b) + j] : 0.f;
        dc[k] = dy_c ? dy_c[s_.StateOffset(d, b) + j] : 0.f;
      }
    for (int64_t s = max_len_ - 1; s >= 0; --s) {
      std::fill(dg_.begin(), dg_.end(), 0.f);
#pragma omp parallel for schedule(static) if (ParallelSteps())
      for (int64_t b = 0; b < Bn; ++b) {
        float* dhb = dh.data() + b * H;
        float* dhnb = dhn.data() + b * H;
        if (!Active(s, b)) {
          std::copy(dhb, dhb + H, dhnb);
          continue;
        }
        float* u = Scratch();
        float* v = u + H;
        const int64_t t = Step(d, s, b), row = s_.Row(t, b);
        if (dy)
          for (int64_t j = 0; j < H; ++j) dhb[j] += dy[s_.YOffset(t, d, b) + j];
        const float* a = sv.pre.data() + row * GH;
        float* dga = dg_.data() + b * GH;
        if (lstm) {
          const float* cp = sv.cprev.data() + row * H;
          const float* cn = sv.cnew.data() + row * H;
          float* dcb = dc.data() + b * H;
          const float* act = sv.act.data() + row * GH;
          const float *gi = act, *go = act + H, *gf = act + 2 * H, *gc = act + 3 * H;
          const float* hc = sv.hc.data() + row * H;  // h(c_t)
          for (int64_t j = 0; j < H; ++j) v[j] = dhb[j] * hc[j];
          RnnActivateGradFromOutput(Act(d, 0), clip, a + H, go, v, dga + H, H);  // da_o
          for (int64_t j = 0; j < H; ++j) v[j] = dhb[j] * go[j];
          RnnActivateGradFromOutput(Act(d, 2), kNoClip, cn, hc, v, u, H);  // through h(c_t)
          for (int64_t j = 0; j < H; ++j) dcb[j] += u[j] + (p ? p[H + j] * dga[H + j] : 0.f);
          // With input_forget, f = 1 - i: f's gradient goes to i, and a_f has none.
          for (int64_t j = 0; j < H; ++j) v[j] = dcb[j] * gc[j] - (s_.input_forget ? dcb[j] * cp[j] : 0.f);
          RnnActivateGradFromOutput(Act(d, 0), clip, a, gi, v, dga, H);  // da_i
          for (int64_t j = 0; j < H; ++j) v[j] = s_.input_forget ? 0.f : dcb[j] * cp[j];
          RnnActivateGradFromOutput(Act(d, 0), clip, a + 2 * H, gf, v, dga + 2 * H, H);  // da_f
          for (int64_t j = 0; j < H; ++j) v[j] = dcb[j] * gi[j];
          RnnActivateGradFromOutput(Act(d, 1), clip, a + 3 * H, gc, v, dga + 3 * H, H);  // da_c
          for (int64_t j = 0; j < H; ++j) {
            dcb[j] = dcb[j] * gf[j] + (p ? p[j] * dga[j] + p[2 * H + j] * dga[2 * H + j] : 0.f);
            dhnb[j] = 0.f;
          }
        } else if (gru) {
          const float* hp = sv.hprev.data() + row * H;
          const float* ex = sv.extra.data() + row * H;
          const float* act = sv.act.data() + row * GH;
          const float *z = act, *rg = act + H, *hn = act + 2 * H;  // z, r, h~
          for (int64_t j = 0; j < H; ++j) {
            v[j] = dhb[j] * (hp[j] - hn[j]);  // dz
            u[j] = dhb[j] * (1.f - z[j]);     // dh~
            dhnb[j] = dhb[j] * z[j];
          }
          RnnActivateGradFromOutput(Act(d, 0), clip, a, z, v, dga, H);
          RnnActivateGradFromOutput(Act(d, 1), clip, a + 2 * H, hn, u, dga + 2 * H, H);  // da_h
          if (lbr) {
            float* dax = dax_.data() + row * GH;
            for (int64_t j = 0; j < H; ++j) {
              v[j] = dga[2 * H + j] * ex[j];  // dr
              dax[2 * H + j] = dga[2 * H + j];
              dga[2 * H + j] *= rg[j];  // gradient of h_prev*Rh^T + Rbh
            }
            RnnActivateGradFromOutput(Act(d, 0), clip, a + H, rg, v, dga + H, H);
          }
        } else {
          RnnActivateGradFromOutput(Act(d, 0), clip, a, sv.act.data() + row * GH, dhb, dga, H);
          std::fill(dhnb, dhnb + H, 0.f);
        }
      }
      if (gru && !lbr) {
        // (r * h_prev) Rh^T: drh = da_h Rh, then dr = drh * h_prev and dh_prev += drh * r.
        Gemm('N', 'N', Bn, H, H, dg_.data() + 2 * H, GH, r + 2 * H * H, H, 0.f, drh.data(), H);
#pragma omp parallel for schedule(static) if (ParallelSteps())
        for (int64_t b = 0; b < Bn; ++b) {
          if (!Active(s, b)) continue;
          float* v = Scratch();
          const int64_t row = s_.Row(Step(d, s, b), b);
          const float* a = sv.pre.data() + row * GH;
          const float* hp = sv.hprev.data() + row * H;
          const float* drb = drh.data() + b * H;
          float* dhnb = dhn.data() + b * H;
          const float* rg = sv.act.data() + row * GH + H;
          for (int64_t j = 0; j < H; ++j) {
            v[j] = drb[j] * hp[j];
            dhnb[j] += drb[j] * rg[j];
          }
          RnnActivateGradFromOutput(Act(d, 0), clip, a + H, rg, v, dg_.data() + b * GH + H, H);
        }
        Gemm('N', 'N', Bn, H, 2 * H, dg_.data(), GH, r, H, 1.f, dhn.data(), H);
      } else {
        Gemm('N', 'N', Bn, H, GH, dg_.data(), GH, r, H, 1.f, dhn.data(), H);
      }
      std::swap(dh, dhn);
      for (int64_t b = 0; b < Bn; ++b) {
        if (!Active(s, b)) continue;
        const int64_t row = s_.Row(Step(d, s, b), b);
        const float* src = dg_.data() + b * GH;
        if (gru && lbr) {
          std::copy(src, src + GH, dah_.data() + row * GH);
          std::copy(src, src + 2 * H, dax_.data() + row * GH);
        } else {
          std::copy(src, src + GH, dax_.data() + row * GH);
        }
      }
    }
    for (int64_t b = 0; b < Bn; ++b) {
      if (g.dinit_h) std::copy(dh.data() + b * H, dh.data() + (b + 1) * H, g.dinit_h + s_.StateOffset(d, b));
      if (g.dinit_c) std::copy(dc.data() + b * H, dc.data() + (b + 1) * H, g.dinit_c + s_.StateOffset(d, b));
    }
    const float* dah = gru && lbr ? dah_.data() : dax_.data();
    if (g.dx) Gemm('N', 'N', rows, I, GH, dax_.data(), GH, in.w + d * GH * I, I, d == 0 ? 0.f : 1.f, g.dx, I);
    if (g.dw) Gemm('T', 'N', GH, I, rows, dax_.data(), GH, in.x, I, 0.f, g.dw + d * GH * I, I);
    if (g.dr) {
      float* dr = g.dr + d * GH * H;
      if (gru && !lbr) {
        Gemm('T', 'N', 2 * H, H, rows, dah, GH, sv.hprev.data(), H, 0.f, dr, H);
        Gemm('T', 'N', H, H, rows, dah + 2 * H, GH, sv.extra.data(), H, 0.f, dr + 2 * H * H, H);
      } else {
        Gemm('T', 'N', GH, H, rows, dah, GH, sv.hprev.data(), H, 0.f, dr, H);
      }
    }
    if (g.db) {
      std::vector<double> sx(static_cast<size_t>(GH), 0.0), sh(static_cast<size_t>(GH), 0.0);
      for (int64_t row = 0; row < rows; ++row)
        for (int64_t j = 0; j < GH; ++j) {
          sx[static_cast<size_t>(j)] += dax_[static_cast<size_t>(row * GH + j)];
          sh[static_cast<size_t>(j)] += dah[row * GH + j];
        }
      float* dwb = g.db + d * 2 * GH;
      for (int64_t j = 0; j < GH; ++j) {
        dwb[j] = static_cast<float>(sx[static_cast<size_t>(j)]);
        dwb[GH + j] = static_cast<float>(sh[static_cast<size_t>(j)]);
      }
    }
    if (g.dp) {
      // dP_i = sum da_i * c_prev, dP_o = sum da_o * c_t, dP_f = sum da_f * c_prev over the rows.
      std::vector<double> dp(static_cast<size_t>(3 * H), 0.0);
      for (int64_t row = 0; row < rows; ++row) {
        const float* da = dax_.data() + row * GH;
        const float* cp = sv.cprev.data() + row * H;
        const float* cn = sv.cnew.data() + row * H;
        for (int64_t j = 0; j < H; ++j) {
          dp[static_cast<size_t>(j)] += static_cast<double>(da[j]) * cp[j];
          dp[static_cast<size_t>(H + j)] += static_cast<double>(da[H + j]) * cn[j];
          dp[static_cast<size_t>(2 * H + j)] += static_cast<double>(da[2 * H + j]) * cp[j];
        }
      }
      for (int64_t j = 0; j < 3 * H; ++j) g.dp[d * 3 * H + j] = static_cast<float>(dp[static_cast<size_t>(j)]);
    }
  }

  RnnSpec s_;
  std::vector<int64_t> lens_;
  int64_t max_len_ = 0;
  std::vector<float> xw_, hr_, hr_all_, hrh_all_, pre_, h_, c_, t1_, t2_, t3_, t4_, t5_, zt_, rt_, rh_, hrh_, bsum_, rowbuf_, dax_, dah_,
      dg_;
};

template <RnnCell kCell>
class RnnKernel final : public OpKernel {
 public:
  explicit RnnKernel(const KernelInfo& info) : OpKernel(info) {}

  void Prepare(KernelContext& ctx) override {
    spec_ = PlanRnn(node_, kCell, opset_, ctx);
    ctx.SetOutput(0, DType::kFloat32, spec_.y);
    ctx.SetOutput(1, DType::kFloat32, spec_.y_h);
    if (kCell == RnnCell::kLSTM) ctx.SetOutput(2, DType::kFloat32, spec_.y_h);
  }

  void Compute(KernelContext& ctx) override {
    runner_.Plan(spec_, ReadSequenceLens(node_, spec_, ctx));
    auto out = [&](int i) { return ctx.HasOutput(i) ? ctx.Output(i).data<float>() : nullptr; };
    runner_.Forward(ReadInputs(ctx, kCell), out(0), out(1), kCell == RnnCell::kLSTM ? out(2) : nullptr, nullptr);
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
    saved_.resize(static_cast<size_t>(spec_.dirs));
  }

  void Compute(KernelContext& ctx) override {
    runner_.Plan(spec_, ReadSequenceLens(node_, spec_, ctx));
    const RnnInputs in = ReadInputs(ctx, kCell);
    const int n = RnnNumForwardInputs(kCell);
    const int n_out = kCell == RnnCell::kLSTM ? 3 : 2;
    const Tensor* y = ctx.OptionalInput(n + n_out);
    runner_.Forward(in, nullptr, nullptr, nullptr, &saved_, y ? y->data<float>() : nullptr);
    auto grad_in = [&](int i) { return ctx.OptionalInput(n + i) ? ctx.OptionalInput(n + i)->data<float>() : nullptr; };
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
    // dX accumulates over directions; the backward writes it only where some step runs.
    if (g.dx) std::fill(g.dx, g.dx + ctx.Input(0).numel(), 0.f);
    runner_.Backward(in, saved_, grad_in(0), grad_in(1), kCell == RnnCell::kLSTM ? grad_in(2) : nullptr, g);
  }

 private:
  RnnSpec spec_;
  RnnRunner runner_;
  std::vector<RnnSaved> saved_;
};

OT_REGISTER_CPU_KERNEL("LSTM", 7, kLatestOpset, RnnKernel<RnnCell::kLSTM>);
OT_REGISTER_CPU_KERNEL("GRU", 7, kLatestOpset, RnnKernel<RnnCell::kGRU>);
OT_REGISTER_CPU_KERNEL("RNN", 7, kLatestOpset, RnnKernel<RnnCell::kRNN>);
OT_REGISTER_KERNEL(kGradDomain, "LSTMGrad", 1, kLatestOpset, DeviceType::kCPU, RnnGradKernel<RnnCell::kLSTM>);
OT_REGISTER_KERNEL(kGradDomain, "GRUGrad", 1, kLatestOpset, DeviceType::kCPU, RnnGradKernel<RnnCell::kGRU>);
OT_REGISTER_KERNEL(kGradDomain, "RNNGrad", 1, kLatestOpset, DeviceType::kCPU, RnnGradKernel<RnnCell::kRNN>);

}  // namespace
}  // namespace cpu
}  // namespace ot
