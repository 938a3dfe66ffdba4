// Making exported models ready to train (see exported_model.h).
#include "train/recipe/exported_model.h"

#include <cstdlib>
#include <filesystem>

#include "graph/exports/batch_dim.h"
#include "graph/exports/batch_norm_form.h"
#include "graph/exports/class_head.h"
#include "graph/exports/merged_initializers.h"
#include "graph/error.h"
#include "runtime/executor/executor.h"
#include "train/data/image_folder.h"

namespace ot {

namespace {

// Whether `model` (leading dimension made symbolic) runs a batch of `batch` samples and
// answers with `batch` rows: a node holding the old batch as a constant fails or answers
// with the old number.
bool RunsWithBatch(const Model& model, int64_t batch) {
  const ValueInfo& in = model.graph.inputs[0];
  std::vector<int64_t> dims = {batch};
  for (size_t d = 1; d < in.dims.size(); ++d) {
    if (!in.dims[d].IsStatic()) return true;  // cannot make a probe; trust the symbolic batch
    dims.push_back(in.dims[d].value);
  }
  const DType dtype = in.dtype == DType::kUndefined ? DType::kFloat32 : in.dtype;
  try {
    Executor exec(model);
    std::vector<Tensor> out = exec.Run({{in.name, Tensor::FromHost(HostTensor(dtype, dims))}});
    return !out.empty() && !out[0].shape().empty() && out[0].shape()[0] == batch;
  } catch (const std::exception&) {
    return false;
  }
}

// Parameters that PyTorch 2.x's optimizing dynamo exporter transformed into new
// initializers (val_<n>: a Linear weight transposed, an LSTM's biases combined): they train
// as they are, but their names match no module parameter. One line saying so, or "".
std::string FoldedParametersNote(const Model& model) {
  if (model.producer_name != "pytorch") return "";
  std::vector<std::string> folded;
  for (const auto& t : model.graph.initializers)
    if (t.dtype == DType::kFloat32 && t.NumElements() > 1 && t.name.rfind("val_", 0) == 0 &&
        t.name.find_first_not_of("0123456789", 4) == std::string::npos && t.name.size() > 4)
      folded.push_back(t.name);
  if (folded.empty()) return "";
  return StrFormat("%zu parameter tensor%s (%s) %s transformed by PyTorch's dynamo exporter into new "
                   "initializers (e.g. a Linear weight transposed); %s, but the checkpoint's %s will not load back "
                   "into the PyTorch module by name: export with torch.onnx.export(..., optimize=False) to keep "
                   "every parameter's name",
                   folded.size(), folded.size() == 1 ? "" : "s", FirstNames(folded).c_str(),
                   folded.size() == 1 ? "was" : "were", folded.size() == 1 ? "it trains" : "they train",
                   folded.size() == 1 ? "copy" : "copies");
}

}  // namespace

PreparedModel PrepareExportedModel(const Model& model, const ExportedModelOptions& o) {
  PreparedModel p;
  p.model = model;
  const int64_t fixed = FixedBatchSize(model);
  if (fixed > 0 && model.graph.inputs.size() == 1) {
    const std::string input = model.graph.inputs[0].name;
    std::vector<std::string> holders = NodesHoldingBatch(model, fixed);
    // Reshape targets holding the batch (x.view(1, -1)) can take it from their input instead.
    Model freed = model;
    std::vector<std::string> rewritten;
    if (!holders.empty()) {
      rewritten = FreeReshapesOfBatch(freed, fixed);
      holders = NodesHoldingBatch(freed, fixed);
    }
    Model rebound;
    bool ok = false;
    if (holders.empty()) {
      rebound = WithSymbolicBatch(freed, fixed);
      ok = RunsWithBatch(rebound, fixed + 1);
    }
    if (ok) {
      p.model = std::move(rebound);
      p.notes.insert(p.notes.end(), rewritten.begin(), rewritten.end());
      p.notes.push_back(StrFormat("the model was exported with batch fixed at %lld; running it with any batch (its "
                                  "batch dimension is now symbolic)",
                                  (long long)fixed));
    } else {
      const std::string why = holders.empty() ? std::string("it does not run with another batch")
                                              : holders[0] + " holds the batch as a constant";
      OT_CHECK(o.batch == 0 || o.batch == fixed,
               "the model was exported with batch fixed at %lld; export with dynamic_axes={'%s': {0: 'N'}} or use "
               "--batch %lld (%s)",
               (long long)fixed, input.c_str(), (long long)fixed, why.c_str());
      p.fixed_batch = fixed;
      p.notes.push_back(StrFormat("the model was exported with batch fixed at %lld (%s): every batch, evaluation "
                                  "included, has %lld samples",
                                  (long long)fixed, why.c_str(), (long long)fixed));
    }
  }
  if (o.num_classes > 0) p.notes.push_back(ReplaceClassifier(p.model, o.num_classes, o.seed));
  if (o.training) {
    const std::string merged = SeparateMergedInitializers(p.model).Describe();
    if (!merged.empty()) p.notes.push_back(merged);
    BatchNormFormReport r = o.frozen_bn ? FreezeBatchNorm(p.model) : UseTrainingFormBatchNorm(p.model);
    p.freeze = r.frozen_statistics;
    const std::string line = r.Describe();
    if (!line.empty()) p.notes.push_back(line);
    const std::string folded = FoldedParametersNote(p.model);
    if (!folded.empty()) p.notes.push_back(folded);
    // A final Softmax/LogSoftmax: the loss reads the scores before it (graph/autodiff/autodiff.cc).
    const Graph& g = p.model.graph;
    const bool ends_in_loss = !g.outputs.empty() && g.outputs[0].has_shape && g.outputs[0].dims.empty();
    const ValueInfo* scores = g.outputs.empty() ? nullptr : &g.outputs[0];
    const bool per_token = scores && o.logits_output.empty() && ScoresHaveClassesLast(p.model, *scores);
    if (!g.outputs.empty() && !ends_in_loss && o.class_scores && !per_token) {
      const std::string head =
          DescribeClassHead(p.model, FindClassHead(p.model, o.logits_output.empty() ? g.outputs[0].name : o.logits_output));
      if (!head.empty()) p.notes.push_back(head);
    }
  }
  return p;
}

int64_t ParseNumClasses(const std::string& value, const std::string& data_spec) {
  if (value == "auto") {
    const size_t colon = data_spec.find(':');
    const std::string kind = data_spec.substr(0, colon);
    const std::string dir = colon == std::string::npos ? "" : data_spec.substr(colon + 1);
    if (kind == "fashion-mnist" || kind == "mnist" || kind == "cifar10") return 10;
    OT_CHECK(kind == "imagefolder" && !dir.empty(),
             "--num-classes auto takes the class count from an image folder, fashion-mnist, mnist or cifar10 (--data), "
             "not from %s; give the number: --num-classes K",
             data_spec.empty() ? "this command, which reads no data" : ("'" + data_spec + "'").c_str());
    const std::string root = std::filesystem::is_directory(dir + "/train") ? dir + "/train" : dir;
    return static_cast<int64_t>(ScanImageFolder(root).classes.size());
  }
  char* end = nullptr;
  const long long k = std::strtoll(value.c_str(), &end, 10);
  OT_CHECK(!value.empty() && end && *end == '\0' && k >= 2,
           "--num-classes takes a class count of at least 2 or auto, not '%s'", value.c_str());
  return k;
}

}  // namespace ot
