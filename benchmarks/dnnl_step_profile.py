#!/usr/bin/env python3
"""One training step's oneDNN primitive times by kind, from ONEDNN_VERBOSE=1 output of a
train_step_bench run: the exec lines between the last two loss softmax executions (the
backward of one step and the forward of the next). Under load the times are wall times
inflated alike, so read the shares.
    ONNXTRAIN_BENCH_ONNX=r34.onnx ONNXTRAIN_BENCH_BATCH=16 OMP_NUM_THREADS=1 ONEDNN_VERBOSE=1 \\
        build/benchmarks/train_step_bench --threads=1 --benchmark_filter=onnx > v.txt
    python3 benchmarks/dnnl_step_profile.py v.txt
"""
import collections
import sys

NAMES = {"convolution": "conv", "batch_normalization": "batchnorm", "eltwise": "eltwise", "binary": "binary"}


def main():
    lines = [line for line in open(sys.argv[1]) if line.startswith(("onednn_verbose,exec", "dnnl_verbose,exec"))]
    marks = [i for i, line in enumerate(lines) if ",softmax" in line]
    if len(marks) < 2:
        sys.exit("dnnl_step_profile: fewer than two loss softmax executions in " + sys.argv[1])
    total, count = collections.Counter(), collections.Counter()
    for line in lines[marks[-2] + 1:marks[-1] + 1]:
        f = line.strip().split(",")
        kind, impl, prop = f[3], f[4], f[5]
        name = NAMES.get(kind, kind)
        if kind in NAMES and kind != "binary":
            name += " fwd" if prop.startswith("forward") else " " + prop.replace("backward", "bwd")
        if "wino" in impl:
            name += " [winograd]"
        total[name] += float(f[-1])
        count[name] += 1
    s = sum(total.values())
    for k, v in total.most_common():
        print(f"| {k} | {v:.1f} ms | {100 * v / s:.1f}% | {count[k]} |")
    print(f"| all oneDNN primitives | {s:.1f} ms | 100% | {sum(count.values())} |")


if __name__ == "__main__":
    main()
