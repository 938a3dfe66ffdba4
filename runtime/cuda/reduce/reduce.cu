// Reduction CUDA kernels: ReduceSum/Mean/Max/Min/Prod/L1/L2/SumSquare/LogSum/LogSumExp
// over any set of axes (also SumToShape's sums), and ArgMax/ArgMin. Outputs with many
// reduced elements get one block each (CUB's BlockReduce combines the threads' partial
// results in a fixed order, so results are deterministic); outputs with few get one
// thread each. Floating types accumulate in double as runtime/cpu/reduce/reduce.cc does.
#include <cub/block/block_reduce.cuh>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "runtime/cuda/math_device.h"
#include "runtime/cuda/launch_check.h"

namespace ot::cuda::math {
namespace {

constexpr int kBlock = 256;
// Below this many reduced elements per output, one thread reduces one output.
constexpr int64_t kThreadPerOutputBelow = 64;

template <typename T>
using AccOf = ReduceAcc<T>;

// One thread per output.
template <typename T>
__global__ void ReduceThreadKernel(ReduceOp op, const T* x, T* y, int64_t out_numel, int64_t count,
                                   ReduceIndexer ix, ReduceIdentities<AccOf<T>> id) {
  OT_GRID_LOOP(o, out_numel) y[o] = ReduceOutput<T>(op, x, o, count, ix, id);
}

// One block per output: the threads stride over the reduced elements, then CUB combines
// their partial results (in a fixed order).
template <typename T>
__global__ void ReduceBlockKernel(ReduceOp op, const T* x, T* y, int64_t out_numel, int64_t count, ReduceIndexer ix,
                                  ReduceIdentities<AccOf<T>> id) {
  using Acc = AccOf<T>;
  using BlockReduce = cub::BlockReduce<Acc, kBlock>;
  __shared__ typename BlockReduce::TempStorage temp;
  __shared__ Acc shared_shift;
  const ReduceCombine<Acc> combine{op};
  for (int64_t o = blockIdx.x; o < out_numel; o += gridDim.x) {
    const T* base = x + DecomposeOffset(o, ix.kept_rank, ix.kept_dims, ix.kept_strides);
    Acc acc = ReduceFirstIdentity(op, id);
    for (int64_t r = threadIdx.x; r < count; r += kBlock) {
      const Acc v = static_cast<Acc>(base[DecomposeOffset(r, ix.reduced_rank, ix.reduced_dims, ix.reduced_strides)]);
      acc = combine(acc, ReduceContribution(op, v));
    }
    acc = BlockReduce(temp).Reduce(acc, combine);
    if (op == ReduceOp::kLogSumExp) {
      if (threadIdx.x == 0) shared_shift = acc;
      __syncthreads();
      const Acc shift = shared_shift;
      Acc sum = id.zero;
      for (int64_t r = threadIdx.x; r < count; r += kBlock) {
        const Acc v = static_cast<Acc>(base[DecomposeOffset(r, ix.reduced_rank, ix.reduced_dims, ix.reduced_strides)]);
        sum = static_cast<Acc>(sum + ReduceShiftedExp(v, shift));
      }
      sum = BlockReduce(temp).Reduce(sum, ReduceCombine<Acc>{ReduceOp::kSum});
      acc = ReduceLogPlus(sum, shift);
    }
    if (threadIdx.x == 0) y[o] = static_cast<T>(ReduceFinish(op, acc, count));
    __syncthreads();  // temp storage is reused by the next output
  }
}

template <typename T>
__global__ void ArgExtremeKernel(bool is_max, bool select_last, const T* x, int64_t* y, int64_t outer, int64_t axis,
                                 int64_t inner) {
  const int64_t total = outer * inner;
  OT_GRID_LOOP(i, total) {
    const int64_t o = i / inner, in = i - o * inner;
    const T* row = x + o * axis * inner + in;
    int64_t best = 0;
    for (int64_t a = 1; a < axis; ++a) {
      const T v = row[a * inner], b = row[best * inner];
      const bool better = is_max ? (select_last ? v >= b : v > b) : (select_last ? v <= b : v < b);
      if (better) best = a;
    }
    y[i] = best;
  }
}


template <typename Fn>
bool DispatchReduceType(DType t, Fn&& fn) {
  switch (t) {
    case DType::kFloat32: fn(float{}); return true;
    case DType::kFloat64: fn(double{}); return true;
    case DType::kInt32: fn(int32_t{}); return true;
    case DType::kInt64: fn(int64_t{}); return true;
    default: return false;
  }
}

}  // namespace

bool LaunchReduce(ReduceOp op, DType type, const void* x, void* y, int64_t out_numel, int64_t reduced_count,
                  const ReduceIndexer& ix, cudaStream_t stream) {
  return DispatchReduceType(type, [&](auto tag) {
    using T = decltype(tag);
    const ReduceIdentities<AccOf<T>> id = MakeReduceIdentities<T>();
    if (out_numel == 0) return;
    const T* in = static_cast<const T*>(x);
    T* out = static_cast<T*>(y);
    if (reduced_count < kThreadPerOutputBelow) {
      ReduceThreadKernel<T><<<GridBlocks(out_numel, kBlock), kBlock, 0, stream>>>(op, in, out, out_numel, reduced_count,
                                                                              ix, id);
      OT_CUDA_CHECK_LAUNCH("ReduceThreadKernel");
    } else {
      ReduceBlockKernel<T><<<GridBlocks(out_numel, 1), kBlock, 0, stream>>>(op, in, out, out_numel, reduced_count, ix,
                                                                         id);
      OT_CUDA_CHECK_LAUNCH("ReduceBlockKernel");
    }
  });
}

bool LaunchArgExtreme(bool is_max, bool select_last, DType type, const void* x, int64_t* y, int64_t outer,
                      int64_t axis, int64_t inner, cudaStream_t stream) {
  auto run = [&](auto tag) {
    using T = decltype(tag);
    if (outer * inner > 0) {
      ArgExtremeKernel<T><<<GridBlocks(outer * inner, kBlock), kBlock, 0, stream>>>(is_max, select_last,
                                                                                 static_cast<const T*>(x), y, outer,
                                                                                 axis, inner);
      OT_CUDA_CHECK_LAUNCH("ArgExtremeKernel");
    }
  };
  switch (type) {
    case DType::kFloat32: run(float{}); return true;
    case DType::kFloat64: run(double{}); return true;
    case DType::kInt32: run(int32_t{}); return true;
    case DType::kInt64: run(int64_t{}); return true;
    case DType::kInt8: run(int8_t{}); return true;
    case DType::kUInt8: run(uint8_t{}); return true;
    default: return false;
  }
}

}  // namespace ot::cuda::math
