#!/usr/bin/env python3
"""Training-step time of the same model exported two ways by PyTorch 2.x: the legacy
(TorchScript) exporter in training mode at opset 17, and the dynamo exporter with its
defaults (optimize=True, opset 20: BatchNorm folded into Conv and restored by onnx-train,
weights in model.onnx.data) and with optimize=False at opset 23 (ViT's attention as one
Attention op). onnx-train's train_step_bench times each file (ONNXTRAIN_BENCH_ONNX) on the
same random batch, interleaved over --rounds, the fastest of each kept. Prints dynamo/legacy
ratios: 1.00 means the exporter makes no difference to our step.

Models: the CIFAR-10 recipe's ResNet34 (3x3 stem, no max pool; batch 128) and the ViT of
benchmarks/zoo_step.py (patch 4, 32x32, 6 layers, width 192; batch 32).

    /var/cache/onnx-train/torch2/bin/python benchmarks/exporter_step.py --build build [--threads 2] [--rounds 3]
Needs PyTorch 2.x (scripts/install-torch2.sh).
"""
import argparse
import contextlib
import io
import os
import sys
import tempfile
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from compare_train_step import ours  # noqa: E402

import torch  # noqa: E402
import torchvision  # noqa: E402
from torch import nn  # noqa: E402


def build(name):
    if name == "resnet34":
        m = torchvision.models.resnet34(num_classes=10)
        m.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=2, padding=1, bias=False)
        m.maxpool = nn.Identity()
        return m, (3, 32, 32), 128
    if name == "vit":
        return torchvision.models.VisionTransformer(image_size=32, patch_size=4, num_layers=6, num_heads=3,
                                                    hidden_dim=192, mlp_dim=768, num_classes=10), (3, 32, 32), 32
    raise SystemExit(f"unknown model {name}")


def export(model, shape, path, how):
    x = torch.randn((2,) + shape)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        if how == "legacy":
            torch.onnx.export(model.train(), x, path, input_names=["input"], output_names=["logits"],
                              dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}}, dynamo=False,
                              training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False, opset_version=17)
        else:
            torch.onnx.export(model.train(), (x,), path, input_names=["input"], output_names=["logits"],
                              dynamic_shapes=({0: torch.export.Dim("batch")},), dynamo=True, external_data=True,
                              optimize=how == "dynamo", opset_version=20 if how == "dynamo" else 23)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--models", default="resnet34,vit")
    args = ap.parse_args()
    ways = ["legacy", "dynamo", "dynamo-noopt"]
    work = tempfile.mkdtemp(prefix="exporter_step_")
    print(f"PyTorch {torch.__version__}; {args.threads} threads; work folder {work}", flush=True)
    for name in args.models.split(","):
        torch.manual_seed(0)
        model, shape, batch = build(name)
        paths = {}
        for how in ways:
            paths[how] = os.path.join(work, f"{name}_{how}.onnx")
            export(model, shape, paths[how], how)
        best = {}
        for _ in range(args.rounds):
            for how in ways:
                os.environ.update(ONNXTRAIN_BENCH_ONNX=paths[how], ONNXTRAIN_BENCH_BATCH=str(batch))
                ms = ours(args.build, "onnx", batch, args.threads)["step_ms"]
                best[how] = min(best.get(how, ms), ms)
                print(f"  {name} {how}: {ms:.1f} ms", flush=True)
        print(f"{name} batch {batch}: legacy opset 17 {best['legacy']:.1f} ms, dynamo (optimize, opset 20) "
              f"{best['dynamo']:.1f} ms ({best['dynamo'] / best['legacy']:.3f} of legacy), dynamo optimize=False "
              f"opset 23 {best['dynamo-noopt']:.1f} ms ({best['dynamo-noopt'] / best['legacy']:.3f})", flush=True)


if __name__ == "__main__":
    main()
