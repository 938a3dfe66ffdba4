#!/usr/bin/env python3
"""The model zoo of issue 13: PyTorch autograd parity of `onnx-train grad` on one small model
of every torchvision classification family, a token transformer encoder, an LSTM and a GRU
classifier, each exported by torch.onnx.export in training mode at opsets 13 and 17.

Each model is built in PyTorch with random weights (BatchNorm affine parameters and running
statistics away from 1/0/0/1), dropout and stochastic depth at 0, a dynamic batch axis. The
loss is the mean cross-entropy of the logits against int64 labels. PyTorch autograd gives
every parameter gradient in float64 (the oracle) and in float32; each of our float32
gradients must lie within max(1e-4, 3x PyTorch float32's own distance) of float64, relative
by norm per tensor; gradients that are zero in exact arithmetic (a conv bias before
BatchNorm) are measured against the median gradient norm instead of their own.
The loss is held to the same max(1e-4, 3x PyTorch float32's distance).
`onnx-train export` of each model must write a training graph that onnx.checker accepts.

Small configurations keep the whole test near a few minutes on 2 cores. AlexNet and VGG end
in AdaptiveAvgPool2d((7, 7)) / ((6, 6)), which torch cannot export from the 1x1 map a small
input leaves (the output size is not a factor of the input size), so they get a 32x32 /
64x64 input, no adaptive pool and a smaller matching classifier; VGG-BN also has narrower
feature widths (same layer pattern as vgg11_bn).

A model listed in KNOWN_FAILURES (with the op or bug it waits for) is run and reported but
not counted; one that passes is flagged so the entry can be removed.

Run by CTest (target torch_zoo_test); by hand:
    /usr/bin/python3 tests/torch_zoo_test.py --onnx-train build/tools/onnx-train --workdir /tmp/zoo \
        [--models vit,lstm] [--opsets 13,17] [--failures FILE]
"""
import argparse
import copy
import os
import subprocess
import sys
import time
import warnings

try:
    import numpy as np
    import onnx
    import onnx.checker
    import onnx.numpy_helper
    import torch
    import torchvision
    from torch import nn
    import torch.nn.functional as F
except ImportError as e:  # a dependency is missing: fail with what to do
    sys.exit(f"torch_zoo_test: {e}; install python3-torch, python3-torchvision and python3-onnx "
             f"(scripts/install-deps.sh) and run this with that Python ({sys.executable} lacks them)")

CLASSES = 10
VOCAB, SEQ = 50, 12

# Models that fail today for a reason owned elsewhere: name -> what they wait for. Run and
# reported, not counted.
KNOWN_FAILURES = {
    "inception_v3": "130 of 284 gradients above the limit, from Mixed_6c back (Mixed_6c.branch7x7dbl_4.bn.bias "
                    "3.4e-2 where PyTorch float32 is 4.5e-4); not reproduced by 1x7/7x1 conv + BatchNorm alone; "
                    "not yet isolated (ZOO-FAILURES.txt)",
    "mobilenet_v2": "139 of 158 gradients above the limit from the last BatchNorm back (features.18.1.bias 2.8e-2 "
                    "where PyTorch float32 is 6e-6); not Clip (ReLU in place of ReLU6 fails alike), not the last "
                    "BatchNorm alone; not yet isolated (ZOO-FAILURES.txt)",
}


# ---------------------------------------------------------------------------------------
# The zoo. Each builder returns (module, input shape without batch, input kind).

def alexnet():
    m = torchvision.models.AlexNet(num_classes=CLASSES, dropout=0.0)
    # 64x64 leaves a 256x1x1 map: no adaptive pool to 6x6 (not exportable), a matching classifier.
    m.avgpool = nn.Identity()
    m.classifier = nn.Sequential(nn.Dropout(0.0), nn.Linear(256, 64), nn.ReLU(inplace=True), nn.Dropout(0.0),
                                 nn.Linear(64, 64), nn.ReLU(inplace=True), nn.Linear(64, CLASSES))
    return m, (3, 64, 64)


def vgg_bn():
    from torchvision.models.vgg import make_layers
    # vgg11_bn's pattern ("A": 8 convs, 5 max pools) at a quarter of the widths.
    features = make_layers([16, "M", 32, "M", 64, 64, "M", 128, 128, "M", 128, 128, "M"], batch_norm=True)
    m = torchvision.models.VGG(features, num_classes=CLASSES, dropout=0.0)
    m.avgpool = nn.Identity()
    m.classifier = nn.Sequential(nn.Linear(128, 64), nn.ReLU(True), nn.Dropout(0.0), nn.Linear(64, 64),
                                 nn.ReLU(True), nn.Dropout(0.0), nn.Linear(64, CLASSES))
    return m, (3, 32, 32)


def resnet():
    from torchvision.models.resnet import BasicBlock, ResNet
    return ResNet(BasicBlock, [1, 1, 1, 1], num_classes=CLASSES), (3, 32, 32)


def resnext():
    from torchvision.models.resnet import Bottleneck, ResNet
    m = ResNet(Bottleneck, [1, 1, 1, 1], groups=8, width_per_group=4, num_classes=CLASSES)
    return m, (3, 32, 32)


def wide_resnet():
    from torchvision.models.resnet import Bottleneck, ResNet
    # wide_resnet50_2 doubles the bottleneck width (width_per_group 128); one block per stage.
    return ResNet(Bottleneck, [1, 1, 1, 1], width_per_group=128, num_classes=CLASSES), (3, 32, 32)


def densenet():
    m = torchvision.models.DenseNet(growth_rate=8, block_config=(2, 2, 2, 2), num_init_features=16, bn_size=2,
                                    drop_rate=0.0, num_classes=CLASSES)
    return m, (3, 32, 32)


def googlenet():
    m = torchvision.models.GoogLeNet(num_classes=CLASSES, aux_logits=False, transform_input=False,
                                     init_weights=False, dropout=0.0)
    return m, (3, 32, 32)


def inception_v3():
    # 75x75 is the smallest input Inception v3 takes.
    m = torchvision.models.Inception3(num_classes=CLASSES, aux_logits=False, transform_input=False,
                                      init_weights=False, dropout=0.0)
    return m, (3, 75, 75)


def squeezenet():
    return torchvision.models.squeezenet1_1(num_classes=CLASSES, dropout=0.0), (3, 48, 48)


def shufflenet_v2():
    return torchvision.models.shufflenet_v2_x0_5(num_classes=CLASSES), (3, 32, 32)


def mobilenet_v2():
    return torchvision.models.mobilenet_v2(num_classes=CLASSES, width_mult=0.5, dropout=0.0), (3, 32, 32)


def mobilenet_v3():
    return torchvision.models.mobilenet_v3_small(num_classes=CLASSES, width_mult=0.5, dropout=0.0), (3, 32, 32)


def mnasnet():
    return torchvision.models.mnasnet0_5(num_classes=CLASSES, dropout=0.0), (3, 32, 32)


def efficientnet():
    from functools import partial
    from torchvision.models.efficientnet import EfficientNet, MBConvConfig
    # efficientnet_b0's block kinds (MBConv with squeeze-excitation and SiLU), 3 stages, width 0.5.
    conf = partial(MBConvConfig, width_mult=0.5, depth_mult=1.0)
    setting = [conf(1, 3, 1, 32, 16, 1), conf(6, 3, 2, 16, 24, 2), conf(6, 5, 2, 24, 40, 1)]
    return EfficientNet(setting, dropout=0.0, stochastic_depth_prob=0.0, num_classes=CLASSES), (3, 32, 32)


def regnet():
    from torchvision.models.regnet import BlockParams, RegNet
    # RegNetY's blocks (grouped bottleneck with squeeze-excitation), a narrow 3-stage design.
    params = BlockParams.from_init_params(depth=5, w_0=16, w_a=8.0, w_m=2.0, group_width=8, se_ratio=0.25)
    return RegNet(params, num_classes=CLASSES), (3, 32, 32)


def convnext():
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt
    setting = [CNBlockConfig(16, 32, 1), CNBlockConfig(32, 64, 1), CNBlockConfig(64, None, 1)]
    return ConvNeXt(setting, stochastic_depth_prob=0.0, num_classes=CLASSES), (3, 32, 32)


def vit():
    m = torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32,
                                             mlp_dim=64, num_classes=CLASSES)
    return m, (3, 32, 32)


def swin():
    from torchvision.models.swin_transformer import SwinTransformer
    m = SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 4], window_size=[4, 4],
                        stochastic_depth_prob=0.0, num_classes=CLASSES)
    return m, (3, 32, 32)


class TokenTransformer(nn.Module):
    """nn.TransformerEncoder over int64 token ids: embedding, learned positions, causal mask."""

    def __init__(self, width=32, heads=2, layers=2):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, width)
        self.pos = nn.Parameter(torch.randn(1, SEQ, width) * 0.5)
        layer = nn.TransformerEncoderLayer(width, heads, 2 * width, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.fc = nn.Linear(width, CLASSES)
        self.register_buffer("mask", torch.triu(torch.full((SEQ, SEQ), float("-inf")), diagonal=1))

    def forward(self, ids):
        return self.fc(self.encoder(self.embed(ids) + self.pos, mask=self.mask).mean(1))


class RecurrentClassifier(nn.Module):
    """A 2-layer LSTM or GRU (the second bidirectional) over float sequences, last step -> linear."""

    def __init__(self, cell, features=6, hidden=12):
        super().__init__()
        rnn = nn.LSTM if cell == "lstm" else nn.GRU
        self.rnn1 = rnn(features, hidden, batch_first=True)
        self.rnn2 = rnn(hidden, hidden, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(2 * hidden, CLASSES)

    def forward(self, x):
        h, _ = self.rnn1(x)
        h, _ = self.rnn2(h)
        return self.fc(h[:, -1])


ZOO = {
    "alexnet": alexnet, "vgg11_bn": vgg_bn, "resnet": resnet, "resnext": resnext, "wide_resnet": wide_resnet,
    "densenet": densenet, "googlenet": googlenet, "inception_v3": inception_v3, "squeezenet": squeezenet,
    "shufflenet_v2": shufflenet_v2, "mobilenet_v2": mobilenet_v2, "mobilenet_v3": mobilenet_v3, "mnasnet": mnasnet,
    "efficientnet": efficientnet, "regnet": regnet, "convnext": convnext, "vit": vit, "swin": swin,
    "transformer": lambda: (TokenTransformer(), (SEQ,)),
    "lstm": lambda: (RecurrentClassifier("lstm"), (7, 6)),
    "gru": lambda: (RecurrentClassifier("gru"), (7, 6)),
}
BATCH = {}  # default 4 (BatchNorm over 1x1 maps wants more than 2)
# Nets whose BatchNorm -> ReLU -> (depthwise) conv -> BatchNorm chains reach 1x1 maps: with
# BatchNorm biases around 0 a few samples often all fall below the ReLU, the next BatchNorm
# sees a channel of nearly equal values, and float32 (PyTorch's as much as ours) cancels to
# noise there (PyTorch float32 1e-2 to 1 from float64). Biases around 0.3 keep them alive.
POSITIVE_BN_BIAS = {"inception_v3", "mnasnet", "regnet", "mobilenet_v2", "mobilenet_v3", "shufflenet_v2"}
LARGE = {"inception_v3", "wide_resnet", "googlenet"}  # seconds per PyTorch float64 step


def randomise_norms(module, gen, bias_mean):
    """BatchNorm/LayerNorm affine parameters and running statistics away from 1/0/0/1."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, (nn.BatchNorm2d, nn.LayerNorm)) and m.weight is not None:
                m.weight.copy_(1 + 0.2 * torch.randn(m.weight.shape, generator=gen))
                m.bias.copy_(bias_mean + 0.2 * torch.randn(m.bias.shape, generator=gen))
            if isinstance(m, nn.BatchNorm2d) and m.running_mean is not None:
                m.running_mean.copy_(0.1 * torch.randn(m.running_mean.shape, generator=gen))
                m.running_var.copy_(1 + 0.2 * torch.rand(m.running_var.shape, generator=gen))


def make_input(name, shape, batch, rng):
    if name == "transformer":
        return rng.integers(0, VOCAB, size=(batch,) + shape).astype(np.int64)
    return rng.standard_normal((batch,) + shape).astype(np.float32)


def torch_grads(module, x, y, dtype):
    m = copy.deepcopy(module).to(dtype).train()
    m.zero_grad()
    xt = torch.from_numpy(x)
    if xt.is_floating_point():
        xt = xt.to(dtype)
    loss = F.cross_entropy(m(xt), torch.from_numpy(y))
    loss.backward()
    return float(loss), {n: p.grad.double().numpy() for n, p in m.named_parameters() if p.grad is not None}


def export(module, x, path, opset):
    example = torch.from_numpy(x[:2])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(copy.deepcopy(module).train(), example, path, input_names=["input"],
                          output_names=["logits"], dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                          opset_version=opset)


def write_tensor(array, name, path):
    with open(path, "wb") as f:
        f.write(onnx.numpy_helper.from_array(array, name=name).SerializeToString())


def read_tensor(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t.name, onnx.numpy_helper.to_array(t)


def last_error_line(proc):
    text = (proc.stderr.strip() or proc.stdout.strip() or f"exit {proc.returncode}")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return (lines[-1] if lines else text)[:600]


def run_grad(binary, model_path, x, y, workdir, tag):
    xp, yp = os.path.join(workdir, tag + "_x.pb"), os.path.join(workdir, tag + "_y.pb")
    write_tensor(x, "input", xp)
    write_tensor(y, "labels", yp)
    out = os.path.join(workdir, tag + "_grads")
    proc = subprocess.run([binary, "grad", model_path, "--threads", "2", "--input", "input=" + xp, "--input",
                           "labels=" + yp, "-o", out], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError("grad: " + last_error_line(proc))
    return dict(read_tensor(os.path.join(out, f)) for f in os.listdir(out))


def run_export(binary, model_path, workdir, tag):
    out = os.path.join(workdir, tag + "_training.onnx")
    proc = subprocess.run([binary, "export", model_path, "-o", out], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError("export: " + last_error_line(proc))
    try:
        onnx.checker.check_model(out)
    except Exception as e:  # noqa: BLE001  (the checker raises several kinds)
        raise RuntimeError(f"onnx.checker rejects the training graph: {str(e).splitlines()[0][:300]}")
    finally:
        os.remove(out)


def denominators(ref):
    """Per tensor, what its distance is relative to: its own norm, except for gradients that
    are zero in exact arithmetic (the bias of a conv or BatchNorm whose output feeds a
    BatchNorm, which cancels any shift; float64 leaves them at 1e-15 of the others). Their
    float32 values are rounding noise of the gradients flowing through, on PyTorch's side as
    on ours, so they are measured against the median gradient norm (at least 1e-3)."""
    median = float(np.median([np.linalg.norm(g) for g in ref.values()]))
    norms = {k: float(np.linalg.norm(g)) for k, g in ref.items()}
    return {k: (n if n > 1e-6 * median else max(median, 1e-3)) for k, n in norms.items()}


def compare(ours, ref_loss, loss32, ref, ref32):
    """(worst distance, its tensor, worst torch f32 distance, failure lines)."""
    failures = []
    loss = float(ours.pop("loss"))
    loss_err = abs(loss - ref_loss) / max(abs(ref_loss), 1e-3)
    loss_t32 = abs(loss32 - ref_loss) / max(abs(ref_loss), 1e-3)
    if loss_err > max(1e-4, 3 * loss_t32):
        failures.append(f"loss {loss:.6g} vs torch float64 {ref_loss:.6g} ({loss_err:.1e}; torch float32 "
                        f"{loss_t32:.1e})")
    missing = sorted(set(ref) - set(ours))
    if missing:
        failures.append(f"no gradient for {len(missing)} parameters, e.g. " + ", ".join(missing[:4]))
    denominator = denominators(ref)
    worst, worst_name, worst_t32 = 0.0, "", 0.0
    above = []
    for name, g in ref.items():
        if name not in ours:
            continue
        a = ours[name].astype(np.float64)
        if a.shape != g.shape:
            failures.append(f"{name}: shape {a.shape} vs torch {g.shape}")
            continue
        scale = denominator[name]
        err = float(np.linalg.norm(a - g) / scale)
        t32 = float(np.linalg.norm(ref32[name] - g) / scale)
        worst_t32 = max(worst_t32, t32)
        if err > worst:
            worst, worst_name = err, name
        if err > max(1e-4, 3 * t32):
            above.append(f"{name}: {err:.2e} from float64 by norm (torch float32: {t32:.2e})")
    if above:
        # Parameters come in model order: the last one above the limit is nearest the loss,
        # where a wrong gradient first enters the backward pass.
        failures.append(f"{len(above)} of {len(ref)} gradients above the limit; nearest the loss: {above[-1]}")
        failures.extend(above)
    return worst, worst_name, worst_t32, failures


def check_model(args, name, opsets, seed):
    """One model at each opset: a list of result rows."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    module, shape = ZOO[name]()
    randomise_norms(module, gen, 0.3 if name in POSITIVE_BN_BIAS else 0.0)
    batch = BATCH.get(name, 4)
    # BatchNorm over a 1x1 map of a few samples after a ReLU can see a channel of nearly
    # equal values: float32 then cancels to noise, on PyTorch's side as much as ours, and
    # the comparison says little. Draw up to three batches and keep the best conditioned
    # (PyTorch float32 nearest float64); the large models get one draw.
    best = None
    for _ in range(1 if name in LARGE else 3):
        x = make_input(name, shape, batch, rng)
        y = rng.integers(0, CLASSES, size=batch).astype(np.int64)
        ref_loss, ref = torch_grads(module, x, y, torch.float64)
        loss32, ref32 = torch_grads(module, x, y, torch.float32)
        denominator = denominators(ref)
        t32 = max(float(np.linalg.norm(ref32[k] - g)) / denominator[k] for k, g in ref.items())
        if best is None or t32 < best[0]:
            best = (t32, x, y, ref_loss, loss32, ref, ref32)
        if t32 < 1e-3:
            break
    _, x, y, ref_loss, loss32, ref, ref32 = best
    rows = []
    for opset in opsets:
        tag = f"{name}_opset{opset}"
        path = os.path.join(args.workdir, tag + ".onnx")
        start = time.time()
        row = {"model": name, "opset": opset, "worst": float("nan"), "t32": float("nan"), "failures": []}
        try:
            export(module, x, path, opset)
        except Exception as e:  # noqa: BLE001  (torch's exporter raises many kinds)
            row["failures"] = [f"torch.onnx.export: {str(e).splitlines()[0][:300]}"]
            rows.append(row)
            continue
        try:
            ours = run_grad(args.onnx_train, path, x, y, args.workdir, tag)
            row["worst"], row["where"], row["t32"], row["failures"] = compare(ours, ref_loss, loss32, ref, ref32)
        except RuntimeError as e:
            row["failures"].append(str(e))
        try:
            run_export(args.onnx_train, path, args.workdir, tag)
        except RuntimeError as e:
            row["failures"].append(str(e))
        os.remove(path)
        row["seconds"] = time.time() - start
        rows.append(row)
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--onnx-train", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--models", default=",".join(ZOO))
    p.add_argument("--opsets", default="13,17")
    p.add_argument("--failures", help="also write each failing model's first failure lines to this file")
    args = p.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    torch.set_num_threads(2)
    start = time.time()
    names = args.models.split(",")
    unknown = [n for n in names if n not in ZOO]
    if unknown:
        p.error(f"unknown models {unknown}; the zoo has {', '.join(ZOO)}")
    opsets = [int(o) for o in args.opsets.split(",")]
    rows = []
    print(f"{'model':<14} {'opset':>5} {'ours worst':>11} {'torch f32':>10} {'limit':>9}  {'result':<8} seconds",
          flush=True)
    for name in names:
        for row in check_model(args, name, opsets, seed=1300 + list(ZOO).index(name)):
            ok = not row["failures"]
            known = name in KNOWN_FAILURES
            row["result"] = ("pass" if not known else "XPASS") if ok else ("known" if known else "FAIL")
            limit = max(1e-4, 3 * row["t32"]) if row["t32"] == row["t32"] else float("nan")
            print(f"{name:<14} {row['opset']:>5} {row['worst']:>11.2e} {row['t32']:>10.2e} {limit:>9.1e}  "
                  f"{row['result']:<8} {row.get('seconds', 0):.1f}", flush=True)
            for f in row["failures"][:4]:
                print("      " + f, flush=True)
            if known and not ok:
                print(f"      (known: {KNOWN_FAILURES[name]})")
            rows.append(row)
    counts = {k: sum(r["result"] == k for r in rows) for k in ("pass", "FAIL", "known", "XPASS")}
    print(f"torch_zoo_test: {counts['pass']} passed, {counts['FAIL']} failed, {counts['known']} known failures, "
          f"{counts['XPASS']} known failures now passing (remove from KNOWN_FAILURES), "
          f"{len(rows)} model/opset cases in {time.time() - start:.0f} s")
    if args.failures:
        with open(args.failures, "w") as f:
            f.write(f"# torch_zoo_test {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}: model, opset, "
                    "first failure lines (missing op / wrong gradient / crash)\n")
            for r in rows:
                if r["failures"]:
                    f.write(f"{r['model']} opset {r['opset']}:\n")
                    for line in r["failures"][:6]:
                        f.write(f"    {line}\n")
            passing = sorted({f"{r['model']}@{r['opset']}" for r in rows if not r["failures"]})
            f.write(f"# passing: {' '.join(passing) or 'none'}\n")
    return 0 if counts["FAIL"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
