#!/usr/bin/env python3
"""Training-step time and peak memory of models beyond ResNet, onnx-train beside PyTorch in
the same run: MobileNetV2 and EfficientNet-B0 at 3x64x64, a ViT (patch 4, 32x32, 6 layers,
width 192) and a token transformer encoder, batch 32, SGD momentum 0.9 on every side.

PyTorch 2.x is the peer (the venv of scripts/install-torch2.sh; its columns are left out,
with a line that says so, where the venv is missing) and Debian's PyTorch 1.13 runs beside it:
each runs each case in a fresh process (its own peak RSS). The model is then exported with
Debian's torch.onnx.export in training mode and onnx-train's train_step_bench times the same
step on it (ONNXTRAIN_BENCH_ONNX). Prints a JSON line per model, then a table with
ours/torch2 and ours/torch1.13 ratios (lower is better).

    /usr/bin/python3 benchmarks/zoo_step.py --build build [--threads 2] [--models mobilenet_v2,vit]
        [--torch2-python PY|''] [--torch1-python PY]
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from blas_threads import hold_blas_threads  # noqa: E402
from compare_train_step import ours  # noqa: E402
from torch_peers import (default_torch2_python, find_peers, print_errors, print_table, rss_columns,  # noqa: E402
                         time_columns)

hold_blas_threads(default=2)  # before torch loads OpenBLAS

BATCH = 32
VOCAB, SEQ = 1000, 32


def build(name):
    import torch
    from torch import nn
    import torchvision
    if name == "mobilenet_v2":
        return torchvision.models.mobilenet_v2(num_classes=10, dropout=0.0), (3, 64, 64)
    if name == "efficientnet_b0":
        # efficientnet_b0 fixes its classifier dropout (0.2; passing dropout= is a TypeError in
        # torchvision 0.14), so it is set to 0 here like everywhere else.
        m = torchvision.models.efficientnet_b0(num_classes=10, stochastic_depth_prob=0.0)
        m.classifier[0].p = 0.0
        return m, (3, 64, 64)
    if name == "vit":
        return torchvision.models.VisionTransformer(image_size=32, patch_size=4, num_layers=6, num_heads=3,
                                                    hidden_dim=192, mlp_dim=768, num_classes=10), (3, 32, 32)
    if name == "transformer":
        class TokenTransformer(nn.Module):
            def __init__(self):
                super().__init__()
                self.embed = nn.Embedding(VOCAB, 128)
                self.pos = nn.Parameter(torch.randn(1, SEQ, 128) * 0.02)
                layer = nn.TransformerEncoderLayer(128, 4, 512, dropout=0.0, batch_first=True)
                self.encoder = nn.TransformerEncoder(layer, 4)
                self.fc = nn.Linear(128, 10)
                self.register_buffer("mask", torch.triu(torch.full((SEQ, SEQ), float("-inf")), diagonal=1))

            def forward(self, ids):
                return self.fc(self.encoder(self.embed(ids) + self.pos, mask=self.mask).mean(1))
        return TokenTransformer(), (SEQ,)
    raise SystemExit(f"unknown model {name}")


def example(shape, batch):
    import torch
    if len(shape) == 1:
        return torch.randint(0, VOCAB, (batch,) + shape)
    return torch.randn((batch,) + shape)


def torch_case(name, threads, steps):
    import torch
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model, shape = build(name)
    x, y = example(shape, BATCH), torch.randint(0, 10, (BATCH,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    model.train()
    for i in range(2 + steps):
        if i == 2:
            start = time.perf_counter()
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
    t = (time.perf_counter() - start) / steps
    print(json.dumps({"framework": "pytorch-" + torch.__version__, "model": name, "step_ms": 1000 * t,
                      "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}))


def export(name, path):
    import torch
    torch.manual_seed(0)
    model, shape = build(name)
    model.train()
    torch.onnx.export(model, example(shape, 2), path, input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}}, opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--models", default="mobilenet_v2,efficientnet_b0,vit,transformer")
    ap.add_argument("--torch2-python", default=default_torch2_python(),
                    help="python of the PyTorch 2.x venv (scripts/install-torch2.sh); empty: leave it out")
    ap.add_argument("--torch1-python", default=sys.executable, help="python of Debian's PyTorch 1.13")
    ap.add_argument("--torch-case", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_case:
        return torch_case(args.torch_case, args.threads, args.steps)
    peers = find_peers(args.torch2_python, args.torch1_python)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            row = {"model": name, "batch": BATCH}
            for p in peers:
                row[f"{p.key}_version"] = p.version
                # From /tmp: a `torch` folder in the current directory would shadow the package.
                out = subprocess.run([p.python, os.path.abspath(__file__), "--torch-case", name, "--threads",
                                      str(args.threads), "--steps", str(args.steps)],
                                     capture_output=True, text=True, cwd="/tmp")
                if out.returncode != 0:
                    row[f"{p.key}_error"] = out.stderr.strip()[-300:]
                    continue
                ref = json.loads(out.stdout.strip().splitlines()[-1])
                row.update({f"{p.key}_ms": ref["step_ms"], f"{p.key}_rss_mb": ref["peak_rss_mb"]})
            path = os.path.join(tmp, name + ".onnx")
            out = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {HERE!r}); import zoo_step; "
                                  f"zoo_step.export({name!r}, {path!r})"], capture_output=True, text=True)
            if out.returncode != 0:
                raise SystemExit(f"zoo_step: exporting {name} failed: {out.stderr.strip()[-400:]}")
            os.environ.update(ONNXTRAIN_BENCH_ONNX=path, ONNXTRAIN_BENCH_BATCH=str(BATCH),
                              ONNXTRAIN_BENCH_VOCAB=str(VOCAB))
            try:
                mine = ours(args.build, "onnx", BATCH, args.threads)
                row.update({"ours_ms": mine["step_ms"], "ours_rss_mb": mine["peak_rss_mb"]})
                for p in peers:
                    if f"{p.key}_ms" in row:
                        row[f"ours_vs_{p.key}"] = row["ours_ms"] / row[f"{p.key}_ms"]
                        row[f"ours_vs_{p.key}_rss"] = row["ours_rss_mb"] / row[f"{p.key}_rss_mb"]
            except RuntimeError as e:
                row["ours_error"] = str(e)[-200:]
            rows.append(row)
            print(json.dumps(row), flush=True)
    print()
    print_table([("model", 16, "model", None), ("ours ms", 9, "ours_ms", 1)] + time_columns(peers, 9, 11, 1)
                + [("ours MB", 8, "ours_rss_mb", 0)] + rss_columns(peers, 9, 11), rows)
    print_errors(rows)


if __name__ == "__main__":
    sys.exit(main())
