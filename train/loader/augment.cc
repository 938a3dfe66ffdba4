// Random crop with zero padding and horizontal flip on image batches.
#include "train/loader/augment.h"

#include <cmath>
#include <algorithm>
#include <random>
#include <vector>

#include "graph/error.h"
#include "train/readers/data_random.h"

namespace ot {

namespace {

// out[y][x] = in[y + dy - pad][x' + dx - pad] with x' = W-1-x when flipped, else x; zero
// where that falls outside the image. One sample, all channels.
template <typename T>
void AugmentSample(T* image, int64_t channels, int64_t h, int64_t w, int64_t pad, const SampleAugmentation& a,
                   std::vector<T>& scratch) {
  const int64_t plane = h * w;
  for (int64_t c = 0; c < channels; ++c) {
    T* img = image + c * plane;
    scratch.assign(img, img + plane);
    for (int64_t y = 0; y < h; ++y) {
      const int64_t sy = y + a.dy - pad;
      for (int64_t x = 0; x < w; ++x) {
        const int64_t sx = (a.flip ? w - 1 - x : x) + a.dx - pad;
        img[y * w + x] = (sy >= 0 && sy < h && sx >= 0 && sx < w) ? scratch[sy * w + sx] : T(0);
      }
    }
  }
}

template <typename T>
void AugmentTyped(HostTensor& batch, const AugmentOptions& options, int64_t epoch, int64_t batch_index) {
  const int64_t n = batch.dims[0], c = batch.dims[1], h = batch.dims[2], w = batch.dims[3];
  const std::vector<SampleAugmentation> choices = DrawAugmentations(options, n, epoch, batch_index);
  std::vector<T> scratch;
  for (int64_t i = 0; i < n; ++i)
    AugmentSample(batch.Data<T>() + i * c * h * w, c, h, w, options.crop_padding, choices[static_cast<size_t>(i)],
                  scratch);
}

}  // namespace

std::vector<SampleAugmentation> DrawAugmentations(const AugmentOptions& options, int64_t n, int64_t epoch,
                                                  int64_t batch_index) {
  OT_CHECK(options.crop_padding >= 0, "crop padding %lld must not be negative", (long long)options.crop_padding);
  std::mt19937_64 rng(StreamSeed(options.seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(batch_index)));
  const int64_t pad = options.crop_padding;
  std::vector<SampleAugmentation> out(static_cast<size_t>(n));
  for (SampleAugmentation& a : out) {
    a.dy = a.dx = pad;
    if (options.random_crop) {
      a.dy = static_cast<int64_t>(UniformBelow(rng, static_cast<uint64_t>(2 * pad + 1)));
      a.dx = static_cast<int64_t>(UniformBelow(rng, static_cast<uint64_t>(2 * pad + 1)));
    }
    if (options.horizontal_flip) a.flip = UniformBelow(rng, 2) == 1;
  }
  return out;
}

void AugmentBatch(HostTensor& batch, const AugmentOptions& options, int64_t epoch, int64_t batch_index) {
  if (!options.Enabled()) return;
  OT_CHECK(batch.dims.size() == 4, "augmentation needs an image batch [n, C, H, W], got %s",
           ShapeString(batch.dims).c_str());
  if (batch.dtype == DType::kUInt8) return AugmentTyped<uint8_t>(batch, options, epoch, batch_index);
  if (batch.dtype == DType::kFloat32) return AugmentTyped<float>(batch, options, epoch, batch_index);
  throw Error("augmentation supports uint8 and float image batches, not " + DTypeName(batch.dtype));
}

std::vector<EraseBox> DrawEraseBoxes(const AugmentOptions& options, int64_t n, int64_t height, int64_t width,
                                     int64_t epoch, int64_t batch_index) {
  OT_CHECK(options.random_erase >= 0.f && options.random_erase <= 1.f,
           "random erasing probability %g is outside [0, 1]", options.random_erase);
  // A stream apart from the crop and flip draws (their stream is (seed, epoch, batch)).
  std::mt19937_64 rng(StreamSeed(MixBits(options.seed ^ 0x7261736555ull), static_cast<uint64_t>(epoch),
                                 static_cast<uint64_t>(batch_index)));
  auto uniform = [&rng] { return static_cast<double>(rng() >> 11) * 0x1.0p-53; };  // [0, 1), platform-independent
  std::vector<EraseBox> out(static_cast<size_t>(n));
  const double area = static_cast<double>(height * width);
  const double log_lo = std::log(0.3), log_hi = std::log(3.3);
  for (EraseBox& box : out) {
    if (!(uniform() < options.random_erase)) continue;
    for (int attempt = 0; attempt < 10; ++attempt) {
      const double erase_area = area * (0.02 + (0.33 - 0.02) * uniform());
      const double ratio = std::exp(log_lo + (log_hi - log_lo) * uniform());
      const int64_t h = std::llround(std::sqrt(erase_area * ratio));
      const int64_t w = std::llround(std::sqrt(erase_area / ratio));
      if (!(h < height && w < width)) continue;
      box.top = static_cast<int64_t>(UniformBelow(rng, static_cast<uint64_t>(height - h + 1)));
      box.left = static_cast<int64_t>(UniformBelow(rng, static_cast<uint64_t>(width - w + 1)));
      box.h = h;
      box.w = w;
      break;
    }
  }
  return out;
}

void EraseBatch(HostTensor& batch, const AugmentOptions& options, int64_t epoch, int64_t batch_index) {
  if (options.random_erase <= 0.f) return;
  OT_CHECK(batch.dims.size() == 4 && batch.dtype == DType::kFloat32,
           "random erasing needs a float image batch [n, C, H, W], got %s %s; leave out --random-erase for this data",
           DTypeName(batch.dtype).c_str(), ShapeString(batch.dims).c_str());
  const int64_t n = batch.dims[0], c = batch.dims[1], h = batch.dims[2], w = batch.dims[3];
  const std::vector<EraseBox> boxes = DrawEraseBoxes(options, n, h, w, epoch, batch_index);
  float* data = batch.Data<float>();
  for (int64_t i = 0; i < n; ++i) {
    const EraseBox& b = boxes[static_cast<size_t>(i)];
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t y = b.top; y < b.top + b.h; ++y)
        std::fill_n(data + ((i * c + ch) * h + y) * w + b.left, b.w, 0.f);
  }
}

}  // namespace ot
