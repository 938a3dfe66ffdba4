// `onnx-train MODEL.onnx [options]` (train) and `onnx-train eval MODEL.onnx`: flag parsing
// with the recipes' defaults, then the trainer or the evaluator.
#include "tools/train_command.h"
#include "tools/worker_environment.h"

#include <cctype>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <thread>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "comm/rendezvous.h"
#include "graph/autodiff/autodiff.h"
#include "graph/error.h"
#include "graph/onnx_io.h"
#include "graph/passes/param_patterns.h"
#include "runtime/core/plugin.h"
#include "runtime/executor/executor.h"
#include "tools/args.h"
#include "tools/cli_util.h"
#include "tools/flag_table.h"
#include "tools/shared_flags.h"
#include "tools/launcher.h"
#include "train/data/data_for_model.h"
#include "train/evaluate.h"
#include "train/recipe/exported_model.h"
#include "train/data/image_dataset.h"
#include "train/checkpoint/interrupt.h"
#include "train/loader/model_input_check.h"
#include "train/task.h"
#include "train/data/token_dataset.h"
#include "train/trainer.h"
#include "tools/executor_environment.h"

namespace ot {

namespace {

// Everything `onnx-train MODEL.onnx` is told: the trainer's options and what is settled
// before training (the model's preparation, the launcher).
struct TrainSettings {
  TrainerOptions trainer;
  AutodiffOptions autodiff;    // --loss ... --label-smoothing, --freeze, --train-only
  ExportedModelOptions model;  // --num-classes, --freeze-bn-stats
  LaunchOptions launch;        // --world-size, --max-restarts, ...
  std::string rendezvous;      // --rdzv
};
using S = TrainSettings;

// Rows of TrainerOptions, of its optimizer and of its data source, as rows of S.
Flag<S> Trainer(const Flag<TrainerOptions>& f) { return In(&S::trainer, f); }
template <typename F>
Flag<S> Trainer(const FlagInfo& info, F TrainerOptions::*field, const char* fallback = nullptr) {
  return Trainer(Field(info, field, fallback));
}
Flag<S> Optimizer(const char* name) { return Trainer(In(&TrainerOptions::optimizer, OptimizerFlag(name))); }
Flag<S> Set(const FlagInfo& info, std::function<void(S&, const FlagValue&)> set, const char* fallback = nullptr) {
  return Flag<S>{info, std::move(set), fallback};
}
Flag<S> Schedule(const FlagInfo& info, std::function<void(LrSchedule&, const FlagValue&)> set) {
  return Set(info, [set](S& s, const FlagValue& v) { set(s.trainer.schedule, v); });
}
void Append(FlagTable<S>* rows, const FlagTable<S>& more) { rows->insert(rows->end(), more.begin(), more.end()); }

void ApplyRecipe(const std::string& name, TrainerOptions* o) {
  if (name == "simplenn") return;  // the defaults
  OT_CHECK(name == "resnet34", "unknown --recipe '%s'; choose simplenn or resnet34", name.c_str());
  o->batch = 128;
  o->epochs = 15;
  o->schedule.base_lr = 0.1;
  o->schedule.kind = LrSchedule::Kind::kStep;
  o->schedule.step_size = 5;
  o->schedule.gamma = 0.1;
  o->optimizer.momentum = 0.9f;
  o->save_every = 3;
}

// A positive number of seconds, MiB, ... (the message names the flag and the unit).
double Positive(const FlagValue& v, const char* message) {
  const double x = v.Number();
  OT_CHECK(x > 0, "%s", message);
  return x;
}

// train's flags in the order of its usage text; rows run in this order (--recipe before
// the flags that override its settings, --device before --tf32, --loss before
// --ignore-index).
const FlagTable<S>& TrainFlags() {
  static const FlagTable<S> rows = [] {
    using O = TrainerOptions;
    FlagTable<S> r = {Heading<S>("data:\n"), Trainer(kDataFlag, &O::data)};
    Append(&r, In(&S::trainer, In(&O::data_source, DataFlags())));
    r.push_back(Heading<S>("transforms (torchvision's; without size flags images are resized to the model's input):\n"));
    Append(&r, In(&S::trainer, In(&O::data_source, TransformFlags())));
    Append(&r, {
      Trainer({"augment", FlagType::kBool, "  --augment            random crop (4-pixel padding) and horizontal flip\n"},
              &O::augment),
      Trainer({{"random-erase", FlagType::kNumber,
                "  --random-erase P     torchvision's RandomErasing with probability P per image (scale 0.02-0.33,\n"
                "                       ratio 0.3-3.3, value 0 after normalisation)\n"},
               [](O& o, const FlagValue& v) {
                 const double p = v.Number();
                 OT_CHECK(p >= 0.0 && p <= 1.0, "--%s %g is not a probability; give a value in [0, 1], e.g. 0.25",
                          v.flag(), p);
                 o.random_erase = static_cast<float>(p);
               }}),
      Trainer({{"no-shuffle", FlagType::kBool, "  --no-shuffle         keep the data set's order\n"},
               [](O& o, const FlagValue&) { o.shuffle = false; }}),
      Trainer(kSeedFlag, &O::seed),
      Heading<S>("model:\n"),
      Set(kNumClassesFlag, [](S& s, const FlagValue& v) { s.model.num_classes = ParseNumClasses(v.Text(), s.trainer.data); }),
      Heading<S>("recipe:\n"),
      Set({"recipe", FlagType::kText,
           "  --recipe NAME        simplenn: SGD lr 0.01, batch 32, 5 epochs (the defaults)\n"
           "                       resnet34: SGD lr 0.1 momentum 0.9, StepLR 5 x0.1, batch 128, 15 epochs,\n"
           "                       checkpoint every 3 epochs\n"},
          [](S& s, const FlagValue& v) { ApplyRecipe(v.Text(), &s.trainer); }),
      Trainer({"epochs", FlagType::kInt,
               "  --epochs N           (5)            --batch B            (32; also --batch-size)\n"},
              &O::epochs),
      Trainer(kBatchFlag, &O::batch),
      Optimizer("optimizer"),
      Schedule(kLrFlag, [](LrSchedule& l, const FlagValue& v) { l.base_lr = v.Number(); }),
      Optimizer("momentum"), Optimizer("nesterov"), Optimizer("weight-decay"), Optimizer("norm-weight-decay"),
      Optimizer("bias-weight-decay"), Optimizer("beta1"), Optimizer("beta2"), Optimizer("epsilon"),
      Optimizer("rmsprop-alpha"), Optimizer("centered"), Optimizer("clip-grad-norm"),
      Schedule({"lr-schedule", FlagType::kText,
                "  --lr-schedule constant|step|cosine|exponential (constant; also --lr-scheduler, and torchvision's\n"
                "                       names steplr, cosineannealinglr, exponentiallr)\n"},
               [](LrSchedule& l, const FlagValue& v) { l.kind = ParseLrScheduleKind(v.Text()); }),
      Schedule({"lr-step", FlagType::kInt,
                "  --lr-step N (5; also --lr-step-size)   --lr-gamma G (0.1): StepLR every N epochs, ExponentialLR per epoch\n"},
               [](LrSchedule& l, const FlagValue& v) { l.step_size = static_cast<int>(v.Int()); }),
      Schedule({"lr-gamma", FlagType::kNumber, ""}, [](LrSchedule& l, const FlagValue& v) { l.gamma = v.Number(); }),
      Schedule({"lr-warmup-epochs", FlagType::kInt,
                "  --lr-warmup-epochs W (0)   --lr-warmup-method linear|constant (linear)   --lr-warmup-decay D (0.01)\n"
                "                       torchvision's warmup: from D x LR over W epochs, then the schedule\n"},
               [](LrSchedule& l, const FlagValue& v) { l.warmup_epochs = static_cast<int>(v.Int()); }),
      Schedule({"lr-warmup-method", FlagType::kText, ""},
               [](LrSchedule& l, const FlagValue& v) { l.warmup = ParseLrWarmupMethod(v.Text()); }),
      Schedule({"lr-warmup-decay", FlagType::kNumber, ""},
               [](LrSchedule& l, const FlagValue& v) { l.warmup_decay = v.Number(); }),
      Schedule({"lr-per-step", FlagType::kBool,
                "  --lr-per-step        evaluate the schedule (warmup included) at every optimizer step, not once\n"
                "                       an epoch (gamma stays per epoch: ExponentialLR takes gamma^(1/steps) a step)\n"},
               [](LrSchedule& l, const FlagValue&) { l.per_step = true; }),
      Trainer({{"accumulate", FlagType::kInt,
                "  --accumulate N       N micro-batches of --batch per optimizer step, gradients averaged (as batch\n"
                "                       N x B; data parallel: one allreduce per step, like DDP's no_sync); N must\n"
                "                       divide an epoch's batches; --max-steps counts optimizer steps\n"},
               [](O& o, const FlagValue& v) {
                 o.accumulate = v.Int();
                 OT_CHECK(o.accumulate >= 1,
                          "--accumulate must be a whole number of micro-batches, 1 or more; got %s", v.Text().c_str());
               }}),
    });
    Append(&r, In(&S::autodiff, LossFlags()));
    Append(&r, {
      Trainer({{"mixup-alpha", FlagType::kNumber,
                "  --mixup-alpha A      torchvision's RandomMixup: each batch blended with itself rolled by one,\n"
                "                       lambda ~ Beta(A, A); the loss mixes the two labels' (0: off)\n"},
               [](O& o, const FlagValue& v) {
                 o.mixup_alpha = v.Number();
                 OT_CHECK(o.mixup_alpha >= 0 && std::isfinite(o.mixup_alpha),
                          "--mixup-alpha %g must be 0 (off) or positive, e.g. 0.2", o.mixup_alpha);
               }}),
      Trainer({{"cutmix-alpha", FlagType::kNumber,
                "  --cutmix-alpha A     torchvision's RandomCutmix (with --mixup-alpha: one of the two per batch)\n"},
               [](O& o, const FlagValue& v) {
                 o.cutmix_alpha = v.Number();
                 OT_CHECK(o.cutmix_alpha >= 0 && std::isfinite(o.cutmix_alpha),
                          "--cutmix-alpha %g must be 0 (off) or positive, e.g. 1.0", o.cutmix_alpha);
               }}),
      Trainer({"model-ema", FlagType::kBool,
               "  --model-ema          also keep an EMA of the weights and BatchNorm statistics (torchvision's):\n"
               "                       evaluated beside the model, checkpointed, written as epoch_N_ema.onnx\n"},
              &O::model_ema),
      Trainer({{"model-ema-steps", FlagType::kInt,
                "  --model-ema-steps N  update it every N steps (32)   --model-ema-decay D  (0.99998), adjusted as\n"
                "                       torchvision: 1 - min(1, (1 - D) * world * batch * N / epochs)\n"},
               [](O& o, const FlagValue& v) {
                 OT_CHECK(o.model_ema, "--model-ema-steps and --model-ema-decay need --model-ema");
                 o.model_ema_steps = v.Int();
               }}),
      Trainer({{"model-ema-decay", FlagType::kNumber, ""},
               [](O& o, const FlagValue& v) {
                 OT_CHECK(o.model_ema, "--model-ema-steps and --model-ema-decay need --model-ema");
                 o.model_ema_decay = v.Number();
               }}),
      Heading<S>("fine-tuning (PATTERNS: comma-separated initializer names or globs, * ? [..], e.g. 'features.*,fc.*'):\n"),
    });
    Append(&r, In(&S::autodiff, FreezeFlags()));
    Append(&r, {
      Set(kFreezeBnStatsFlag, [](S& s, const FlagValue&) { s.model.frozen_bn = true; }),
      Set(kFrozenBnFlag, [](S& s, const FlagValue&) { s.model.frozen_bn = true; }),
      Optimizer("param-group"),
      Heading<S>("evaluation and checkpoints:\n"),
      Trainer({"eval-every", FlagType::kInt, "  --eval-every N       test accuracy every N epochs (always at the end)\n"},
              &O::eval_every),
      Trainer({"save-every", FlagType::kInt, "  --save-every N       checkpoint every N epochs (always at the end)\n"},
              &O::save_every),
      Trainer({"checkpoint-dir", FlagType::kText, "  --checkpoint-dir D   (trained_models)   --no-checkpoints\n"},
              &O::checkpoint_dir),
      Trainer({{"no-checkpoints", FlagType::kBool, ""}, [](O& o, const FlagValue&) { o.save_checkpoints = false; }}),
      Trainer({"resume", FlagType::kText,
               "  --resume [PATH]      continue from PATH, or from the newest valid checkpoint in --checkpoint-dir\n"},
              &O::resume),
      Trainer({{"snapshot-every", FlagType::kInt,
                "  --snapshot-every S   also write a recovery snapshot every S steps (exact mid-epoch resume)\n"},
               [](O& o, const FlagValue& v) {
                 o.snapshot_every = v.Int();
                 OT_CHECK(o.snapshot_every >= 0, "--snapshot-every must be >= 0 and --keep >= 1");
               }}),
      Trainer({{"keep", FlagType::kInt, "  --keep N             snapshots kept (2)\n"},
               [](O& o, const FlagValue& v) {
                 o.keep_snapshots = static_cast<int>(v.Int());
                 OT_CHECK(o.keep_snapshots >= 1, "--snapshot-every must be >= 0 and --keep >= 1");
               }}),
      Heading<S>("output and runtime:\n"),
      Trainer({"metrics", FlagType::kText, "  --metrics FILE.jsonl one JSON object per step and per epoch\n"},
              &O::metrics_path),
      Trainer({"quiet", FlagType::kBool, "  --quiet              no progress bar\n"}, &O::quiet),
      Trainer(kThreadsFlag, &O::threads),
      Trainer({kConvAlgoFlag, [](O& o, const FlagValue& v) { o.executor.conv_algo = CheckedConvAlgo(v.Text()); }}),
      Trainer({kDeviceFlag, [](O& o, const FlagValue& v) { o.device = Device::Parse(v.Text()); }}),
      Trainer({kTf32Flag, [](O& o, const FlagValue&) { ApplyTf32Flag(true, o.device); }}),
      Trainer({kAmpFlag, [](O& o, const FlagValue& v) { o.amp = CheckedAmpMode(v.Text(), o.device); }}),
      Trainer({kLossScaleFlag, [](O& o, const FlagValue& v) { o.loss_scale = ParseLossScale(v.Text()); }}),
      Trainer({{"cuda-graphs", FlagType::kBool,
                "  --cuda-graphs        CUDA: replay each training step as one CUDA graph (same shapes;\n"
                "                       data-parallel runs and models with Dropout take the normal path)\n"},
               [](O& o, const FlagValue&) {
                 o.cuda_graphs = true;
                 OT_CHECK(o.device.type == DeviceType::kCUDA, "--cuda-graphs needs --device cuda");
               }}),
      Trainer({{"cudnn-workspace-mb", FlagType::kNumber,
                "  --cudnn-workspace-mb N  CUDA: at most N MiB of scratch for one convolution; cuDNN's\n"
                "                       next-ranked algorithm is taken when one needs more (no cap)\n"},
               [](O& o, const FlagValue& v) {
                 OT_CHECK(v.Number() >= 0, "--cudnn-workspace-mb must be >= 0 (0: no cap)");
                 o.executor.cuda_workspace_limit = static_cast<size_t>(v.Number() * 1048576.0);
               }}),
      Trainer({"max-steps", FlagType::kInt, "  --max-steps N        at most N steps per epoch (quick looks, tests)\n"},
              &O::max_steps_per_epoch),
      Heading<S>("launcher:\n"),
      In(&S::launch, Field(kWorldSizeFlag, &LaunchOptions::world_size)),
      In(&S::launch, Field(FlagInfo{"max-restarts", FlagType::kInt,
                                    "  --max-restarts K     when a worker fails, stop all and restart them from the newest\n"
                                    "                       checkpoint, up to K times (default 0)\n"},
                           &LaunchOptions::max_restarts)),
      In(&S::launch, Field(FlagInfo{"grace-period", FlagType::kNumber,
                                    "  --grace-period S     seconds between SIGTERM and SIGKILL when stopping workers (10)\n"},
                           &LaunchOptions::grace_seconds)),
      Set({"monitor-interval", FlagType::kNumber, "  --monitor-interval S how often the launcher checks its workers (0.2)\n"},
          [](S& s, const FlagValue& v) {
            s.launch.monitor_interval_seconds =
                Positive(v, "--monitor-interval must be positive and --heartbeat-timeout 0 or more");
          }),
      Set({"heartbeat-timeout", FlagType::kNumber,
           "  --heartbeat-timeout S a worker without a finished step for S seconds is taken as hung (0: off)\n"},
          [](S& s, const FlagValue& v) {
            s.launch.heartbeat_timeout_seconds = v.Number();
            OT_CHECK(s.launch.heartbeat_timeout_seconds >= 0,
                     "--monitor-interval must be positive and --heartbeat-timeout 0 or more");
          }),
      Trainer(kBackendFlag, &O::backend),
      Trainer({kTimeoutFlag, [](O& o, const FlagValue& v) {
                 o.comm_timeout_seconds = Positive(v, "--timeout must be positive (seconds)");
               }}),
      Trainer({{"bucket-cap-mb", FlagType::kNumber,
                "  --bucket-cap-mb M    gradients are allreduced in buckets of M MiB, the first 1 MiB (25)\n"},
               [](O& o, const FlagValue& v) {
                 o.bucket_cap_mb = v.Number();
                 OT_CHECK(o.bucket_cap_mb >= 1, "--bucket-cap-mb must be at least 1 (MiB)");
               }}),
      Field(FlagInfo{"rdzv", FlagType::kText,
                     "  --rdzv SPEC          rendezvous store: redis://HOST:PORT or file:DIR (default: a per-run folder)\n"},
            &S::rendezvous),
      Trainer({{"bind-addr", FlagType::kText,
                "  --bind-addr ADDR     address (or host name) this host's ranks listen on for their peers\n"
                "                       (env ONNXTRAIN_BIND_ADDR; default: loopback with a file store, else this\n"
                "                       host's name); peers on other hosts must reach it\n"},
               [](O& o, const FlagValue& v) {
                 OT_CHECK(!v.Text().empty(), "--bind-addr needs an address or host name");
                 o.bind_addr = v.Text();
               }}),
      Trainer({"lr-scale-world", FlagType::kBool, "  --lr-scale-world     multiply the learning rate by the world size\n"},
              &O::lr_scale_world),
      Trainer({"sync-bn", FlagType::kBool,
               "  --sync-bn            BatchNormalization statistics and gradients over all ranks' batches\n"
               "                       (PyTorch's SyncBatchNorm; CPU ranks; no effect with one rank)\n"},
              &O::sync_bn),
      Heading<S>("  (workers also start from torchrun, Slurm or Open MPI environments: RANK/WORLD_SIZE, ...)\n"),
    });
    return r;
  }();
  return rows;
}

const char* kTrainSynopsis =
    "usage: onnx-train MODEL.onnx [options]          train (the default command; also `onnx-train train ...`)\n"
    "\n";

// The command line that continues this run: onnx-train and the user's arguments without
// any --resume (the caller appends the one to continue from), quoted for a POSIX shell
// where needed.
std::string ContinueCommand(const std::vector<std::string>& argv) {
  std::string out = "onnx-train";
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.rfind("--resume", 0) == 0) {
      if (a == "--resume" && i + 1 < argv.size() && argv[i + 1].rfind("--", 0) != 0) ++i;
      continue;
    }
    bool plain = !a.empty();
    for (char c : a) plain = plain && (std::isalnum(static_cast<unsigned char>(c)) || std::strchr("-_./:=,+@%", c));
    std::string quoted = "'";
    for (char c : a) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += " " + (plain ? a : quoted + "'");
  }
  return out;
}

// What train reads from its environment before its flags settle (the rest, the worker's,
// in ReadWorkerEnvironment): whether a launcher started it, OMP_NUM_THREADS and the command
// that continues an interrupted run (ONNXTRAIN_CONTINUE_COMMAND, set by our launcher).
struct TrainEnvironment {
  bool is_worker = false;  // started by our launcher or by mpirun
  int omp_threads = 0;
  std::string continue_command;
  std::string rendezvous;  // ONNXTRAIN_RDZV, for the launcher's workers (--rdzv wins)
};

TrainEnvironment ReadTrainEnvironment() {
  TrainEnvironment e;
  e.is_worker = std::getenv(kEnvRank) != nullptr || StartedByMpirun();
  if (const char* t = std::getenv("OMP_NUM_THREADS")) e.omp_threads = std::max(0, std::atoi(t));
  if (const char* c = std::getenv(kEnvContinueCommand)) e.continue_command = c;
  if (const char* r = std::getenv(kEnvRendezvous)) e.rendezvous = r;
  return e;
}

// torchvision's flag names that mean what ours do, rewritten to ours, and `--resume` alone
// (the newest checkpoint) given its implicit value.
void NormaliseTrainArgv(std::vector<std::string>* argv) {
  static const std::map<std::string, std::string> kAliases = {{"--batch-size", "--batch"},
                                                              {"--opt", "--optimizer"},
                                                              {"--wd", "--weight-decay"},
                                                              {"--lr-scheduler", "--lr-schedule"},
                                                              {"--lr-step-size", "--lr-step"}};
  for (std::string& a : *argv) {
    const size_t eq = a.find('=');
    auto it = kAliases.find(a.substr(0, eq));
    if (it != kAliases.end()) a = it->second + (eq == std::string::npos ? "" : a.substr(eq));
  }
  for (size_t i = 0; i < argv->size(); ++i)
    if ((*argv)[i] == "--resume" && (i + 1 == argv->size() || (*argv)[i + 1].rfind("--", 0) == 0))
      (*argv)[i] = "--resume=latest";
}

// The settings that depend on several flags, checked once every row has run.
void FinishTrainSettings(const TrainEnvironment& env, const std::vector<std::string>& argv, S* s) {
  TrainerOptions& o = s->trainer;
  o.schedule.total_epochs = o.epochs;
  OT_CHECK(o.schedule.base_lr > 0 && std::isfinite(o.schedule.base_lr), "--lr must be a positive number");
  o.schedule.Check();
  o.model_ema_warmup_epochs = o.schedule.warmup_epochs;  // torchvision: EMA updates copy during warmup
  OT_CHECK(o.model_ema_decay > 0.0 && o.model_ema_decay < 1.0,
           "--model-ema-decay %g is outside (0, 1); torchvision's default is 0.99998", o.model_ema_decay);
  OT_CHECK(o.model_ema_steps >= 1, "--model-ema-steps must be at least 1");
  OT_CHECK(s->autodiff.loss != LossKind::kModel,
           "--loss model is for grad and export; training attaches its loss to the model's output: choose another "
           "--loss");
  o.loss = s->autodiff.loss;
  o.ignore_index = s->autodiff.ignore_index;
  o.smooth_l1_beta = s->autodiff.smooth_l1_beta;
  o.label_smoothing = s->autodiff.label_smoothing;
  o.freeze = s->autodiff.freeze;
  o.train_only = s->autodiff.train_only;
  o.continue_command = env.continue_command.empty() ? ContinueCommand(argv) : env.continue_command;
  OT_CHECK(o.backend != "mpi" || PluginBuilt("mpi"), "%s", NoMpiBackendMessage());
  s->model.batch = o.batch;
  s->model.seed = o.seed;
  s->model.class_scores = o.loss == LossKind::kAuto || o.loss == LossKind::kCrossEntropy;
}

// Several workers, or one that is restarted when it fails: the launcher starts them with
// this command line (--threads: each worker's share of the job's).
int LaunchTrainWorkers(const TrainEnvironment& env, const std::vector<std::string>& argv,
                       const std::string& model_path, S* s) {
  TrainerOptions& o = s->trainer;
  LaunchOptions& lo = s->launch;
  const int world = lo.world_size;
  lo.mpirun = o.backend == "mpi";
  if (lo.mpirun) MpirunCommand(world, {});  // mpirun missing: one line now
  lo.rendezvous = s->rendezvous.empty() ? env.rendezvous : s->rendezvous;
  lo.continue_command = o.continue_command;
  const int total = o.threads > 0 ? o.threads : static_cast<int>(std::thread::hardware_concurrency());
  lo.threads_per_worker = std::max(1, total / world);
  if (o.threads > 0 && o.threads < world)
    std::cout << "warning: --threads " << o.threads << " is fewer than --world-size " << world
              << "; each worker uses 1 thread (" << world << " in all)\n";
  // --threads is the whole job's: each worker gets its share, not the total (N workers
  // of T OpenMP threads each on T cores spend most of their time spinning in barriers).
  lo.worker_args.clear();
  for (size_t i = 0; i < argv.size(); ++i) {
    if (argv[i] == "--threads" && i + 1 < argv.size()) {
      ++i;
    } else if (argv[i].rfind("--threads=", 0) != 0) {
      lo.worker_args.push_back(argv[i]);
    }
  }
  lo.worker_args.push_back("--threads");
  lo.worker_args.push_back(std::to_string(lo.threads_per_worker));
  if (!o.save_checkpoints) lo.resume_flag.clear();
  // A model that cannot train as asked (a fixed batch other than --batch, a missing file)
  // fails here with one line, not once per worker.
  if (world > 1) PrepareExportedModel(LoadModel(model_path), s->model);
  return LaunchWorkers(lo);
}

// A rank shares the host's cores with its local peers: OMP_NUM_THREADS where the launcher
// set it (ours, mpirun through ours, torchrun), else the cores divided among the local
// ranks. Under srun or a plain mpirun every rank took every core before, and with MPI's
// busy polling two SimpleNN ranks on 2 cores ran 100x slower (20.7 s an epoch, 0.2 s).
void ShareCores(const TrainEnvironment& env, TrainerOptions* o) {
  const LaunchInfo& launch = o->launch;
  if (o->threads != 0 || launch.source.empty()) return;
  if (env.omp_threads > 0) {
    o->threads = env.omp_threads;
  } else if (launch.local_size > 1) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    o->threads = std::max(1, cores / launch.local_size);
    if (launch.rank <= 0)
      std::cout << "threads: " << o->threads << " per rank (" << cores << " cores, " << launch.local_size
                << " ranks of " << launch.source << " on this host; --threads N to choose)\n";
  }
}

// "training M on D: 5 epochs, batch 32, sgd lr 0.01 (constant)" and the model's notes.
std::string Headline(const Args& args, const TrainerOptions& o, const PreparedModel& prepared) {
  const int64_t ranks = std::max(1, o.launch.size);
  const std::string batch = ranks > 1 ? StrFormat("%lld per rank (%lld global)", (long long)o.batch,
                                                  (long long)(o.batch * ranks))
                                      : std::to_string(o.batch);
  std::ostringstream headline;  // printed by the trainer (rank 0) after what loading the data did
  headline << "training " << args.positional()[0] << " on " << o.data << ": " << o.epochs
           << (o.epochs == 1 ? " epoch" : " epochs") << ", batch " << batch << ", " << args.Get("optimizer", "sgd")
           << " lr " << o.schedule.base_lr << " (" << o.schedule.Describe() << ")";
  if (o.optimizer.momentum != 0.f) headline << ", momentum " << o.optimizer.momentum;
  if (o.accumulate > 1)
    headline << ", " << o.accumulate << " micro-batches a step (" << o.batch * o.accumulate * ranks << " images)";
  std::string out = headline.str();
  for (const auto& note : prepared.notes) out += "\n" + note;
  return out;
}

// The whole run's counts, also after a resume.
void PrintResult(const TrainResult& r) {
  std::cout << StrFormat("done: %d epoch%s, %lld steps", r.epochs_done, r.epochs_done == 1 ? "" : "s",
                         (long long)r.global_step);
  if (r.test_miou >= 0)  // segmentation
    std::cout << StrFormat("; test pixel accuracy %.2f%%, mean IoU %.4f", 100.0 * r.test_accuracy, r.test_miou);
  else if (r.test_loss >= 0)  // a language model: validation loss and perplexity
    std::cout << StrFormat("; validation loss %.4f, perplexity %.3f", r.test_loss, std::exp(r.test_loss));
  else if (r.test_rmse >= 0)
    std::cout << StrFormat("; test MAE %.4g, RMSE %.4g", r.test_mae, r.test_rmse);
  else if (r.test_exact_match >= 0)
    std::cout << StrFormat("; test exact match %.2f%%, mean F1 %.4f", 100.0 * r.test_exact_match, r.test_f1);
  else
    std::cout << StrFormat("; test accuracy %.2f%%", 100.0 * r.test_accuracy);
  if (!r.last_checkpoint.empty()) std::cout << "; model saved as " << r.last_checkpoint << ".onnx";
  std::cout << "\n";
}

}  // namespace

std::vector<FlagInfo> TrainFlagInfos() { return Infos(TrainFlags()); }
std::string TrainUsage() { return kTrainSynopsis + TableUsage(TrainFlagInfos()); }

int CmdTrain(std::vector<std::string> argv) {
  NormaliseTrainArgv(&argv);
  const Args args = ParseFlags(argv, TrainFlagInfos());
  OT_CHECK(args.positional().size() == 1, "training needs exactly one MODEL.onnx (%s)", SeeHelp().c_str());
  const TrainEnvironment env = ReadTrainEnvironment();
  S s;
  s.trainer.executor = ExecutorOptionsFromEnvironment();  // the profiling and layout knobs
  Apply(TrainFlags(), args, &s);
  FinishTrainSettings(env, argv, &s);
  TrainerOptions& o = s.trainer;
  // A rank that mpirun started (with --world-size passed on by the launcher) trains.
  if (!env.is_worker && (s.launch.world_size > 1 || s.launch.max_restarts > 0))
    return LaunchTrainWorkers(env, argv, args.positional()[0], &s);
  // onnx-train's launcher, torchrun, Slurm, MPI (whose backend needs no rendezvous store).
  o.launch = LaunchInfoFromEnvironment(ProcessEnvironment(s.rendezvous), o.backend != "mpi");
  ShareCores(env, &o);
  // Exports from PyTorch: a fixed batch rebound (or checked against --batch, before any
  // training), BatchNormalization in training form or frozen.
  PreparedModel prepared = PrepareExportedModel(LoadModel(args.positional()[0]), s.model);
  o.freeze.insert(o.freeze.end(), prepared.freeze.begin(), prepared.freeze.end());
  o.fixed_batch = prepared.fixed_batch;
  o.headline = Headline(args, o, prepared);
  ReadWorkerEnvironment(&o);
  TrainResult r = RunTraining(std::move(prepared.model), o);
  if (r.interrupted) return kInterruptedExitStatus;  // the trainer said where it stopped
  if (o.launch.rank > 0 || r.already_complete) return 0;  // a finished run said so, with no figures to report
  PrintResult(r);
  return 0;
}

namespace {

// Class names for `eval --per-class`: classes.txt beside the model (one name a line, in
// label order, as onnx-train writes for image folders), else the data set's class folders,
// else Fashion-MNIST's own names for that data set, else none.
std::vector<std::string> ClassNames(const std::string& model_path, const ImageDataset& data) {
  const size_t slash = model_path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : model_path.substr(0, slash);
  std::ifstream in(dir + "/classes.txt");
  std::vector<std::string> names;
  for (std::string line; std::getline(in, line);) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    names.push_back(line);
  }
  if (!names.empty()) return names;
  if (!data.class_names.empty()) return data.class_names;  // an image folder's class folders
  if (data.name.rfind("fashion-mnist", 0) == 0)
    return {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};
  return {};
}

}  // namespace

namespace {

// What `onnx-train eval` is told.
struct EvalSettings {
  DataSourceOptions data;
  ExecutorOptions exec = ExecutorOptionsFromEnvironment();
  std::string spec = "fashion-mnist", split = "test";
  int64_t batch = 256;
  uint64_t seed = 0;
  LossKind loss = LossKind::kAuto;
  int64_t ignore_index = -100;
  bool per_class = false;
};

const FlagTable<EvalSettings>& EvalFlags() {
  using E = EvalSettings;
  static const FlagTable<E> rows = [] {
    FlagTable<E> r = {
        Field(kDataFlag, &E::spec),
        {{"split", FlagType::kText, "  --split test|train   the split to score (test)\n"},
         [](E& e, const FlagValue& v) {
           OT_CHECK(v.Text() == "test" || v.Text() == "train", "--split takes test or train, not '%s'",
                    v.Text().c_str());
           e.split = v.Text();
         }},
        Field(FlagInfo{"per-class", FlagType::kBool, "  --per-class          a table per class\n"}, &E::per_class),
        Field(FlagInfo{"batch", FlagType::kInt, "  --batch B            images per forward pass (256)\n"}, &E::batch),
        In(&E::exec, ExecutorFlag("device")),
        In(&E::exec, ExecutorFlag("threads")),
        Field(kSeedFlag, &E::seed),
        {{"loss", FlagType::kText, "  --loss NAME          mse, l1, smooth-l1, bce-with-logits: float targets, scored as train scores them\n"},
         [](E& e, const FlagValue& v) { e.loss = ParseLossKind(v.Text()); }},
        Field(FlagInfo{"ignore-index", FlagType::kInt,
                       "  --ignore-index I     cross-entropy and nll: positions labelled I count for nothing (-100)\n"},
              &E::ignore_index),
    };
    for (const auto& rows : {DataFlags(), Without(TransformFlags(), {"hflip"})})
      for (const auto& f : rows) r.push_back(In(&E::data, f));
    return r;
  }();
  return rows;
}

}  // namespace

std::vector<FlagInfo> EvalFlagInfos() { return Infos(EvalFlags()); }

int CmdEval(const std::vector<std::string>& argv) {
  const Args args = ParseFlags(argv, EvalFlagInfos());
  OT_CHECK(args.positional().size() == 1, "eval needs exactly one MODEL.onnx (%s)", SeeHelp().c_str());
  EvalSettings e;
  Apply(EvalFlags(), args, &e);
  ExportedModelOptions eo;
  eo.training = false;
  const PreparedModel prepared = PrepareExportedModel(LoadModel(args.positional()[0]), eo);
  const Model& model = prepared.model;
  const ExecutorOptions& opts = e.exec;
  const std::string &spec = e.spec, &split = e.split;
  // The same data fitting and checks as train: data of another shape is adapted to the
  // model's input, synthetic data takes its shape, and a model that cannot score this data
  // set's classes is an error, not a low accuracy.
  DataSourceOptions& flags = e.data;
  // --loss mse/l1/smooth-l1/bce-with-logits: float targets, scored as the trainer scores them.
  const LossKind loss = e.loss;
  flags.float_targets = !IsClassIndexLoss(loss) && loss != LossKind::kModel;
  DataSourceOptions source = DataSourceForModel(model, spec, e.seed, flags);
  if (source.data_workers == 0) source.data_workers = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / 4);
  ImageDataset data = LoadImageDataset(spec, split, source);
  CheckDataFitsInput(model.graph.inputs[0], data);
  OT_CHECK(!model.graph.outputs.empty(), "the model has no outputs");
  CheckLabelsFitOutput(model.graph.outputs[0], data);
  Executor exec(model, opts);
  for (const auto& note : prepared.notes) std::cout << note << "\n";
  for (const std::string& note : data.notes) std::cout << note << "\n";
  const std::string input = model.graph.inputs[0].name;
  const int64_t batch = prepared.fixed_batch > 0 ? prepared.fixed_batch : e.batch;
  OT_CHECK(batch >= 1, "--batch must be at least 1");
  auto run = [&](const Tensor& x, const std::map<std::string, Tensor>& extra) {
    std::map<std::string, Tensor> feeds = {{input, x}};
    feeds.insert(extra.begin(), extra.end());
    return exec.Run(feeds)[0];
  };
  CheckEveryInputFed(model, data, spec);
  const TaskSpec task = TaskFor(loss, model, model.graph.outputs[0], data, e.ignore_index);
  const std::string spec_split = spec + " " + split;
  if (task.kind != TaskKind::kClasses || !e.per_class) {  // every task's figures in one line
    const TaskFigures f = EvaluateSplit(task, run, data, batch, opts.device, prepared.fixed_batch > 0);
    std::cout << EvalLine(task, f, spec_split) << "\n";
    return 0;
  }
  Accuracy acc = EvaluateAccuracy(run, data, batch, opts.device, prepared.fixed_batch > 0);
  std::cout << StrFormat("%s accuracy: %.2f%% (%lld of %lld)\n", spec_split.c_str(), 100.0 * acc.Fraction(),
                         (long long)acc.correct, (long long)acc.total);
  if (e.per_class) std::cout << PerClassTable(acc, ClassNames(args.positional()[0], data));
  return 0;
}

}  // namespace ot
