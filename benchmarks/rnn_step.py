#!/usr/bin/env python3
"""Training-step time of LSTM, GRU and RNN classifiers, onnx-train beside PyTorch in the
same run: 2 layers, batch_first, batch 32, sequence 32, input 32, hidden 128, 10
classes, SGD momentum 0.9 on both sides.

PyTorch times its own step; the model is then exported with torch.onnx.export in training
mode and onnx-train's train_step_bench times the same step on it (ONNXTRAIN_BENCH_ONNX).
Reports CPU time per step (process CPU time for PyTorch, train_step_bench's cpu_time for
ours) and wall time, at --threads threads (default 1: CPU time is what stays comparable
on a shared machine). Prints ours/PyTorch ratios (lower is better).

    /usr/bin/python3 benchmarks/rnn_step.py --build build [--threads 1] [--kinds LSTM,GRU,RNN]
"""
import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from blas_threads import hold_blas_threads  # noqa: E402

hold_blas_threads(default=1)  # before torch loads OpenBLAS

BATCH, SEQ, FEATURES, HIDDEN, CLASSES, LAYERS = 32, 32, 32, 128, 10, 2


def torch_step(kind, threads, path):
    import torch
    torch.set_num_threads(threads)
    torch.manual_seed(0)

    class Classifier(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = getattr(torch.nn, kind)(FEATURES, HIDDEN, num_layers=LAYERS, batch_first=True)
            self.fc = torch.nn.Linear(HIDDEN, CLASSES)

        def forward(self, x):
            y, _ = self.rnn(x)
            return self.fc(y[:, -1])

    model = Classifier()
    x = torch.randn(BATCH, SEQ, FEATURES)
    y = torch.randint(0, CLASSES, (BATCH,))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(copy.deepcopy(model), x, path, input_names=["input"], output_names=["logits"],
                          dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False, opset_version=14)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    for _ in range(3):
        step()
    cpu, wall = [], []
    for _ in range(20):
        c, w = time.process_time(), time.perf_counter()
        step()
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - w)
    return 1000 * sorted(cpu)[10], 1000 * sorted(wall)[10]


def our_step(build, path, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), ONNXTRAIN_BENCH_ONNX=path, ONNXTRAIN_BENCH_BATCH=str(BATCH),
               ONNXTRAIN_BENCH_CLASSES=str(CLASSES))
    out = subprocess.run([os.path.join(build, "benchmarks", "train_step_bench"), f"--threads={threads}",
                          "--benchmark_filter=^train_step/onnx", "--benchmark_format=json"],
                         capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-400:])
    b = json.loads(out.stdout)["benchmarks"][0]
    if b.get("error_occurred"):
        raise RuntimeError(b.get("error_message", "benchmark error"))
    return b["cpu_time"], b["real_time"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--kinds", default="LSTM,GRU,RNN")
    args = ap.parse_args()
    print(f"batch {BATCH}, seq {SEQ}, input {FEATURES}, hidden {HIDDEN}, {LAYERS} layers, {args.threads} thread(s); "
          "ms per training step (median)")
    print(f"{'model':<6} {'torch cpu':>10} {'ours cpu':>10} {'ratio':>6}   {'torch wall':>10} {'ours wall':>10} {'ratio':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.kinds.split(","):
            path = os.path.join(tmp, kind + ".onnx")
            tc, tw = torch_step(kind, args.threads, path)
            oc, ow = our_step(args.build, path, args.threads)
            print(f"{kind:<6} {tc:>10.2f} {oc:>10.2f} {oc / tc:>6.2f}   {tw:>10.2f} {ow:>10.2f} {ow / tw:>6.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
