// The data-source options that make a data spec fit a given model: synthetic data takes
// the model's image input shape and its number of classes. train and eval both use it, so
// that `eval --data synthetic` feeds a model what `train --data synthetic` fed it.
#pragma once

#include <cstdint>
#include <string>

#include "graph/ir.h"
#include "train/image_dataset.h"

namespace ot {

// Options for LoadImageDataset(spec, split, options) with `model` (one image input
// [batch, C, H, W], class scores [batch, K] as its first output). Throws ot::Error naming the
// input when synthetic data is asked for and the input's C, H, W are not static.
DataSourceOptions DataSourceForModel(const Model& model, const std::string& spec, uint64_t seed);

}  // namespace ot
