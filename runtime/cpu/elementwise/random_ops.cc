// ONNX's random generators on the CPU: RandomUniform, RandomNormal (shape attribute),
// RandomUniformLike, RandomNormalLike (an input's shape) and Bernoulli (an input of
// probabilities). PyTorch 2.x writes stochastic depth and other train-time noise with them
// (RandomUniformLike + Less + Cast + Div). They draw from the executor's generator, which the
// trainer seeds and keeps with its checkpoints, so a run and its resume draw the same
// numbers; with a 'seed' attribute a node draws from a generator of its own, seeded once,
// and repeats its sequence in every process.
#include <cmath>
#include <cstring>
#include <random>

#include "runtime/core/kernel_registry.h"

namespace ot {
namespace cpu {
namespace {

enum class Draw { kUniform, kNormal, kBernoulli };

template <Draw kDraw, bool kLike>
class RandomKernel final : public OpKernel {
 public:
  explicit RandomKernel(const KernelInfo& info) : OpKernel(info) {
    if (node_.HasAttr("seed")) {
      seeded_ = true;
      // The seed is a float attribute; its bits seed the node's own generator.
      const float seed = node_.GetFloat("seed", 0.f);
      uint32_t bits = 0;
      static_assert(sizeof(bits) == sizeof(seed), "float is 32 bits");
      std::memcpy(&bits, &seed, sizeof(bits));
      own_.seed(bits);
    }
  }

  void Prepare(KernelContext& ctx) override {
    Shape shape;
    DType input_type = DType::kFloat32;
    if (like_ || draw_ == Draw::kBernoulli) {
      shape = ctx.Input(0).shape();
      input_type = ctx.Input(0).dtype();
      if (draw_ == Draw::kBernoulli && input_type != DType::kFloat32 && input_type != DType::kFloat64)
        Unsupported("probabilities of type " + DTypeName(input_type) + " (float32 or float64)");
    } else {
      if (!node_.HasAttr("shape")) Fail("the 'shape' attribute is required");
      shape = node_.GetInts("shape");
      for (int64_t d : shape)
        if (d < 0) Fail("'shape' has a negative dimension " + std::to_string(d));
    }
    const int64_t dtype = node_.GetInt("dtype", like_ || draw_ == Draw::kBernoulli ? static_cast<int64_t>(input_type) : 1);
    out_type_ = static_cast<DType>(dtype);
    const bool float_out = out_type_ == DType::kFloat32 || out_type_ == DType::kFloat64;
    const bool bernoulli_out = out_type_ == DType::kBool || out_type_ == DType::kInt32 || out_type_ == DType::kInt64 ||
                               out_type_ == DType::kUInt8;
    if (!float_out && !(draw_ == Draw::kBernoulli && bernoulli_out))
      Unsupported("output type " + DTypeName(out_type_) + " (float32 or float64" +
                  (draw_ == Draw::kBernoulli ? ", bool, uint8, int32, int64" : "") + ")");
    ctx.SetOutput(0, out_type_, shape);
  }

  void Compute(KernelContext& ctx) override {
    Tensor& y = ctx.Output(0);
    const int64_t n = y.numel();
    const double a = draw_ == Draw::kNormal ? node_.GetFloat("mean", 0.f) : node_.GetFloat("low", 0.f);
    const double b = draw_ == Draw::kNormal ? node_.GetFloat("scale", 1.f) : node_.GetFloat("high", 1.f);
    for (int64_t i = 0; i < n; ++i) {
      double v = 0;
      if (draw_ == Draw::kUniform) {
        v = a + (b - a) * Uniform(ctx);
      } else if (draw_ == Draw::kNormal) {
        // Box-Muller on two uniform draws in (0, 1]: one normal value per pair.
        const double u1 = 1.0 - Uniform(ctx), u2 = Uniform(ctx);
        v = a + b * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
      } else {
        const Tensor& p = ctx.Input(0);
        const double prob = p.dtype() == DType::kFloat32 ? p.data<float>()[i] : p.data<double>()[i];
        if (!(prob >= 0.0 && prob <= 1.0)) Fail("probability " + std::to_string(prob) + " is outside [0, 1]");
        v = Uniform(ctx) < prob ? 1.0 : 0.0;
      }
      switch (out_type_) {
        case DType::kFloat32: y.data<float>()[i] = static_cast<float>(v); break;
        case DType::kFloat64: y.data<double>()[i] = v; break;
        case DType::kBool: case DType::kUInt8: y.data<uint8_t>()[i] = v != 0.0; break;
        case DType::kInt32: y.data<int32_t>()[i] = static_cast<int32_t>(v); break;
        default: y.data<int64_t>()[i] = static_cast<int64_t>(v); break;
      }
    }
  }

 private:
  // Uniform in [0, 1) with 53 random bits, as Dropout draws.
  double Uniform(KernelContext& ctx) {
    const uint64_t bits = seeded_ ? own_() : ctx.rng()();
    return static_cast<double>(bits >> 11) * 0x1.0p-53;
  }

  static constexpr Draw draw_ = kDraw;
  static constexpr bool like_ = kLike;
  DType out_type_ = DType::kFloat32;
  bool seeded_ = false;
  std::mt19937_64 own_;
};
using RandomUniformOp = RandomKernel<Draw::kUniform, false>;
using RandomNormalOp = RandomKernel<Draw::kNormal, false>;
using RandomUniformLikeOp = RandomKernel<Draw::kUniform, true>;
using RandomNormalLikeOp = RandomKernel<Draw::kNormal, true>;
using BernoulliOp = RandomKernel<Draw::kBernoulli, true>;
OT_REGISTER_CPU_KERNEL("RandomUniform", 1, kLatestOpset, RandomUniformOp);
OT_REGISTER_CPU_KERNEL("RandomNormal", 1, kLatestOpset, RandomNormalOp);
OT_REGISTER_CPU_KERNEL("RandomUniformLike", 1, kLatestOpset, RandomUniformLikeOp);
OT_REGISTER_CPU_KERNEL("RandomNormalLike", 1, kLatestOpset, RandomNormalLikeOp);
OT_REGISTER_CPU_KERNEL("Bernoulli", 15, kLatestOpset, BernoulliOp);

}  // namespace
}  // namespace cpu
}  // namespace ot
