// Checks that a data set can feed a model: its images fit the model's image input
// [batch, C, H, W] (any batch dimension, static or symbolic), and its labels fit the
// model's class scores. Errors name both shapes, so the user sees what to change.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "train/data/image_dataset.h"

namespace ot {

// Throws ot::Error unless images of channels x height x width (float32) fit `input`. An
// input without a shape, or with symbolic C/H/W, accepts any size there.
void CheckImagesFitInput(const ValueInfo& input, const std::string& dataset_name, int64_t channels,
                         int64_t height, int64_t width);

// Throws ot::Error unless the data set's samples (images of data.channels x height x width,
// or those a SampleSource makes) fit `input`, in shape and element type.
void CheckDataFitsInput(const ValueInfo& input, const ImageDataset& data);

// Throws ot::Error naming the input unless every model input after the first gets an array
// of the data set (ImageDataset::extra_inputs); `spec` is the --data given.
void CheckEveryInputFed(const Model& model, const ImageDataset& data, const std::string& spec);
// Throws ot::Error when `scores` ([batch, K] logits) has a static K below `classes`.
void CheckClassesFitOutput(const ValueInfo& scores, const std::string& dataset_name, int64_t classes);

// CheckClassesFitOutput for one class index per sample; for per-token labels [N, T] (token
// windows, npz y [N, T]) the scores must be [N, T, V] (classes last, as the per-token
// cross-entropy reads them), with a static V not below data.classes (the embedding's rows,
// when known).
void CheckLabelsFitOutput(const ValueInfo& scores, const ImageDataset& data);

// Whether the input is an image [batch, C, H, W] whose last three dimensions are static.
bool IsImageInput(const ValueInfo& input);
// {C, H, W} of such an image input (to make synthetic data for any model); throws
// ot::Error naming the input otherwise.
std::vector<int64_t> ImageShapeOfInput(const ValueInfo& input);

}  // namespace ot
