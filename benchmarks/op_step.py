#!/usr/bin/env python3
"""Single-op training-step time, onnx-train beside PyTorch in the same run (issue 13 item 6):
depthwise and grouped convolutions at the shapes of MobileNetV2 / EfficientNet-B0 (3x64x64)
and RegNetY-400MF, and a ViT block's ops (width 192, 65 tokens, 3 heads): LayerNorm, the
attention's batched MatMuls and Softmax, GELU (exported as its Erf decomposition). Batch 32.

The attention sweep (issue 40 item 1), cases attn_t{T} and mha_t{T} for T = 16 .. 1024: the
bare attention of 3 heads of 64 (Q = K = V, 4D, hand-written) and torch 1.13's
nn.MultiheadAttention (projections, 3D sequence-first [batch * heads, T, 64] products), at
a batch of 2048 / T sequences (the same tokens a step); --unfused adds a column of our
step with the chain left as its ops (ONNXTRAIN_BENCH_FUSE_ATTENTION=0), so that the fused
kernel is timed against the unfused path in the same run:

    /usr/bin/python3 benchmarks/op_step.py --build build-cc --threads 1 --clock cpu --unfused --rounds 3 --cases attn_sweep

Each case is a tiny model: a per-channel scale (a parameter, so that backward reaches the
op's input), the op, and a head (mean over the non-channel dims, Linear to 10 classes);
exported with torch.onnx.export in training mode (opset 17) and timed by onnx-train's
train_step_bench (forward, loss, backward, SGD), against the same step in PyTorch.
The scale and head cost the same on both sides; ratios are ours / PyTorch (lower is better).

    /usr/bin/python3 benchmarks/op_step.py --build build [--threads 2] [--clock wall|cpu] [--cases dw3_c32_32_s1,...]

--clock cpu times CPU seconds instead (process time for PyTorch, Google Benchmark's
cpu_time for ours): on a loaded machine, with --threads 1, the only stable figure.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

BATCH = 32


def cases():
    """name -> (input shape without batch, kind, parameters)."""
    c = {}
    # MobileNetV2 at 64x64: depthwise 3x3 (stride 1 and 2) through the stages.
    for ch, hw, s in [(32, 32, 1), (96, 32, 2), (144, 16, 1), (192, 8, 1), (384, 4, 1), (576, 4, 1), (960, 2, 1)]:
        c[f"dw3_c{ch}_{hw}_s{s}"] = ((ch, hw, hw), "conv", dict(groups=ch, k=3, stride=s))
    # EfficientNet-B0 at 64x64: depthwise 5x5.
    for ch, hw, s in [(144, 16, 2), (240, 8, 1), (672, 4, 1), (1152, 2, 1)]:
        c[f"dw5_c{ch}_{hw}_s{s}"] = ((ch, hw, hw), "conv", dict(groups=ch, k=5, stride=s))
    # RegNetY-400MF at 64x64: 3x3 grouped, 8 channels per group.
    for ch, hw, s in [(48, 16, 1), (104, 8, 1), (208, 4, 1), (440, 2, 1)]:
        c[f"g8_c{ch}_{hw}_s{s}"] = ((ch, hw, hw), "conv", dict(groups=ch // 8, k=3, stride=s))
    # A ViT block at width 192, 65 tokens, 3 heads.
    c["layernorm_65x192"] = ((65, 192), "layernorm", {})
    c["attention_65x192_h3"] = ((65, 192), "attention", dict(heads=3))
    c["softmax_3x65x65"] = ((3, 65, 65), "softmax", {})
    c["gelu_65x768"] = ((65, 768), "gelu", {})
    for t in SWEEP:
        c[f"attn_t{t}"] = ((t, 192), "attention", dict(heads=3))
        c[f"mha_t{t}"] = ((t, 192), "mha", dict(heads=3))
    return c


SWEEP = (16, 32, 65, 128, 256, 512, 1024)


def batch_of(name):
    """Batch 32, or 2048 / T sequences for the attention sweep."""
    if name.startswith(("attn_t", "mha_t")):
        return max(1, 2048 // int(name.split("_t")[1]))
    return BATCH


def build(name):
    import torch
    from torch import nn
    shape, kind, p = cases()[name]

    class OpCase(nn.Module):
        def __init__(self):
            super().__init__()
            ch = shape[0] if kind == "conv" else shape[-1]
            self.scale = nn.Parameter(torch.ones(ch).view((ch, 1, 1) if kind == "conv" else (ch,)))
            if kind == "conv":
                self.op = nn.Conv2d(ch, ch, p["k"], stride=p["stride"], padding=p["k"] // 2, groups=p["groups"],
                                    bias=False)
            elif kind == "layernorm":
                self.op = nn.LayerNorm(ch)
            elif kind == "gelu":
                self.op = nn.GELU()
            elif kind == "mha":
                self.op = nn.MultiheadAttention(ch, p["heads"], batch_first=True)
            self.head = nn.Linear(ch, 10)

        def forward(self, x):
            x = x * self.scale
            if kind == "conv":
                return self.head(self.op(x).mean((2, 3)))
            if kind == "softmax":
                return self.head(torch.softmax(x, -1).mean((1, 2)))
            if kind == "attention":
                n, t, d = x.shape
                h = p["heads"]
                q = x.view(n, t, h, d // h).transpose(1, 2)  # the same tensor as q, k and v: the ops, not the projections
                a = torch.softmax(q @ q.transpose(-2, -1) * (d // h) ** -0.5, -1)
                return self.head((a @ q).transpose(1, 2).reshape(n, t, d).mean(1))
            if kind == "mha":
                return self.head(self.op(x, x, x, need_weights=False)[0].mean(1))
            return self.head(self.op(x).mean(1))

    return OpCase(), shape


def ours(build, threads, clock, batch=BATCH, fused=True):
    """Mean step time of train_step_bench on ONNXTRAIN_BENCH_ONNX, in ms."""
    name = f"train_step/onnx/batch:{batch}"
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), ONNXTRAIN_BENCH_FUSE_ATTENTION="1" if fused else "0")
    out = subprocess.run([os.path.join(build, "benchmarks", "train_step_bench"), f"--threads={threads}",
                          f"--benchmark_filter=^{re.escape(name)}", "--benchmark_format=json",
                          "--benchmark_min_time=1"], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-300:])
    bench = json.loads(out.stdout)["benchmarks"][0]
    if bench.get("error_occurred"):
        raise RuntimeError(bench.get("error_message", "error"))
    t = bench["cpu_time" if clock == "cpu" else "real_time"]
    return {"ms": 1.0, "us": 1e-3, "ns": 1e-6, "s": 1e3}[bench["time_unit"]] * t


def torch_case(name, threads, steps, clock):
    import torch
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model, shape = build(name)
    x, y = torch.randn((batch_of(name),) + shape), torch.randint(0, 10, (batch_of(name),))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    model.train()
    times = []
    now = time.process_time if clock == "cpu" else time.perf_counter
    for i in range(3 + steps):
        start = now()
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        if i >= 3:
            times.append(now() - start)
    times.sort()
    print(json.dumps({"step_ms": 1000 * times[len(times) // 2]}))


def export(name, path):
    import torch
    torch.manual_seed(0)
    model, shape = build(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, torch.randn((2,) + shape), path, input_names=["input"], output_names=["logits"],
                          dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}}, opset_version=17,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall")
    ap.add_argument("--cases", default=",".join(c for c in cases() if not c.startswith(("attn_t", "mha_t"))),
                    help="comma-separated case names; attn_sweep: attn_t* and mha_t*")
    ap.add_argument("--unfused", action="store_true", help="also our step with attention left unfused")
    ap.add_argument("--rounds", type=int, default=1, help="our steps (and unfused ones) timed this many times, "
                    "interleaved; the medians are shown")
    ap.add_argument("--torch-case", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_case:
        return torch_case(args.torch_case, args.threads, args.steps, args.clock)
    names = []
    for c in args.cases.split(","):
        names += [f"{k}_t{t}" for k in ("attn", "mha") for t in SWEEP] if c == "attn_sweep" else [c]
    print(f"load average before: {open('/proc/loadavg').read().split()[:3]}", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            out = subprocess.run([sys.executable, __file__, "--torch-case", name, "--threads", str(args.threads),
                                  "--steps", str(args.steps), "--clock", args.clock], capture_output=True, text=True, check=True)
            ref = json.loads(out.stdout.strip().splitlines()[-1])
            path = os.path.join(tmp, name + ".onnx")
            export(name, path)
            os.environ.update(ONNXTRAIN_BENCH_ONNX=path, ONNXTRAIN_BENCH_BATCH=str(batch_of(name)))
            unfused = float("nan")
            try:
                mines, unfuseds = [], []
                for _ in range(args.rounds):  # interleaved, medians kept
                    mines.append(ours(args.build, args.threads, args.clock, batch_of(name)))
                    if args.unfused:
                        unfuseds.append(ours(args.build, args.threads, args.clock, batch_of(name), fused=False))
                mine, err = statistics.median(mines), ""
                if args.unfused:
                    unfused = statistics.median(unfuseds)
            except RuntimeError as e:
                mine, err = float("nan"), str(e).strip().splitlines()[-1][-160:]
            rows.append((name, mine, unfused, ref["step_ms"], err))
            print(f"  {name:<22} ours {mine:8.3f} ms  unfused {unfused:8.3f} ms  torch {ref['step_ms']:8.3f} ms  "
                  f"ratio {mine / ref['step_ms']:5.2f} {err}", flush=True)
    print(f"load average after: {open('/proc/loadavg').read().split()[:3]}")
    print(f"\n{'case':<22} {'batch':>5} {'ours ms':>9} {'unfused':>9} {'torch ms':>9} {'ratio':>6} {'fused/unfused':>13}")
    for name, ms, ums, tms, err in rows:
        print(f"{name:<22} {batch_of(name):5d} {ms:9.3f} {ums:9.3f} {tms:9.3f} {ms / tms:6.2f} {ms / ums:13.2f} {err}")


if __name__ == "__main__":
    sys.exit(main())
