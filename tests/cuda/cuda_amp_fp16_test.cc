// --amp fp16 on CUDA against the CPU's float16 emulation (graph/passes/fp16/fp16_products.h):
// float16 Casts, cuDNN convolutions and their gradients on half tensors, cuBLAS products on
// CUDA_R_16F with float32 accumulation, and the loss scaling nodes (seed, unscale, all-finite
// flag, gated updates). The CPU computes float32 products of the same float16-rounded
// operands and rounds the results to float16, so the two agree to float32 accumulation order
// (and the occasional float16 rounding step that order flips). Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "models/reference_models.h"
#include "tests/cuda/cuda_test_util.h"
#include "train/amp/loss_scaler.h"
#include "train/training_session.h"

namespace ot {
namespace {

HostTensor RandomImages(int64_t n, int64_t c, int64_t hw, uint32_t seed) {
  HostTensor x(DType::kFloat32, {n, c, hw, hw});
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int64_t i = 0; i < x.NumElements(); ++i) x.Data<float>()[i] = nd(rng);
  return x;
}

struct Curve {
  std::vector<float> losses;
  std::vector<bool> skipped;
  std::vector<float> scales;
};

Curve Train(const Model& model, Device device, const std::string& loss_scale, const HostTensor& x, const HostTensor& y,
          int steps) {
  TrainingConfig config;
  config.optimizer.momentum = 0.9f;
  config.amp = AmpMode::kFloat16;
  config.loss_scale = ParseLossScale(loss_scale);
  config.executor.device = device;
  config.executor.seed = 3;
  TrainingSession session(model, config);
  Curve r;
  for (int s = 0; s < steps; ++s) {
    const StepResult step = session.Step(Tensor::FromHost(x, device), Tensor::FromHost(y, device), 0.05f);
    r.losses.push_back(step.loss);
    r.skipped.push_back(step.skipped);
    r.scales.push_back(session.loss_scaler().scale());
  }
  return r;
}

class CudaAmpFp16 : public ::testing::Test {
 protected:
  void SetUp() override { OT_REQUIRE_GPU(); }
};

// ResNet-style reference model (Conv, ConvGrad, BatchNorm, Gemm): the same skipped steps from
// an overflowing initial scale, the same scales, and losses within float16 rounding.
TEST_F(CudaAmpFp16, TrainingMatchesTheCpuEmulation) {
  ReferenceModelOptions shape{3, 16, 16, 10, 0};
  const Model model = BuildReferenceModel("resnet34", shape);
  const HostTensor x = RandomImages(8, 3, 16, 4);
  HostTensor y = HostTensor::FromVector<int64_t>({0, 1, 2, 3, 4, 5, 6, 7}, {8});
  for (const char* scale : {"dynamic", "dynamic:1e12"}) {
    const Curve cpu = Train(model, Device::CPU(), scale, x, y, 6);
    const Curve gpu = Train(model, Device{DeviceType::kCUDA, 0}, scale, x, y, 6);
    EXPECT_EQ(gpu.skipped, cpu.skipped) << scale;
    EXPECT_EQ(gpu.scales, cpu.scales) << scale;
    for (size_t i = 0; i < cpu.losses.size(); ++i)
      EXPECT_NEAR(gpu.losses[i], cpu.losses[i], 2e-2 * std::fabs(cpu.losses[i])) << scale << " step " << i;
  }
}

}  // namespace
}  // namespace ot
