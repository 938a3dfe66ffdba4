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
  bool Enabled() const { return random_crop || horizontal_flip; }
};

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
