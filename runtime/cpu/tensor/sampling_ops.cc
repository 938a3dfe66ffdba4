// CPU kernels of GridSample (opsets 16 to 22: 4-D X, float32) and GridSampleGrad, and of RoiAlign
// (bilinear samples averaged or maxed over each bin of a box). GridSample: each output pixel
// samples X at the normalised (x, y) of the grid, with bilinear, nearest (ties to even)
// or bicubic (A = -0.75) interpolation and zeros, border or reflection padding, as
// PyTorch's grid_sample computes it. The gradient adds dY back to the sampled pixels with
// the same weights (dX) and differentiates the weights by the coordinates (dGrid; zero for
// nearest, and where border or reflection clips a coordinate). Loops per output pixel;
// oneDNN has no such primitive.
#include <algorithm>
#include <cmath>

#include "graph/op_domains.h"
#include "runtime/ops/checks/kernel_util.h"
#include "runtime/ops/shapes/index_shapes.h"
#include "runtime/ops/shapes/op_shapes.h"
#include "runtime/core/kernel_registry.h"

namespace ot {
namespace cpu {
namespace {

enum class Padding { kZeros, kBorder, kReflection };

// Mirrors `v` into [twice_low / 2, twice_high / 2]; *grad is d(result)/d(v) (+1 or -1).
double ReflectWithGrad(double v, double twice_low, double twice_high, double* grad) {
  if (twice_low == twice_high) {
    *grad = 0;
    return 0;
  }
  const double lo = twice_low / 2, span = (twice_high - twice_low) / 2;
  double mult = 1;
  v -= lo;
  if (v < 0) {
    mult = -1;
    v = -v;
  }
  const double extra = std::fmod(v, span);
  const auto flips = static_cast<int64_t>(std::floor(v / span));
  *grad = flips % 2 == 0 ? mult : -mult;
  return flips % 2 == 0 ? extra + lo : span - extra + lo;
}

// The weight of cubic tap k (at offsets -1, 0, 1, 2) for fraction t, and its derivative by t.
double CubicWeight(double t, int k) {
  const double a = -0.75, d = std::fabs(t - (k - 1));
  return d <= 1 ? ((a + 2) * d - (a + 3)) * d * d + 1 : ((a * d - 5 * a) * d + 8 * a) * d - 4 * a;
}
double CubicWeightGrad(double t, int k) {
  const double a = -0.75, signed_d = t - (k - 1), d = std::fabs(signed_d);
  const double dk = d <= 1 ? (3 * (a + 2) * d - 2 * (a + 3)) * d : (3 * a * d - 10 * a) * d + 8 * a;
  return signed_d < 0 ? -dk : dk;
}

// Attributes and the coordinate maps shared by the forward and the gradient.
class GridSampleBase : public OpKernel {
 public:
  using OpKernel::OpKernel;

 protected:
  void ReadAttributes() {
    mode_ = GridSampleMode(node_);
    const std::string pad = node_.GetString("padding_mode", "zeros");
    padding_ = pad == "border" ? Padding::kBorder : pad == "reflection" ? Padding::kReflection : Padding::kZeros;
    align_ = node_.GetInt("align_corners", 0) != 0;
  }
  // Grid value -> pixel coordinate, and its derivative.
  double Unnormalize(double v, int64_t size, double* grad = nullptr) const {
    const double s = align_ ? static_cast<double>(size - 1) / 2 : static_cast<double>(size) / 2;
    if (grad) *grad = s;
    return align_ ? (v + 1) * s : ((v + 1) * static_cast<double>(size) - 1) / 2;
  }
  // Border clips and reflection mirrors a coordinate into the image; zeros leaves it. The
  // derivative is 0 where a clip bites (at or beyond the edge pixels' centres).
  double Pad(double v, int64_t size, double* grad = nullptr) const {
    const double last = static_cast<double>(size - 1);
    double g = 1;
    if (padding_ == Padding::kReflection) {
      double rg = 1;
      v = align_ ? ReflectWithGrad(v, 0, 2 * last, &rg) : ReflectWithGrad(v, -1, 2 * static_cast<double>(size) - 1, &rg);
      g = rg;
    }
    if (padding_ != Padding::kZeros) {
      if (v <= 0 || v >= last) g = 0;
      v = std::clamp(v, 0.0, last);
    }
    if (grad) *grad = g;
    return v;
  }
  static bool Inside(int64_t h, int64_t w, int64_t yy, int64_t xx) { return yy >= 0 && yy < h && xx >= 0 && xx < w; }

  std::string mode_;
  Padding padding_ = Padding::kZeros;
  bool align_ = false;
};

class GridSampleKernel final : public GridSampleBase {
 public:
  using GridSampleBase::GridSampleBase;
  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    if (x.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(x.dtype()));
    ctx.SetOutput(0, DType::kFloat32, GridSampleOutputShape(node_, x, ctx.Input(1)));
    ReadAttributes();
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    Tensor& y = ctx.Output(0);
    const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3), ho = y.dim(2), wo = y.dim(3);
    const float* in = x.data<float>();
    const float* g = ctx.Input(1).data<float>();
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
  static double At(const float* plane, int64_t h, int64_t w, int64_t yy, int64_t xx) {
    return Inside(h, w, yy, xx) ? plane[yy * w + xx] : 0.0;
  }

  double Sample(const float* plane, int64_t h, int64_t w, double ix, double iy) const {
    if (mode_ == "bicubic") {  // taps padded one by one, around the unpadded coordinate
      const double fx = std::floor(ix), fy = std::floor(iy);
      double acc = 0;
      for (int ky = 0; ky < 4; ++ky) {
        double row = 0;
        for (int kx = 0; kx < 4; ++kx) {
          const double px = Pad(fx - 1 + kx, w), py = Pad(fy - 1 + ky, h);
          row += CubicWeight(ix - fx, kx) * At(plane, h, w, static_cast<int64_t>(py), static_cast<int64_t>(px));
        }
        acc += CubicWeight(iy - fy, ky) * row;
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
};

// GridSampleGrad(dY, X, grid) -> dX, dGrid with the forward's attributes.
class GridSampleGradKernel final : public GridSampleBase {
 public:
  using GridSampleBase::GridSampleBase;
  void Prepare(KernelContext& ctx) override {
    const Tensor& dy = ctx.Input(0);
    const Tensor& x = ctx.Input(1);
    if (x.dtype() != DType::kFloat32 || dy.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(x.dtype()));
    if (GridSampleOutputShape(node_, x, ctx.Input(2)) != dy.shape())
      Fail("gradient shape " + ShapeString(dy.shape()) + " differs from GridSample's output");
    ctx.SetOutput(0, DType::kFloat32, x.shape());
    ctx.SetOutput(1, DType::kFloat32, ctx.Input(2).shape());
    ReadAttributes();
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& dyt = ctx.Input(0);
    const Tensor& x = ctx.Input(1);
    const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3), ho = dyt.dim(2), wo = dyt.dim(3);
    const float* in = x.data<float>();
    const float* dy = dyt.data<float>();
    const float* g = ctx.Input(2).data<float>();
    float* dx = ctx.HasOutput(0) ? ctx.Output(0).data<float>() : nullptr;
    float* dgrid = ctx.HasOutput(1) ? ctx.Output(1).data<float>() : nullptr;
    if (dx) std::fill_n(dx, x.numel(), 0.f);
    // Parallel over batch entries: each writes only its own planes of dX and rows of dGrid.
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < n; ++b)
      for (int64_t i = 0; i < ho; ++i)
        for (int64_t j = 0; j < wo; ++j) {
          const int64_t at = (b * ho + i) * wo + j;
          double gx_mult = 0, gy_mult = 0;
          double ix = Unnormalize(g[at * 2], w, &gx_mult), iy = Unnormalize(g[at * 2 + 1], h, &gy_mult);
          double gix = 0, giy = 0;
          for (int64_t ch = 0; ch < c; ++ch) {
            const float* plane = in + (b * c + ch) * h * w;
            float* dplane = dx ? dx + (b * c + ch) * h * w : nullptr;
            const double go = dy[((b * c + ch) * ho + i) * wo + j];
            Tap(plane, dplane, h, w, ix, iy, go, &gix, &giy, &gx_mult, &gy_mult, ch == 0);
          }
          if (dgrid) {
            dgrid[at * 2] = static_cast<float>(gx_mult * gix);
            dgrid[at * 2 + 1] = static_cast<float>(gy_mult * giy);
          }
        }
  }

 private:
  // One channel: adds go * weight to dX at each tap and the weights' derivatives times the
  // values to gix/giy. On the first channel, folds the padding's derivative into the
  // multipliers (the padded coordinate is the same for every channel).
  void Tap(const float* plane, float* dplane, int64_t h, int64_t w, double ix, double iy, double go, double* gix,
           double* giy, double* gx_mult, double* gy_mult, bool first) const {
    auto value = [&](int64_t yy, int64_t xx) { return Inside(h, w, yy, xx) ? static_cast<double>(plane[yy * w + xx]) : 0.0; };
    auto add = [&](int64_t yy, int64_t xx, double v) {
      if (dplane && Inside(h, w, yy, xx)) dplane[yy * w + xx] += static_cast<float>(v);
    };
    if (mode_ == "bicubic") {
      const double fx = std::floor(ix), fy = std::floor(iy), tx = ix - fx, ty = iy - fy;
      for (int ky = 0; ky < 4; ++ky)
        for (int kx = 0; kx < 4; ++kx) {
          const auto px = static_cast<int64_t>(Pad(fx - 1 + kx, w)), py = static_cast<int64_t>(Pad(fy - 1 + ky, h));
          const double wx = CubicWeight(tx, kx), wy = CubicWeight(ty, ky), v = value(py, px);
          add(py, px, go * wx * wy);
          *gix += go * v * CubicWeightGrad(tx, kx) * wy;
          *giy += go * v * wx * CubicWeightGrad(ty, ky);
        }
      return;
    }
    double px_grad = 1, py_grad = 1;
    ix = Pad(ix, w, &px_grad);
    iy = Pad(iy, h, &py_grad);
    if (first) {
      *gx_mult *= px_grad;
      *gy_mult *= py_grad;
    }
    if (mode_ == "nearest") {  // piecewise constant: no gradient for the grid
      add(static_cast<int64_t>(std::nearbyint(iy)), static_cast<int64_t>(std::nearbyint(ix)), go);
      return;
    }
    const double fx = std::floor(ix), fy = std::floor(iy), tx = ix - fx, ty = iy - fy;
    const auto x0 = static_cast<int64_t>(fx), y0 = static_cast<int64_t>(fy);
    const double v00 = value(y0, x0), v01 = value(y0, x0 + 1), v10 = value(y0 + 1, x0), v11 = value(y0 + 1, x0 + 1);
    add(y0, x0, go * (1 - tx) * (1 - ty));
    add(y0, x0 + 1, go * tx * (1 - ty));
    add(y0 + 1, x0, go * (1 - tx) * ty);
    add(y0 + 1, x0 + 1, go * tx * ty);
    *gix += go * ((1 - ty) * (v01 - v00) + ty * (v11 - v10));
    *giy += go * ((1 - tx) * (v10 - v00) + tx * (v11 - v01));
  }
};

// RoiAlign(X [N, C, H, W], rois [R, 4] (x1, y1, x2, y2), batch_indices [R]) ->
// [R, C, output_height, output_width]: each bin averages (or maxes) sampling_ratio^2
// bilinear samples (adaptive ceil(roi size / bins) when 0); half_pixel shifts the box by
// half a pixel, output_half_pixel (before opset 16 the only mode) keeps boxes at least 1x1.
class RoiAlignKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Prepare(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    const Tensor& rois = ctx.Input(1);
    const Tensor& idx = ctx.Input(2);
    if (x.dtype() != DType::kFloat32 || rois.dtype() != DType::kFloat32) Unsupported("data type " + DTypeName(x.dtype()));
    if (x.rank() != 4 || rois.rank() != 2 || rois.dim(1) != 4 || idx.rank() != 1 || idx.dim(0) != rois.dim(0))
      Fail("X must be [N, C, H, W], rois [R, 4] and batch_indices [R]; got " + ShapeString(x.shape()) + ", " +
           ShapeString(rois.shape()) + ", " + ShapeString(idx.shape()));
    RequireIndexType(idx, node_);
    mode_ = node_.GetString("mode", "avg");
    if (mode_ != "avg" && mode_ != "max") Fail("mode must be avg or max, not '" + mode_ + "'");
    const std::string coord = node_.GetString("coordinate_transformation_mode", opset_ >= 16 ? "half_pixel" : "output_half_pixel");
    if (coord != "half_pixel" && coord != "output_half_pixel") Fail("unknown coordinate_transformation_mode '" + coord + "'");
    half_pixel_ = coord == "half_pixel";
    oh_ = node_.GetInt("output_height", 1);
    ow_ = node_.GetInt("output_width", 1);
    if (oh_ < 1 || ow_ < 1) Fail("output_height and output_width must be positive");
    ctx.SetOutput(0, DType::kFloat32, {rois.dim(0), x.dim(1), oh_, ow_});
  }

  void Compute(KernelContext& ctx) override {
    const Tensor& x = ctx.Input(0);
    const Tensor& rois = ctx.Input(1);
    const Tensor& idx = ctx.Input(2);
    const int64_t c = x.dim(1), h = x.dim(2), w = x.dim(3), nr = rois.dim(0);
    const double scale = node_.GetFloat("spatial_scale", 1.f), offset = half_pixel_ ? 0.5 : 0.0;
    const int64_t ratio = node_.GetInt("sampling_ratio", 0);
    float* out = ctx.Output(0).data<float>();
    for (int64_t r = 0; r < nr; ++r) {
      const int64_t b = idx.dtype() == DType::kInt64 ? idx.data<int64_t>()[r] : idx.data<int32_t>()[r];
      if (b < 0 || b >= x.dim(0)) Fail("batch index " + std::to_string(b) + " of roi " + std::to_string(r) + " is out of range");
      const float* box = rois.data<float>() + r * 4;
      const double x0 = box[0] * scale - offset, y0 = box[1] * scale - offset;
      double rw = box[2] * scale - offset - x0, rh = box[3] * scale - offset - y0;
      if (!half_pixel_) {
        rw = std::max(rw, 1.0);
        rh = std::max(rh, 1.0);
      }
      const double bh = rh / static_cast<double>(oh_), bw = rw / static_cast<double>(ow_);
      const int64_t gh = ratio > 0 ? ratio : static_cast<int64_t>(std::ceil(rh / static_cast<double>(oh_)));
      const int64_t gw = ratio > 0 ? ratio : static_cast<int64_t>(std::ceil(rw / static_cast<double>(ow_)));
      const double count = static_cast<double>(std::max<int64_t>(gh * gw, 1));
#pragma omp parallel for schedule(static)
      for (int64_t ch = 0; ch < c; ++ch) {
        const float* plane = x.data<float>() + (b * c + ch) * h * w;
        for (int64_t ph = 0; ph < oh_; ++ph)
          for (int64_t pw = 0; pw < ow_; ++pw) {
            double acc = 0, best = 0;
            bool any = false;
            for (int64_t iy = 0; iy < gh; ++iy)
              for (int64_t ix = 0; ix < gw; ++ix) {
                const double yy = y0 + static_cast<double>(ph) * bh + (static_cast<double>(iy) + 0.5) * bh / static_cast<double>(gh);
                const double xx = x0 + static_cast<double>(pw) * bw + (static_cast<double>(ix) + 0.5) * bw / static_cast<double>(gw);
                const double v = Bilinear(plane, h, w, yy, xx, mode_ == "max", &best, &any);
                acc += v;
              }
            out[((r * c + ch) * oh_ + ph) * ow_ + pw] = static_cast<float>(mode_ == "max" ? best : acc / count);
          }
      }
    }
  }

 private:
  // Bilinear sample at (y, x) (0 beyond one pixel outside the image). For max mode, as
  // ONNX Runtime and the ONNX reference compute it, the running maximum takes each
  // weighted corner value on its own.
  static double Bilinear(const float* plane, int64_t h, int64_t w, double y, double x, bool max_mode, double* best,
                         bool* any) {
    if (y < -1.0 || y > static_cast<double>(h) || x < -1.0 || x > static_cast<double>(w)) {
      if (max_mode) {  // an outside sample counts as 0
        *best = *any ? std::max(*best, 0.0) : 0.0;
        *any = true;
      }
      return 0;
    }
    y = std::max(y, 0.0);
    x = std::max(x, 0.0);
    auto yl = static_cast<int64_t>(y), xl = static_cast<int64_t>(x);
    int64_t yh = yl + 1, xh = xl + 1;
    if (yl >= h - 1) {
      yl = yh = h - 1;
      y = static_cast<double>(yl);
    }
    if (xl >= w - 1) {
      xl = xh = w - 1;
      x = static_cast<double>(xl);
    }
    const double ly = y - static_cast<double>(yl), lx = x - static_cast<double>(xl), hy = 1 - ly, hx = 1 - lx;
    const double c[4] = {hy * hx * plane[yl * w + xl], hy * lx * plane[yl * w + xh], ly * hx * plane[yh * w + xl],
                         ly * lx * plane[yh * w + xh]};
    if (max_mode)
      for (double v : c) {
        *best = *any ? std::max(*best, v) : v;
        *any = true;
      }
    return c[0] + c[1] + c[2] + c[3];
  }

  std::string mode_;
  bool half_pixel_ = true;
  int64_t oh_ = 1, ow_ = 1;
};

OT_REGISTER_CPU_KERNEL("GridSample", 16, kLatestOpset, GridSampleKernel);
OT_REGISTER_CPU_KERNEL("RoiAlign", 10, kLatestOpset, RoiAlignKernel);
OT_REGISTER_KERNEL(kGradDomain, "GridSampleGrad", 1, kLatestOpset, DeviceType::kCPU, GridSampleGradKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
