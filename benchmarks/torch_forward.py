#!/usr/bin/env python3
"""PyTorch reference for benchmarks/forward_bench.cc: forward-pass time on this machine's CPU
of the two reference models (ResNet34 with the CIFAR-10 stem at batch 128, SimpleNN at
batch 32), in eval mode (no_grad, running batch-norm statistics: what onnx-train's
inference graph computes) and in train mode (autograd recording, batch statistics: the
forward half of a training step).

    python3 torch_forward.py [--threads 2] [--model resnet34|simplenn|all] [--repetitions 3]
                             [--ours forward_bench.json]

Prints one JSON object per line. With --ours (Google Benchmark's JSON output of
forward_bench) it then prints onnx-train's throughput over PyTorch's for each model.
Needs Debian's python3-torch and python3-torchvision."""
import argparse, json, statistics, time
import torch, torch.nn as nn
from torchvision.models import resnet34


def cifar_resnet34():
    m = resnet34(num_classes=10)
    m.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=2, padding=1, bias=False)
    m.maxpool = nn.Identity()
    return m


def simplenn():
    return nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 10))


# name: (builder, batch, image shape, seconds per timing window)
CASES = {"resnet34": (cifar_resnet34, 128, (3, 32, 32), 3.0),
         "simplenn": (simplenn, 32, (1, 28, 28), 0.5)}


def forward_seconds(model, x, train, min_time, repetitions, warmup=2):
    """Seconds per forward pass: the median over `repetitions` windows, each the mean of
    passes repeated until min_time has passed (3 passes at least), like forward_bench."""
    model.train(train)
    with torch.set_grad_enabled(train):
        for _ in range(warmup):
            model(x)
        means = []
        for _ in range(repetitions):
            runs, start = 0, time.perf_counter()
            while runs < 3 or time.perf_counter() - start < min_time:
                out = model(x)
                del out  # in train mode this drops the autograd graph, as a step's backward would
                runs += 1
            means.append((time.perf_counter() - start) / runs)
        return statistics.median(means)


def measure(names, threads, repetitions):
    results = []
    for name in names:
        make, batch, shape, min_time = CASES[name]
        model = make()
        x = torch.randn(batch, *shape)
        for mode in ("eval", "train"):
            t = forward_seconds(model, x, mode == "train", min_time, repetitions)
            r = {"framework": "pytorch-" + torch.__version__, "model": name, "mode": mode, "batch": batch,
                 "threads": threads, "forward_ms": round(1000 * t, 3), "img_per_s": round(batch / t, 1)}
            print(json.dumps(r), flush=True)
            results.append(r)
    return results


def print_ratios(ours_path, torch_results):
    with open(ours_path) as f:
        ours = json.load(f)
    print("%-10s %6s %14s %16s %17s %10s %11s" % ("model", "batch", "ours img/s", "pytorch eval", "pytorch train",
                                                  "ours/eval", "ours/train"))
    for b in ours["benchmarks"]:
        if b.get("error_occurred"):
            print("%-10s onnx-train failed: %s" % (b["name"], b.get("error_message", "")))
            continue
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue  # with --benchmark_repetitions, compare medians
        model, mine = b["run_name"].split("/")[1], b["items_per_second"]
        ref = {r["mode"]: r["img_per_s"] for r in torch_results if r["model"] == model}
        if not ref:
            continue
        print("%-10s %6d %14.1f %16.1f %17.1f %10.3f %11.3f" % (model, b["batch"], mine, ref["eval"], ref["train"],
                                                                mine / ref["eval"], mine / ref["train"]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", default="all", choices=["all"] + sorted(CASES))
    ap.add_argument("--repetitions", type=int, default=3, help="timing windows; the median is reported")
    ap.add_argument("--ours", help="Google Benchmark JSON of forward_bench, to print ratios against")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    names = sorted(CASES) if args.model == "all" else [args.model]
    results = measure(names, args.threads, args.repetitions)
    if args.ours:
        print_ratios(args.ours, results)


if __name__ == "__main__":
    main()
