// The train (default) and eval subcommands of onnx-train.
#pragma once

#include <string>
#include <vector>

#include "tools/flag_table.h"

namespace ot {

// train's flag table (usage, accepted flags) and its whole --help text.
std::vector<FlagInfo> TrainFlagInfos();
std::string TrainUsage();
// onnx-train MODEL.onnx [options]
int CmdTrain(std::vector<std::string> argv);
// eval's flag table.
std::vector<FlagInfo> EvalFlagInfos();
// onnx-train eval MODEL.onnx [--data SPEC] [--split test]
int CmdEval(const std::vector<std::string>& argv);

}  // namespace ot
