// Image classification data sets held in memory as bytes (N x C x H x W) plus labels,
// with the per-channel normalisation that the recipes use.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/host_tensor.h"

namespace ot {

struct ImageDataset {
  std::string name;      // "fashion-mnist", "mnist"
  int64_t count = 0;
  int64_t channels = 0, height = 0, width = 0;
  int64_t classes = 0;
  std::vector<uint8_t> pixels;   // count*C*H*W
  std::vector<int64_t> labels;   // count
  std::vector<float> mean, stddev;  // per channel, on the [0,1] scale

  // Normalised float batch [n, C, H, W] of samples indices[0..n).
  HostTensor Images(const std::vector<int64_t>& indices) const;
  // int64 labels [n].
  HostTensor Labels(const std::vector<int64_t>& indices) const;
};

// Parses a data spec ("fashion-mnist", "mnist:DIR", "fashion-mnist:DIR") and loads a split
// ("train" or "test"). Throws ot::Error naming the missing or malformed file.
ImageDataset LoadImageDataset(const std::string& spec, const std::string& split);

// Where Debian's dataset-fashion-mnist puts its files.
constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

}  // namespace ot
