// The flags that several onnx-train commands take, declared once.
#include "tools/shared_flags.h"

#include <cmath>
#include <map>

#include "graph/error.h"
#include "graph/passes/param_patterns.h"
#include "tools/cli_util.h"
#include "train/data/token_dataset.h"
#include "train/loader/transforms.h"

namespace ot {

const FlagInfo kDataFlag = {
    "data", FlagType::kText,
    "  --data SPEC          fashion-mnist (default; Debian's dataset-fashion-mnist), fashion-mnist:DIR,\n"
    "                       mnist:DIR, cifar10:DIR, synthetic[:N[:CxHxW]] (the model's input shape if not given;\n"
    "                       a non-image input gets samples of its own shape: token ids below its embedding's\n"
    "                       rows, or float features),\n"
    "                       imagefolder:DIR (ROOT/<class>/*.jpg|png;\n"
    "                       DIR/train + DIR/val|test when present), npy:X.npy,Y.npy[,XTEST.npy,YTEST.npy],\n"
    "                       npz:FILE.npz (arrays x, y[, x_test, y_test]; token ids x [N,T] with y [N,T]),\n"
    "                       tokens:TRAIN.bin[,VAL.bin] (flat token files as nanoGPT and llm.c write them,\n"
    "                       memory-mapped; without VAL.bin the last --val-fraction is validation)\n"};
const FlagInfo kSeedFlag = {"seed", FlagType::kInt,
                            "  --seed S             shuffling, augmentation and initial randomness (default 0)\n"};
const FlagInfo kNumClassesFlag = {
    "num-classes", FlagType::kText,
    "  --num-classes K|auto replace the final classifier (Gemm, MatMul+Add or 1x1 Conv) with a fresh K-way\n"
    "                       layer initialised as PyTorch's nn.Linear/nn.Conv2d from --seed; auto: the data\n"
    "                       set's class count (image folder class folders)\n"};
const FlagInfo kFreezeBnStatsFlag = {
    "freeze-bn-stats", FlagType::kBool,
    "  --freeze-bn-stats    BatchNormalization normalises with its running statistics, which stay fixed,\n"
    "                       while scale and bias train (PyTorch's bn.eval(); also --frozen-bn)\n"
    "                       (default: training form, and layers PyTorch folded in eval mode restored)\n"};
const FlagInfo kFrozenBnFlag = {"frozen-bn", FlagType::kBool, ""};  // on --freeze-bn-stats' lines
const FlagInfo kLrFlag = {"lr", FlagType::kNumber, ""};             // on --optimizer's line
const FlagInfo kThreadsFlag = {"threads", FlagType::kInt, "  --threads N          CPU threads (default: all)\n"};
const FlagInfo kConvAlgoFlag = {
    "conv-algo", FlagType::kText,
    "  --conv-algo auto|direct|winograd|taps|winograd2|winograd4  CPU convolutions: oneDNN's\n"
    "                       direct or Winograd F(4x4,3x3) (AVX-512) primitives, products over the\n"
    "                       kernel taps that touch data (2D stride 1: small padded maps), or our\n"
    "                       Winograd on sgemm for 3x3 stride 1 pad 1: F(2x2,3x3), or F(4x4,3x3) in\n"
    "                       the backward pass; auto: the fastest, timed once per shape at plan time\n"};
const FlagInfo kDeviceFlag = {
    "device", FlagType::kText,
    "  --device cpu|cuda[:K] with --world-size N on CUDA, local rank i uses cuda:((K + i) mod GPUs)\n"};
const FlagInfo kTf32Flag = {"tf32", FlagType::kBool,
                            "  --tf32               CUDA: float32 matrix products and convolutions on TF32 tensor cores\n"};
const FlagInfo kAmpFlag = {
    "amp", FlagType::kText,
    "  --amp bf16           mixed precision: convolutions, matrix products and their gradients read\n"
    "                       bfloat16 casts of their operands (Cast nodes in the training graph) and\n"
    "                       write float32; losses, normalisation, reductions and the optimizer stay\n"
    "                       float32 on float32 weights (CPUs with avx512_bf16 or AMX; elsewhere one\n"
    "                       line says so and it runs float32)\n"
    "  --amp fp16           the same split with float16 casts and loss scaling (--loss-scale); CUDA\n"
    "                       (cuDNN, cuBLAS); on the CPU float16 is emulated (float32 products of\n"
    "                       operands rounded to float16), for testing\n"};
const FlagInfo kLossScaleFlag = {
    "loss-scale", FlagType::kText,
    "  --loss-scale dynamic|dynamic:S0|static:S|none  --amp fp16's loss scaling (default dynamic:\n"
    "                       from 65536, x2 after 2000 finite steps, x0.5 and the step skipped on an\n"
    "                       inf or NaN gradient, as torch.amp.GradScaler)\n"};
const FlagInfo kBatchFlag = {"batch", FlagType::kInt, ""};  // on --epochs' line
const FlagInfo kBackendFlag = {
    "backend", FlagType::kText,
    "  --backend auto|gloo|nccl|mpi  collectives for data-parallel training (auto: NCCL for CUDA, else Gloo;\n"
    "                             mpi: Open MPI, ranks started by mpirun, or by --world-size through mpirun)\n"};
const FlagInfo kWorldSizeFlag = {"world-size", FlagType::kInt,
                                 "  --world-size N       N worker processes on this host (threads split among them)\n"};
const FlagInfo kTimeoutFlag = {
    "timeout", FlagType::kNumber,
    "  --timeout S          a collective, or a rank that does not join, fails after S seconds (300)\n"};
const FlagInfo kOutputFlag = {"o", FlagType::kText, "  -o PATH              where the output is written\n"};
const FlagInfo kInputFlag = {"input", FlagType::kList,
                             "  --input NAME=FILE.pb a graph input's value (repeatable)\n"};

namespace {

// --resize, --center-crop and --random-resized-crop.
int64_t CropSize(const FlagValue& v) {
  const int64_t n = v.Int();
  OT_CHECK(n >= 0, "--resize, --center-crop and --random-resized-crop take a positive size");
  return n;
}

}  // namespace

const FlagTable<DataSourceOptions>& DataFlags() {
  using D = DataSourceOptions;
  static const FlagTable<D> rows = {
      {{"seq-len", FlagType::kInt,
        "  --seq-len T          tokens: tokens per sample (default: the model's input length if fixed); samples\n"
        "                       are x = tokens[o:o+T], labels the next tokens[o+1:o+T+1], at seeded random\n"
        "                       offsets o; an epoch is (tokens - 1) / T samples; validation windows follow\n"
        "                       one another\n"},
       [](D& d, const FlagValue& v) {
         d.token_seq_len = v.Int();
         OT_CHECK(d.token_seq_len >= 0, "--seq-len takes the tokens per sample, 1 or more");
       }},
      {{"token-dtype", FlagType::kText,
        "  --token-dtype TYPE   tokens: uint16 (default, nanoGPT's), uint32 or int32 (llm.c's header sets it)\n"},
       [](D& d, const FlagValue& v) { d.token_dtype = ParseTokenDType(v.Text()); }},
      {{"npz-keys", FlagType::kText, "  --npz-keys X,Y[,XT,YT] array names in the .npz\n"},
       [](D& d, const FlagValue& v) { d.npz_keys = SplitList(v.Text()); }},
      {{"input-map", FlagType::kList,
        "  --input-map NAME=KEY the npz array KEY feeds the model input NAME (repeatable; default: arrays named\n"
        "                       after the inputs, and y or labels)\n"},
       [](D& d, const FlagValue& v) {
         for (const std::string& m : v.All()) {
           const size_t eq = m.find('=');
           OT_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < m.size(),
                    "--input-map takes INPUT=ARRAY (a model input and the npz array that feeds it), got '%s'",
                    m.c_str());
           d.input_map[m.substr(0, eq)] = m.substr(eq + 1);
         }
       }},
      Field(FlagInfo{"val-fraction", FlagType::kNumber,
                     "  --val-fraction F     held-out share when the data has no test split (0.1)\n"},
            &D::val_fraction),
      {{"data-workers", FlagType::kInt,
        "  --data-workers N     threads decoding and transforming images (default: a quarter of --threads)\n"},
       [](D& d, const FlagValue& v) {
         d.data_workers = static_cast<int>(v.Int());
         OT_CHECK(d.data_workers >= 0, "--data-workers must be 1 or more (0: from the thread budget)");
       },
       "0"},
      Field(FlagInfo{"skip-bad-images", FlagType::kBool,
                     "  --skip-bad-images    leave out (and list) image files that do not decode, instead of failing\n"},
            &D::skip_bad_images),
  };
  return rows;
}

const FlagTable<DataSourceOptions>& TransformFlags() {
  using D = DataSourceOptions;
  static const FlagTable<D> rows = {
      {{"resize", FlagType::kInt,
        "  --resize N           shorter side to N (bilinear, antialiased)   --center-crop N\n"},
       [](D& d, const FlagValue& v) { d.transforms.resize = CropSize(v); }},
      {{"center-crop", FlagType::kInt, ""}, [](D& d, const FlagValue& v) { d.transforms.center_crop = CropSize(v); }},
      {{"random-resized-crop", FlagType::kInt,
        "  --random-resized-crop N  training crops of scale 0.08-1, ratio 3/4-4/3 resized to N x N\n"
        "                       (evaluation: --resize N, --center-crop N)\n"},
       [](D& d, const FlagValue& v) { d.transforms.random_resized_crop = CropSize(v); }},
      {{"hflip", FlagType::kBool, "  --hflip              random horizontal flips in training\n"},
       [](D& d, const FlagValue&) { d.transforms.hflip = true; }},
      {{"mean", FlagType::kText,
        "  --mean a[,b,c] --std a[,b,c]  Normalize, on the [0, 1] scale (default: the data set's, or none)\n"},
       [](D& d, const FlagValue& v) { d.transforms.mean = ParseFloatList(v.Text(), "--mean"); }},
      {{"std", FlagType::kText, ""},
       [](D& d, const FlagValue& v) { d.transforms.stddev = ParseFloatList(v.Text(), "--std"); }},
  };
  return rows;
}

const FlagTable<AutodiffOptions>& LossFlags() {
  using A = AutodiffOptions;
  static const FlagTable<A> rows = {
      {{"loss", FlagType::kText,
        "  --loss NAME          cross-entropy (default): scores [N,K] with labels [N], per token [N,T,V]\n"
        "                       (classes last) with labels [N,T], per pixel [N,C,H,W] with labels [N,H,W];\n"
        "                       nll (the model outputs log-probabilities); mse, l1, smooth-l1, bce-with-logits\n"
        "                       (float32 targets shaped as the output); mean reduction, PyTorch's meanings\n"},
       [](A& o, const FlagValue& v) { o.loss = ParseLossKind(v.Text()); }},
      {{"ignore-index", FlagType::kInt,
        "  --ignore-index I     cross-entropy and nll: positions labelled I count for nothing (-100)\n"},
       [](A& o, const FlagValue& v) {
         OT_CHECK(IsClassIndexLoss(o.loss),
                  "--ignore-index applies to class-index losses (cross-entropy, nll), not --loss %s",
                  LossKindName(o.loss));
         o.ignore_index = v.Int();
       }},
      {{"smooth-l1-beta", FlagType::kNumber, "  --smooth-l1-beta B   SmoothL1Loss's beta (1.0)\n"},
       [](A& o, const FlagValue& v) {
         OT_CHECK(o.loss == LossKind::kSmoothL1, "--smooth-l1-beta needs --loss smooth-l1 (it is --loss %s)",
                  LossKindName(o.loss));
         const double beta = v.Number();
         OT_CHECK(beta >= 0.0 && std::isfinite(beta),
                  "--smooth-l1-beta %g must be 0 or more (PyTorch's default is 1.0)", beta);
         o.smooth_l1_beta = static_cast<float>(beta);
       }},
      {{"label-smoothing", FlagType::kNumber,
        "  --label-smoothing E  the loss as PyTorch's CrossEntropyLoss(label_smoothing=E), 0 <= E < 1 (0)\n"},
       [](A& o, const FlagValue& v) {
         const double eps = v.Number();
         OT_CHECK(eps >= 0.0 && eps < 1.0,
                  "--label-smoothing %g is outside [0, 1); give the smoothing as a fraction, e.g. 0.1", eps);
         o.label_smoothing = static_cast<float>(eps);
       }},
  };
  return rows;
}

const FlagTable<AutodiffOptions>& GraphOutputFlags() {
  using A = AutodiffOptions;
  static const FlagTable<A> rows = {
      // Before --loss's row in a table: --loss-output alone means --loss model.
      {{"loss-output", FlagType::kText,
        "  --loss-output NAME   the model's scalar loss output, as --loss model\n"},
       [](A& o, const FlagValue& v) {
         o.loss_output = v.Text();
         if (!v.args().Has("loss")) o.loss = LossKind::kModel;
       }},
      Field(FlagInfo{"logits-output", FlagType::kText,
                     "  --logits-output NAME the output the loss reads (default: the first)\n"},
            &A::logits_output),
  };
  return rows;
}

const FlagTable<AutodiffOptions>& FreezeFlags() {
  using A = AutodiffOptions;
  static const FlagTable<A> rows = {
      {{"freeze", FlagType::kText,
        "  --freeze PATTERNS    initializers that stay fixed (no gradient is computed for them)\n"},
       [](A& o, const FlagValue& v) { o.freeze = SplitPatternList(v.Text()); }},
      {{"train-only", FlagType::kText,
        "  --train-only PATTERNS  only these train; everything else stays fixed (with --freeze: minus those)\n"},
       [](A& o, const FlagValue& v) {
         o.train_only = SplitPatternList(v.Text());
         OT_CHECK(!o.train_only.empty(), "--train-only needs patterns, e.g. --train-only 'fc.*'");
       }},
  };
  return rows;
}

const Flag<OptimizerConfig>& OptimizerFlag(const std::string& name) {
  using C = OptimizerConfig;
  auto weight_decay = [](const FlagValue& v) {
    const double w = v.Number();
    OT_CHECK(w >= 0 && std::isfinite(w), "--%s must be 0 or more", v.flag());
    return static_cast<float>(w);
  };
  static const std::map<std::string, Flag<C>> rows = {
      {"optimizer",
       {{"optimizer", FlagType::kText,
         "  --optimizer sgd|adam|adamw|rmsprop|adagrad (sgd; also --opt)   --lr LR (0.01)\n"},
        [](C& c, const FlagValue& v) { c.kind = ParseOptimizerKind(v.Text()); },
        "sgd"}},
      {"momentum",
       {{"momentum", FlagType::kNumber, "  --momentum M         (0; SGD, RMSprop)   --nesterov\n"},
        [](C& c, const FlagValue& v) {
          c.momentum = v.Float();
          OT_CHECK(c.momentum >= 0, "--momentum must be 0 or more");
        }}},
      {"nesterov", Field(FlagInfo{"nesterov", FlagType::kBool, ""}, &C::nesterov)},
      {"weight-decay",
       {{"weight-decay", FlagType::kNumber,
         "  --weight-decay W     (0; also --wd): L2 added to the gradient; AdamW: decoupled, as torch's\n"},
        [weight_decay](C& c, const FlagValue& v) { c.weight_decay = weight_decay(v); }}},
      {"norm-weight-decay",
       {{"norm-weight-decay", FlagType::kNumber,
         "  --norm-weight-decay W  weight decay of normalisation scales and biases (default: --weight-decay)\n"},
        [weight_decay](C& c, const FlagValue& v) { c.norm_weight_decay = weight_decay(v); }}},
      {"bias-weight-decay",
       {{"bias-weight-decay", FlagType::kNumber,
         "  --bias-weight-decay W  weight decay of biases, before --norm-weight-decay (default: --weight-decay)\n"},
        [weight_decay](C& c, const FlagValue& v) { c.bias_weight_decay = weight_decay(v); }}},
      {"beta1",
       Field(FlagInfo{"beta1", FlagType::kNumber,
                      "  --beta1 B1 --beta2 B2 --epsilon E   Adam's and AdamW's (0.9, 0.999, 1e-8); E: RMSprop's too\n"},
             &C::beta1)},
      {"beta2", Field(FlagInfo{"beta2", FlagType::kNumber, ""}, &C::beta2)},
      {"epsilon", Field(FlagInfo{"epsilon", FlagType::kNumber, ""}, &C::epsilon)},
      {"rmsprop-alpha",
       {{"rmsprop-alpha", FlagType::kNumber,
         "  --rmsprop-alpha A    (0.99)         --centered           RMSprop's, as torch's\n"},
        [](C& c, const FlagValue& v) {
          c.rmsprop_alpha = v.Float();
          OT_CHECK(c.rmsprop_alpha >= 0 && c.rmsprop_alpha < 1, "--rmsprop-alpha must be in [0, 1)");
        }}},
      {"centered",  // after --optimizer's row
       {{"centered", FlagType::kBool, ""},
        [](C& c, const FlagValue&) {
          c.rmsprop_centered = true;
          OT_CHECK(c.kind == OptimizerConfig::Kind::kRmsprop,
                   "--centered is RMSprop's; add --optimizer rmsprop or leave it out");
        }}},
      {"clip-grad-norm",
       {{"clip-grad-norm", FlagType::kNumber,
         "  --clip-grad-norm M   scale the gradients so that their global 2-norm is at most M\n"
         "                       (torch's clip_grad_norm_; after the data-parallel average)\n"},
        [](C& c, const FlagValue& v) {
          const double clip = v.Number();
          OT_CHECK(clip > 0 && std::isfinite(clip),
                   "--clip-grad-norm must be a positive number (the largest global gradient norm), got %s",
                   v.Text().c_str());
          c.clip_grad_norm = static_cast<float>(clip);
        }}},
      {"param-group",
       {{"param-group", FlagType::kList,
         "  --param-group 'PATTERNS:lr=X,wd=Y'  (repeatable) lr and weight decay of the matching parameters:\n"
         "                       lr=0.001 absolute, lr=0.1x a factor of --lr; the schedule scales all groups\n"
         "                       alike; a later group overrides an earlier one\n"},
        [](C& c, const FlagValue& v) {
          for (const std::string& spec : v.All()) c.groups.push_back(ParseParamGroup(spec));
        }}},
  };
  return rows.at(name);
}

const Flag<ExecutorOptions>& ExecutorFlag(const std::string& name) {
  using E = ExecutorOptions;
  static const std::map<std::string, Flag<E>> rows = {
      {"threads", Field(kThreadsFlag, &E::num_threads, "0")},
      {"device", {kDeviceFlag, [](E& e, const FlagValue& v) { e.device = Device::Parse(v.Text()); }, "cpu"}},
      {"conv-algo", Field(kConvAlgoFlag, &E::conv_algo, "auto")},
  };
  return rows.at(name);
}

}  // namespace ot
