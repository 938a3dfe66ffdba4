#!/usr/bin/env python3
"""Beyond one-image classification, end to end through the CLI (train/data/npy_dataset.cc,
train/trainer.cc, train/evaluate.cc): float targets from an npz for --loss mse and
bce-with-logits, several model inputs bound to npz arrays by name, their metrics, and the
error for an input without an array.

Models exported by torch 1.13 (legacy exporter, opset 17, dynamic batch):
  * a Linear regressor, y = x @ w + b + N(0, 0.1^2) noise: after training with --loss mse
    the test RMSE is near the noise level (< 0.15, noise sigma 0.1);
  * a multi-label tagger (Linear, 8 features -> 4 labels, label k on when x[k] > 0): after
    --loss bce-with-logits the test exact-match accuracy is > 90%;
  * a two-input encoder (input_ids [N, T] int64 + attention_mask [N, T] float32, Embedding +
    masked mean + Linear) whose class is whether token 1 occurs in the unmasked part: the
    loss falls, and `eval` runs;
  * the same encoder on --data synthetic, which fills both inputs (ids carrying the class, the
    mask all ones): the loss falls and the test accuracy is > 75% (chance 50%);
  * the npz without the attention_mask array: one error line naming the input, the file
    and its arrays.

Run by CTest (target tasks_test); by hand:
    /usr/bin/python3 tests/cli/tasks_test.py --onnx-train build/tools/onnx-train --workdir /tmp/tt
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # the shared helpers
from ot_cli import epochs, run, test_args, test_parser  # noqa: E402
from torch_models import TwoInputEncoder, export_inputs as export  # noqa: E402

try:
    import torch
    import torch.nn as nn
except ImportError:
    print("SKIP: no torch")
    sys.exit(0)


def main():
    ap = test_parser(__doc__)
    a = test_args(ap)
    tool, wd = a.onnx_train, a.workdir
    os.makedirs(wd, exist_ok=True)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    common = ["--epochs", "8", "--batch", "32", "--threads", "2", "--no-checkpoints", "--opt", "adam"]

    # 1. Regression: noisy linear function, --loss mse.
    n, d, sigma = 1200, 6, 0.1
    x = rng.standard_normal((n, d)).astype(np.float32)
    w = rng.standard_normal((d, 1)).astype(np.float32)
    y = (x @ w + 0.5 + sigma * rng.standard_normal((n, 1))).astype(np.float32)
    np.savez(os.path.join(wd, "reg.npz"), x=x, y=y)
    export(nn.Linear(d, 1), (torch.zeros(2, d),), ["x"], os.path.join(wd, "reg.onnx"))
    m = os.path.join(wd, "reg.jsonl")
    out = run(tool, [os.path.join(wd, "reg.onnx"), "--data", "npz:" + os.path.join(wd, "reg.npz"), "--loss", "mse",
                     "--lr", "0.05", "--metrics", m] + common)
    last = epochs(m)[-1]
    print("regression: test RMSE %.4f (noise sigma %.2f), test MAE %.4f, train RMSE %.4f"
          % (last["test_rmse"], sigma, last["test_mae"], last["rmse"]))
    if not (last["test_rmse"] < 1.5 * sigma and "Test RMSE" in out):
        sys.exit("FAIL: regression test RMSE %.4f is not near the noise level %.2f:\n%s" % (last["test_rmse"], sigma, out))

    # A NaN in the data ends the run naming the sample, not blaming the learning rate.
    bad_x = x.copy()
    bad_x[777, 3] = np.nan
    np.savez(os.path.join(wd, "reg_nan.npz"), x=bad_x, y=y, x_test=x[:100], y_test=y[:100])
    out = run(tool, [os.path.join(wd, "reg.onnx"), "--data", "npz:" + os.path.join(wd, "reg_nan.npz"), "--loss", "mse",
                     "--lr", "0.05", "--epochs", "1", "--no-checkpoints"],
              expect_ok=False)
    line = [l for l in out.splitlines() if "error:" in l]
    if not (line and "sample 777" in line[0] and "element 3" in line[0] and "learning rate" not in line[0]):
        sys.exit("FAIL: a NaN in the data should be named by its sample:\n" + out)
    print("NaN in the data:", line[0])

    # 2. Multi-label: label k on when x[k] > 0, --loss bce-with-logits.
    k = 4
    x = rng.standard_normal((n, 8)).astype(np.float32)
    y = (x[:, :k] > 0).astype(np.float32)
    np.savez(os.path.join(wd, "tags.npz"), x=x, labels=y)
    export(nn.Linear(8, k), (torch.zeros(2, 8),), ["x"], os.path.join(wd, "tags.onnx"))
    m = os.path.join(wd, "tags.jsonl")
    out = run(tool, [os.path.join(wd, "tags.onnx"), "--data", "npz:" + os.path.join(wd, "tags.npz"), "--loss",
                     "bce-with-logits", "--lr", "0.05", "--metrics", m] + common)
    last = epochs(m)[-1]
    print("multi-label: test exact match %.4f, test mean F1 %.4f" % (last["test_exact_match"], last["test_f1"]))
    if not (last["test_exact_match"] > 0.9 and last["test_f1"] > 0.95 and "Test exact" in out):
        sys.exit("FAIL: multi-label test exact match %.4f, F1 %.4f:\n%s"
                 % (last["test_exact_match"], last["test_f1"], out))

    # 3. Two inputs by name: class = token 1 occurs in the unmasked part.
    vocab, t = 10, 8

    ids = rng.integers(2, vocab, size=(n, t)).astype(np.int64)
    lengths = rng.integers(3, t + 1, size=n)
    mask = (np.arange(t)[None, :] < lengths[:, None]).astype(np.float32)
    label = rng.integers(0, 2, size=n)
    for i in range(n):
        if label[i]:
            ids[i, rng.integers(0, lengths[i])] = 1
    ids[:, -1] = np.where(mask[:, -1] == 0, 1, ids[:, -1])  # token 1 behind the mask means nothing
    label = np.array([int((ids[i][mask[i] > 0] == 1).any()) for i in range(n)], dtype=np.int64)
    npz = os.path.join(wd, "enc.npz")
    np.savez(npz, input_ids=ids, attention_mask=mask, y=label)
    enc = os.path.join(wd, "enc.onnx")
    export(TwoInputEncoder(vocab, 16), (torch.zeros(2, t, dtype=torch.int64), torch.ones(2, t)), ["input_ids", "attention_mask"], enc)
    m = os.path.join(wd, "enc.jsonl")
    out = run(tool, [enc, "--data", "npz:" + npz, "--lr", "0.05", "--metrics", m] + common)
    rows = epochs(m)
    print("two inputs: loss %.4f -> %.4f, train acc %.4f" % (rows[0]["loss"], rows[-1]["loss"], rows[-1]["acc"]))
    if not rows[-1]["loss"] < 0.7 * rows[0]["loss"]:
        sys.exit("FAIL: the two-input encoder's loss did not fall:\n" + out)
    # The same arrays under other names, through --input-map.
    np.savez(os.path.join(wd, "enc2.npz"), ids=ids, m=mask, labels=label)
    out = run(tool, [enc, "--data", "npz:" + os.path.join(wd, "enc2.npz"), "--input-map", "input_ids=ids",
                     "--input-map", "attention_mask=m", "--epochs", "1", "--batch", "32", "--threads", "2",
                     "--no-checkpoints"])

    # --data synthetic fills both inputs: ids carrying the class, the mask all ones.
    m = os.path.join(wd, "enc_synth.jsonl")
    out = run(tool, [enc, "--data", "synthetic:512", "--epochs", "3", "--batch", "32", "--lr", "0.1", "--threads", "2",
                     "--no-checkpoints", "--metrics", m])
    rows = epochs(m)
    print("synthetic two inputs: loss %.4f -> %.4f, test acc %.4f" % (rows[0]["loss"], rows[-1]["loss"],
                                                                      rows[-1]["test_acc"]))
    if "input 'attention_mask' float [%d], all ones (a mask)" % t not in out:
        sys.exit("FAIL: synthetic data should say how it fills attention_mask:\n" + out)
    if not (rows[-1]["loss"] < rows[0]["loss"] and rows[-1]["test_acc"] > 0.75):
        sys.exit("FAIL: the two-input encoder did not learn synthetic data (chance is 0.5):\n" + out)

    # 4. A missing array: one line naming the input, the file and its arrays.
    bad = os.path.join(wd, "noattn.npz")
    np.savez(bad, input_ids=ids, y=label)
    out = run(tool, [enc, "--data", "npz:" + bad, "--epochs", "1", "--no-checkpoints"], expect_ok=False)
    errors = [line for line in out.splitlines() if "attention_mask" in line]
    if not (len(errors) == 1 and bad in errors[0] and "input_ids" in errors[0] and "y" in errors[0]):
        sys.exit("FAIL: the missing array should be one line naming the input, the file and its arrays:\n" + out)
    print("missing array:", errors[0])
    print("PASS")


if __name__ == "__main__":
    main()
