#!/usr/bin/env python3
"""Mixed-precision training-step benchmark (issue 40's acceptance): onnx-train's step under
--amp bf16 beside its own float32 step and PyTorch 2.x's autocast-bf16 step, same run, same
threads, interleaved rounds (the fastest of each kept). Two cases:

  resnet34  the CIFAR-10 recipe's ResNet34 (make-model), 3x32x32, batch 128, SGD momentum 0.9
  vit       torchvision's VisionTransformer (patch 4, 32x32, 6 layers, width 192, 3 heads),
            batch 32, exported as benchmarks/zoo_step.py does it

Ours is train_step_bench (ONNXTRAIN_BENCH_AMP=bf16 for --amp bf16); PyTorch's step runs
forward and loss under torch.autocast("cpu", torch.bfloat16) on float32 weights. Prints one
JSON line per measurement and a table of the ratios (lower is better), with the load average.

    /usr/bin/python3 benchmarks/amp_step.py --build build [--threads 2] [--models resnet34,vit] [--rounds 2]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from compare_train_step import ours  # noqa: E402
from torch_peers import default_torch2_python  # noqa: E402


def torch_vit(threads, steps, amp):
    """Runs inside the torch2 venv: one ViT step time (ms), autocast bf16 when amp."""
    import torch
    import torchvision
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = torchvision.models.VisionTransformer(image_size=32, patch_size=4, num_layers=6, num_heads=3,
                                                 hidden_dim=192, mlp_dim=768, num_classes=10)
    x, y = torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    model.train()
    for i in range(2 + steps):
        if i == 2:
            start = time.perf_counter()
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    return 1000 * (time.perf_counter() - start) / steps


def torch_step(py, model, threads, amp):
    if model == "resnet34":
        cmd = [py, os.path.join(HERE, "torch_step.py"), "--threads", str(threads), "--model", "resnet34",
               "--steps", "3", "--warmup", "2"] + (["--amp", "bf16"] if amp else [])
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])["step_ms"]
    cmd = [py, __file__, "--torch-vit", "1" if amp else "0", "--threads", str(threads)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def ours_step(build, model, threads, amp, vit_path):
    os.environ.pop("ONNXTRAIN_BENCH_AMP", None)
    os.environ.pop("ONNXTRAIN_BENCH_ONNX", None)
    if amp:
        os.environ["ONNXTRAIN_BENCH_AMP"] = "bf16"
    if model == "vit":
        os.environ["ONNXTRAIN_BENCH_ONNX"] = vit_path
        os.environ["ONNXTRAIN_BENCH_BATCH"] = "32"
        return ours(build, "onnx", 32, threads)["step_ms"]
    return ours(build, "resnet34", 128, threads)["step_ms"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--models", default="resnet34,vit")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--torch2-python", default=default_torch2_python())
    ap.add_argument("--torch-vit", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.torch_vit is not None:
        print(torch_vit(a.threads, 3, a.torch_vit == "1"))
        return
    if not a.torch2_python:
        sys.exit("amp_step: PyTorch 2.x's venv is missing (scripts/install-torch2.sh); it is the reference")
    tmp = tempfile.mkdtemp()
    vit_path = os.path.join(tmp, "vit.onnx")
    if "vit" in a.models:
        subprocess.run(["/usr/bin/python3", "-c", f"import sys; sys.path.insert(0, {HERE!r}); import zoo_step; "
                        f"zoo_step.export('vit', {vit_path!r})"], check=True, capture_output=True)
    print(f"load average before: {open('/proc/loadavg').read().split()[:3]}")
    best = {}
    for r in range(a.rounds):
        for model in a.models.split(","):
            for name, run in [("ours f32", lambda: ours_step(a.build, model, a.threads, False, vit_path)),
                              ("ours bf16", lambda: ours_step(a.build, model, a.threads, True, vit_path)),
                              ("torch2 bf16", lambda: torch_step(a.torch2_python, model, a.threads, True)),
                              ("torch2 f32", lambda: torch_step(a.torch2_python, model, a.threads, False))]:
                ms = run()
                print(json.dumps({"round": r, "model": model, "case": name, "step_ms": round(ms, 1)}), flush=True)
                key = (model, name)
                best[key] = min(ms, best.get(key, ms))
    print(f"load average after: {open('/proc/loadavg').read().split()[:3]}")
    print("| model | ours bf16 ms | ours f32 ms | torch2 bf16 ms | torch2 f32 ms | bf16/our f32 | bf16/torch2 bf16 |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for model in a.models.split(","):
        b, f, t, tf = (best[(model, k)] for k in ("ours bf16", "ours f32", "torch2 bf16", "torch2 f32"))
        print(f"| {model} | {b:.0f} | {f:.0f} | {t:.0f} | {tf:.0f} | {b / f:.2f} | {b / t:.2f} |")


if __name__ == "__main__":
    main()
