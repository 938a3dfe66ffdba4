// Reference model builders: ResNet34 of the CIFAR-10 recipe and SimpleNN, written through
// the IR with the node structure, node names, value names and initializer names that
// torch.onnx.export (PyTorch 1.13, its default opset 14, training=TrainingMode.TRAINING)
// produces for the same modules, and with PyTorch's default initialisation drawn from a
// seeded std::mt19937_64 (same distributions as torch, not the same bits).
#include "models/reference_models.h"

#include <cmath>
#include <random>
#include <utility>

#include "graph/error.h"

namespace ot {
namespace {

// torch.onnx.export's default opset in PyTorch 1.13.
constexpr int64_t kTorchExportOpset = 14;
// nn.BatchNorm2d defaults, in ONNX terms: ONNX momentum = 1 - PyTorch momentum (0.1).
constexpr float kBatchNormEpsilon = 1e-5f;
constexpr float kBatchNormOnnxMomentum = 0.9f;

// Seeded draws with our own transforms, so a seed gives the same weights on every platform
// (std::normal_distribution and friends are implementation-defined).
class WeightRng {
 public:
  explicit WeightRng(uint64_t seed) : engine_(seed) {}

  // Uniform in [0, 1) from the top 53 bits.
  double Uniform01() { return static_cast<double>(engine_() >> 11) * (1.0 / 9007199254740992.0); }
  double Uniform(double low, double high) { return low + (high - low) * Uniform01(); }
  // Standard normal by Box-Muller, the second value of each pair kept for the next call.
  double Normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double kTwoPi = 6.283185307179586;
    double u1 = 1.0 - Uniform01();  // in (0, 1]: log is finite
    double u2 = Uniform01();
    double radius = std::sqrt(-2.0 * std::log(u1));
    spare_ = radius * std::sin(kTwoPi * u2);
    has_spare_ = true;
    return radius * std::cos(kTwoPi * u2);
  }

 private:
  std::mt19937_64 engine_;
  bool has_spare_ = false;
  double spare_ = 0.0;
};

ValueInfo FloatValue(const std::string& name, std::vector<Dim> dims) {
  ValueInfo v;
  v.name = name;
  v.dtype = DType::kFloat32;
  v.has_shape = true;
  v.dims = std::move(dims);
  return v;
}

// Appends nodes and initializers to a model in the way torch.onnx.export names them: a node
// in module scope "/layer1/layer1.0/conv1" doing Conv is "/layer1/layer1.0/conv1/Conv", its
// output "/layer1/layer1.0/conv1/Conv_output_0"; parameters carry state_dict names.
class TorchStyleModelWriter {
 public:
  TorchStyleModelWriter(Model* model, uint64_t seed) : model_(model), rng_(seed) {}

  // How a convolution's weight is drawn.
  enum class ConvInit {
    kResNet,        // torchvision's ResNet: kaiming_normal_(mode="fan_out", nonlinearity="relu")
    kTorchDefault,  // nn.Conv2d's own: kaiming_uniform_(a=sqrt(5)) = U(-1/sqrt(fan_in), 1/sqrt(fan_in))
  };

  // nn.Conv2d(in, out, k, stride, padding=pad, bias=False).
  std::string Conv(const std::string& scope, const std::string& param, const std::string& input, int64_t in_channels,
                   int64_t out_channels, int64_t kernel, int64_t stride, int64_t pad,
                   ConvInit init = ConvInit::kResNet) {
    HostTensor w(DType::kFloat32, {out_channels, in_channels, kernel, kernel}, param + ".weight");
    if (init == ConvInit::kResNet) {
      double fan_out = static_cast<double>(out_channels * kernel * kernel);
      FillNormal(&w, std::sqrt(2.0) / std::sqrt(fan_out));
    } else {
      FillUniform(&w, 1.0 / std::sqrt(static_cast<double>(in_channels * kernel * kernel)));
    }
    Node& n = AddNode(scope, "Conv", {input, AddInitializer(std::move(w))}, 1);
    n.SetInts("dilations", {1, 1});
    n.SetInt("group", 1);
    n.SetInts("kernel_shape", {kernel, kernel});
    n.SetInts("pads", {pad, pad, pad, pad});
    n.SetInts("strides", {stride, stride});
    return n.outputs[0];
  }

  // nn.BatchNorm2d(channels) in training mode: weight 1, bias 0, running mean 0, var 1.
  // Outputs Y and the updated running mean and variance, as torch exports them.
  std::string BatchNorm(const std::string& scope, const std::string& param, const std::string& input,
                        int64_t channels) {
    std::string weight = AddInitializer(Filled(param + ".weight", channels, 1.f));
    std::string bias = AddInitializer(Filled(param + ".bias", channels, 0.f));
    std::string mean = AddInitializer(Filled(param + ".running_mean", channels, 0.f));
    std::string var = AddInitializer(Filled(param + ".running_var", channels, 1.f));
    Node& n = AddNode(scope, "BatchNormalization", {input, weight, bias, mean, var}, 3);
    n.SetFloat("epsilon", kBatchNormEpsilon);
    n.SetFloat("momentum", kBatchNormOnnxMomentum);
    n.SetInt("training_mode", 1);
    return n.outputs[0];
  }

  // nn.Linear(in, out) with its default initialisation: kaiming_uniform_(a=sqrt(5)) for
  // the weight, which is U(-1/sqrt(in), 1/sqrt(in)), and the same bound for the bias.
  // Exported as Gemm(x, W, b) with transB=1; `output` names its result.
  std::string Linear(const std::string& scope, const std::string& param, const std::string& input,
                     int64_t in_features, int64_t out_features, const std::string& output) {
    double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
    HostTensor w(DType::kFloat32, {out_features, in_features}, param + ".weight");
    FillUniform(&w, bound);
    HostTensor b(DType::kFloat32, {out_features}, param + ".bias");
    FillUniform(&b, bound);
    std::string w_name = AddInitializer(std::move(w));
    std::string b_name = AddInitializer(std::move(b));
    Node& n = AddNode(scope, "Gemm", {input, w_name, b_name}, 1);
    n.SetFloat("alpha", 1.f);
    n.SetFloat("beta", 1.f);
    n.SetInt("transB", 1);
    n.outputs[0] = output;
    return output;
  }

  std::string Relu(const std::string& scope, const std::string& input) {
    return AddNode(scope, "Relu", {input}, 1).outputs[0];
  }
  std::string Add(const std::string& scope, const std::string& a, const std::string& b) {
    return AddNode(scope, "Add", {a, b}, 1).outputs[0];
  }
  std::string GlobalAveragePool(const std::string& scope, const std::string& input) {
    return AddNode(scope, "GlobalAveragePool", {input}, 1).outputs[0];
  }
  // torch.flatten(x, 1) / nn.Flatten().
  std::string Flatten(const std::string& scope, const std::string& input) {
    Node& n = AddNode(scope, "Flatten", {input}, 1);
    n.SetInt("axis", 1);
    return n.outputs[0];
  }

 private:
  Node& AddNode(const std::string& scope, const std::string& op, std::vector<std::string> inputs, int num_outputs) {
    Node n;
    n.name = scope + "/" + op;
    n.op_type = op;
    n.inputs = std::move(inputs);
    for (int i = 0; i < num_outputs; ++i) n.outputs.push_back(n.name + "_output_" + std::to_string(i));
    model_->graph.nodes.push_back(std::move(n));
    return model_->graph.nodes.back();
  }

  std::string AddInitializer(HostTensor t) {
    std::string name = t.name;
    model_->graph.initializers.push_back(std::move(t));
    return name;
  }

  static HostTensor Filled(const std::string& name, int64_t size, float value) {
    return HostTensor::FromVector(std::vector<float>(static_cast<size_t>(size), value), {size}, name);
  }

  void FillNormal(HostTensor* t, double stddev) {
    float* p = t->Data<float>();
    for (int64_t i = 0; i < t->NumElements(); ++i) p[i] = static_cast<float>(stddev * rng_.Normal());
  }

  void FillUniform(HostTensor* t, double bound) {
    float* p = t->Data<float>();
    for (int64_t i = 0; i < t->NumElements(); ++i) p[i] = static_cast<float>(rng_.Uniform(-bound, bound));
  }

  Model* model_;
  WeightRng rng_;
};

void CheckOptions(const ReferenceModelOptions& o, const char* model) {
  OT_CHECK(o.channels > 0 && o.height > 0 && o.width > 0, "%s needs a positive input shape, got %ldx%ldx%ld", model,
           static_cast<long>(o.channels), static_cast<long>(o.height), static_cast<long>(o.width));
  OT_CHECK(o.classes > 0, "%s needs at least one class, got %ld", model, static_cast<long>(o.classes));
}

// A model with graph input "input" [batch, C, H, W] and output "logits" [batch, K].
Model EmptyClassifier(const ReferenceModelOptions& o, const std::string& graph_name) {
  Model m;
  m.opsets[""] = kTorchExportOpset;
  m.producer_name = "onnx-train";
  m.graph.name = graph_name;
  m.graph.inputs.push_back(
      FloatValue("input", {Dim{-1, "batch"}, Dim{o.channels, ""}, Dim{o.height, ""}, Dim{o.width, ""}}));
  m.graph.outputs.push_back(FloatValue("logits", {Dim{-1, "batch"}, Dim{o.classes, ""}}));
  return m;
}

// torchvision's BasicBlock: conv3x3-bn-relu-conv3x3-bn, plus the identity or a 1x1 strided
// conv+bn downsample, then add and relu. `index` is the block's place in its layer.
std::string BasicBlock(TorchStyleModelWriter* w, const std::string& layer, int index, const std::string& input,
                       int64_t in_channels, int64_t channels, int64_t stride) {
  std::string param = layer + "." + std::to_string(index);  // "layer1.0"
  std::string scope = "/" + layer + "/" + param;           // "/layer1/layer1.0"
  std::string x = w->Conv(scope + "/conv1", param + ".conv1", input, in_channels, channels, 3, stride, 1);
  x = w->BatchNorm(scope + "/bn1", param + ".bn1", x, channels);
  x = w->Relu(scope + "/relu", x);
  x = w->Conv(scope + "/conv2", param + ".conv2", x, channels, channels, 3, 1, 1);
  x = w->BatchNorm(scope + "/bn2", param + ".bn2", x, channels);
  std::string identity = input;
  if (stride != 1 || in_channels != channels) {
    std::string ds = scope + "/downsample";
    identity = w->Conv(ds + "/downsample.0", param + ".downsample.0", input, in_channels, channels, 1, stride, 0);
    identity = w->BatchNorm(ds + "/downsample.1", param + ".downsample.1", identity, channels);
  }
  x = w->Add(scope, x, identity);
  return w->Relu(scope + "/relu_1", x);
}

}  // namespace

Model BuildResNet34(const ReferenceModelOptions& options) {
  CheckOptions(options, "resnet34");
  Model m = EmptyClassifier(options, "resnet34");
  TorchStyleModelWriter w(&m, options.seed);
  // Stem of the recipe: 3x3 stride-2 conv without bias, batch norm, relu, no max-pool.
  // The recipe replaces torchvision's stem after construction (m.conv1 = nn.Conv2d(C, 64, 3,
  // 2, 1, bias=False), benchmarks/torch_step.py), so the stem keeps nn.Conv2d's own
  // initialisation, not ResNet's.
  std::string x = w.Conv("/conv1", "conv1", "input", options.channels, 64, 3, 2, 1,
                         TorchStyleModelWriter::ConvInit::kTorchDefault);
  x = w.BatchNorm("/bn1", "bn1", x, 64);
  x = w.Relu("/relu", x);
  struct Stage {
    int blocks;
    int64_t channels;
    int64_t stride;
  };
  const Stage kStages[] = {{3, 64, 1}, {4, 128, 2}, {6, 256, 2}, {3, 512, 2}};
  int64_t in_channels = 64;
  for (int s = 0; s < 4; ++s) {
    std::string layer = "layer" + std::to_string(s + 1);
    for (int b = 0; b < kStages[s].blocks; ++b) {
      x = BasicBlock(&w, layer, b, x, in_channels, kStages[s].channels, b == 0 ? kStages[s].stride : 1);
      in_channels = kStages[s].channels;
    }
  }
  x = w.GlobalAveragePool("/avgpool", x);
  x = w.Flatten("", x);
  w.Linear("/fc", "fc", x, in_channels, options.classes, "logits");
  return m;
}

Model BuildSimpleNN(const ReferenceModelOptions& options) {
  CheckOptions(options, "simplenn");
  Model m = EmptyClassifier(options, "simplenn");
  TorchStyleModelWriter w(&m, options.seed);
  std::string x = w.Flatten("/flatten", "input");
  w.Linear("/fc", "fc", x, options.channels * options.height * options.width, options.classes, "logits");
  return m;
}

Model BuildReferenceModel(const std::string& name, const ReferenceModelOptions& options) {
  if (name == "resnet34") return BuildResNet34(options);
  if (name == "simplenn") return BuildSimpleNN(options);
  throw Error("unknown model '" + name + "'; choose resnet34 or simplenn");
}

}  // namespace ot
