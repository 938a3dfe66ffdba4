// Data-source options fitted to a model.
#include "train/data_for_model.h"

#include "train/model_input_check.h"

namespace ot {

DataSourceOptions DataSourceForModel(const Model& model, const std::string& spec, uint64_t seed) {
  DataSourceOptions source;
  if (spec.rfind("synthetic", 0) != 0 || model.graph.inputs.empty()) return source;
  std::vector<int64_t> chw = ImageShapeOfInput(model.graph.inputs[0]);
  source.synthetic.channels = chw[0];
  source.synthetic.height = chw[1];
  source.synthetic.width = chw[2];
  source.synthetic.seed = seed;
  if (!model.graph.outputs.empty()) {
    const ValueInfo& out = model.graph.outputs[0];
    if (out.has_shape && out.dims.size() == 2 && out.dims[1].IsStatic()) source.synthetic.classes = out.dims[1].value;
  }
  return source;
}

}  // namespace ot
