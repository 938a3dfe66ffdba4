// Training-time image augmentation as in the CIFAR-10 recipe: random crop of the image
// padded by zeros on each side (torchvision's RandomCrop(size, padding=4)), then a random
// horizontal flip with probability 1/2. Both are off by default. The random choices of a
// batch come from a generator seeded with (seed, epoch, batch index), drawn sample by
// sample in order, so a batch's result depends on nothing else (not on threads, not on
// which batches were made before).
#pragma once

#include <cstdint>
#include <vector>

#include "graph/host_tensor.h"

namespace ot {

struct AugmentOptions {
  bool random_crop = false;
  int64_t crop_padding = 4;  // pixels of zeros on each side before cropping back to H x W
  bool horizontal_flip = false;
  uint64_t seed = 0;
  // Random erasing (torchvision's RandomErasing(p, scale=(0.02, 0.33), ratio=(0.3, 3.3),
  // value=0)) on the normalised batch: with probability random_erase, a rectangle of each
  // image, all channels, is set to 0. Its own random stream, seeded by (seed, epoch, batch).
  float random_erase = 0.f;
  bool Enabled() const { return random_crop || horizontal_flip; }
};

// The rectangle random erasing sets to 0 in one image (h = w = 0: the image is kept).
struct EraseBox {
  int64_t top = 0, left = 0, h = 0, w = 0;
};

// The boxes of the n images [C, height, width] of a batch, as torchvision draws them:
// erase with probability p; then up to 10 tries of area fraction U(0.02, 0.33) and
// log aspect ratio U(log 0.3, log 3.3), h = round(sqrt(area * ratio)),
// w = round(sqrt(area / ratio)); the first try with h < height and w < width is placed at
// a uniform corner; none fitting keeps the image.
std::vector<EraseBox> DrawEraseBoxes(const AugmentOptions& options, int64_t n, int64_t height, int64_t width,
                                     int64_t epoch, int64_t batch_index);

// Random erasing of a normalised float32 batch [n, C, H, W] in place (nothing when
// options.random_erase is 0).
void EraseBatch(HostTensor& batch, const AugmentOptions& options, int64_t epoch, int64_t batch_index);

// What augmentation does to one sample.
struct SampleAugmentation {
  int64_t dy = 0, dx = 0;  // top-left corner of the crop in the padded image, 0..2*padding
  bool flip = false;
};

// The choices for each of the n samples of a batch (dy = dx = padding when cropping is off,
// so the image stays in place).
std::vector<SampleAugmentation> DrawAugmentations(const AugmentOptions& options, int64_t n, int64_t epoch,
                                                  int64_t batch_index);

// Augments a batch [n, C, H, W] in place; uint8 (before normalisation, as torchvision
// pads PIL images) or float32 (padding is then 0 in the float values).
void AugmentBatch(HostTensor& batch, const AugmentOptions& options, int64_t epoch, int64_t batch_index);

}  // namespace ot
