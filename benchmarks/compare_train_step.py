#!/usr/bin/env python3
"""Training-step speed and peak memory of onnx-train beside PyTorch 2.x (the benchmark peer:
the venv of scripts/install-torch2.sh), Debian's PyTorch 1.13 (benchmarks/torch_step.py under
each) and ONNX Runtime Training (benchmarks/ort_step.py), measured in the same run with the
same thread count. Prints JSON lines, then a table with ours/peer ratios (lower is better).
Without the PyTorch 2.x venv its columns are left out, with a line that says so.

For ResNet34 it adds PyTorch's mixed-precision step (--amp-ref bf16: torch.autocast("cpu",
bfloat16)) from both PyTorch versions as a reference, beside our float32 step.

    python3 compare_train_step.py --build build [--threads 2] [--models resnet34,simplenn] [--rounds N]
        [--torch2-python PY|''] [--torch1-python PY] [--amp-ref bf16|fp16|''] [--torch-steps N]

--rounds N (or BENCH_ROUNDS=N) measures each framework N times, interleaved, and keeps each
one's fastest step: on a shared VM whose speed drifts by 30% over minutes, one run of each
in sequence gives ratios off by as much.
"""
import argparse
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from torch_peers import (default_torch2_python, find_peers, print_errors, print_table, rss_columns,  # noqa: E402
                         time_columns)

TORCH_STEP = os.path.join(HERE, "torch_step.py")


def run_json(cmd, env=None, cwd=None):
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
    if out.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed: {out.stderr.strip()[-400:]}")
    return [json.loads(l) for l in out.stdout.splitlines() if l.startswith("{")]


def ours(build, model, batch, threads):
    name = f"train_step/{model}/batch:{batch}"
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    # A fresh Python parent per run, so that the children's peak RSS is this run's alone.
    wrapper = ("import resource, subprocess, sys; p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
               "sys.stdout.write(p.stdout); sys.stderr.write(p.stderr); "
               "print('PEAK_RSS_KB', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(p.returncode)")
    out = subprocess.run([sys.executable, "-c", wrapper, os.path.join(build, "benchmarks", "train_step_bench"),
                          f"--threads={threads}", f"--benchmark_filter=^{re.escape(name)}", "--benchmark_format=json"],
                         capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-400:])
    text, rss_line = out.stdout.rsplit("PEAK_RSS_KB", 1)
    rss = int(rss_line.split()[0])
    bench = json.loads(text)["benchmarks"][0]
    ms = bench["real_time"] if bench["time_unit"] == "ms" else bench["real_time"] / 1e6
    return {"framework": "onnx-train", "model": model, "batch": batch, "step_ms": ms,
            "peak_rss_mb": round(rss / 1024, 1)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--models", default="resnet34,simplenn")
    ap.add_argument("--ort-python", default="", help="python with onnxruntime-training (skip ORT if empty)")
    ap.add_argument("--torch2-python", default=default_torch2_python(),
                    help="python of the PyTorch 2.x venv (scripts/install-torch2.sh); empty: leave it out")
    ap.add_argument("--torch1-python", default=sys.executable, help="python of Debian's PyTorch 1.13")
    ap.add_argument("--amp-ref", default="bf16", choices=["bf16", "fp16", ""],
                    help="ResNet34's autocast step from each PyTorch as a reference (empty: none)")
    ap.add_argument("--torch-steps", type=int, default=0, help="PyTorch's timed steps per case (0: torch_step.py's own)")
    ap.add_argument("--rounds", type=int, default=int(os.environ.get("BENCH_ROUNDS", "1")),
                    help="measure every framework this many times, interleaved, and keep each one's fastest "
                         "(on a machine whose speed drifts over minutes, as shared VMs do)")
    args = ap.parse_args()
    models = args.models.split(",")
    cases = [(m, b) for m, b in [("simplenn", 32), ("simplenn", 1024), ("resnet34", 128)] if m in models]
    amp_cases = [(m, b) for m, b in cases if m == "resnet34"] if args.amp_ref else []
    peers = find_peers(args.torch2_python, args.torch1_python)
    onnx_paths = {}
    if args.ort_python:
        for m in sorted(set(m for m, _ in cases)):
            onnx_paths[m] = os.path.join(args.build, f"bench_{m}.onnx")
            subprocess.run([os.path.join(args.build, "tools", "onnx-train"), "make-model", m, "-o", onnx_paths[m]],
                           check=True, capture_output=True)
    best = {}  # (framework, model, batch, amp) -> fastest row
    errors = {}  # (framework, model, batch, amp) -> why it has no figure

    def keep(key, row):
        if key not in best or row["step_ms"] < best[key]["step_ms"]:
            best[key] = row

    def torch_runs(peer, model, amp, batch=0):
        cmd = [peer.python, TORCH_STEP, "--threads", str(args.threads), "--model", model]
        if batch:
            cmd += ["--batch", str(batch)]
        if amp:
            cmd += ["--amp", amp]
        if args.torch_steps:
            cmd += ["--steps", str(args.torch_steps)]
        try:
            # From /tmp: a `torch` folder in the current directory would shadow the package.
            for t in run_json(cmd, cwd="/tmp"):
                keep((peer.key, t["model"], t["batch"], amp or "off"), t)
        except RuntimeError as e:
            for m, b in cases:
                if m == model and (not batch or b == batch):
                    errors[(peer.key, m, b, amp or "off")] = str(e)[-200:]

    for _ in range(max(args.rounds, 1)):
        for peer in peers:
            for m in sorted(set(m for m, _ in cases)):
                torch_runs(peer, m, None)
            for m, b in amp_cases:
                torch_runs(peer, m, args.amp_ref, b)
        for m, b in cases:
            keep(("ours", m, b, "off"), ours(args.build, m, b, args.threads))
            if args.ort_python:
                try:
                    o = run_json([args.ort_python, os.path.join(HERE, "ort_step.py"), "--model", m, "--onnx",
                                  onnx_paths[m], "--batch", str(b), "--threads", str(args.threads),
                                  "--steps", "5" if m == "resnet34" else "200"])[0]
                    keep(("ort", m, b, "off"), o)
                except RuntimeError as e:
                    errors[("ort", m, b, "off")] = str(e)[-200:]

    def figures(row, key, m, b, amp, ours_ms):
        if (key, m, b, amp) in best:
            t = best[(key, m, b, amp)]
            row.update({f"{key}_ms": t["step_ms"], f"ours_vs_{key}": ours_ms / t["step_ms"]})
            if "peak_rss_mb" in t:
                row[f"{key}_rss_mb"] = t["peak_rss_mb"]
        elif (key, m, b, amp) in errors:
            row[f"{key}_error"] = errors[(key, m, b, amp)]

    rows, amp_rows = [], []
    for m, b in cases:
        r = best[("ours", m, b, "off")]
        row = {"model": m, "batch": b, "amp": "off", "ours_ms": r["step_ms"], "ours_rss_mb": r["peak_rss_mb"],
               "rounds": max(args.rounds, 1)}
        for p in peers:
            row[f"{p.key}_version"] = p.version
            figures(row, p.key, m, b, "off", r["step_ms"])
        figures(row, "ort", m, b, "off", r["step_ms"])
        rows.append(row)
        print(json.dumps(row), flush=True)
    for m, b in amp_cases:
        r = best[("ours", m, b, "off")]
        row = {"model": m, "batch": b, "amp": args.amp_ref, "ours_amp": "off", "ours_ms": r["step_ms"],
               "rounds": max(args.rounds, 1)}
        for p in peers:
            row[f"{p.key}_version"] = p.version
            figures(row, p.key, m, b, args.amp_ref, r["step_ms"])
        amp_rows.append(row)
        print(json.dumps(row), flush=True)

    # The tables: PyTorch 2.x first (the peer), then Debian's 1.13, then ORT.
    lead = [("model", 9, "model", None), ("batch", 5, "batch", 0), ("ours ms", 9, "ours_ms", 3)]
    print_table(lead + time_columns(peers, 10, 11, 3)
                + [("ort ms", 9, "ort_ms", 3), ("ours/ort", 8, "ours_vs_ort", 2), ("ours MB", 8, "ours_rss_mb", 0)]
                + rss_columns(peers, 9), rows)
    if amp_rows:
        print(f"PyTorch's {args.amp_ref} autocast step (reference; ours is float32):")
        print_table(lead + time_columns(peers, 15, 16, 3, " " + args.amp_ref), amp_rows)
    print_errors(rows + amp_rows)


if __name__ == "__main__":
    main()
