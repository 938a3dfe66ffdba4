// Synchronised batch normalization (runtime/cpu/norm/sync_batchnorm.h) on two replicas, each
// a thread holding half of a batch and summing through an in-process CrossReplicaSum:
// the statistics, dX, and the replicas' dScale and dBias added, equal batch normalization
// of the whole batch computed here in long double (PyTorch's BatchNorm backward formula),
// in every layout a normalization sees on the CPU (plain, channels-last, channel-blocked
// with a padded tail). One replica (no CrossReplicaSum) is plain training-mode BatchNorm.
#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "graph/autodiff/autodiff.h"
#include "graph/autodiff/gradient_registry.h"
#include "graph/exports/sync_batch_norm.h"
#include "runtime/cpu/norm/sync_batchnorm.h"
#include "runtime/executor/executor.h"
#include "tests/common/grad_check.h"

namespace ot {
namespace {

using Ints = std::vector<int64_t>;
using tag = dnnl::memory::format_tag;

// Sums over `replicas` threads: each call blocks until every thread made its call.
class ThreadReplicas {
 public:
  explicit ThreadReplicas(int replicas) : replicas_(replicas) {}
  void Sum(double* data, size_t count) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (arrived_ == 0) sum_.assign(count, 0.0);
    for (size_t i = 0; i < count; ++i) sum_[i] += data[i];
    const uint64_t round = round_;
    if (++arrived_ == replicas_) {
      result_ = sum_;
      arrived_ = 0;
      ++round_;
      done_.notify_all();
    } else {
      done_.wait(lock, [&] { return round_ != round; });
    }
    std::copy(result_.begin(), result_.end(), data);
  }

 private:
  const int replicas_;
  std::mutex mutex_;
  std::condition_variable done_;
  int arrived_ = 0;
  uint64_t round_ = 0;
  std::vector<double> sum_, result_;
};

class ThreadReplicaSum final : public CrossReplicaSum {
 public:
  ThreadReplicaSum(ThreadReplicas& all, int replicas) : all_(all), replicas_(replicas) {}
  int replicas() const override { return replicas_; }
  void SumInPlace(double* data, size_t count) override { all_.Sum(data, count); }

 private:
  ThreadReplicas& all_;
  int replicas_;
};

std::vector<float> Random(size_t n, uint32_t seed, float offset, float spread) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = offset + spread * d(gen);
  return v;
}

// Plain data <-> the layout under test, by oneDNN's reorder; padding is NaN.
std::vector<float> ToLayout(const std::vector<float>& plain, const dnnl::memory::desc& from,
                            const dnnl::memory::desc& to) {
  std::vector<float> laid(to.get_size() / sizeof(float), std::nanf(""));
  dnnl::memory src(from, cpu::Engine(), const_cast<float*>(plain.data())), dst(to, cpu::Engine(), laid.data());
  dnnl::reorder(src, dst).execute(cpu::Stream(), src, dst);
  cpu::Stream().wait();
  return laid;
}

std::vector<float> ToPlain(std::vector<float>& laid, const dnnl::memory::desc& from, const dnnl::memory::desc& to,
                           size_t count) {
  std::vector<float> plain(count);
  dnnl::memory src(from, cpu::Engine(), laid.data()), dst(to, cpu::Engine(), plain.data());
  dnnl::reorder(src, dst).execute(cpu::Stream(), src, dst);
  cpu::Stream().wait();
  return plain;
}

struct Reference {
  std::vector<double> mean, var, dscale, dbias, dx;
};

// Whole-batch statistics, and the gradient with the given float32 statistics, in long double.
Reference WholeBatch(const std::vector<float>& x, const std::vector<float>& dy, const Ints& shape,
                     const std::vector<float>& scale, const std::vector<float>& mean_f,
                     const std::vector<float>& var_f, float eps) {
  const int64_t n = shape[0], c = shape[1], inner = static_cast<int64_t>(x.size()) / (n * c);
  const long double count = static_cast<long double>(n * inner);
  Reference r;
  auto at = [&](int64_t b, int64_t ch, int64_t i) { return static_cast<size_t>((b * c + ch) * inner + i); };
  r.dx.resize(x.size());
  for (int64_t ch = 0; ch < c; ++ch) {
    long double s = 0, sq = 0, sdy = 0, sdyx = 0;
    for (int64_t b = 0; b < n; ++b)
      for (int64_t i = 0; i < inner; ++i) s += x[at(b, ch, i)];
    const long double mu = s / count;
    for (int64_t b = 0; b < n; ++b)
      for (int64_t i = 0; i < inner; ++i) sq += (x[at(b, ch, i)] - mu) * (x[at(b, ch, i)] - mu);
    r.mean.push_back(static_cast<double>(mu));
    r.var.push_back(static_cast<double>(sq / count));
    const size_t k = static_cast<size_t>(ch);
    const long double m = mean_f[k], invstd = 1.0L / std::sqrt(static_cast<long double>(var_f[k]) + eps);
    for (int64_t b = 0; b < n; ++b)
      for (int64_t i = 0; i < inner; ++i) {
        sdy += dy[at(b, ch, i)];
        sdyx += dy[at(b, ch, i)] * (x[at(b, ch, i)] - m);
      }
    r.dbias.push_back(static_cast<double>(sdy));
    r.dscale.push_back(static_cast<double>(sdyx * invstd));
    for (int64_t b = 0; b < n; ++b)
      for (int64_t i = 0; i < inner; ++i)
        r.dx[at(b, ch, i)] = static_cast<double>(scale[k] * invstd *
                                                 (dy[at(b, ch, i)] - sdy / count -
                                                  (x[at(b, ch, i)] - m) * invstd * invstd * (sdyx / count)));
  }
  return r;
}

double MaxAbs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

struct LayoutCase {
  Ints shape;
  tag layout;
  const char* name;
};

TEST(SyncBatchNorm, TwoReplicasEqualTheWholeBatchInEveryLayout) {
  const std::vector<LayoutCase> cases = {
      {{8, 19, 5, 4}, tag::nchw, "nchw"},       {{8, 19, 5, 4}, tag::nhwc, "nhwc"},
      {{8, 19, 5, 4}, tag::nChw8c, "nChw8c"},   {{6, 32, 3, 3}, tag::nChw16c, "nChw16c"},
      {{10, 21}, tag::nc, "nc"},                {{4, 12, 2, 3, 5}, tag::nCdhw16c, "nCdhw16c"},
  };
  const float eps = 1e-5f;
  for (const LayoutCase& lc : cases) {
    SCOPED_TRACE(lc.name);
    const int64_t n = lc.shape[0], c = lc.shape[1];
    size_t total = 1;
    for (int64_t d : lc.shape) total *= static_cast<size_t>(d);
    const std::vector<float> x = Random(total, 3, 2.f, 1.5f), dy = Random(total, 4, 0.1f, 1.f);
    const std::vector<float> scale = Random(static_cast<size_t>(c), 5, 1.f, 0.3f);
    // Each replica: half of the batch (dims[0] = n / 2), in the layout under test.
    Ints half_shape = lc.shape;
    half_shape[0] = n / 2;
    const size_t half = total / 2;
    const dnnl::memory::dims dims(half_shape.begin(), half_shape.end());
    const dnnl::memory::desc plain = cpu::PlainDesc(half_shape, DType::kFloat32);
    const dnnl::memory::desc laid(dims, dnnl::memory::data_type::f32, lc.layout);
    struct Replica {
      std::vector<float> x, dy, dx, mean, var, dscale, dbias;
    };
    std::vector<Replica> reps(2);
    for (size_t r = 0; r < 2; ++r) {
      reps[r].x = ToLayout(std::vector<float>(x.begin() + r * half, x.begin() + (r + 1) * half), plain, laid);
      reps[r].dy = ToLayout(std::vector<float>(dy.begin() + r * half, dy.begin() + (r + 1) * half), plain, laid);
      reps[r].dx.assign(reps[r].x.size(), std::nanf(""));
      for (auto* v : {&reps[r].mean, &reps[r].var, &reps[r].dscale, &reps[r].dbias}) v->assign(c, 0.f);
    }
    ThreadReplicas all(2);
    std::vector<std::thread> threads;
    for (size_t r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        ThreadReplicaSum sum(all, 2);
        Replica& p = reps[r];
        cpu::GlobalChannelStatistics(laid, p.x.data(), &sum, p.mean.data(), p.var.data());
        cpu::GlobalBatchNormGrad(laid, p.dy.data(), p.x.data(), scale.data(), p.mean.data(), p.var.data(), eps, &sum,
                                 p.dx.data(), p.dscale.data(), p.dbias.data());
      });
    for (auto& t : threads) t.join();
    const Reference ref = WholeBatch(x, dy, lc.shape, scale, reps[0].mean, reps[0].var, eps);
    for (int64_t k = 0; k < c; ++k) {
      const size_t i = static_cast<size_t>(k);
      EXPECT_EQ(reps[0].mean[i], reps[1].mean[i]) << "channel " << k;
      EXPECT_EQ(reps[0].var[i], reps[1].var[i]) << "channel " << k;
      EXPECT_NEAR(reps[0].mean[i], ref.mean[i], 1e-6 * std::abs(ref.mean[i])) << "mean, channel " << k;
      EXPECT_NEAR(reps[0].var[i], ref.var[i], 2e-7 * ref.var[i]) << "variance, channel " << k;
      // Each replica's own dScale and dBias; the gradient allreduce adds (averages) them.
      EXPECT_NEAR(double(reps[0].dbias[i]) + reps[1].dbias[i], ref.dbias[i], 1e-6 * MaxAbs(ref.dbias)) << k;
      EXPECT_NEAR(double(reps[0].dscale[i]) + reps[1].dscale[i], ref.dscale[i], 1e-6 * MaxAbs(ref.dscale)) << k;
    }
    const double dx_tol = 1e-6 * MaxAbs(ref.dx);
    double worst = 0;
    for (size_t r = 0; r < 2; ++r) {
      for (float v : reps[r].dx) EXPECT_FALSE(std::isnan(v)) << "dX left padding or data unwritten";
      const std::vector<float> got = ToPlain(reps[r].dx, laid, plain, half);
      for (size_t i = 0; i < half; ++i) worst = std::max(worst, std::abs(got[i] - ref.dx[r * half + i]));
    }
    EXPECT_LE(worst, dx_tol) << "dX of the whole batch's BatchNorm";
  }
}

// Without a CrossReplicaSum the same functions are one replica's BatchNorm: a batch split
// in two gives different statistics (the test above is not trivially true).
TEST(SyncBatchNorm, WithoutReplicasTheStatisticsAreLocal) {
  const Ints shape{4, 3, 5, 5};
  const std::vector<float> x = Random(300, 9, 0.f, 1.f);
  const dnnl::memory::desc half_md = cpu::PlainDesc(Ints{2, 3, 5, 5}, DType::kFloat32);
  std::vector<float> m0(3), v0(3), m1(3), v1(3);
  cpu::GlobalChannelStatistics(half_md, x.data(), nullptr, m0.data(), v0.data());
  cpu::GlobalChannelStatistics(half_md, x.data() + 150, nullptr, m1.data(), v1.data());
  const Reference whole = WholeBatch(x, x, shape, {1, 1, 1}, m0, v0, 1e-5f);
  const Reference first = WholeBatch(std::vector<float>(x.begin(), x.begin() + 150), x, Ints{2, 3, 5, 5}, {1, 1, 1},
                                     m0, v0, 1e-5f);
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_NEAR(m0[k], first.mean[k], 1e-6);
    EXPECT_GT(std::abs(m0[k] - whole.mean[k]) + std::abs(m1[k] - whole.mean[k]), 1e-3);
  }
}

// Conv -> BatchNorm layer -> Relu -> GlobalAveragePool, against weights standardised by a
// BatchNormalization over computed statistics (no running state).
TEST(SyncBatchNorm, RewriteConvertsLayersOnlyAndKeepsGradients) {
  testing::ModelBuilder b;
  b.Input("x", DType::kFloat32, {4, 2, 3, 3});
  b.Param("w", {3, 2, 3, 3}, -0.5f, 0.5f).Param("scale", {3}, 0.5f, 1.5f).Param("shift", {3}, -0.2f, 0.2f);
  b.Param("rm", {3}, -0.1f, 0.1f).Param("rv", {3}, 0.9f, 1.1f).Param("fw", {1, 4, 3}, -1.f, 1.f);
  b.Const(HostTensor::FromVector<float>({1.f, 1.f, 1.f, 1.f}, {4}, "ones"));
  b.Const(HostTensor::FromVector<float>({0.f, 0.f, 0.f, 0.f}, {4}, "zeros"));
  b.Const(HostTensor::FromVector<int64_t>({4, 3}, {2}, "fshape"));
  b.Op("Conv", {"x", "w"}, "c").SetInts("pads", {1, 1, 1, 1});
  b.Op("BatchNormalization", {"c", "scale", "shift", "rm", "rv"}, "n").outputs = {"n"};
  b.Op("Relu", {"n"}, "r");
  b.Op("GlobalAveragePool", {"r"}, "g");
  b.Op("Flatten", {"g"}, "f");
  b.Op("ReduceMean", {"fw"}, "fm").SetInts("axes", {0, 2});
  b.model().graph.nodes.back().SetInt("keepdims", 0);
  b.Op("Mul", {"fw", "fw"}, "fw2");
  b.Op("ReduceMean", {"fw2"}, "fv").SetInts("axes", {0, 2});
  b.model().graph.nodes.back().SetInt("keepdims", 0);
  Node& ws = b.Op("BatchNormalization", {"fw", "ones", "zeros", "fm", "fv"}, "fn");
  ws.SetInt("training_mode", 1);
  ws.outputs = {"fn"};
  b.Op("Reshape", {"fn", "fshape"}, "fr");
  b.Op("Gemm", {"f", "fr"}, "logits").SetInt("transB", 1);
  b.Output("logits", {4, 4});
  b.Opset(15);
  AutodiffOptions o;
  o.freeze = {"ones", "zeros"};
  TrainingGraph tg = BuildTrainingGraph(b.Build(), o);
  EXPECT_EQ(UseSyncBatchNorm(tg.model.graph), 1);
  std::map<std::string, int> ops;
  for (const Node& n : tg.model.graph.nodes)
    if (n.domain == kGradDomain && n.op_type.find("BatchNorm") != std::string::npos) ++ops[n.op_type];
  EXPECT_EQ(ops, (std::map<std::string, int>{{"BatchNormTraining", 1},
                                             {"BatchNormalizationGrad", 1},
                                             {"SyncBatchNormTraining", 1},
                                             {"SyncBatchNormalizationGrad", 1}}));
  std::mt19937 rng(8);
  std::normal_distribution<float> nd(0.f, 1.f);
  HostTensor x(DType::kFloat32, {4, 2, 3, 3});
  for (int64_t i = 0; i < x.NumElements(); ++i) x.Data<float>()[i] = nd(rng);
  testing::ExpectGradientsMatchFiniteDifferences(
      tg, {{"x", Tensor::FromHost(x)},
           {tg.labels, Tensor::FromHost(HostTensor::FromVector<int64_t>({2, 0, 3, 1}, {4}))}});
}

}  // namespace
}  // namespace ot
