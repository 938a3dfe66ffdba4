// Per-element math of the recurrent cells (ONNX LSTM, GRU, RNN) and of their backward, one
// definition for the CPU kernel (runtime/cpu/recurrent/) and the CUDA kernels
// (runtime/cuda/recurrent/rnn_kernels.cu; __host__ __device__ under nvcc, so this header
// includes only the standard library and activation_math.h). One call computes one hidden
// unit j of one batch entry at one step; the matrix products (X W^T, h_prev R^T, and their
// gradients) are the callers'.
//
// The CPU kernel runs its sigmoid and tanh gates through its own vectorised row loops
// (runtime/cpu/recurrent/rnn_math.h, for speed) and every other activation, and the cell
// state updates, through the functions here; tests/unit/runtime/rnn_cell_math_test.cc checks
// every function here against float64 references. Gate order is ONNX's: LSTM i, o, f, c;
// GRU z, r, h.
#pragma once

#include <cmath>

#include "runtime/ops/math/activation_math.h"
#include "runtime/ops/math/integer_pow.h"  // OT_HOST_DEVICE

namespace ot {

// The activation functions ONNX allows in recurrent cells, with their alpha and beta.
enum class RnnActivationKind {
  kSigmoid,
  kTanh,
  kRelu,
  kLeakyRelu,
  kThresholdedRelu,
  kScaledTanh,
  kHardSigmoid,
  kElu,
  kSoftsign,
  kSoftplus,
  kAffine
};
struct RnnActivation {
  RnnActivationKind kind = RnnActivationKind::kSigmoid;
  float alpha = 0.f, beta = 0.f;
};

// f(x), without clip. alpha and beta as ONNX defines them per function (LeakyRelu alpha;
// ThresholdedRelu alpha; ScaledTanh alpha * tanh(beta x); HardSigmoid, Affine alpha x + beta;
// Elu alpha).
OT_HOST_DEVICE inline float RnnActivationValue(const RnnActivation& a, float x) {
  UnaryParams p;
  p.alpha = a.alpha;
  p.beta = a.beta;
  switch (a.kind) {
    case RnnActivationKind::kSigmoid: return unary_detail::Sigmoid(x);
    case RnnActivationKind::kTanh: return std::tanh(x);
    case RnnActivationKind::kRelu: return x > 0.f ? x : 0.f;
    case RnnActivationKind::kLeakyRelu: return x >= 0.f ? x : a.alpha * x;
    case RnnActivationKind::kThresholdedRelu: return UnaryForward<UnaryFn::kThresholdedRelu>(x, p);
    case RnnActivationKind::kScaledTanh: return a.alpha * std::tanh(a.beta * x);
    case RnnActivationKind::kHardSigmoid: return UnaryForward<UnaryFn::kHardSigmoid>(x, p);
    case RnnActivationKind::kElu: return UnaryForward<UnaryFn::kElu>(x, p);
    case RnnActivationKind::kSoftsign: return UnaryForward<UnaryFn::kSoftsign>(x, p);
    case RnnActivationKind::kSoftplus: return UnaryForward<UnaryFn::kSoftplus>(x, p);
    case RnnActivationKind::kAffine: return a.alpha * x + a.beta;
  }
  return 0.f;
}

// f'(x), without clip. At kinks as the unary ops (activation_math.h); Relu 0 at 0, LeakyRelu 1.
OT_HOST_DEVICE inline float RnnActivationDerivative(const RnnActivation& a, float x) {
  UnaryParams p;
  p.alpha = a.alpha;
  p.beta = a.beta;
  switch (a.kind) {
    case RnnActivationKind::kSigmoid: {
      const float s = unary_detail::Sigmoid(x);
      return s * (1.f - s);
    }
    case RnnActivationKind::kTanh: {
      const float t = std::tanh(x);
      return 1.f - t * t;
    }
    case RnnActivationKind::kRelu: return x > 0.f ? 1.f : 0.f;
    case RnnActivationKind::kLeakyRelu: return x >= 0.f ? 1.f : a.alpha;
    case RnnActivationKind::kThresholdedRelu: return UnaryDerivative<UnaryFn::kThresholdedRelu>(x, p);
    case RnnActivationKind::kScaledTanh: {
      const float t = std::tanh(a.beta * x);
      return a.alpha * a.beta * (1.f - t * t);
    }
    case RnnActivationKind::kHardSigmoid: return UnaryDerivative<UnaryFn::kHardSigmoid>(x, p);
    case RnnActivationKind::kElu: return UnaryDerivative<UnaryFn::kElu>(x, p);
    case RnnActivationKind::kSoftsign: return UnaryDerivative<UnaryFn::kSoftsign>(x, p);
    case RnnActivationKind::kSoftplus: return UnaryDerivative<UnaryFn::kSoftplus>(x, p);
    case RnnActivationKind::kAffine: return a.alpha;
  }
  return 0.f;
}

// A gate: f(clip(x)), ONNX's clip cutting the pre-activation off at +-clip (infinity: none).
OT_HOST_DEVICE inline float RnnGate(const RnnActivation& a, float clip, float x) {
  return RnnActivationValue(a, x < -clip ? -clip : (x > clip ? clip : x));
}
// Its backward: dy * f'(x), and 0 where clip cut x off (|x| > clip).
OT_HOST_DEVICE inline float RnnGateGrad(const RnnActivation& a, float clip, float x, float dy) {
  return std::fabs(x) > clip ? 0.f : dy * RnnActivationDerivative(a, x);
}

// ---- LSTM ----
// f, g, h as ONNX names them (gates, cell candidate, output of the cell state).
struct LstmCellAttrs {
  RnnActivation f, g, h;
  float clip = INFINITY;
  bool input_forget = false;  // the forget gate is 1 - the input gate
};

// The cell's new state: c = f * c_prev + i * g.
OT_HOST_DEVICE inline float LstmNewCell(float f, float c_prev, float i, float g) { return f * c_prev + i * g; }

struct LstmCellForwardResult {
  float pre_i, pre_o, pre_f;  // the pre-activations with the peephole terms added
  float i, o, f, g;           // the gates' values
  float c, hc, h;             // new cell state, h(c), new hidden state o * h(c)
};

// One unit of one step. a_*: x W^T + h_prev R^T + Wb + Rb of each gate; p_*: the peephole
// weights (0 without P). ONNX: i = f(a_i + p_i c_prev), f = f(a_f + p_f c_prev),
// g = g(a_c), c = f c_prev + i g, o = f(a_o + p_o c), h = o h(c) (no clip on h(c)).
OT_HOST_DEVICE inline LstmCellForwardResult LstmCellForward(const LstmCellAttrs& at, float a_i, float a_o, float a_f,
                                                            float a_c, float c_prev, float p_i, float p_o, float p_f) {
  LstmCellForwardResult r;
  r.pre_i = a_i + p_i * c_prev;
  r.pre_f = a_f + p_f * c_prev;
  r.i = RnnGate(at.f, at.clip, r.pre_i);
  r.f = at.input_forget ? 1.f - r.i : RnnGate(at.f, at.clip, r.pre_f);
  r.g = RnnGate(at.g, at.clip, a_c);
  r.c = LstmNewCell(r.f, c_prev, r.i, r.g);
  r.pre_o = a_o + p_o * r.c;
  r.o = RnnGate(at.f, at.clip, r.pre_o);
  r.hc = RnnGate(at.h, INFINITY, r.c);
  r.h = r.o * r.hc;
  return r;
}

struct LstmCellGrads {
  float da_i, da_o, da_f, da_c;  // gradients of the pre-activations (with peepholes)
  float dc_prev;                 // gradient of c_prev (through c and the peepholes)
};

// The backward of LstmCellForward, from its saved pre-activations (pre_* with the peephole
// terms; pre_c = a_c), c_prev and c. dh: gradient of h (dY plus what the next step sent);
// dc: gradient of c from the next step. The gradient of h_prev is da R (the caller's GEMM);
// the peepholes' is da_i c_prev, da_o c, da_f c_prev (the caller's sums).
OT_HOST_DEVICE inline LstmCellGrads LstmCellBackward(const LstmCellAttrs& at, float pre_i, float pre_o, float pre_f,
                                                     float pre_c, float c_prev, float c, float p_i, float p_o,
                                                     float p_f, float dh, float dc) {
  const float i = RnnGate(at.f, at.clip, pre_i);
  const float f = at.input_forget ? 1.f - i : RnnGate(at.f, at.clip, pre_f);
  const float g = RnnGate(at.g, at.clip, pre_c);
  const float o = RnnGate(at.f, at.clip, pre_o);
  const float hc = RnnGate(at.h, INFINITY, c);
  LstmCellGrads r;
  r.da_o = RnnGateGrad(at.f, at.clip, pre_o, dh * hc);
  const float dct = dc + RnnGateGrad(at.h, INFINITY, c, dh * o) + p_o * r.da_o;
  // With input_forget, f = 1 - i: f's gradient goes to i, and a_f has none.
  r.da_i = RnnGateGrad(at.f, at.clip, pre_i, dct * g - (at.input_forget ? dct * c_prev : 0.f));
  r.da_f = at.input_forget ? 0.f : RnnGateGrad(at.f, at.clip, pre_f, dct * c_prev);
  r.da_c = RnnGateGrad(at.g, at.clip, pre_c, dct * i);
  r.dc_prev = dct * f + p_i * r.da_i + p_f * r.da_f;
  return r;
}

// ---- GRU ----
// z = f(a_z), r = f(a_r) (a_*: x W^T + h_prev R^T + Wb + Rb), then h~ = g(a_h) with
//   linear_before_reset 0: a_h = x Wh^T + Wbh + (r * h_prev) Rh^T + Rbh
//   linear_before_reset 1: a_h = x Wh^T + Wbh + r * (h_prev Rh^T + Rbh)
// and h = (1 - z) h~ + z h_prev. The caller makes a_h (a GEMM between for 0; GruPreH for 1).
struct GruCellAttrs {
  RnnActivation f, g;
  float clip = INFINITY;
};

OT_HOST_DEVICE inline float GruPreH(float a_hx, float r, float lin) { return a_hx + r * lin; }
OT_HOST_DEVICE inline float GruNewHidden(float z, float h_tilde, float h_prev) {
  return (1.f - z) * h_tilde + z * h_prev;
}

struct GruCellGrads {
  float da_z, da_h;  // gradients of the pre-activations a_z and a_h
  float dh_prev;     // the direct part (dh z); the GEMMs through R add the rest
};

// The backward of z, h~ and the blend, from the saved pre-activations: dh is the
// gradient of h. The reset gate's part follows from da_h: GruResetGrad.
OT_HOST_DEVICE inline GruCellGrads GruCellBackward(const GruCellAttrs& at, float pre_z, float pre_h, float h_prev,
                                                   float dh) {
  const float z = RnnGate(at.f, at.clip, pre_z);
  const float ht = RnnGate(at.g, at.clip, pre_h);
  GruCellGrads r;
  r.da_z = RnnGateGrad(at.f, at.clip, pre_z, dh * (h_prev - ht));
  r.da_h = RnnGateGrad(at.g, at.clip, pre_h, dh * (1.f - z));
  r.dh_prev = dh * z;
  return r;
}

// da_r from the gradient dr of the reset gate's value: linear_before_reset 1,
// dr = da_h * (h_prev Rh^T + Rbh); 0, dr = (da_h Rh) * h_prev.
OT_HOST_DEVICE inline float GruResetGrad(const GruCellAttrs& at, float pre_r, float dr) {
  return RnnGateGrad(at.f, at.clip, pre_r, dr);
}

// ---- RNN ----
// h = f(a), a = x W^T + h_prev R^T + Wb + Rb; backward da = dh f'(a).
OT_HOST_DEVICE inline float RnnCellForward(const RnnActivation& f, float clip, float a) { return RnnGate(f, clip, a); }
OT_HOST_DEVICE inline float RnnCellBackward(const RnnActivation& f, float clip, float a, float dh) {
  return RnnGateGrad(f, clip, a, dh);
}

}  // namespace ot
