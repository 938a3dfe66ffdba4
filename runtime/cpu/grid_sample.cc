// CPU kernel of GridSample (opset 16, float32): each output pixel samples X at the
// normalised (x, y) of the grid, with bilinear, nearest (ties to even) or bicubic
// (A = -0.75) interpolation and zeros, border or reflection padding, as PyTorch's
// grid_sample computes it. A loop per output pixel; oneDNN has no such primitive.
#include <algorithm>
#include <cmath>

#include "runtime/cpu/kernel_util.h"
#include "runtime/index_shapes.h"
#include "runtime/kernel_registry.h"

namespace ot {
namespace cpu {
namespace {

enum class Padding { kZeros, kBorder, kReflection };

// Mirrors `v` into [twice_low / 2, twice_high / 2].
double Reflect(double v, double twice_low, double twice_high) {
  if (twice_low == twice_high) return 0;
  const double lo = twice_low / 2, span = (twice_high - twice_low) / 2;
  v = std::fabs(v - lo);
  const double extra = std::fmod(v, span);
  const auto flips = static_cast<int64_t>(std::floor(v / span));
  return flips % 2 == 0 ? extra + lo : span - extra + lo;
}

class GridSampleKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    if (x.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(x.dtype()));
    ctx.SetOutput(0, DType::kFloat32, GridSampleOutputShape(node_, x, ctx.Input(1)));
    mode_ = node_.GetString("mode", "bilinear");
    const std::string pad = node_.GetString("padding_mode", "zeros");
    padding_ = pad == "border" ? Padding::kBorder : pad == "reflection" ? Padding::kReflection : Padding::kZeros;
    align_ = node_.GetInt("align_corners", 0) != 0;
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    const Tensor& grid = ctx.Input(1);
    Tensor& y = ctx.Output(0);
    const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3), ho = y.dim(2), wo = y.dim(3);
    const float* in = x.data<float>();
    const float* g = grid.data<float>();
    float* out = y.data<float>();
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < n; ++b)
      for (int64_t i = 0; i < ho; ++i)
        for (int64_t j = 0; j < wo; ++j) {
          const float* gp = g + ((b * ho + i) * wo + j) * 2;
          const double ix = Unnormalize(gp[0], w), iy = Unnormalize(gp[1], h);
          for (int64_t ch = 0; ch < c; ++ch) {
            const float* plane = in + (b * c + ch) * h * w;
            out[((b * c + ch) * ho + i) * wo + j] = static_cast<float>(Sample(plane, h, w, ix, iy));
          }
        }
  }

 private:
  double Unnormalize(double v, int64_t size) const {
    return align_ ? (v + 1) / 2 * static_cast<double>(size - 1) : ((v + 1) * static_cast<double>(size) - 1) / 2;
  }
  // Border clips and reflection mirrors a coordinate into the image; zeros leaves it.
  double Pad(double v, int64_t size) const {
    const double last = static_cast<double>(size - 1);
    if (padding_ == Padding::kBorder) return std::clamp(v, 0.0, last);
    if (padding_ == Padding::kReflection) {
      v = align_ ? Reflect(v, 0, 2 * last) : Reflect(v, -1, 2 * static_cast<double>(size) - 1);
      return std::clamp(v, 0.0, last);
    }
    return v;
  }
  static double At(const float* plane, int64_t h, int64_t w, int64_t yy, int64_t xx) {
    return yy >= 0 && yy < h && xx >= 0 && xx < w ? plane[yy * w + xx] : 0.0;
  }
  static double Cubic(double t, int k) {  // weight of tap k (at -1, 0, 1, 2) for fraction t
    const double a = -0.75, d = std::fabs(t - (k - 1));
    return d <= 1 ? ((a + 2) * d - (a + 3)) * d * d + 1 : ((a * d - 5 * a) * d + 8 * a) * d - 4 * a;
  }

  double Sample(const float* plane, int64_t h, int64_t w, double ix, double iy) const {
    if (mode_ == "bicubic") {  // taps padded one by one, around the unpadded coordinate
      const double fx = std::floor(ix), fy = std::floor(iy);
      double acc = 0;
      for (int ky = 0; ky < 4; ++ky) {
        double row = 0;
        for (int kx = 0; kx < 4; ++kx) {
          const double px = Pad(fx - 1 + kx, w), py = Pad(fy - 1 + ky, h);
          row += Cubic(ix - fx, kx) * At(plane, h, w, static_cast<int64_t>(py), static_cast<int64_t>(px));
        }
        acc += Cubic(iy - fy, ky) * row;
      }
      return acc;
    }
    ix = Pad(ix, w);
    iy = Pad(iy, h);
    if (mode_ == "nearest")
      return At(plane, h, w, static_cast<int64_t>(std::nearbyint(iy)), static_cast<int64_t>(std::nearbyint(ix)));
    const double fx = std::floor(ix), fy = std::floor(iy), tx = ix - fx, ty = iy - fy;
    const auto x0 = static_cast<int64_t>(fx), y0 = static_cast<int64_t>(fy);
    return (1 - ty) * ((1 - tx) * At(plane, h, w, y0, x0) + tx * At(plane, h, w, y0, x0 + 1)) +
           ty * ((1 - tx) * At(plane, h, w, y0 + 1, x0) + tx * At(plane, h, w, y0 + 1, x0 + 1));
  }

  std::string mode_;
  Padding padding_ = Padding::kZeros;
  bool align_ = false;
};

OT_REGISTER_CPU_KERNEL("GridSample", 16, 1 << 30, GridSampleKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
