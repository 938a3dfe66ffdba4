// Data-source options fitted to a model.
#include "train/data_for_model.h"

#include <utility>

#include "train/model_input_check.h"

namespace ot {

DataSourceOptions DataSourceForModel(const Model& model, const std::string& spec, uint64_t seed,
                                     DataSourceOptions flags) {
  DataSourceOptions source = std::move(flags);
  source.seed = seed;
  if (model.graph.inputs.empty()) return source;
  source.model_input = &model.graph.inputs[0];
  if (!model.graph.outputs.empty()) {
    const ValueInfo& out = model.graph.outputs[0];
    if (out.has_shape && out.dims.size() == 2 && out.dims[1].IsStatic()) source.model_classes = out.dims[1].value;
  }
  if (spec.rfind("synthetic", 0) == 0) {  // synthetic data takes the model's shape
    std::vector<int64_t> chw = ImageShapeOfInput(model.graph.inputs[0]);
    source.synthetic.channels = chw[0];
    source.synthetic.height = chw[1];
    source.synthetic.width = chw[2];
    source.synthetic.seed = seed;
    if (source.model_classes > 0) source.synthetic.classes = source.model_classes;
  }
  return source;
}

}  // namespace ot
