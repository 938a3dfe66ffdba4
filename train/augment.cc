// Random crop with zero padding and horizontal flip on image batches.
#include "train/augment.h"

#include <random>
#include <vector>

#include "graph/error.h"
#include "train/data_random.h"

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

}  // namespace ot
