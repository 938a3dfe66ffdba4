// The onnx-train subcommands that use the training graph: grad and export.
#pragma once

#include <string>
#include <vector>

#include "tools/flag_table.h"

namespace ot {

// The flag tables of grad and export.
std::vector<FlagInfo> GradFlagInfos();
std::vector<FlagInfo> ExportFlagInfos();
// onnx-train grad MODEL --input NAME=FILE.pb ... --input labels=FILE.pb -o DIR
int CmdGrad(const std::vector<std::string>& argv);
// onnx-train export MODEL -o TRAINING.onnx [optimizer options]
int CmdExport(const std::vector<std::string>& argv);

}  // namespace ot
