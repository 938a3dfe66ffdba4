#!/usr/bin/env python3
"""Gradient accumulation (--accumulate) and resume of a warmup schedule, through the CLI.

- `--accumulate 4 --batch 8` trains as `--batch 32`: SimpleNN exported from PyTorch, the
  jittered Fashion-MNIST images of torch_train_parity.py (320, both splits), SGD with
  momentum, 2 epochs of 10 optimizer steps; final weights within 1e-6 (relative, by
  norm, each tensor) of the batch-32 run, with 1 rank and with --world-size 2 (each rank
  its own 4 micro-batches, one allreduce per step; against 2 ranks at batch 32). Batch 8
  without accumulation must land far away (the check can fail).
- Resume: a run with --accumulate 4, AdamW, a per-step linear warmup into cosine and
  snapshots every 3 steps, SIGKILLed at step 5 and restarted by --max-restarts 1 from the
  step-3 snapshot, ends bitwise equal to an uninterrupted run (final weights and every
  step's loss and learning rate).

Run by CTest (target accumulate_test); by hand:
    /usr/bin/python3 tests/distributed/accumulate_test.py --onnx-train build/tools/onnx-train --workdir /tmp/acc
"""
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # the shared helpers
from check_tally import Checks  # noqa: E402
from torch_models import build, export  # noqa: E402
from fashion_data import jittered_fashion  # noqa: E402
from ot_cli import test_args, test_parser, write_idx  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnx.numpy_helper  # noqa: E402
import torch  # noqa: E402


def train(args, model, tag, options, env=None):
    ck = os.path.join(args.workdir, "ck-" + tag)
    metrics = os.path.join(args.workdir, tag + ".jsonl")
    shutil.rmtree(ck, ignore_errors=True)
    if os.path.exists(metrics):
        os.remove(metrics)
    cmd = [args.onnx_train, model, "--data", "fashion-mnist:" + os.path.join(args.workdir, "data"), "--no-shuffle",
           "--epochs", "2", "--checkpoint-dir", ck, "--metrics", metrics, "--quiet", "--threads", "2",
           "--timeout", "60"] + options
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ, **(env or {})))
    if proc.returncode != 0:
        raise RuntimeError((proc.stderr.strip() or proc.stdout.strip() or "exit %d" % proc.returncode)
                           .splitlines()[-1][:400])
    m = onnx.load(os.path.join(ck, "epoch_0002.onnx"))
    weights = {t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer}
    with open(metrics) as f:
        rows = [json.loads(line) for line in f]
    steps = [(r["global_step"], r["loss"], r["lr"]) for r in rows if r["type"] == "step"]
    train.rows = rows  # the last run's metrics rows
    return weights, steps, proc.stdout


def max_rel(a, b):
    return max(float(np.linalg.norm(a[n].astype(np.float64) - b[n]) / np.linalg.norm(b[n].astype(np.float64)))
               for n in b)


def main():
    p = test_parser(__doc__)
    args = test_args(p)
    start = time.time()
    raw, raw_labels = jittered_fashion(args.workdir, 320)
    data = os.path.join(args.workdir, "data")
    os.makedirs(data, exist_ok=True)
    for split in ("train", "t10k"):
        write_idx(os.path.join(data, split + "-images-idx3-ubyte.gz"), raw)
        write_idx(os.path.join(data, split + "-labels-idx1-ubyte.gz"), raw_labels)
    torch.manual_seed(3)
    model = os.path.join(args.workdir, "simplenn.onnx")
    export(build("simplenn", 1, 28, 28, 10), (1, 28, 28), model, training=True)
    check = Checks()

    sgd = ["--lr", "0.05", "--momentum", "0.9"]
    for world in (1, 2):
        w = ["--world-size", "2"] if world > 1 else []
        try:
            big, big_steps, _ = train(args, model, f"b32-w{world}", sgd + w + ["--batch", "32"])
            acc, acc_steps, _ = train(args, model, f"b8a4-w{world}", sgd + w + ["--batch", "8", "--accumulate", "4"])
            small, _, _ = train(args, model, f"b8-w{world}", sgd + w + ["--batch", "8", "--max-steps", "10"])
        except RuntimeError as e:
            check(f"{world} rank(s): trains", False, str(e))
            continue
        d, far = max_rel(acc, big), max_rel(small, big)
        check(f"{world} rank(s): --accumulate 4 --batch 8 equals --batch 32", d <= 1e-6 and len(acc_steps) == 20 // world,
              f"max rel weight difference {d:.1e} (bound 1e-6), {len(acc_steps)} optimizer steps")
        check(f"{world} rank(s): ... and --batch 8 alone does not", far > 1e-3, f"{far:.1e} away")

    recipe = ["--opt", "adamw", "--wd", "0.05", "--lr", "0.003", "--batch", "8", "--accumulate", "4",
              "--lr-warmup-epochs", "1", "--lr-scheduler", "cosineannealinglr", "--lr-per-step",
              "--snapshot-every", "3", "--max-restarts", "1"]
    try:
        whole, whole_steps, _ = train(args, model, "whole", recipe)
        # With a per-step schedule an epoch row states its last step's rate, not its first.
        last = {r["epoch"]: r["lr"] for r in train.rows if r["type"] == "step"}
        first = {}
        for r in train.rows:
            if r["type"] == "step":
                first.setdefault(r["epoch"], r["lr"])
        epochs = [(r["epoch"], r["lr"]) for r in train.rows if r["type"] == "epoch"]
        check("per-step schedule: each epoch row's rate is its last step's",
              len(epochs) == 2 and all(lr == last[e] and lr != first[e] for e, lr in epochs),
              f"epoch rows {epochs}, first and last step rates {first} {last}")
        resumed, resumed_steps, out = train(args, model, "killed", recipe, {"ONNXTRAIN_FAULT_KILL_AT_STEPS": "5"})
    except RuntimeError as e:
        check("resume: trains", False, str(e))
    else:
        restarted = "step_00000003" in out or "3 steps done" in out
        check("resume: killed at step 5, restarted from the step-3 snapshot", restarted,
              [line for line in out.splitlines() if "resumed" in line or "restart" in line][:3])
        same = all(np.array_equal(resumed[n], whole[n]) for n in whole)
        check("resume: final weights bitwise equal to the uninterrupted run", same,
              f"max rel difference {max_rel(resumed, whole):.1e}")
        after = {s: (loss, lr) for s, loss, lr in resumed_steps}
        want = {s: (loss, lr) for s, loss, lr in whole_steps}
        check("resume: every step's loss and learning rate equal", after == want and len(want) == 20,
              f"{sum(after.get(s) == v for s, v in want.items())} of {len(want)} steps equal")
    print(f"accumulate_test: {check.passed} passed, {check.failed} failed in {time.time() - start:.1f} s")
    return 0 if check.failed == 0 and check.passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
