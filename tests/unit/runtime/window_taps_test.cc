// runtime/ops/shapes/window_taps.h, the tap arithmetic the CUDA pooling gradient runs on the
// device: ForEachWindowCovering must visit exactly the (window, tap) pairs that land on
// an input position, each once, in increasing window order (the fixed summation order
// that makes the gather-style gradient deterministic), for every stride, dilation, pad
// and output size, ceil_mode's partial windows included. And a max/average pooling
// gradient written gather-style with it equals the scatter-style one.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "runtime/ops/shapes/window_taps.h"

namespace ot {
namespace {

using Pairs = std::vector<std::pair<int64_t, int64_t>>;

Pairs BruteForce(int64_t p, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation, int64_t out) {
  Pairs pairs;
  for (int64_t o = 0; o < out; ++o)
    for (int64_t k = 0; k < kernel; ++k)
      if (WindowTap(o, k, stride, pad, dilation) == p) pairs.emplace_back(o, k);
  return pairs;
}

TEST(WindowTaps, CoveringWindowsMatchEveryTap) {
  int checked = 0;
  for (int64_t in = 1; in <= 9; ++in)
    for (int64_t kernel = 1; kernel <= 5; ++kernel)
      for (int64_t stride = 1; stride <= 4; ++stride)
        for (int64_t dilation = 1; dilation <= 3; ++dilation)
          for (int64_t pad = 0; pad < kernel; ++pad) {
            const int64_t extent = (kernel - 1) * dilation + 1;
            if (in + 2 * pad < extent) continue;
            // floor and ceil output sizes (ceil_mode's last window may start past the input's end padding)
            const int64_t floor_out = (in + 2 * pad - extent) / stride + 1;
            for (int64_t out : {floor_out, floor_out + 1}) {
              for (int64_t p = 0; p < in; ++p) {
                Pairs visited;
                ForEachWindowCovering(p, kernel, stride, pad, dilation, out,
                                      [&](int64_t o, int64_t k) { visited.emplace_back(o, k); });
                ASSERT_EQ(visited, BruteForce(p, kernel, stride, pad, dilation, out))
                    << "p " << p << " in " << in << " kernel " << kernel << " stride " << stride << " dilation "
                    << dilation << " pad " << pad << " out " << out;
                ++checked;
              }
            }
          }
  EXPECT_GT(checked, 1000);
}

// 2-D pooling over one plane: the gradient gathered per input element (as the CUDA
// kernel does) against the one scattered per window.
struct Plane2d {
  int64_t in_h, in_w, out_h, out_w, kernel, stride, pad;
};

std::vector<float> ScatterGrad(const Plane2d& g, bool max, const std::vector<float>& x, const std::vector<float>& dy) {
  std::vector<float> dx(static_cast<size_t>(g.in_h * g.in_w), 0.f);
  for (int64_t oh = 0; oh < g.out_h; ++oh)
    for (int64_t ow = 0; ow < g.out_w; ++ow) {
      int64_t best = -1, count = 0;
      for (int64_t kh = 0; kh < g.kernel; ++kh)
        for (int64_t kw = 0; kw < g.kernel; ++kw) {
          const int64_t h = WindowTap(oh, kh, g.stride, g.pad, 1), w = WindowTap(ow, kw, g.stride, g.pad, 1);
          if (h < 0 || h >= g.in_h || w < 0 || w >= g.in_w) continue;
          ++count;
          if (best < 0 || x[static_cast<size_t>(h * g.in_w + w)] > x[static_cast<size_t>(best)]) best = h * g.in_w + w;
        }
      const float grad = dy[static_cast<size_t>(oh * g.out_w + ow)];
      if (max) {
        if (best >= 0) dx[static_cast<size_t>(best)] += grad;
        continue;
      }
      for (int64_t kh = 0; kh < g.kernel; ++kh)
        for (int64_t kw = 0; kw < g.kernel; ++kw) {
          const int64_t h = WindowTap(oh, kh, g.stride, g.pad, 1), w = WindowTap(ow, kw, g.stride, g.pad, 1);
          if (h >= 0 && h < g.in_h && w >= 0 && w < g.in_w)
            dx[static_cast<size_t>(h * g.in_w + w)] += grad / static_cast<float>(count);
        }
    }
  return dx;
}

std::vector<float> GatherGrad(const Plane2d& g, bool max, const std::vector<float>& x, const std::vector<float>& dy) {
  auto window_best_and_count = [&](int64_t oh, int64_t ow, int64_t* count) {
    int64_t best = -1;
    *count = 0;
    for (int64_t kh = 0; kh < g.kernel; ++kh)
      for (int64_t kw = 0; kw < g.kernel; ++kw) {
        const int64_t h = WindowTap(oh, kh, g.stride, g.pad, 1), w = WindowTap(ow, kw, g.stride, g.pad, 1);
        if (h < 0 || h >= g.in_h || w < 0 || w >= g.in_w) continue;
        ++*count;
        if (best < 0 || x[static_cast<size_t>(h * g.in_w + w)] > x[static_cast<size_t>(best)]) best = h * g.in_w + w;
      }
    return best;
  };
  std::vector<float> dx(static_cast<size_t>(g.in_h * g.in_w), 0.f);
  for (int64_t h = 0; h < g.in_h; ++h)
    for (int64_t w = 0; w < g.in_w; ++w) {
      float sum = 0.f;
      ForEachWindowCovering(h, g.kernel, g.stride, g.pad, 1, g.out_h, [&](int64_t oh, int64_t) {
        ForEachWindowCovering(w, g.kernel, g.stride, g.pad, 1, g.out_w, [&](int64_t ow, int64_t) {
          int64_t count = 0;
          const int64_t best = window_best_and_count(oh, ow, &count);
          const float grad = dy[static_cast<size_t>(oh * g.out_w + ow)];
          if (max) {
            if (best == h * g.in_w + w) sum += grad;
          } else if (count > 0) {
            sum += grad / static_cast<float>(count);
          }
        });
      });
      dx[static_cast<size_t>(h * g.in_w + w)] = sum;
    }
  return dx;
}

TEST(WindowTaps, GatheredPoolGradientEqualsScattered) {
  // GoogLeNet's and SqueezeNet's 3x3 stride-2 ceil_mode pools, and an overlapping stride-1 one.
  const std::vector<Plane2d> planes = {{9, 9, 4, 4, 3, 2, 0},  {8, 8, 4, 4, 3, 2, 0},   // floor / ceil_mode
                                       {7, 7, 4, 4, 3, 2, 1},  {6, 5, 6, 5, 3, 1, 1},   // padded, stride 1
                                       {13, 13, 7, 7, 3, 2, 0}};                       // ceil: 13 -> 7
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (const Plane2d& g : planes) {
    std::vector<float> x(static_cast<size_t>(g.in_h * g.in_w)), dy(static_cast<size_t>(g.out_h * g.out_w));
    for (float& v : x) v = dist(gen);
    for (float& v : dy) v = dist(gen);
    for (bool max : {true, false}) {
      const std::vector<float> scattered = ScatterGrad(g, max, x, dy), gathered = GatherGrad(g, max, x, dy);
      for (size_t i = 0; i < scattered.size(); ++i)
        ASSERT_NEAR(gathered[i], scattered[i], 1e-5) << (max ? "max" : "average") << " element " << i << " of "
                                                     << g.in_h << "x" << g.in_w << " stride " << g.stride;
    }
  }
}

}  // namespace
}  // namespace ot
