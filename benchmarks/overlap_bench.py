#!/usr/bin/env python3
"""Allreduce/backward overlap of data-parallel training: ResNet34 on synthetic data, one
rank beside `--world-size 2` (--backend gloo or mpi), the same batch per rank and one CPU
thread per rank.

From the --metrics JSONL of rank 0 (fields written by the trainer per step):
  step_ms            forward + backward + update + allreduce waits of the step
  allreduce_ms  (A)  wall time during which at least one gradient-bucket allreduce was in
                     flight (union of [start, completion] over the buckets)
  allreduce_wait_ms (W) time the step was blocked waiting for allreduces (before optimizer
                     nodes and at the end of the step)
  hidden fraction = 1 - W / A per step; medians over the steps after the warm-up.

Run through scripts/bench-overlap.sh; by hand:
    python3 benchmarks/overlap_bench.py --onnx-train build/tools/onnx-train --workdir /tmp/ovl
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def load_steps(path):
    with open(path) as f:
        return [r for r in map(json.loads, f) if r.get("type") == "step"]


def command(args, world, metrics):
    if os.path.exists(metrics):
        os.remove(metrics)
    cmd = [args.onnx_train, args.model, "--data", f"synthetic:{args.batch * world * (args.steps + 2)}",
           "--batch", str(args.batch), "--epochs", "1", "--max-steps", str(args.steps), "--no-checkpoints",
           "--quiet", "--threads", str(args.threads_per_rank * world), "--metrics", metrics, "--seed", "1"]
    if world > 1:
        cmd += ["--world-size", str(world), "--bucket-cap-mb", str(args.bucket_cap_mb), "--backend", args.backend]
    return cmd


def run(args, world, tag):
    metrics = os.path.join(args.workdir, f"metrics-{tag}.jsonl")
    cmd = command(args, world, metrics)
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if r.returncode != 0:
        sys.exit(f"overlap_bench: world {world} failed ({r.returncode}):\n{(r.stdout + r.stderr)[-2000:]}")
    steps = load_steps(metrics)
    print(f"  world {world}: {len(steps)} steps in {time.time() - t0:.1f} s (with start-up and evaluation)",
          flush=True)
    return steps[args.warmup:]


def run_two_singles(args):
    """Two independent 1-rank runs at once: what two processes get from this machine without
    any communication (the fair baseline for world 2 on a shared or small host)."""
    paths = [os.path.join(args.workdir, f"metrics-single{i}.jsonl") for i in (0, 1)]
    t0 = time.time()
    procs = [subprocess.Popen(command(args, 1, m), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for m in paths]
    outs = [p.communicate(timeout=args.timeout)[0] for p in procs]
    for p, out in zip(procs, outs):
        if p.returncode != 0:
            sys.exit(f"overlap_bench: concurrent 1-rank run failed ({p.returncode}):\n{out[-2000:]}")
    steps = [load_steps(m)[args.warmup:] for m in paths]
    print(f"  2 x world 1 at once: {time.time() - t0:.1f} s", flush=True)
    return steps[0] + steps[1]


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--onnx-train", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--model", default="", help="an ONNX model (default: make-model resnet34)")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2, help="first steps left out of the medians")
    p.add_argument("--batch", type=int, default=32, help="per rank")
    p.add_argument("--bucket-cap-mb", type=float, default=25, help="allreduce bucket size (MiB)")
    p.add_argument("--threads-per-rank", type=int, default=1)
    p.add_argument("--timeout", type=int, default=900)
    p.add_argument("--backend", default="gloo", help="comm backend of the world-2 run: gloo or mpi")
    args = p.parse_args()
    if args.backend == "mpi" and os.geteuid() == 0:  # mpirun refuses root unless told
        os.environ.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    os.makedirs(args.workdir, exist_ok=True)
    if not args.model:
        args.model = os.path.join(args.workdir, "resnet34.onnx")
        if not os.path.exists(args.model):
            subprocess.run([args.onnx_train, "make-model", "resnet34", "-o", args.model], check=True,
                           capture_output=True)
    print(f"overlap bench: {os.path.basename(args.model)} over {args.backend}, batch {args.batch} per rank, "
          f"{args.threads_per_rank} thread(s) per rank, {args.steps} steps ({args.warmup} warm-up), "
          f"{os.cpu_count()} CPUs, load average {open('/proc/loadavg').read().split()[0]}", flush=True)
    one = run(args, 1, "world1")
    pair = run_two_singles(args)
    two = run(args, 2, "world2")
    t1 = med([s["step_ms"] for s in one])
    t1x2 = med([s["step_ms"] for s in pair])
    t2 = med([s["step_ms"] for s in two])
    a = [s["allreduce_ms"] for s in two]
    w = [s["allreduce_wait_ms"] for s in two]
    hidden = [1 - wi / ai for ai, wi in zip(a, w) if ai > 0]
    print()
    print("per step, world 2 (rank 0), after warm-up:")
    print(f"  {'step':>4} {'step_ms':>9} {'allreduce_ms A':>15} {'wait_ms W':>10} {'hidden 1-W/A':>13}")
    for s in two:
        h = 1 - s["allreduce_wait_ms"] / s["allreduce_ms"] if s["allreduce_ms"] > 0 else float("nan")
        print(f"  {s['step']:>4} {s['step_ms']:>9.1f} {s['allreduce_ms']:>15.1f} {s['allreduce_wait_ms']:>10.1f}"
              f" {h:>13.2f}")
    print()
    print(f"step time, median: world 1 {t1:.1f} ms, world 2 {t2:.1f} ms (ratio {t2 / t1:.2f}; "
          f"throughput x{2 * t1 / t2:.2f} of one rank's, ideal x2)")
    print(f"two independent 1-rank runs at once (no communication): {t1x2:.1f} ms per step; world 2 / that "
          f"= {t2 / t1x2:.2f} (the data-parallel overhead on this machine)")
    print(f"allreduce in flight A {med(a):.1f} ms, blocked W {med(w):.1f} ms per step (medians); "
          f"buckets {two[0].get('buckets', '?') if two else '?'}")
    print(f"hidden fraction 1 - W/A: median {med(hidden):.2f} (min {min(hidden):.2f}, max {max(hidden):.2f})"
          if hidden else "hidden fraction: no allreduce recorded")
    print(f"load average after: {open('/proc/loadavg').read().split()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
