// Reference model builders (filled in by the models work).
#include "models/reference_models.h"

#include "graph/error.h"

namespace ot {

Model BuildReferenceModel(const std::string& name, const ReferenceModelOptions& options) {
  if (name == "resnet34") return BuildResNet34(options);
  if (name == "simplenn") return BuildSimpleNN(options);
  throw Error("unknown model '" + name + "'; choose resnet34 or simplenn");
}

}  // namespace ot
