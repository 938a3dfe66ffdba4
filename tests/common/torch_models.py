"""The PyTorch side the tests and benchmarks share: the reference models (the recipe's ResNet34,
SimpleNN, LeNet, a two-input encoder) built with weights away from the defaults, their
torch.onnx.export in training or eval mode with a dynamic batch, PyTorch's forward, one step's gradients (with ReLU
decisions that can be imposed, for the float64 oracle) and an SGD loss curve."""
import copy
import sys
import warnings

try:
    import torch
    import torch.nn.functional as F
    import torchvision
    from torch import nn
except ImportError as e:  # a dependency is missing: fail with what to do
    sys.exit(f"torch_models: {e}; install python3-torch, python3-torchvision and python3-onnx "
             f"(scripts/install-deps.sh) and run this with that Python ({sys.executable} lacks them)")

EXPORT_BATCH = 2  # the dummy batch at export time; the runs use other sizes (dynamic axis)


def resnet34_recipe(in_channels, classes):
    m = torchvision.models.resnet34(num_classes=classes)
    m.conv1 = nn.Conv2d(in_channels, 64, kernel_size=3, stride=2, padding=1, bias=False)
    nn.init.kaiming_normal_(m.conv1.weight, mode="fan_out", nonlinearity="relu")
    m.maxpool = nn.Identity()
    return m


class SimpleNN(nn.Module):
    def __init__(self, in_features, classes):
        super().__init__()
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(in_features, classes)

    def forward(self, x):
        return self.fc(self.flatten(x))


class LeNet(nn.Module):
    """A PyTorch-style classic: MaxPool, AvgPool (exported as Pad + AveragePool), BatchNorm,
    Dropout (p=0 so that runs compare exactly), Sigmoid, Tanh and a LogSoftmax output."""

    def __init__(self, in_channels, h, w, classes):
        super().__init__()
        self.f = nn.Sequential(nn.Conv2d(in_channels, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                               nn.Conv2d(6, 16, 5), nn.BatchNorm2d(16), nn.ReLU(), nn.AvgPool2d(2))
        self.c = nn.Sequential(nn.Flatten(), nn.Linear(16 * ((h // 2 - 4) // 2) * ((w // 2 - 4) // 2), 120), nn.Dropout(0.0), nn.Sigmoid(), nn.Linear(120, 84),
                               nn.Tanh(), nn.Linear(84, classes))

    def forward(self, x):
        return torch.log_softmax(self.c(self.f(x)), dim=1)


def build(model, c, h, w, classes):
    if model == "resnet34":
        m = resnet34_recipe(c, classes)
    elif model == "lenet":
        m = LeNet(c, h, w, classes)
    else:
        m = SimpleNN(c * h * w, classes)
    # Batch-norm affine parameters and running statistics away from 1/0/0/1, so that eval
    # mode (running statistics, folded into Conv by the exporter) is not an identity.
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, nn.BatchNorm2d):
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.normal_(0.0, 0.1)
                mod.running_mean.normal_(0.0, 0.1)
                mod.running_var.uniform_(0.5, 1.5)
    return m


def torch_forward(module, x, training):
    m = copy.deepcopy(module)  # train() forward updates running statistics; keep the original
    m.train(training)
    with torch.no_grad():
        return m(torch.from_numpy(x)).numpy()


def export(module, shape, path, training, opset=None):
    mode = torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.EVAL
    dummy = torch.zeros((EXPORT_BATCH,) + shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(copy.deepcopy(module), dummy, path, input_names=["input"], output_names=["logits"],
                          dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}}, training=mode,
                          do_constant_folding=not training,  # torch advises no folding for training export
                          **({"opset_version": opset} if opset else {}))


def export_inputs(module, args, names, path, opset=17):
    """torch 1.x's exporter in training mode, named inputs (args: one tensor each) and one
    output 'out', every input and the output with a dynamic batch."""
    axes = {n: {0: "batch"} for n in names + ["out"]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, path, input_names=names, output_names=["out"], dynamic_axes=axes,
                          opset_version=opset, training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)


class TwoInputEncoder(nn.Module):
    """Hugging Face's input form: input_ids [N, T] and attention_mask [N, T]; an embedding,
    the masked mean over the tokens and a Linear to `classes` scores."""

    def __init__(self, vocab, width, classes=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, width)
        self.fc = nn.Linear(width, classes)

    def forward(self, input_ids, attention_mask):
        e = self.emb(input_ids) * attention_mask.unsqueeze(-1)
        return self.fc(e.sum(1) / attention_mask.sum(1, keepdim=True).clamp(min=1.0))


class DecidedReLU(torch.nn.Module):
    """ReLU that records each call's input and, where `log["decide"]` says so, takes the
    given decision instead of its own: decide[k] = (where, positive) for the k-th call."""

    def __init__(self, log):
        super().__init__()
        self.log = log

    def forward(self, x):
        k = len(self.log["inputs"])
        self.log["inputs"].append(x.detach().double().numpy().copy())
        mask = x > 0
        decide = self.log.get("decide")
        if decide is not None:
            where, positive = decide[k]
            mask = torch.where(torch.from_numpy(where), torch.from_numpy(positive), mask)
        return x * mask.to(x.dtype)


def torch_grads(module, x, y, dtype, decide=None):
    """Loss, parameter gradients and every ReLU input (in call order) of one train-mode step."""
    m = copy.deepcopy(module).to(dtype)
    log = {"inputs": [], "decide": decide}
    for mod in list(m.modules()):
        for name, child in mod.named_children():
            if isinstance(child, torch.nn.ReLU):
                setattr(mod, name, DecidedReLU(log))
    m.train()
    m.zero_grad()
    loss = F.cross_entropy(m(torch.from_numpy(x).to(dtype)), torch.from_numpy(y))
    loss.backward()
    return float(loss), {n: p.grad.double().numpy() for n, p in m.named_parameters()}, log["inputs"]


def torch_losses(module, images, labels, batch, steps, lr, momentum, dtype=torch.float32):
    opt = torch.optim.SGD(module.parameters(), lr=lr, momentum=momentum)
    module.train()
    losses = []
    for s in range(steps):
        x = torch.from_numpy(images[s * batch:(s + 1) * batch]).to(dtype)
        y = torch.from_numpy(labels[s * batch:(s + 1) * batch])
        opt.zero_grad()
        loss = F.cross_entropy(module(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return losses
