// `onnx-train MODEL.onnx [options]` (train) and `onnx-train eval MODEL.onnx`: flag parsing
// with the recipes' defaults, then the trainer or the evaluator.
#include "tools/train_command.h"

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
#include "graph/error.h"
#include "graph/onnx_io.h"
#include "graph/param_patterns.h"
#include "runtime/plugin.h"
#include "runtime/executor.h"
#include "tools/args.h"
#include "tools/cli_util.h"
#include "tools/launcher.h"
#include "train/data_for_model.h"
#include "train/evaluate.h"
#include "train/exported_model.h"
#include "train/image_dataset.h"
#include "train/interrupt.h"
#include "train/model_input_check.h"
#include "train/token_dataset.h"
#include "train/trainer.h"
#include "tools/executor_environment.h"

namespace ot {

const char* kTrainUsage =
    "usage: onnx-train MODEL.onnx [options]          train (the default command; also `onnx-train train ...`)\n"
    "\n"
    "data:\n"
    "  --data SPEC          fashion-mnist (default; Debian's dataset-fashion-mnist), fashion-mnist:DIR,\n"
    "                       mnist:DIR, cifar10:DIR, synthetic[:N[:CxHxW]] (the model's input shape if not given;\n"
    "                       a non-image input gets samples of its own shape: token ids below its embedding's\n"
    "                       rows, or float features),\n"
    "                       imagefolder:DIR (ROOT/<class>/*.jpg|png;\n"
    "                       DIR/train + DIR/val|test when present), npy:X.npy,Y.npy[,XTEST.npy,YTEST.npy],\n"
    "                       npz:FILE.npz (arrays x, y[, x_test, y_test]; token ids x [N,T] with y [N,T]),\n"
    "                       tokens:TRAIN.bin[,VAL.bin] (flat token files as nanoGPT and llm.c write them,\n"
    "                       memory-mapped; without VAL.bin the last --val-fraction is validation)\n"
    "  --seq-len T          tokens: tokens per sample (default: the model's input length if fixed); samples\n"
    "                       are x = tokens[o:o+T], labels the next tokens[o+1:o+T+1], at seeded random\n"
    "                       offsets o; an epoch is (tokens - 1) / T samples; validation windows follow\n"
    "                       one another\n"
    "  --token-dtype TYPE   tokens: uint16 (default, nanoGPT's), uint32 or int32 (llm.c's header sets it)\n"
    "  --npz-keys X,Y[,XT,YT] array names in the .npz\n"
    "  --input-map NAME=KEY the npz array KEY feeds the model input NAME (repeatable; default: arrays named\n"
    "                       after the inputs, and y or labels)\n"
    "  --val-fraction F     held-out share when the data has no test split (0.1)\n"
    "  --data-workers N     threads decoding and transforming images (default: a quarter of --threads)\n"
    "  --skip-bad-images    leave out (and list) image files that do not decode, instead of failing\n"
    "transforms (torchvision's; without size flags images are resized to the model's input):\n"
    "  --resize N           shorter side to N (bilinear, antialiased)   --center-crop N\n"
    "  --random-resized-crop N  training crops of scale 0.08-1, ratio 3/4-4/3 resized to N x N\n"
    "                       (evaluation: --resize N, --center-crop N)\n"
    "  --hflip              random horizontal flips in training\n"
    "  --mean a[,b,c] --std a[,b,c]  Normalize, on the [0, 1] scale (default: the data set's, or none)\n"
    "  --augment            random crop (4-pixel padding) and horizontal flip\n"
  "  --random-erase P     torchvision's RandomErasing with probability P per image (scale 0.02-0.33,\n"
  "                       ratio 0.3-3.3, value 0 after normalisation)\n"
    "  --no-shuffle         keep the data set's order\n"
    "  --seed S             shuffling, augmentation and initial randomness (default 0)\n"
    "model:\n"
    "  --num-classes K|auto replace the final classifier (Gemm, MatMul+Add or 1x1 Conv) with a fresh K-way\n"
    "                       layer initialised as PyTorch's nn.Linear/nn.Conv2d from --seed; auto: the data\n"
    "                       set's class count (image folder class folders)\n"
    "recipe:\n"
    "  --recipe NAME        simplenn: SGD lr 0.01, batch 32, 5 epochs (the defaults)\n"
    "                       resnet34: SGD lr 0.1 momentum 0.9, StepLR 5 x0.1, batch 128, 15 epochs,\n"
    "                       checkpoint every 3 epochs\n"
    "  --epochs N           (5)            --batch B            (32; also --batch-size)\n"
    "  --optimizer sgd|adam|adamw|rmsprop|adagrad (sgd; also --opt)   --lr LR (0.01)\n"
    "  --momentum M         (0; SGD, RMSprop)   --nesterov\n"
    "  --weight-decay W     (0; also --wd): L2 added to the gradient; AdamW: decoupled, as torch's\n"
    "  --norm-weight-decay W  weight decay of normalisation scales and biases (default: --weight-decay)\n"
    "  --bias-weight-decay W  weight decay of biases, before --norm-weight-decay (default: --weight-decay)\n"
    "  --beta1 B1 --beta2 B2 --epsilon E   Adam's and AdamW's (0.9, 0.999, 1e-8); E: RMSprop's too\n"
    "  --rmsprop-alpha A    (0.99)         --centered           RMSprop's, as torch's\n"
    "  --clip-grad-norm M   scale the gradients so that their global 2-norm is at most M\n"
    "                       (torch's clip_grad_norm_; after the data-parallel average)\n"
    "  --lr-schedule constant|step|cosine|exponential (constant; also --lr-scheduler, and torchvision's\n"
    "                       names steplr, cosineannealinglr, exponentiallr)\n"
    "  --lr-step N (5; also --lr-step-size)   --lr-gamma G (0.1): StepLR every N epochs, ExponentialLR per epoch\n"
    "  --lr-warmup-epochs W (0)   --lr-warmup-method linear|constant (linear)   --lr-warmup-decay D (0.01)\n"
    "                       torchvision's warmup: from D x LR over W epochs, then the schedule\n"
    "  --lr-per-step        evaluate the schedule (warmup included) at every optimizer step, not once\n"
    "                       an epoch (gamma stays per epoch: ExponentialLR takes gamma^(1/steps) a step)\n"
    "  --accumulate N       N micro-batches of --batch per optimizer step, gradients averaged (as batch\n"
    "                       N x B; data parallel: one allreduce per step, like DDP's no_sync); N must\n"
    "                       divide an epoch's batches; --max-steps counts optimizer steps\n"
    "  --loss NAME          cross-entropy (default): scores [N,K] with labels [N], per token [N,T,V]\n"
    "                       (classes last) with labels [N,T], per pixel [N,C,H,W] with labels [N,H,W];\n"
    "                       nll (the model outputs log-probabilities); mse, l1, smooth-l1, bce-with-logits\n"
    "                       (float32 targets shaped as the output); mean reduction, PyTorch's meanings\n"
    "  --ignore-index I     cross-entropy and nll: positions labelled I count for nothing (-100)\n"
    "  --smooth-l1-beta B   SmoothL1Loss's beta (1.0)\n"
    "  --label-smoothing E  the loss as PyTorch's CrossEntropyLoss(label_smoothing=E), 0 <= E < 1 (0)\n"
    "  --mixup-alpha A      torchvision's RandomMixup: each batch blended with itself rolled by one,\n"
    "                       lambda ~ Beta(A, A); the loss mixes the two labels' (0: off)\n"
    "  --cutmix-alpha A     torchvision's RandomCutmix (with --mixup-alpha: one of the two per batch)\n"
    "  --model-ema          also keep an EMA of the weights and BatchNorm statistics (torchvision's):\n"
    "                       evaluated beside the model, checkpointed, written as epoch_N_ema.onnx\n"
    "  --model-ema-steps N  update it every N steps (32)   --model-ema-decay D  (0.99998), adjusted as\n"
    "                       torchvision: 1 - min(1, (1 - D) * world * batch * N / epochs)\n"
    "fine-tuning (PATTERNS: comma-separated initializer names or globs, * ? [..], e.g. 'features.*,fc.*'):\n"
    "  --freeze PATTERNS    initializers that stay fixed (no gradient is computed for them)\n"
    "  --train-only PATTERNS  only these train; everything else stays fixed (with --freeze: minus those)\n"
    "  --freeze-bn-stats    BatchNormalization normalises with its running statistics, which stay fixed,\n"
    "                       while scale and bias train (PyTorch's bn.eval(); also --frozen-bn)\n"
    "                       (default: training form, and layers PyTorch folded in eval mode restored)\n"
    "  --param-group 'PATTERNS:lr=X,wd=Y'  (repeatable) lr and weight decay of the matching parameters:\n"
    "                       lr=0.001 absolute, lr=0.1x a factor of --lr; the schedule scales all groups\n"
    "                       alike; a later group overrides an earlier one\n"
    "evaluation and checkpoints:\n"
    "  --eval-every N       test accuracy every N epochs (always at the end)\n"
    "  --save-every N       checkpoint every N epochs (always at the end)\n"
    "  --checkpoint-dir D   (trained_models)   --no-checkpoints\n"
    "  --resume [PATH]      continue from PATH, or from the newest valid checkpoint in --checkpoint-dir\n"
    "  --snapshot-every S   also write a recovery snapshot every S steps (exact mid-epoch resume)\n"
    "  --keep N             snapshots kept (2)\n"
    "output and runtime:\n"
    "  --metrics FILE.jsonl one JSON object per step and per epoch\n"
    "  --quiet              no progress bar\n"
    "  --threads N          CPU threads (default: all)\n"
    "  --conv-algo auto|direct|winograd|taps|winograd2|winograd4  CPU convolutions: oneDNN's\n"
    "                       direct or Winograd F(4x4,3x3) (AVX-512) primitives, products over the\n"
    "                       kernel taps that touch data (2D stride 1: small padded maps), or our\n"
    "                       Winograd on sgemm for 3x3 stride 1 pad 1: F(2x2,3x3), or F(4x4,3x3) in\n"
    "                       the backward pass; auto: the fastest, timed once per shape at plan time\n"
    "  --device cpu|cuda[:K] with --world-size N on CUDA, local rank i uses cuda:((K + i) mod GPUs)\n"
    "  --tf32               CUDA: float32 matrix products and convolutions on TF32 tensor cores\n"
    "  --cuda-graphs        CUDA: replay each training step as one CUDA graph (same shapes;\n"
    "                       data-parallel runs and models with Dropout take the normal path)\n"
    "  --max-steps N        at most N steps per epoch (quick looks, tests)\n"
    "launcher:\n"
    "  --world-size N       N worker processes on this host (threads split among them)\n"
    "  --max-restarts K     when a worker fails, stop all and restart them from the newest\n"
    "                       checkpoint, up to K times (default 0)\n"
    "  --grace-period S     seconds between SIGTERM and SIGKILL when stopping workers (10)\n"
    "  --monitor-interval S how often the launcher checks its workers (0.2)\n"
    "  --heartbeat-timeout S a worker without a finished step for S seconds is taken as hung (0: off)\n"
    "  --backend auto|gloo|nccl|mpi  collectives for data-parallel training (auto: NCCL for CUDA, else Gloo;\n"
    "                             mpi: Open MPI, ranks started by mpirun, or by --world-size through mpirun)\n"
    "  --timeout S          a collective, or a rank that does not join, fails after S seconds (300)\n"
    "  --bucket-cap-mb M    gradients are allreduced in buckets of M MiB, the first 1 MiB (25)\n"
    "  --rdzv SPEC          rendezvous store: redis://HOST:PORT or file:DIR (default: a per-run folder)\n"
    "  --bind-addr ADDR     address (or host name) this host's ranks listen on for their peers\n"
    "                       (env ONNXTRAIN_BIND_ADDR; default: loopback with a file store, else this\n"
    "                       host's name); peers on other hosts must reach it\n"
    "  --lr-scale-world     multiply the learning rate by the world size\n"
    "  --sync-bn            BatchNormalization statistics and gradients over all ranks' batches\n"
    "                       (PyTorch's SyncBatchNorm; CPU ranks; no effect with one rank)\n"
    "  (workers also start from torchrun, Slurm or Open MPI environments: RANK/WORLD_SIZE, ...)\n";

namespace {

// The data flags shared by train and eval.
void ReadDataSourceFlags(const Args& args, DataSourceOptions* d) {
  TransformOptions& t = d->transforms;
  t.resize = args.GetInt("resize", 0);
  t.center_crop = args.GetInt("center-crop", 0);
  t.random_resized_crop = args.GetInt("random-resized-crop", 0);
  OT_CHECK(t.resize >= 0 && t.center_crop >= 0 && t.random_resized_crop >= 0,
           "--resize, --center-crop and --random-resized-crop take a positive size");
  t.hflip = args.Has("hflip");
  if (args.Has("mean")) t.mean = ParseFloatList(args.Get("mean"), "--mean");
  if (args.Has("std")) t.stddev = ParseFloatList(args.Get("std"), "--std");
  d->data_workers = static_cast<int>(args.GetInt("data-workers", 0));
  OT_CHECK(d->data_workers >= 0, "--data-workers must be 1 or more (0: from the thread budget)");
  d->val_fraction = args.GetDouble("val-fraction", d->val_fraction);
  d->npz_keys = SplitList(args.Get("npz-keys"));
  for (const std::string& m : args.GetAll("input-map")) {
    const size_t eq = m.find('=');
    OT_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < m.size(),
             "--input-map takes INPUT=ARRAY (a model input and the npz array that feeds it), got '%s'", m.c_str());
    d->input_map[m.substr(0, eq)] = m.substr(eq + 1);
  }
  d->skip_bad_images = args.Has("skip-bad-images");
  d->token_seq_len = args.GetInt("seq-len", 0);
  OT_CHECK(d->token_seq_len >= 0, "--seq-len takes the tokens per sample, 1 or more");
  if (args.Has("token-dtype")) d->token_dtype = ParseTokenDType(args.Get("token-dtype"));
}

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

// Set by the launcher for its workers: the user's command, to continue an interrupted run.
constexpr const char* kEnvContinueCommand = "ONNXTRAIN_CONTINUE_COMMAND";

}  // namespace

// torchvision's flag names that mean what ours do: rewritten to ours before parsing.
void ApplyFlagAliases(std::vector<std::string>* argv) {
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
}

int CmdTrain(std::vector<std::string> argv) {
  ApplyFlagAliases(&argv);
  // `--resume` alone means the newest checkpoint: give it its implicit value.
  for (size_t i = 0; i < argv.size(); ++i)
    if (argv[i] == "--resume" && (i + 1 == argv.size() || argv[i + 1].rfind("--", 0) == 0))
      argv[i] = "--resume=latest";
  Args args(argv,
            {"data", "seed", "recipe", "epochs", "batch", "optimizer", "lr", "momentum", "weight-decay", "beta1",
             "beta2", "epsilon", "lr-schedule", "lr-step", "lr-gamma", "freeze", "eval-every", "save-every",
             "checkpoint-dir", "resume", "metrics", "threads", "device", "max-steps", "world-size", "max-restarts",
             "grace-period", "snapshot-every", "keep", "backend", "timeout", "rdzv", "monitor-interval", "bucket-cap-mb",
             "heartbeat-timeout", "bind-addr", "data-workers", "resize", "center-crop", "random-resized-crop", "mean",
             "std", "val-fraction", "npz-keys", "lr-warmup-epochs", "lr-warmup-method", "lr-warmup-decay",
             "norm-weight-decay", "bias-weight-decay", "clip-grad-norm", "rmsprop-alpha", "accumulate",
             "label-smoothing", "random-erase", "model-ema-steps", "model-ema-decay", "mixup-alpha", "cutmix-alpha",
             "conv-algo", "train-only", "param-group", "num-classes", "seq-len", "token-dtype", "loss", "ignore-index", "smooth-l1-beta", "input-map"},
            {"augment", "no-shuffle", "nesterov", "no-checkpoints", "quiet", "help", "lr-scale-world", "tf32",
             "cuda-graphs", "hflip", "skip-bad-images", "frozen-bn", "freeze-bn-stats", "sync-bn", "centered",
             "lr-per-step", "model-ema"});
  if (args.Has("help")) {
    std::cout << kTrainUsage;
    return 0;
  }
  OT_CHECK(args.positional().size() == 1, "training needs exactly one MODEL.onnx (%s)", SeeHelp().c_str());
  TrainerOptions o;
  ApplyRecipe(args.Get("recipe", "simplenn"), &o);
  o.data = args.Get("data", o.data);
  o.seed = static_cast<uint64_t>(args.GetInt("seed", 0));
  o.epochs = static_cast<int>(args.GetInt("epochs", o.epochs));
  o.batch = args.GetInt("batch", o.batch);
  o.accumulate = args.GetInt("accumulate", 1);
  OT_CHECK(o.accumulate >= 1, "--accumulate must be a whole number of micro-batches, 1 or more; got %s",
           args.Get("accumulate").c_str());
  o.optimizer.kind = ParseOptimizerKind(args.Get("optimizer", "sgd"));
  o.schedule.base_lr = args.GetDouble("lr", o.schedule.base_lr);
  o.optimizer.momentum = static_cast<float>(args.GetDouble("momentum", o.optimizer.momentum));
  o.optimizer.nesterov = args.Has("nesterov");
  o.optimizer.weight_decay = static_cast<float>(args.GetDouble("weight-decay", 0.0));
  o.optimizer.beta1 = static_cast<float>(args.GetDouble("beta1", o.optimizer.beta1));
  o.optimizer.beta2 = static_cast<float>(args.GetDouble("beta2", o.optimizer.beta2));
  o.optimizer.epsilon = static_cast<float>(args.GetDouble("epsilon", o.optimizer.epsilon));
  if (args.Has("lr-schedule")) o.schedule.kind = ParseLrScheduleKind(args.Get("lr-schedule"));
  o.schedule.step_size = static_cast<int>(args.GetInt("lr-step", o.schedule.step_size));
  o.schedule.gamma = args.GetDouble("lr-gamma", o.schedule.gamma);
  o.schedule.total_epochs = o.epochs;
  o.schedule.warmup_epochs = static_cast<int>(args.GetInt("lr-warmup-epochs", 0));
  if (args.Has("lr-warmup-method")) o.schedule.warmup = ParseLrWarmupMethod(args.Get("lr-warmup-method"));
  o.schedule.warmup_decay = args.GetDouble("lr-warmup-decay", o.schedule.warmup_decay);
  o.schedule.per_step = args.Has("lr-per-step");
  OT_CHECK(o.schedule.base_lr > 0 && std::isfinite(o.schedule.base_lr), "--lr must be a positive number");
  o.schedule.Check();
  const auto decay_flag = [&](const char* flag) {
    const double v = args.GetDouble(flag, std::nan(""));
    OT_CHECK(std::isnan(v) || (v >= 0 && std::isfinite(v)), "--%s must be 0 or more", flag);
    return static_cast<float>(v);
  };
  OT_CHECK(o.optimizer.weight_decay >= 0 && std::isfinite(o.optimizer.weight_decay),
           "--weight-decay must be 0 or more");
  o.optimizer.norm_weight_decay = decay_flag("norm-weight-decay");
  o.optimizer.bias_weight_decay = decay_flag("bias-weight-decay");
  o.optimizer.rmsprop_alpha = static_cast<float>(args.GetDouble("rmsprop-alpha", o.optimizer.rmsprop_alpha));
  o.optimizer.rmsprop_centered = args.Has("centered");
  OT_CHECK(o.optimizer.rmsprop_alpha >= 0 && o.optimizer.rmsprop_alpha < 1, "--rmsprop-alpha must be in [0, 1)");
  OT_CHECK(!o.optimizer.rmsprop_centered || o.optimizer.kind == OptimizerConfig::Kind::kRmsprop,
           "--centered is RMSprop's; add --optimizer rmsprop or leave it out");
  OT_CHECK(o.optimizer.momentum >= 0, "--momentum must be 0 or more");
  const double clip = args.GetDouble("clip-grad-norm", 0.0);
  OT_CHECK(clip >= 0 && std::isfinite(clip) && !(args.Has("clip-grad-norm") && clip == 0),
           "--clip-grad-norm must be a positive number (the largest global gradient norm), got %s",
           args.Get("clip-grad-norm").c_str());
  o.optimizer.clip_grad_norm = static_cast<float>(clip);
  o.freeze = SplitPatternList(args.Get("freeze"));
  o.train_only = SplitPatternList(args.Get("train-only"));
  OT_CHECK(!args.Has("train-only") || !o.train_only.empty(), "--train-only needs patterns, e.g. --train-only 'fc.*'");
  for (const std::string& spec : args.GetAll("param-group")) o.optimizer.groups.push_back(ParseParamGroup(spec));
  o.augment = args.Has("augment");
  o.label_smoothing = ParseLabelSmoothing(args);
  {
    AutodiffOptions loss;
    ReadLossFlags(args, &loss);
    OT_CHECK(loss.loss != LossKind::kModel,
             "--loss model is for grad and export; training attaches its loss to the model's output: choose another "
             "--loss");
    o.loss = loss.loss;
    o.ignore_index = loss.ignore_index;
    o.smooth_l1_beta = loss.smooth_l1_beta;
  }
  o.random_erase = ParseProbability(args, "random-erase");
  o.mixup_alpha = args.GetDouble("mixup-alpha", 0.0);
  o.cutmix_alpha = args.GetDouble("cutmix-alpha", 0.0);
  OT_CHECK(o.mixup_alpha >= 0 && std::isfinite(o.mixup_alpha), "--mixup-alpha %g must be 0 (off) or positive, e.g. 0.2",
           o.mixup_alpha);
  OT_CHECK(o.cutmix_alpha >= 0 && std::isfinite(o.cutmix_alpha),
           "--cutmix-alpha %g must be 0 (off) or positive, e.g. 1.0", o.cutmix_alpha);
  o.model_ema = args.Has("model-ema");
  o.model_ema_steps = args.GetInt("model-ema-steps", o.model_ema_steps);
  o.model_ema_decay = args.GetDouble("model-ema-decay", o.model_ema_decay);
  o.model_ema_warmup_epochs = o.schedule.warmup_epochs;  // torchvision: EMA updates copy during warmup
  OT_CHECK(o.model_ema || (!args.Has("model-ema-steps") && !args.Has("model-ema-decay")),
           "--model-ema-steps and --model-ema-decay need --model-ema");
  OT_CHECK(o.model_ema_decay > 0.0 && o.model_ema_decay < 1.0,
           "--model-ema-decay %g is outside (0, 1); torchvision's default is 0.99998", o.model_ema_decay);
  OT_CHECK(o.model_ema_steps >= 1, "--model-ema-steps must be at least 1");
  o.shuffle = !args.Has("no-shuffle");
  o.eval_every = static_cast<int>(args.GetInt("eval-every", 0));
  o.save_every = static_cast<int>(args.GetInt("save-every", o.save_every));
  o.checkpoint_dir = args.Get("checkpoint-dir", o.checkpoint_dir);
  o.save_checkpoints = !args.Has("no-checkpoints");
  o.resume = args.Get("resume");
  o.metrics_path = args.Get("metrics");
  o.quiet = args.Has("quiet");
  o.threads = static_cast<int>(args.GetInt("threads", 0));
  o.executor = ExecutorOptionsFromEnvironment();
  o.executor.conv_algo = CheckedConvAlgo(args.Get("conv-algo", "auto"));
  o.device = Device::Parse(args.Get("device", "cpu"));
  ApplyTf32Flag(args.Has("tf32"), o.device);
  o.cuda_graphs = args.Has("cuda-graphs");
  OT_CHECK(!o.cuda_graphs || o.device.type == DeviceType::kCUDA, "--cuda-graphs needs --device cuda");
  o.max_steps_per_epoch = args.GetInt("max-steps", -1);
  o.backend = args.Get("backend", "auto");
  o.comm_timeout_seconds = args.GetDouble("timeout", 300.0);
  OT_CHECK(o.comm_timeout_seconds > 0, "--timeout must be positive (seconds)");
  o.bucket_cap_mb = args.GetDouble("bucket-cap-mb", 25.0);
  OT_CHECK(o.bucket_cap_mb >= 1, "--bucket-cap-mb must be at least 1 (MiB)");
  o.lr_scale_world = args.Has("lr-scale-world");
  o.sync_bn = args.Has("sync-bn");
  if (args.Has("rdzv")) ::setenv(kEnvRendezvous, args.Get("rdzv").c_str(), 1);
  if (args.Has("bind-addr")) {
    OT_CHECK(!args.Get("bind-addr").empty(), "--bind-addr needs an address or host name");
    ::setenv("ONNXTRAIN_BIND_ADDR", args.Get("bind-addr").c_str(), 1);
  }
  ReadDataSourceFlags(args, &o.data_source);
  o.snapshot_every = args.GetInt("snapshot-every", 0);
  o.keep_snapshots = static_cast<int>(args.GetInt("keep", 2));
  OT_CHECK(o.snapshot_every >= 0 && o.keep_snapshots >= 1, "--snapshot-every must be >= 0 and --keep >= 1");
  if (const char* cmd = std::getenv(kEnvContinueCommand)) {
    o.continue_command = cmd;
  } else {
    o.continue_command = ContinueCommand(argv);
    ::setenv(kEnvContinueCommand, o.continue_command.c_str(), 1);  // for the launcher's workers
  }

  // The launcher: several workers, or one that is restarted when it fails.
  const int world = static_cast<int>(args.GetInt("world-size", 1));
  const int restarts = static_cast<int>(args.GetInt("max-restarts", 0));
  OT_CHECK(o.backend != "mpi" || PluginBuilt("mpi"), "%s", NoMpiBackendMessage());
  // A rank that mpirun started (with --world-size passed on by the launcher) trains.
  if (std::getenv(kEnvRank) == nullptr && !StartedByMpirun() && (world > 1 || restarts > 0)) {
    LaunchOptions lo;
    lo.world_size = world;
    lo.mpirun = o.backend == "mpi";
    if (lo.mpirun) MpirunCommand(world, {});  // mpirun missing: one line now
    lo.worker_args = argv;
    lo.max_restarts = restarts;
    lo.grace_seconds = args.GetDouble("grace-period", 10.0);
    lo.monitor_interval_seconds = args.GetDouble("monitor-interval", 0.2);
    lo.heartbeat_timeout_seconds = args.GetDouble("heartbeat-timeout", 0.0);
    OT_CHECK(lo.monitor_interval_seconds > 0 && lo.heartbeat_timeout_seconds >= 0,
             "--monitor-interval must be positive and --heartbeat-timeout 0 or more");
    const int total = o.threads > 0 ? o.threads : static_cast<int>(std::thread::hardware_concurrency());
    lo.threads_per_worker = std::max(1, total / world);
    if (o.threads > 0 && o.threads < world)
      std::cout << "warning: --threads " << o.threads << " is fewer than --world-size " << world
                << "; each worker uses 1 thread (" << world << " in all)\n";
    // --threads is the whole job's: each worker gets its share, not the total (N workers
    // of T OpenMP threads each on T cores spend most of their time spinning in barriers).
    std::vector<std::string> worker_args;
    for (size_t i = 0; i < argv.size(); ++i) {
      if (argv[i] == "--threads" && i + 1 < argv.size()) {
        ++i;
      } else if (argv[i].rfind("--threads=", 0) != 0) {
        worker_args.push_back(argv[i]);
      }
    }
    worker_args.push_back("--threads");
    worker_args.push_back(std::to_string(lo.threads_per_worker));
    lo.worker_args = worker_args;
    if (!o.save_checkpoints) lo.resume_flag.clear();
    // A model that cannot train as asked (a fixed batch other than --batch, a missing file)
    // fails here with one line, not once per worker.
    if (world > 1) {
      ExportedModelOptions check;
      check.frozen_bn = args.Has("frozen-bn") || args.Has("freeze-bn-stats");
      check.batch = o.batch;
      check.num_classes = args.Has("num-classes") ? ParseNumClasses(args.Get("num-classes"), o.data) : 0;
      check.seed = o.seed;
      PrepareExportedModel(LoadModel(args.positional()[0]), check);
    }
    return LaunchWorkers(lo);
  }
  // onnx-train's launcher, torchrun, Slurm, MPI (whose backend needs no rendezvous store)
  const LaunchInfo launch = LaunchInfoFromEnvironment(nullptr, o.backend != "mpi");
  const bool lead = launch.rank <= 0;
  // A rank shares the host's cores with its local peers: OMP_NUM_THREADS where the launcher
  // set it (ours, mpirun through ours, torchrun), else the cores divided among the local
  // ranks. Under srun or a plain mpirun every rank took every core before, and with MPI's
  // busy polling two SimpleNN ranks on 2 cores ran 100x slower (20.7 s an epoch, 0.2 s).
  if (o.threads == 0 && !launch.source.empty()) {
    if (const char* t = std::getenv("OMP_NUM_THREADS"); t && std::atoi(t) > 0) {
      o.threads = std::atoi(t);
    } else if (launch.local_size > 1) {
      const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
      o.threads = std::max(1, cores / launch.local_size);
      if (lead)
        std::cout << "threads: " << o.threads << " per rank (" << cores << " cores, " << launch.local_size << " ranks of "
                  << launch.source << " on this host; --threads N to choose)\n";
    }
  }
  // Exports from PyTorch: a fixed batch rebound (or checked against --batch, before any
  // training), BatchNormalization in training form or frozen.
  ExportedModelOptions eo;
  eo.frozen_bn = args.Has("frozen-bn") || args.Has("freeze-bn-stats");
  eo.batch = o.batch;
  eo.num_classes = args.Has("num-classes") ? ParseNumClasses(args.Get("num-classes"), o.data) : 0;
  eo.seed = o.seed;
  eo.class_scores = o.loss == LossKind::kAuto || o.loss == LossKind::kCrossEntropy;
  PreparedModel prepared = PrepareExportedModel(LoadModel(args.positional()[0]), eo);
  o.freeze.insert(o.freeze.end(), prepared.freeze.begin(), prepared.freeze.end());
  o.fixed_batch = prepared.fixed_batch;
  const int64_t ranks = std::max(1, launch.size);
  const std::string batch = ranks > 1 ? StrFormat("%lld per rank (%lld global)", (long long)o.batch,
                                                  (long long)(o.batch * ranks))
                                      : std::to_string(o.batch);
  std::ostringstream headline;  // printed by the trainer (rank 0) after what loading the data did
  headline << "training " << args.positional()[0] << " on " << o.data << ": " << o.epochs << (o.epochs == 1 ? " epoch" : " epochs")
           << ", batch " << batch
           << ", " << args.Get("optimizer", "sgd") << " lr " << o.schedule.base_lr << " (" << o.schedule.Describe()
           << ")";
  if (o.optimizer.momentum != 0.f) headline << ", momentum " << o.optimizer.momentum;
  if (o.accumulate > 1)
    headline << ", " << o.accumulate << " micro-batches a step (" << o.batch * o.accumulate * ranks << " images)";
  o.headline = headline.str();
  for (const auto& note : prepared.notes) o.headline += "\n" + note;
  TrainResult r = RunTraining(std::move(prepared.model), o);
  if (r.interrupted) return kInterruptedExitStatus;  // the trainer said where it stopped
  if (!lead || r.already_complete) return 0;  // a finished run said so, with no figures to report
  // The whole run's counts, also after a resume.
  std::cout << StrFormat("done: %d epoch%s, %lld steps", r.epochs_done, r.epochs_done == 1 ? "" : "s",
                         (long long)r.global_step);
  if (r.test_loss >= 0)  // a language model: validation loss and perplexity
    std::cout << StrFormat("; validation loss %.4f, perplexity %.3f", r.test_loss, std::exp(r.test_loss));
  else if (r.test_rmse >= 0)
    std::cout << StrFormat("; test MAE %.4g, RMSE %.4g", r.test_mae, r.test_rmse);
  else if (r.test_exact_match >= 0)
    std::cout << StrFormat("; test exact match %.2f%%, mean F1 %.4f", 100.0 * r.test_exact_match, r.test_f1);
  else
    std::cout << StrFormat("; test accuracy %.2f%%", 100.0 * r.test_accuracy);
  if (!r.last_checkpoint.empty()) std::cout << "; model saved as " << r.last_checkpoint << ".onnx";
  std::cout << "\n";
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

int CmdEval(const std::vector<std::string>& argv) {
  Args args(argv,
            {"data", "split", "batch", "threads", "device", "seed", "data-workers", "resize", "center-crop",
             "random-resized-crop", "mean", "std", "val-fraction", "npz-keys", "label-smoothing", "random-erase", "model-ema-steps",
             "model-ema-decay", "mixup-alpha", "cutmix-alpha", "seq-len", "token-dtype", "loss", "input-map"},
            {"skip-bad-images", "hflip", "per-class"});
  OT_CHECK(args.positional().size() == 1, "eval needs exactly one MODEL.onnx (%s)", SeeHelp().c_str());
  ExportedModelOptions eo;
  eo.training = false;
  const PreparedModel prepared = PrepareExportedModel(LoadModel(args.positional()[0]), eo);
  const Model& model = prepared.model;
  ExecutorOptions opts = ExecutorOptionsFromEnvironment();
  opts.device = Device::Parse(args.Get("device", "cpu"));
  opts.num_threads = static_cast<int>(args.GetInt("threads", 0));
  const std::string spec = args.Get("data", "fashion-mnist"), split = args.Get("split", "test");
  OT_CHECK(split == "test" || split == "train", "--split takes test or train, not '%s'", split.c_str());
  // The same data fitting and checks as train: data of another shape is adapted to the
  // model's input, synthetic data takes its shape, and a model that cannot score this data
  // set's classes is an error, not a low accuracy.
  DataSourceOptions flags;
  ReadDataSourceFlags(args, &flags);
  // --loss mse/l1/smooth-l1/bce-with-logits: float targets, scored as the trainer scores them.
  const LossKind loss = args.Has("loss") ? ParseLossKind(args.Get("loss")) : LossKind::kAuto;
  flags.float_targets = !IsClassIndexLoss(loss) && loss != LossKind::kModel;
  DataSourceOptions source = DataSourceForModel(model, spec, static_cast<uint64_t>(args.GetInt("seed", 0)), flags);
  if (source.data_workers == 0) source.data_workers = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / 4);
  ImageDataset data = LoadImageDataset(spec, split, source);
  CheckDataFitsInput(model.graph.inputs[0], data);
  OT_CHECK(!model.graph.outputs.empty(), "the model has no outputs");
  CheckLabelsFitOutput(model.graph.outputs[0], data);
  Executor exec(model, opts);
  for (const auto& note : prepared.notes) std::cout << note << "\n";
  for (const std::string& note : data.notes) std::cout << note << "\n";
  const std::string input = model.graph.inputs[0].name;
  const int64_t batch = prepared.fixed_batch > 0 ? prepared.fixed_batch : args.GetInt("batch", 256);
  OT_CHECK(batch >= 1, "--batch must be at least 1");
  auto run = [&](const Tensor& x, const std::map<std::string, Tensor>& extra) {
    std::map<std::string, Tensor> feeds = {{input, x}};
    feeds.insert(extra.begin(), extra.end());
    return exec.Run(feeds)[0];
  };
  for (size_t i = 1; i < model.graph.inputs.size(); ++i)
    OT_CHECK(std::any_of(data.extra_inputs.begin(), data.extra_inputs.end(),
                         [&](const auto& e) { return e.first == model.graph.inputs[i].name; }),
             "the model's input '%s' gets no data from --data %s; give an npz with an array per input, or --input-map",
             model.graph.inputs[i].name.c_str(), spec.c_str());
  if (flags.float_targets) {
    const TaskTally t = EvaluateTask(run, data, batch, opts.device, loss == LossKind::kBceWithLogits,
                                     prepared.fixed_batch > 0);
    if (t.multilabel)
      std::cout << StrFormat("%s %s exact match: %.2f%% (%lld of %lld), mean F1 %.4f\n", spec.c_str(), split.c_str(),
                             100.0 * t.ExactMatch(), (long long)t.exact, (long long)t.samples, t.MeanF1());
    else
      std::cout << StrFormat("%s %s MAE: %.4g, RMSE: %.4g (%lld values)\n", spec.c_str(), split.c_str(), t.Mae(),
                             t.Rmse(), (long long)t.values);
    return 0;
  }
  if (!data.label_dims.empty()) {  // per-token labels (token windows): loss, perplexity, token accuracy
    const TokenLoss t = EvaluateTokens([&](const Tensor& x) { return exec.Run({{input, x}})[0]; }, data, batch,
                                       opts.device, prepared.fixed_batch > 0);
    std::cout << StrFormat("%s %s loss: %.4f, perplexity %.3f, token accuracy %.2f%% (%lld of %lld)\n", spec.c_str(),
                           split.c_str(), t.Loss(), t.Perplexity(), 100.0 * t.Accuracy(), (long long)t.correct,
                           (long long)t.tokens);
    return 0;
  }
  Accuracy acc = EvaluateAccuracy(run, data, batch, opts.device, prepared.fixed_batch > 0);
  std::cout << StrFormat("%s %s accuracy: %.2f%% (%lld of %lld)\n", spec.c_str(), split.c_str(), 100.0 * acc.Fraction(),
                         (long long)acc.correct, (long long)acc.total);
  if (args.Has("per-class")) std::cout << PerClassTable(acc, ClassNames(args.positional()[0], data));
  return 0;
}

}  // namespace ot
