// Our CPU convolutions on sgemm (runtime/cpu/conv/conv_taps.h, runtime/cpu/conv/conv_winograd.h with
// 2x2 and 4x4 output tiles)
// against a float64 convolution written out in loops here: forward with bias, input,
// weight and bias gradients, for odd maps, batch 1, kernels 1x1 to 5x5 and 7x1, strides
// 1 to 3 (taps), pads
// that leave the map, grow it or differ per side, channel counts that are and are not
// multiples of a channel block, and activations plain (NCHW), channel-blocked (nChw8c,
// nChw16c) and channels-last (NHWC), the input's and output's layouts not always the same.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "runtime/cpu/conv/conv_taps.h"
#include "runtime/cpu/conv/conv_winograd.h"

namespace ot {
namespace cpu {
namespace {

using tag = dnnl::memory::format_tag;

struct Case {
  int64_t n, c, o, h, w, kh, kw;
  std::vector<int64_t> pads_begin, pads_end;
  tag x_layout, y_layout;
  std::vector<int64_t> strides = {1, 1};
};

// The float64 convolution and its gradients (dilation 1), plain NCHW.
struct Reference {
  std::vector<double> y, dx, dw, db;
};

Reference Convolve(const Case& k, int64_t oh, int64_t ow, const std::vector<float>& x, const std::vector<float>& w,
                   const std::vector<float>& b, const std::vector<float>& dy) {
  Reference r;
  r.y.assign(static_cast<size_t>(k.n * k.o * oh * ow), 0.0);
  r.dx.assign(x.size(), 0.0);
  r.dw.assign(w.size(), 0.0);
  r.db.assign(static_cast<size_t>(k.o), 0.0);
  for (int64_t n = 0; n < k.n; ++n)
    for (int64_t o = 0; o < k.o; ++o)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t x0 = 0; x0 < ow; ++x0) {
          const size_t yi = static_cast<size_t>(((n * k.o + o) * oh + y) * ow + x0);
          double sum = b[static_cast<size_t>(o)];
          const double g = dy[yi];
          r.db[static_cast<size_t>(o)] += g;
          for (int64_t c = 0; c < k.c; ++c)
            for (int64_t i = 0; i < k.kh; ++i)
              for (int64_t j = 0; j < k.kw; ++j) {
                const int64_t iy = y * k.strides[0] + i - k.pads_begin[0];
                const int64_t ix = x0 * k.strides[1] + j - k.pads_begin[1];
                if (iy < 0 || iy >= k.h || ix < 0 || ix >= k.w) continue;
                const size_t xi = static_cast<size_t>(((n * k.c + c) * k.h + iy) * k.w + ix);
                const size_t wi = static_cast<size_t>(((o * k.c + c) * k.kh + i) * k.kw + j);
                sum += static_cast<double>(x[xi]) * w[wi];
                r.dx[xi] += g * w[wi];
                r.dw[wi] += g * x[xi];
              }
          r.y[yi] = sum;
        }
  return r;
}

// float values of `dims` in `layout`, from and to plain NCHW (oneDNN reorders).
std::vector<float> ToLayout(const std::vector<float>& plain, const Shape& dims, tag layout) {
  dnnl::memory::desc from(ToDims(dims), dnnl::memory::data_type::f32, tag::nchw);
  dnnl::memory::desc to(ToDims(dims), dnnl::memory::data_type::f32, layout);
  std::vector<float> out(to.get_size() / sizeof(float), 0.f);
  Reorder(from, to).Run(const_cast<float*>(plain.data()), out.data());
  return out;
}

std::vector<float> FromLayout(const std::vector<float>& data, const Shape& dims, tag layout) {
  dnnl::memory::desc from(ToDims(dims), dnnl::memory::data_type::f32, layout);
  dnnl::memory::desc to(ToDims(dims), dnnl::memory::data_type::f32, tag::nchw);
  std::vector<float> out(static_cast<size_t>(NumElements(dims)));
  Reorder(from, to).Run(const_cast<float*>(data.data()), out.data());
  return out;
}

// Largest |ours - ref| over the largest |ref|.
double Distance(const std::vector<float>& ours, const std::vector<double>& ref) {
  double worst = 0, scale = 1e-30;
  for (size_t i = 0; i < ref.size(); ++i) {
    worst = std::max(worst, std::fabs(ours[i] - ref[i]));
    scale = std::max(scale, std::fabs(ref[i]));
  }
  return worst / scale;
}

std::vector<float> Random(size_t count, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(count);
  for (float& f : v) f = u(rng);
  return v;
}

// Runs one case through `Make`'s convolution (WinogradConv: with output tiles of `tile`);
// `tolerance` bounds each Distance.
template <typename Conv>
void Check(const Case& k, double tolerance, int tile = 0) {
  SCOPED_TRACE("n" + std::to_string(k.n) + " c" + std::to_string(k.c) + " o" + std::to_string(k.o) + " map " +
               std::to_string(k.h) + "x" + std::to_string(k.w) + " kernel " + std::to_string(k.kh) + "x" +
               std::to_string(k.kw) + " pads " + std::to_string(k.pads_begin[0]) + "," +
               std::to_string(k.pads_begin[1]) + "/" + std::to_string(k.pads_end[0]) + "," +
               std::to_string(k.pads_end[1]) + " strides " + std::to_string(k.strides[0]) + "," +
               std::to_string(k.strides[1]) + " layouts " + std::to_string(static_cast<int>(k.x_layout)) + "->" +
               std::to_string(static_cast<int>(k.y_layout)));
  const int64_t oh = (k.h + k.pads_begin[0] + k.pads_end[0] - k.kh) / k.strides[0] + 1;
  const int64_t ow = (k.w + k.pads_begin[1] + k.pads_end[1] - k.kw) / k.strides[1] + 1;
  const Shape xs{k.n, k.c, k.h, k.w}, ws{k.o, k.c, k.kh, k.kw}, ys{k.n, k.o, oh, ow};
  std::mt19937 rng(static_cast<unsigned>(k.n * 1000 + k.c * 100 + k.h * 10 + k.kh));
  const std::vector<float> x = Random(static_cast<size_t>(NumElements(xs)), rng);
  const std::vector<float> w = Random(static_cast<size_t>(NumElements(ws)), rng);
  const std::vector<float> b = Random(static_cast<size_t>(k.o), rng);
  const std::vector<float> dy = Random(static_cast<size_t>(NumElements(ys)), rng);
  const Reference ref = Convolve(k, oh, ow, x, w, b, dy);

  auto md = [](const Shape& s, tag t) { return dnnl::memory::desc(ToDims(s), dnnl::memory::data_type::f32, t); };
  const TapConv::Layouts layouts{md(xs, k.x_layout), md(ys, k.y_layout), md(ys, k.y_layout), md(xs, k.x_layout)};
  std::unique_ptr<Conv> conv;
  if constexpr (std::is_same_v<Conv, WinogradConv>)
    conv = Conv::Make(xs, ws, ys, {1, 1}, {1, 1}, k.pads_begin, layouts, tile);
  else
    conv = Conv::Make(xs, ws, ys, k.strides, {1, 1}, k.pads_begin, layouts);
  ASSERT_NE(conv, nullptr);
  const std::vector<float> x_in = ToLayout(x, xs, k.x_layout), dy_in = ToLayout(dy, ys, k.y_layout);
  std::vector<float> y(layouts.y.get_size() / sizeof(float)), dx(layouts.dx.get_size() / sizeof(float));
  std::vector<float> dw(w.size()), db(b.size());
  conv->Forward(x_in.data(), w.data(), b.data(), y.data());
  EXPECT_LE(Distance(FromLayout(y, ys, k.y_layout), ref.y), tolerance) << "forward";
  conv->Backward(dy_in.data(), x_in.data(), w.data(), dx.data(), dw.data(), db.data());
  EXPECT_LE(Distance(FromLayout(dx, xs, k.x_layout), ref.dx), tolerance) << "input gradient";
  EXPECT_LE(Distance(dw, ref.dw), tolerance) << "weight gradient";
  EXPECT_LE(Distance(db, ref.db), tolerance) << "bias gradient";
  // Each gradient alone (the kernels ask for one where the other is oneDNN's).
  std::vector<float> dx2(dx.size()), dw2(dw.size());
  conv->Backward(dy_in.data(), nullptr, w.data(), dx2.data(), nullptr, nullptr);
  EXPECT_EQ(dx2, dx);
  conv->Backward(dy_in.data(), x_in.data(), nullptr, nullptr, dw2.data(), nullptr);
  EXPECT_EQ(dw2, dw);
}

constexpr double kTolerance = 1e-6;  // float32 sums here: 4e-7 at worst

TEST(TapConv, MatchesFloat64) {
  const std::vector<Case> cases = {
      {1, 8, 16, 5, 7, 3, 3, {1, 1}, {1, 1}, tag::nChw8c, tag::nChw8c},
      {3, 20, 12, 4, 4, 1, 3, {0, 1}, {0, 1}, tag::nchw, tag::nchw},
      {2, 16, 16, 6, 5, 5, 5, {2, 2}, {2, 2}, tag::nChw16c, tag::nhwc},
      {2, 8, 8, 2, 2, 3, 3, {1, 1}, {1, 1}, tag::nhwc, tag::nhwc},
      {1, 16, 8, 1, 1, 3, 3, {1, 1}, {1, 1}, tag::nChw8c, tag::nchw},
      {2, 4, 8, 5, 5, 3, 3, {0, 0}, {0, 0}, tag::nchw, tag::nChw8c},  // no padding: a smaller map
      {2, 12, 8, 3, 3, 7, 1, {3, 0}, {3, 0}, tag::nhwc, tag::nchw},
      {1, 8, 8, 4, 3, 3, 3, {2, 2}, {2, 2}, tag::nChw8c, tag::nChw8c},  // a larger map
      {2, 8, 16, 4, 5, 3, 3, {1, 0}, {0, 2}, tag::nchw, tag::nhwc},    // pads differ per side
      {4, 32, 24, 3, 3, 1, 1, {0, 0}, {0, 0}, tag::nChw8c, tag::nChw8c},
      // Strided: ResNet's downsampling 3x3 (even and odd maps), unequal strides, a 5x5
      // whose columns skip pixels, 4x4 patches at stride 4.
      {2, 16, 24, 4, 4, 3, 3, {1, 1}, {1, 1}, tag::nChw8c, tag::nChw8c, {2, 2}},
      {3, 8, 16, 7, 5, 3, 3, {1, 1}, {1, 1}, tag::nhwc, tag::nchw, {2, 2}},
      {2, 12, 8, 9, 8, 3, 3, {1, 0}, {1, 2}, tag::nchw, tag::nChw8c, {2, 3}},
      {1, 8, 8, 9, 9, 5, 5, {2, 2}, {2, 2}, tag::nChw8c, tag::nhwc, {3, 2}},
      {2, 8, 16, 8, 8, 4, 4, {0, 0}, {0, 0}, tag::nhwc, tag::nhwc, {4, 4}},  // patches (ConvNeXt's stem)
  };
  for (const Case& k : cases) Check<TapConv>(k, kTolerance);
}

TEST(WinogradConv, MatchesFloat64) {
  const std::vector<Case> cases = {
      {1, 8, 16, 5, 7, 3, 3, {1, 1}, {1, 1}, tag::nChw8c, tag::nChw8c},  // half tiles at two edges
      {3, 20, 12, 4, 4, 3, 3, {1, 1}, {1, 1}, tag::nchw, tag::nchw},
      {2, 16, 24, 1, 1, 3, 3, {1, 1}, {1, 1}, tag::nChw16c, tag::nhwc},
      {1, 8, 8, 2, 3, 3, 3, {1, 1}, {1, 1}, tag::nhwc, tag::nhwc},
      {2, 64, 32, 9, 9, 3, 3, {1, 1}, {1, 1}, tag::nChw8c, tag::nchw},
      {8, 64, 64, 24, 23, 3, 3, {1, 1}, {1, 1}, tag::nChw8c, tag::nChw8c},  // several chunks of tiles per thread
      {3, 24, 40, 2, 2, 3, 3, {1, 1}, {1, 1}, tag::nChw8c, tag::nhwc},      // 2x2 maps: 3 points a side
      {150, 16, 8, 2, 2, 3, 3, {1, 1}, {1, 1}, tag::nchw, tag::nChw8c},     // ... in several chunks
      {2, 256, 264, 3, 5, 3, 3, {1, 1}, {1, 1}, tag::nhwc, tag::nChw8c},    // wide: all tiles at once
  };
  for (const Case& k : cases) {
    Check<WinogradConv>(k, 2 * kTolerance, 2);
    // F(4x4, 3x3) rounds more: its transforms scale by up to 8 and 1/24.
    Check<WinogradConv>(k, 16 * kTolerance, 4);
  }
}

std::vector<float> RoundedToBf16(const std::vector<float>& v) {
  std::vector<uint16_t> bits(v.size());
  ToBf16(v.data(), static_cast<int64_t>(v.size()), bits.data());
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const uint32_t u = static_cast<uint32_t>(bits[i]) << 16;
    std::memcpy(&out[i], &u, sizeof u);
  }
  return out;
}

TEST(GemmBf16, MatchesSgemmOfTheRoundedOperands) {
  std::mt19937 rng(7);
  for (bool transposed : {false, true})
    for (bool accumulate : {false, true}) {
      const int64_t m = 37, n = 21, k = 19, lda = transposed ? m + 3 : k + 2, ldb = n + 5, ldc = n + 1;
      const std::vector<float> a = RoundedToBf16(Random(static_cast<size_t>((transposed ? k : m) * lda), rng));
      const std::vector<float> b = RoundedToBf16(Random(static_cast<size_t>(k * ldb), rng));
      std::vector<uint16_t> a16(a.size()), b16(b.size());
      ToBf16(a.data(), static_cast<int64_t>(a.size()), a16.data());
      ToBf16(b.data(), static_cast<int64_t>(b.size()), b16.data());
      const std::vector<float> c0 = Random(static_cast<size_t>(m * ldc), rng);
      std::vector<float> ours = c0, ref = c0;
      GemmBf16(transposed, m, n, k, a16.data(), lda, b16.data(), ldb, accumulate, ours.data(), ldc);
      Sgemm(transposed, m, n, k, a.data(), lda, b.data(), ldb, accumulate, ref.data(), ldc);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < ldc; ++j) {
          const size_t at = static_cast<size_t>(i * ldc + j);
          if (j >= n) EXPECT_EQ(ours[at], c0[at]) << "beyond n";  // untouched
          else EXPECT_NEAR(ours[at], ref[at], 1e-5) << transposed << accumulate << " at " << i << "," << j;
        }
    }
}

TEST(ToBf16, RoundsToNearestEvenAndKeepsNaN) {
  const std::vector<float> v = {1.f, 1.f + 1.f / 256, 1.f + 3.f / 256, 1.f + 1.f / 512, -2.5f, 0.f,
                                std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
  const std::vector<float> r = RoundedToBf16(v);
  EXPECT_EQ(r[0], 1.f);
  EXPECT_EQ(r[1], 1.f);                 // a tie: to the even 1
  EXPECT_EQ(r[2], 1.f + 4.f / 256);     // a tie: to the even 1 + 2^-6
  EXPECT_EQ(r[3], 1.f);                 // below half an ulp (2^-8)
  EXPECT_EQ(r[4], -2.5f);
  EXPECT_EQ(r[5], 0.f);
  EXPECT_EQ(r[6], std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(r[7]));
}

// bfloat16 values of `dims` in `layout` (raw bits) from plain float32 ones.
std::vector<uint16_t> ToBf16Layout(const std::vector<float>& plain, const Shape& dims, tag layout) {
  const std::vector<float> f = ToLayout(plain, dims, layout);
  std::vector<uint16_t> out(f.size());
  ToBf16(f.data(), static_cast<int64_t>(f.size()), out.data());
  return out;
}

// Under --amp bf16, x, w and dy come as bfloat16 (the graph's Casts) and our Winograd reads
// them as they are. With float32 products (`bf16_products` false) it is the float32
// convolution of those values: against the float64 one of the same rounded values, within
// the float32 tolerances of MatchesFloat64. With bfloat16 products the tiles and weights
// are rounded once more after their transforms; the reference is then PyTorch autocast's:
// the float64 convolution of the rounded inputs against the float64 one of the unrounded
// inputs (distance d_autocast, about 2^-9 of the scale: one rounding of each input). F(2x2,
// 3x3)'s tiles are sums of up to 4 inputs with coefficients +-1, its weights sums of up to
// 9 taps times 1/4, so their rounding is of the same size again and its output transform
// adds up to 9 products: measured up to 3.5 x d_autocast, bound 4 x. (F(4x4, 3x3)'s transforms
// scale by up to 8 and 1/24: 15-30 x, which is why WinogradConv does not offer it.)
void CheckBf16(const Case& k, int tile, bool bf16_products, double factor) {
  SCOPED_TRACE("n" + std::to_string(k.n) + " c" + std::to_string(k.c) + " o" + std::to_string(k.o) + " map " +
               std::to_string(k.h) + "x" + std::to_string(k.w) + " tile " + std::to_string(tile) +
               (bf16_products ? " bfloat16 products" : " float32 products"));
  const Shape xs{k.n, k.c, k.h, k.w}, ws{k.o, k.c, 3, 3}, ys{k.n, k.o, k.h, k.w};
  std::mt19937 rng(static_cast<unsigned>(k.n * 1000 + k.c * 100 + k.h * 10 + tile));
  const std::vector<float> x = Random(static_cast<size_t>(NumElements(xs)), rng);
  const std::vector<float> w = Random(static_cast<size_t>(NumElements(ws)), rng);
  const std::vector<float> b = Random(static_cast<size_t>(k.o), rng);
  const std::vector<float> dy = Random(static_cast<size_t>(NumElements(ys)), rng);
  const std::vector<float> xr = RoundedToBf16(x), wr = RoundedToBf16(w), dyr = RoundedToBf16(dy);
  const Reference exact = Convolve(k, k.h, k.w, x, w, b, dy), rounded = Convolve(k, k.h, k.w, xr, wr, b, dyr);

  auto md = [](const Shape& s, tag t, dnnl::memory::data_type type) { return dnnl::memory::desc(ToDims(s), type, t); };
  const auto bf16 = dnnl::memory::data_type::bf16, f32 = dnnl::memory::data_type::f32;
  const TapConv::Layouts layouts{md(xs, k.x_layout, bf16), md(ys, k.y_layout, f32), md(ys, k.y_layout, bf16),
                                 md(xs, k.x_layout, f32)};
  auto conv = WinogradConv::Make(xs, ws, ys, {1, 1}, {1, 1}, k.pads_begin, layouts, tile, bf16_products);
  ASSERT_NE(conv, nullptr);
  const std::vector<uint16_t> x_in = ToBf16Layout(xr, xs, k.x_layout), dy_in = ToBf16Layout(dyr, ys, k.y_layout),
                              w_in = ToBf16Layout(wr, ws, tag::oihw);
  std::vector<float> y(layouts.y.get_size() / sizeof(float)), dx(layouts.dx.get_size() / sizeof(float));
  std::vector<float> dw(w.size()), db(b.size());
  conv->Forward(x_in.data(), w_in.data(), b.data(), y.data());
  conv->Backward(dy_in.data(), x_in.data(), w_in.data(), dx.data(), dw.data(), db.data());
  const std::vector<float> y_plain = FromLayout(y, ys, k.y_layout), dx_plain = FromLayout(dx, xs, k.x_layout);
  EXPECT_LE(Distance(db, rounded.db), kTolerance) << "bias gradient (float32 sums of the bfloat16 dy)";
  if (!bf16_products) {
    const double tolerance = (tile == 2 ? 2 : 16) * kTolerance;  // as MatchesFloat64
    EXPECT_LE(Distance(y_plain, rounded.y), tolerance) << "forward";
    EXPECT_LE(Distance(dx_plain, rounded.dx), tolerance) << "input gradient";
    EXPECT_LE(Distance(dw, rounded.dw), tolerance) << "weight gradient";
    return;
  }
  auto to_float = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
  const double autocast_y = Distance(to_float(rounded.y), exact.y), autocast_dx = Distance(to_float(rounded.dx), exact.dx),
               autocast_dw = Distance(to_float(rounded.dw), exact.dw);
  const double ours_y = Distance(y_plain, exact.y), ours_dx = Distance(dx_plain, exact.dx),
               ours_dw = Distance(dw, exact.dw);
  SCOPED_TRACE("distances from float64: ours y " + std::to_string(ours_y) + " dx " + std::to_string(ours_dx) +
               " dw " + std::to_string(ours_dw) + "; autocast y " + std::to_string(autocast_y) + " dx " +
               std::to_string(autocast_dx) + " dw " + std::to_string(autocast_dw));
  EXPECT_LE(ours_y, factor * autocast_y) << "forward";
  EXPECT_LE(ours_dx, factor * autocast_dx) << "input gradient";
  EXPECT_LE(ours_dw, factor * autocast_dw) << "weight gradient";
  // The products are rounded: not within float32 distance of the rounded inputs' convolution.
  EXPECT_GT(Distance(y_plain, rounded.y), 1e-4) << "forward products not rounded";
}

TEST(WinogradConv, ReadsBf16InputsAndMultipliesInBf16WithinAutocastRounding) {
  const std::vector<Case> cases = {
      {1, 8, 16, 5, 7, 3, 3, {1, 1}, {1, 1}, tag::nChw8c, tag::nChw8c},       // odd map, batch 1
      {3, 20, 12, 4, 4, 3, 3, {1, 1}, {1, 1}, tag::nchw, tag::nchw},          // batch 3, 20 and 12 channels
      {3, 24, 40, 2, 2, 3, 3, {1, 1}, {1, 1}, tag::nChw8c, tag::nhwc},        // 2x2 maps: 3 points a side
      {8, 64, 48, 13, 11, 3, 3, {1, 1}, {1, 1}, tag::nChw16c, tag::nChw16c},  // several chunks of tiles
      {2, 256, 264, 3, 5, 3, 3, {1, 1}, {1, 1}, tag::nhwc, tag::nChw8c},      // wide: all tiles at once
  };
  for (const Case& k : cases) {
    CheckBf16(k, 2, false, 0);
    CheckBf16(k, 4, false, 0);
    CheckBf16(k, 2, true, 4);
  }
}

TEST(WinogradConv, TakesOnlyThreeByThreeSamePaddingAndTiles2Or4) {
  auto md = [](const Shape& s) { return dnnl::memory::desc(ToDims(s), dnnl::memory::data_type::f32, tag::nchw); };
  const Shape x{2, 8, 6, 6};
  const TapConv::Layouts same{md(x), md(x), md(x), md(x)};
  EXPECT_NE(WinogradConv::Make(x, {8, 8, 3, 3}, x, {1, 1}, {1, 1}, {1, 1}, same), nullptr);
  EXPECT_NE(WinogradConv::Make(x, {8, 8, 3, 3}, x, {1, 1}, {1, 1}, {1, 1}, same, 4), nullptr);
  EXPECT_EQ(WinogradConv::Make(x, {8, 8, 3, 3}, x, {1, 1}, {1, 1}, {1, 1}, same, 3), nullptr);
  EXPECT_NE(WinogradConv::Make(x, {8, 8, 3, 3}, x, {1, 1}, {1, 1}, {1, 1}, same, 2, true), nullptr);
  EXPECT_EQ(WinogradConv::Make(x, {8, 8, 3, 3}, x, {1, 1}, {1, 1}, {1, 1}, same, 4, true), nullptr);  // rounds too much
  EXPECT_EQ(WinogradConv::Make(x, {8, 8, 3, 3}, {2, 8, 3, 3}, {2, 2}, {1, 1}, {1, 1}, same), nullptr);  // stride 2
  EXPECT_EQ(WinogradConv::Make(x, {8, 8, 3, 3}, {2, 8, 4, 4}, {1, 1}, {1, 1}, {0, 0}, same), nullptr);  // no pad
  EXPECT_EQ(WinogradConv::Make(x, {8, 8, 5, 5}, x, {1, 1}, {1, 1}, {2, 2}, same), nullptr);             // 5x5
  EXPECT_EQ(WinogradConv::Make(x, {8, 8, 3, 3}, {2, 8, 2, 2}, {1, 1}, {2, 2}, {0, 0}, same), nullptr);  // dilated
  const Shape half{2, 8, 3, 3};
  const TapConv::Layouts strided{md(x), md(half), md(half), md(x)};
  EXPECT_NE(TapConv::Make(x, {8, 8, 3, 3}, half, {2, 2}, {1, 1}, {1, 1}, strided), nullptr);  // stride 2
  EXPECT_EQ(TapConv::Make(x, {8, 8, 1, 1}, half, {2, 2}, {1, 1}, {0, 0}, strided), nullptr);  // inputs unread
  EXPECT_EQ(TapConv::Make(x, {8, 8, 3, 3}, {2, 8, 2, 2}, {1, 1}, {2, 2}, {0, 0}, same), nullptr);       // dilated
  // A pad so wide that corner outputs see no input.
  EXPECT_EQ(TapConv::Make(x, {8, 8, 3, 3}, {2, 8, 10, 10}, {1, 1}, {1, 1}, {3, 3}, same), nullptr);
}

}  // namespace
}  // namespace cpu
}  // namespace ot
