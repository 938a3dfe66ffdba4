// Helpers shared by the onnx-train subcommands: NAME=FILE arguments, output folders,
// file names for value names, feeds from tensor files.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "graph/passes/amp_pass.h"
#include "graph/autodiff/autodiff.h"
#include "runtime/core/tensor.h"
#include "tools/args.h"

namespace ot {

// Splits NAME=PATH; throws ot::Error naming the flag otherwise.
std::pair<std::string, std::string> SplitAssignment(const std::string& s, const std::string& flag);
// Creates the folder if needed; throws if it exists and is not a folder.
void EnsureDir(const std::string& dir);
// A file name for a value name (ONNX names may hold '/' or ':').
std::string FileNameFor(const std::string& value);
// Reads every --input NAME=FILE.pb into device tensors.
std::map<std::string, Tensor> ReadFeeds(const std::vector<std::string>& assignments, Device device);
// Splits "a,b,c" (empty items dropped).
std::vector<std::string> SplitList(const std::string& s);
// --tf32: lets float32 matrix products and convolutions use TF32 tensor cores on CUDA.
// Throws ot::Error when asked for on a CPU device or in a build without CUDA.
void ApplyTf32Flag(bool tf32, Device device);
// The --amp mode a run on `device` gets: bf16 on a CPU with bfloat16 products; on one
// without, one line that says so and float32 (kOff: oneDNN's emulation is slower than
// float32). fp16 on the CPU: one line says that float16 is emulated (EmulateFloat16Products).
// Throws ot::Error for bf16 off the CPU.
AmpMode CheckedAmpMode(const std::string& text, Device device);

}  // namespace ot
