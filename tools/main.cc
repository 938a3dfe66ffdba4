// The onnx-train program: one table of commands (train, eval, infer, grad, export,
// make-model, dump-batch, bench-comm, check), each with its flag table. Every user error
// ends with one "onnx-train: error: ..." line and exit status 1.

#include <cstdio>
#include <iostream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "graph/error.h"
#include "graph/passes/fusion.h"
#include "graph/onnx_io.h"
#include "graph/tensor_proto.h"
#include "models/reference_models.h"
#include "runtime/executor/executor.h"
#include "runtime/executor/kernel_coverage.h"
#include "runtime/core/kernel_registry.h"
#include "runtime/core/plugin.h"
#include "tools/args.h"
#include "tools/cli_util.h"
#include "tools/flag_table.h"
#include "tools/shared_flags.h"
#include "tools/bench_comm.h"
#include "tools/train_command.h"
#include "tools/training_commands.h"
#include "train/recipe/exported_model.h"
#include "train/training_session.h"
#include "train/data/image_dataset.h"
#include "tools/executor_environment.h"

namespace ot {
namespace {

const char* kUsageHeader =
    "usage: onnx-train MODEL.onnx [options]     train it (see onnx-train train --help)\n"
    "       onnx-train <command> [options]\n"
    "\n"
    "commands:\n";
const char* kUsageFooter =
    "\n"
    "onnx-train COMMAND --help prints a command's options; onnx-train --version its version.\n";

std::vector<FlagInfo> InferFlags() { return {kInputFlag, kOutputFlag, kDeviceFlag, kTf32Flag, kThreadsFlag, kConvAlgoFlag}; }

int CmdInfer(const std::vector<std::string>& argv) {
  const Args args = ParseFlags(argv, InferFlags());
  OT_CHECK(args.positional().size() == 1, "infer needs exactly one MODEL.onnx (%s)", SeeHelp().c_str());
  OT_CHECK(args.Has("o"), "infer needs -o DIR (where the outputs are written)");
  ExecutorOptions opts = ExecutorOptionsFromEnvironment();
  opts.device = Device::Parse(args.Get("device", "cpu"));
  opts.num_threads = static_cast<int>(args.GetInt("threads", 0));
  opts.conv_algo = CheckedConvAlgo(args.Get("conv-algo", "auto"));
  ApplyTf32Flag(args.Has("tf32"), opts.device);
  Model model = LoadModel(args.positional()[0]);
  Executor exec(model, opts);
  std::map<std::string, Tensor> feeds = ReadFeeds(args.GetAll("input"), opts.device);
  std::vector<Tensor> outs = exec.Run(feeds);
  std::string dir = args.Get("o");
  EnsureDir(dir);
  for (size_t i = 0; i < outs.size(); ++i) {
    const std::string& name = exec.OutputNames()[i];
    std::string path = dir + "/" + FileNameFor(name) + ".pb";
    WriteTensorFile(outs[i].ToHost(name), path);
    std::cout << name << ": " << outs[i].Describe() << " -> " << path << "\n";
  }
  return 0;
}

// Parses "CxHxW".
void ParseInputShape(const std::string& s, ReferenceModelOptions* o) {
  int64_t c = 0, h = 0, w = 0;
  char x1 = 0, x2 = 0;
  int consumed = 0;
  int n = std::sscanf(s.c_str(), "%ld%c%ld%c%ld%n", &c, &x1, &h, &x2, &w, &consumed);
  OT_CHECK(n == 5 && x1 == 'x' && x2 == 'x' && consumed == static_cast<int>(s.size()) && c > 0 && h > 0 && w > 0 &&
               c <= 4096 && h <= 65536 && w <= 65536,
           "--input expects CxHxW such as 3x32x32, got '%s'", s.c_str());
  o->channels = c;
  o->height = h;
  o->width = w;
}

std::vector<FlagInfo> MakeModelFlags() {
  return {kOutputFlag,
          {"input", FlagType::kText, "  --input CxHxW        the input's channels, height and width\n"},
          {"classes", FlagType::kInt, "  --classes K          output classes (10)\n"},
          {"seed", FlagType::kInt, "  --seed S             initial weights (0)\n"}};
}

int CmdMakeModel(const std::vector<std::string>& argv) {
  const Args args = ParseFlags(argv, MakeModelFlags());
  OT_CHECK(args.positional().size() == 1, "make-model needs a model name (resnet34 or simplenn)");
  OT_CHECK(args.Has("o"), "make-model needs -o FILE");
  const std::string& name = args.positional()[0];
  ReferenceModelOptions o;
  if (name == "simplenn") { o.channels = 1; o.height = 28; o.width = 28; }
  if (args.Has("input")) ParseInputShape(args.Get("input"), &o);
  o.classes = args.GetInt("classes", 10);
  OT_CHECK(o.classes >= 1 && o.classes <= 1000000, "--classes must be between 1 and 1000000");
  o.seed = static_cast<uint64_t>(args.GetInt("seed", 0));
  Model m = BuildReferenceModel(name, o);
  CheckModel(m);
  SaveModel(m, args.Get("o"));
  size_t params = 0;
  for (const auto& t : m.graph.initializers) params += static_cast<size_t>(t.NumElements());
  std::cout << "wrote " << name << " (" << m.graph.nodes.size() << " nodes, " << params << " parameters) to "
            << args.Get("o") << "\n";
  return 0;
}

std::vector<FlagInfo> DumpBatchFlags() {
  return {kDataFlag,
          {"split", FlagType::kText, "  --split test|train   (test)\n"},
          {"count", FlagType::kInt, "  --count N            samples (8)\n"},
          {"offset", FlagType::kInt, "  --offset K           the first sample (0)\n"},
          kOutputFlag,
          {"model", FlagType::kText, "  --model MODEL.onnx   the batch as this model's input takes it\n"}};
}

int CmdDumpBatch(const std::vector<std::string>& argv) {
  const Args args = ParseFlags(argv, DumpBatchFlags());
  OT_CHECK(args.positional().empty(), "dump-batch takes no positional arguments");
  OT_CHECK(args.Has("o"), "dump-batch needs -o DIR");
  // --model: the batch as that model's input takes it (image folders, NumPy arrays, images
  // adapted to its size and channels).
  DataSourceOptions source;
  Model model;
  if (args.Has("model")) {
    model = LoadModel(args.Get("model"));
    OT_CHECK(model.graph.inputs.size() == 1, "dump-batch --model needs a model with one input");
    source.model_input = &model.graph.inputs[0];
    const ValueInfo& out = model.graph.outputs.at(0);
    if (out.has_shape && out.dims.size() == 2 && out.dims[1].IsStatic()) source.model_classes = out.dims[1].value;
  }
  ImageDataset ds = LoadImageDataset(args.Get("data", "fashion-mnist"), args.Get("split", "test"), source);
  for (const std::string& note : ds.notes) std::cout << note << "\n";
  int64_t count = args.GetInt("count", 8), offset = args.GetInt("offset", 0);
  OT_CHECK(count > 0 && offset >= 0 && offset + count <= ds.count, "--offset %lld --count %lld is outside the %lld samples",
           (long long)offset, (long long)count, (long long)ds.count);
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < count; ++i) idx.push_back(offset + i);
  std::string dir = args.Get("o");
  EnsureDir(dir);
  WriteTensorFile(ds.Images(idx), dir + "/input.pb");
  WriteTensorFile(ds.Labels(idx), dir + "/labels.pb");
  std::cout << "wrote " << count << " " << ds.name << " samples to " << dir << "/input.pb and " << dir << "/labels.pb\n";
  return 0;
}

std::vector<FlagInfo> CheckFlags() {
  return {{"device", FlagType::kText, "  --device cpu|cuda    the ops without a kernel on that device\n"},
          {"training", FlagType::kBool, "  --training           the ops of the training graph\n"},
          {"optimizer", FlagType::kText, "  --optimizer NAME     with --training: its update's ops (sgd)\n"},
          {"loss", FlagType::kText, "  --loss NAME          with --training: its loss's ops\n"},
          {"sync-bn", FlagType::kBool, "  --sync-bn            with --training: batch normalization synchronised over ranks\n"}};
}

int CmdCheck(const std::vector<std::string>& argv) {
  const Args args = ParseFlags(argv, CheckFlags());
  OT_CHECK(args.positional().size() == 1, "check needs exactly one MODEL.onnx");
  const std::string path = args.positional()[0];
  Model m = LoadModel(path);
  for (const auto& v : m.graph.inputs) std::cout << "input  " << v.name << ": " << DTypeName(v.dtype) << v.ShapeString() << "\n";
  for (const auto& v : m.graph.outputs) std::cout << "output " << v.name << ": " << DTypeName(v.dtype) << v.ShapeString() << "\n";
  std::map<std::string, int> ops;
  for (const auto& n : m.graph.nodes) ops[n.domain.empty() ? n.op_type : n.domain + "." + n.op_type]++;
  for (const auto& [op, count] : ops) std::cout << "op     " << op << " x" << count << "\n";
  const Device device = Device::Parse(args.Get("device", "cpu"));
  const bool training = args.Has("training");
  OT_CHECK(training || (!args.Has("optimizer") && !args.Has("loss") && !args.Has("sync-bn")),
           "--optimizer, --loss and --sync-bn go with --training");
  if (device.type != DeviceType::kCPU || training) {  // kernel coverage only: no device needed
    if (device.type == DeviceType::kCUDA && PluginBuilt("cuda")) LoadPlugin("cuda");  // its kernels register
    OT_CHECK(!KernelRegistry::Global().OpTypes(device.type).empty(),
             "this onnx-train was built without %s kernels (configure with the CUDA toolkit: -DONNXTRAIN_CUDA=ON)",
             device.type == DeviceType::kCUDA ? "CUDA" : device.ToString().c_str());
    const std::string kind = device.type == DeviceType::kCUDA ? "CUDA" : "CPU";
    Model target = m;
    std::string what = "the model";
    if (training) {
      TrainingConfig config;
      config.executor.device = device;
      config.optimizer.kind = ParseOptimizerKind(args.Get("optimizer", "sgd"));
      if (args.Has("loss")) config.autodiff.loss = ParseLossKind(args.Get("loss"));
      config.sync_batch_norm = args.Has("sync-bn");
      ExportedModelOptions eo;
      eo.class_scores = config.autodiff.loss == LossKind::kAuto || config.autodiff.loss == LossKind::kCrossEntropy;
      target = PlanTrainingGraph(PrepareExportedModel(m, eo).model, config).model;
      what = "its training graph (" + std::string(args.Get("optimizer", "sgd")) + (config.sync_batch_norm ? ", sync-bn" : "") + ")";
    }
    const KernelCoverage c = CheckKernelCoverage(target, device.type);
    if (c.missing.empty()) {
      std::cout << "ok: every op of " << what << " has a " << kind << " kernel (" << c.ops << " ops, "
                << c.nodes << " nodes)\n";
      return 0;
    }
    std::cout << what << ": " << c.missing.size() << " of " << c.ops << " ops have no " << kind
              << " kernel (" << c.missing_nodes << " of " << c.nodes << " nodes):\n";
    for (const auto& [op, names] : c.missing) std::cout << "missing " << op << " x" << names.size() << "\n";
    return 1;
  }
  Executor exec(m);  // throws listing unsupported ops
  std::cout << "ok: every op has a CPU kernel\n";
  // What training would change about an export (fixed batch, BatchNormalization forms).
  for (const auto& note : PrepareExportedModel(m, ExportedModelOptions{}).notes) std::cout << "note: " << note << "\n";
  Model fused = m;
  const FusionCounts fusions = FuseDecomposedOps(fused);
  if (fusions.gelu + fusions.layer_norm + fusions.attention > 0)
    std::cout << "note: training fuses " << fusions.gelu << " GELU, " << fusions.layer_norm << " LayerNorm and "
              << fusions.attention
              << " attention decomposition(s) into one op each (org.onnxtrain Gelu, LayerNormalization, "
                 "Attention); the trained model keeps the ops as exported\n";
  return 0;
}

// One row per command: its name, its lines in onnx-train --help ("  NAME ARGS" and what it
// does, indented), what runs it and its flag table.
struct Command {
  const char* name;
  const char* synopsis;
  std::function<int(const std::vector<std::string>&)> run;
  std::vector<FlagInfo> (*flags)();
};

const std::vector<Command>& Commands() {
  static const std::vector<Command> commands = {
    {"train",
     "  train MODEL.onnx [options]\n"
     "      train on a data set (Fashion-MNIST by default); checkpoints, resume, metrics\n",
     CmdTrain, TrainFlagInfos},
    {"eval",
     "  eval MODEL.onnx [--data SPEC] [--split test|train] [--per-class] [--batch N] [--device D] [--threads N]\n"
     "      test accuracy of a model; SPEC and the data and transform flags as train's (fashion-mnist,\n"
     "      mnist:DIR, cifar10:DIR, imagefolder:DIR, npy:..., npz:..., synthetic[:N[:CxHxW]]; --resize,\n"
     "      --center-crop, --mean/--std, ...); data is fitted to the model's input as in train, and the data\n"
     "      set's classes must fit the model's output; --per-class adds a table per class (names from\n"
     "      classes.txt beside the model, or the image folder's class folders); tokens:TRAIN.bin[,VAL.bin]\n"
     "      [--seq-len T] [--token-dtype D]: loss, perplexity and token accuracy of a language model\n",
     CmdEval, EvalFlagInfos},
    {"infer",
     "  infer MODEL.onnx --input NAME=FILE.pb ... -o DIR [--device cpu|cuda[:K]] [--tf32] [--threads N]\n"
     "      [--conv-algo auto|direct|winograd|taps|winograd2|winograd4]\n"
     "      run the forward pass; writes each graph output as DIR/<output>.pb (binary TensorProto)\n",
     CmdInfer, InferFlags},
    {"make-model",
     "  make-model resnet34|simplenn -o FILE [--input CxHxW] [--classes K] [--seed S]\n"
     "      write a reference model as ONNX\n",
     CmdMakeModel, MakeModelFlags},
    {"dump-batch",
     "  dump-batch [--data SPEC] [--split test|train] [--count N] [--offset K] [--model MODEL.onnx] -o DIR\n"
     "      write a normalised batch as DIR/input.pb (float [N,C,H,W]) and DIR/labels.pb (int64 [N]);\n"
     "      with --model, as that model's input takes it (needed for imagefolder, npy and npz data)\n",
     CmdDumpBatch, DumpBatchFlags},
    {"grad",
     "  grad MODEL.onnx --input NAME=FILE.pb ... --input labels=FILE.pb -o DIR [--freeze PATTERNS]\n"
     "      [--train-only PATTERNS] [--freeze-bn-stats] [--num-classes K [--seed S]]\n"
     "      one forward+backward step in training mode; writes DIR/loss.pb and one file per parameter\n"
     "      gradient, each TensorProto named after the parameter's initializer\n"
     "      [--conv-algo auto|direct|winograd|taps|winograd2|winograd4] [--plan-dump: each convolution's algorithm per primitive]\n"
     "      [--no-fusion: BatchNorm, Add and ReLU as separate kernels, as in the exported training graph]\n"
     "      [--loss cross-entropy|nll|mse|l1|smooth-l1|bce-with-logits|model] [--ignore-index I] [--smooth-l1-beta B]\n"
     "      [--label-smoothing E] [--loss-output NAME: the model's scalar loss, as --loss model] (grad and export)\n",
     CmdGrad, GradFlagInfos},
    {"export",
     "  export MODEL.onnx -o TRAINING.onnx [--optimizer sgd|adam|adamw|rmsprop|adagrad] [--momentum M] [--nesterov]\n"
     "      [--centered] [--rmsprop-alpha A] [--norm-weight-decay W] [--bias-weight-decay W] [--clip-grad-norm M]\n"
     "      [--weight-decay W] [--no-optimizer] [--freeze PATTERNS] [--train-only PATTERNS] [--freeze-bn-stats]\n"
     "      [--param-group 'PATTERNS:lr=Fx,wd=Y' ...] [--lr BASE: for absolute group rates lr=X]\n"
     "      (PATTERNS: comma-separated initializer names or globs * ? [..])\n"
     "      [--num-classes K [--seed S]: a fresh K-way final classifier, as train's]\n"
     "      write the training graph (forward, loss, backward, optimizer update) as ONNX\n",
     CmdExport, ExportFlagInfos},
    {"bench-comm",
     "  bench-comm --backend gloo|mpi|nccl --world-size N [--min-bytes 4] [--max-bytes 67108864] [--iters 20]\n"
     "      allreduce table like nccl-tests: bytes, time, algbw, busbw, wrong elements\n",
     CmdBenchComm, BenchCommFlagInfos},
    {"check",
     "  check MODEL.onnx [--device cpu|cuda] [--training] [--optimizer NAME] [--loss NAME] [--sync-bn]\n"
     "      load, check and shape-infer a model; print its inputs, outputs and ops, and notes on what\n"
     "      training changes in an export (a fixed batch, BatchNorm folded or in inference form);\n"
     "      --device: the ops without a kernel there, grouped by op (exit 1 if any; no GPU needed);\n"
     "      --training: those of the whole training graph (loss, gradients, optimizer update)\n",
     CmdCheck, CheckFlags},
  };
  return commands;
}

const Command* FindCommand(const std::string& name) {
  for (const Command& c : Commands())
    if (name == c.name) return &c;
  return nullptr;
}

std::string Usage() {
  std::string out = kUsageHeader;
  for (const Command& c : Commands()) out += c.synopsis;
  return out + kUsageFooter;
}

// A command's --help: train's own usage; else its synopsis as a usage line, then the
// options its synopsis does not name.
std::string CommandHelp(const Command& c) {
  if (std::string(c.name) == "train") return TrainUsage();
  const std::string text = c.synopsis;
  std::string out = "usage: onnx-train " + text.substr(2, text.find('\n') - 2) + "\n";
  for (size_t line = text.find('\n') + 1; line < text.size();) {
    const size_t end = text.find('\n', line);
    out += "  " + text.substr(line + 6, end - line - 6) + "\n";
    line = end + 1;
  }
  return CommandHelp(out, c.flags());
}

// "train and export": the other commands that take --flag.
std::string FlagOwners(const std::string& flag, const std::string& except) {
  std::vector<std::string> owners;
  for (const Command& c : Commands()) {
    if (except == c.name) continue;
    for (const FlagInfo& f : c.flags())
      if (f.name && flag == f.name) {
        owners.push_back(c.name);
        break;
      }
  }
  std::string out;
  for (size_t i = 0; i < owners.size(); ++i)
    out += (i == 0 ? "" : i + 1 == owners.size() ? " and " : ", ") + owners[i];
  return out;
}

int Main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    if (args.size() == 2 && args[0] == "help") args = {args[1], "--help"};  // onnx-train help eval
    else {
      std::cout << Usage();
      return args.empty() ? 2 : 0;
    }
  }
  if (args[0] == "--list-flags") {  // for tests/cli/cli_flag_table_test.py: every command's flag table
    for (const Command& c : Commands())
      for (const FlagInfo& f : c.flags())
        if (f.name) std::cout << c.name << " --" << f.name << (f.type == FlagType::kBool ? "" : " VALUE") << "\n";
    return 0;
  }
  if (args[0] == "--version" || args[0] == "version") {
    std::cout << "onnx-train " << ONNXTRAIN_VERSION << "\n";
    return 0;
  }
  const bool is_model = args[0].size() > 5 && args[0].compare(args[0].size() - 5, 5, ".onnx") == 0;
  if (is_model) args.insert(args.begin(), "train");
  const Command* cmd = FindCommand(args[0]);
  if (!cmd) {
    std::set<std::string> names;
    for (const Command& c : Commands()) names.insert(c.name);
    const std::string near = SuggestFlag(args[0], names);
    std::string list;
    for (const Command& c : Commands()) list += std::string(c.name) + ", ";
    throw Error("unknown command '" + args[0] + "'" + (near.empty() ? "" : "; did you mean " + near + "?") +
                " (commands: " + list + "or MODEL.onnx to train; see onnx-train --help)");
  }
  const std::string name = cmd->name;
  SetCommandForMessages(name, [name](const std::string& flag) { return FlagOwners(flag, name); });
  // --help or -h anywhere: the command's own usage, exit 0.
  for (const auto& a : args)
    if (a == "--help" || a == "-h") {
      std::cout << CommandHelp(*cmd);
      return 0;
    }
  // "-o" is spelled with one dash in the contract; treat it as --o.
  for (auto& a : args)
    if (a == "-o") a = "--o";
  return cmd->run(std::vector<std::string>(args.begin() + 1, args.end()));
}

}  // namespace
}  // namespace ot

namespace {
// Prints the one error line: messages from libraries (the ONNX checker) span several lines,
// so runs of line breaks and the spaces around them become one space.
void PrintErrorLine(const std::string& message) {
  std::string line;
  bool in_break = false;
  for (char c : message) {
    if (c == '\n' || c == '\r') {
      in_break = true;
      continue;
    }
    if (in_break && c == ' ') continue;
    if (in_break) {
      while (!line.empty() && line.back() == ' ') line.pop_back();
      line += ' ';
      in_break = false;
    }
    line += c;
  }
  while (!line.empty() && line.back() == ' ') line.pop_back();
  std::cerr << "onnx-train: error: " << line << "\n";
}
}  // namespace

int main(int argc, char** argv) {
  try {
    return ot::Main(argc, argv);
  } catch (const std::bad_alloc&) {
    PrintErrorLine("out of memory");
    return 1;
  } catch (const std::exception& e) {
    PrintErrorLine(e.what());  // ot::Error and any library exception
    return 1;
  } catch (...) {
    PrintErrorLine("internal error: an exception of unknown type");
    return 1;
  }
}
