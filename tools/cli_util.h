// Helpers shared by the onnx-train subcommands: NAME=FILE arguments, output folders,
// file names for value names, feeds from tensor files.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "graph/autodiff.h"
#include "runtime/tensor.h"
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
// --label-smoothing EPS (default 0); throws ot::Error unless 0 <= EPS < 1.
float ParseLabelSmoothing(const Args& args);
// --loss NAME, --ignore-index I, --smooth-l1-beta B into `o` (shared by train, grad and
// export); --loss-output NAME alone means --loss model. Throws ot::Error for an unknown
// loss or a flag that the chosen loss does not take.
void ReadLossFlags(const Args& args, AutodiffOptions* o);
// A probability flag (--random-erase P, default 0); throws ot::Error unless 0 <= P <= 1.
float ParseProbability(const Args& args, const std::string& flag);

}  // namespace ot
