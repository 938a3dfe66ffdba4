#!/usr/bin/env python3
"""The trainer's loop against its bare step (issue 40 item 6): SimpleNN on Fashion-MNIST at
batch 32 and 1024, in the same run. The bare step is train_step_bench's (forward, loss,
backward, update on one resident batch); the loop step is what `onnx-train` spends per step
over a whole epoch (batches made by the loader, fed, scored, reported): the mean of the
time between its --metrics step records after a warm-up, and their median "step_ms" (the
step call alone). Ratios loop/bare, lower is better (1.1 is the issue's bound). Each side
runs `--rounds` times, interleaved; the fastest is kept.

    /usr/bin/python3 benchmarks/loop_step.py --build build [--threads 2] [--rounds 3]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from compare_train_step import ours  # noqa: E402


def loop(build, model_path, batch, threads):
    with tempfile.TemporaryDirectory() as d:
        metrics = os.path.join(d, "m.jsonl")
        p = subprocess.run([os.path.join(build, "tools", "onnx-train"), model_path, "--batch", str(batch), "--epochs",
                            "1", "--threads", str(threads), "--no-checkpoints", "--quiet", "--metrics", metrics],
                           capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
        if p.returncode != 0:
            raise RuntimeError(p.stderr[-400:])
        steps = [json.loads(line) for line in open(metrics)]
        steps = [s for s in steps if s.get("type") == "step"]
    warm = steps[len(steps) // 10:]  # the first tenth warms the caches and plans
    per_step = 1e3 * (warm[-1]["time"] - warm[0]["time"]) / max(len(warm) - 1, 1)
    return {"loop_ms": per_step, "step_call_ms": statistics.median(s["step_ms"] for s in warm), "steps": len(steps)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    model = os.path.join(args.build, "bench_loop_simplenn.onnx")
    subprocess.run([os.path.join(args.build, "tools", "onnx-train"), "make-model", "simplenn", "-o", model],
                   check=True, capture_output=True)
    print("batch  bare_ms  loop_ms  step_call_ms  loop/bare  call/bare")
    for batch in (32, 1024):
        bare, lp = None, None
        for _ in range(max(args.rounds, 1)):
            b = ours(args.build, "simplenn", batch, args.threads)["step_ms"]
            bare = b if bare is None else min(bare, b)
            r = loop(args.build, model, batch, args.threads)
            lp = r if lp is None or r["loop_ms"] < lp["loop_ms"] else lp
        print(f"{batch:5d}  {bare:7.3f}  {lp['loop_ms']:7.3f}  {lp['step_call_ms']:12.3f}  {lp['loop_ms'] / bare:9.2f}  "
              f"{lp['step_call_ms'] / bare:9.2f}")
        print(json.dumps({"model": "simplenn", "batch": batch, "threads": args.threads, "bare_ms": bare, **lp,
                          "loop_vs_bare": lp["loop_ms"] / bare}), flush=True)


if __name__ == "__main__":
    main()
