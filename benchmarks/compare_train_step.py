#!/usr/bin/env python3
"""Training-step speed and peak memory of onnx-train beside PyTorch (benchmarks/
torch_step.py) and ONNX Runtime Training (benchmarks/ort_step.py), measured in the same run
with the same thread count. Prints a table and ours/peer ratios (lower is better).

    python3 compare_train_step.py --build build [--threads 2] [--models resnet34,simplenn] [--rounds N]

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


def run_json(cmd, env=None):
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
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
    ap.add_argument("--rounds", type=int, default=int(os.environ.get("BENCH_ROUNDS", "1")),
                    help="measure every framework this many times, interleaved, and keep each one's fastest "
                         "(on a machine whose speed drifts over minutes, as shared VMs do)")
    args = ap.parse_args()
    models = args.models.split(",")
    cases = [(m, b) for m, b in [("simplenn", 32), ("simplenn", 1024), ("resnet34", 128)] if m in models]
    onnx_paths = {}
    if args.ort_python:
        for m in sorted(set(m for m, _ in cases)):
            onnx_paths[m] = os.path.join(args.build, f"bench_{m}.onnx")
            subprocess.run([os.path.join(args.build, "tools", "onnx-train"), "make-model", m, "-o", onnx_paths[m]],
                           check=True, capture_output=True)
    best = {}  # (framework, model, batch) -> fastest row

    def keep(key, row):
        if key not in best or row["step_ms"] < best[key]["step_ms"]:
            best[key] = row

    ort_errors = {}
    for _ in range(max(args.rounds, 1)):
        for m in sorted(set(m for m, _ in cases)):
            for t in run_json([sys.executable, os.path.join(HERE, "torch_step.py"), "--threads", str(args.threads),
                               "--model", m]):
                keep(("torch", t["model"], t["batch"]), t)
        for m, b in cases:
            keep(("ours", m, b), ours(args.build, m, b, args.threads))
            if args.ort_python:
                try:
                    o = run_json([args.ort_python, os.path.join(HERE, "ort_step.py"), "--model", m, "--onnx",
                                  onnx_paths[m], "--batch", str(b), "--threads", str(args.threads),
                                  "--steps", "5" if m == "resnet34" else "200"])[0]
                    keep(("ort", m, b), o)
                except RuntimeError as e:
                    ort_errors[(m, b)] = str(e)[-200:]
    rows = []
    for m, b in cases:
        r, t = best[("ours", m, b)], best[("torch", m, b)]
        row = {"model": m, "batch": b, "ours_ms": r["step_ms"], "torch_ms": t["step_ms"],
               "ours_vs_torch": r["step_ms"] / t["step_ms"], "ours_rss_mb": r["peak_rss_mb"],
               "torch_rss_mb": t["peak_rss_mb"], "rounds": max(args.rounds, 1)}
        if ("ort", m, b) in best:
            o = best[("ort", m, b)]
            row.update({"ort_ms": o["step_ms"], "ours_vs_ort": r["step_ms"] / o["step_ms"]})
        elif (m, b) in ort_errors:
            row["ort_error"] = ort_errors[(m, b)]
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(f"{'model':<9} {'batch':>5} {'ours ms':>10} {'torch ms':>10} {'ours/torch':>10} {'ort ms':>10} "
          f"{'ours/ort':>9} {'ours MB':>8} {'torch MB':>8}")
    for r in rows:
        print(f"{r['model']:<9} {r['batch']:>5} {r['ours_ms']:>10.3f} {r['torch_ms']:>10.3f} {r['ours_vs_torch']:>10.2f} "
              f"{r.get('ort_ms', float('nan')):>10.3f} {r.get('ours_vs_ort', float('nan')):>9.2f} "
              f"{r['ours_rss_mb'] or 0:>8.0f} {r['torch_rss_mb']:>8.0f}")


if __name__ == "__main__":
    main()
