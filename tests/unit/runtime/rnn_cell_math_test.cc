// runtime/ops/math/rnn_cell_math.h, the per-element math of the recurrent cells that the CUDA
// kernels (runtime/cuda/recurrent/rnn_kernels.cu) run whole and the CPU kernel runs in part:
// every activation with its alpha and beta, clip, and each cell (LSTM with and without
// peepholes, clip, input_forget and other activations; GRU with linear_before_reset 0 and 1;
// RNN), forward and backward, against float64 references written here. The backward is
// checked against central differences of the float64 forward, composed as the CUDA kernels
// compose the functions (the matrix products reduced to one scalar weight).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "runtime/ops/math/rnn_cell_math.h"

namespace ot {
namespace {

using K = RnnActivationKind;

RnnActivation Act(K kind, float alpha = 0.f, float beta = 0.f) {
  RnnActivation a;
  a.kind = kind;
  a.alpha = alpha;
  a.beta = beta;
  return a;
}

// ONNX's definitions of the activation functions, in double.
double RefAct(const RnnActivation& a, double x) {
  const double al = a.alpha, be = a.beta;
  switch (a.kind) {
    case K::kSigmoid: return 1.0 / (1.0 + std::exp(-x));
    case K::kTanh: return std::tanh(x);
    case K::kRelu: return std::max(x, 0.0);
    case K::kLeakyRelu: return x >= 0 ? x : al * x;
    case K::kThresholdedRelu: return x > al ? x : 0.0;
    case K::kScaledTanh: return al * std::tanh(be * x);
    case K::kHardSigmoid: return std::min(1.0, std::max(0.0, al * x + be));
    case K::kElu: return x >= 0 ? x : al * (std::exp(x) - 1.0);
    case K::kSoftsign: return x / (1.0 + std::fabs(x));
    case K::kSoftplus: return std::log(1.0 + std::exp(x));
    case K::kAffine: return al * x + be;
  }
  return 0.0;
}

double RefGate(const RnnActivation& a, double clip, double x) { return RefAct(a, std::min(clip, std::max(-clip, x))); }

// Central difference of f at x[k].
double Diff(const std::function<double(const std::vector<double>&)>& f, std::vector<double> x, size_t k) {
  const double h = 1e-6;
  const double x0 = x[k];
  x[k] = x0 + h;
  const double up = f(x);
  x[k] = x0 - h;
  const double down = f(x);
  return (up - down) / (2 * h);
}

void ExpectClose(double got, double want, const std::string& what) {
  EXPECT_NEAR(got, want, 2e-5 + 2e-4 * std::fabs(want)) << what;
}

std::vector<RnnActivation> AllActivations() {
  return {Act(K::kSigmoid),         Act(K::kTanh),          Act(K::kRelu),     Act(K::kLeakyRelu, 0.1f),
          Act(K::kThresholdedRelu, 0.3f), Act(K::kScaledTanh, 1.3f, 0.7f), Act(K::kHardSigmoid, 0.2f, 0.5f),
          Act(K::kElu, 0.8f),       Act(K::kSoftsign),      Act(K::kSoftplus), Act(K::kAffine, 0.6f, -0.2f)};
}

TEST(RnnCellMath, ActivationsValuesAndDerivatives) {
  for (const RnnActivation& a : AllActivations()) {
    for (double x = -3.01; x < 3.1; x += 0.37) {  // steps avoid the kinks (0, 0.3, HardSigmoid's +-2.5)
      const std::string what = "kind " + std::to_string(static_cast<int>(a.kind)) + " at " + std::to_string(x);
      ExpectClose(RnnActivationValue(a, static_cast<float>(x)), RefAct(a, x), what);
      const double d = (RefAct(a, x + 1e-6) - RefAct(a, x - 1e-6)) / 2e-6;
      ExpectClose(RnnActivationDerivative(a, static_cast<float>(x)), d, what + " derivative");
    }
  }
}

TEST(RnnCellMath, ClipCutsPreActivationsAndTheirGradient) {
  const RnnActivation s = Act(K::kSigmoid);
  const float clip = 0.75f;
  ExpectClose(RnnGate(s, clip, 2.f), RefAct(s, 0.75), "clipped above");
  ExpectClose(RnnGate(s, clip, -9.f), RefAct(s, -0.75), "clipped below");
  ExpectClose(RnnGate(s, clip, 0.5f), RefAct(s, 0.5), "inside");
  EXPECT_EQ(RnnGateGrad(s, clip, 2.f, 1.f), 0.f);
  EXPECT_EQ(RnnGateGrad(s, clip, -0.8f, 1.f), 0.f);
  ExpectClose(RnnGateGrad(s, clip, 0.5f, 2.f), 2 * RefAct(s, 0.5) * (1 - RefAct(s, 0.5)), "gradient inside");
  EXPECT_EQ(RnnGate(s, INFINITY, 3.f), RnnActivationValue(s, 3.f));
}

// ---- LSTM ----
// x = {a_i, a_o, a_f, a_c, c_prev}; returns {c, h}.
std::vector<double> RefLstm(const LstmCellAttrs& at, const double p[3], const std::vector<double>& x) {
  const double clip = at.clip, cp = x[4];
  const double i = RefGate(at.f, clip, x[0] + p[0] * cp);
  const double f = at.input_forget ? 1 - i : RefGate(at.f, clip, x[2] + p[2] * cp);
  const double g = RefGate(at.g, clip, x[3]);
  const double c = f * cp + i * g;
  const double o = RefGate(at.f, clip, x[1] + p[1] * c);
  return {c, o * RefAct(at.h, c)};
}

void CheckLstm(const LstmCellAttrs& at, bool peepholes, const std::string& name) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<double> u(-1.5, 1.5);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<double> x(5);
    for (double& v : x) v = u(gen);
    const double p[3] = {peepholes ? u(gen) : 0.0, peepholes ? u(gen) : 0.0, peepholes ? u(gen) : 0.0};
    // Keep away from clip's edges, where the difference quotient straddles the cut.
    const double pre[4] = {x[0] + p[0] * x[4], 0.0, x[2] + p[2] * x[4], x[3]};
    bool near_edge = false;
    for (double v : pre) near_edge = near_edge || std::fabs(std::fabs(v) - at.clip) < 1e-3;
    if (near_edge) continue;
    std::vector<float> xf(x.begin(), x.end());
    const float pf[3] = {static_cast<float>(p[0]), static_cast<float>(p[1]), static_cast<float>(p[2])};
    const LstmCellForwardResult r = LstmCellForward(at, xf[0], xf[1], xf[2], xf[3], xf[4], pf[0], pf[1], pf[2]);
    const std::vector<double> want = RefLstm(at, p, x);
    const std::string what = name + " trial " + std::to_string(trial);
    ExpectClose(r.c, want[0], what + " c");
    ExpectClose(r.h, want[1], what + " h");
    if (std::fabs(std::fabs(r.pre_o) - at.clip) < 1e-3) continue;
    // Loss wh * h + wc * c.
    const double wh = u(gen), wc = u(gen);
    auto loss = [&](const std::vector<double>& v) {
      const std::vector<double> o = RefLstm(at, p, v);
      return wh * o[1] + wc * o[0];
    };
    const LstmCellGrads gr = LstmCellBackward(at, r.pre_i, r.pre_o, r.pre_f, xf[3], xf[4], r.c, pf[0], pf[1], pf[2],
                                              static_cast<float>(wh), static_cast<float>(wc));
    ExpectClose(gr.da_i, Diff(loss, x, 0), what + " da_i");
    ExpectClose(gr.da_o, Diff(loss, x, 1), what + " da_o");
    ExpectClose(gr.da_f, Diff(loss, x, 2), what + " da_f");
    ExpectClose(gr.da_c, Diff(loss, x, 3), what + " da_c");
    ExpectClose(gr.dc_prev, Diff(loss, x, 4), what + " dc_prev");
  }
}

LstmCellAttrs DefaultLstm() {
  LstmCellAttrs at;
  at.f = Act(K::kSigmoid);
  at.g = Act(K::kTanh);
  at.h = Act(K::kTanh);
  return at;
}

TEST(RnnCellMath, LstmDefault) { CheckLstm(DefaultLstm(), false, "default"); }
TEST(RnnCellMath, LstmPeepholes) { CheckLstm(DefaultLstm(), true, "peepholes"); }
TEST(RnnCellMath, LstmClip) {
  LstmCellAttrs at = DefaultLstm();
  at.clip = 0.9f;
  CheckLstm(at, true, "clip");
}
TEST(RnnCellMath, LstmInputForget) {
  LstmCellAttrs at = DefaultLstm();
  at.input_forget = true;
  CheckLstm(at, true, "input_forget");
}
TEST(RnnCellMath, LstmOtherActivations) {
  LstmCellAttrs at;
  at.f = Act(K::kHardSigmoid, 0.3f, 0.45f);
  at.g = Act(K::kScaledTanh, 1.2f, 0.8f);
  at.h = Act(K::kSoftsign);
  CheckLstm(at, true, "HardSigmoid/ScaledTanh/Softsign");
  at.f = Act(K::kSigmoid);
  at.g = Act(K::kElu, 0.7f);
  at.h = Act(K::kLeakyRelu, 0.2f);
  CheckLstm(at, false, "Sigmoid/Elu/LeakyRelu");
}

// ---- GRU ----
// One unit with the matrix products reduced to a scalar recurrent weight rh and bias rbh:
// x = {a_z, a_r, a_hx (x Wh^T + Wbh), h_prev}; returns h.
double RefGru(const GruCellAttrs& at, bool lbr, double rh, double rbh, const std::vector<double>& x) {
  const double z = RefGate(at.f, at.clip, x[0]), r = RefGate(at.f, at.clip, x[1]), hp = x[3];
  const double a_h = lbr ? x[2] + r * (hp * rh + rbh) : x[2] + (r * hp) * rh + rbh;
  return (1 - z) * RefGate(at.g, at.clip, a_h) + z * hp;
}

void CheckGru(const GruCellAttrs& at, bool lbr, const std::string& name) {
  std::mt19937 gen(11);
  std::uniform_real_distribution<double> u(-1.5, 1.5);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<double> x(4);
    for (double& v : x) v = u(gen);
    const double rh = u(gen), rbh = u(gen), wh = u(gen);
    std::vector<float> xf(x.begin(), x.end());
    const float rhf = static_cast<float>(rh), rbhf = static_cast<float>(rbh);
    // As the CUDA kernels compose them (the caller's GEMMs being the products with rh).
    const float z = RnnGate(at.f, at.clip, xf[0]), r = RnnGate(at.f, at.clip, xf[1]);
    const float lin = xf[3] * rhf + rbhf;
    const float a_h = lbr ? GruPreH(xf[2], r, lin) : xf[2] + (r * xf[3]) * rhf + rbhf;
    const float h = GruNewHidden(z, RnnGate(at.g, at.clip, a_h), xf[3]);
    const std::string what = name + " trial " + std::to_string(trial);
    ExpectClose(h, RefGru(at, lbr, rh, rbh, x), what + " h");
    bool near_edge = false;
    for (double v : {static_cast<double>(xf[0]), static_cast<double>(xf[1]), static_cast<double>(a_h)})
      near_edge = near_edge || std::fabs(std::fabs(v) - at.clip) < 1e-3;
    if (near_edge) continue;
    const GruCellGrads g = GruCellBackward(at, xf[0], a_h, xf[3], static_cast<float>(wh));
    float da_r = 0.f, dh_prev = g.dh_prev;
    if (lbr) {
      da_r = GruResetGrad(at, xf[1], g.da_h * lin);
      dh_prev += g.da_h * r * rhf;  // through h_prev Rh^T
    } else {
      const float drh = g.da_h * rhf;  // da_h Rh
      da_r = GruResetGrad(at, xf[1], drh * xf[3]);
      dh_prev += drh * r;
    }
    auto loss = [&](const std::vector<double>& v) { return wh * RefGru(at, lbr, rh, rbh, v); };
    ExpectClose(g.da_z, Diff(loss, x, 0), what + " da_z");
    ExpectClose(da_r, Diff(loss, x, 1), what + " da_r");
    ExpectClose(g.da_h, Diff(loss, x, 2), what + " da_h");
    ExpectClose(dh_prev, Diff(loss, x, 3), what + " dh_prev");
  }
}

GruCellAttrs DefaultGru() {
  GruCellAttrs at;
  at.f = Act(K::kSigmoid);
  at.g = Act(K::kTanh);
  return at;
}

TEST(RnnCellMath, GruLinearBeforeReset0) { CheckGru(DefaultGru(), false, "lbr 0"); }
TEST(RnnCellMath, GruLinearBeforeReset1) { CheckGru(DefaultGru(), true, "lbr 1"); }
TEST(RnnCellMath, GruClipAndOtherActivations) {
  GruCellAttrs at = DefaultGru();
  at.clip = 0.8f;
  CheckGru(at, false, "clip lbr 0");
  CheckGru(at, true, "clip lbr 1");
  at.f = Act(K::kHardSigmoid, 0.25f, 0.5f);
  at.g = Act(K::kSoftplus);
  at.clip = INFINITY;
  CheckGru(at, false, "HardSigmoid/Softplus lbr 0");
  CheckGru(at, true, "HardSigmoid/Softplus lbr 1");
}

// ---- RNN ----
TEST(RnnCellMath, RnnEveryActivationWithAndWithoutClip) {
  for (const RnnActivation& a : AllActivations())
    for (float clip : {INFINITY, 1.1f})
      for (double x = -2.95; x < 3.0; x += 0.41) {
        const std::string what = "kind " + std::to_string(static_cast<int>(a.kind)) + " clip " +
                                 std::to_string(clip) + " at " + std::to_string(x);
        ExpectClose(RnnCellForward(a, clip, static_cast<float>(x)), RefGate(a, clip, x), what);
        const double d = (RefGate(a, clip, x + 1e-6) - RefGate(a, clip, x - 1e-6)) / 2e-6;
        ExpectClose(RnnCellBackward(a, clip, static_cast<float>(x), 0.7f), 0.7 * d, what + " backward");
      }
}

}  // namespace
}  // namespace ot
