#!/usr/bin/env python3
"""Every task through every command (issue 39 item 7): a regressor (--loss mse), a multi-label
tagger (--loss bce-with-logits) and a two-input encoder (input_ids + attention_mask,
cross-entropy), each from an npz with test arrays (NAME_test for every array), checked for
  * --world-size 2 at batch B ending within 1e-5 (relative, per tensor) of one rank at 2B
    after 5 full batches, and one rank at B not (the control); a last partial batch is dealt
    out as PyTorch's DistributedSampler deals it (padded, split over the ranks), so it is
    left out;
  * a run SIGKILLed at step 8 and restarted by its launcher (--max-restarts 1) from its step-6
    snapshot ending bitwise equal to an uninterrupted run;
  * `eval` of the checkpoint printing the task's figures as numpy computes them from the
    checkpoint's weights on the test arrays (RMSE and MAE; exact match; accuracy);
  * `infer` of the checkpoint giving numpy's forward pass of its weights;
  * `grad --loss ...` of one batch against PyTorch float64's gradient of the same loss
    (within 1e-5 relative: float32 against float64);
  * `export --loss ...` writing a training graph onnx.checker accepts.
The models are exported by torch 1.13's exporter (opset 17, dynamic batch), the oracles are
numpy and PyTorch float64, never onnx-train. About 30 s on 2 cores.

    /usr/bin/python3 tests/cli/tasks_lifecycle_test.py --onnx-train build/tools/onnx-train --workdir /tmp/tl
"""
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from check_tally import Checks  # noqa: E402
from ot_cli import call, initializers, read_dir, test_args, write_tensor  # noqa: E402

try:
    import onnx
    import torch
    import torch.nn as nn
    from torch_models import TwoInputEncoder, export_inputs as export
except ImportError:
    print("SKIP: no torch or onnx")
    sys.exit(0)

N, N_TEST, T, VOCAB = 192, 48, 6, 10


def make_tasks(wd, rng):
    """name -> dict(model, npz, loss flags, inputs {name: array}, labels, test arrays, forward(weights, inputs))."""
    tasks = {}
    torch.manual_seed(0)
    x = rng.standard_normal((N + N_TEST, 6)).astype(np.float32)
    y = (x @ rng.standard_normal((6, 1)) + 0.5 + 0.1 * rng.standard_normal((N + N_TEST, 1))).astype(np.float32)
    export(nn.Linear(6, 1), (torch.zeros(2, 6),), ["x"], os.path.join(wd, "reg.onnx"))
    tasks["regression"] = dict(loss=["--loss", "mse"], inputs={"x": x}, labels=y, torch_loss="mse")
    x = rng.standard_normal((N + N_TEST, 8)).astype(np.float32)
    y = (x[:, :4] > 0).astype(np.float32)
    export(nn.Linear(8, 4), (torch.zeros(2, 8),), ["x"], os.path.join(wd, "tags.onnx"))
    tasks["multi-label"] = dict(loss=["--loss", "bce-with-logits"], inputs={"x": x}, labels=y, torch_loss="bce")
    ids = rng.integers(0, VOCAB, size=(N + N_TEST, T)).astype(np.int64)
    lengths = rng.integers(2, T + 1, size=N + N_TEST)
    mask = (np.arange(T)[None, :] < lengths[:, None]).astype(np.float32)
    label = np.array([int((ids[i][mask[i] > 0] == 1).any()) for i in range(N + N_TEST)], dtype=np.int64)
    export(TwoInputEncoder(VOCAB, 8), (torch.zeros(2, T, dtype=torch.int64), torch.ones(2, T)), ["input_ids", "attention_mask"],
           os.path.join(wd, "enc.onnx"))
    tasks["two inputs"] = dict(loss=[], inputs={"input_ids": ids, "attention_mask": mask}, labels=label,
                               torch_loss="ce")
    for name, path in (("regression", "reg"), ("multi-label", "tags"), ("two inputs", "enc")):
        t = tasks[name]
        t["model"] = os.path.join(wd, path + ".onnx")
        t["npz"] = os.path.join(wd, path + ".npz")
        arrays = {k: v[:N] for k, v in t["inputs"].items()}
        arrays.update({k + "_test": v[N:] for k, v in t["inputs"].items()})
        arrays["y"], arrays["y_test"] = t["labels"][:N], t["labels"][N:]
        np.savez(t["npz"], **arrays)
    return tasks


def forward(name, w, inputs):
    """numpy's forward pass of a checkpoint's weights."""
    if name != "two inputs":
        return inputs["x"].astype(np.float64) @ w["weight"].T.astype(np.float64) + w["bias"]
    e = w["emb.weight"].astype(np.float64)[inputs["input_ids"]] * inputs["attention_mask"][..., None]
    pooled = e.sum(1) / np.maximum(inputs["attention_mask"].sum(1, keepdims=True), 1.0)
    return pooled @ w["fc.weight"].T.astype(np.float64) + w["fc.bias"]


def weights_of(model_path):
    """The checkpoint's initializers under their PyTorch names (a Linear's 'weight'/'bias')."""
    w = initializers(model_path)
    return {k.split("linear.")[-1] if k.startswith("linear.") else k: v for k, v in w.items()}


def torch_grads(task, w, inputs, labels):
    """PyTorch float64's gradients of the task's loss at weights w (by their names)."""
    params = {k: torch.tensor(v.astype(np.float64), requires_grad=True) for k, v in w.items()
              if v.dtype == np.float32}
    if "x" in inputs:
        out = torch.tensor(inputs["x"], dtype=torch.float64) @ params["weight"].T + params["bias"]
    else:
        ids = torch.tensor(inputs["input_ids"])
        m = torch.tensor(inputs["attention_mask"], dtype=torch.float64)
        e = params["emb.weight"][ids] * m.unsqueeze(-1)
        out = (e.sum(1) / m.sum(1, keepdim=True).clamp(min=1.0)) @ params["fc.weight"].T + params["fc.bias"]
    kind = task["torch_loss"]
    if kind == "mse":
        loss = torch.nn.functional.mse_loss(out, torch.tensor(labels, dtype=torch.float64))
    elif kind == "bce":
        loss = torch.nn.functional.binary_cross_entropy_with_logits(out, torch.tensor(labels, dtype=torch.float64))
    else:
        loss = torch.nn.functional.cross_entropy(out, torch.tensor(labels))
    loss.backward()
    return float(loss), {k: p.grad.numpy() for k, p in params.items()}


def max_rel(a, b):
    return max(float(np.abs(a[k].astype(np.float64) - b[k]).max() / (np.abs(b[k]).max() + 1e-12)) for k in b)


def main():
    args = test_args(__doc__)
    tool, wd = args.onnx_train, args.workdir
    os.makedirs(wd, exist_ok=True)
    check = Checks()
    tasks = make_tasks(wd, np.random.default_rng(0))

    def train(task, tag, options, env=None):
        ck = os.path.join(wd, "ck-" + tag)
        p = call([tool, task["model"], "--data", "npz:" + task["npz"], *task["loss"], "--threads", "2", "--quiet",
                  "--checkpoint-dir", ck, "--timeout", "120", *options], env=env)
        if p.returncode != 0:
            raise RuntimeError((p.stderr.strip() or f"exit {p.returncode}").splitlines()[-1][:400])
        epochs = sorted(n for n in os.listdir(ck) if n.startswith("epoch_") and n.endswith(".onnx"))
        return os.path.join(ck, epochs[-1]), p.stdout

    for name, task in tasks.items():
        tag = name.replace(" ", "_").replace("-", "_")
        print(f"--- {name}", flush=True)
        sgd = ["--opt", "sgd", "--lr", "0.05", "--momentum", "0.9", "--epochs", "1", "--max-steps", "5"]
        try:
            one = initializers(train(task, tag + "_b32", sgd + ["--batch", "32"])[0])
            two = initializers(train(task, tag + "_b16w2", sgd + ["--batch", "16", "--world-size", "2"])[0])
            half = initializers(train(task, tag + "_b16", sgd + ["--batch", "16"])[0])
        except RuntimeError as e:
            check(f"{name}: --world-size 2", False, str(e))
        else:
            d, far = max_rel(two, one), max_rel(half, one)
            check(f"{name}: --world-size 2 at batch 16 equals one rank at batch 32", d <= 1e-5, f"{d:.1e}")
            check(f"{name}: ... and one rank at batch 16 does not", far > 1e-4, f"{far:.1e} away")

        adam = ["--opt", "adam", "--lr", "0.01", "--batch", "16", "--epochs", "2", "--snapshot-every", "3",
                "--max-restarts", "1"]
        try:
            whole_path, _ = train(task, tag + "_whole", adam)
            killed_path, out = train(task, tag + "_killed", adam, dict(os.environ, ONNXTRAIN_FAULT_KILL_AT_STEPS="8"))
        except RuntimeError as e:
            check(f"{name}: kill and restart", False, str(e))
            continue
        whole, killed = initializers(whole_path), initializers(killed_path)
        same = all(np.array_equal(killed[k], whole[k]) for k in whole)
        check(f"{name}: killed at step 8, restarted from the step-6 snapshot, bitwise equal",
              same and "6 steps done" in out, f"restarted: {'6 steps done' in out}, same: {same}")

        # eval: the task's figures, as numpy computes them from the checkpoint's weights.
        w = weights_of(whole_path)
        test_inputs = {k: v[N:] for k, v in task["inputs"].items()}
        y_test = task["labels"][N:]
        scores = forward(name, w, test_inputs)
        p = call([tool, "eval", whole_path, "--data", "npz:" + task["npz"], *task["loss"]])
        text = p.stdout + p.stderr
        if name == "regression":
            err = scores - y_test
            want = {"MAE": np.abs(err).mean(), "RMSE": np.sqrt((err ** 2).mean())}
        elif name == "multi-label":
            pred = scores > 0
            want = {"exact match": 100 * (pred == (y_test > 0.5)).all(1).mean()}
        else:
            want = {"accuracy": 100 * (scores.argmax(1) == y_test).mean()}
        got = {}
        for key in want:
            m = re.search(re.escape(key) + r"[^0-9]*([0-9.]+)", text, re.IGNORECASE)
            got[key] = float(m.group(1)) if m else float("nan")
        check(f"{name}: eval prints {', '.join(want)} as numpy computes them from the checkpoint",
              p.returncode == 0 and all(abs(got[k] - want[k]) <= 2e-3 * max(1.0, abs(want[k])) for k in want),
              f"eval {got}, numpy {({k: round(float(v), 4) for k, v in want.items()})}; "
              f"{(text.strip().splitlines() or ['no output'])[-1][:200]}")

        # infer: numpy's forward pass of the checkpoint.
        feeds = []
        for k, v in test_inputs.items():
            path = os.path.join(wd, f"{tag}_{k}.pb")
            write_tensor(v[:7], k, path)
            feeds += ["--input", f"{k}={path}"]
        out_dir = os.path.join(wd, tag + "_infer")
        p = call([tool, "infer", whole_path, *feeds, "-o", out_dir])
        ok = p.returncode == 0
        detail = (p.stderr.strip().splitlines() or ["no output"])[-1][:200]
        if ok:
            outs = read_dir(out_dir)
            y = outs.get("out")
            want_y = forward(name, w, {k: v[:7] for k, v in test_inputs.items()})
            ok = y is not None and y.shape == want_y.shape and np.abs(y - want_y).max() <= 1e-5 * (1 + np.abs(want_y).max())
            detail = f"max difference {np.abs(y - want_y).max():.1e}" if y is not None else f"outputs {list(outs)}"
        check(f"{name}: infer gives numpy's forward pass of the checkpoint", ok, detail)

        # grad: one batch against PyTorch float64.
        batch = {k: v[:8] for k, v in task["inputs"].items()}
        labels = task["labels"][:8]
        feeds = []
        for k, v in list(batch.items()) + [("labels", labels)]:
            path = os.path.join(wd, f"{tag}_grad_{k}.pb")
            write_tensor(v, k, path)
            feeds += ["--input", f"{k}={path}"]
        out_dir = os.path.join(wd, tag + "_grads")
        p = call([tool, "grad", task["model"], *feeds, *task["loss"], "-o", out_dir])
        if p.returncode != 0:
            check(f"{name}: grad", False, (p.stderr.strip().splitlines() or ["no output"])[-1][:300])
        else:
            ours = read_dir(out_dir)
            w0 = initializers(task["model"])
            loss, ref = torch_grads(task, {k.split("linear.")[-1] if k.startswith("linear.") else k: v
                                           for k, v in w0.items()}, batch, labels)
            named = {k.split("linear.")[-1] if k.startswith("linear.") else k: v for k, v in ours.items()}
            worst = max(float(np.abs(named[k] - ref[k]).max() / (np.abs(ref[k]).max() + 1e-12)) for k in ref)
            loss_err = abs(float(np.asarray(ours["loss"]).reshape(-1)[0]) - loss) / abs(loss)
            check(f"{name}: grad against PyTorch float64", worst <= 1e-5 and loss_err <= 1e-6,
                  f"worst gradient {worst:.1e}, loss {loss_err:.1e}")

        # export: a training graph onnx.checker accepts.
        path = os.path.join(wd, tag + "_training.onnx")
        p = call([tool, "export", task["model"], *task["loss"], "-o", path])
        ok = p.returncode == 0
        detail = (p.stderr.strip().splitlines() or ["no output"])[-1][:200]
        if ok:
            try:
                onnx.checker.check_model(onnx.load(path))
            except Exception as e:  # noqa: BLE001 (the checker's message is the detail)
                ok, detail = False, str(e)[:200]
        check(f"{name}: export writes a training graph onnx.checker accepts", ok, detail)

    return check.finish("tasks_lifecycle_test")


if __name__ == "__main__":
    sys.exit(main())
