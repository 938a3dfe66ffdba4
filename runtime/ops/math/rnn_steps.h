// The recurrent ops' step loop as the CUDA runtime runs it (runtime/cuda/recurrent/), written
// once for the device and for a host test: the per-element body of each step kernel
// (__host__ __device__ under nvcc: one call per (batch entry, hidden unit) and step, on the
// cell math of rnn_cell_math.h), and RnnStepDriver, the order of GEMMs and steps of one
// direction, over a backend that supplies the GEMM and the element-wise launches. The CUDA
// backend is cuBLAS plus the kernels of rnn_kernels.cu; tests/unit/runtime/rnn_cell_math_test.cc
// runs the same driver on a host backend (plain loops over these bodies) against the CPU
// runtime's kernels, so only the launches and the cuBLAS calls are left CUDA-only.
//
// Per direction, as the CPU kernel (runtime/cpu/recurrent/rnn.cc): one GEMM projects every
// step's input (X [seq*batch, input] W^T); per step one GEMM applies R to h (GRU without
// linear_before_reset: its z and r gates, then (r * h_prev) Rh^T after the first kernel) and
// one kernel updates the cell. The backward walks the steps back, one kernel and one GEMM
// (dh_prev += dA R) per step, then dX, dW, dR as one GEMM each over every step's dA, and dB,
// dP as column sums in double (a thread per column, row order: deterministic).
#pragma once

#include <cstdint>
#include <utility>

#include "runtime/ops/math/rnn_cell_math.h"

namespace ot {

enum class RnnStepCell : int { kLSTM = 0, kGRU = 1, kRNN = 2 };

// One direction of one node: sizes, layout and the cell's attributes.
struct RnnStepGeometry {
  RnnStepCell cell = RnnStepCell::kLSTM;
  int64_t seq = 0, batch = 0, input = 0, hidden = 0, gates = 4;
  int64_t dirs = 1, d = 0;  // num_directions and this direction
  int64_t layout = 0;       // 0: [seq, batch, ...]; 1: [batch, seq, ...]
  bool backward = false;    // this direction walks the sequence backwards
  bool linear_before_reset = false;
  LstmCellAttrs lstm;
  GruCellAttrs gru;
  RnnActivation rnn_f;
  float clip = INFINITY;

  // As RnnSpec (runtime/ops/shapes/rnn_shapes.h): the row of X holding step t of entry b,
  // and the offsets of Y[t, d, b, :] and of Y_h / initial_h [d, b, :].
  OT_HOST_DEVICE int64_t Row(int64_t t, int64_t b) const { return layout == 0 ? t * batch + b : b * seq + t; }
  OT_HOST_DEVICE int64_t YOffset(int64_t t, int64_t b) const {
    return (layout == 0 ? (t * dirs + d) * batch + b : (b * seq + t) * dirs + d) * hidden;
  }
  OT_HOST_DEVICE int64_t StateOffset(int64_t b) const {
    return (layout == 0 ? d * batch + b : b * dirs + d) * hidden;
  }
  // Whether entry b's sequence (lens[b] steps) reaches step s; if so its time index and row.
  OT_HOST_DEVICE bool StepOf(int64_t s, const int* lens, int64_t b, int64_t* t, int64_t* row) const {
    const int64_t len = lens[b];
    if (s >= len) return false;
    *t = backward ? len - 1 - s : s;
    *row = Row(*t, b);
    return true;
  }
};

// Per-row values the gradient op's forward keeps for its backward ([seq*batch rows, ...];
// rows no step reaches stay as the caller zeroed them). Null pointers: not kept.
struct RnnSaved {
  float* pre = nullptr;    // [rows, gates*hidden]: gate pre-activations (LSTM's with peepholes)
  float* hprev = nullptr;  // [rows, hidden]: the hidden state entering the step
  float* cprev = nullptr;  // LSTM [rows, hidden]: the cell state entering the step
  float* cnew = nullptr;   // LSTM [rows, hidden]: the cell state leaving it
  float* extra = nullptr;  // GRU [rows, hidden]: h_prev Rh^T + Rbh (linear_before_reset) or r * h_prev
};

// The direction's biases (null without B) and peepholes (null without P), offset to it.
struct RnnStepParams {
  const float* wb = nullptr;
  const float* rb = nullptr;
  const float* p = nullptr;
};

// ---- per-element bodies; i in [0, batch * hidden) is (b, j) = (i / hidden, i % hidden) ----

// dst[b, j] = src[StateOffset(b) + j] (initial_h, initial_c, dY_h, dY_c), or 0 when src is null.
OT_HOST_DEVICE inline void RnnLoadStateAt(const RnnStepGeometry& g, const float* src, float* dst, int64_t i) {
  const int64_t b = i / g.hidden, j = i % g.hidden;
  dst[i] = src ? src[g.StateOffset(b) + j] : 0.f;
}
// dst[StateOffset(b) + j] = src[b, j] (Y_h, Y_c, the initial states' gradients).
OT_HOST_DEVICE inline void RnnStoreStateAt(const RnnStepGeometry& g, const float* src, float* dst, int64_t i) {
  const int64_t b = i / g.hidden, j = i % g.hidden;
  dst[g.StateOffset(b) + j] = src[i];
}

// Step s of the forward, after xw = X W^T [rows, gates*hidden] and hr = h R^T [batch,
// gates*hidden] (GRU without linear_before_reset: its z and r columns only). Updates h and c
// [batch, hidden] of entries whose sequence reaches s, writes Y (when not null) and the saved
// values (sv.pre null: the pre-activations go to pre_batch [batch, gates*hidden]). GRU
// without linear_before_reset stops after r: rh = r * h_prev (0 past an entry's end) for the
// GEMM before RnnGruForwardFinishAt.
OT_HOST_DEVICE inline void RnnForwardStepAt(const RnnStepGeometry& g, int64_t s, const int* lens, const float* xw,
                                            const float* hr, const RnnStepParams& prm, float* h, float* c,
                                            float* pre_batch, const RnnSaved& sv, float* y, float* rh, int64_t i) {
  const int64_t H = g.hidden, GH = g.gates * H, b = i / H, j = i % H;
  int64_t t = 0, row = 0;
  if (!g.StepOf(s, lens, b, &t, &row)) {
    if (rh) rh[i] = 0.f;
    return;
  }
  float* pre = sv.pre ? sv.pre + row * GH : pre_batch + b * GH;
  const float* xwr = xw + row * GH;
  const float* hrb = hr + b * GH;
  const bool gru = g.cell == RnnStepCell::kGRU;
  // x W^T + Wb (+ Rb but for GRU's h gate), and with `full` h_prev R^T too.
  auto input_part = [&](int64_t gate) {
    const int64_t k = gate * H + j;
    return xwr[k] + (prm.wb ? prm.wb[k] + (gru && gate == 2 ? 0.f : prm.rb[k]) : 0.f);
  };
  auto full = [&](int64_t gate) { return input_part(gate) + hrb[gate * H + j]; };
  const float hp = h[i];
  if (sv.hprev) sv.hprev[row * H + j] = hp;
  float hn = 0.f;
  if (g.cell == RnnStepCell::kLSTM) {
    const float cp = c[i];
    const float* p = prm.p;
    const float a_c = full(3);
    const LstmCellForwardResult r = LstmCellForward(g.lstm, full(0), full(1), full(2), a_c, cp, p ? p[j] : 0.f,
                                                    p ? p[H + j] : 0.f, p ? p[2 * H + j] : 0.f);
    pre[j] = r.pre_i;
    pre[H + j] = r.pre_o;
    pre[2 * H + j] = r.pre_f;
    pre[3 * H + j] = a_c;
    c[i] = r.c;
    if (sv.cprev) {
      sv.cprev[row * H + j] = cp;
      sv.cnew[row * H + j] = r.c;
    }
    hn = r.h;
  } else if (gru) {
    const float a_z = full(0), a_r = full(1);
    pre[j] = a_z;
    pre[H + j] = a_r;
    const float z = RnnGate(g.gru.f, g.gru.clip, a_z);
    const float r = RnnGate(g.gru.f, g.gru.clip, a_r);
    if (!g.linear_before_reset) {
      rh[i] = r * hp;
      if (sv.extra) sv.extra[row * H + j] = r * hp;
      return;  // RnnGruForwardFinishAt after the GEMM
    }
    const float lin = hrb[2 * H + j] + (prm.rb ? prm.rb[2 * H + j] : 0.f);
    const float a_h = GruPreH(input_part(2), r, lin);
    pre[2 * H + j] = a_h;
    if (sv.extra) sv.extra[row * H + j] = lin;
    hn = GruNewHidden(z, RnnGate(g.gru.g, g.gru.clip, a_h), hp);
  } else {
    const float a = full(0);
    pre[j] = a;
    hn = RnnCellForward(g.rnn_f, g.clip, a);
  }
  h[i] = hn;
  if (y) y[g.YOffset(t, b) + j] = hn;
}

// GRU without linear_before_reset, after hrh = (r * h_prev) Rh^T: the h gate and the new h.
OT_HOST_DEVICE inline void RnnGruForwardFinishAt(const RnnStepGeometry& g, int64_t s, const int* lens, const float* xw,
                                                 const float* hrh, const RnnStepParams& prm, float* h,
                                                 float* pre_batch, const RnnSaved& sv, float* y, int64_t i) {
  const int64_t H = g.hidden, GH = g.gates * H, b = i / H, j = i % H;
  int64_t t = 0, row = 0;
  if (!g.StepOf(s, lens, b, &t, &row)) return;
  float* pre = sv.pre ? sv.pre + row * GH : pre_batch + b * GH;
  float a_h = xw[row * GH + 2 * H + j] + hrh[i];
  if (prm.wb) a_h += prm.wb[2 * H + j] + prm.rb[2 * H + j];
  pre[2 * H + j] = a_h;
  const float z = RnnGate(g.gru.f, g.gru.clip, pre[j]);
  const float hn = GruNewHidden(z, RnnGate(g.gru.g, g.gru.clip, a_h), h[i]);
  h[i] = hn;
  if (y) y[g.YOffset(t, b) + j] = hn;
}

// Step s of the backward. dh: gradient of the hidden state leaving the step (dY's step is
// added here); dc: LSTM's cell-state gradient, updated in place to the one entering the step.
// Writes dg [batch, gates*hidden] (the pre-activation gradients whose product with R gives
// h_prev's; 0 past an entry's end), their rows of dax [rows, gates*hidden] (for dX, dW, dWb)
// and, GRU with linear_before_reset, of dah (the gradient of h_prev Rh^T + Rbh in the h
// columns, for dR and dRb); dhn = the direct part of h_prev's gradient (dh itself past an
// entry's end). GRU without linear_before_reset leaves r's columns to RnnGruResetBackwardAt.
OT_HOST_DEVICE inline void RnnBackwardStepAt(const RnnStepGeometry& g, int64_t s, const int* lens, const float* dy,
                                             const RnnSaved& sv, const RnnStepParams& prm, const float* dh, float* dc,
                                             float* dhn, float* dg, float* dax, float* dah, int64_t i) {
  const int64_t H = g.hidden, GH = g.gates * H, b = i / H, j = i % H;
  float* dgb = dg + b * GH;
  int64_t t = 0, row = 0;
  if (!g.StepOf(s, lens, b, &t, &row)) {
    dhn[i] = dh[i];
    for (int64_t k = 0; k < g.gates; ++k) dgb[k * H + j] = 0.f;
    return;
  }
  const float dhv = dh[i] + (dy ? dy[g.YOffset(t, b) + j] : 0.f);
  const float* pre = sv.pre + row * GH;
  float* dx = dax + row * GH;
  if (g.cell == RnnStepCell::kLSTM) {
    const float* p = prm.p;
    const LstmCellGrads r =
        LstmCellBackward(g.lstm, pre[j], pre[H + j], pre[2 * H + j], pre[3 * H + j], sv.cprev[row * H + j],
                         sv.cnew[row * H + j], p ? p[j] : 0.f, p ? p[H + j] : 0.f, p ? p[2 * H + j] : 0.f, dhv, dc[i]);
    dc[i] = r.dc_prev;
    const float da[4] = {r.da_i, r.da_o, r.da_f, r.da_c};
    for (int k = 0; k < 4; ++k) dgb[k * H + j] = dx[k * H + j] = da[k];
    dhn[i] = 0.f;
  } else if (g.cell == RnnStepCell::kGRU) {
    const GruCellGrads r = GruCellBackward(g.gru, pre[j], pre[2 * H + j], sv.hprev[row * H + j], dhv);
    dhn[i] = r.dh_prev;
    dgb[j] = dx[j] = r.da_z;
    if (g.linear_before_reset) {
      const float rg = RnnGate(g.gru.f, g.gru.clip, pre[H + j]);
      const float da_r = GruResetGrad(g.gru, pre[H + j], r.da_h * sv.extra[row * H + j]);
      dgb[H + j] = dx[H + j] = da_r;
      dx[2 * H + j] = r.da_h;
      dgb[2 * H + j] = r.da_h * rg;  // gradient of h_prev Rh^T + Rbh
      float* dhr = dah + row * GH;
      dhr[j] = r.da_z;
      dhr[H + j] = da_r;
      dhr[2 * H + j] = r.da_h * rg;
    } else {
      dgb[2 * H + j] = dx[2 * H + j] = r.da_h;
      dgb[H + j] = 0.f;  // RnnGruResetBackwardAt
    }
  } else {
    dgb[j] = dx[j] = RnnCellBackward(g.rnn_f, g.clip, pre[j], dhv);
    dhn[i] = 0.f;
  }
}

// GRU without linear_before_reset, after drh = da_h Rh: r's columns of dg and dax, and
// h_prev's share drh * r added to dhn.
OT_HOST_DEVICE inline void RnnGruResetBackwardAt(const RnnStepGeometry& g, int64_t s, const int* lens,
                                                 const float* drh, const RnnSaved& sv, float* dhn, float* dg,
                                                 float* dax, int64_t i) {
  const int64_t H = g.hidden, GH = g.gates * H, b = i / H, j = i % H;
  int64_t t = 0, row = 0;
  if (!g.StepOf(s, lens, b, &t, &row)) return;
  const float pre_r = sv.pre[row * GH + H + j];
  const float rg = RnnGate(g.gru.f, g.gru.clip, pre_r);
  const float da_r = GruResetGrad(g.gru, pre_r, drh[i] * sv.hprev[row * H + j]);
  dhn[i] += drh[i] * rg;
  dg[b * GH + H + j] = da_r;
  dax[row * GH + H + j] = da_r;
}

// Column j of dB: db[j] = sum of dax's column j, db[gh + j] = dah's, in double, row order.
OT_HOST_DEVICE inline void RnnBiasGradAt(int64_t rows, int64_t gh, const float* dax, const float* dah, float* db,
                                         int64_t j) {
  double sx = 0, sh = 0;
  for (int64_t r = 0; r < rows; ++r) {
    sx += dax[r * gh + j];
    sh += dah[r * gh + j];
  }
  db[j] = static_cast<float>(sx);
  db[gh + j] = static_cast<float>(sh);
}

// Entry k of LSTM's dP [3*hidden] (i, o, f): sum da_i c_prev, sum da_o c, sum da_f c_prev.
OT_HOST_DEVICE inline void RnnPeepholeGradAt(int64_t rows, int64_t hidden, const float* dax, const float* cprev,
                                             const float* cnew, float* dp, int64_t k) {
  const int64_t gate = k / hidden, j = k % hidden;
  const float* cs = gate == 1 ? cnew : cprev;
  double sum = 0;
  for (int64_t r = 0; r < rows; ++r)
    sum += static_cast<double>(dax[r * 4 * hidden + gate * hidden + j]) * cs[r * hidden + j];
  dp[k] = static_cast<float>(sum);
}

// ---- the order of work of one direction ----

// Device buffers of the driver (element counts; rows = seq * batch, GH = gates * hidden, BH =
// batch * hidden): xw [rows*GH], hr, pre_batch, dg [batch*GH]; h, c, rh, hrh, dh, dc, dhn,
// drh [BH]; saved [rows*GH] pre and [rows*hidden] the others; dax, dah [rows*GH] (dah only
// for GRU with linear_before_reset); lens [batch] the entries' lengths.
struct RnnStepBuffers {
  float *xw = nullptr, *hr = nullptr, *pre_batch = nullptr, *h = nullptr, *c = nullptr, *rh = nullptr,
        *hrh = nullptr;
  RnnSaved saved;
  float *dax = nullptr, *dah = nullptr, *dg = nullptr, *dh = nullptr, *dc = nullptr, *dhn = nullptr, *drh = nullptr;
  const int* lens = nullptr;
  int64_t max_len = 0;  // the longest entry
};

// The forward inputs, whole (all directions).
struct RnnStepInputs {
  const float *x = nullptr, *w = nullptr, *r = nullptr, *b = nullptr, *init_h = nullptr, *init_c = nullptr,
              *p = nullptr;
};

// The gradient op's outputs (null: not wanted), whole. dx accumulates over the directions
// (the first writes it).
struct RnnStepGrads {
  float *dx = nullptr, *dw = nullptr, *dr = nullptr, *db = nullptr, *dinit_h = nullptr, *dinit_c = nullptr,
        *dp = nullptr;
};

// Backend: Gemm(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc) (row-major c = op(a) op(b) +
// beta c, beta 0 or 1), Zero(p, count), and LoadState, StoreState, ForwardStep,
// GruForwardFinish, BackwardStep, GruResetBackward, BiasGrad, PeepholeGrad, each running the
// *At body above over its range (see RnnHostSteps in the test, rnn_ops.cc's CudaSteps).
template <typename Backend>
class RnnStepDriver {
 public:
  RnnStepDriver(Backend& be, const RnnStepGeometry& g, const RnnStepBuffers& buf) : be_(be), g_(g), buf_(buf) {}

  static RnnStepParams Params(const RnnStepGeometry& g, const RnnStepInputs& in) {
    RnnStepParams prm;
    const int64_t GH = g.gates * g.hidden;
    if (in.b) {
      prm.wb = in.b + g.d * 2 * GH;
      prm.rb = prm.wb + GH;
    }
    if (in.p) prm.p = in.p + g.d * 3 * g.hidden;
    return prm;
  }

  // One direction's forward. y, y_h, y_c may be null; `save` fills buf.saved (zeroed first).
  void Forward(const RnnStepInputs& in, float* y, float* y_h, float* y_c, bool save) {
    const int64_t H = g_.hidden, GH = g_.gates * H, B = g_.batch, rows = g_.seq * B, I = g_.input;
    const bool gru = g_.cell == RnnStepCell::kGRU, lbr = g_.linear_before_reset;
    const float* r = in.r + g_.d * GH * H;
    const RnnStepParams prm = Params(g_, in);
    RnnSaved sv;
    if (save) {
      sv = buf_.saved;
      be_.Zero(sv.pre, rows * GH);
      for (float* p : {sv.hprev, sv.cprev, sv.cnew, sv.extra}) be_.Zero(p, rows * H);
    }
    be_.LoadState(g_, in.init_h, buf_.h);
    if (g_.cell == RnnStepCell::kLSTM) be_.LoadState(g_, in.init_c, buf_.c);
    be_.Gemm(false, true, rows, GH, I, in.x, I, in.w + g_.d * GH * I, I, 0.f, buf_.xw, GH);
    const int64_t n_rec = gru && !lbr ? 2 * H : GH;  // gates whose recurrent GEMM uses h_prev
    for (int64_t s = 0; s < buf_.max_len; ++s) {
      be_.Gemm(false, true, B, n_rec, H, buf_.h, H, r, H, 0.f, buf_.hr, GH);
      be_.ForwardStep(g_, s, buf_.lens, buf_.xw, buf_.hr, prm, buf_.h, buf_.c, buf_.pre_batch, sv, y, buf_.rh);
      if (gru && !lbr) {
        be_.Gemm(false, true, B, H, H, buf_.rh, H, r + 2 * H * H, H, 0.f, buf_.hrh, H);
        be_.GruForwardFinish(g_, s, buf_.lens, buf_.xw, buf_.hrh, prm, buf_.h, buf_.pre_batch, sv, y);
      }
    }
    if (y_h) be_.StoreState(g_, buf_.h, y_h);
    if (y_c) be_.StoreState(g_, buf_.c, y_c);
  }

  // One direction's backward, after Forward(save) of the same direction.
  void Backward(const RnnStepInputs& in, const float* dy, const float* dy_h, const float* dy_c,
                const RnnStepGrads& gr) {
    const int64_t H = g_.hidden, GH = g_.gates * H, B = g_.batch, rows = g_.seq * B, I = g_.input;
    const bool lstm = g_.cell == RnnStepCell::kLSTM, gru = g_.cell == RnnStepCell::kGRU,
               lbr = g_.linear_before_reset;
    const float* r = in.r + g_.d * GH * H;
    const RnnStepParams prm = Params(g_, in);
    const RnnSaved& sv = buf_.saved;
    be_.Zero(buf_.dax, rows * GH);
    if (gru && lbr) be_.Zero(buf_.dah, rows * GH);
    float* dah = gru && lbr ? buf_.dah : buf_.dax;
    float* dh = buf_.dh;
    float* dhn = buf_.dhn;
    be_.LoadState(g_, dy_h, dh);
    if (lstm) be_.LoadState(g_, dy_c, buf_.dc);
    const int64_t n_rec = gru && !lbr ? 2 * H : GH;
    for (int64_t s = buf_.max_len - 1; s >= 0; --s) {
      be_.BackwardStep(g_, s, buf_.lens, dy, sv, prm, dh, buf_.dc, dhn, buf_.dg, buf_.dax, buf_.dah);
      if (gru && !lbr) {
        be_.Gemm(false, false, B, H, H, buf_.dg + 2 * H, GH, r + 2 * H * H, H, 0.f, buf_.drh, H);
        be_.GruResetBackward(g_, s, buf_.lens, buf_.drh, sv, dhn, buf_.dg, buf_.dax);
      }
      be_.Gemm(false, false, B, H, n_rec, buf_.dg, GH, r, H, 1.f, dhn, H);
      std::swap(dh, dhn);
    }
    if (gr.dinit_h) be_.StoreState(g_, dh, gr.dinit_h);
    if (gr.dinit_c) be_.StoreState(g_, buf_.dc, gr.dinit_c);
    const float* dax = buf_.dax;
    if (gr.dx) be_.Gemm(false, false, rows, I, GH, dax, GH, in.w + g_.d * GH * I, I, g_.d == 0 ? 0.f : 1.f, gr.dx, I);
    if (gr.dw) be_.Gemm(true, false, GH, I, rows, dax, GH, in.x, I, 0.f, gr.dw + g_.d * GH * I, I);
    if (gr.dr) {
      float* drp = gr.dr + g_.d * GH * H;
      if (gru && !lbr) {
        be_.Gemm(true, false, 2 * H, H, rows, dah, GH, sv.hprev, H, 0.f, drp, H);
        be_.Gemm(true, false, H, H, rows, dah + 2 * H, GH, sv.extra, H, 0.f, drp + 2 * H * H, H);
      } else {
        be_.Gemm(true, false, GH, H, rows, dah, GH, sv.hprev, H, 0.f, drp, H);
      }
    }
    if (gr.db) be_.BiasGrad(rows, GH, dax, dah, gr.db + g_.d * 2 * GH);
    if (gr.dp) be_.PeepholeGrad(rows, H, dax, sv.cprev, sv.cnew, gr.dp + g_.d * 3 * H);
  }

 private:
  Backend& be_;
  RnnStepGeometry g_;
  RnnStepBuffers buf_;
};

}  // namespace ot
