// grad and export: one forward+backward step written as tensor files, and the training
// graph written as ONNX.
#include "tools/training_commands.h"

#include <cmath>
#include <iostream>

#include "graph/autodiff.h"
#include "graph/error.h"
#include "graph/gradient_registry.h"
#include "graph/onnx_io.h"
#include "graph/optimizer_pass.h"
#include "graph/param_patterns.h"
#include "graph/tensor_proto.h"
#include "graph/fusion.h"
#include "runtime/executor.h"
#include "tools/args.h"
#include "tools/cli_util.h"
#include "train/exported_model.h"
#include "tools/executor_environment.h"

namespace ot {

namespace {

// The model as train would train it (a fixed batch rebound, BatchNormalization in training
// form or, with --freeze-bn-stats (--frozen-bn), frozen); prints the notes.
Model LoadForTraining(const Args& args, std::vector<std::string>* freeze) {
  ExportedModelOptions eo;
  eo.frozen_bn = args.Has("frozen-bn") || args.Has("freeze-bn-stats");
  eo.num_classes = args.Has("num-classes") ? ParseNumClasses(args.Get("num-classes"), "") : 0;
  eo.seed = static_cast<uint64_t>(args.GetInt("seed", 0));
  eo.logits_output = args.Get("logits-output");
  eo.class_scores = !args.Has("loss") || args.Get("loss") == "cross-entropy";
  PreparedModel p = PrepareExportedModel(LoadModel(args.positional()[0]), eo);
  for (const auto& note : p.notes) std::cout << note << "\n";
  freeze->insert(freeze->end(), p.freeze.begin(), p.freeze.end());
  return std::move(p.model);
}

AutodiffOptions ReadAutodiffOptions(const Args& args) {
  AutodiffOptions o;
  o.freeze = SplitPatternList(args.Get("freeze"));
  o.train_only = SplitPatternList(args.Get("train-only"));
  OT_CHECK(!args.Has("train-only") || !o.train_only.empty(), "--train-only needs patterns, e.g. --train-only 'fc.*'");
  o.loss_output = args.Get("loss-output");
  o.logits_output = args.Get("logits-output");
  o.label_smoothing = ParseLabelSmoothing(args);
  ReadLossFlags(args, &o);
  return o;
}

}  // namespace

int CmdGrad(const std::vector<std::string>& argv) {
  Args args(argv, {"input", "o", "device", "threads", "freeze", "loss-output", "logits-output", "seed", "label-smoothing",
                   "conv-algo", "train-only", "num-classes", "loss", "ignore-index", "smooth-l1-beta"},
            {"frozen-bn", "freeze-bn-stats", "plan-dump", "no-fusion"});
  OT_CHECK(args.positional().size() == 1, "grad needs exactly one MODEL.onnx (%s)", SeeHelp().c_str());
  OT_CHECK(args.Has("o"), "grad needs -o DIR (where the loss and gradients are written)");
  AutodiffOptions ao = ReadAutodiffOptions(args);
  Model forward = LoadForTraining(args, &ao.freeze);
  TrainingGraph tg = BuildTrainingGraph(forward, ao);
  ExecutorOptions opts = ExecutorOptionsFromEnvironment();
  opts.device = Device::Parse(args.Get("device", "cpu"));
  opts.num_threads = static_cast<int>(args.GetInt("threads", 0));
  opts.seed = static_cast<uint64_t>(args.GetInt("seed", 0));
  opts.conv_algo = CheckedConvAlgo(args.Get("conv-algo", "auto"));
  // As the trainer runs it (train/training_session.cc): fused where the device has kernels.
  if (opts.device.type == DeviceType::kCPU && !args.Has("no-fusion")) {
    FuseBatchNormRelu(tg.model);
    FuseAddRelu(tg.model);
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
  if (args.Has("plan-dump")) std::cout << exec.PlanNotes();
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
  Args args(argv,
            {"o", "freeze", "loss-output", "logits-output", "label-smoothing", "loss", "ignore-index", "smooth-l1-beta",
             "optimizer", "momentum", "weight-decay",
             "beta1", "beta2", "epsilon", "norm-weight-decay", "bias-weight-decay", "clip-grad-norm", "rmsprop-alpha",
             "train-only", "param-group", "lr", "num-classes", "seed"},
            {"nesterov", "no-optimizer", "frozen-bn", "freeze-bn-stats", "centered"});
  OT_CHECK(args.positional().size() == 1, "export needs exactly one MODEL.onnx (%s)", SeeHelp().c_str());
  OT_CHECK(args.Has("o"), "export needs -o TRAINING.onnx");
  AutodiffOptions ao = ReadAutodiffOptions(args);
  Model forward = LoadForTraining(args, &ao.freeze);
  TrainingGraph tg = BuildTrainingGraph(forward, ao);
  if (!args.Has("no-optimizer")) {
    OptimizerConfig c;
    c.kind = ParseOptimizerKind(args.Get("optimizer", "sgd"));
    c.momentum = static_cast<float>(args.GetDouble("momentum", 0.9));
    c.nesterov = args.Has("nesterov");
    c.weight_decay = static_cast<float>(args.GetDouble("weight-decay", 0.0));
    c.beta1 = static_cast<float>(args.GetDouble("beta1", 0.9));
    c.beta2 = static_cast<float>(args.GetDouble("beta2", 0.999));
    c.epsilon = static_cast<float>(args.GetDouble("epsilon", 1e-8));
    c.norm_weight_decay = static_cast<float>(args.GetDouble("norm-weight-decay", std::nan("")));
    c.bias_weight_decay = static_cast<float>(args.GetDouble("bias-weight-decay", std::nan("")));
    c.clip_grad_norm = static_cast<float>(args.GetDouble("clip-grad-norm", 0.0));
    OT_CHECK(c.clip_grad_norm >= 0, "--clip-grad-norm must be a positive number");
    c.rmsprop_alpha = static_cast<float>(args.GetDouble("rmsprop-alpha", c.rmsprop_alpha));
    c.rmsprop_centered = args.Has("centered");
    for (const std::string& spec : args.GetAll("param-group")) c.groups.push_back(ParseParamGroup(spec));
    // The lr input stays the graph's; --lr only says what absolute group rates are relative to.
    c.base_lr = static_cast<float>(args.GetDouble("lr", std::nan("")));
    AppendOptimizer(tg, c);
  }
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
