// Data-source options fitted to a model.
#include "train/data/data_for_model.h"

#include <algorithm>
#include <cctype>
#include <utility>

#include "graph/error.h"
#include "graph/exports/class_head.h"
#include "train/loader/model_input_check.h"

namespace ot {

namespace {

// The rows of the embedding table that integer input `name` indexes: the first dim of the
// initializer a Gather (axis 0) reads with it, directly or through a Cast; 0 when none does.
int64_t VocabularyOf(const Graph& g, const std::string& name, std::string* table_name = nullptr) {
  std::vector<std::string> ids = {name};
  for (const Node& n : g.nodes)
    if (n.op_type == "Cast" && n.inputs.size() == 1 && n.inputs[0] == name && !n.outputs.empty())
      ids.push_back(n.outputs[0]);
  for (const Node& n : g.nodes) {
    if (n.op_type != "Gather" || n.inputs.size() != 2 || n.GetInt("axis", 0) != 0) continue;
    if (std::find(ids.begin(), ids.end(), n.inputs[1]) == ids.end()) continue;
    if (const HostTensor* table = g.FindInitializer(n.inputs[0]))
      if (!table->dims.empty() && table->dims[0] > 0) {
        if (table_name) *table_name = n.inputs[0];
        return table->dims[0];
      }
  }
  return 0;
}

}  // namespace

DataSourceOptions DataSourceForModel(const Model& model, const std::string& spec, uint64_t seed,
                                     DataSourceOptions flags) {
  DataSourceOptions source = std::move(flags);
  source.seed = seed;
  if (model.graph.inputs.empty()) return source;
  source.model_input = &model.graph.inputs[0];
  for (const ValueInfo& in : model.graph.inputs) source.model_inputs.push_back(&in);
  if (!model.graph.outputs.empty()) {
    const ValueInfo& out = model.graph.outputs[0];
    if (out.has_shape && out.dims.size() == 2 && out.dims[1].IsStatic()) source.model_classes = out.dims[1].value;
  }
  if (spec.rfind("tokens:", 0) == 0) {
    // Token windows: T from the model's input [N, T] when --seq-len is not given; ids
    // checked against the embedding's rows when the model shows its table.
    const ValueInfo& input = model.graph.inputs[0];
    OT_CHECK(input.dtype == DType::kInt64 || input.dtype == DType::kInt32 || input.dtype == DType::kUndefined,
             "--data %s feeds token ids, but the model's input '%s' is %s; a language model takes int64 token ids "
             "[N, T]",
             spec.c_str(), input.name.c_str(), DTypeName(input.dtype).c_str());
    if (source.token_seq_len <= 0 && input.has_shape && input.dims.size() == 2 && input.dims[1].IsStatic() &&
        input.dims[1].value > 0)
      source.token_seq_len = input.dims[1].value;
    OT_CHECK(source.token_seq_len > 0,
             "--data %s needs --seq-len T: the model's input '%s' is %s, with no fixed sequence length to take",
             spec.c_str(), input.name.c_str(), input.ShapeString().c_str());
    std::string table;
    source.token_vocabulary = VocabularyOf(model.graph, input.name, &table);
    if (source.token_vocabulary > 0)
      source.token_vocabulary_source = "the embedding '" + table + "'";
    source.model_classes = 0;
  } else if (spec.rfind("synthetic", 0) == 0 && !IsImageInput(model.graph.inputs[0])) {
    // Not an image: samples of the input's own fixed shape and element type.
    const ValueInfo& input = model.graph.inputs[0];
    bool fixed = input.has_shape && input.dims.size() >= 2;
    for (size_t i = 1; fixed && i < input.dims.size(); ++i) fixed = input.dims[i].IsStatic() && input.dims[i].value > 0;
    OT_CHECK(fixed, "the model's input '%s' is %s; synthetic data needs a fixed shape after the batch dimension",
             input.name.c_str(), input.ShapeString().c_str());
    auto& s = source.synthetic;
    for (size_t i = 1; i < input.dims.size(); ++i) s.sample_dims.push_back(input.dims[i].value);
    s.input_type = input.dtype == DType::kUndefined ? DType::kFloat32 : input.dtype;
    if (s.input_type == DType::kInt64 || s.input_type == DType::kInt32) {
      s.vocabulary = VocabularyOf(model.graph, input.name);
      OT_CHECK(s.vocabulary > 0,
               "the model's input '%s' holds %s token ids but feeds no embedding table (a Gather of an initializer), "
               "so synthetic data cannot tell their range; train it on --data npz:FILE.npz",
               input.name.c_str(), DTypeName(s.input_type).c_str());
    }
    s.seed = seed;
    if (source.model_classes > 0) s.classes = source.model_classes;
    // A language model: ids [N, T] in, per-token scores [N, T, V] (classes last) out.
    const ValueInfo* out = model.graph.outputs.empty() ? nullptr : &model.graph.outputs[0];
    if (s.vocabulary > 0 && s.sample_dims.size() == 1 && out && out->has_shape && out->dims.size() == 3 &&
        out->dims[1].IsStatic() && out->dims[1].value == s.sample_dims[0] && ScoresHaveClassesLast(model, *out)) {
      s.next_tokens = true;
      if (out->dims[2].IsStatic()) s.vocabulary = std::min(s.vocabulary, out->dims[2].value);
    }
  } else if (spec.rfind("synthetic", 0) == 0) {  // synthetic images take the model's shape
    std::vector<int64_t> chw = ImageShapeOfInput(model.graph.inputs[0]);
    source.synthetic.channels = chw[0];
    source.synthetic.height = chw[1];
    source.synthetic.width = chw[2];
    source.synthetic.seed = seed;
    if (source.model_classes > 0) source.synthetic.classes = source.model_classes;
    // A segmentation net: scores [N, K, H, W] of the image's H x W (classes on axis 1).
    const ValueInfo* out = model.graph.outputs.empty() ? nullptr : &model.graph.outputs[0];
    if (out && out->has_shape && out->dims.size() == 4 && out->dims[1].IsStatic() && out->dims[1].value > 1 &&
        out->dims[2].IsStatic() && out->dims[2].value == chw[1] && out->dims[3].IsStatic() && out->dims[3].value == chw[2])
      source.synthetic.dense_classes = out->dims[1].value;
  }
  if (spec.rfind("synthetic", 0) == 0)  // every further input gets data of its own shape and type
    for (size_t k = 1; k < model.graph.inputs.size(); ++k) {
      const ValueInfo& in = model.graph.inputs[k];
      SyntheticDataOptions::ExtraInput extra;
      extra.name = in.name;
      bool fixed = in.has_shape && !in.dims.empty();
      for (size_t i = 1; fixed && i < in.dims.size(); ++i) fixed = in.dims[i].IsStatic() && in.dims[i].value > 0;
      OT_CHECK(fixed, "the model's input '%s' is %s; synthetic data needs a fixed shape after the batch dimension "
               "(export with a fixed sequence length, or train on --data npz:FILE.npz with an array per input)",
               in.name.c_str(), in.ShapeString().c_str());
      for (size_t i = 1; i < in.dims.size(); ++i) extra.sample_dims.push_back(in.dims[i].value);
      extra.dtype = in.dtype == DType::kUndefined ? DType::kFloat32 : in.dtype;
      std::string lower = in.name;
      for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      extra.ones = lower.find("mask") != std::string::npos || extra.dtype == DType::kBool;
      const bool integer = extra.dtype == DType::kInt64 || extra.dtype == DType::kInt32;
      OT_CHECK(integer || extra.dtype == DType::kFloat32 || extra.dtype == DType::kBool,
               "the model's input '%s' is %s; synthetic data feeds float32, int64, int32 and bool inputs",
               in.name.c_str(), DTypeName(extra.dtype).c_str());
      if (integer && !extra.ones) {
        extra.vocabulary = VocabularyOf(model.graph, in.name);
        OT_CHECK(extra.vocabulary > 0,
                 "the model's input '%s' holds %s ids but feeds no embedding table (a Gather of an initializer), so "
                 "synthetic data cannot tell their range; train it on --data npz:FILE.npz",
                 in.name.c_str(), DTypeName(extra.dtype).c_str());
      }
      source.synthetic.extra_inputs.push_back(extra);
    }
  return source;
}

}  // namespace ot
