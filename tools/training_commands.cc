// grad and export: one forward+backward step written as tensor files, and the training
// graph written as ONNX.
#include "tools/training_commands.h"

#include <cmath>
#include <iostream>

#include "graph/autodiff/autodiff.h"
#include "graph/error.h"
#include "graph/autodiff/gradient_registry.h"
#include "graph/onnx_io.h"
#include "graph/passes/optimizer_pass.h"
#include "graph/passes/param_patterns.h"
#include "graph/tensor_proto.h"
#include "graph/passes/fusion.h"
#include "graph/passes/fp16/fp16_products.h"
#include "graph/passes/fp16/loss_scale_pass.h"
#include "train/training_session.h"
#include "runtime/executor/executor.h"
#include "tools/args.h"
#include "tools/cli_util.h"
#include "tools/shared_flags.h"
#include "train/recipe/exported_model.h"
#include "tools/executor_environment.h"

namespace ot {

namespace {

// What grad and export are told.
struct GraphSettings {
  AutodiffOptions autodiff;    // loss, freezing
  ExportedModelOptions model;  // --num-classes, --freeze-bn-stats, --seed
  ExecutorOptions exec = ExecutorOptionsFromEnvironment();  // grad: --device, --threads, --conv-algo, --seed
  OptimizerConfig optimizer;   // export
  bool plan_dump = false, no_fusion = false, no_optimizer = false;
  AmpMode amp = AmpMode::kOff;  // --amp: the casts of the training graph (graph/passes/amp_pass.h)
  LossScaleOptions loss_scale;  // export --amp fp16: its loss scaling nodes
};
using G = GraphSettings;

Flag<G> Set(const FlagInfo& info, std::function<void(G&, const FlagValue&)> set) { return Flag<G>{info, std::move(set)}; }

// The flags of both: freezing, the loss, a fresh classifier, BatchNormalization's form.
FlagTable<G> GraphFlags() {
  FlagTable<G> r = {Read<G>(kOutputFlag)};
  for (const auto& rows : {FreezeFlags(), GraphOutputFlags(), LossFlags()})
    for (const auto& f : rows) r.push_back(In(&G::autodiff, f));
  const FlagTable<G> more = {
      Set(kNumClassesFlag, [](G& g, const FlagValue& v) { g.model.num_classes = ParseNumClasses(v.Text(), ""); }),
      Set(kSeedFlag,
          [](G& g, const FlagValue& v) { g.model.seed = g.exec.seed = static_cast<uint64_t>(v.Int()); }),
      Set(kFreezeBnStatsFlag, [](G& g, const FlagValue&) { g.model.frozen_bn = true; }),
      Set(kFrozenBnFlag, [](G& g, const FlagValue&) { g.model.frozen_bn = true; }),
      // export writes the graph whatever this CPU has; grad runs it (checked in CmdGrad).
      Set(kAmpFlag, [](G& g, const FlagValue& v) { g.amp = ParseAmpMode(v.Text()); }),
  };
  r.insert(r.end(), more.begin(), more.end());
  return r;
}

const FlagTable<G>& GradFlags() {
  static const FlagTable<G> rows = [] {
    FlagTable<G> r = GraphFlags();
    const FlagTable<G> more = {
        Read<G>(kInputFlag),
        In(&G::exec, ExecutorFlag("device")),
        In(&G::exec, ExecutorFlag("threads")),
        In(&G::exec, ExecutorFlag("conv-algo")),
        Field(FlagInfo{"plan-dump", FlagType::kBool, "  --plan-dump          each convolution's algorithm per primitive\n"},
              &G::plan_dump),
        Field(FlagInfo{"no-fusion", FlagType::kBool,
                       "  --no-fusion          BatchNorm, Add and ReLU as separate kernels, as in the exported training graph\n"},
              &G::no_fusion),
    };
    r.insert(r.end(), more.begin(), more.end());
    return r;
  }();
  return rows;
}

const FlagTable<G>& ExportFlags() {
  static const FlagTable<G> rows = [] {
    FlagTable<G> r = GraphFlags();
    r.push_back(Set(kLossScaleFlag, [](G& g, const FlagValue& v) { g.loss_scale = ParseLossScale(v.Text()); }));
    r.push_back(Field(FlagInfo{"no-optimizer", FlagType::kBool,
                               "  --no-optimizer       the training graph without the optimizer update\n"},
                      &G::no_optimizer));
    for (const char* name : {"optimizer", "momentum", "nesterov", "weight-decay", "beta1", "beta2", "epsilon",
                             "norm-weight-decay", "bias-weight-decay", "clip-grad-norm", "rmsprop-alpha", "centered",
                             "param-group"}) {
      const Flag<OptimizerConfig>& f = OptimizerFlag(name);
      r.push_back(In(&G::optimizer, std::string(name) == "momentum" ? WithFallback(f, "0.9") : f));
    }
    // The lr input stays the graph's; --lr only says what absolute group rates are relative to.
    r.push_back(Set(kLrFlag, [](G& g, const FlagValue& v) { g.optimizer.base_lr = v.Float(); }));
    return r;
  }();
  return rows;
}

// The settings of `table` from the command line; the model's preparation follows the loss.
GraphSettings ReadGraphSettings(const FlagTable<G>& table, const Args& args) {
  GraphSettings g;
  Apply(table, args, &g);
  g.model.logits_output = g.autodiff.logits_output;
  g.model.class_scores = g.autodiff.loss == LossKind::kAuto || g.autodiff.loss == LossKind::kCrossEntropy;
  return g;
}

// The model as train would train it (a fixed batch rebound, BatchNormalization in training
// form or, with --freeze-bn-stats (--frozen-bn), frozen); prints the notes.
Model LoadForTraining(const Args& args, GraphSettings* g) {
  PreparedModel p = PrepareExportedModel(LoadModel(args.positional()[0]), g->model);
  for (const auto& note : p.notes) std::cout << note << "\n";
  g->autodiff.freeze.insert(g->autodiff.freeze.end(), p.freeze.begin(), p.freeze.end());
  return std::move(p.model);
}

}  // namespace

std::vector<FlagInfo> GradFlagInfos() { return Infos(GradFlags()); }
std::vector<FlagInfo> ExportFlagInfos() { return Infos(ExportFlags()); }

int CmdGrad(const std::vector<std::string>& argv) {
  const Args args = ParseFlags(argv, GradFlagInfos());
  OT_CHECK(args.positional().size() == 1, "grad needs exactly one MODEL.onnx (%s)", SeeHelp().c_str());
  OT_CHECK(args.Has("o"), "grad needs -o DIR (where the loss and gradients are written)");
  GraphSettings g = ReadGraphSettings(GradFlags(), args);
  Model forward = LoadForTraining(args, &g);
  TrainingGraph tg = BuildTrainingGraph(forward, g.autodiff);
  const ExecutorOptions& opts = g.exec;
  // As the trainer runs it (train/training_session.cc): fused where the device has kernels.
  if (opts.device.type == DeviceType::kCPU && !g.no_fusion) {
    FuseBatchNormRelu(tg.model);
    FuseAddRelu(tg.model);
    FuseBatchNormClip(tg.model);
    FuseSliceGradSums(tg.model);
  }
  const AmpMode amp = g.amp == AmpMode::kOff ? g.amp : CheckedAmpMode(AmpModeName(g.amp), opts.device);
  InsertAmpCasts(tg.model, amp);
  if (amp == AmpMode::kFloat16) {
    RoundFloat16ProductOutputs(tg.model);
    if (opts.device.type == DeviceType::kCPU) EmulateFloat16Products(tg.model);
  }
  if (amp == AmpMode::kBFloat16 && opts.device.type == DeviceType::kCPU) {
    UseBFloat16Attention(tg.model);
    FoldBFloat16CastsIntoActivations(tg.model);
  }
  Executor exec(tg.model, opts);
  std::map<std::string, Tensor> feeds = ReadFeeds(args.GetAll("input"), opts.device);
  if (!tg.labels.empty()) {
    OT_CHECK(feeds.count(tg.labels), "grad needs the labels: --input %s=FILE.pb (%s)", tg.labels.c_str(),
             IsClassIndexLoss(tg.loss_kind) ? "int64 class indices" : "float32, shaped as the output");
    const Tensor& lab = feeds.at(tg.labels);
    CheckLabelsFit(tg, lab.dtype(), lab.shape());
  }
  std::vector<std::string> fetch = {tg.loss};
  fetch.insert(fetch.end(), tg.grads.begin(), tg.grads.end());
  std::vector<Tensor> out = exec.Run(feeds, fetch);
  if (g.plan_dump) std::cout << exec.PlanNotes();
  const std::string dir = args.Get("o");
  EnsureDir(dir);
  WriteTensorFile(out[0].ToHost(tg.loss), dir + "/" + FileNameFor(tg.loss) + ".pb");
  std::cout << "loss " << out[0].ToHost().Data<float>()[0] << "\n";
  for (size_t i = 0; i < tg.params.size(); ++i)
    WriteTensorFile(out[i + 1].ToHost(tg.params[i]), dir + "/" + FileNameFor(tg.params[i]) + ".pb");
  std::cout << "wrote the loss and " << tg.params.size() << " parameter gradients to " << dir << "/\n";
  return 0;
}

int CmdExport(const std::vector<std::string>& argv) {
  const Args args = ParseFlags(argv, ExportFlagInfos());
  OT_CHECK(args.positional().size() == 1, "export needs exactly one MODEL.onnx (%s)", SeeHelp().c_str());
  OT_CHECK(args.Has("o"), "export needs -o TRAINING.onnx");
  GraphSettings g = ReadGraphSettings(ExportFlags(), args);
  Model forward = LoadForTraining(args, &g);
  TrainingGraph tg = BuildTrainingGraph(forward, g.autodiff);
  if (g.amp == AmpMode::kFloat16) RoundFloat16BiasGradients(tg);
  // As PlanTrainingGraph writes it (train/training_session.cc), device-independent: the
  // products read the float16 casts (the CPU's emulation is not shown).
  TrainingConfig scaling;
  scaling.amp = g.amp;
  scaling.loss_scale = g.loss_scale;
  const bool scaled = EffectiveLossScale(scaling).kind != LossScaleOptions::Kind::kNone;
  if (scaled) InsertLossScaling(tg);
  const size_t first_update = tg.state_updates.size();
  if (!g.no_optimizer) AppendOptimizer(tg, g.optimizer);
  if (scaled && !g.no_optimizer) GateOptimizerUpdates(tg, first_update);
  const AmpCounts amp = InsertAmpCasts(tg.model, g.amp);
  if (g.amp == AmpMode::kFloat16) RoundFloat16ProductOutputs(tg.model);
  if (g.amp != AmpMode::kOff)
    std::cout << "--amp " << AmpModeName(g.amp) << ": " << amp.casts << " Cast nodes before " << amp.products
              << " convolutions and matrix products"
              << (scaled ? std::string(", loss scaling nodes (input ") + kLossScaleInput + ", output " +
                               kGradsFiniteOutput + ")"
                         : std::string())
              << "\n";
  CheckModel(tg.model);
  SaveModel(tg.model, args.Get("o"));
  size_t grad_nodes = 0;
  for (const auto& n : tg.model.graph.nodes) grad_nodes += n.domain == kGradDomain;
  std::cout << "wrote the training graph (" << tg.model.graph.nodes.size() << " nodes, " << grad_nodes
            << " of them in " << kGradDomain << ", " << tg.params.size() << " trainable parameters, loss '" << tg.loss
            << "') to " << args.Get("o") << "\n";
  return 0;
}

}  // namespace ot
