#!/usr/bin/env python3
"""Step time of head-only fine-tuning against full fine-tuning, same run.

torchvision's ResNet-50 (random weights: the step time does not depend on them), exported
by torch in training mode, trained by `onnx-train MODEL --data synthetic:N:3xSxS` for a
few steps each way:
  full       every parameter trains;
  head       --train-only 'fc.*' (no gradient is computed for the backbone at all);
  head+bn    --train-only 'fc.*' --freeze-bn-stats (the backbone's BatchNorm also stops
             computing batch statistics).
Step times come from the --metrics jsonl (each step's "time" minus the previous one); the
first --skip steps (planning, warm-up) are left out and the median of the rest reported.

    /usr/bin/python3 benchmarks/finetune_step.py --onnx-train build/tools/onnx-train \\
        [--size 64] [--batch 16] [--threads 2] [--steps 8] [--workdir /tmp/finetune_bench]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import warnings

import torch
import torchvision


def export_resnet50(path, size):
    torch.manual_seed(0)
    model = torchvision.models.resnet50(num_classes=10)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, torch.zeros(2, 3, size, size), path, input_names=["input"], output_names=["logits"],
                          dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}},
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)


def step_times(args, model, tag, flags):
    metrics = os.path.join(args.workdir, tag + ".jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    samples = args.batch * args.steps
    cmd = [args.onnx_train, model, "--data", f"synthetic:{samples}:3x{args.size}x{args.size}", "--epochs", "1",
           "--batch", str(args.batch), "--threads", str(args.threads), "--metrics", metrics, "--no-checkpoints",
           "--quiet", "--max-steps", str(args.steps)] + flags
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=args.workdir)
    if r.returncode != 0:
        sys.exit(f"{tag}: {(r.stderr.strip().splitlines() or ['exit %d' % r.returncode])[-1]}")
    with open(metrics) as f:
        times = [row["time"] for row in map(json.loads, f) if row.get("type") == "step"]
    return [b - a for a, b in zip(times, times[1:])][args.skip - 1:]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--onnx-train", required=True)
    ap.add_argument("--workdir", default="/tmp/finetune_bench")
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--skip", type=int, default=2, help="first steps left out (planning, warm-up)")
    args = ap.parse_args()
    args.onnx_train = os.path.abspath(args.onnx_train)
    os.makedirs(args.workdir, exist_ok=True)
    model = os.path.join(args.workdir, f"resnet50_{args.size}.onnx")
    if not os.path.exists(model):
        export_resnet50(model, args.size)
    print(f"ResNet-50, 3x{args.size}x{args.size}, batch {args.batch}, {args.threads} threads, "
          f"median of {args.steps - args.skip} steps after {args.skip}")
    runs = [("full", []), ("head", ["--train-only", "fc.*"]),
            ("head+bn", ["--train-only", "fc.*", "--freeze-bn-stats"])]
    medians = {}
    for tag, flags in runs:
        t = step_times(args, model, tag, flags)
        medians[tag] = statistics.median(t)
        print(f"  {tag:8s} {' '.join(flags) or '(all parameters)':40s} step {medians[tag] * 1000:8.1f} ms "
              f"(min {min(t) * 1000:.1f}, max {max(t) * 1000:.1f})")
    for tag in ("head", "head+bn"):
        print(f"  full / {tag}: {medians['full'] / medians[tag]:.2f}x")


if __name__ == "__main__":
    main()
