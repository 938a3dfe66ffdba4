// --amp fp16's loss scale: torch.amp.GradScaler's update rule (its documentation and
// torch/csrc's _amp_update_scale_: x0.5 and the tracker reset on an inf or NaN, x2 on the
// growth_interval-th finite step in a row), its checkpoint text, --loss-scale's forms, and
// one session step: a skipped step leaves weights and optimizer state bitwise unchanged and
// does not advance the optimizers' step counter; a finite step is the unscaled float32 step.
#include <cmath>
#include <cfloat>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "graph/error.h"
#include "graph/passes/fp16/loss_scale_pass.h"
#include "models/reference_models.h"
#include "train/amp/loss_scaler.h"
#include "train/training_session.h"

namespace ot {
namespace {

LossScaleOptions Dynamic() { return ParseLossScale("dynamic"); }

TEST(LossScaler, GrowsAfter2000FiniteStepsAndBacksOffOnInf) {
  LossScaler s(Dynamic());
  ASSERT_TRUE(s.enabled());
  EXPECT_EQ(s.scale(), 65536.f);
  for (int i = 0; i < 1999; ++i) EXPECT_TRUE(s.Update(true));
  EXPECT_EQ(s.scale(), 65536.f);
  EXPECT_EQ(s.growth_tracker(), 1999);
  EXPECT_TRUE(s.Update(true));  // the 2000th in a row
  EXPECT_EQ(s.scale(), 131072.f);
  EXPECT_EQ(s.growth_tracker(), 0);
  for (int i = 0; i < 10; ++i) s.Update(true);
  EXPECT_FALSE(s.Update(false));  // skipped: halves, the count starts again
  EXPECT_EQ(s.scale(), 65536.f);
  EXPECT_EQ(s.growth_tracker(), 0);
  EXPECT_EQ(s.skipped_steps(), 1);
  EXPECT_FALSE(s.Update(false));
  EXPECT_EQ(s.scale(), 32768.f);
  EXPECT_EQ(s.skipped_steps(), 2);
}

TEST(LossScaler, StaticKeepsItsScaleAndStillSkips) {
  LossScaler s(ParseLossScale("static:1024"));
  for (int i = 0; i < 2500; ++i) s.Update(true);
  EXPECT_EQ(s.scale(), 1024.f);
  EXPECT_FALSE(s.Update(false));
  EXPECT_EQ(s.scale(), 1024.f);
  EXPECT_EQ(s.skipped_steps(), 1);
  LossScaler none(ParseLossScale("none"));
  EXPECT_FALSE(none.enabled());
  EXPECT_TRUE(none.Update(false));  // no scaling, nothing to skip
}

TEST(LossScaler, GrowthStopsShortOfInfinity) {
  LossScaleOptions o = ParseLossScale("dynamic:3e38");
  o.growth_interval = 1;
  LossScaler s(o);
  s.Update(true);  // 6e38 is not a float32: GradScaler keeps the scale
  EXPECT_EQ(s.scale(), 3e38f);
  EXPECT_EQ(s.growth_tracker(), 0);
}

TEST(LossScaler, StateRoundTripsExactly) {
  LossScaler a(ParseLossScale("dynamic:1000.1"));
  for (int i = 0; i < 17; ++i) a.Update(i % 5 != 3);
  LossScaler b(Dynamic());
  b.Load(a.Save());
  EXPECT_EQ(b.scale(), a.scale());
  EXPECT_EQ(b.growth_tracker(), a.growth_tracker());
  EXPECT_EQ(b.skipped_steps(), a.skipped_steps());
  for (int i = 0; i < 3000; ++i) EXPECT_EQ(a.Update(i % 700 != 1), b.Update(i % 700 != 1));
  EXPECT_EQ(b.scale(), a.scale());
  for (const char* bad : {"", "zz 1 2", "47800000 1", "47800000 -1 0", "47800000 1 2 3"})
    EXPECT_THROW(b.Load(bad), Error) << bad;
}

TEST(LossScaler, ParsesItsFormsAndRefusesOthers) {
  EXPECT_EQ(ParseLossScale("dynamic").kind, LossScaleOptions::Kind::kDynamic);
  EXPECT_EQ(ParseLossScale("dynamic").initial, 65536.f);
  EXPECT_EQ(ParseLossScale("dynamic:128").initial, 128.f);
  EXPECT_EQ(ParseLossScale("static:0.5").initial, 0.5f);
  EXPECT_EQ(ParseLossScale("none").kind, LossScaleOptions::Kind::kNone);
  for (const char* bad : {"", "static", "static:", "static:0", "static:-4", "static:nan", "dynamic:inf", "static:1e39",
                          "static:8x", "none:2", "Dynamic", "auto"}) {
    try {
      ParseLossScale(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--loss-scale"), std::string::npos) << e.what();
    }
  }
  TrainingConfig bf16;
  bf16.amp = AmpMode::kBFloat16;
  EXPECT_EQ(EffectiveLossScale(bf16).kind, LossScaleOptions::Kind::kNone);
  bf16.loss_scale = ParseLossScale("static:8");
  EXPECT_THROW(EffectiveLossScale(bf16), Error);
  TrainingConfig fp16;
  fp16.amp = AmpMode::kFloat16;
  EXPECT_EQ(EffectiveLossScale(fp16).kind, LossScaleOptions::Kind::kDynamic);
}

// SimpleNN under --amp fp16 with Adam (its step counter shows in the update): a step under a
// scale that overflows float16 is skipped with every state tensor bitwise unchanged; the next
// step at a sane scale equals a float32 session's first step up to float16 rounding.
TEST(LossScaler, SkippedStepChangesNoStateAndKeepsTheStepCount) {
  ReferenceModelOptions shape{1, 6, 6, 4, 0};
  Model model = BuildReferenceModel("simplenn", shape);
  HostTensor x(DType::kFloat32, {5, 1, 6, 6});
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int64_t i = 0; i < x.NumElements(); ++i) x.Data<float>()[i] = nd(rng);
  HostTensor y = HostTensor::FromVector<int64_t>({0, 3, 1, 2, 3}, {5});
  TrainingConfig config;
  config.optimizer.kind = OptimizerConfig::Kind::kAdam;
  config.amp = AmpMode::kFloat16;
  config.loss_scale = ParseLossScale("dynamic:1e30");
  TrainingSession session(model, config);
  std::map<std::string, HostTensor> before;
  for (const auto& [name, t] : session.StateTensors()) before[name] = t->ToHost(name);
  int steps_skipped = 0;
  for (;;) {
    const StepResult r = session.Step(Tensor::FromHost(x), Tensor::FromHost(y), 0.01f);
    if (!r.skipped) break;
    ++steps_skipped;
    ASSERT_LT(steps_skipped, 120) << "still skipping at scale " << session.loss_scaler().scale();
    for (const auto& [name, t] : session.StateTensors()) {
      const HostTensor now = t->ToHost(name);
      EXPECT_EQ(now.bytes, before.at(name).bytes) << name << " changed by a skipped step";
    }
  }
  EXPECT_EQ(session.loss_scaler().skipped_steps(), steps_skipped);
  EXPECT_GT(steps_skipped, 40);  // 1e30 halved until the float16 casts stop overflowing (< 65504)
  // Adam's first step (T = 1) moves each weight by about lr in the gradient's direction;
  // with T counting the skipped steps the bias correction would shrink it to ~ lr * 0.1.
  TrainingConfig f32;
  f32.optimizer.kind = OptimizerConfig::Kind::kAdam;
  TrainingSession reference(model, f32);
  reference.Step(Tensor::FromHost(x), Tensor::FromHost(y), 0.01f);
  std::map<std::string, Tensor*> ref;
  for (const auto& [name, t] : reference.StateTensors()) ref[name] = t;
  for (const std::string& p : session.graph().params) {
    Tensor* mine = nullptr;
    for (const auto& [name, t] : session.StateTensors())
      if (name == p) mine = t;
    ASSERT_NE(mine, nullptr);
    const HostTensor a = mine->ToHost(), b = ref.at(p)->ToHost(), w0 = before.at(p);
    for (int64_t k = 0; k < a.NumElements(); ++k) {
      const float moved = a.Data<float>()[k] - w0.Data<float>()[k], ref_moved = b.Data<float>()[k] - w0.Data<float>()[k];
      if (std::fabs(ref_moved) < 5e-3f) continue;  // tiny gradients: float16 rounding dominates Adam's sign
      EXPECT_NEAR(moved, ref_moved, 2e-3f) << p << "[" << k << "]";
    }
  }
}

}  // namespace
}  // namespace ot
