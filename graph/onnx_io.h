// ONNX import and export: file -> ModelProto -> checker -> shape inference -> IR, and back.
#pragma once

#include <string>

#include "graph/ir.h"

namespace onnx { class ModelProto; }

namespace ot {

struct LoadOptions {
  bool run_checker = true;
  bool infer_shapes = true;
};

// Loads an .onnx file (external data files are read from its folder). Throws ot::Error
// naming the file and the reason for a missing, corrupt, truncated or invalid model.
Model LoadModel(const std::string& path, const LoadOptions& options = {});
// Parses serialized bytes; `where` names the source in messages.
Model LoadModelFromBytes(const std::string& bytes, const std::string& where, const std::string& base_dir,
                         const LoadOptions& options = {});

Model ModelFromProto(const onnx::ModelProto& proto, const std::string& base_dir, const std::string& where);
void ModelToProto(const Model& model, onnx::ModelProto* proto);
// Writes the model atomically.
void SaveModel(const Model& model, const std::string& path);
// Runs the ONNX checker over the exported form of model; throws ot::Error with its message.
void CheckModel(const Model& model);

}  // namespace ot
