// Resampling, crops, flips, channel conversion and the pipeline that composes them.
#include "train/loader/transforms.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "graph/error.h"
#include "train/readers/data_random.h"

namespace ot {

namespace {

// PIL's fixed-point resampling: 8-bit samples, coefficients scaled by 2^22.
constexpr int kPrecisionBits = 32 - 8 - 2;

// The filter taps of one output coordinate.
struct Taps {
  std::vector<int64_t> first;  // first input index per output index
  std::vector<int64_t> count;  // taps per output index
  std::vector<int32_t> k;      // out_size * max_taps coefficients
  int64_t max_taps = 0;
};

double Triangle(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// The bilinear (triangle) filter widened by the down-scaling factor, as PIL computes it.
Taps BilinearTaps(int64_t in_size, int64_t out_size) {
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
  const double filterscale = std::max(scale, 1.0);
  const double support = 1.0 * filterscale;
  Taps t;
  t.max_taps = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  t.first.resize(static_cast<size_t>(out_size));
  t.count.resize(static_cast<size_t>(out_size));
  t.k.assign(static_cast<size_t>(out_size * t.max_taps), 0);
  std::vector<double> w(static_cast<size_t>(t.max_taps));
  for (int64_t xx = 0; xx < out_size; ++xx) {
    const double center = (static_cast<double>(xx) + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int64_t xmin = static_cast<int64_t>(center - support + 0.5);  // truncation toward zero, as C's (int)
    if (xmin < 0) xmin = 0;
    int64_t xmax = static_cast<int64_t>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    xmax = std::min(xmax, t.max_taps);
    double sum = 0;
    for (int64_t x = 0; x < xmax; ++x) {
      w[static_cast<size_t>(x)] = Triangle((static_cast<double>(x + xmin) - center + 0.5) * ss);
      sum += w[static_cast<size_t>(x)];
    }
    for (int64_t x = 0; x < xmax; ++x) {
      const double v = sum != 0.0 ? w[static_cast<size_t>(x)] / sum : w[static_cast<size_t>(x)];
      const double scaled = v * static_cast<double>(1 << kPrecisionBits);
      t.k[static_cast<size_t>(xx * t.max_taps + x)] = static_cast<int32_t>(v < 0 ? scaled - 0.5 : scaled + 0.5);
    }
    t.first[static_cast<size_t>(xx)] = xmin;
    t.count[static_cast<size_t>(xx)] = xmax;
  }
  return t;
}

// PIL's clip8: 255 from 256 * 2^22 up, 0 at or below 0, else v >> 22; written as a clamp
// of the shifted value so that loops over it vectorise.
inline uint8_t Clip8(int32_t v) {
  const int32_t s = v >> kPrecisionBits;
  return static_cast<uint8_t>(s < 0 ? 0 : (s > 255 ? 255 : s));
}

// One row of the horizontal pass; C channels known at compile time (1..4) so that the
// tap loop keeps the channel sums in registers.
template <int C>
void ResampleRow(const uint8_t* src, uint8_t* dst, int64_t out_w, const Taps& t) {
  for (int64_t xx = 0; xx < out_w; ++xx) {
    const int32_t* k = &t.k[static_cast<size_t>(xx * t.max_taps)];
    const uint8_t* s = src + t.first[static_cast<size_t>(xx)] * C;
    const int64_t n = t.count[static_cast<size_t>(xx)];
    int32_t acc[C];
    for (int ch = 0; ch < C; ++ch) acc[ch] = 1 << (kPrecisionBits - 1);
    for (int64_t x = 0; x < n; ++x)
      for (int ch = 0; ch < C; ++ch) acc[ch] += static_cast<int32_t>(s[x * C + ch]) * k[x];
    for (int ch = 0; ch < C; ++ch) dst[xx * C + ch] = Clip8(acc[ch]);
  }
}

DecodedImage ResampleHorizontal(const DecodedImage& in, int64_t out_w) {
  const Taps t = BilinearTaps(in.width, out_w);
  DecodedImage out;
  out.height = in.height;
  out.width = out_w;
  out.channels = in.channels;
  out.pixels.resize(static_cast<size_t>(out.height * out.width * out.channels));
  for (int64_t y = 0; y < in.height; ++y) {
    switch (in.channels) {
      case 1: ResampleRow<1>(in.Row(y), out.Row(y), out_w, t); break;
      case 2: ResampleRow<2>(in.Row(y), out.Row(y), out_w, t); break;
      case 3: ResampleRow<3>(in.Row(y), out.Row(y), out_w, t); break;
      default: ResampleRow<4>(in.Row(y), out.Row(y), out_w, t); break;
    }
  }
  return out;
}

DecodedImage ResampleVertical(const DecodedImage& in, int64_t out_h) {
  const Taps t = BilinearTaps(in.height, out_h);
  DecodedImage out;
  out.height = out_h;
  out.width = in.width;
  out.channels = in.channels;
  const int64_t row = in.width * in.channels;
  out.pixels.resize(static_cast<size_t>(out_h * row));
  std::vector<int32_t> acc_buffer(static_cast<size_t>(row));
  int32_t* __restrict acc = acc_buffer.data();
  for (int64_t yy = 0; yy < out_h; ++yy) {
    for (int64_t i = 0; i < row; ++i) acc[i] = 1 << (kPrecisionBits - 1);
    const int32_t* k = &t.k[static_cast<size_t>(yy * t.max_taps)];
    const int64_t first = t.first[static_cast<size_t>(yy)], n = t.count[static_cast<size_t>(yy)];
    for (int64_t y = 0; y < n; ++y) {
      const uint8_t* __restrict src = in.Row(first + y);
      const int32_t ky = k[y];
      for (int64_t i = 0; i < row; ++i) acc[i] += static_cast<int32_t>(src[i]) * ky;
    }
    uint8_t* __restrict dst = out.Row(yy);
    for (int64_t i = 0; i < row; ++i) dst[i] = Clip8(acc[i]);
  }
  return out;
}

// Python's round(): halves to even (the default floating-point rounding mode).
int64_t PyRound(double v) { return static_cast<int64_t>(std::nearbyint(v)); }

double UniformUnit(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0); }

std::string Size2(int64_t h, int64_t w) { return std::to_string(h) + "x" + std::to_string(w); }

}  // namespace

DecodedImage ResizeBilinear(const DecodedImage& in, int64_t out_h, int64_t out_w) {
  OT_CHECK(out_h > 0 && out_w > 0, "cannot resize to %lldx%lld", (long long)out_h, (long long)out_w);
  // PIL: the horizontal pass first (when the width changes), then the vertical one, each
  // rounding to 8 bits.
  if (in.width == out_w && in.height == out_h) return in;
  if (in.width == out_w) return ResampleVertical(in, out_h);
  DecodedImage h = ResampleHorizontal(in, out_w);
  return in.height == out_h ? h : ResampleVertical(h, out_h);
}

DecodedImage ResizeShorter(const DecodedImage& in, int64_t n) {
  OT_CHECK(n > 0, "--resize needs a positive size");
  const int64_t shorter = std::min(in.height, in.width), longer = std::max(in.height, in.width);
  const int64_t new_long = static_cast<int64_t>(static_cast<double>(n) * static_cast<double>(longer) /
                                                static_cast<double>(shorter));
  if (in.height <= in.width) return ResizeBilinear(in, n, new_long);
  return ResizeBilinear(in, new_long, n);
}

DecodedImage Crop(const DecodedImage& in, int64_t top, int64_t left, int64_t h, int64_t w) {
  DecodedImage out;
  out.height = h;
  out.width = w;
  out.channels = in.channels;
  out.pixels.assign(static_cast<size_t>(h * w * in.channels), 0);
  const int64_t x0 = std::max<int64_t>(0, -left), x1 = std::min(w, in.width - left);
  if (x1 <= x0) return out;
  for (int64_t y = 0; y < h; ++y) {
    const int64_t sy = top + y;
    if (sy < 0 || sy >= in.height) continue;
    std::copy_n(in.Row(sy) + (left + x0) * in.channels, (x1 - x0) * in.channels, out.Row(y) + x0 * in.channels);
  }
  return out;
}

DecodedImage CenterCrop(const DecodedImage& in, int64_t h, int64_t w) {
  if (in.height == h && in.width == w) return in;
  if (h > in.height || w > in.width) {
    // torchvision pads (zeros) to at least the crop size, [left, top, right, bottom] =
    // [(w - W) // 2, (h - H) // 2, (w - W + 1) // 2, (h - H + 1) // 2], then crops the centre.
    const int64_t pad_top = h > in.height ? (h - in.height) / 2 : 0, pad_left = w > in.width ? (w - in.width) / 2 : 0;
    const int64_t ph = std::max(h, in.height), pw = std::max(w, in.width);
    DecodedImage padded = Crop(in, -pad_top, -pad_left, ph, pw);
    return CenterCrop(padded, h, w);
  }
  const int64_t top = PyRound(static_cast<double>(in.height - h) / 2.0);
  const int64_t left = PyRound(static_cast<double>(in.width - w) / 2.0);
  return Crop(in, top, left, h, w);
}

void FlipHorizontal(DecodedImage& img) {
  const int64_t c = img.channels;
  for (int64_t y = 0; y < img.height; ++y) {
    uint8_t* row = img.Row(y);
    for (int64_t a = 0, b = img.width - 1; a < b; ++a, --b)
      for (int64_t ch = 0; ch < c; ++ch) std::swap(row[a * c + ch], row[b * c + ch]);
  }
}

DecodedImage ConvertChannels(const DecodedImage& in, int64_t channels) {
  OT_CHECK(channels == 1 || channels == 3, "images convert to 1 (grey) or 3 (RGB) channels, not %lld",
           (long long)channels);
  if (in.channels == channels) return in;
  DecodedImage out;
  out.height = in.height;
  out.width = in.width;
  out.channels = channels;
  const int64_t n = in.height * in.width, c = in.channels;
  out.pixels.resize(static_cast<size_t>(n * channels));
  const uint8_t* s = in.pixels.data();
  uint8_t* d = out.pixels.data();
  const bool grey = c <= 2;  // L or LA
  for (int64_t i = 0; i < n; ++i, s += c) {
    if (channels == 3) {
      d[3 * i] = s[0];
      d[3 * i + 1] = grey ? s[0] : s[1];
      d[3 * i + 2] = grey ? s[0] : s[2];
    } else {
      d[i] = grey ? s[0]
                  : static_cast<uint8_t>((s[0] * 19595u + s[1] * 38470u + s[2] * 7471u + 0x8000u) >> 16);
    }
  }
  return out;
}

CropBox RandomResizedCropBox(int64_t height, int64_t width, std::mt19937_64& rng, double scale_lo, double scale_hi,
                             double ratio_lo, double ratio_hi) {
  const double area = static_cast<double>(height * width);
  const double log_lo = std::log(ratio_lo), log_hi = std::log(ratio_hi);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * (scale_lo + (scale_hi - scale_lo) * UniformUnit(rng));
    const double aspect = std::exp(log_lo + (log_hi - log_lo) * UniformUnit(rng));
    const int64_t w = PyRound(std::sqrt(target * aspect)), h = PyRound(std::sqrt(target / aspect));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      CropBox box;
      box.top = static_cast<int64_t>(UniformBelow(rng, static_cast<uint64_t>(height - h + 1)));
      box.left = static_cast<int64_t>(UniformBelow(rng, static_cast<uint64_t>(width - w + 1)));
      box.height = h;
      box.width = w;
      return box;
    }
  }
  // Fallback: the central crop of the nearest allowed aspect ratio.
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  CropBox box{0, 0, height, width};
  if (in_ratio < ratio_lo) box.height = PyRound(static_cast<double>(width) / ratio_lo);
  else if (in_ratio > ratio_hi) box.width = PyRound(static_cast<double>(height) * ratio_hi);
  box.top = (height - box.height) / 2;
  box.left = (width - box.width) / 2;
  return box;
}

std::vector<float> ParseFloatList(const std::string& text, const std::string& flag) {
  std::vector<float> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    float v = 0;
    try { v = std::stof(item, &used); } catch (const std::exception&) { used = 0; }
    OT_CHECK(used == item.size() && !item.empty() && std::isfinite(v), "%s '%s': '%s' is not a number", flag.c_str(),
             text.c_str(), item.c_str());
    out.push_back(v);
  }
  OT_CHECK(!out.empty(), "%s needs one number or one per channel, e.g. 0.485,0.456,0.406", flag.c_str());
  return out;
}

namespace {

std::vector<float> PerChannel(const std::vector<float>& given, const std::vector<float>& fallback, int64_t channels,
                              const char* flag) {
  const std::vector<float>& v = given.empty() ? fallback : given;
  if (v.empty()) return {};
  if (static_cast<int64_t>(v.size()) == channels) return v;
  if (v.size() == 1) return std::vector<float>(static_cast<size_t>(channels), v[0]);
  // A data set's own statistics for another channel count: grey <-> RGB.
  if (given.empty()) {
    float sum = 0;
    for (float x : v) sum += x;
    return std::vector<float>(static_cast<size_t>(channels), sum / static_cast<float>(v.size()));
  }
  throw Error(StrFormat("%s has %zu values but the model's input has %lld channels", flag, v.size(),
                        (long long)channels));
}

}  // namespace

ImagePipeline::ImagePipeline(const TransformOptions& options, int64_t channels, int64_t height, int64_t width,
                             std::vector<float> default_mean, std::vector<float> default_stddev)
    : options_(options), channels_(channels), height_(height), width_(width) {
  OT_CHECK(channels == 1 || channels == 3,
           "the model's input takes %lld-channel images; image data can feed 1 (grey) or 3 (RGB) channels",
           (long long)channels);
  mean_ = PerChannel(options.mean, default_mean, channels, "--mean");
  stddev_ = PerChannel(options.stddev, default_stddev, channels, "--std");
  if (mean_.empty()) mean_.assign(static_cast<size_t>(channels), 0.f);
  if (stddev_.empty()) stddev_.assign(static_cast<size_t>(channels), 1.f);
  for (float s : stddev_) OT_CHECK(s > 0, "--std values must be positive");
  for (int64_t n : {options.resize, options.center_crop, options.random_resized_crop})
    OT_CHECK(n >= 0, "image sizes (--resize, --center-crop, --random-resized-crop) must be positive");
}

DecodedImage ImagePipeline::Geometry(const DecodedImage& src, const AugmentOptions* augment, std::mt19937_64* rng,
                                     const std::string& name) const {
  // Channels first when that shrinks the image (RGB -> grey), last when it grows it.
  const int64_t first_channels = src.channels == 2 || src.channels == 4 || channels_ < src.channels
                                     ? (channels_ == 1 ? 1 : 3)
                                     : src.channels;
  DecodedImage img = ConvertChannels(src, first_channels);
  const bool train = augment != nullptr && rng != nullptr;
  const TransformOptions& o = options_;
  if (train && o.random_resized_crop > 0) {
    const CropBox box = RandomResizedCropBox(img.height, img.width, *rng);
    img = ResizeBilinear(Crop(img, box.top, box.left, box.height, box.width), o.random_resized_crop,
                         o.random_resized_crop);
  } else if (o.AnyGeometry()) {
    const int64_t resize = o.resize > 0 ? o.resize : (o.center_crop == 0 ? o.random_resized_crop : 0);
    const int64_t crop = o.center_crop > 0 ? o.center_crop : (o.resize == 0 ? o.random_resized_crop : 0);
    if (resize > 0) img = ResizeShorter(img, resize);
    if (crop > 0) img = CenterCrop(img, crop, crop);
  } else if (img.height != height_ || img.width != width_) {
    img = ResizeBilinear(img, height_, width_);  // no flag: the model's size
  }
  OT_CHECK(img.height == height_ && img.width == width_,
           "'%s': after the transforms (%s) the image is %lldx%lld but the model takes %lldx%lld; choose "
           "--resize/--center-crop/--random-resized-crop that end at the model's size, or none",
           name.c_str(), Describe(src.channels, src.height, src.width).c_str(), (long long)img.height,
           (long long)img.width, (long long)height_, (long long)width_);
  if (train) {
    if (augment->random_crop) {
      const int64_t pad = augment->crop_padding;
      const int64_t dy = static_cast<int64_t>(UniformBelow(*rng, static_cast<uint64_t>(2 * pad + 1)));
      const int64_t dx = static_cast<int64_t>(UniformBelow(*rng, static_cast<uint64_t>(2 * pad + 1)));
      img = Crop(img, dy - pad, dx - pad, height_, width_);
    }
    if ((o.hflip || augment->horizontal_flip) && UniformBelow(*rng, 2) == 1) FlipHorizontal(img);
  }
  return ConvertChannels(img, channels_);
}

void ImagePipeline::Apply(const DecodedImage& src, const AugmentOptions* augment, std::mt19937_64* rng, float* out,
                          const std::string& name) const {
  const DecodedImage img = Geometry(src, augment, rng, name);
  const int64_t plane = height_ * width_, c = channels_;
  float scale[3], shift[3];
  for (int64_t ch = 0; ch < c; ++ch) {
    scale[ch] = 1.f / (255.f * stddev_[static_cast<size_t>(ch)]);
    shift[ch] = mean_[static_cast<size_t>(ch)] / stddev_[static_cast<size_t>(ch)];
  }
  const uint8_t* s = img.pixels.data();
  if (c == 1) {
    for (int64_t p = 0; p < plane; ++p) out[p] = static_cast<float>(s[p]) * scale[0] - shift[0];
    return;
  }
  // HWC -> CHW in one sweep over the pixels.
  float* r = out;
  float* g = out + plane;
  float* b = out + 2 * plane;
  for (int64_t p = 0; p < plane; ++p) {
    r[p] = static_cast<float>(s[3 * p]) * scale[0] - shift[0];
    g[p] = static_cast<float>(s[3 * p + 1]) * scale[1] - shift[1];
    b[p] = static_cast<float>(s[3 * p + 2]) * scale[2] - shift[2];
  }
}

std::string ImagePipeline::Describe(int64_t in_channels, int64_t in_height, int64_t in_width) const {
  std::vector<std::string> parts;
  const TransformOptions& o = options_;
  if (o.random_resized_crop > 0) parts.push_back("random-resized-crop " + std::to_string(o.random_resized_crop));
  if (o.resize > 0) parts.push_back("resize " + std::to_string(o.resize));
  if (o.center_crop > 0) parts.push_back("center-crop " + std::to_string(o.center_crop));
  if (!o.AnyGeometry() && (in_height != height_ || in_width != width_))
    parts.push_back("resized " + Size2(in_height, in_width) + " -> " + Size2(height_, width_) + " (bilinear)");
  if (o.hflip) parts.push_back("hflip");
  if (in_channels != channels_) {
    const char* what = channels_ == 3 ? (in_channels <= 2 ? "grey copied to RGB" : "alpha dropped")
                                      : "converted to grey";
    parts.push_back(std::to_string(in_channels) + " -> " + std::to_string(channels_) + " channels (" + what + ")");
  }
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

}  // namespace ot
