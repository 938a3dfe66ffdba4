// Data set / model shape checks.
#include "train/loader/model_input_check.h"

#include <algorithm>

#include "graph/error.h"

namespace ot {

void CheckImagesFitInput(const ValueInfo& input, const std::string& dataset_name, int64_t channels,
                         int64_t height, int64_t width) {
  const std::string images = std::to_string(channels) + "x" + std::to_string(height) + "x" + std::to_string(width);
  OT_CHECK(input.dtype == DType::kUndefined || input.dtype == DType::kFloat32,
           "data set %s has float images but the model's input '%s' expects %s", dataset_name.c_str(),
           input.name.c_str(), DTypeName(input.dtype).c_str());
  if (!input.has_shape) return;
  const int64_t wanted[3] = {channels, height, width};
  bool fits = input.dims.size() == 4;
  for (size_t i = 1; fits && i < 4; ++i) fits = !input.dims[i].IsStatic() || input.dims[i].value == wanted[i - 1];
  OT_CHECK(fits, "data set %s has images %s but the model's input '%s' expects %s", dataset_name.c_str(),
           images.c_str(), input.name.c_str(), input.ShapeString().c_str());
}

void CheckDataFitsInput(const ValueInfo& input, const ImageDataset& data) {
  if (!data.source) return CheckImagesFitInput(input, data.name, data.channels, data.height, data.width);
  const std::vector<int64_t> dims = data.source->SampleDims();
  const DType type = data.source->InputType();
  std::string sample = DTypeName(type) + " [";
  for (size_t i = 0; i < dims.size(); ++i) sample += (i ? ", " : "") + std::to_string(dims[i]);
  sample += "]";
  OT_CHECK(input.dtype == DType::kUndefined || input.dtype == type,
           "data set %s has samples of %s but the model's input '%s' is %s %s", data.name.c_str(), sample.c_str(),
           input.name.c_str(), DTypeName(input.dtype).c_str(), input.ShapeString().c_str());
  if (!input.has_shape) return;
  bool fits = input.dims.size() == dims.size() + 1;
  for (size_t i = 1; fits && i < input.dims.size(); ++i)
    fits = !input.dims[i].IsStatic() || input.dims[i].value == dims[i - 1];
  OT_CHECK(fits, "data set %s has samples of %s but the model's input '%s' expects %s", data.name.c_str(),
           sample.c_str(), input.name.c_str(), input.ShapeString().c_str());
}

void CheckClassesFitOutput(const ValueInfo& scores, const std::string& dataset_name, int64_t classes) {
  if (!scores.has_shape) return;
  bool unit_trailing = scores.dims.size() >= 2;  // [batch, classes, 1, 1] too (a 1x1-conv head)
  for (size_t d = 2; d < scores.dims.size(); ++d)
    unit_trailing = unit_trailing && scores.dims[d].IsStatic() && scores.dims[d].value == 1;
  OT_CHECK(unit_trailing, "the model's output '%s' should be class scores [batch, classes], it is %s",
           scores.name.c_str(), scores.ShapeString().c_str());
  const Dim& k = scores.dims[1];
  OT_CHECK(!k.IsStatic() || k.value >= classes,
           "data set %s has %lld classes but the model's output '%s' scores only %lld (%s)", dataset_name.c_str(),
           (long long)classes, scores.name.c_str(), (long long)k.value, scores.ShapeString().c_str());
}

void CheckLabelsFitOutput(const ValueInfo& scores, const ImageDataset& data) {
  if (!data.float_labels.empty()) return;  // float targets: the loss checks them against the output (CheckLabelsFit)
  if (data.label_dims.empty()) return CheckClassesFitOutput(scores, data.name, data.classes);
  if (!scores.has_shape) return;
  std::string labels = "[N";
  for (int64_t d : data.label_dims) labels += ", " + std::to_string(d);
  labels += "]";
  // Labels [N, d1...] fit scores [N, d1..., V] (classes last, a language model's) or
  // [N, C, d1...] (classes on axis 1, a segmentation net's or a Conv1d's).
  const size_t k = data.label_dims.size();
  auto fits_at = [&](size_t offset) {
    if (scores.dims.size() != k + 2) return false;
    for (size_t i = 0; i < k; ++i) {
      const Dim& d = scores.dims[offset + i];
      if (d.IsStatic() && d.value != data.label_dims[i]) return false;
    }
    return true;
  };
  const bool last = fits_at(1), first = fits_at(2);
  OT_CHECK(last || first,
           "data set %s has labels %s per batch but the model's output '%s' is %s; per-position labels [N, d...] need "
           "scores [N, d..., V] (classes last, as a language model writes them) or [N, C, d...] (classes on axis 1, "
           "as a segmentation net does)%s",
           data.name.c_str(), labels.c_str(), scores.name.c_str(), scores.ShapeString().c_str(),
           k == 1 ? "; for token windows the model's length must be the --seq-len" : "");
  if (last && !first) {
    const Dim& v = scores.dims.back();
    OT_CHECK(data.classes <= 0 || !v.IsStatic() || v.value >= data.classes,
             "data set %s has token ids below %lld but the model's output '%s' (%s) scores only %lld",
             data.name.c_str(), (long long)data.classes, scores.name.c_str(), scores.ShapeString().c_str(),
             (long long)v.value);
  }
}

void CheckEveryInputFed(const Model& model, const ImageDataset& data, const std::string& spec) {
  for (size_t i = 1; i < model.graph.inputs.size(); ++i) {
    const std::string& name = model.graph.inputs[i].name;
    OT_CHECK(std::any_of(data.extra_inputs.begin(), data.extra_inputs.end(),
                         [&](const auto& e) { return e.first == name; }),
             "the model's input '%s' gets no data from --data %s; give an npz with an array per input (input_ids, "
             "attention_mask, ..., and y), or --input-map %s=ARRAY",
             name.c_str(), spec.c_str(), name.c_str());
  }
}

bool IsImageInput(const ValueInfo& input) {
  bool fixed = input.has_shape && input.dims.size() == 4;
  for (size_t i = 1; fixed && i < 4; ++i) fixed = input.dims[i].IsStatic() && input.dims[i].value > 0;
  return fixed;
}

std::vector<int64_t> ImageShapeOfInput(const ValueInfo& input) {
  OT_CHECK(IsImageInput(input), "the model's input '%s' is %s; images need a fixed shape [batch, C, H, W]", input.name.c_str(),
           input.ShapeString().c_str());
  return {input.dims[1].value, input.dims[2].value, input.dims[3].value};
}

}  // namespace ot
