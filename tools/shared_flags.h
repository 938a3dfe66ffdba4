// The flags that several onnx-train commands take, declared once: their usage lines (as
// train's --help shows them) and, where every command fills the same options struct, their
// setters. A command's table lifts them into its own options with In().
#pragma once

#include "graph/autodiff/autodiff.h"
#include "graph/passes/optimizer_pass.h"
#include "runtime/executor/executor.h"
#include "tools/flag_table.h"
#include "train/data/image_dataset.h"

namespace ot {

// Flags whose setting differs by command (the trainer's field, or an executor's).
extern const FlagInfo kDataFlag;        // --data SPEC
extern const FlagInfo kSeedFlag;        // --seed S
extern const FlagInfo kNumClassesFlag;  // --num-classes K|auto
extern const FlagInfo kFrozenBnFlag;    // --frozen-bn (--freeze-bn-stats' other name)
extern const FlagInfo kFreezeBnStatsFlag;
extern const FlagInfo kLrFlag;          // --lr
extern const FlagInfo kThreadsFlag;     // --threads N
extern const FlagInfo kConvAlgoFlag;    // --conv-algo NAME
extern const FlagInfo kDeviceFlag;      // --device cpu|cuda[:K]
extern const FlagInfo kTf32Flag;        // --tf32
extern const FlagInfo kAmpFlag;         // --amp bf16|fp16
extern const FlagInfo kLossScaleFlag;   // --loss-scale dynamic[:S0]|static:S|none (--amp fp16)
extern const FlagInfo kBatchFlag;       // --batch B
extern const FlagInfo kBackendFlag;     // --backend NAME
extern const FlagInfo kWorldSizeFlag;   // --world-size N
extern const FlagInfo kTimeoutFlag;     // --timeout S
extern const FlagInfo kOutputFlag;      // -o PATH
extern const FlagInfo kInputFlag;       // --input NAME=FILE.pb

// Data set flags of train and eval: --seq-len ... --skip-bad-images, and the transforms
// --resize ... --std (train's usage shows them under two headings).
const FlagTable<DataSourceOptions>& DataFlags();
const FlagTable<DataSourceOptions>& TransformFlags();
// --loss, --ignore-index, --smooth-l1-beta, --label-smoothing (train, grad, export).
const FlagTable<AutodiffOptions>& LossFlags();
// --loss-output NAME (alone: --loss model) and --logits-output NAME (grad, export).
const FlagTable<AutodiffOptions>& GraphOutputFlags();
// --freeze and --train-only PATTERNS (train, grad, export).
const FlagTable<AutodiffOptions>& FreezeFlags();
// Optimizer flags of train and export, by name (each row is placed in train's usage order).
const Flag<OptimizerConfig>& OptimizerFlag(const std::string& name);
// --threads, --device, --conv-algo into ExecutorOptions (eval, infer, grad).
const Flag<ExecutorOptions>& ExecutorFlag(const std::string& name);

// The rows of `table` except those named.
template <typename T>
FlagTable<T> Without(const FlagTable<T>& table, const std::vector<std::string>& names) {
  FlagTable<T> out;
  for (const auto& f : table) {
    bool drop = false;
    for (const auto& n : names) drop = drop || (f.info.name && n == f.info.name);
    if (!drop) out.push_back(f);
  }
  return out;
}

}  // namespace ot
