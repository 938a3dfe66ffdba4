#!/usr/bin/env python3
"""Training options through the command line, each held to an independent reference.

- `--recipe resnet34` on a CIFAR-10 folder written by the test (the binary format: 5 x 10000
  training records and 10000 test records of 1 label byte + 3072 pixel bytes; the first
  records hold seeded random images, the rest of each file is a hole, so the files take almost
  no disk): the recipe's hyperparameters (batch 128, SGD lr 0.1 momentum 0.9, StepLR every 5
  epochs x0.1, 15 epochs, a checkpoint every 3 epochs) on a small model exported from PyTorch
  (SimpleNN on 3x32x32; the recipe is the hyperparameters, the model is the user's), one step
  per epoch: per-step losses against torch.optim.SGD + StepLR in float64, and the checkpoints
  of epochs 3, 6, 9, 12, 15.
- `--lr-schedule step|cosine`: SimpleNN on jittered Fashion-MNIST (torch_train_parity.py's),
  4 epochs x 3 steps with momentum, against torch's StepLR / CosineAnnealingLR in float64.
- `--lr-scale-world`: two ranks with --lr 0.01 --lr-scale-world take the very steps of two
  ranks with --lr 0.02 (bitwise equal losses), not those of --lr 0.01.
- `--augment`: the same seed gives the same losses twice; the losses differ from those
  without --augment and with another seed (the random crops and flips reach the model).
  The data-parallel runs see 96 images at batch 32 per rank: one full step and one partial.

Losses: relative deviation from float64 within max(1e-5, 3x PyTorch float32's own).
Run by CTest (target cli_training_options_test); by hand:
    /usr/bin/python3 tests/cli/cli_training_options_test.py --onnx-train build/tools/onnx-train --workdir /tmp/to
"""
import copy
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # the shared helpers
from check_tally import Checks  # noqa: E402
from ot_cli import test_args, test_parser  # noqa: E402
from torch_models import build, export  # noqa: E402
from fashion_data import normalized, jittered_fashion  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

CIFAR_MEAN = np.array([0.4914, 0.4822, 0.4465]).reshape(1, 3, 1, 1)
CIFAR_STD = np.array([0.2470, 0.2435, 0.2616]).reshape(1, 3, 1, 1)
RECORD = 1 + 3072


def write_cifar(folder, filled):
    """CIFAR-10 binary files whose first `filled` records are seeded random images (each
    image twice, with two different labels)."""
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(11)
    first = None
    for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
        # Each image twice with two labels: the loss cannot fall towards 0 (where relative
        # comparisons mean nothing) however far lr 0.1 goes.
        labels = rng.integers(0, 10, filled).astype(np.uint8)
        labels[filled // 2:] = (labels[:filled // 2] + 1 + rng.integers(0, 9, filled // 2)) % 10
        pixels = np.tile(rng.integers(0, 256, (filled // 2, 3072)), (2, 1)).astype(np.uint8)
        with open(os.path.join(folder, name), "wb") as f:
            f.write(np.concatenate([labels[:, None], pixels], axis=1).tobytes())
            f.truncate(10000 * RECORD)
        if first is None:
            first = (pixels.reshape(filled, 3, 32, 32), labels.astype(np.int64))
    return first


def run_losses(args, model, tag, options, world=None):
    metrics = os.path.join(args.workdir, tag + ".jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    cmd = [args.onnx_train, model, "--metrics", metrics, "--quiet", "--threads", "2"] + options
    if world:
        cmd += ["--world-size", str(world)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=args.workdir)
    if proc.returncode != 0:
        raise RuntimeError((proc.stderr.strip() or "exit %d" % proc.returncode).splitlines()[-1][:400])
    with open(metrics) as f:
        rows = [json.loads(line) for line in f]
    return rows, proc.stdout


def torch_sgd_losses(module, batches, epochs, lr, momentum, make_sched, dtype):
    module = copy.deepcopy(module).to(dtype)
    opt = torch.optim.SGD(module.parameters(), lr=lr, momentum=momentum)
    sched = make_sched(opt)
    losses, lrs = [], []
    for _ in range(epochs):
        for x, y in batches:
            opt.zero_grad()
            loss = F.cross_entropy(module(torch.tensor(x, dtype=dtype)), torch.tensor(y))
            loss.backward()
            lrs.append(opt.param_groups[0]["lr"])
            opt.step()
            losses.append(float(loss))
        sched.step()
    return losses, lrs


def main():
    p = test_parser(__doc__)
    args = test_args(p)
    torch.set_num_threads(2)
    start = time.time()
    check = Checks(width=72)

    def parity(name, ours, module, batches, epochs, lr, momentum, make_sched):
        ref32, lrs = torch_sgd_losses(module, batches, epochs, lr, momentum, make_sched, torch.float32)
        ref64, _ = torch_sgd_losses(module, batches, epochs, lr, momentum, make_sched, torch.float64)
        steps = [r for r in ours if r["type"] == "step"]
        if not check(f"{name}: {len(ref64)} steps in the metrics", len(steps) == len(ref64), f"{len(steps)}"):
            return
        # loop_ms, the loop's wall per step (since the previous step row), covers the step call.
        check(f"{name}: each step row's loop_ms covers its step_ms",
              all(r["loop_ms"] >= r["step_ms"] - 0.002 for r in steps), f"{[(r['loop_ms'], r['step_ms']) for r in steps][:4]}")
        our_lrs = [r["lr"] for r in steps]
        check(f"{name}: learning rate of each step as torch's scheduler",
              np.allclose(our_lrs, lrs, rtol=1e-5, atol=0), f"{our_lrs} vs {lrs}")
        # An epoch row states the rate of its last step (per-step schedules move within it).
        last_lr = {r["epoch"]: r["lr"] for r in steps}
        epoch_lrs = [(r["lr"], last_lr.get(r["epoch"])) for r in ours if r["type"] == "epoch"]
        check(f"{name}: each epoch row's rate is its last step's",
              epoch_lrs and all(a == b for a, b in epoch_lrs), f"{epoch_lrs}")
        rel = [abs(r["loss"] - b) / abs(b) for r, b in zip(steps, ref64)]
        torch_rel = max(abs(a - b) / abs(b) for a, b in zip(ref32, ref64))
        bound = max(1e-5, 3 * torch_rel)
        check(f"{name}: losses {ref64[0]:.4f} -> {ref64[-1]:.4f} match torch float64", max(rel) <= bound,
              f"max rel {max(rel):.2e} at step {int(np.argmax(rel))} (bound {bound:.1e}, PyTorch float32 {torch_rel:.1e})")

    # --- --recipe resnet34 on CIFAR-10 files ---
    cifar = os.path.join(args.workdir, "cifar")
    pixels, labels = write_cifar(cifar, 128)
    torch.manual_seed(2)
    net = build("simplenn", 3, 32, 32, 10)
    cifar_model = os.path.join(args.workdir, "cifar_simplenn.onnx")
    export(net, (3, 32, 32), cifar_model, training=True)
    x = ((pixels / 255.0 - CIFAR_MEAN) / CIFAR_STD).astype(np.float32)
    ck = os.path.join(args.workdir, "recipe_ck")
    try:
        rows, out = run_losses(args, cifar_model, "recipe",
                               ["--recipe", "resnet34", "--data", "cifar10:" + cifar, "--no-shuffle", "--max-steps", "1",
                                "--checkpoint-dir", ck, "--eval-every", "100"])
    except RuntimeError as e:
        check("--recipe resnet34: trains on the CIFAR-10 folder", False, str(e))
    else:
        epochs = [r for r in rows if r["type"] == "epoch"]
        check("--recipe resnet34: 15 epochs of batch 128", len(epochs) == 15 and all(r["batch"] == 128 for r in epochs),
              str([(r["epoch"], r["batch"]) for r in epochs]))
        parity("--recipe resnet34", rows, net, [(x, labels)], 15, 0.1, 0.9,
               lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=5, gamma=0.1))
        saved = sorted(f for f in os.listdir(ck) if f.startswith("epoch_") and f.endswith(".onnx")) \
            if os.path.isdir(ck) else []
        check("--recipe resnet34: checkpoints every 3 epochs",
              saved == [f"epoch_{e:04d}.onnx" for e in (3, 6, 9, 12, 15)], str(saved))

    # --- --lr-schedule step|cosine ---
    raw, raw_labels = jittered_fashion(args.workdir, 96)
    fx = normalized(raw)
    fy = raw_labels.astype(np.int64)
    torch.manual_seed(4)
    fnet = build("simplenn", 1, 28, 28, 10)
    fmodel = os.path.join(args.workdir, "simplenn.onnx")
    export(fnet, (1, 28, 28), fmodel, training=True)
    batches = [(fx[i * 32:(i + 1) * 32], fy[i * 32:(i + 1) * 32]) for i in range(3)]
    data = ["--data", "fashion-mnist:" + os.path.join(args.workdir, "fashion-jitter"), "--no-shuffle",
            "--max-steps", "3", "--batch", "32", "--no-checkpoints", "--eval-every", "100"]
    for sched, opts, make in [
            ("step", ["--lr-step", "2", "--lr-gamma", "0.5"],
             lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5)),
            ("cosine", [], lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=4))]:
        try:
            rows, _ = run_losses(args, fmodel, "sched-" + sched,
                                 data + ["--epochs", "4", "--lr", "0.05", "--momentum", "0.9", "--lr-schedule", sched] + opts)
        except RuntimeError as e:
            check(f"--lr-schedule {sched}: trains", False, str(e))
            continue
        parity(f"--lr-schedule {sched}", rows, fnet, batches, 4, 0.05, 0.9, make)

    # --- --lr-scale-world ---
    def dp_losses(tag, lr, extra):
        rows, _ = run_losses(args, fmodel, tag, data + ["--epochs", "1", "--lr", lr] + extra, world=2)
        return [r["loss"] for r in rows if r["type"] == "step"], [r["lr"] for r in rows if r["type"] == "step"]
    try:
        scaled, scaled_lr = dp_losses("world-scaled", "0.01", ["--lr-scale-world"])
        double, _ = dp_losses("world-double", "0.02", [])
        plain, _ = dp_losses("world-plain", "0.01", [])
    except RuntimeError as e:
        check("--lr-scale-world: two ranks train", False, str(e))
    else:
        check("--lr-scale-world: 2 ranks at --lr 0.01 report lr 0.02", scaled_lr and all(v == 0.02 for v in scaled_lr),
              str(scaled_lr))
        check("--lr-scale-world: ... and take the steps of --lr 0.02 (bitwise)", scaled == double and len(scaled) >= 2,
              f"{scaled} vs {double}")
        check("--lr-scale-world: ... not those of --lr 0.01", scaled[1:] != plain[1:], f"{scaled} vs {plain}")

    # --- --augment ---
    def aug_losses(tag, extra):
        rows, _ = run_losses(args, fmodel, tag, data + ["--epochs", "1", "--lr", "0.05"] + extra)
        return [r["loss"] for r in rows if r["type"] == "step"]
    try:
        a1 = aug_losses("aug1", ["--augment", "--seed", "3"])
        a2 = aug_losses("aug2", ["--augment", "--seed", "3"])
        a3 = aug_losses("aug3", ["--augment", "--seed", "4"])
        plain = aug_losses("noaug", ["--seed", "3"])
    except RuntimeError as e:
        check("--augment: trains", False, str(e))
    else:
        check("--augment: same seed, same losses", a1 == a2 and len(a1) == 3, f"{a1} vs {a2}")
        check("--augment: the crops and flips change the first step's loss", a1[0] != plain[0], f"{a1} vs {plain}")
        check("--augment: another seed, other crops", a1[0] != a3[0], f"{a1} vs {a3}")

    print(f"cli_training_options_test: {check.passed} passed, {check.failed} failed in {time.time() - start:.1f} s")
    return 0 if check.failed == 0 and check.passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
