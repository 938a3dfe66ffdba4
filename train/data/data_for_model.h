// The data-source options that make a data spec fit a given model: data of another shape
// is adapted to the model's input, synthetic data takes its shape and class count. train and eval both use it, so
// that `eval --data synthetic` feeds a model what `train --data synthetic` fed it.
#pragma once

#include <cstdint>
#include <string>

#include "graph/ir.h"
#include "train/data/image_dataset.h"

namespace ot {

// `flags` (transforms, workers, ... from the command line) completed for `model` (one data
// input, class scores [batch, K] as its first output): its input (which must outlive the
// options) and class count, the seed, and for synthetic data the input's C x H x W. Throws
// ot::Error naming the input when synthetic data is asked for and C, H, W are not static.
DataSourceOptions DataSourceForModel(const Model& model, const std::string& spec, uint64_t seed,
                                     DataSourceOptions flags = {});

}  // namespace ot
