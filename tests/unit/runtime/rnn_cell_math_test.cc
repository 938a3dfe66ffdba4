// runtime/ops/math/rnn_cell_math.h, the per-element math of the recurrent cells that the CUDA
// kernels (runtime/cuda/recurrent/rnn_kernels.cu) run whole and the CPU kernel runs in part:
// every activation with its alpha and beta, clip, and each cell (LSTM with and without
// peepholes, clip, input_forget and other activations; GRU with linear_before_reset 0 and 1;
// RNN), forward and backward, against float64 references written here. The backward is
// checked against central differences of the float64 forward, composed as the CUDA kernels
// compose the functions (the matrix products reduced to one scalar weight).
//
// Then runtime/ops/math/rnn_steps.h, the CUDA runtime's step loop (RnnStepDriver and the
// kernels' per-element bodies), run here on a host backend (plain loops, float64 GEMMs)
// against the CPU runtime's LSTM/GRU/RNN and gradient kernels for every variant: what the
// CUDA kernels compute but for the launches and cuBLAS.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "graph/op_domains.h"
#include "runtime/ops/math/rnn_cell_math.h"
#include "runtime/ops/math/rnn_steps.h"
#include "runtime/ops/shapes/rnn_shapes.h"
#include "tests/cuda/cuda_node_case.h"  // RunOn, NodeSpec, RandomTensor: no CUDA in it

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

// ---- the CUDA step loop on the host ----

// RnnStepDriver's backend on the host: float64 GEMMs, the per-element bodies in loops.
struct HostSteps {
  void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
            int64_t ldb, float beta, float* c, int64_t ldc) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = beta == 0.f ? 0.0 : static_cast<double>(c[i * ldc + j]);
        for (int64_t p = 0; p < k; ++p)
          acc += static_cast<double>(ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
        c[i * ldc + j] = static_cast<float>(acc);
      }
  }
  void Zero(float* p, int64_t count) {
    if (p) std::fill(p, p + count, 0.f);
  }
  static int64_t Units(const RnnStepGeometry& g) { return g.batch * g.hidden; }
  void LoadState(const RnnStepGeometry& g, const float* src, float* dst) {
    for (int64_t i = 0; i < Units(g); ++i) RnnLoadStateAt(g, src, dst, i);
  }
  void StoreState(const RnnStepGeometry& g, const float* src, float* dst) {
    for (int64_t i = 0; i < Units(g); ++i) RnnStoreStateAt(g, src, dst, i);
  }
  void ForwardStep(const RnnStepGeometry& g, int64_t s, const int* lens, const float* xw, const float* hr,
                   const RnnStepParams& prm, float* h, float* c, float* pre_batch, const RnnSaved& sv, float* y,
                   float* rh) {
    for (int64_t i = 0; i < Units(g); ++i) RnnForwardStepAt(g, s, lens, xw, hr, prm, h, c, pre_batch, sv, y, rh, i);
  }
  void GruForwardFinish(const RnnStepGeometry& g, int64_t s, const int* lens, const float* xw, const float* hrh,
                        const RnnStepParams& prm, float* h, float* pre_batch, const RnnSaved& sv, float* y) {
    for (int64_t i = 0; i < Units(g); ++i) RnnGruForwardFinishAt(g, s, lens, xw, hrh, prm, h, pre_batch, sv, y, i);
  }
  void BackwardStep(const RnnStepGeometry& g, int64_t s, const int* lens, const float* dy, const RnnSaved& sv,
                    const RnnStepParams& prm, const float* dh, float* dc, float* dhn, float* dg, float* dax,
                    float* dah) {
    for (int64_t i = 0; i < Units(g); ++i) RnnBackwardStepAt(g, s, lens, dy, sv, prm, dh, dc, dhn, dg, dax, dah, i);
  }
  void GruResetBackward(const RnnStepGeometry& g, int64_t s, const int* lens, const float* drh, const RnnSaved& sv,
                        float* dhn, float* dg, float* dax) {
    for (int64_t i = 0; i < Units(g); ++i) RnnGruResetBackwardAt(g, s, lens, drh, sv, dhn, dg, dax, i);
  }
  void BiasGrad(int64_t rows, int64_t gh, const float* dax, const float* dah, float* db) {
    for (int64_t j = 0; j < gh; ++j) RnnBiasGradAt(rows, gh, dax, dah, db, j);
  }
  void PeepholeGrad(int64_t rows, int64_t hidden, const float* dax, const float* cprev, const float* cnew, float* dp) {
    for (int64_t k = 0; k < 3 * hidden; ++k) RnnPeepholeGradAt(rows, hidden, dax, cprev, cnew, dp, k);
  }
};

using cuda_case::Ints;

// One node's variant: the ONNX attributes for the CPU runtime, and the same as an RnnSpec
// (with the activations already parsed) for the host driver.
struct Variant {
  RnnCell cell = RnnCell::kLSTM;
  int64_t seq = 5, batch = 3, input = 4, hidden = 6;
  std::string direction = "forward";
  int64_t layout = 0;
  std::vector<int32_t> lens;  // empty: no sequence_lens
  bool bias = true, init = false, peepholes = false, input_forget = false, lbr = false;
  float clip = 0.f;  // 0: none
  // Per direction (repeated for bidirectional), with alpha and beta; empty: the defaults.
  std::vector<std::string> act_names;
  std::vector<RnnActivation> acts;

  std::string Op() const { return cell == RnnCell::kLSTM ? "LSTM" : cell == RnnCell::kGRU ? "GRU" : "RNN"; }
  int64_t Gates() const { return cell == RnnCell::kLSTM ? 4 : cell == RnnCell::kGRU ? 3 : 1; }
  int64_t Dirs() const { return direction == "bidirectional" ? 2 : 1; }
  int NumInputs() const { return cell == RnnCell::kLSTM ? 8 : 6; }
  Ints State() const { return layout == 0 ? Ints{Dirs(), batch, hidden} : Ints{batch, Dirs(), hidden}; }
  Ints YShape() const { return layout == 0 ? Ints{seq, Dirs(), batch, hidden} : Ints{batch, seq, Dirs(), hidden}; }

  void Attrs(Node& n) const {
    n.SetInt("hidden_size", hidden);
    n.SetString("direction", direction);
    if (layout) n.SetInt("layout", layout);
    if (clip > 0.f) n.SetFloat("clip", clip);
    if (input_forget) n.SetInt("input_forget", 1);
    if (cell == RnnCell::kGRU) n.SetInt("linear_before_reset", lbr ? 1 : 0);
    if (!act_names.empty()) {
      // Every direction's names; alpha and beta listed for the functions that take them, in order.
      Attribute a;
      a.kind = Attribute::Kind::kStrings;
      std::vector<float> alphas, betas;
      for (int64_t d = 0; d < Dirs(); ++d)
        for (size_t k = 0; k < acts.size(); ++k) {
          a.strings.push_back(act_names[k]);
          const K kind = acts[k].kind;
          if (kind == K::kLeakyRelu || kind == K::kThresholdedRelu || kind == K::kScaledTanh ||
              kind == K::kHardSigmoid || kind == K::kElu || kind == K::kAffine)
            alphas.push_back(acts[k].alpha);
          if (kind == K::kScaledTanh || kind == K::kHardSigmoid || kind == K::kAffine) betas.push_back(acts[k].beta);
        }
      n.attrs["activations"] = a;
      if (!alphas.empty()) n.SetFloats("activation_alpha", alphas);
      if (!betas.empty()) n.SetFloats("activation_beta", betas);
    }
  }

  RnnSpec Spec() const {
    RnnSpec s;
    s.cell = cell;
    s.seq = seq;
    s.batch = batch;
    s.input = input;
    s.hidden = hidden;
    s.dirs = Dirs();
    s.reverse = direction == "reverse";
    s.gates = Gates();
    s.layout = layout;
    s.has_clip = clip > 0.f;
    s.clip = clip;
    s.linear_before_reset = lbr;
    s.input_forget = input_forget;
    s.acts_per_dir = cell == RnnCell::kLSTM ? 3 : cell == RnnCell::kGRU ? 2 : 1;
    std::vector<RnnActivation> per_dir = acts;
    if (per_dir.empty()) {
      if (cell == RnnCell::kLSTM) per_dir = {Act(K::kSigmoid), Act(K::kTanh), Act(K::kTanh)};
      if (cell == RnnCell::kGRU) per_dir = {Act(K::kSigmoid), Act(K::kTanh)};
      if (cell == RnnCell::kRNN) per_dir = {Act(K::kTanh)};
    }
    for (int64_t d = 0; d < Dirs(); ++d) s.acts.insert(s.acts.end(), per_dir.begin(), per_dir.end());
    s.y = YShape();
    s.y_h = State();
    return s;
  }

  // X, W, R, B, sequence_lens, initial_h[, initial_c, P], undefined where absent.
  std::vector<HostTensor> Inputs() const {
    const int64_t gh = Gates() * hidden, d = Dirs();
    std::vector<HostTensor> in;
    in.push_back(cuda_case::RandomTensor(layout == 0 ? Ints{seq, batch, input} : Ints{batch, seq, input}, 1));
    in.push_back(cuda_case::RandomTensor({d, gh, input}, 2, -0.6f, 0.6f));
    in.push_back(cuda_case::RandomTensor({d, gh, hidden}, 3, -0.6f, 0.6f));
    in.push_back(bias ? cuda_case::RandomTensor({d, 2 * gh}, 4, -0.5f, 0.5f) : HostTensor());
    in.push_back(lens.empty() ? HostTensor() : HostTensor::FromVector(lens, {static_cast<int64_t>(lens.size())}));
    in.push_back(init ? cuda_case::RandomTensor(State(), 5) : HostTensor());
    if (cell == RnnCell::kLSTM) {
      in.push_back(init ? cuda_case::RandomTensor(State(), 6) : HostTensor());
      in.push_back(peepholes ? cuda_case::RandomTensor({d, 3 * hidden}, 7) : HostTensor());
    }
    return in;
  }
};

const float* Data(const HostTensor& t) { return t.dtype == DType::kUndefined ? nullptr : t.Data<float>(); }

// Runs the variant's forward and gradient through RnnStepDriver<HostSteps> and through the
// CPU runtime, and compares every output.
void CheckDriverAgainstCpu(const Variant& v) {
  const RnnSpec spec = v.Spec();
  const std::vector<HostTensor> in = v.Inputs();
  const bool lstm = v.cell == RnnCell::kLSTM;
  const int64_t rows = v.seq * v.batch, GH = v.Gates() * v.hidden, BH = v.batch * v.hidden, B = v.batch;
  // The driver's buffers.
  std::vector<float> xw(rows * GH), hr(B * GH), pre_batch(B * GH), h(BH), c(BH), rh(BH), hrh(BH), pre(rows * GH),
      hprev(rows * v.hidden), cprev(rows * v.hidden), cnew(rows * v.hidden), extra(rows * v.hidden), dax(rows * GH),
      dah(rows * GH), dg(B * GH), dh(BH), dc(BH), dhn(BH), drh(BH);
  std::vector<int> lens(B, static_cast<int>(v.seq));
  if (!v.lens.empty()) lens.assign(v.lens.begin(), v.lens.end());
  RnnStepBuffers buf{xw.data(), hr.data(), pre_batch.data(), h.data(), c.data(), rh.data(), hrh.data(),
                     RnnSaved{pre.data(), hprev.data(), lstm ? cprev.data() : nullptr, lstm ? cnew.data() : nullptr,
                              v.cell == RnnCell::kGRU ? extra.data() : nullptr},
                     dax.data(), dah.data(), dg.data(), dh.data(), dc.data(), dhn.data(), drh.data(), lens.data(),
                     *std::max_element(lens.begin(), lens.end())};
  RnnStepInputs si;
  si.x = Data(in[0]);
  si.w = Data(in[1]);
  si.r = Data(in[2]);
  si.b = Data(in[3]);
  si.init_h = Data(in[5]);
  if (lstm) {
    si.init_c = Data(in[6]);
    si.p = Data(in[7]);
  }
  // Forward.
  std::vector<float> y(static_cast<size_t>(NumElements(spec.y)), 0.f), y_h(static_cast<size_t>(NumElements(spec.y_h))),
      y_c(y_h.size());
  HostSteps steps;
  for (int64_t d = 0; d < spec.dirs; ++d)
    RnnStepDriver<HostSteps>(steps, RnnDirectionGeometry(spec, d), buf).Forward(si, y.data(), y_h.data(),
                                                                              lstm ? y_c.data() : nullptr, false);
  std::vector<HostTensor> trimmed = in;
  while (trimmed.back().dtype == DType::kUndefined) trimmed.pop_back();
  const int n_out = lstm ? 3 : 2;
  cuda_case::NodeSpec fwd{v.Op(), 14, [v](Node& n) { v.Attrs(n); }, std::vector<bool>(n_out, true)};
  const std::vector<HostTensor> cpu = cuda_case::RunOn(Device::CPU(), fwd, trimmed);
  auto compare = [&](const std::vector<float>& got, const HostTensor& want, const std::string& what, double tol) {
    ASSERT_EQ(static_cast<int64_t>(got.size()), want.NumElements()) << what;
    for (size_t k = 0; k < got.size(); ++k) {
      const double w = want.Data<float>()[k];
      ASSERT_NEAR(got[k], w, tol + tol * std::fabs(w)) << what << " [" << k << "] of " << v.Op() << " "
                                                       << v.direction;
    }
  };
  compare(y, cpu[0], "Y", 2e-5);
  compare(y_h, cpu[1], "Y_h", 2e-5);
  if (lstm) compare(y_c, cpu[2], "Y_c", 2e-5);
  // Gradient, with every output gradient given.
  const HostTensor gy = cuda_case::RandomTensor(v.YShape(), 21), gh = cuda_case::RandomTensor(v.State(), 22),
                   gc = cuda_case::RandomTensor(v.State(), 23);
  std::vector<std::vector<float>> outs;
  outs.emplace_back(static_cast<size_t>(in[0].NumElements()), 0.f);
  outs.emplace_back(static_cast<size_t>(in[1].NumElements()));
  outs.emplace_back(static_cast<size_t>(in[2].NumElements()));
  outs.emplace_back(static_cast<size_t>(spec.dirs * 2 * GH));
  outs.emplace_back(y_h.size());
  if (lstm) {
    outs.emplace_back(y_h.size());
    outs.emplace_back(static_cast<size_t>(spec.dirs * 3 * v.hidden));
  }
  RnnStepGrads g;
  g.dx = outs[0].data();
  g.dw = outs[1].data();
  g.dr = outs[2].data();
  g.db = outs[3].data();
  g.dinit_h = outs[4].data();
  if (lstm) {
    g.dinit_c = outs[5].data();
    g.dp = outs[6].data();
  }
  for (int64_t d = 0; d < spec.dirs; ++d) {
    RnnStepDriver<HostSteps> driver(steps, RnnDirectionGeometry(spec, d), buf);
    driver.Forward(si, nullptr, nullptr, nullptr, true);
    driver.Backward(si, gy.Data<float>(), gh.Data<float>(), lstm ? gc.Data<float>() : nullptr, g);
  }
  std::vector<HostTensor> gin = in;
  gin.push_back(gy);
  gin.push_back(gh);
  if (lstm) gin.push_back(gc);
  gin.push_back(cpu[0]);
  cuda_case::NodeSpec grad{v.Op() + "Grad", 14, [v](Node& n) { v.Attrs(n); },
                           std::vector<bool>(outs.size(), true), kGradDomain};
  const std::vector<HostTensor> cpu_grad = cuda_case::RunOn(Device::CPU(), grad, gin);
  const char* names[] = {"dX", "dW", "dR", "dB", "dinitial_h", "dinitial_c", "dP"};
  for (size_t k = 0; k < outs.size(); ++k) compare(outs[k], cpu_grad[k], names[k], 2e-4);
}

TEST(RnnStepDriver, LstmVariantsMatchTheCpuKernel) {
  Variant v;
  CheckDriverAgainstCpu(v);
  v.direction = "bidirectional";
  v.init = true;
  v.peepholes = true;
  CheckDriverAgainstCpu(v);
  v.direction = "reverse";
  v.lens = {5, 0, 3};
  v.layout = 1;
  CheckDriverAgainstCpu(v);
  v.direction = "bidirectional";
  v.clip = 0.7f;
  v.input_forget = true;
  v.act_names = {"HardSigmoid", "ScaledTanh", "Softsign"};
  v.acts = {Act(K::kHardSigmoid, 0.3f, 0.45f), Act(K::kScaledTanh, 1.2f, 0.8f), Act(K::kSoftsign)};
  CheckDriverAgainstCpu(v);
}

TEST(RnnStepDriver, GruVariantsMatchTheCpuKernel) {
  for (bool lbr : {false, true}) {
    Variant v;
    v.cell = RnnCell::kGRU;
    v.lbr = lbr;
    CheckDriverAgainstCpu(v);
    v.direction = "bidirectional";
    v.init = true;
    v.lens = {2, 5, 0};
    CheckDriverAgainstCpu(v);
    v.layout = 1;
    v.direction = "reverse";
    v.bias = false;
    CheckDriverAgainstCpu(v);
    v.bias = true;
    v.clip = 0.8f;
    v.act_names = {"HardSigmoid", "Softplus"};
    v.acts = {Act(K::kHardSigmoid, 0.25f, 0.5f), Act(K::kSoftplus)};
    CheckDriverAgainstCpu(v);
  }
}

TEST(RnnStepDriver, RnnVariantsMatchTheCpuKernel) {
  Variant v;
  v.cell = RnnCell::kRNN;
  CheckDriverAgainstCpu(v);
  v.direction = "bidirectional";
  v.init = true;
  v.lens = {4, 0, 5};
  v.act_names = {"Relu"};
  v.acts = {Act(K::kRelu)};
  CheckDriverAgainstCpu(v);
  v.layout = 1;
  v.clip = 0.9f;
  v.act_names = {"Affine"};
  v.acts = {Act(K::kAffine, 0.5f, 0.1f)};
  CheckDriverAgainstCpu(v);
}

}  // namespace
}  // namespace ot
