#!/usr/bin/env python3
"""Issue 39 A: the training step of a GPT-2-small-shaped causal LM, onnx-train beside PyTorch
in the same run, and both processes' peak memory.

The model (benchmarks/lm_model.py, nanoGPT's): GPT-2's vocabulary of 50257 tokens, 6 layers,
width 384, 6 heads, T = 256, batch 8, lm_head tied to the token embedding as in GPT-2
(--untied for its own weight), causal attention by F.scaled_dot_product_attention(is_causal)
(PyTorch 2.x; explicit masking on 1.13). It is exported once by PyTorch 2.x's dynamo exporter
(opset 23, optimize=False: the attention is ONNX Attention with is_causal) and trained by the
`onnx-train` program itself on an npz of random token windows (x [N, T], y [N, T]) with the
per-token cross-entropy, --no-shuffle, --no-checkpoints; the step times are the differences
of consecutive step rows of its --metrics file. PyTorch trains the same module from the same
initial weights on the same batches, float32, eager, torch.set_num_threads(N). Optimizer on
both sides: AdamW lr 6e-4, betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on every parameter
(one group; nanoGPT's recipe, without its no-decay group).

Each side runs in its own fresh process (peak RSS: its ru_maxrss, read by a small Python parent
of its own; ours also holds the npz and ends with one validation batch), --rounds times, interleaved (torch 2.x, ours,
[torch 1.13], torch 2.x, ours, ...), and reports for each side the median over rounds of the
per-run median step (the first --skip steps of a run, planning and warm-up, left out) and the
largest peak RSS. On a shared machine the per-run figures are printed too.

    /var/cache/onnx-train/torch2/bin/python benchmarks/lm_step.py --onnx-train build/tools/onnx-train \\
        [--threads 2] [--steps 6] [--rounds 3] [--torch113 /usr/bin/python3] [--workdir DIR]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from blas_threads import hold_blas_threads  # noqa: E402

hold_blas_threads(default=2)  # before torch loads a BLAS

LR, BETAS, EPS, WD = 6e-4, (0.9, 0.95), 1e-8, 0.1
WRAPPER_PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def config(args):
    return dict(vocab_size=args.vocab, block_size=args.seq, n_layer=args.layers, n_head=args.heads,
                n_embd=args.embd, tied=not args.untied)


def make_data(args, path):
    import numpy as np
    rng = np.random.default_rng(0)
    n = args.batch * args.steps
    tokens = rng.integers(0, args.vocab, size=(n + args.batch) * (args.seq + 1), dtype=np.int64)
    win = tokens.reshape(n + args.batch, args.seq + 1)
    np.savez(path, x=win[:n, :-1], y=win[:n, 1:], x_test=win[n:, :-1], y_test=win[n:, 1:])


def torch_case(args):
    """One PyTorch run: prints {"framework", "steps_ms": [...], "loss"}."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    import lm_model
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = lm_model.GPT(**config(args)).train()
    init = np.load(os.path.join(args.workdir, "init.npz"))
    model.load_state_dict({k: torch.from_numpy(init[k]) for k in init.files}, strict=False)
    data = np.load(os.path.join(args.workdir, "data.npz"))
    x, y = torch.from_numpy(data["x"]), torch.from_numpy(data["y"])
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)
    times = []
    for s in range(args.steps):
        t0 = time.perf_counter()
        xb, yb = x[s * args.batch:(s + 1) * args.batch], y[s * args.batch:(s + 1) * args.batch]
        opt.zero_grad(set_to_none=True)
        logits = model(xb)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), yb.reshape(-1))
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    print(json.dumps({"framework": "pytorch-" + torch.__version__ + ("" if lm_model.HAVE_SDPA else " (masked attn)"),
                      "steps_ms": [1000 * t for t in times], "loss": loss.item()}))


def measured(cmd, threads):
    """Runs `cmd` under a fresh small Python parent: (CompletedProcess, the command's peak RSS in MB).
    Not a child of this process directly: Linux keeps a process's peak RSS across fork and
    exec, so a child forked from this one (torch imported, the model exported) would report at
    least this process's peak."""
    wrapper = ("import resource, subprocess, sys; p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
               "sys.stdout.write(p.stdout); sys.stderr.write(p.stderr); "
               "print('PEAK_RSS_KB', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(p.returncode)")
    r = subprocess.run([WRAPPER_PYTHON, "-c", wrapper] + cmd, capture_output=True, text=True,
                       env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
    if "PEAK_RSS_KB" not in r.stdout:
        return r, float("nan")
    text, tail = r.stdout.rsplit("PEAK_RSS_KB", 1)
    r.stdout = text
    return r, round(int(tail.split()[0]) / 1024, 1)


def ours(args, model_path):
    metrics = os.path.join(args.workdir, "ours.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    cmd = [args.onnx_train, model_path, "--data", "npz:" + os.path.join(args.workdir, "data.npz"),
           "--loss", "cross-entropy", "--opt", "adamw", "--lr", str(LR), "--beta1", str(BETAS[0]), "--beta2",
           str(BETAS[1]), "--epsilon", str(EPS), "--wd", str(WD), "--batch", str(args.batch), "--epochs", "1",
           "--no-shuffle", "--no-checkpoints", "--quiet", "--threads", str(args.threads), "--metrics", metrics]
    r, rss = measured(cmd, args.threads)
    if r.returncode != 0:
        raise SystemExit(f"lm_step: onnx-train failed: {r.stderr.strip()[-600:]}\n  command: {' '.join(cmd)}")
    with open(metrics) as f:
        rows = [json.loads(line) for line in f]
    stamps = [row["time"] for row in rows if row.get("type") == "step"]
    losses = [row["loss"] for row in rows if row.get("type") == "step"]
    # Step k's row is written when step k ends; step 0's time counts from the run's start (load, plan).
    steps_ms = [1000 * (b - a) for a, b in zip([0.0] + stamps, stamps)]
    return {"framework": "onnx-train", "steps_ms": steps_ms, "loss": losses[-1], "peak_rss_mb": rss}


def run_torch(args, python):
    cmd = [python, os.path.abspath(__file__), "--torch-case"] + sys.argv[1:]
    r, rss = measured(cmd, args.threads)
    if r.returncode != 0:
        raise SystemExit(f"lm_step: PyTorch run ({python}) failed: {r.stderr.strip()[-600:]}")
    row = json.loads(r.stdout.strip().splitlines()[-1])
    row["peak_rss_mb"] = rss
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--onnx-train", default="build/tools/onnx-train")
    ap.add_argument("--workdir", default="/tmp/lm_step_bench")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6, help="steps per run")
    ap.add_argument("--skip", type=int, default=2, help="first steps of each run left out (planning, warm-up)")
    ap.add_argument("--rounds", type=int, default=3, help="runs of each side, interleaved")
    ap.add_argument("--torch113", default="", help="also time this Python's PyTorch (e.g. Debian's /usr/bin/python3)")
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--embd", type=int, default=384)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--untied", action="store_true", help="lm_head with its own weight (default: tied, as GPT-2)")
    ap.add_argument("--torch-case", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.workdir = os.path.abspath(args.workdir)
    if args.torch_case:
        return torch_case(args)
    args.onnx_train = os.path.abspath(args.onnx_train)
    assert args.steps > args.skip, "--steps must exceed --skip"
    os.makedirs(args.workdir, exist_ok=True)
    import torch
    import lm_model
    torch.manual_seed(0)
    model = lm_model.GPT(**config(args))
    import numpy as np
    np.savez(os.path.join(args.workdir, "init.npz"), **{k: v.numpy() for k, v in model.state_dict().items()})
    onnx_path = os.path.join(args.workdir, "gpt.onnx")
    t0 = time.time()
    lm_model.export_onnx(model, onnx_path, args.seq)
    make_data(args, os.path.join(args.workdir, "data.npz"))
    params = sum(p.numel() for p in model.parameters())
    print(f"GPT: vocab {args.vocab}, {args.layers} layers, width {args.embd}, {args.heads} heads, T {args.seq}, "
          f"batch {args.batch}, lm_head {'untied' if args.untied else 'tied'}, {params / 1e6:.1f}M parameters; "
          f"AdamW; {args.threads} threads; exported in {time.time() - t0:.0f} s")
    print(f"{args.rounds} interleaved rounds of {args.steps} steps per side, the first {args.skip} of each left out")
    sides = [("torch2", sys.executable)] + ([("torch113", args.torch113)] if args.torch113 else []) + [("ours", None)]
    runs = {name: [] for name, _ in sides}
    for r in range(args.rounds):
        for name, python in sides:
            row = ours(args, onnx_path) if python is None else run_torch(args, python)
            kept = row["steps_ms"][args.skip:]
            row["median_ms"] = statistics.median(kept)
            runs[name].append(row)
            print(f"  round {r + 1} {row['framework']:<28} step median {row['median_ms']:8.1f} ms "
                  f"(min {min(kept):.1f}, max {max(kept):.1f}; first {row['steps_ms'][0]:.0f})  "
                  f"peak RSS {row['peak_rss_mb']:7.0f} MB  last loss {row['loss']:.4f}", flush=True)
    summary = {}
    for name, _ in sides:
        summary[name] = {"framework": runs[name][0]["framework"],
                         "step_ms": statistics.median(r["median_ms"] for r in runs[name]),
                         "peak_rss_mb": max(r["peak_rss_mb"] for r in runs[name])}
    ref = summary["torch2"]
    print(f"\n{'side':<30} {'step ms':>9} {'ours/it':>8} {'peak MB':>8} {'ours/it':>8}")
    for name, _ in sides:
        s = summary[name]
        print(f"{s['framework']:<30} {s['step_ms']:9.1f} {summary['ours']['step_ms'] / s['step_ms']:8.2f} "
              f"{s['peak_rss_mb']:8.0f} {summary['ours']['peak_rss_mb'] / s['peak_rss_mb']:8.2f}")
    ratio_t = summary["ours"]["step_ms"] / ref["step_ms"]
    ratio_m = summary["ours"]["peak_rss_mb"] / ref["peak_rss_mb"]
    print(json.dumps({"ours_step_ms": summary["ours"]["step_ms"], "torch2_step_ms": ref["step_ms"],
                      "step_ratio": round(ratio_t, 3), "ours_peak_rss_mb": summary["ours"]["peak_rss_mb"],
                      "torch2_peak_rss_mb": ref["peak_rss_mb"], "rss_ratio": round(ratio_m, 3),
                      **({"torch113_step_ms": summary["torch113"]["step_ms"],
                          "torch113_peak_rss_mb": summary["torch113"]["peak_rss_mb"]} if args.torch113 else {})}))
    print(f"targets (issue 39): step <= 1.0x PyTorch 2.x: {'met' if ratio_t <= 1.0 else 'NOT met'} ({ratio_t:.2f}x); "
          f"peak memory <= PyTorch's: {'met' if ratio_m <= 1.0 else 'NOT met'} ({ratio_m:.2f}x)")


if __name__ == "__main__":
    sys.exit(main())
