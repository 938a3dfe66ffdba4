// Device-neutral Prepare logic of the indexing ops; see index_shapes.h.
#include "runtime/ops/shapes/index_shapes.h"

#include <algorithm>
#include <cmath>

#include "graph/error.h"
#include "runtime/ops/shapes/op_shapes.h"

namespace ot {
namespace {

[[noreturn]] void Fail(const Node& node, const std::string& what) { throw Error(node.Describe() + ": " + what); }
[[noreturn]] void Unsupported(const Node& node, const std::string& what) {
  throw UnsupportedError(node.op_type + ": " + what);
}

}  // namespace

GatherNDPlan PlanGatherND(const Node& node, const Shape& data, const Tensor& indices, int64_t batch_dims) {
  RequireIndexType(indices, node);
  const int64_t r = static_cast<int64_t>(data.size()), q = indices.rank();
  if (r < 1 || q < 1) Fail(node, "data and indices must have rank >= 1");
  if (batch_dims < 0 || batch_dims >= std::min(r, q))
    Fail(node, "batch_dims " + std::to_string(batch_dims) + " must be below both ranks");
  GatherNDPlan p;
  p.k = indices.dim(-1);
  if (p.k < 0 || p.k > r - batch_dims)
    Fail(node, "indices' last dimension " + std::to_string(p.k) + " exceeds data rank " + std::to_string(r) +
                   " minus batch_dims");
  for (int64_t d = 0; d < batch_dims; ++d) {
    if (indices.dim(static_cast<int>(d)) != data[static_cast<size_t>(d)])
      Fail(node, "batch dimension " + std::to_string(d) + " differs between data " + ShapeString(data) +
                     " and indices " + ShapeString(indices.shape()));
    p.batch *= data[static_cast<size_t>(d)];
  }
  for (int64_t d = batch_dims; d < q - 1; ++d) p.tuples *= indices.dim(static_cast<int>(d));
  for (int64_t d = batch_dims + p.k; d < r; ++d) p.slice *= data[static_cast<size_t>(d)];
  const std::vector<int64_t> strides = RowMajorStrides(data);
  for (int64_t j = 0; j < p.k; ++j) {
    p.dims.push_back(data[static_cast<size_t>(batch_dims + j)]);
    p.strides.push_back(strides[static_cast<size_t>(batch_dims + j)]);
  }
  p.batch_stride = 1;
  for (int64_t d = batch_dims; d < r; ++d) p.batch_stride *= data[static_cast<size_t>(d)];
  p.out.assign(indices.shape().begin(), indices.shape().end() - 1);
  p.out.insert(p.out.end(), data.begin() + batch_dims + p.k, data.end());
  return p;
}

int64_t ScatterElementsAxis(const Node& node, const Tensor& data, const Tensor& indices, const Tensor& updates) {
  RequireIndexType(indices, node);
  if (indices.shape() != updates.shape())
    Fail(node, "indices " + indices.Describe() + " and updates " + updates.Describe() + " differ in shape");
  if (updates.dtype() != data.dtype()) Fail(node, "updates and data differ in type");
  if (data.rank() == 0 || indices.rank() != data.rank())
    Fail(node, "data " + data.Describe() + " and indices " + indices.Describe() + " must have the same rank >= 1");
  const int64_t axis = NormalizeAxis(node.GetInt("axis", 0), data.rank(), node);
  for (int d = 0; d < data.rank(); ++d)
    if (d != axis && indices.dim(d) > data.dim(d))
      Fail(node, "indices " + indices.Describe() + " exceed data " + data.Describe() + " on axis " + std::to_string(d));
  return axis;
}

std::string ScatterReduction(const Node& node, int opset) {
  const std::string red = opset >= 16 ? node.GetString("reduction", "none") : "none";
  if (red != "none" && red != "add" && red != "mul" && red != "max" && red != "min")
    Unsupported(node, "reduction '" + red + "'");
  return red;
}

void CheckGatherGrad(const Node& node, const Tensor& dy, const Shape& data, const Tensor& indices, int64_t* axis) {
  if (dy.dtype() != DType::kFloat32) Unsupported(node, "data type " + DTypeName(dy.dtype()));
  Tensor shape_only = Tensor::View(dy.dtype(), data, nullptr);
  const Shape expect = GatherOutputShape(node, shape_only, indices, axis);
  if (expect != dy.shape())
    Fail(node, "gradient shape " + ShapeString(dy.shape()) + " differs from the gather's output " + ShapeString(expect));
}

void CheckGatherElementsGrad(const Node& node, const Tensor& dy, const Shape& data, const Tensor& indices,
                             int64_t* axis) {
  if (dy.dtype() != DType::kFloat32) Unsupported(node, "data type " + DTypeName(dy.dtype()));
  Tensor shape_only = Tensor::View(dy.dtype(), data, nullptr);
  *axis = GatherElementsAxis(node, shape_only, indices);
  if (indices.shape() != dy.shape())
    Fail(node, "gradient shape " + ShapeString(dy.shape()) + " differs from the indices' " + ShapeString(indices.shape()));
}

std::vector<int64_t> TileGradRepeats(const Node& node, const Shape& dy, const Shape& x) {
  if (dy.size() != x.size()) Fail(node, "gradient rank differs from the input's");
  std::vector<int64_t> r(x.size());
  for (size_t d = 0; d < x.size(); ++d) {
    if (x[d] == 0 ? dy[d] != 0 : dy[d] % x[d] != 0)
      Fail(node, "gradient shape " + ShapeString(dy) + " is not a tiling of " + ShapeString(x));
    r[d] = x[d] == 0 ? 0 : dy[d] / x[d];
  }
  return r;
}

int64_t TriluOffset(const Node& node, const KernelContext& ctx, ShapeInputValues& inputs) {
  if (ctx.Input(0).rank() < 2) Fail(node, "input must have rank >= 2, got " + ShapeString(ctx.Input(0).shape()));
  std::vector<int64_t> k = inputs.Read(ctx, 1);
  if (k.size() > 1) Fail(node, "k must be a scalar");
  return k.empty() ? 0 : k[0];
}

int64_t CumSumAxis(const Node& node, const KernelContext& ctx, ShapeInputValues& inputs) {
  std::vector<int64_t> a = inputs.Read(ctx, 1);
  if (a.size() != 1) Fail(node, "axis must be a scalar");
  const int64_t rank = ctx.Input(0).rank();
  if (rank == 0) Fail(node, "input must have rank >= 1");
  return NormalizeAxis(a[0], rank, node);
}

TopKPlan PlanTopK(const Node& node, int opset, const KernelContext& ctx, ShapeInputValues& inputs) {
  const Tensor& x = ctx.Input(0);
  TopKPlan p;
  if (x.rank() == 0) Fail(node, "input must have rank >= 1");
  p.axis = NormalizeAxis(node.GetInt("axis", -1), x.rank(), node);
  if (opset < 10) {
    p.k = node.GetInt("k", 0);
  } else {
    std::vector<int64_t> k = inputs.Read(ctx, 1);
    if (k.size() != 1) Fail(node, "K must hold one value");
    p.k = k[0];
  }
  if (opset >= 11) {
    p.largest = node.GetInt("largest", 1) != 0;
    p.sorted = node.GetInt("sorted", 1) != 0;
  }
  const int64_t dim = x.dim(static_cast<int>(p.axis));
  if (p.k < 0 || p.k > dim)
    Fail(node, "k " + std::to_string(p.k) + " is outside [0, " + std::to_string(dim) + "] for axis " +
                   std::to_string(p.axis) + " of " + ShapeString(x.shape()));
  p.out = x.shape();
  p.out[static_cast<size_t>(p.axis)] = p.k;
  return p;
}

BlockPermutation PlanBlockPermutation(const Node& node, const Shape& x) {
  const int64_t b = node.GetInt("blocksize", 0);
  if (b <= 0) Fail(node, "attribute 'blocksize' must be positive");
  if (x.size() != 4) Fail(node, "input must be 4-D, got " + ShapeString(x));
  const std::string mode = node.GetString("mode", "DCR");
  if (mode != "DCR" && mode != "CRD") Fail(node, "mode must be DCR or CRD, not '" + mode + "'");
  const int64_t n = x[0], c = x[1], h = x[2], w = x[3];
  const std::vector<int64_t> s = RowMajorStrides(x);
  BlockPermutation p;
  const bool to_space = node.op_type == "DepthToSpace";
  if (to_space) {
    if (c % (b * b) != 0) Fail(node, "channels " + std::to_string(c) + " are not a multiple of blocksize^2");
    const int64_t cc = c / (b * b);
    p.out = {n, cc, h * b, w * b};
    p.walk = {n, cc, h, b, w, b};
    if (mode == "DCR") p.strides = {s[0], s[1], s[2], b * cc * s[1], s[3], cc * s[1]};
    else p.strides = {s[0], b * b * s[1], s[2], b * s[1], s[3], s[1]};
    return p;
  }
  // SpaceToDepth, and DepthToSpaceGrad (the inverse of DepthToSpace in `mode`): x is the
  // spatial tensor [n, c, h*b, w*b].
  if (h % b != 0 || w % b != 0) Fail(node, "spatial size " + ShapeString(x) + " is not a multiple of the blocksize");
  const int64_t hh = h / b, ww = w / b;
  p.out = {n, c * b * b, hh, ww};
  const bool crd = node.op_type == "DepthToSpaceGrad" && mode == "CRD";
  if (crd) {
    p.walk = {n, c, b, b, hh, ww};
    p.strides = {s[0], s[1], s[2], s[3], b * s[2], b * s[3]};
  } else {
    p.walk = {n, b, b, c, hh, ww};
    p.strides = {s[0], s[2], s[3], s[1], b * s[2], b * s[3]};
  }
  if (node.op_type == "DepthToSpaceGrad") {  // dX has the forward input's shape
    p.out = {n, c * b * b, hh, ww};
  }
  return p;
}

ReverseSequencePlan PlanReverseSequence(const Node& node, const Tensor& x, const Tensor& lens) {
  ReverseSequencePlan p;
  if (x.rank() < 2) Fail(node, "input must have rank >= 2");
  p.batch_axis = node.GetInt("batch_axis", 1);
  p.time_axis = node.GetInt("time_axis", 0);
  if (!((p.batch_axis == 0 && p.time_axis == 1) || (p.batch_axis == 1 && p.time_axis == 0)))
    Fail(node, "batch_axis and time_axis must be 0 and 1 in some order");
  RequireIndexType(lens, node);
  p.lens = lens.ToHost().AsInt64s();
  const int64_t batch = x.dim(static_cast<int>(p.batch_axis)), time = x.dim(static_cast<int>(p.time_axis));
  if (static_cast<int64_t>(p.lens.size()) != batch)
    Fail(node, "sequence_lens has " + std::to_string(p.lens.size()) + " entries for batch " + std::to_string(batch));
  for (int64_t l : p.lens)
    if (l < 0 || l > time) Fail(node, "sequence length " + std::to_string(l) + " is outside [0, " + std::to_string(time) + "]");
  return p;
}

Shape OneHotOutputShape(const Node& node, const Tensor& indices, int64_t depth, int64_t* axis) {
  if (depth < 1) Fail(node, "depth must be positive, got " + std::to_string(depth));
  const int64_t out_rank = indices.rank() + 1;
  *axis = NormalizeAxis(node.GetInt("axis", -1), out_rank, node);
  Shape out = indices.shape();
  out.insert(out.begin() + *axis, depth);
  return out;
}

int64_t RangeCount(const Node& node, double start, double limit, double delta) {
  if (delta == 0) Fail(node, "delta must not be 0");
  const double n = std::ceil((limit - start) / delta);
  if (!(n < 1e12)) Fail(node, "range of " + std::to_string(n) + " elements is too large");
  return std::max<int64_t>(static_cast<int64_t>(n), 0);
}

DType EyeLikeType(const Node& node, const Tensor& x) {
  if (x.rank() != 2) Fail(node, "input must be 2-D, got " + ShapeString(x.shape()));
  return node.HasAttr("dtype") ? static_cast<DType>(node.GetInt("dtype", 1)) : x.dtype();
}

namespace {

std::vector<double> FloatValues(const Tensor* t, const Node& node) {
  std::vector<double> v;
  if (!t) return v;
  HostTensor h = t->ToHost();
  for (int64_t i = 0; i < h.NumElements(); ++i) {
    switch (h.dtype) {
      case DType::kFloat32: v.push_back(h.Data<float>()[i]); break;
      case DType::kFloat64: v.push_back(h.Data<double>()[i]); break;
      default: throw Error(node.Describe() + ": roi and scales must be float, not " + DTypeName(h.dtype));
    }
  }
  return v;
}

// Input coordinate of output index x along one axis (ONNX's coordinate_transformation_mode).
double SourceCoordinate(const std::string& mode, double x, double scale, int64_t in, int64_t out, double roi_start,
                        double roi_end) {
  const double out_len = scale * static_cast<double>(in);
  if (mode == "half_pixel") return (x + 0.5) / scale - 0.5;
  if (mode == "half_pixel_symmetric") {  // opset 19: half_pixel shifted to keep the centre where it is
    const double adjustment = static_cast<double>(out) / out_len;
    return static_cast<double>(in) / 2 * (1 - adjustment) + (x + 0.5) / scale - 0.5;
  }
  if (mode == "pytorch_half_pixel") return out_len > 1 ? (x + 0.5) / scale - 0.5 : -0.5;
  if (mode == "align_corners") return out_len == 1 ? 0.0 : x * static_cast<double>(in - 1) / (out_len - 1);
  if (mode == "asymmetric") return x / scale;
  if (mode == "tf_half_pixel_for_nn") return (x + 0.5) / scale;
  // tf_crop_and_resize
  const double span = static_cast<double>(in - 1);
  if (out_len == 1) return (roi_end - roi_start) * span / 2 + roi_start * span;
  return x * (roi_end - roi_start) * span / (out_len - 1) + roi_start * span;
}

}  // namespace

ResizeInputs ReadResizeInputs(const Node& node, const std::string& op, int64_t opset, const KernelContext& ctx) {
  ResizeInputs r;
  if (op == "Upsample" && opset < 9) {
    for (float s : node.GetFloats("scales")) r.scales.push_back(s);
    return r;
  }
  if (op == "Upsample" || opset < 11) {
    r.scales = FloatValues(ctx.OptionalInput(1), node);
    return r;
  }
  r.roi = FloatValues(ctx.OptionalInput(1), node);
  r.scales = FloatValues(ctx.OptionalInput(2), node);
  if (const Tensor* s = ctx.OptionalInput(3)) r.sizes = s->ToHost().AsInt64s();
  return r;
}

ResizePlan PlanResize(const Node& node, const std::string& op, int64_t opset, const Shape& x, const ResizeInputs& in) {
  const size_t rank = x.size();
  const bool legacy = op == "Upsample" || opset < 11;
  const std::string mode = node.GetString("mode", "nearest");
  if (mode != "nearest" && mode != "linear" && mode != "cubic" && !(legacy && mode == "bilinear"))
    Fail(node, "mode must be nearest, linear or cubic, not '" + mode + "'");
  if (legacy && mode == "cubic") Fail(node, "mode 'cubic' needs opset 11");
  const std::string coord = legacy ? "asymmetric" : node.GetString("coordinate_transformation_mode", "half_pixel");
  static const char* kCoords[] = {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                                  "tf_half_pixel_for_nn", "tf_crop_and_resize", "half_pixel_symmetric"};
  if (std::find(std::begin(kCoords), std::end(kCoords), coord) == std::end(kCoords) ||
      (coord == "half_pixel_symmetric" && opset < 19))
    Fail(node, "coordinate_transformation_mode '" + coord + "' is not one of opset " + std::to_string(opset) + "'s");
  const std::string nearest = legacy ? "floor" : node.GetString("nearest_mode", "round_prefer_floor");
  if (nearest != "round_prefer_floor" && nearest != "round_prefer_ceil" && nearest != "floor" && nearest != "ceil")
    Fail(node, "nearest_mode '" + nearest + "' is not one of round_prefer_floor, round_prefer_ceil, floor, ceil");
  // Opset 18's antialias: linear and cubic stretch their filter by 1 / scale when downscaling.
  const bool antialias = !legacy && node.GetInt("antialias", 0) != 0 && mode != "nearest";
  const std::string policy = node.GetString("keep_aspect_ratio_policy", "stretch");
  if (policy != "stretch" && policy != "not_larger" && policy != "not_smaller")
    Fail(node, "keep_aspect_ratio_policy must be stretch, not_larger or not_smaller, not '" + policy + "'");
  const double a = node.GetFloat("cubic_coeff_a", -0.75f);
  const bool exclude_outside = !legacy && node.GetInt("exclude_outside", 0) != 0;

  // Opset 18's axes: roi, scales and sizes name only those axes; the others keep their size.
  std::vector<size_t> axes;
  if (node.HasAttr("axes")) {
    std::vector<bool> seen(rank, false);
    for (int64_t v : node.GetInts("axes")) {
      const auto d = static_cast<size_t>(NormalizeAxis(v, static_cast<int64_t>(rank), node));
      if (seen[d]) Fail(node, "axis " + std::to_string(v) + " is given twice in 'axes'");
      seen[d] = true;
      axes.push_back(d);
    }
  } else {
    for (size_t d = 0; d < rank; ++d) axes.push_back(d);
  }
  ResizeInputs full;
  auto check_count = [&](size_t n, size_t per, const char* what) {
    if (n != per * axes.size())
      Fail(node, std::string(what) + " has " + std::to_string(n) + " entries for " + std::to_string(axes.size()) +
                     " resized axes");
  };
  if (!in.scales.empty()) {
    check_count(in.scales.size(), 1, "scales");
    full.scales.assign(rank, 1.0);
    for (size_t k = 0; k < axes.size(); ++k) full.scales[axes[k]] = in.scales[k];
  }
  if (!in.sizes.empty()) {
    check_count(in.sizes.size(), 1, "sizes");
    full.sizes.assign(x.begin(), x.end());
    for (size_t k = 0; k < axes.size(); ++k) full.sizes[axes[k]] = in.sizes[k];
    if (policy != "stretch") {  // one scale for all the axes: the smallest or the largest ratio
      double scale = policy == "not_larger" ? 1e300 : 0;
      for (size_t d : axes) {
        const double r = x[d] == 0 ? 1.0 : static_cast<double>(full.sizes[d]) / static_cast<double>(x[d]);
        scale = policy == "not_larger" ? std::min(scale, r) : std::max(scale, r);
      }
      full.sizes.clear();
      full.scales.assign(rank, 1.0);
      for (size_t d : axes) full.scales[d] = scale;
      for (size_t d = 0; d < rank; ++d)
        full.sizes.push_back(full.scales[d] == 1.0 ? x[d] : static_cast<int64_t>(std::floor(full.scales[d] * static_cast<double>(x[d]) + 0.5)));
    }
  }
  if (!in.roi.empty()) {
    check_count(in.roi.size(), 2, "roi");
    full.roi.assign(2 * rank, 0.0);
    for (size_t d = 0; d < rank; ++d) full.roi[d + rank] = 1.0;
    for (size_t k = 0; k < axes.size(); ++k) {
      full.roi[axes[k]] = in.roi[k];
      full.roi[axes[k] + rank] = in.roi[k + axes.size()];
    }
  }
  const bool kept_ratio = !in.sizes.empty() && policy != "stretch";

  ResizePlan p;
  p.extrapolation_value = node.GetFloat("extrapolation_value", 0.f);
  std::vector<double> scales(rank, 1.0);
  p.out = x;
  if (!in.sizes.empty() && !in.scales.empty()) Fail(node, "only one of scales and sizes may be given");
  if (!full.sizes.empty()) {
    for (size_t d = 0; d < rank; ++d) {
      if (full.sizes[d] < 0) Fail(node, "sizes must not be negative");
      p.out[d] = full.sizes[d];
      scales[d] = kept_ratio ? full.scales[d]
                             : x[d] == 0 ? 1.0 : static_cast<double>(full.sizes[d]) / static_cast<double>(x[d]);
    }
  } else {
    if (full.scales.size() != rank) Fail(node, "needs scales or sizes");
    for (size_t d = 0; d < rank; ++d) {
      if (!(full.scales[d] > 0)) Fail(node, "scales must be positive");
      scales[d] = full.scales[d];
      p.out[d] = static_cast<int64_t>(std::floor(static_cast<double>(x[d]) * full.scales[d]));
    }
  }
  if (coord == "tf_crop_and_resize" && full.roi.size() != 2 * rank)
    Fail(node, "tf_crop_and_resize needs roi with " + std::to_string(2 * rank) + " entries");

  p.spatial_half_pixel_linear = (mode == "linear" || mode == "bilinear") && rank >= 3 && rank <= 5 &&
                                p.out[0] == x[0] && p.out[1] == x[1] &&
                                (coord == "half_pixel" || coord == "pytorch_half_pixel");
  for (size_t d = 2; d < rank && p.spatial_half_pixel_linear; ++d)
    p.spatial_half_pixel_linear = !(antialias && scales[d] < 1) && x[d] > 0 && p.out[d] > (coord == "pytorch_half_pixel" ? 1 : 0) &&
                                  scales[d] * static_cast<double>(x[d]) == static_cast<double>(p.out[d]);

  for (size_t d = 0; d < rank; ++d) {
    // Antialiased, a downscaling axis reads every input index within the filter's support
    // (1 for linear, 2 for cubic) times 1 / scale of the source coordinate, as ONNX's
    // reference does: `first` is the offset of the first tap from the tap left of the
    // source (the one before it when the source is an integer).
    const double support = mode == "cubic" ? 2 : 1;
    const double filter_scale = antialias ? std::min(scales[d], 1.0) : 1.0;
    const auto first = static_cast<int64_t>(std::floor(-support / filter_scale)) + 1;
    const int taps = mode == "nearest" ? 1 : static_cast<int>(2 - 2 * first);
    ResizeAxis ax;
    ax.in = x[d];
    ax.out = p.out[d];
    ax.taps = taps;
    const double rs = coord == "tf_crop_and_resize" ? full.roi[d] : 0, re = coord == "tf_crop_and_resize" ? full.roi[d + rank] : 1;
    ax.identity = ax.in == ax.out && (coord != "tf_crop_and_resize" || (rs == 0 && re == 1));
    if (ax.identity || ax.in == 0 || ax.out == 0) {
      ax.identity = true;
      p.axes.push_back(ax);
      continue;
    }
    ax.index.resize(static_cast<size_t>(ax.out * taps));
    ax.weight.resize(static_cast<size_t>(ax.out * taps));
    ax.outside.assign(static_cast<size_t>(ax.out), 0);
    auto clamp = [&](int64_t i) { return std::clamp<int64_t>(i, 0, ax.in - 1); };
    for (int64_t o = 0; o < ax.out; ++o) {
      const double src = SourceCoordinate(coord, static_cast<double>(o), scales[d], ax.in, ax.out, rs, re);
      if (coord == "tf_crop_and_resize" && (src < 0 || src > static_cast<double>(ax.in - 1))) {
        ax.outside[static_cast<size_t>(o)] = 1;
        p.any_outside = true;
      }
      const double fl = std::floor(src);
      const double r = src - fl;
      const auto base = static_cast<int64_t>(fl);
      int64_t* idx = &ax.index[static_cast<size_t>(o * taps)];
      float* w = &ax.weight[static_cast<size_t>(o * taps)];
      if (mode == "nearest") {
        bool up = false;
        if (r != 0) {
          if (nearest == "round_prefer_floor") up = r > 0.5;
          else if (nearest == "round_prefer_ceil") up = r >= 0.5;
          else up = nearest == "ceil";
        }
        idx[0] = clamp(base + (up ? 1 : 0));
        w[0] = 1.f;
      } else if (antialias) {
        const double ratio = r == 0 ? 1.0 : r;
        const int64_t left = r == 0 ? base - 1 : base;
        std::vector<double> c(static_cast<size_t>(taps));
        double sum = 0;
        for (int k = 0; k < taps; ++k) {
          const double v = std::fabs(filter_scale * (static_cast<double>(first + k) - ratio));
          double& ck = c[static_cast<size_t>(k)];
          if (mode == "linear") ck = std::max(0.0, 1 - v);
          else if (v <= 1) ck = ((a + 2) * v - (a + 3)) * v * v + 1;
          else if (v < 2) ck = ((a * v - 5 * a) * v + 8 * a) * v - 4 * a;
          else ck = 0;
          const int64_t i = left + first + k;
          if (exclude_outside && (i < 0 || i >= ax.in)) ck = 0;
          sum += ck;
        }
        for (int k = 0; k < taps; ++k) {
          idx[k] = clamp(left + first + k);
          w[k] = static_cast<float>(sum != 0 ? c[static_cast<size_t>(k)] / sum : 0.0);
        }
      } else if (taps == 2) {
        idx[0] = clamp(base);
        idx[1] = clamp(base + 1);
        w[0] = static_cast<float>(1 - r);
        w[1] = static_cast<float>(r);
      } else {
        const double t[4] = {r + 1, r, 1 - r, 2 - r};
        double c[4], sum = 0;
        for (int k = 0; k < 4; ++k) {
          const double v = std::fabs(t[k]);
          c[k] = v <= 1 ? ((a + 2) * v - (a + 3)) * v * v + 1 : ((a * v - 5 * a) * v + 8 * a) * v - 4 * a;
          if (exclude_outside && (base - 1 + k < 0 || base - 1 + k >= ax.in)) c[k] = 0;
          sum += c[k];
        }
        for (int k = 0; k < 4; ++k) {
          idx[k] = clamp(base - 1 + k);
          w[k] = static_cast<float>(exclude_outside ? c[k] / sum : c[k]);
        }
      }
    }
    p.axes.push_back(std::move(ax));
  }
  return p;
}

std::string GridSampleMode(const Node& node) {
  const std::string mode = node.GetString("mode", "bilinear");
  if (mode == "bilinear" || mode == "linear") return "bilinear";
  if (mode == "bicubic" || mode == "cubic") return "bicubic";
  if (mode == "nearest") return mode;
  Fail(node, "mode must be linear (bilinear before opset 20), nearest or cubic (bicubic), not '" + mode + "'");
}

Shape GridSampleOutputShape(const Node& node, const Tensor& x, const Tensor& grid) {
  if (x.rank() == 5)
    Unsupported(node, "the volumetric form (5-D X [N, C, D, H, W], opset 20) is not supported; only 4-D X is");
  if (x.rank() != 4) Fail(node, "X must be 4-D [N, C, H, W], got " + ShapeString(x.shape()));
  if (grid.rank() != 4 || grid.dim(0) != x.dim(0) || grid.dim(3) != 2)
    Fail(node, "grid must be [N, H_out, W_out, 2] with N = " + std::to_string(x.dim(0)) + ", got " +
                   ShapeString(grid.shape()));
  if (grid.dtype() != x.dtype()) Fail(node, "grid and X differ in type");
  GridSampleMode(node);
  const std::string pad = node.GetString("padding_mode", "zeros");
  if (pad != "zeros" && pad != "border" && pad != "reflection")
    Fail(node, "padding_mode must be zeros, border or reflection, not '" + pad + "'");
  return {x.dim(0), x.dim(1), grid.dim(1), grid.dim(2)};
}

void TransposeResizeTaps(const ResizeAxis& axis, std::vector<int64_t>* starts, std::vector<int64_t>* entries) {
  starts->assign(static_cast<size_t>(axis.in + 1), 0);
  for (int64_t p : axis.index) {
    if (p < 0 || p >= axis.in)
      throw Error("Resize: a tap reads input position " + std::to_string(p) + " of " + std::to_string(axis.in));
    ++(*starts)[static_cast<size_t>(p + 1)];
  }
  for (size_t p = 1; p < starts->size(); ++p) (*starts)[p] += (*starts)[p - 1];
  entries->assign(axis.index.size(), 0);
  std::vector<int64_t> next(starts->begin(), starts->end() - 1);
  for (size_t e = 0; e < axis.index.size(); ++e)
    (*entries)[static_cast<size_t>(next[static_cast<size_t>(axis.index[e])]++)] = static_cast<int64_t>(e);
}

}  // namespace ot
