// Finite-difference gradient check shared by the gradient tests.
#include "tests/common/grad_check.h"

#include <algorithm>
#include <cmath>
#include <iostream>

#include <gtest/gtest.h>

#include "runtime/executor/executor.h"

namespace ot {
namespace testing {

// Max over parameters of |analytic - numeric| / (1e-3 + |numeric|) style error.
void ExpectGradientsMatchFiniteDifferences(const TrainingGraph& tg, const std::map<std::string, Tensor>& feeds,
                                           float eps, double tol) {
  Executor exec(tg.model);
  std::vector<std::string> fetch = {tg.loss};
  fetch.insert(fetch.end(), tg.grads.begin(), tg.grads.end());
  std::vector<Tensor> out = exec.Run(feeds, fetch);
  double worst = 0;
  for (size_t p = 0; p < tg.params.size(); ++p) {
    HostTensor analytic = out[p + 1].ToHost();
    Tensor* w = exec.FindState(tg.params[p]);
    ASSERT_NE(w, nullptr);
    for (int64_t i = 0; i < w->numel(); ++i) {
      float orig = w->data<float>()[i];
      w->data<float>()[i] = orig + eps;
      double up = exec.Run(feeds, {tg.loss})[0].data<float>()[0];
      w->data<float>()[i] = orig - eps;
      double down = exec.Run(feeds, {tg.loss})[0].data<float>()[0];
      w->data<float>()[i] = orig;
      double numeric = (up - down) / (2 * eps);
      double a = analytic.Data<float>()[i];
      double err = std::fabs(a - numeric) / (1e-2 + std::fabs(numeric));
      worst = std::max(worst, err);
      EXPECT_LT(err, tol) << tg.params[p] << "[" << i << "]: analytic " << a << ", numeric " << numeric;
    }
  }
  std::cout << "finite differences: worst relative error " << worst << "\n";
}

void AddWeightedSumLoss(ModelBuilder& b, const std::string& y, std::vector<int64_t> dims) {
  HostTensor w(DType::kFloat32, dims, "loss_w");
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int64_t i = 0; i < w.NumElements(); ++i) w.Data<float>()[i] = u(b.rng());
  b.Const(w);
  b.Op("Mul", {y, "loss_w"}, "weighted");
  b.Op("ReduceSum", {"weighted"}, "loss").SetInt("keepdims", 0);
  b.Output("loss", {});
}

TrainingGraph TrainWithWeightedSumLoss(ModelBuilder& b, const std::string& y, std::vector<int64_t> dims,
                                       std::vector<std::string> freeze) {
  AddWeightedSumLoss(b, y, std::move(dims));
  AutodiffOptions opts;
  opts.freeze = std::move(freeze);
  opts.freeze.push_back("loss_w");
  return BuildTrainingGraph(b.Build(), opts);
}

TrainingGraph TrainFrozenLossWeights(const Model& m, bool fuse) {
  AutodiffOptions opts;
  opts.freeze = {"loss_w"};
  opts.fuse = fuse;
  return BuildTrainingGraph(m, opts);
}

void ExpectSameLossAndGradients(const TrainingGraph& a, const TrainingGraph& b, double rtol) {
  ASSERT_EQ(a.params, b.params);
  std::vector<std::string> fa = {a.loss}, fb = {b.loss};
  fa.insert(fa.end(), a.grads.begin(), a.grads.end());
  fb.insert(fb.end(), b.grads.begin(), b.grads.end());
  Executor ea(a.model), eb(b.model);
  const std::vector<Tensor> ya = ea.Run({}, fa), yb = eb.Run({}, fb);
  for (size_t i = 0; i < ya.size(); ++i) {
    const HostTensor ta = ya[i].ToHost(), tb = yb[i].ToHost();
    ASSERT_EQ(ta.dims, tb.dims) << fa[i];
    double scale = 0;
    for (int64_t k = 0; k < tb.NumElements(); ++k) scale = std::max(scale, std::fabs(double(tb.Data<float>()[k])));
    for (int64_t k = 0; k < ta.NumElements(); ++k) {
      if (rtol == 0)
        ASSERT_EQ(ta.Data<float>()[k], tb.Data<float>()[k]) << fa[i] << "[" << k << "]";
      else
        ASSERT_NEAR(ta.Data<float>()[k], tb.Data<float>()[k], rtol * (1 + scale)) << fa[i] << "[" << k << "]";
    }
  }
}

}  // namespace testing
}  // namespace ot
