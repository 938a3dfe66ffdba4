// The train (default) and eval subcommands of onnx-train.
#pragma once

#include <string>
#include <vector>

namespace ot {

extern const char* kTrainUsage;
// onnx-train MODEL.onnx [options]
int CmdTrain(std::vector<std::string> argv);
// onnx-train eval MODEL.onnx [--data SPEC] [--split test]
int CmdEval(const std::vector<std::string>& argv);

}  // namespace ot
