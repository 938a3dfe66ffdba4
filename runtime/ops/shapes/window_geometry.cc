// Sliding-window geometry of Conv and the pooling ops (see window_geometry.h).
#include "runtime/ops/shapes/window_geometry.h"

#include <algorithm>

#include "graph/error.h"

namespace ot {
namespace {

std::string JoinInts(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t x : v) s += (s.empty() ? "" : ", ") + std::to_string(x);
  return "[" + s + "]";
}

// An attribute list of one value per spatial dimension, each at least `min_value`.
std::vector<int64_t> ReadPerDim(const Node& node, const char* key, size_t rank, int64_t fallback, int64_t min_value) {
  std::vector<int64_t> v = node.GetInts(key, std::vector<int64_t>(rank, fallback));
  if (v.size() != rank)
    throw Error(StrFormat("%s: attribute %s has %zu values, expected one per spatial dimension (%zu)",
                          node.Describe().c_str(), key, v.size(), rank));
  for (int64_t x : v)
    if (x < min_value)
      throw Error(StrFormat("%s: attribute %s = %s must be at least %lld", node.Describe().c_str(), key,
                            JoinInts(v).c_str(), static_cast<long long>(min_value)));
  return v;
}

// Size of a window of `kernel` taps spaced `dilation` apart.
int64_t WindowExtent(int64_t kernel, int64_t dilation) { return (kernel - 1) * dilation + 1; }

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

Shape SpatialDims(const Shape& shape) { return Shape(shape.begin() + std::min<size_t>(2, shape.size()), shape.end()); }

WindowAttrs ReadWindowAttrs(const Node& node, size_t spatial_rank, const std::vector<int64_t>& kernel) {
  WindowAttrs a;
  if (node.HasAttr("kernel_shape")) {
    a.kernel = ReadPerDim(node, "kernel_shape", spatial_rank, 1, 1);
    if (!kernel.empty() && a.kernel != kernel)
      throw Error(node.Describe() + ": kernel_shape " + JoinInts(a.kernel) + " differs from the weight's " +
                  JoinInts(kernel));
  } else if (!kernel.empty()) {
    a.kernel = kernel;
  } else {
    throw Error(node.Describe() + ": attribute kernel_shape is required");
  }
  a.strides = ReadPerDim(node, "strides", spatial_rank, 1, 1);
  a.dilations = ReadPerDim(node, "dilations", spatial_rank, 1, 1);
  a.auto_pad = node.GetString("auto_pad", "NOTSET");
  if (a.auto_pad != "NOTSET" && a.auto_pad != "SAME_UPPER" && a.auto_pad != "SAME_LOWER" && a.auto_pad != "VALID")
    throw Error(node.Describe() + ": unknown auto_pad '" + a.auto_pad + "'");
  std::vector<int64_t> pads = node.GetInts("pads", std::vector<int64_t>(2 * spatial_rank, 0));
  if (pads.size() != 2 * spatial_rank)
    throw Error(StrFormat("%s: attribute pads has %zu values, expected %zu (begin and end of each spatial dimension)",
                          node.Describe().c_str(), pads.size(), 2 * spatial_rank));
  bool any_pad = false;
  for (int64_t p : pads) {
    if (p < 0) throw Error(node.Describe() + ": negative pads " + JoinInts(pads));
    any_pad = any_pad || p != 0;
  }
  if (any_pad && a.auto_pad != "NOTSET")
    throw Error(node.Describe() + ": pads " + JoinInts(pads) + " cannot be combined with auto_pad " + a.auto_pad);
  a.pads_begin.assign(pads.begin(), pads.begin() + static_cast<std::ptrdiff_t>(spatial_rank));
  a.pads_end.assign(pads.begin() + static_cast<std::ptrdiff_t>(spatial_rank), pads.end());
  a.ceil_mode = node.GetInt("ceil_mode", 0) != 0;
  return a;
}

WindowGeometry ComputeWindowGeometry(const WindowAttrs& a, const Shape& input_spatial, const Node& node) {
  const size_t rank = input_spatial.size();
  WindowGeometry g;
  g.pads_begin.assign(rank, 0);
  g.pads_end.assign(rank, 0);
  g.ceil_extra.assign(rank, 0);
  g.output.assign(rank, 0);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t in = input_spatial[i], stride = a.strides[i];
    const int64_t extent = WindowExtent(a.kernel[i], a.dilations[i]);
    if (a.auto_pad == "SAME_UPPER" || a.auto_pad == "SAME_LOWER") {
      g.output[i] = CeilDiv(in, stride);
      int64_t total = std::max<int64_t>(0, (g.output[i] - 1) * stride + extent - in);
      int64_t smaller = total / 2;
      g.pads_begin[i] = a.auto_pad == "SAME_UPPER" ? smaller : total - smaller;
      g.pads_end[i] = total - g.pads_begin[i];
      continue;
    }
    if (a.auto_pad == "NOTSET") {
      g.pads_begin[i] = a.pads_begin[i];
      g.pads_end[i] = a.pads_end[i];
    }
    const int64_t span = in + g.pads_begin[i] + g.pads_end[i] - extent;
    if (span < 0)
      throw Error(StrFormat("%s: the window (%lld wide with dilation) does not fit spatial dimension %zu of size %lld "
                            "plus padding %lld + %lld",
                            node.Describe().c_str(), static_cast<long long>(extent), i, static_cast<long long>(in),
                            static_cast<long long>(g.pads_begin[i]), static_cast<long long>(g.pads_end[i])));
    const bool ceil = a.ceil_mode && a.auto_pad == "NOTSET";
    g.output[i] = (ceil ? CeilDiv(span, stride) : span / stride) + 1;
    // As in PyTorch and later ONNX specs: the last window must start inside the input
    // or the begin padding, never wholly in the padding at the end.
    if (ceil && (g.output[i] - 1) * stride >= in + g.pads_begin[i]) --g.output[i];
    const int64_t needed_end = (g.output[i] - 1) * stride + extent - in - g.pads_begin[i];
    if (needed_end > g.pads_end[i]) {
      g.ceil_extra[i] = needed_end - g.pads_end[i];
      g.pads_end[i] = needed_end;
    }
  }
  return g;
}

PoolWindow DescribePoolWindow(const std::string& op, const Node& node, const Shape& x_shape) {
  PoolWindow w;
  w.is_max = op == "MaxPool" || op == "GlobalMaxPool";
  const bool global = op.rfind("Global", 0) == 0;
  const Shape spatial = SpatialDims(x_shape);
  if (global) {
    w.attrs.kernel = spatial;
    w.attrs.strides = w.attrs.dilations = std::vector<int64_t>(spatial.size(), 1);
    w.attrs.pads_begin = w.attrs.pads_end = std::vector<int64_t>(spatial.size(), 0);
  } else {
    w.attrs = ReadWindowAttrs(node, spatial.size(), {});
  }
  w.geometry = ComputeWindowGeometry(w.attrs, spatial, node);
  w.output = {x_shape[0], x_shape[1]};
  w.output.insert(w.output.end(), w.geometry.output.begin(), w.geometry.output.end());
  if (!w.is_max) {
    w.include_pad = node.GetInt("count_include_pad", 0) != 0;
    // Libraries divide by the whole window; ONNX (like PyTorch) leaves out the part that
    // ceil_mode adds past the end padding.
    for (int64_t extra : w.geometry.ceil_extra)
      if (w.include_pad && extra > 0)
        throw UnsupportedError(op + ": count_include_pad=1 with a ceil_mode window past the padding");
  }
  return w;
}

ConvWindow DescribeConvWindow(const Node& node, const Tensor& x, const Tensor& w, const Tensor* b,
                              const std::string& rank_limit) {
  auto fail = [&](const std::string& what) { throw Error(node.Describe() + ": " + what); };
  const int rank = x.rank();
  if (rank < 3) fail("input " + x.Describe() + " must be N x C x D1 x ... (at least one spatial dimension)");
  if (rank > 5) throw UnsupportedError("Conv: " + std::to_string(rank - 2) + "D convolution (" + rank_limit + ")");
  if (w.rank() != rank) fail("weight " + w.Describe() + " must have the input's rank " + std::to_string(rank));
  ConvWindow c;
  c.group = node.GetInt("group", 1);
  c.in_channels = x.dim(1);
  c.out_channels = w.dim(0);
  if (c.group < 1 || c.in_channels % c.group != 0 || c.out_channels % c.group != 0 || w.dim(1) * c.group != c.in_channels)
    fail(StrFormat("input channels %lld, weight %s and group %lld do not match (weight must be M x C/group x k...)",
                   static_cast<long long>(c.in_channels), w.Describe().c_str(), static_cast<long long>(c.group)));
  if (b && b->shape() != Shape{c.out_channels})
    fail("bias " + b->Describe() + " must have one value per output channel (" + std::to_string(c.out_channels) + ")");
  c.kernel = SpatialDims(w.shape());
  c.attrs = ReadWindowAttrs(node, c.kernel.size(), c.kernel);
  c.geometry = ComputeWindowGeometry(c.attrs, SpatialDims(x.shape()), node);
  c.output = {x.dim(0), c.out_channels};
  c.output.insert(c.output.end(), c.geometry.output.begin(), c.geometry.output.end());
  return c;
}

}  // namespace ot

namespace ot {

ConvTransposeWindow DescribeConvTransposeWindow(const Node& node, const Tensor& x, const Tensor& w, const Tensor* b,
                                                const std::string& rank_limit) {
  auto fail = [&](const std::string& what) { throw Error(node.Describe() + ": " + what); };
  const int rank = x.rank();
  if (rank < 3) fail("input " + x.Describe() + " must be N x C x D1 x ... (at least one spatial dimension)");
  if (rank > 5)
    throw UnsupportedError("ConvTranspose: " + std::to_string(rank - 2) + "D transposed convolution (" + rank_limit + ")");
  if (w.rank() != rank) fail("weight " + w.Describe() + " must have the input's rank " + std::to_string(rank));
  ConvTransposeWindow c;
  c.group = node.GetInt("group", 1);
  c.in_channels = x.dim(1);
  if (c.group < 1 || w.dim(0) != c.in_channels || c.in_channels % c.group != 0)
    fail(StrFormat("input channels %lld, weight %s and group %lld do not match (weight must be C x M/group x k...)",
                   static_cast<long long>(c.in_channels), w.Describe().c_str(), static_cast<long long>(c.group)));
  c.out_channels = w.dim(1) * c.group;
  if (b && b->shape() != Shape{c.out_channels})
    fail("bias " + b->Describe() + " must have one value per output channel (" + std::to_string(c.out_channels) + ")");
  c.kernel = SpatialDims(w.shape());
  const size_t sr = c.kernel.size();
  const WindowAttrs a = ReadWindowAttrs(node, sr, c.kernel);
  c.strides = a.strides;
  c.dilations = a.dilations;
  const std::vector<int64_t> out_pad = ReadPerDim(node, "output_padding", sr, 0, 0);
  for (size_t i = 0; i < sr; ++i)
    if (out_pad[i] >= std::max(a.strides[i], a.dilations[i]))
      fail(StrFormat("output_padding %s must be smaller than the stride or the dilation of its dimension",
                     JoinInts(out_pad).c_str()));
  std::vector<int64_t> out_shape = node.GetInts("output_shape", {});
  if (out_shape.size() == sr + 2) out_shape.erase(out_shape.begin(), out_shape.begin() + 2);  // N, C given too
  if (!out_shape.empty() && out_shape.size() != sr)
    fail(StrFormat("attribute output_shape %s must have one value per spatial dimension (%zu)",
                   JoinInts(out_shape).c_str(), sr));
  const Shape in = SpatialDims(x.shape());
  c.output = {x.dim(0), c.out_channels};
  for (size_t i = 0; i < sr; ++i) {
    // Size of the full (uncropped) result, output_padding included.
    const int64_t full = (in[i] - 1) * a.strides[i] + WindowExtent(a.kernel[i], a.dilations[i]) + out_pad[i];
    int64_t begin = 0, end = 0;
    if (!out_shape.empty() || a.auto_pad == "SAME_UPPER" || a.auto_pad == "SAME_LOWER") {
      const int64_t want = !out_shape.empty() ? out_shape[i] : in[i] * a.strides[i];
      const int64_t total = full - want;
      if (total < 0) {
        end = total;
      } else if (a.auto_pad == "SAME_UPPER") {
        begin = total / 2;
        end = total - begin;
      } else {
        end = total / 2;
        begin = total - end;
      }
    } else if (a.auto_pad == "NOTSET") {
      begin = a.pads_begin[i];
      end = a.pads_end[i];
    }
    c.pads_begin.push_back(begin);
    c.pads_end.push_back(end - out_pad[i]);
    const int64_t size = full - begin - end;
    if (size < 1)
      fail(StrFormat("the padding crops spatial dimension %zu (full size %lld) to nothing", i,
                     static_cast<long long>(full)));
    c.output.push_back(size);
  }
  return c;
}

}  // namespace ot
