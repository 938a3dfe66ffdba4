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

// A copy of `model` whose intermediate shapes (value_info) are inferred anew from its
// inputs, initializers and declared outputs, after a rewrite that changed them.
Model WithShapesInferredAgain(const Model& model);

Model ModelFromProto(const onnx::ModelProto& proto, const std::string& base_dir, const std::string& where);
void ModelToProto(const Model& model, onnx::ModelProto* proto);
struct SaveOptions {
  // Protobuf cannot serialize a message of 2 GiB or more: when the initializers need more
  // than this many bytes, every tensor of at least min_external_bytes goes to ONNX external
  // data in one file beside the model, "<file name>.data" (relative location, offsets).
  int64_t external_above_bytes = int64_t(1800) << 20;
  int64_t min_external_bytes = 1024;
};

// Writes the model atomically (the external data file first, so a model never names a data
// file that is incomplete); a stale "<file name>.data" of an earlier save is removed when
// this one keeps every tensor inline.
void SaveModel(const Model& model, const std::string& path, const SaveOptions& options = {});
// Runs the ONNX checker over the exported form of model; throws ot::Error with its message.
void CheckModel(const Model& model);

}  // namespace ot
