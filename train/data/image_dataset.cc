// Image data sets: spec parsing, IDX (MNIST, Fashion-MNIST) loading, synthetic data and
// normalised batches. CIFAR-10 reading lives in cifar10_reader.cc.
#include "train/data/image_dataset.h"

#include <sys/stat.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <random>

#include "graph/error.h"
#include "train/readers/cifar10_reader.h"
#include "train/readers/data_random.h"
#include "train/readers/idx_reader.h"
#include "train/data/image_folder.h"
#include "train/data/image_source.h"
#include "train/data/npy_dataset.h"
#include "train/data/segmentation_folder.h"
#include "train/data/token_dataset.h"

namespace ot {

namespace {

bool Exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

// "DIR/stem-idx3-ubyte.gz", or the uncompressed name if that is what exists.
std::string FindIdx(const std::string& dir, const std::string& stem) {
  std::string gz = dir + "/" + stem + ".gz";
  if (Exists(gz)) return gz;
  std::string plain = dir + "/" + stem;
  if (Exists(plain)) return plain;
  throw Error("data file '" + gz + "' (or '" + plain + "') is missing" +
              (dir == kFashionMnistDir ? "; install Debian's dataset-fashion-mnist package" : ""));
}

#if defined(__x86_64__) && defined(__GNUC__)
// Eight pixels a step: zero-extended to int32, converted, multiplied, shifted. Compiled for
// AVX2 without FMA, so the compiler cannot fuse the product and the difference.
__attribute__((target("avx2"))) void NormalizePlaneAvx2(const uint8_t* src, float* out, int64_t n, float scale,
                                                        float shift) {
  const __m256 sc = _mm256_set1_ps(scale), sh = _mm256_set1_ps(shift);
  int64_t p = 0;
  for (; p + 8 <= n; p += 8) {
    const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + p)));
    _mm256_storeu_ps(out + p, _mm256_sub_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(v), sc), sh));
  }
  for (; p < n; ++p) out[p] = src[p] * scale - shift;
}

bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
#endif

// out[p] = src[p] * scale - shift for p < n: a product, then a difference, each rounded to
// float (no fused multiply-add), so the vector path gives the scalar loop's values bit for bit.
void NormalizePlane(const uint8_t* src, float* out, int64_t n, float scale, float shift) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (HasAvx2()) return NormalizePlaneAvx2(src, out, n, scale, shift);
#endif
  for (int64_t p = 0; p < n; ++p) out[p] = src[p] * scale - shift;
}

// kind is "fashion-mnist" or "mnist".
ImageDataset LoadIdxDataset(const std::string& kind, const std::string& dir, const std::string& split) {
  ImageDataset ds;
  ds.name = kind;
  const std::string prefix = split == "train" ? "train" : "t10k";
  std::string img_path = FindIdx(dir, prefix + "-images-idx3-ubyte");
  std::string lbl_path = FindIdx(dir, prefix + "-labels-idx1-ubyte");
  IdxArray images = ReadIdxFile(img_path);
  IdxArray labels = ReadIdxFile(lbl_path);
  OT_CHECK(images.dims.size() == 3, "'%s' should hold N x 28 x 28 images", img_path.c_str());
  OT_CHECK(labels.dims.size() == 1 && labels.dims[0] == images.dims[0],
           "'%s' holds %lld labels but '%s' holds %lld images", lbl_path.c_str(),
           (long long)(labels.dims.empty() ? 0 : labels.dims[0]), img_path.c_str(), (long long)images.dims[0]);
  ds.count = images.dims[0];
  ds.channels = 1;
  ds.height = images.dims[1];
  ds.width = images.dims[2];
  ds.classes = 10;
  ds.pixels = std::move(images.data);
  ds.labels.reserve(labels.data.size());
  for (size_t i = 0; i < labels.data.size(); ++i) {
    OT_CHECK(labels.data[i] < 10, "'%s': label %d at index %zu is outside [0, 10)", lbl_path.c_str(),
             labels.data[i], i);
    ds.labels.push_back(labels.data[i]);
  }
  if (kind == "fashion-mnist") { ds.mean = {0.2860f}; ds.stddev = {0.3530f}; }
  else { ds.mean = {0.1307f}; ds.stddev = {0.3081f}; }
  return ds;
}

// A positive integer of a spec ("synthetic:N"), or throws naming the spec.
int64_t ParsePositive(const std::string& text, const std::string& spec) {
  size_t used = 0;
  long long v = 0;
  try { v = std::stoll(text, &used); } catch (const std::exception&) { used = 0; }
  OT_CHECK(used == text.size() && v > 0, "data spec '%s': '%s' is not a positive whole number", spec.c_str(),
           text.c_str());
  return v;
}

// "synthetic[:N[:CxHxW]]"; rest is what follows "synthetic:" ("" when nothing does).
ImageDataset LoadSynthetic(const std::string& spec, const std::string& rest, const std::string& split,
                           SyntheticDataOptions opts) {
  if (!rest.empty()) {
    const size_t colon = rest.find(':');
    opts.count = ParsePositive(rest.substr(0, colon), spec);
    OT_CHECK(colon == std::string::npos || opts.sample_dims.empty(),
             "data spec '%s': an image shape is for image models; this model's input is not an image, so "
             "synthetic samples take its shape (use synthetic or synthetic:N)",
             spec.c_str());
    if (colon != std::string::npos) {
      const std::string shape = rest.substr(colon + 1);
      const size_t x1 = shape.find('x'), x2 = x1 == std::string::npos ? x1 : shape.find('x', x1 + 1);
      OT_CHECK(x2 != std::string::npos, "data spec '%s': the image shape should read CxHxW, e.g. 3x32x32",
               spec.c_str());
      opts.channels = ParsePositive(shape.substr(0, x1), spec);
      opts.height = ParsePositive(shape.substr(x1 + 1, x2 - x1 - 1), spec);
      opts.width = ParsePositive(shape.substr(x2 + 1), spec);
    }
  }
  if (split == "test") opts.sample_stream = 1;  // other samples of the same class patterns
  return MakeSyntheticDataset(opts);
}

// Synthetic samples of any shape, made on demand from (seed, stream, sample index):
//   float: pattern[class] + noise, the pattern a unit Gaussian per element and class, the
//          noise Gaussian with standard deviation 1 (learnable, not separable at a glance);
//   integer: token ids, each with probability 1/2 one of the class's 4 signature tokens
//          (drawn from the vocabulary per class), else uniform over the vocabulary.
class SyntheticSampleSource : public SampleSource {
 public:
  SyntheticSampleSource(const SyntheticDataOptions& o, std::vector<int64_t> labels)
      : o_(o), labels_(std::move(labels)) {
    for (int64_t d : o.sample_dims) size_ *= d;
    std::mt19937_64 rng(StreamSeed(o.seed, 0xc1a55, 1));
    const size_t k = static_cast<size_t>(o.classes);
    if (IsFloat()) {
      pattern_.resize(k * static_cast<size_t>(size_));
      for (float& v : pattern_) v = static_cast<float>(Gaussian(rng));
    } else {
      signature_.resize(k * kSignature);
      for (int64_t& t : signature_) t = static_cast<int64_t>(UniformBelow(rng, static_cast<uint64_t>(o.vocabulary)));
    }
  }
  std::vector<int64_t> SampleDims() const override { return o_.sample_dims; }
  DType InputType() const override { return o_.input_type; }
  HostTensor Inputs(const std::vector<int64_t>& indices, const AugmentOptions*, int64_t, int64_t) const override {
    std::vector<int64_t> dims = o_.sample_dims;
    dims.insert(dims.begin(), static_cast<int64_t>(indices.size()));
    HostTensor t(o_.input_type, dims, "input");
    for (size_t i = 0; i < indices.size(); ++i) {
      const int64_t index = indices[i];
      OT_CHECK(index >= 0 && index < static_cast<int64_t>(labels_.size()),
               "sample index %lld is outside the synthetic data set (%zu samples)", (long long)index, labels_.size());
      const size_t label = static_cast<size_t>(labels_[static_cast<size_t>(index)]);
      std::mt19937_64 rng(StreamSeed(o_.seed, 0x5eed0 + o_.sample_stream, static_cast<uint64_t>(index)));
      const size_t at = i * static_cast<size_t>(size_);
      for (int64_t e = 0; e < size_; ++e) {
        const size_t j = at + static_cast<size_t>(e);
        if (IsFloat()) {
          t.Data<float>()[j] = pattern_[label * static_cast<size_t>(size_) + static_cast<size_t>(e)] +
                               static_cast<float>(Gaussian(rng));
          continue;
        }
        const bool signature = (rng() >> 63) != 0;
        const int64_t token = signature ? signature_[label * kSignature + UniformBelow(rng, kSignature)]
                                        : static_cast<int64_t>(UniformBelow(rng, static_cast<uint64_t>(o_.vocabulary)));
        if (o_.input_type == DType::kInt64) t.Data<int64_t>()[j] = token;
        else t.Data<int32_t>()[j] = static_cast<int32_t>(token);
      }
    }
    return t;
  }

 private:
  static constexpr size_t kSignature = 4;
  bool IsFloat() const { return o_.input_type == DType::kFloat32; }
  // A standard normal value by Box-Muller on our own uniform draws (std::normal_distribution's
  // values differ between standard libraries).
  static double Gaussian(std::mt19937_64& rng) {
    const double u1 = (static_cast<double>(rng() >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
    const double u2 = static_cast<double>(rng() >> 11) * 0x1.0p-53;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * 3.14159265358979323846 * u2);
  }
  SyntheticDataOptions o_;
  std::vector<int64_t> labels_;
  int64_t size_ = 1;
  std::vector<float> pattern_;
  std::vector<int64_t> signature_;
};

// A further model input of synthetic data (SyntheticDataOptions::ExtraInput), made on demand
// from (seed, stream, input, sample index).
class SyntheticExtraSource : public SampleSource {
 public:
  SyntheticExtraSource(SyntheticDataOptions::ExtraInput in, uint64_t seed) : in_(std::move(in)), seed_(seed) {
    for (int64_t d : in_.sample_dims) size_ *= d;
  }
  std::vector<int64_t> SampleDims() const override { return in_.sample_dims; }
  DType InputType() const override { return in_.dtype; }
  HostTensor Inputs(const std::vector<int64_t>& indices, const AugmentOptions*, int64_t, int64_t) const override {
    std::vector<int64_t> dims = in_.sample_dims;
    dims.insert(dims.begin(), static_cast<int64_t>(indices.size()));
    HostTensor t(in_.dtype, dims, in_.name);
    for (size_t i = 0; i < indices.size(); ++i) {
      std::mt19937_64 rng(StreamSeed(seed_, static_cast<uint64_t>(indices[i])));
      for (int64_t e = 0; e < size_; ++e) {
        const size_t j = i * static_cast<size_t>(size_) + static_cast<size_t>(e);
        const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
        const int64_t id = in_.ones ? 1 : in_.vocabulary > 0 ? static_cast<int64_t>(u * in_.vocabulary) : 0;
        switch (in_.dtype) {
          case DType::kFloat32:  // ones, or a uniform value of unit variance
            t.Data<float>()[j] = in_.ones ? 1.f : static_cast<float>((u - 0.5) * 3.4641016151377544);
            break;
          case DType::kInt64: t.Data<int64_t>()[j] = id; break;
          case DType::kInt32: t.Data<int32_t>()[j] = static_cast<int32_t>(id); break;
          case DType::kBool: t.Data<uint8_t>()[j] = 1; break;
          default: break;
        }
      }
    }
    return t;
  }

 private:
  SyntheticDataOptions::ExtraInput in_;
  uint64_t seed_;
  int64_t size_ = 1;
};

// Windows of a seeded Markov chain (SyntheticDataOptions::next_tokens): sample i is T + 1
// tokens drawn from (seed, stream, i); the input is the first T, the labels the last T.
class SyntheticTokenSource : public SampleSource {
 public:
  explicit SyntheticTokenSource(const SyntheticDataOptions& o) : o_(o), length_(o.sample_dims.at(0)) {
    std::mt19937_64 rng(StreamSeed(o.seed, 0x70c3));  // the chain: the same for every split
    successors_.resize(static_cast<size_t>(o.vocabulary * kSuccessors));
    for (int64_t& t : successors_) t = static_cast<int64_t>(UniformBelow(rng, static_cast<uint64_t>(o.vocabulary)));
  }
  std::vector<int64_t> SampleDims() const override { return o_.sample_dims; }
  DType InputType() const override { return o_.input_type; }
  HostTensor Inputs(const std::vector<int64_t>& indices, const AugmentOptions*, int64_t, int64_t) const override {
    return Windows(indices, 0, o_.input_type, "input");
  }
  bool MakesLabels() const override { return true; }
  HostTensor Labels(const std::vector<int64_t>& indices, int64_t) const override {
    return Windows(indices, 1, DType::kInt64, "labels");
  }

 private:
  static constexpr int64_t kSuccessors = 4;
  HostTensor Windows(const std::vector<int64_t>& indices, int64_t shift, DType dtype, const char* name) const {
    HostTensor t(dtype, {static_cast<int64_t>(indices.size()), length_}, name);
    for (size_t i = 0; i < indices.size(); ++i) {
      std::mt19937_64 rng(StreamSeed(o_.seed, 0x5eed0 + o_.sample_stream, static_cast<uint64_t>(indices[i])));
      int64_t token = static_cast<int64_t>(UniformBelow(rng, static_cast<uint64_t>(o_.vocabulary)));
      for (int64_t k = 0; k <= length_; ++k) {
        if (k >= shift && k - shift < length_) {
          const size_t at = i * static_cast<size_t>(length_) + static_cast<size_t>(k - shift);
          if (dtype == DType::kInt32) t.Data<int32_t>()[at] = static_cast<int32_t>(token);
          else t.Data<int64_t>()[at] = token;
        }
        const uint64_t u = UniformBelow(rng, 10);  // 7 in 10: the first successor, else one of the others
        const int64_t pick = u < 7 ? 0 : static_cast<int64_t>(u - 6);
        token = successors_[static_cast<size_t>(token * kSuccessors + pick)];
      }
    }
    return t;
  }
  SyntheticDataOptions o_;
  int64_t length_;
  std::vector<int64_t> successors_;
};

// Images with rectangles of classes and their masks (SyntheticDataOptions::dense_classes),
// made from (seed, stream, sample).
class SyntheticSegmentationSource : public SampleSource {
 public:
  explicit SyntheticSegmentationSource(const SyntheticDataOptions& o) : o_(o) {
    std::mt19937_64 rng(StreamSeed(o.seed, 0x5e6));  // the class colours: the same for every split
    colour_.resize(static_cast<size_t>(o.dense_classes * o.channels));
    for (double& c : colour_) c = 4.0 * (static_cast<double>(rng() >> 11) * 0x1.0p-53) - 2.0;
  }
  std::vector<int64_t> SampleDims() const override { return {o_.channels, o_.height, o_.width}; }
  DType InputType() const override { return DType::kFloat32; }
  HostTensor Inputs(const std::vector<int64_t>& indices, const AugmentOptions*, int64_t, int64_t) const override {
    return Make(indices, true);
  }
  bool MakesLabels() const override { return true; }
  HostTensor Labels(const std::vector<int64_t>& indices, int64_t) const override { return Make(indices, false); }

 private:
  HostTensor Make(const std::vector<int64_t>& indices, bool images) const {
    const int64_t n = static_cast<int64_t>(indices.size()), C = o_.channels, H = o_.height, W = o_.width;
    HostTensor t = images ? HostTensor(DType::kFloat32, {n, C, H, W}, "input")
                          : HostTensor(DType::kInt64, {n, H, W}, "labels");
    for (int64_t i = 0; i < n; ++i) {
      std::mt19937_64 rng(StreamSeed(o_.seed, 0x5e60 + o_.sample_stream, static_cast<uint64_t>(indices[static_cast<size_t>(i)])));
      auto below = [&](int64_t k) { return static_cast<int64_t>(UniformBelow(rng, static_cast<uint64_t>(std::max<int64_t>(k, 1)))); };
      std::vector<int64_t> mask(static_cast<size_t>(H * W), 0);
      for (int r = 0; r < 2; ++r) {  // two rectangles of a quarter to a half of each side
        const int64_t cls = 1 + below(o_.dense_classes - 1);
        const int64_t h = std::max<int64_t>(1, H / 4 + below(H / 4 + 1)), w = std::max<int64_t>(1, W / 4 + below(W / 4 + 1));
        const int64_t y0 = below(H - h + 1), x0 = below(W - w + 1);
        for (int64_t y = y0; y < y0 + h; ++y)
          for (int64_t x = x0; x < x0 + w; ++x) mask[static_cast<size_t>(y * W + x)] = cls;
      }
      if (!images) {
        std::copy(mask.begin(), mask.end(), t.Data<int64_t>() + i * H * W);
        continue;
      }
      float* out = t.Data<float>() + i * C * H * W;
      for (int64_t c = 0; c < C; ++c)
        for (int64_t p = 0; p < H * W; ++p) {
          const double noise = 0.5 * (2.0 * (static_cast<double>(rng() >> 11) * 0x1.0p-53) - 1.0);
          const int64_t cls = mask[static_cast<size_t>(p)];
          out[c * H * W + p] = static_cast<float>((cls ? colour_[static_cast<size_t>(cls * C + c)] : 0.0) + noise);
        }
    }
    return t;
  }
  SyntheticDataOptions o_;
  std::vector<double> colour_;
};

ImageDataset MakeSyntheticSamples(const SyntheticDataOptions& o) {
  if (o.next_tokens) {
    OT_CHECK(o.count > 0 && o.sample_dims.size() == 1 && o.vocabulary > 1,
             "synthetic token windows need a count, a sequence length and a vocabulary (got %lld, %s, %lld)",
             (long long)o.count, ShapeString(o.sample_dims).c_str(), (long long)o.vocabulary);
    ImageDataset ds;
    ds.name = "synthetic";
    ds.count = o.count;
    ds.classes = o.vocabulary;
    ds.label_dims = o.sample_dims;
    ds.source = std::make_shared<SyntheticTokenSource>(o);
    ds.notes.push_back(StrFormat("synthetic: %lld windows of %lld tokens below %lld from a Markov chain (4 successors a "
                                 "token, p = 0.7/0.1/0.1/0.1: the loss floor is 0.940 nats a token), labels the next "
                                 "tokens",
                                 (long long)o.count, (long long)o.sample_dims[0], (long long)o.vocabulary));
    return ds;
  }
  OT_CHECK(o.count > 0 && o.classes > 0, "synthetic data needs a positive count and classes (got %lld, %lld)",
           (long long)o.count, (long long)o.classes);
  for (int64_t d : o.sample_dims)
    OT_CHECK(d > 0, "synthetic data needs a fixed positive sample shape, got %s", ShapeString(o.sample_dims).c_str());
  const bool tokens = o.input_type == DType::kInt64 || o.input_type == DType::kInt32;
  OT_CHECK(tokens || o.input_type == DType::kFloat32, "synthetic data feeds float32, int64 or int32 inputs, not %s",
           DTypeName(o.input_type).c_str());
  OT_CHECK(!tokens || o.vocabulary > 0, "synthetic token ids need the vocabulary size (the embedding's rows)");
  ImageDataset ds;
  ds.name = "synthetic";
  ds.count = o.count;
  ds.classes = o.classes;
  ds.labels.resize(static_cast<size_t>(o.count));
  std::mt19937_64 rng(StreamSeed(o.seed, 0x1abe1, o.sample_stream));
  for (int64_t& label : ds.labels) label = static_cast<int64_t>(UniformBelow(rng, static_cast<uint64_t>(o.classes)));
  ds.source = std::make_shared<SyntheticSampleSource>(o, ds.labels);
  ds.notes.push_back(StrFormat("synthetic: %lld samples of %s %s%s", (long long)o.count,
                               DTypeName(o.input_type).c_str(), ShapeString(o.sample_dims).c_str(),
                               tokens ? StrFormat(" (token ids below %lld)", (long long)o.vocabulary).c_str() : ""));
  return ds;
}

}  // namespace

namespace {
ImageDataset MakeSyntheticImages(const SyntheticDataOptions& o);

ImageDataset MakeSyntheticSegmentation(const SyntheticDataOptions& o) {
  OT_CHECK(o.count > 0 && o.channels > 0 && o.height > 1 && o.width > 1,
           "synthetic segmentation data needs a count and an image of at least 2x2 (got %lld, %lldx%lldx%lld)",
           (long long)o.count, (long long)o.channels, (long long)o.height, (long long)o.width);
  ImageDataset ds;
  ds.name = "synthetic";
  ds.count = o.count;
  ds.channels = o.channels, ds.height = o.height, ds.width = o.width;
  ds.classes = o.dense_classes;
  ds.label_dims = {o.height, o.width};
  ds.source = std::make_shared<SyntheticSegmentationSource>(o);
  ds.notes.push_back(StrFormat("synthetic: %lld images %lldx%lldx%lld with masks [N, %lld, %lld]: a background (class 0) "
                               "and two rectangles of classes 1-%lld, each in its class's colour plus noise",
                               (long long)o.count, (long long)o.channels, (long long)o.height, (long long)o.width,
                               (long long)o.height, (long long)o.width, (long long)(o.dense_classes - 1)));
  return ds;
}
}  // namespace

ImageDataset MakeSyntheticDataset(const SyntheticDataOptions& o) {
  if (!o.sample_dims.empty() || !o.extra_inputs.empty() || o.dense_classes > 1) {
    ImageDataset ds = o.dense_classes > 1     ? MakeSyntheticSegmentation(o)
                      : !o.sample_dims.empty() ? MakeSyntheticSamples(o)
                                               : MakeSyntheticImages(o);
    for (size_t k = 0; k < o.extra_inputs.size(); ++k) {
      const SyntheticDataOptions::ExtraInput& in = o.extra_inputs[k];
      ds.extra_inputs.emplace_back(in.name,
                                   std::make_shared<SyntheticExtraSource>(in, StreamSeed(o.seed, 0xe8a + k, o.sample_stream)));
      ds.notes.push_back(StrFormat("synthetic: input '%s' %s %s, %s", in.name.c_str(), DTypeName(in.dtype).c_str(),
                                   ShapeString(in.sample_dims).c_str(),
                                   in.ones ? "all ones (a mask)"
                                   : in.vocabulary > 0 ? StrFormat("ids below %lld", (long long)in.vocabulary).c_str()
                                                       : "uniform noise of unit variance"));
    }
    return ds;
  }
  return MakeSyntheticImages(o);
}

namespace {

ImageDataset MakeSyntheticImages(const SyntheticDataOptions& o) {
  OT_CHECK(o.count > 0 && o.channels > 0 && o.height > 0 && o.width > 0 && o.classes > 0,
           "synthetic data needs positive count, image shape and classes (got %lld images of %lldx%lldx%lld, "
           "%lld classes)",
           (long long)o.count, (long long)o.channels, (long long)o.height, (long long)o.width, (long long)o.classes);
  ImageDataset ds;
  ds.name = "synthetic";
  ds.count = o.count;
  ds.channels = o.channels;
  ds.height = o.height;
  ds.width = o.width;
  ds.classes = o.classes;
  const int64_t C = o.channels, H = o.height, W = o.width, K = o.classes;
  const double kPi = 3.14159265358979323846;

  // The class patterns, from the seed alone. Brightness offsets: channel 0 spreads the
  // classes evenly over [-32, 32] in a shuffled order (so that even one channel separates
  // them), the other channels draw theirs at random. Grating: orientation and period of
  // the class, a random phase offset per channel.
  // Each sample shifts the grating by a random phase of up to +-pi/3.
  std::mt19937_64 pattern_rng(StreamSeed(o.seed, 0xc1a55));
  std::vector<int64_t> order(static_cast<size_t>(K));
  for (int64_t k = 0; k < K; ++k) order[static_cast<size_t>(k)] = k;
  ShuffleInPlace(order, pattern_rng);
  auto unit = [](std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; };  // [0, 1)
  std::vector<double> offset(static_cast<size_t>(K * C)), channel_phase(static_cast<size_t>(K * C));
  std::vector<double> fx(static_cast<size_t>(K)), fy(static_cast<size_t>(K));
  for (int64_t k = 0; k < K; ++k) {
    const double angle = kPi * (static_cast<double>(k) + 0.5 * unit(pattern_rng)) / static_cast<double>(K);
    const double period = 4.0 + 4.0 * static_cast<double>(k % 3);  // 4, 8 or 12 pixels
    fx[static_cast<size_t>(k)] = 2 * kPi * std::cos(angle) / period;
    fy[static_cast<size_t>(k)] = 2 * kPi * std::sin(angle) / period;
    for (int64_t c = 0; c < C; ++c) {
      const size_t kc = static_cast<size_t>(k * C + c);
      offset[kc] = c == 0 ? (K == 1 ? 0.0 : -32.0 + 64.0 * static_cast<double>(order[static_cast<size_t>(k)]) /
                                                         static_cast<double>(K - 1))
                          : -32.0 + 64.0 * unit(pattern_rng);
      channel_phase[kc] = 2 * kPi * unit(pattern_rng);
    }
  }

  // The samples: a label, a phase, then noise, from the sample stream.
  ds.pixels.resize(static_cast<size_t>(ds.count * ds.ImageBytes()));
  ds.labels.resize(static_cast<size_t>(ds.count));
  std::mt19937_64 rng(StreamSeed(o.seed, 0x5eed, o.sample_stream));
  for (int64_t i = 0; i < o.count; ++i) {
    const int64_t k = static_cast<int64_t>(UniformBelow(rng, static_cast<uint64_t>(K)));
    ds.labels[static_cast<size_t>(i)] = k;
    const double phase = kPi / 3 * (2 * unit(rng) - 1);  // a shift of up to a sixth of a period
    uint8_t* img = ds.pixels.data() + i * ds.ImageBytes();
    for (int64_t c = 0; c < C; ++c) {
      const size_t kc = static_cast<size_t>(k * C + c);
      for (int64_t y = 0; y < H; ++y) {
        for (int64_t x = 0; x < W; ++x) {
          const double wave = std::sin(fx[static_cast<size_t>(k)] * static_cast<double>(x) +
                                       fy[static_cast<size_t>(k)] * static_cast<double>(y) + phase +
                                       channel_phase[kc]);
          const double noise = 64.0 * unit(rng) - 32.0;
          const double v = std::min(255.0, std::max(0.0, std::round(128.0 + offset[kc] + 40.0 * wave + noise)));
          img[(c * H + y) * W + x] = static_cast<uint8_t>(v);
        }
      }
    }
  }
  // Mean 128; variance about 32^2/3 (offsets) + 40^2/2 (grating) + 64^2/12 (noise), so a
  // standard deviation near 38/255. Fixed, so that both splits normalise alike.
  ds.mean.assign(static_cast<size_t>(C), 128.0f / 255.0f);
  ds.stddev.assign(static_cast<size_t>(C), 0.15f);
  return ds;
}

}  // namespace

namespace {

ImageDataset LoadSpec(const std::string& spec, const std::string& split, const DataSourceOptions& options) {
  std::string kind = spec, rest;
  auto colon = spec.find(':');
  if (colon != std::string::npos) {
    kind = spec.substr(0, colon);
    rest = spec.substr(colon + 1);
  }
  if (kind == "fashion-mnist" || kind == "mnist") {
    if (rest.empty()) {
      OT_CHECK(kind == "fashion-mnist", "--data mnist needs a folder: mnist:DIR");
      rest = kFashionMnistDir;
    }
    return LoadIdxDataset(kind, rest, split);
  }
  if (kind == "cifar10") {
    OT_CHECK(!rest.empty(),
             "--data cifar10 needs a folder: cifar10:DIR, holding the binary version's data_batch_1.bin .. "
             "data_batch_5.bin and test_batch.bin");
    return ReadCifar10(rest, split);
  }
  if (kind == "synthetic") return LoadSynthetic(spec, rest, split, options.synthetic);
  if (kind == "imagefolder") {
    OT_CHECK(!rest.empty(), "--data imagefolder needs a folder: imagefolder:DIR");
    return LoadImageFolder(rest, split, options);
  }
  if (kind == "npy" || kind == "npz") return LoadNumpyDataset(kind, rest, split, options);
  if (kind == "tokens") return LoadTokenDataset(rest, split, options);
  if (kind == "segmentation") {
    OT_CHECK(!rest.empty(), "--data segmentation needs a folder: segmentation:DIR (images and masks)");
    return LoadSegmentationFolder(rest, split, options);
  }
  throw Error("unknown data set '" + spec +
              "'; use fashion-mnist, fashion-mnist:DIR, mnist:DIR, cifar10:DIR, synthetic[:N[:CxHxW]], "
              "imagefolder:DIR, segmentation:DIR, npy:X.npy,Y.npy, npz:FILE.npz or tokens:TRAIN.bin[,VAL.bin]");
}

}  // namespace

ImageDataset LoadImageDataset(const std::string& spec, const std::string& split, const DataSourceOptions& options) {
  OT_CHECK(split == "train" || split == "test", "unknown split '%s' (train or test)", split.c_str());
  ImageDataset ds = LoadSpec(spec, split, options);
  if (options.model_input) AdaptToModel(ds, *options.model_input, options);
  return ds;
}

std::string ImageDataset::ImageShapeString() const {
  return std::to_string(channels) + "x" + std::to_string(height) + "x" + std::to_string(width);
}

HostTensor ImageDataset::RawImages(const std::vector<int64_t>& indices) const {
  OT_CHECK(!source, "data set %s makes its samples on demand; it has no raw image bytes", name.c_str());
  const int64_t n = static_cast<int64_t>(indices.size()), item = ImageBytes();
  HostTensor t(DType::kUInt8, {n, channels, height, width}, "input");
  uint8_t* out = t.Data<uint8_t>();
  for (int64_t i = 0; i < n; ++i) {
    OT_CHECK(indices[i] >= 0 && indices[i] < count, "sample index %lld is outside the data set (%lld samples)",
             (long long)indices[i], (long long)count);
    std::copy_n(pixels.data() + indices[i] * item, item, out + i * item);
  }
  return t;
}

// One sample's pixels, channel by channel: x * (1 / (255 stddev[c])) - mean[c] / stddev[c].
void ImageDataset::NormalizeSample(const uint8_t* src, float* out) const {
  const int64_t plane = height * width;
  for (int64_t c = 0; c < channels; ++c) {
    const float scale = 1.f / (255.f * stddev[c]), shift = mean[c] / stddev[c];
    NormalizePlane(src + c * plane, out + c * plane, plane, scale, shift);
  }
}

HostTensor ImageDataset::Normalize(const HostTensor& raw) const {
  HostTensor t;
  NormalizeInto(raw, &t);
  t.name = raw.name;
  return t;
}

void ImageDataset::NormalizeInto(const HostTensor& raw, HostTensor* out) const {
  OT_CHECK(raw.dtype == DType::kUInt8 && raw.dims.size() == 4 && raw.dims[1] == channels &&
               raw.dims[2] == height && raw.dims[3] == width,
           "Normalize expects a uint8 batch [n, %lld, %lld, %lld], got %s %s", (long long)channels,
           (long long)height, (long long)width, DTypeName(raw.dtype).c_str(), ShapeString(raw.dims).c_str());
  const int64_t n = raw.dims[0], item = ImageBytes();
  out->Resize(DType::kFloat32, raw.dims);
  const uint8_t* src = raw.Data<uint8_t>();
  float* o = out->Data<float>();
  for (int64_t i = 0; i < n; ++i) NormalizeSample(src + i * item, o + i * item);
}

HostTensor ImageDataset::Images(const std::vector<int64_t>& indices) const {
  HostTensor t;
  ImagesInto(indices, &t);
  return t;
}

void ImageDataset::ImagesInto(const std::vector<int64_t>& indices, HostTensor* out, int threads) const {
  if (source) {
    for (int64_t i : indices)
      OT_CHECK(i >= 0 && i < count, "sample index %lld is outside the data set (%lld samples)", (long long)i,
               (long long)count);
    *out = source->Inputs(indices, nullptr, 0, 0);
    return;
  }
  const int64_t n = static_cast<int64_t>(indices.size()), item = ImageBytes();
  out->Resize(DType::kFloat32, {n, channels, height, width});
  out->name = "input";
  for (int64_t i : indices)
    OT_CHECK(i >= 0 && i < count, "sample index %lld is outside the data set (%lld samples)", (long long)i,
             (long long)count);
  // Shuffled samples are far apart in memory: the rows a few samples ahead are fetched while
  // this one is converted, so that the loop does not wait on each row's first bytes.
  // Each thread takes one contiguous share of the samples.
  constexpr int64_t kAhead = 4, kLine = 64;
  float* o = out->Data<float>();
  // A share is at least 128 samples: below that, waking the team costs more than it saves.
  const int parts = static_cast<int>(std::clamp<int64_t>(threads, 1, std::max<int64_t>(n / 128, 1)));
#pragma omp parallel for num_threads(parts) schedule(static) if (parts > 1)
  for (int part = 0; part < parts; ++part) {
    const int64_t end = n * (part + 1) / parts;
    for (int64_t i = n * part / parts; i < end; ++i) {
      if (i + kAhead < end) {
        const uint8_t* ahead = pixels.data() + indices[i + kAhead] * item;
        for (int64_t b = 0; b < item; b += kLine) __builtin_prefetch(ahead + b);
      }
      NormalizeSample(pixels.data() + indices[i] * item, o + i * item);
    }
  }
}

void ImageDataset::PrefetchImages(const int64_t* indices, int64_t n) const {
  if (source) return;
  constexpr int64_t kLine = 64;
  const int64_t item = ImageBytes();
  for (int64_t i = 0; i < n; ++i) {
    if (indices[i] < 0 || indices[i] >= count) continue;  // ImagesInto reports it
    const uint8_t* row = pixels.data() + indices[i] * item;
    for (int64_t b = 0; b < item; b += kLine) __builtin_prefetch(row + b);
  }
}

HostTensor SampleSource::Labels(const std::vector<int64_t>&, int64_t) const {
  throw Error("this data source keeps its labels in the data set; it does not make them");
}

HostTensor ImageDataset::Labels(const std::vector<int64_t>& indices) const {
  for (int64_t i : indices)
    OT_CHECK(i >= 0 && i < count, "sample index %lld is outside the data set (%lld samples)", (long long)i,
             (long long)count);
  if (source && source->MakesLabels()) return source->Labels(indices, 0);
  std::vector<int64_t> dims = label_dims;
  int64_t per = 1;
  for (int64_t d : label_dims) per *= d;
  dims.insert(dims.begin(), static_cast<int64_t>(indices.size()));
  if (!float_labels.empty()) {
    HostTensor f(DType::kFloat32, dims, "labels");
    for (size_t i = 0; i < indices.size(); ++i)
      std::copy_n(float_labels.data() + indices[i] * per, per, f.Data<float>() + static_cast<int64_t>(i) * per);
    return f;
  }
  HostTensor t(DType::kInt64, dims, "labels");
  for (size_t i = 0; i < indices.size(); ++i)
    std::copy_n(labels.data() + indices[i] * per, per, t.Data<int64_t>() + static_cast<int64_t>(i) * per);
  return t;
}

std::map<std::string, HostTensor> ImageDataset::ExtraInputs(const std::vector<int64_t>& indices) const {
  std::map<std::string, HostTensor> out;
  for (const auto& [name, src] : extra_inputs) {
    HostTensor t = src->Inputs(indices, nullptr, 0, 0);
    t.name = name;
    out.emplace(name, std::move(t));
  }
  return out;
}

}  // namespace ot
