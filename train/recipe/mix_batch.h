// Mixup and CutMix on a training batch, as torchvision's reference recipe does them
// (references/classification/transforms.py RandomMixup and RandomCutmix, p = 1, chosen
// with probability 1/2 each by RandomChoice when both are asked for): the batch is paired
// with itself rolled by one sample (sample i with sample i - 1), lambda ~ Beta(alpha, alpha);
// Mixup blends the images lambda : 1 - lambda, CutMix pastes a box of the rolled batch
// (centre uniform over the image, sides sqrt(1 - lambda) of the image's, clipped at the
// border) and sets lambda to the share of the image left. The loss is then
// lambda * CE(labels) + (1 - lambda) * CE(labels rolled), which equals CE against the mixed
// one-hot targets (smoothed first when label smoothing is on) as torchvision's.
//
// The draws of a batch come from a stream seeded by (seed, epoch, batch index), so a resumed
// run draws the same lambdas and boxes.
#pragma once

#include <cstdint>
#include <string>

#include "graph/host_tensor.h"

namespace ot {

struct MixOptions {
  double mixup_alpha = 0;   // 0: no Mixup
  double cutmix_alpha = 0;  // 0: no CutMix
  uint64_t seed = 0;
  bool Enabled() const { return mixup_alpha > 0 || cutmix_alpha > 0; }
};

struct MixDraw {
  bool cutmix = false;
  double lambda = 1;                      // the share of the batch's own sample (and label)
  int64_t y1 = 0, y2 = 0, x1 = 0, x2 = 0;  // CutMix: rows [y1, y2), columns [x1, x2) pasted
};

// The draw for one batch of images H x W (lambda from Beta(alpha, alpha) as the ratio of two
// Marsaglia-Tsang gamma variates on our own uniforms: the same bits on every platform).
MixDraw DrawMix(const MixOptions& options, int64_t height, int64_t width, int64_t epoch, int64_t batch_index);

// Mixes a float32 image batch [n, C, H, W] in place as `draw` says; returns the labels of the
// paired samples (labels rolled by one).
HostTensor MixBatch(HostTensor& images, const HostTensor& labels, const MixDraw& draw);

// The draw as JSON members for the metrics file: ,"mix":"mixup"|"cutmix","mix_lambda":..,"mix_box":[y1,y2,x1,x2]
std::string MixDrawJson(const MixDraw& draw);

}  // namespace ot
