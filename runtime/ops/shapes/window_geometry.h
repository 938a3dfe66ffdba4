// Sliding-window geometry of Conv and the pooling ops: reads ONNX's kernel_shape, strides,
// dilations, pads, auto_pad and ceil_mode attributes and works out, per spatial
// dimension, the padding on each side and the output size, following the ONNX formulas.
// Device independent; the oneDNN and cuDNN kernels both feed it into their descriptors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "runtime/core/tensor.h"

namespace ot {

// The window attributes of one node, one entry per spatial dimension.
struct WindowAttrs {
  std::vector<int64_t> kernel;
  std::vector<int64_t> strides;
  std::vector<int64_t> dilations;   // ONNX convention: 1 means dense
  std::vector<int64_t> pads_begin;  // from `pads` (ignored when auto_pad is set)
  std::vector<int64_t> pads_end;
  std::string auto_pad = "NOTSET";  // NOTSET, SAME_UPPER, SAME_LOWER or VALID
  bool ceil_mode = false;
};

// Padding and output size of every spatial dimension.
struct WindowGeometry {
  std::vector<int64_t> pads_begin;
  // Padding at the end that a library must use to produce `output`: the node's own
  // end padding plus, under ceil_mode, the part of the last window past the input.
  std::vector<int64_t> pads_end;
  // That ceil_mode part alone (0 without ceil_mode); averages must not count it.
  std::vector<int64_t> ceil_extra;
  std::vector<int64_t> output;
};

// Reads the window attributes of `node` for `spatial_rank` dimensions. `kernel` is the
// window size when the op fixes it (Conv: the weight's spatial dims); the kernel_shape
// attribute must then agree with it. Otherwise kernel_shape is required. Throws ot::Error
// naming the node for malformed attributes.
WindowAttrs ReadWindowAttrs(const Node& node, size_t spatial_rank, const std::vector<int64_t>& kernel);

// Geometry over the input's spatial dims (`input_spatial`, same length as the attrs).
// Throws ot::Error naming the node when the window does not fit.
WindowGeometry ComputeWindowGeometry(const WindowAttrs& attrs, const Shape& input_spatial, const Node& node);

// Spatial part (dims 2..) of an N x C x D1 x ... shape.
Shape SpatialDims(const Shape& shape);

// The windows of one pooling node (MaxPool, AveragePool, GlobalMaxPool,
// GlobalAveragePool) over an N x C x D1 x ... input.
struct PoolWindow {
  bool is_max = false;
  bool include_pad = false;  // AveragePool's count_include_pad
  WindowAttrs attrs;         // a global pool's window is the whole spatial extent
  WindowGeometry geometry;
  Shape output;  // N x C x output spatial dims
};
// `op` is the forward op type. Throws ot::UnsupportedError for count_include_pad=1 with a
// ceil_mode window past the padding (ONNX leaves that part out of the count).
PoolWindow DescribePoolWindow(const std::string& op, const Node& node, const Shape& x_shape);

// The windows of a Conv node on input X (N x C x D1 x ...), weight W (M x C/group x k1 x
// ...) and optional bias B (M).
struct ConvWindow {
  int64_t group = 1;
  int64_t in_channels = 0, out_channels = 0;
  Shape kernel;  // W's spatial dims
  WindowAttrs attrs;
  WindowGeometry geometry;
  Shape output;  // N x M x output spatial dims
};
// Checks ranks, channels, group and bias (throws ot::Error naming the node; an input of
// more than 3 spatial dimensions throws ot::UnsupportedError ending in `rank_limit`, the
// library's own words such as "oneDNN has 1D to 3D").
ConvWindow DescribeConvWindow(const Node& node, const Tensor& x, const Tensor& w, const Tensor* b,
                              const std::string& rank_limit);

// The windows of a ConvTranspose node on input X (N x C x D1 x ...), weight W (C x
// M/group x k1 x ...) and optional bias B (M). Output size per spatial dimension:
// (in - 1) * stride + output_padding + (k - 1) * dilation + 1 - pads_begin - pads_end, with
// the pads from `pads`, auto_pad (SAME_*: output in * stride) or output_shape (total
// padding split by the ONNX rule; a negative total is extra zero output at the end).
struct ConvTransposeWindow {
  int64_t group = 1;
  int64_t in_channels = 0, out_channels = 0;
  Shape kernel;  // W's spatial dims
  std::vector<int64_t> strides, dilations;  // dilations in the ONNX convention (1: dense)
  // Cropping of the full transposed convolution at each end; pads_end has output_padding
  // taken off, so it can be negative (zero rows added at the end).
  std::vector<int64_t> pads_begin, pads_end;
  Shape output;  // N x M x output spatial dims
};
ConvTransposeWindow DescribeConvTransposeWindow(const Node& node, const Tensor& x, const Tensor& w, const Tensor* b,
                                                const std::string& rank_limit);

}  // namespace ot

