// Per-channel batch statistics in double: see channel_statistics.h.
#include "runtime/cpu/norm/channel_statistics.h"

#include <algorithm>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "graph/error.h"
#include "runtime/ops/math/sync_bn_math.h"

namespace ot {
namespace cpu {
namespace {

// Element (n, c, s) of the data, s running over the spatial dims flattened, lies at
//   n * n_stride + (c / lanes) * group_stride + s * s_stride + c % lanes.
// `lanes` contiguous channels form a group: the block of nChw16c (16), all channels of a
// channels-last layout (C), or one channel of a plain layout.
struct ChannelGeometry {
  int64_t batch = 0, channels = 0, spatial = 1;
  int64_t n_stride = 0, group_stride = 0, s_stride = 0, lanes = 1, offset = 0;
};

ChannelGeometry GeometryOf(const dnnl::memory::desc& md) {
  const dnnl_memory_desc_t& d = md.data;
  if (d.format_kind != dnnl_blocked || d.ndims < 2 || d.data_type != dnnl_f32)
    throw UnsupportedError("batch statistics need float32 data of rank 2 or more in a blocked oneDNN layout");
  const auto& b = d.format_desc.blocking;
  ChannelGeometry g;
  g.batch = d.dims[0];
  g.channels = d.dims[1];
  g.offset = d.offset0;
  g.n_stride = b.strides[0];
  if (b.inner_nblks > 1 || (b.inner_nblks == 1 && b.inner_idxs[0] != 1))
    throw UnsupportedError("batch statistics: a layout blocked on other dims than channels (" +
                           std::to_string(b.inner_nblks) + " inner blocks)");
  // The spatial dims must flatten into one stride: each dim's stride is the next one's
  // times the next one's size.
  for (int i = 2; i < d.ndims; ++i) g.spatial *= d.dims[i];
  g.s_stride = d.ndims > 2 ? b.strides[d.ndims - 1] : 0;
  for (int i = 2; i + 1 < d.ndims; ++i)
    if (d.dims[i + 1] > 1 && d.dims[i] > 1 && b.strides[i] != b.strides[i + 1] * d.dims[i + 1])
      throw UnsupportedError("batch statistics: spatial dims that do not flatten into one");
  if (b.inner_nblks == 1) {
    g.lanes = b.inner_blks[0];
    g.group_stride = b.strides[1];
  } else if (b.strides[1] == 1 && g.channels > 1) {
    g.lanes = g.channels;  // channels-last
    g.group_stride = 0;
  } else {
    g.lanes = 1;
    g.group_stride = b.strides[1];
  }
  return g;
}

#if defined(__x86_64__) && defined(__GNUC__)
// SumGroup for a channel-blocked layout of LANES (8 or 16) channels per block on AVX2:
// each position's LANES floats widen to LANES / 4 vectors of doubles; U positions per
// iteration keep 2 * U * LANES / 4 = 8 independent accumulator chains in flight. The
// build targets baseline x86-64, whose SSE2 doubles are 2 wide: 3-4x slower here.
template <int LANES>
__attribute__((target("avx2,fma"))) void SumBlockedGroupAvx2(const ChannelGeometry& g, const float* base,
                                                             const double* m, double* sum, double* sq) {
  constexpr int V = LANES / 4;  // vectors per position
  constexpr int U = 8 / V / 2;  // positions per iteration
  __m256d mu[V], s1[U][V], s2[U][V];
  for (int v = 0; v < V; ++v) {
    mu[v] = m ? _mm256_loadu_pd(m + 4 * v) : _mm256_setzero_pd();
    for (int u = 0; u < U; ++u) s1[u][v] = s2[u][v] = _mm256_setzero_pd();
  }
  const int64_t stride = g.s_stride;
  for (int64_t n = 0; n < g.batch; ++n) {
    const float* p = base + n * g.n_stride;
    int64_t s = 0;
    for (; s + U <= g.spatial; s += U, p += U * stride)
      for (int u = 0; u < U; ++u)
        for (int v = 0; v < V; ++v) {
          const __m256d d = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(p + u * stride + 4 * v)), mu[v]);
          s1[u][v] = _mm256_add_pd(s1[u][v], d);
          s2[u][v] = _mm256_fmadd_pd(d, d, s2[u][v]);
        }
    for (; s < g.spatial; ++s, p += stride)
      for (int v = 0; v < V; ++v) {
        const __m256d d = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(p + 4 * v)), mu[v]);
        s1[0][v] = _mm256_add_pd(s1[0][v], d);
        s2[0][v] = _mm256_fmadd_pd(d, d, s2[0][v]);
      }
  }
  for (int u = 1; u < U; ++u)
    for (int v = 0; v < V; ++v) {
      s1[0][v] = _mm256_add_pd(s1[0][v], s1[u][v]);
      s2[0][v] = _mm256_add_pd(s2[0][v], s2[u][v]);
    }
  for (int v = 0; v < V; ++v) {
    _mm256_storeu_pd(sum + 4 * v, s1[0][v]);
    if (m) _mm256_storeu_pd(sq + 4 * v, s2[0][v]);
  }
}

bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}
#endif

// Over one channel group (lanes channels starting at `base`), with m = null:
//   sum[l] = sum of x, sq untouched; with m: sum[l] = sum of (x - m[l]) and
//   sq[l] = sum of (x - m[l])^2.
void SumGroup(const ChannelGeometry& g, const float* base, const double* m, double* sum, double* sq) {
  const int64_t lanes = g.lanes;
#if defined(__x86_64__) && defined(__GNUC__)
  if ((lanes == 8 || lanes == 16) && g.s_stride == lanes && HasAvx2())
    return lanes == 8 ? SumBlockedGroupAvx2<8>(g, base, m, sum, sq) : SumBlockedGroupAvx2<16>(g, base, m, sum, sq);
#endif
  std::fill(sum, sum + lanes, 0.0);
  if (m) std::fill(sq, sq + lanes, 0.0);
  if (lanes == 1 && (g.s_stride == 1 || g.spatial == 1)) {
    // Plain layout: a channel's spatial run is contiguous; eight partial sums vectorise.
    double s1[8] = {0, 0, 0, 0, 0, 0, 0, 0}, s2[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const double mu = m ? m[0] : 0.0;
    for (int64_t n = 0; n < g.batch; ++n) {
      const float* p = base + n * g.n_stride;
      int64_t s = 0;
      for (; s + 8 <= g.spatial; s += 8)
        for (int k = 0; k < 8; ++k) {
          const double d = static_cast<double>(p[s + k]) - mu;
          s1[k] += d;
          s2[k] += d * d;
        }
      for (; s < g.spatial; ++s) {
        const double d = static_cast<double>(p[s]) - mu;
        s1[0] += d;
        s2[0] += d * d;
      }
    }
    auto total = [](const double* v) { return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7])); };
    sum[0] = total(s1);
    if (m) sq[0] = total(s2);
    return;
  }
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t s = 0; s < g.spatial; ++s) {
      const float* p = base + n * g.n_stride + s * g.s_stride;
      if (!m) {
        for (int64_t l = 0; l < lanes; ++l) sum[l] += static_cast<double>(p[l]);
        continue;
      }
      for (int64_t l = 0; l < lanes; ++l) {
        const double d = static_cast<double>(p[l]) - m[l];
        sum[l] += d;
        sq[l] += d * d;
      }
    }
}

// Calls f(i, l) for every element of one channel group: i its offset from the group's
// base, l its lane (channel - first channel of the group).
template <typename F>
void VisitGroup(const ChannelGeometry& g, F&& f) {
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t s = 0; s < g.spatial; ++s) {
      const int64_t at = n * g.n_stride + s * g.s_stride;
      for (int64_t l = 0; l < g.lanes; ++l) f(at + l, l);
    }
}

// Runs f(first_channel, live_lanes, group_offset) for each channel group, in parallel.
template <typename F>
void ForEachGroup(const ChannelGeometry& g, F&& f) {
  const int64_t groups = (g.channels + g.lanes - 1) / g.lanes;
#pragma omp parallel for schedule(static)
  for (int64_t group = 0; group < groups; ++group) {
    const int64_t first = group * g.lanes;
    f(first, std::min(g.lanes, g.channels - first), g.offset + group * g.group_stride);
  }
}

}  // namespace

int64_t ChannelCount(const dnnl::memory::desc& md) {
  const ChannelGeometry g = GeometryOf(md);
  return g.batch * g.spatial;
}

void ChannelSums(const dnnl::memory::desc& md, const float* data, const double* center, double* sum, double* sq) {
  const ChannelGeometry g = GeometryOf(md);
  ForEachGroup(g, [&](int64_t first, int64_t live, int64_t offset) {
    const size_t lanes = static_cast<size_t>(g.lanes);
    std::vector<double> m(lanes, 0.0), s1(lanes), s2(lanes);
    if (center) std::copy(center + first, center + first + live, m.begin());
    SumGroup(g, data + offset, center ? m.data() : nullptr, s1.data(), s2.data());
    std::copy(s1.begin(), s1.begin() + live, sum + first);
    if (center) std::copy(s2.begin(), s2.begin() + live, sq + first);
  });
}

void ChannelGradientSums(const dnnl::memory::desc& md, const float* dy, const float* x, const double* mean,
                         double* sum_dy, double* sum_dy_xmu) {
  const ChannelGeometry g = GeometryOf(md);
  ForEachGroup(g, [&](int64_t first, int64_t live, int64_t offset) {
    const size_t lanes = static_cast<size_t>(g.lanes);
    std::vector<double> m(lanes, 0.0), s1(lanes, 0.0), s2(lanes, 0.0);
    std::copy(mean + first, mean + first + live, m.begin());
    const float* dy_g = dy + offset;
    const float* x_g = x + offset;
    VisitGroup(g, [&](int64_t i, int64_t l) {
      const double d = dy_g[i];
      s1[static_cast<size_t>(l)] += d;
      s2[static_cast<size_t>(l)] += d * (static_cast<double>(x_g[i]) - m[static_cast<size_t>(l)]);
    });
    std::copy(s1.begin(), s1.begin() + live, sum_dy + first);
    std::copy(s2.begin(), s2.begin() + live, sum_dy_xmu + first);
  });
}

void ChannelAffineCombination(const dnnl::memory::desc& md, const float* dy, const float* x, const double* center,
                              const double* a, const double* b, const double* k, float* out) {
  const ChannelGeometry g = GeometryOf(md);
  ForEachGroup(g, [&](int64_t first, int64_t live, int64_t offset) {
    const size_t lanes = static_cast<size_t>(g.lanes);
    // A padded block's tail lanes get zeros (their coefficients stay 0).
    std::vector<double> gm(lanes, 0.0), ga(lanes, 0.0), gb(lanes, 0.0), gk(lanes, 0.0);
    std::copy(center + first, center + first + live, gm.begin());
    std::copy(a + first, a + first + live, ga.begin());
    std::copy(b + first, b + first + live, gb.begin());
    std::copy(k + first, k + first + live, gk.begin());
    const float* dy_g = dy + offset;
    const float* x_g = x + offset;
    float* out_g = out + offset;
    VisitGroup(g, [&](int64_t i, int64_t l) {
      const size_t c = static_cast<size_t>(l);
      out_g[i] = l < live ? BatchNormGradElement(ga[c], gb[c], gk[c], dy_g[i], x_g[i], gm[c]) : 0.f;
    });
  });
}

void ChannelStatistics(const dnnl::memory::desc& md, const float* data, float* mean, float* var) {
  const ChannelGeometry g = GeometryOf(md);
  const int64_t groups = (g.channels + g.lanes - 1) / g.lanes;
  const double count = static_cast<double>(g.batch * g.spatial);
  if (count == 0) {
    std::fill(mean, mean + g.channels, 0.f);
    std::fill(var, var + g.channels, 0.f);
    return;
  }
  const float* x = data + g.offset;
#pragma omp parallel
  {
    const size_t lanes = static_cast<size_t>(g.lanes);
    std::vector<double> m(lanes), dev(lanes), sq(lanes);
#pragma omp for schedule(static)
    for (int64_t group = 0; group < groups; ++group) {
      const float* base = x + group * g.group_stride;
      const int64_t first = group * g.lanes;
      const int64_t live = std::min(g.lanes, g.channels - first);  // a padded block's tail is not data
      // Pass 1: the mean. Pass 2: squared deviations from it, with the sum of the
      // deviations themselves correcting the mean's own rounding.
      SumGroup(g, base, nullptr, m.data(), nullptr);
      for (double& v : m) v /= count;
      SumGroup(g, base, m.data(), dev.data(), sq.data());
      for (int64_t l = 0; l < live; ++l) {
        const size_t i = static_cast<size_t>(l);
        mean[first + l] = static_cast<float>(m[i] + dev[i] / count);
        var[first + l] = static_cast<float>(std::max((sq[i] - dev[i] * dev[i] / count) / count, 0.0));
      }
    }
  }
}

}  // namespace cpu
}  // namespace ot
