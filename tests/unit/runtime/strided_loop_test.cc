// Tests of the strided walks split among threads (runtime/cpu/strided_loop.h): a walk cut into
// element ranges, and ForEachRowParallel with StridedCopy on 1, 2 and 3 threads, against the
// serial ForEachRow, bitwise, at odd sizes (runs cut mid-row, a range inside one run, outer
// dimensions of one, negative steps, a transpose and the q/k/v slice of a packed product).
#include <gtest/gtest.h>

#include <omp.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "runtime/cpu/strided_loop.h"

namespace ot {
namespace cpu {
namespace {

struct View {
  Shape shape;
  std::vector<int64_t> strides;  // in elements of the source
  int64_t offset = 0;
  int64_t source_size = 0;
};

// The source offsets of a view's elements in row-major order, by the serial walk.
std::vector<int64_t> SerialOffsets(const View& v) {
  std::vector<int64_t> out;
  ForEachRow<2>(v.shape, {v.strides, RowMajorStrides(v.shape)},
                [&](const std::array<int64_t, 2>& at, int64_t len, const std::array<int64_t, 2>& step) {
                  for (int64_t i = 0; i < len; ++i) out.push_back(v.offset + at[0] + i * step[0]);
                });
  return out;
}

std::vector<View> OddViews() {
  return {
      // a transpose of [7, 5, 3] to [3, 7, 5]
      {{3, 7, 5}, {1, 15, 3}, 0, 105},
      // the k third of a packed [T=13, n=3, 3E=3*11] product, as [13, 3, 11]
      {{13, 3, 11}, {99, 33, 1}, 11, 13 * 99},
      // every other element backwards along the last axis, outer dimensions of one
      {{1, 9, 1, 17}, {0, 40, 0, -2}, 35, 9 * 40},
      // one long contiguous run
      {{1001}, {1}, 3, 1004},
      // a scalar
      {{}, {}, 4, 5},
  };
}

TEST(StridedLoop, RangesCoverTheWalkInOrder) {
  for (const View& v : OddViews()) {
    const std::vector<int64_t> serial = SerialOffsets(v);
    Shape shape = v.shape;
    StrideSet<2> strides = {v.strides, RowMajorStrides(v.shape)};
    CoalesceDims(shape, strides);
    const int64_t n = static_cast<int64_t>(serial.size());
    for (int64_t cut : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{7}, n}) {
      std::vector<int64_t> got, dst;
      for (int64_t b = 0; b < n; b += cut)
        ForEachRowInRange<2>(shape, strides, b, std::min(n, b + cut),
                             [&](const std::array<int64_t, 2>& at, int64_t len, const std::array<int64_t, 2>& step) {
                               for (int64_t i = 0; i < len; ++i) {
                                 got.push_back(v.offset + at[0] + i * step[0]);
                                 dst.push_back(at[1] + i * step[1]);
                               }
                             });
      EXPECT_EQ(got, serial) << "pieces of " << cut;
      std::vector<int64_t> dense(serial.size());
      std::iota(dense.begin(), dense.end(), 0);
      EXPECT_EQ(dst, dense) << "pieces of " << cut;
    }
  }
}

TEST(StridedLoop, ParallelWalkVisitsEachElementOnce) {
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    for (const View& v : OddViews()) {
      const std::vector<int64_t> serial = SerialOffsets(v);
      std::vector<int64_t> got(serial.size(), -1);
      std::vector<int> visits(serial.size(), 0);
      ForEachRowParallel<2>(v.shape, {v.strides, RowMajorStrides(v.shape)}, 1,
                            [&](const std::array<int64_t, 2>& at, int64_t len, const std::array<int64_t, 2>& step) {
                              for (int64_t i = 0; i < len; ++i) {
                                const auto d = static_cast<size_t>(at[1] + i * step[1]);
                                got[d] = v.offset + at[0] + i * step[0];
                                ++visits[d];
                              }
                            });
      EXPECT_EQ(got, serial) << threads << " threads";
      EXPECT_EQ(visits, std::vector<int>(serial.size(), 1)) << threads << " threads";
    }
  }
  omp_set_num_threads(saved);
}

// StridedCopy above its parallel size: the k slice of a packed [131, 3, 3*257] product and a
// transpose of it, on 1, 2 and 3 threads, bitwise the serial walk's copy.
TEST(StridedLoop, ParallelCopyEqualsSerial) {
  const int64_t t = 131, n = 3, e = 257;
  std::vector<float> packed(static_cast<size_t>(t * n * 3 * e));
  for (size_t i = 0; i < packed.size(); ++i) packed[i] = static_cast<float>(i) * 0.37f - 1.f;
  const std::vector<View> views = {{{t, n, e}, {n * 3 * e, 3 * e, 1}, e, 0},
                                   {{n, e, t}, {3 * e, 1, n * 3 * e}, 2 * e, 0}};
  ASSERT_GT(t * n * e, kParallelCopyElements);
  const int saved = omp_get_max_threads();
  for (const View& v : views) {
    const std::vector<int64_t> serial = SerialOffsets(v);
    std::vector<float> want(serial.size());
    for (size_t i = 0; i < serial.size(); ++i) want[i] = packed[static_cast<size_t>(serial[i])];
    for (int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      std::vector<float> got(want.size(), 0.f);
      StridedCopy(packed.data(), v.strides, v.offset, got.data(), v.shape, sizeof(float));
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float))) << threads << " threads";
    }
  }
  omp_set_num_threads(saved);
}

}  // namespace
}  // namespace cpu
}  // namespace ot
