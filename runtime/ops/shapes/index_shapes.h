// Device-neutral Prepare logic of the indexing ops that op_shapes.h does not cover
// (GatherND, ScatterND, ScatterElements, Trilu, CumSum, TopK, DepthToSpace, SpaceToDepth,
// ReverseSequence, OneHot, Range, EyeLike, Compress) and of their gradient-domain
// partners (GatherGrad, GatherElementsGrad, GatherNDGrad, SliceGrad, TileGrad,
// DepthToSpaceGrad): attribute reading, checks naming the node, output shapes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "runtime/ops/checks/kernel_util.h"
#include "runtime/core/kernel.h"
#include "runtime/core/tensor.h"

namespace ot {

// GatherND(data, indices, batch_dims) and ScatterND (batch_dims 0): data seen as
// [batch, d_b .. d_{b+k-1}, slice], indices as [batch, tuples, k].
struct GatherNDPlan {
  int64_t batch = 1;             // product of the first batch_dims dims
  int64_t tuples = 1;            // index tuples per batch
  int64_t k = 0;                 // entries per tuple
  int64_t slice = 1;             // elements copied per tuple
  std::vector<int64_t> dims;     // the k indexed dims of data
  std::vector<int64_t> strides;  // their strides in elements, within one batch
  int64_t batch_stride = 0;      // elements of data per batch
  Shape out;                     // GatherND's output (ScatterND's updates) shape
};
GatherNDPlan PlanGatherND(const Node& node, const Shape& data, const Tensor& indices, int64_t batch_dims);

// ScatterElements / Scatter: checks data, indices and updates; returns the axis.
int64_t ScatterElementsAxis(const Node& node, const Tensor& data, const Tensor& indices, const Tensor& updates);
// The scatter reduction attribute as an op: 'none', 'add', 'mul', 'max', 'min'.
std::string ScatterReduction(const Node& node, int opset);

// Gradient-domain gathers: checks dY against the forward output the shape/indices imply.
void CheckGatherGrad(const Node& node, const Tensor& dy, const Shape& data, const Tensor& indices, int64_t* axis);
void CheckGatherElementsGrad(const Node& node, const Tensor& dy, const Shape& data, const Tensor& indices,
                             int64_t* axis);

// TileGrad(dY, X shape): the repeats (dY's dims over X's), checked.
std::vector<int64_t> TileGradRepeats(const Node& node, const Shape& dy, const Shape& x);

// Trilu(X[, k]): the diagonal offset; X must have rank >= 2.
int64_t TriluOffset(const Node& node, const KernelContext& ctx, ShapeInputValues& inputs);

// CumSum(X, axis): the normalised axis (axis is a scalar int32/int64 input).
int64_t CumSumAxis(const Node& node, const KernelContext& ctx, ShapeInputValues& inputs);

// TopK(X, K) (K an attribute before opset 10): axis and k, checked.
struct TopKPlan {
  int64_t axis = -1;
  int64_t k = 0;
  bool largest = true;
  bool sorted = true;
  Shape out;
};
TopKPlan PlanTopK(const Node& node, int opset, const KernelContext& ctx, ShapeInputValues& inputs);

// DepthToSpace (DCR or CRD), SpaceToDepth and DepthToSpaceGrad as one permutation of a
// rank-4 tensor: the output, and for each output element the input strides to read it
// (a 6-D strided view of the input).
struct BlockPermutation {
  Shape out;
  Shape walk;                    // 6-D walk in output order
  std::vector<int64_t> strides;  // input strides per walk axis
};
BlockPermutation PlanBlockPermutation(const Node& node, const Shape& x);

// ReverseSequence(X, lens): batch and time axes, checked lengths.
struct ReverseSequencePlan {
  int64_t batch_axis = 1, time_axis = 0;
  std::vector<int64_t> lens;
};
ReverseSequencePlan PlanReverseSequence(const Node& node, const Tensor& x, const Tensor& lens);

// OneHot(indices, depth, values): axis and depth; the output shape.
Shape OneHotOutputShape(const Node& node, const Tensor& indices, int64_t depth, int64_t* axis);

// Range(start, limit, delta): the number of elements max(ceil((limit - start) / delta), 0).
int64_t RangeCount(const Node& node, double start, double limit, double delta);

// EyeLike: the output type (attribute dtype or the input's).
DType EyeLikeType(const Node& node, const Tensor& x);


// Resize (opset 10: X, scales; 11+: X, roi, scales, sizes) and Upsample (X, scales; the
// attribute before opset 9), and ResizeGrad, which carries the forward's inputs at the
// same positions. Separable: along each axis every output index reads `taps` input
// indices (clamped to the edge) with weights; an output outside the crop of
// tf_crop_and_resize takes extrapolation_value instead (and passes no gradient).
struct ResizeAxis {
  int64_t in = 0, out = 0;
  int taps = 1;
  bool identity = true;          // out == in and every output reads its own index
  std::vector<int64_t> index;    // out * taps
  std::vector<float> weight;     // out * taps
  std::vector<uint8_t> outside;  // out (tf_crop_and_resize only)
};
struct ResizePlan {
  Shape out;
  std::vector<ResizeAxis> axes;
  bool any_outside = false;
  float extrapolation_value = 0.f;
  // Linear with half-pixel coordinates (pytorch_half_pixel where every output axis is
  // longer than 1) on a rank 3-5 tensor, resizing only axes 2+ and each at scale exactly
  // out/in: the case library resampling primitives compute (oneDNN's resampling_linear).
  bool spatial_half_pixel_linear = false;
};
// The float values of roi/scales (inputs `roi_input` and `scales_input`, -1 when the op
// has none) and the sizes input; `op`/`opset` are the forward op's.
struct ResizeInputs {
  std::vector<double> roi, scales;
  std::vector<int64_t> sizes;
  bool operator==(const ResizeInputs& o) const { return roi == o.roi && scales == o.scales && sizes == o.sizes; }
};
ResizeInputs ReadResizeInputs(const Node& node, const std::string& op, int64_t opset, const KernelContext& ctx);
ResizePlan PlanResize(const Node& node, const std::string& op, int64_t opset, const Shape& x, const ResizeInputs& in);

// The transpose of one axis's taps, for a gradient written gather-style (each input position
// sums the outputs that read it, in a fixed order: no atomics, the same sums every run): the
// flattened taps e = j * taps + t with index[e] == p, in increasing e, are
// entries[starts[p] .. starts[p + 1]) (starts has in + 1 entries).
void TransposeResizeTaps(const ResizeAxis& axis, std::vector<int64_t>* starts, std::vector<int64_t>* entries);

// GridSample's mode as opset 16 names it: "bilinear", "nearest" or "bicubic". Opset 20
// renamed bilinear and bicubic to linear and cubic; either name is taken (a GridSampleGrad
// node carries its forward's attributes, whatever its opset). Throws for other modes.
std::string GridSampleMode(const Node& node);
// GridSample(X [N, C, H, W], grid [N, Ho, Wo, 2]) (opsets 16, 20, 22): checks the inputs and
// the attributes (mode, padding_mode zeros/border/reflection); returns the output shape
// [N, C, Ho, Wo]. The volumetric form of opset 20 (5-D X) throws ot::UnsupportedError.
Shape GridSampleOutputShape(const Node& node, const Tensor& x, const Tensor& grid);

}  // namespace ot
