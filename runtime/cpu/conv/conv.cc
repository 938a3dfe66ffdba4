// Conv on oneDNN's convolution primitive: 1D/2D/3D, groups (depthwise included),
// strides, dilations, explicit pads and auto_pad, optional bias; and its gradient.
// oneDNN chooses the activation and weight layouts (format_tag::any, usually channel
// blocked); activations stay in its layout between kernels that accept layouts, and the
// plain weights (state the optimizer updates) are reordered each run.
// 3x3 stride-1 convolutions may run on oneDNN's Winograd primitives instead
// (runtime/cpu/conv/conv_algorithm.h): chosen per primitive at plan time. Under auto, one
// whose maps fit inside its window runs as our Winograd on 2x2 maps, products over the
// taps that touch data, or else one dense matrix product (runtime/cpu/conv/conv_dense.h); one
// whose window is partly padding may run as products over the taps (runtime/cpu/conv/conv_taps.h,
// any stride), a 3x3 stride-1 pad-1 one as our Winograd (runtime/cpu/conv/conv_winograd.h): the
// forward by rule, the backward where timed faster.
#include <time.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "graph/op_domains.h"

#include "runtime/cpu/conv/conv_algorithm.h"
#include "runtime/cpu/conv/conv_dense.h"
#include "runtime/cpu/conv/conv_depthwise.h"
#include "runtime/cpu/conv/conv_taps.h"
#include "runtime/cpu/conv/conv_winograd.h"
#include "runtime/cpu/layout/dnnl_cast.h"
#include "runtime/cpu/layout/dnnl_layout.h"
#include "runtime/ops/shapes/window_geometry.h"
#include "runtime/core/kernel_registry.h"
#include "runtime/core/algorithm_choices.h"

namespace ot {
namespace cpu {
namespace {

// Convolution problem in oneDNN's terms. Spatial vectors use oneDNN's conventions
// (dilation 0 means dense).
struct ConvProblem {
  Shape src, dst;
  Shape weights;  // [G, M/G, C/G, k...] when grouped, [M, C, k...] otherwise
  int64_t out_channels = 0;
  bool has_bias = false;
  dnnl::memory::dims strides, dilations, pads_begin, pads_end;
  // The executor's settings (SetUp): --conv-algo, the channel block of the activations it
  // blocks, and where auto's timed choices are kept (null: not kept).
  ConvAlgorithm algorithm = ConvAlgorithm::kAuto;
  int64_t channel_block = 8;
  AlgorithmChoices* choices = nullptr;
  // Element types of one primitive's src, weights and dst (or their gradients): all float32,
  // or under --amp bf16 (bfloat16 inputs from the graph's Cast nodes) bfloat16 for what the
  // primitive reads and float32 for what it writes (ForPrimitive).
  DType src_type = DType::kFloat32, weights_type = DType::kFloat32, dst_type = DType::kFloat32;
  DType compute = DType::kFloat32;  // the inputs' type: float32, or bfloat16 under --amp bf16
};

// The problem with the element types of primitive `kind` ("fwd", "bwd_data", "bwd_weights"):
// the primitive reads p.compute and writes float32.
ConvProblem ForPrimitive(ConvProblem p, const std::string& kind) {
  const DType c = p.compute, f = DType::kFloat32;
  if (kind == "fwd") p.src_type = c, p.weights_type = c, p.dst_type = f;
  if (kind == "bwd_data") p.src_type = f, p.weights_type = c, p.dst_type = c;
  if (kind == "bwd_weights") p.src_type = c, p.weights_type = f, p.dst_type = c;
  return p;
}

// Memory descriptors the primitives are created with. Activations (src, dst and their
// gradients) are channel-blocked (ChannelBlocked: nChw16c on AVX-512, nChw8c on AVX2,
// what oneDNN's forward and backward kernels of that ISA share, so no reorders happen
// between them), or kept in the layout they already have (a plain input of fewer channels
// than a block stays plain); weights are format_tag::any (oneDNN's choice, reordered each
// run).
// Where oneDNN 2.6 has only its reference kernel for the blocked layout (grouped
// convolutions with a channel count per group that is not a multiple of the block, e.g.
// RegNet's 8 on AVX-512; the weight gradient of a 5x5 depthwise convolution),
// channels-last (nhwc) is next: it has JIT kernels for those. Plain descriptors are the
// last resort.
struct ConvDescs {
  dnnl::memory::desc src, weights, bias, dst;
};

dnnl::memory::desc ChannelsLast(const Shape& s, DType dtype) {
  using tag = dnnl::memory::format_tag;
  const tag t = s.size() == 3 ? tag::acb : s.size() == 4 ? tag::acdb : tag::acdeb;
  return dnnl::memory::desc(ToDims(s), ToDnnl(dtype), t);
}

enum class ConvLayouts { kBlocked, kChannelsLast, kPlain };

// `src_now` / `dst_now`: the activations as they come (null: not given, e.g. outputs).
ConvDescs ChooseConvDescs(const ConvProblem& p, ConvLayouts layouts, const Tensor* src_now, const Tensor* dst_now) {
  const bool blocked = layouts != ConvLayouts::kPlain;
  auto activation = [&](const Shape& s, const Tensor* now, DType type) {
    if (layouts == ConvLayouts::kPlain) return PlainDesc(s, type);
    if (layouts == ConvLayouts::kChannelsLast) return ChannelsLast(s, type);
    if (now && !now->is_plain()) return DescOf(*now);
    // A plain input of few channels (the images) stays plain: no padding to a block.
    if (now && s[1] < p.channel_block) return PlainDesc(s, type);
    return WithDataType(ChannelBlocked(s, p.channel_block), type);
  };
  ConvDescs d;
  d.src = activation(p.src, src_now, p.src_type);
  d.weights = blocked ? dnnl::memory::desc(ToDims(p.weights), ToDnnl(p.weights_type), dnnl::memory::format_tag::any)
                      : PlainDesc(p.weights, p.weights_type);
  if (p.has_bias) d.bias = PlainDesc(Shape{p.out_channels}, DType::kFloat32);
  d.dst = activation(p.dst, dst_now, p.dst_type);
  return d;
}

// Makes a primitive descriptor on blocked activations, else on channels-last ones, else
// on plain ones, skipping a configuration with no implementation or only oneDNN's slow
// reference one (channel counts that are not multiples of the block, e.g. LeNet's 6).
template <typename MakePd>
auto WithBestLayouts(const ConvProblem& p, const Tensor* src_now, const Tensor* dst_now, MakePd make_pd) {
  using Pd = decltype(make_pd(ChooseConvDescs(p, ConvLayouts::kPlain, nullptr, nullptr)));
  auto impl = [](const Pd& pd) { return std::string(pd.impl_info_str()); };
  if (p.src.size() <= 5) {
    for (ConvLayouts layouts : {ConvLayouts::kBlocked, ConvLayouts::kChannelsLast}) {
      try {
        auto pd = make_pd(ChooseConvDescs(p, layouts, src_now, dst_now));
        const std::string name = impl(pd);
        if (name.rfind("ref", 0) == 0) continue;
        // Channels-last with only the gemm convolution (no JIT kernel for it): oneDNN's
        // gemm convolution on plain data is faster. AVX2, ResNet34 b128 at 32x32: layer4's
        // five 512-channel 3x3 weight gradients on 2x2 maps (blocked: reference kernel only)
        // took 308 ms a step on channels-last, 217 ms plain.
        if (layouts == ConvLayouts::kChannelsLast && name.find("gemm") != std::string::npos) {
          try {
            auto plain = make_pd(ChooseConvDescs(p, ConvLayouts::kPlain, nullptr, nullptr));
            if (impl(plain).find("gemm") != std::string::npos) return plain;
          } catch (const dnnl::error&) {
          }
        }
        return pd;
      } catch (const dnnl::error&) {
      }
    }
  }
  return make_pd(ChooseConvDescs(p, ConvLayouts::kPlain, nullptr, nullptr));
}

// The problem a Conv node poses on given input shapes; shared by Conv and ConvGrad.
// `settings`: the executor's (KernelContext::settings).
ConvProblem DescribeConv(const Node& node, const Tensor& x, const Tensor& w, const Tensor* b,
                         const KernelSettings& settings) {
  const ConvWindow c = DescribeConvWindow(node, x, w, b, "oneDNN has 1D to 3D");
  const int64_t group = c.group, out_channels = c.out_channels;
  const WindowAttrs& attrs = c.attrs;
  const WindowGeometry& g = c.geometry;
  ConvProblem p;
  p.algorithm = ParseConvAlgorithm(settings.conv_algo);
  p.channel_block = ChannelBlock(settings);
  p.choices = settings.choices;
  // bfloat16 (--amp bf16) runs on oneDNN's bfloat16 primitives (direct convolutions, and the
  // dense product's matmul under auto), or on our Winograd with bfloat16 products, or our
  // taps on float32 copies (Candidates).
  p.compute = x.dtype();
  p.out_channels = out_channels;
  p.has_bias = b != nullptr;
  p.src = x.shape();
  p.dst = c.output;
  p.weights = w.shape();
  if (group > 1) {
    p.weights = {group, out_channels / group};
    p.weights.insert(p.weights.end(), w.shape().begin() + 1, w.shape().end());
  }
  p.strides = attrs.strides;
  for (int64_t d : attrs.dilations) p.dilations.push_back(d - 1);
  p.pads_begin = g.pads_begin;
  p.pads_end = g.pads_end;
  return p;
}

// Forward descriptor of the problem (prop: inference, or training as the gradient's hint).
dnnl::convolution_forward::desc ConvForwardDesc(const ConvProblem& p, const ConvDescs& d, dnnl::prop_kind prop,
                                                dnnl::algorithm alg) {
  if (p.has_bias)
    return dnnl::convolution_forward::desc(prop, alg, d.src, d.weights, d.bias, d.dst, p.strides, p.dilations,
                                           p.pads_begin, p.pads_end);
  return dnnl::convolution_forward::desc(prop, alg, d.src, d.weights, d.dst, p.strides, p.dilations, p.pads_begin,
                                         p.pads_end);
}

// Problems oneDNN's Winograd F(4x4, 3x3) may take: 2D, 3x3, stride 1, dense, not grouped.
bool WinogradShaped(const ConvProblem& p) {
  return p.src.size() == 4 && p.weights.size() == 4 && p.weights[2] == 3 && p.weights[3] == 3 &&
         p.strides == dnnl::memory::dims{1, 1} && p.dilations == dnnl::memory::dims{0, 0};
}

// The channel block of an activation as DenseConv reads it: 0 plain, the block when it is
// ChannelBlocked, -1 any other layout.
int64_t DenseBlock(const Tensor& t) {
  if (t.is_plain()) return 0;
  if (t.dtype() == DType::kBFloat16 && t.rank() >= 3 && t.rank() <= 5) {
    for (int64_t block : {8, 16})
      if (DescOf(t) == WithDataType(ChannelBlocked(t.shape(), block), DType::kBFloat16)) return block;
    return -1;
  }
  const int64_t block = ChannelBlockOf(t);
  return block ? block : -1;
}

// Under --conv-algo auto, the convolution as one matrix product (conv_dense.h) where its
// maps fit inside its window; null otherwise. Outputs take the input's layout.
// The problem's dilations in ONNX terms (1 dense), as our own convolutions take them.
std::vector<int64_t> OnnxDilations(const ConvProblem& p) {
  std::vector<int64_t> dilations;
  for (int64_t d : p.dilations) dilations.push_back(d + 1);
  return dilations;
}

std::unique_ptr<DenseConv> MaybeDense(const ConvProblem& p, int64_t in_block, int64_t out_block) {
  if (p.algorithm != ConvAlgorithm::kAuto || p.weights.size() != 4 || in_block < 0 || out_block < 0)
    return nullptr;
  return DenseConv::Make(p.src, p.weights, p.dst, p.strides, OnnxDilations(p), p.pads_begin, in_block, out_block,
                         p.compute);
}

dnnl::memory::desc BlockedOrPlainDesc(const Shape& s, int64_t block) {
  return block ? ChannelBlocked(s, block) : PlainDesc(s, DType::kFloat32);
}

std::shared_ptr<const TensorLayout> BlockedOrPlain(const Shape& s, int64_t block) {
  return block ? LayoutFor(ChannelBlocked(s, block), s, DType::kFloat32) : nullptr;
}

double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// CPU time (all threads) of the fastest of several runs of `run` after one warm-up run:
// at least 3, more for short ones, up to 9 or 30 ms. The fastest run is the least
// disturbed by other work on the machine.
template <typename Run>
double TimeFastest(Run run) {
  double best = std::numeric_limits<double>::infinity(), spent = 0;
  for (int i = 0; i < 10 && (i < 4 || spent < 0.03); ++i) {
    const double t0 = CpuSeconds();
    run();
    const double t = CpuSeconds() - t0;
    if (i > 0) best = std::min(best, t), spent += t;
  }
  return best;
}

// CPU time of a primitive and its weight reorder (TimeFastest), on zeroed buffers
// of the descriptor's layouts (zeros: no denormals).
// The weights travel plain (optimizer state), so each run also reorders them into the
// primitive's layout (or its weight gradient out of it): that reorder is timed with it
// (Winograd's own weight layout costs more to reach than the direct one's).
double TimePrimitive(const dnnl::primitive& prim, const dnnl::primitive_desc_base& pd,
                     const dnnl::memory::desc& plain_weights) {
  std::unordered_map<int, dnnl::memory> args;
  for (int arg : {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS, DNNL_ARG_DST, DNNL_ARG_DIFF_SRC,
                  DNNL_ARG_DIFF_WEIGHTS, DNNL_ARG_DIFF_BIAS, DNNL_ARG_DIFF_DST}) {
    const dnnl::memory::desc md = pd.query_md(dnnl::query::exec_arg_md, arg);
    if (md.get_size() == 0) continue;
    dnnl::memory m(md, Engine());
    std::memset(m.get_data_handle(), 0, md.get_size());
    args[arg] = m;
  }
  dnnl::memory plain(plain_weights, Engine());
  std::memset(plain.get_data_handle(), 0, plain_weights.get_size());
  dnnl::reorder weights_in, weights_out;
  auto w = args.find(DNNL_ARG_WEIGHTS), dw = args.find(DNNL_ARG_DIFF_WEIGHTS);
  if (w != args.end() && w->second.get_desc() != plain_weights) weights_in = dnnl::reorder(plain, w->second);
  if (dw != args.end() && dw->second.get_desc() != plain_weights) weights_out = dnnl::reorder(dw->second, plain);
  return TimeFastest([&] {
    if (weights_in) weights_in.execute(Stream(), plain, w->second);
    prim.execute(Stream(), args);
    if (weights_out) weights_out.execute(Stream(), dw->second, plain);
    Stream().wait();
  });
}

// Timed choices, by problem and primitive: a model repeats its convolution shapes (ResNet34
// has 6 of 64 channels at 32x32), each timed once per executor (AlgorithmChoices): "winograd"
// holds whether oneDNN's Winograd beat its direct kernels, "own" the name of ours that beat
// oneDNN's primitive ("" for none).
const AlgorithmChoiceKind kWinogradChoice("winograd", {"0", "1"});
const AlgorithmChoiceKind kOwnChoice("own", {"", "taps", "winograd2", "winograd4", "winograd2-bf16"});

std::string ProblemKey(const char* kind, const ConvProblem& p, const dnnl::memory::desc& src) {
  std::string key = std::string(kind) + ShapeString(p.src) + ShapeString(p.weights) + ShapeString(p.dst);
  for (const auto* v : {&p.strides, &p.dilations, &p.pads_begin, &p.pads_end})
    for (int64_t x : *v) key += "," + std::to_string(x);
  key += p.has_bias ? "b" : "";
  key += p.compute == DType::kFloat32 ? "" : DTypeName(p.compute);
  key += std::to_string(static_cast<int>(src.data.format_kind));
  return key;
}

// The primitive descriptor for one of a convolution's primitives (kind: "fwd", "bwd_data",
// "bwd_weights") under the executor's --conv-algo. `make_pd(descs, algorithm)` makes it;
// the direct one on the best layouts (WithBestLayouts), the Winograd one on blocked
// activations only (all oneDNN 2.6 has it for). Appends "kind=algorithm" to `note`.
template <typename Primitive, typename MakePd>
auto ChooseAlgorithm(const char* kind, const ConvProblem& problem, const Tensor* src_now, const Tensor* dst_now,
                     MakePd make_pd, std::string* note) {
  const ConvProblem p = ForPrimitive(problem, kind);
  auto direct = WithBestLayouts(p, src_now, dst_now, [&](const ConvDescs& d) {
    return make_pd(d, dnnl::algorithm::convolution_direct);
  });
  const ConvAlgorithm setting = p.algorithm;
  auto finish = [&](decltype(direct) pd, const char* how) {
    if (!note->empty()) *note += " ";
    *note += std::string(kind) + "=" + how + "[" + pd.impl_info_str() + "]";
    return pd;
  };
  // auto leaves the forward of oneDNN's Winograd F(4x4, 3x3) out (ChooseOwn may take our
  // F(2x2, 3x3) instead, which rounds like direct): it rounds its activations more (5-9x
  // PyTorch float32's distance from float64 at the ReLU inputs, against 1.2-1.7x direct),
  // and through BatchNorm the gradients follow: torch_grad_parity --conv-algo winograd
  // (ReLU decisions at the kinks taken from the same forward) has ResNet34 at 3x16x16,
  // batch 6, 1.1-2.0e-4 from float64 against direct's 2.8-3.4e-5 and PyTorch float32's
  // 2.5-3.0e-5 (3 seeds, all over the 1e-4 limit). In the backward primitives its
  // rounding stays within the parity rule.
  const bool forward = std::string(kind) == "fwd";
  if (setting == ConvAlgorithm::kDirect || setting == ConvAlgorithm::kTaps || setting == ConvAlgorithm::kWinograd2 ||
      setting == ConvAlgorithm::kWinograd4 || !WinogradShaped(p) || p.compute != DType::kFloat32)
    return finish(direct, "direct");
  if (setting == ConvAlgorithm::kAuto && forward) return finish(direct, "direct(auto: forward stays direct)");
  // Winograd on blocked activations, with its weights in the direct kernels' OIhw16i16o
  // where it takes them (it transforms them itself, far faster than a reorder into its own
  // "wino" layout, which format_tag::any asks for on larger images), else as it wants.
  decltype(direct) winograd;
  ConvDescs wd = ChooseConvDescs(p, ConvLayouts::kBlocked, src_now, dst_now);
  for (bool blocked_weights : {true, false}) {
    if (blocked_weights)
      wd.weights = dnnl::memory::desc(ToDims(p.weights), dnnl::memory::data_type::f32,
                                      dnnl::memory::format_tag::OIhw16i16o);
    else
      wd.weights = dnnl::memory::desc(ToDims(p.weights), dnnl::memory::data_type::f32, dnnl::memory::format_tag::any);
    try {
      winograd = make_pd(wd, dnnl::algorithm::convolution_winograd);
      if (std::string(winograd.impl_info_str()).rfind("ref", 0) == 0) winograd = decltype(direct)();
    } catch (const dnnl::error&) {
      winograd = decltype(direct)();
    }
    if (winograd) break;
  }
  if (!winograd) return finish(direct, "direct(no Winograd primitive)");
  if (setting == ConvAlgorithm::kWinograd) return finish(winograd, "winograd");
  const std::string key = ProblemKey(kind, p, DescOf(src_now ? *src_now : *dst_now));
  if (p.choices)
    if (auto chosen = p.choices->Find("winograd", key))
      return *chosen == "1" ? finish(winograd, "winograd") : finish(direct, "direct");
  const dnnl::memory::desc plain_weights = PlainDesc(p.weights, DType::kFloat32);
  const double t_direct = TimePrimitive(Primitive(direct), direct, plain_weights);
  const double t_winograd = TimePrimitive(Primitive(winograd), winograd, plain_weights);
  const bool use_winograd = t_winograd < t_direct;
  if (p.choices) p.choices->Record("winograd", key, use_winograd ? "1" : "0");
  char timing[96];
  std::snprintf(timing, sizeof timing, "(timed: direct %.3g ms, winograd %.3g ms CPU)", 1e3 * t_direct,
                1e3 * t_winograd);
  return finish(use_winograd ? winograd : direct, (std::string(use_winograd ? "winograd" : "direct") + timing).c_str());
}

// Taps that touch data, as a share of the window, below which auto times TapConv against
// oneDNN's primitive: a 3x3 padded convolution on maps up to 16x16 (0.92 there; 0.84 on
// 8x8, 0.69 on 4x4). On 32x32 maps (0.96) oneDNN's kernels win.
constexpr double kTapsShareLimit = 0.95;

// Under --conv-algo auto or taps, a TapConv (conv_taps.h) for the problem; null where it
// does not apply (or auto leaves the window's padding to oneDNN).
std::unique_ptr<TapConv> MaybeTaps(const ConvProblem& p, const SgemmConv::Layouts& layouts) {
  const ConvAlgorithm setting = p.algorithm;
  if ((setting != ConvAlgorithm::kAuto && setting != ConvAlgorithm::kTaps) || p.weights.size() != 4) return nullptr;
  auto taps = TapConv::Make(p.src, p.weights, p.dst, p.strides, OnnxDilations(p), p.pads_begin, layouts);
  if (taps && setting == ConvAlgorithm::kAuto && taps->data_share() >= kTapsShareLimit) return nullptr;
  return taps;
}

// Under auto, for a convolution whose maps lie within the kernel's window (DenseConv's
// case): F(2x2, 3x3) on 2x2 maps (9 products an image and channel pair where taps take 16;
// conv_winograd.h), else taps (the dense product's multiplications without its matrix;
// layer4 of ResNet34 on 2x2 maps, AVX2: 7 ms against 10 ms a forward), else null (dense).
// Under --amp bf16 the F(2x2, 3x3) one multiplies in bfloat16 (Zen 4, ResNet34 b128, one
// thread, CPU time: layer4's 512-channel 3x3s on 2x2 maps 6.5 ms a forward and 13.5 ms a
// backward, against the dense bfloat16 matmul's 11.0 and 21.9), and there is no taps (dense
// instead).
// `name` gets the choice for the plan note.
std::unique_ptr<SgemmConv> WithinWindow(const ConvProblem& p, const SgemmConv::Layouts& layouts, std::string* name) {
  const bool bf16 = p.compute != DType::kFloat32;
  if (p.weights.size() != 4) return nullptr;
  auto w = WinogradConv::Make(p.src, p.weights, p.dst, p.strides, OnnxDilations(p), p.pads_begin, layouts, 2, bf16);
  if (w && w->two_by_two_map()) {
    *name = bf16 ? "winograd2-bf16(maps within the window; 2x2 maps, 9 products in bfloat16)"
                 : "winograd2(maps within the window; 2x2 maps, 9 products)";
    return w;
  }
  if (bf16) return nullptr;
  *name = "taps(maps within the window)";
  return MaybeTaps(p, layouts);
}

// One of our convolutions a primitive may run on instead of oneDNN's.
struct Candidate {
  std::string name;  // as --conv-algo names it
  std::string why;   // for the plan note
  std::shared_ptr<SgemmConv> conv;
};

// Ours that may run primitive `kind` ("fwd", "bwd_data", "bwd_weights") of the problem
// under the executor's --conv-algo: taps where they apply (auto: where the window is partly
// padding), Winograd F(2x2, 3x3), and F(4x4, 3x3) for the backward primitives only (its
// forward rounds too much; conv_winograd.h).
// Under --amp bf16 our Winograd reads the bfloat16 inputs as they are, F(2x2, 3x3)
// multiplying in bfloat16 ("winograd2-bf16"), F(4x4, 3x3) in float32; taps (float32 copies
// of the inputs, float32 products) run the backward primitives only, timed against oneDNN's
// bfloat16 ones.
std::vector<Candidate> Candidates(const char* kind, const ConvProblem& p, const SgemmConv::Layouts& layouts) {
  std::vector<Candidate> out;
  const ConvAlgorithm setting = p.algorithm;
  const bool bf16 = p.compute != DType::kFloat32;
  if (p.weights.size() != 4) return out;
  SgemmConv::Layouts wide = layouts;  // taps read and write float32
  for (auto* md : {&wide.x, &wide.y, &wide.dy, &wide.dx}) *md = WithDataType(*md, DType::kFloat32);
  if (auto taps = bf16 && std::string(kind) == "fwd" ? nullptr : MaybeTaps(p, wide)) {
    char share[48];
    std::snprintf(share, sizeof share, "%.0f%% of the window on data", 100 * taps->data_share());
    out.push_back({"taps", share, std::move(taps)});
  }
  const std::vector<int64_t> dilations = OnnxDilations(p);
  const bool forward = std::string(kind) == "fwd";
  for (int tile : {2, 4}) {
    // winograd4 forces F(4x4, 3x3) in the backward primitives and F(2x2, 3x3) forward.
    const bool forced = tile == 2 ? setting == ConvAlgorithm::kWinograd2 ||
                                        (setting == ConvAlgorithm::kWinograd4 && forward)
                                  : setting == ConvAlgorithm::kWinograd4 && !forward;
    if (!forced && (setting != ConvAlgorithm::kAuto || (tile == 4 && forward))) continue;
    // Under --amp bf16 F(2x2, 3x3) multiplies in bfloat16; F(4x4, 3x3) in float32 (its
    // transforms amplify a bfloat16 rounding too much: conv_winograd.h).
    const bool bf16_products = bf16 && tile == 2;
    if (auto w = WinogradConv::Make(p.src, p.weights, p.dst, p.strides, dilations, p.pads_begin, layouts, tile,
                                    bf16_products))
      out.push_back({std::string(tile == 2 ? "winograd2" : "winograd4") + (bf16_products ? "-bf16" : ""),
                     std::string(tile == 2 ? "2x2 tiles" : "4x4 tiles") + (bf16_products ? ", bfloat16 products" : ""),
                     std::move(w)});
  }
  return out;
}

// The convolution of ours that runs primitive `kind`, or null for oneDNN's: under
// --conv-algo taps, winograd2 or winograd4 that one where it applies; under auto the
// forward by a fixed rule and each backward primitive the fastest of oneDNN's primitive and
// the candidates, timed once per problem and kind (`time_library()` and
// `time_own(SgemmConv*)` are CPU seconds). Where ours is taken, `note`'s entry for the kind
// (from `entry_start`) is rewritten; the timings are noted either way.
template <typename TimeLibrary, typename TimeOwn>
std::shared_ptr<SgemmConv> ChooseOwn(const char* kind, const ConvProblem& p, const dnnl::memory::desc& src,
                                     const std::vector<Candidate>& candidates, TimeLibrary time_library,
                                     TimeOwn time_own, size_t entry_start, std::string* note) {
  if (candidates.empty()) return nullptr;
  auto take = [&](const Candidate& c, const std::string& why) {
    note->resize(entry_start);
    *note += std::string(entry_start ? " " : "") + kind + "=" + c.name + "(" + why + ")[sgemm]";
    return c.conv;  // shared: the kernels run both gradients in one call where one object won both
  };
  if (p.algorithm != ConvAlgorithm::kAuto) return take(candidates.front(), candidates.front().why);
  if (std::string(kind) == "fwd") {
    // The forward pass is chosen by rule, not timed, so that every process computes the
    // same forward (timing may choose otherwise in another process): `infer` and `grad`
    // agree on which side of a ReLU's kink a value falls, and a rerun of the same seed
    // does the same. F(2x2, 3x3) where it applies (AVX2, ResNet34 b128: faster than oneDNN's
    // direct kernels from 16x16 maps down), else taps where at most 3/4 of the window
    // touches data (4x4 maps and smaller), else oneDNN's.
    for (const Candidate& c : candidates)
      if (c.name.rfind("winograd2", 0) == 0) return take(c, "forward by rule; " + c.why);
    for (const Candidate& c : candidates)
      if (c.name == "taps" && static_cast<const TapConv&>(*c.conv).data_share() <= 0.75)
        return take(c, "forward by rule; " + c.why);
    return nullptr;
  }
  std::string key = ProblemKey(kind, p, src);
  for (const Candidate& c : candidates) key += "/" + c.name;
  if (p.choices) {
    if (auto chosen = p.choices->Find("own", key)) {
      for (const Candidate& c : candidates)
        if (c.name == *chosen) return take(c, c.why);
      return nullptr;
    }
  }
  const double library = time_library();
  char number[48];
  std::snprintf(number, sizeof number, "timed: oneDNN %.3g ms", 1e3 * library);
  std::string timing = number;
  double best_time = std::numeric_limits<double>::infinity();
  const Candidate* best = nullptr;
  for (const Candidate& c : candidates) {
    const double t = time_own(c.conv.get());
    std::snprintf(number, sizeof number, ", %s %.3g ms", c.name.c_str(), 1e3 * t);
    timing += number;
    if (t < best_time) best_time = t, best = &c;
  }
  timing += " CPU";
  if (best_time >= library) best = nullptr;
  if (p.choices) p.choices->Record("own", key, best ? best->name : "");
  if (best) return take(*best, timing + "; " + best->why);
  *note += std::string(" (") + kind + " " + timing + ")";
  return nullptr;
}

// Zeroed buffers for timing one of ours.
struct OwnBuffers {
  std::vector<float> x, w, y, dy, dx, dw, db;
  // (Sized in elements: room for float32 copies of bfloat16 layouts.)
  static size_t Elements(const dnnl::memory::desc& md) {
    return md.get_size() / dnnl::memory::data_type_size(md.data_type());
  }
  OwnBuffers(const ConvProblem& p, const SgemmConv::Layouts& l)
      : x(Elements(l.x)),
        w(static_cast<size_t>(NumElements(p.weights))),
        y(Elements(l.y)),
        dy(Elements(l.dy)),
        dx(Elements(l.dx)),
        dw(w.size()),
        db(static_cast<size_t>(p.out_channels)) {}
};

// Conv's and ConvGrad's inputs (bias aside) are all float32, or all bfloat16 (--amp bf16:
// the graph casts them; the outputs stay float32); a bias is float32.
void CheckConvTypes(std::initializer_list<const Tensor*> inputs, const Tensor* bias) {
  const DType t = (*inputs.begin())->dtype();
  for (const Tensor* in : inputs)
    if (in->dtype() != t || (t != DType::kFloat32 && t != DType::kBFloat16))
      throw UnsupportedError("Conv: inputs of types " + DTypeName(t) + " and " + DTypeName(in->dtype()) +
                             "; the CPU convolutions take float32, or bfloat16 inputs with a float32 result");
  if (bias && bias->dtype() != DType::kFloat32)
    throw UnsupportedError("Conv: a bias of type " + DTypeName(bias->dtype()) + "; the CPU convolutions take float32");
}

class ConvKernel final : public OpKernel {
 public:
  explicit ConvKernel(const KernelInfo& info) : OpKernel(info) {}

  bool AcceptsLayouts(const KernelContext&) const override { return true; }
  std::string PlanNote() const override { return note_; }

  void Prepare(KernelContext& ctx) override {
    note_.clear();
    own_.reset();
    const Tensor& x = ctx.Input(0);
    const Tensor& w = ctx.Input(1);
    const Tensor* b = ctx.OptionalInput(2);
    CheckConvTypes({&x, &w}, b);
    if (!w.is_plain() || (b && !b->is_plain())) Unsupported("weights in a non-plain layout");
    ConvProblem p = DescribeConv(node_, x, w, b, ctx.settings());
    if (NumElements(p.dst) == 0) {
      ctx.SetOutput(0, DType::kFloat32, p.dst);
      return;
    }
    const int64_t block = DenseBlock(x);
    const int64_t out_block = block > 0 && p.out_channels % block == 0 ? block : 0;
    dense_ = MaybeDense(p, block, out_block);
    if (dense_) {
      // Ours where one applies (WithinWindow), else the dense product.
      const dnnl::memory::desc y_md = BlockedOrPlainDesc(p.dst, out_block);
      std::string name;
      own_ = WithinWindow(p, SgemmConv::Layouts{DescOf(x), y_md, y_md, DescOf(x)}, &name);
      if (own_) dense_.reset();
      note_ = own_ ? "fwd=" + name + "[sgemm]" : "fwd=dense(maps within the window: one matmul)[matmul]";
      ctx.SetOutput(0, DType::kFloat32, p.dst, BlockedOrPlain(p.dst, out_block));
      return;
    }
    dnnl::convolution_forward::primitive_desc pd;
    const size_t entry_start = note_.size();
    try {
      pd = ChooseAlgorithm<dnnl::convolution_forward>(
          "fwd", p, &x, nullptr,
          [&](const ConvDescs& d, dnnl::algorithm alg) {
            return dnnl::convolution_forward::primitive_desc(
                ConvForwardDesc(p, d, dnnl::prop_kind::forward_inference, alg), Engine());
          },
          &note_);
    } catch (const dnnl::error& e) {
      Unsupported(std::string("oneDNN has no convolution for this configuration: ") + e.what());
    }
    ctx.SetOutput(0, DType::kFloat32, p.dst, LayoutFor(pd.dst_desc(), p.dst, DType::kFloat32));
    // (Under --amp bf16 the forward's candidates are our Winograd, which reads bfloat16.)
    const SgemmConv::Layouts layouts{DescOf(x), pd.dst_desc(), pd.dst_desc(), DescOf(x)};
    const std::vector<Candidate> candidates = Candidates("fwd", p, layouts);
    if (!candidates.empty()) {
      const dnnl::memory::desc plain_weights = PlainDesc(p.weights, DType::kFloat32);
      own_ = ChooseOwn(
          "fwd", p, layouts.x, candidates,
          [&] { return TimePrimitive(dnnl::convolution_forward(pd), pd, plain_weights); },
          [&](SgemmConv* own) {
            OwnBuffers b(p, layouts);
            return TimeFastest(
                [&] { own->Forward(b.x.data(), b.w.data(), p.has_bias ? b.db.data() : nullptr, b.y.data()); });
          },
          entry_start, &note_);
      if (own_) return;
    }
    src_ = Reorder(DescOf(x), pd.src_desc());
    weights_ = Reorder(PlainDesc(p.weights, w.dtype()), pd.weights_desc());
    dst_desc_ = pd.dst_desc();
    if (p.has_bias) bias_desc_ = pd.bias_desc();
    has_bias_ = p.has_bias;
    prim_ = dnnl::convolution_forward(pd);
  }

  void Compute(KernelContext& ctx) override {
    if (ctx.Output(0).numel() == 0) return;
    if (dense_) {
      const Tensor* b = ctx.OptionalInput(2);
      dense_->Forward(ctx.Input(0).raw(), ctx.Input(1).raw(), b ? b->data<float>() : nullptr,
                      ctx.Output(0).data<float>());
      return;
    }
    if (own_) {
      const Tensor* b = ctx.OptionalInput(2);
      own_->Forward(ctx.Input(0).raw(), ctx.Input(1).raw(), b ? b->data<float>() : nullptr,
                    ctx.Output(0).data<float>());
      return;
    }
    std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, src_.Apply(ctx.Input(0).raw(), 0)},
                                                  {DNNL_ARG_WEIGHTS, weights_.Apply(ctx.Input(1).raw(), 1)},
                                                  {DNNL_ARG_DST, Wrap(dst_desc_, ctx.Output(0))}};
    if (has_bias_) args[DNNL_ARG_BIAS] = Wrap(bias_desc_, ctx.Input(2));
    prim_.execute(Stream(), args);
  }

 private:
  std::string note_;
  Reorder src_, weights_;
  dnnl::memory::desc dst_desc_, bias_desc_;
  bool has_bias_ = false;
  dnnl::convolution_forward prim_;
  std::unique_ptr<DenseConv> dense_;
  std::shared_ptr<SgemmConv> own_;  // ours, where it runs the forward pass
};

// ConvGrad(dY, X, W) -> dX, dW, dB (each output optional) with the Conv node's
// attributes, on oneDNN's backward-data and backward-weights primitives. dX comes in the
// layout backward-data chooses; dW and dB are plain (the optimizer reads them).
class ConvGradKernel final : public OpKernel {
 public:
  explicit ConvGradKernel(const KernelInfo& info) : OpKernel(info) {}

  bool AcceptsLayouts(const KernelContext&) const override { return true; }
  std::string PlanNote() const override { return note_; }

  void Prepare(KernelContext& ctx) override {
    note_.clear();
    data_own_.reset();
    weights_own_.reset();
    depthwise_ = false;
    widen_ = false;
    const Tensor& dy = ctx.Input(0);
    const Tensor& x = ctx.Input(1);
    const Tensor& w = ctx.Input(2);
    CheckConvTypes({&dy, &x, &w}, nullptr);
    if (!w.is_plain()) Unsupported("weights in a non-plain layout");
    Tensor bias_spec;
    if (ctx.HasOutput(2)) bias_spec = Tensor::View(DType::kFloat32, {w.dim(0)}, nullptr);
    ConvProblem p = DescribeConv(node_, x, w, ctx.HasOutput(2) ? &bias_spec : nullptr, ctx.settings());
    if (p.dst != dy.shape()) Fail("gradient " + dy.Describe() + " does not match the output shape " + ShapeString(p.dst));
    if (x.numel() == 0 || dy.numel() == 0) Unsupported("empty tensors in ConvGrad");
    has_bias_ = p.has_bias;
    const int64_t x_block = DenseBlock(x);
    dense_ = MaybeDense(p, x_block, DenseBlock(dy));
    if (dense_) {
      std::string name;
      std::shared_ptr<SgemmConv> own = WithinWindow(
          p, SgemmConv::Layouts{DescOf(x), DescOf(dy), DescOf(dy), BlockedOrPlainDesc(x.shape(), x_block)}, &name);
      if (own) {  // as in ConvKernel
        dense_.reset();
        if (ctx.HasOutput(0)) data_own_ = own;
        if (ctx.HasOutput(1) || ctx.HasOutput(2)) weights_own_ = own;
      }
      note_ = own ? "bwd_data=" + name + "[sgemm] bwd_weights=" + name + "[sgemm]"
                  : "bwd_data=dense[matmul] bwd_weights=dense(maps within the window: one matmul each)[matmul]";
      ctx.SetOutput(0, DType::kFloat32, x.shape(), BlockedOrPlain(x.shape(), x_block));
      ctx.SetOutput(1, DType::kFloat32, w.shape());
      ctx.SetOutput(2, DType::kFloat32, {w.dim(0)});
      return;
    }
    // The forward primitive the backward ones pair with reads and writes the inputs' type.
    auto forward_hint = [&](const ConvDescs& d, dnnl::algorithm alg) {
      ConvDescs h = d;
      for (auto* md : {&h.src, &h.weights, &h.dst}) *md = WithDataType(*md, p.compute);
      return dnnl::convolution_forward::primitive_desc(ConvForwardDesc(p, h, dnnl::prop_kind::forward_training, alg),
                                                       Engine());
    };
    const dnnl::memory::desc plain_weights = PlainDesc(p.weights, DType::kFloat32);
    // The layouts ours would read and write: dX as backward-data writes it (else x's, as
    // float32). Under --amp bf16 our Winograd reads the bfloat16 inputs as they are, taps
    // float32 copies of them (widen_*: Compute).
    const dnnl::memory::desc x32 = WithDataType(DescOf(x), DType::kFloat32),
                             dy32 = WithDataType(DescOf(dy), DType::kFloat32);
    SgemmConv::Layouts layouts{DescOf(x), DescOf(dy), DescOf(dy), x32};
    widen_ = p.compute != DType::kFloat32;
    if (widen_) {
      widen_dy_ = Reorder(DescOf(dy), dy32);
      widen_x_ = Reorder(DescOf(x), x32);
      widen_w_ = Reorder(PlainDesc(w.shape(), w.dtype()), PlainDesc(w.shape(), DType::kFloat32));
    }
    std::vector<Candidate> candidates;  // ours, shared by both gradients
    bool have_candidates = false;
    if (ctx.HasOutput(0)) {
      const size_t entry_start = note_.size();
      auto pd = ChooseAlgorithm<dnnl::convolution_backward_data>(
          "bwd_data", p, nullptr, &dy,
          [&](const ConvDescs& d, dnnl::algorithm alg) {
            dnnl::convolution_backward_data::desc desc(alg, d.src, d.weights, d.dst, p.strides, p.dilations,
                                                       p.pads_begin, p.pads_end);
            return dnnl::convolution_backward_data::primitive_desc(desc, Engine(), forward_hint(d, alg));
          },
          &note_);
      dx_desc_ = pd.diff_src_desc();
      layouts.dx = dx_desc_;
      candidates = Candidates("bwd_data", p, layouts);
      have_candidates = true;
      data_own_ = ChooseOwn(
          "bwd_data", p, DescOf(dy), candidates,
          [&] { return TimePrimitive(dnnl::convolution_backward_data(pd), pd, plain_weights); },
          [&](SgemmConv* own) {
            OwnBuffers b(p, layouts);
            return TimeFastest([&] { own->Backward(b.dy.data(), nullptr, b.w.data(), b.dx.data(), nullptr, nullptr); });
          },
          entry_start, &note_);
      if (!data_own_) {
        data_ = dnnl::convolution_backward_data(pd);
        data_dy_ = Reorder(DescOf(dy), pd.diff_dst_desc());
        data_w_ = Reorder(PlainDesc(p.weights, w.dtype()), pd.weights_desc());
      }
    }
    ctx.SetOutput(0, DType::kFloat32, x.shape(),
                  ctx.HasOutput(0) ? LayoutFor(dx_desc_, x.shape(), DType::kFloat32) : nullptr);
    ctx.SetOutput(1, DType::kFloat32, w.shape());
    ctx.SetOutput(2, DType::kFloat32, {w.dim(0)});
    if (ctx.HasOutput(1) || ctx.HasOutput(2)) {
      const size_t entry_start = note_.size();
      auto pd = ChooseAlgorithm<dnnl::convolution_backward_weights>(
          "bwd_weights", p, &x, &dy,
          [&](const ConvDescs& d, dnnl::algorithm alg) {
            auto desc = p.has_bias ? dnnl::convolution_backward_weights::desc(alg, d.src, d.weights, d.bias, d.dst,
                                                                              p.strides, p.dilations, p.pads_begin,
                                                                              p.pads_end)
                                   : dnnl::convolution_backward_weights::desc(alg, d.src, d.weights, d.dst, p.strides,
                                                                              p.dilations, p.pads_begin, p.pads_end);
            return dnnl::convolution_backward_weights::primitive_desc(desc, Engine(), forward_hint(d, alg));
          },
          &note_);
      if (UseDepthwise(p, x, dy, pd.impl_info_str())) {
        note_ += " -> depthwise(ours: oneDNN has no depthwise kernel for this weight gradient)";
        return;
      }
      if (!have_candidates) candidates = Candidates("bwd_weights", p, layouts);
      weights_own_ = ChooseOwn(
          "bwd_weights", p, DescOf(x), candidates,
          [&] { return TimePrimitive(dnnl::convolution_backward_weights(pd), pd, plain_weights); },
          [&](SgemmConv* own) {
            OwnBuffers b(p, layouts);
            return TimeFastest([&] {
              own->Backward(b.dy.data(), b.x.data(), nullptr, nullptr, b.dw.data(), p.has_bias ? b.db.data() : nullptr);
            });
          },
          entry_start, &note_);
      if (weights_own_) return;
      weights_ = dnnl::convolution_backward_weights(pd);
      weights_dy_ = Reorder(DescOf(dy), pd.diff_dst_desc());
      weights_x_ = Reorder(DescOf(x), pd.src_desc());
      // dW in the primitive's layout, then plain (always computed with dB).
      dw_desc_ = pd.diff_weights_desc();
      dw_ = Reorder(dw_desc_, plain_weights);
      want_dw_ = ctx.HasOutput(1);
      if (has_bias_) bias_desc_ = pd.diff_bias_desc();
    }
  }

  void Compute(KernelContext& ctx) override {
    if (depthwise_) {
      if (ctx.HasOutput(0) && !data_own_)
        data_.execute(Stream(), {{DNNL_ARG_DIFF_DST, data_dy_.Apply(ctx.Input(0).raw(), 0)},
                                 {DNNL_ARG_WEIGHTS, data_w_.Apply(ctx.Input(2).raw(), 1)},
                                 {DNNL_ARG_DIFF_SRC, Wrap(dx_desc_, ctx.Output(0))}});
      const float* x = static_cast<const float*>(depthwise_x_.Apply(ctx.Input(1).raw(), 2).get_data_handle());
      const float* dy = static_cast<const float*>(depthwise_dy_.Apply(ctx.Input(0).raw(), 0).get_data_handle());
      DepthwiseWeightGradient(depthwise_geometry_, x, dy, ctx.HasOutput(1) ? ctx.Output(1).data<float>() : nullptr,
                              ctx.HasOutput(2) ? ctx.Output(2).data<float>() : nullptr);
      return;
    }
    if (data_own_ || weights_own_) {
      // The inputs as they are, or float32 copies of bfloat16 ones for ours that reads float32 only.
      auto input = [&](const SgemmConv& own, const Reorder& widen, int i, int slot) -> const void* {
        if (!widen_ || own.ReadsBf16()) return ctx.Input(i).raw();
        return widen.Apply(ctx.Input(i).raw(), slot).get_data_handle();
      };
      float* dx = data_own_ ? ctx.Output(0).data<float>() : nullptr;
      float* dw = weights_own_ && ctx.HasOutput(1) ? ctx.Output(1).data<float>() : nullptr;
      float* db = weights_own_ && ctx.HasOutput(2) ? ctx.Output(2).data<float>() : nullptr;
      if (data_own_ == weights_own_) {
        const SgemmConv& own = *data_own_;
        data_own_->Backward(input(own, widen_dy_, 0, 8), input(own, widen_x_, 1, 9), input(own, widen_w_, 2, 10), dx,
                            dw, db);
      } else {
        if (data_own_)
          data_own_->Backward(input(*data_own_, widen_dy_, 0, 8), nullptr, input(*data_own_, widen_w_, 2, 10), dx,
                              nullptr, nullptr);
        if (weights_own_)
          weights_own_->Backward(input(*weights_own_, widen_dy_, 0, 8), input(*weights_own_, widen_x_, 1, 9), nullptr,
                                 nullptr, dw, db);
      }
    }
    if (dense_) {
      const void* dy = ctx.Input(0).raw();
      if (ctx.HasOutput(0)) dense_->BackwardData(dy, ctx.Input(2).raw(), ctx.Output(0).data<float>());
      if (ctx.HasOutput(1) || ctx.HasOutput(2))
        dense_->BackwardWeights(dy, ctx.Input(1).raw(), ctx.HasOutput(1) ? ctx.Output(1).data<float>() : nullptr,
                                ctx.HasOutput(2) ? ctx.Output(2).data<float>() : nullptr);
      return;
    }
    if (ctx.HasOutput(0) && !data_own_)
      data_.execute(Stream(), {{DNNL_ARG_DIFF_DST, data_dy_.Apply(ctx.Input(0).raw(), 0)},
                               {DNNL_ARG_WEIGHTS, data_w_.Apply(ctx.Input(2).raw(), 1)},
                               {DNNL_ARG_DIFF_SRC, Wrap(dx_desc_, ctx.Output(0))}});
    if ((ctx.HasOutput(1) || ctx.HasOutput(2)) && !weights_own_) {
      void* dw_library = dw_.needed() || !want_dw_ ? ScratchBuffer(3, dw_desc_.get_size()) : ctx.Output(1).raw();
      std::unordered_map<int, dnnl::memory> args = {
          {DNNL_ARG_DIFF_DST, weights_dy_.Apply(ctx.Input(0).raw(), 0)},
          {DNNL_ARG_SRC, weights_x_.Apply(ctx.Input(1).raw(), 2)},
          {DNNL_ARG_DIFF_WEIGHTS, dnnl::memory(dw_desc_, Engine(), dw_library)}};
      if (has_bias_) args[DNNL_ARG_DIFF_BIAS] = Wrap(bias_desc_, ctx.Output(2));
      weights_.execute(Stream(), args);
      if (want_dw_ && dw_library != ctx.Output(1).raw()) dw_.Run(dw_library, ctx.Output(1).raw());
    }
  }

 private:
  // Under auto, a float32 2D depthwise convolution whose weight gradient oneDNN has no
  // depthwise kernel for (`impl`: the primitive it offers) runs as DepthwiseWeightGradient
  // on channel-blocked copies of X and dY (conv_depthwise.h). A rule, not timed: every
  // process computes the same gradient.
  bool UseDepthwise(const ConvProblem& p, const Tensor& x, const Tensor& dy, const std::string& impl) {
    depthwise_ = false;
    if (p.algorithm != ConvAlgorithm::kAuto || p.compute != DType::kFloat32 || x.dtype() != DType::kFloat32 ||
        dy.dtype() != DType::kFloat32 || p.src.size() != 4 || p.weights.size() != 5 || p.weights[1] != 1 ||
        p.weights[2] != 1 || p.weights[0] != p.src[1] || p.out_channels != p.src[1] ||
        impl.find("dw") != std::string::npos || (p.channel_block != 8 && p.channel_block != 16))
      return false;
    DepthwiseGeometry& g = depthwise_geometry_;
    g.batch = p.src[0];
    g.channels = p.src[1];
    g.block = p.channel_block;
    g.in_h = p.src[2];
    g.in_w = p.src[3];
    g.out_h = p.dst[2];
    g.out_w = p.dst[3];
    g.kernel_h = p.weights[3];
    g.kernel_w = p.weights[4];
    g.stride_h = p.strides[0];
    g.stride_w = p.strides[1];
    g.dilation_h = p.dilations[0] + 1;
    g.dilation_w = p.dilations[1] + 1;
    g.pad_top = p.pads_begin[0];
    g.pad_left = p.pads_begin[1];
    depthwise_x_ = Reorder(DescOf(x), ChannelBlocked(x.shape(), g.block));
    depthwise_dy_ = Reorder(DescOf(dy), ChannelBlocked(dy.shape(), g.block));
    depthwise_ = true;
    return true;
  }

  std::string note_;
  bool depthwise_ = false;
  DepthwiseGeometry depthwise_geometry_;
  Reorder depthwise_x_, depthwise_dy_;
  dnnl::memory::desc dx_desc_, bias_desc_, dw_desc_;
  bool has_bias_ = false, want_dw_ = false;
  dnnl::convolution_backward_data data_;
  Reorder data_dy_, data_w_;
  dnnl::convolution_backward_weights weights_;
  Reorder weights_dy_, weights_x_, dw_;
  std::unique_ptr<DenseConv> dense_;
  std::shared_ptr<SgemmConv> data_own_, weights_own_;  // ours, where they won (may be one object)
  bool widen_ = false;                         // bfloat16 inputs: ours reads float32 copies
  Reorder widen_dy_, widen_x_, widen_w_;
};

OT_REGISTER_CPU_KERNEL("Conv", 1, kLatestOpset, ConvKernel);
OT_REGISTER_KERNEL(kGradDomain, "ConvGrad", 1, kLatestOpset, DeviceType::kCPU, ConvGradKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
