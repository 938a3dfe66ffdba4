#!/usr/bin/env python3
"""`--data synthetic` for models whose input is not an image, and buffers that must not train.

Models exported by PyTorch here (training mode, opset 17, dynamic batch):
- a language model (ids [batch, 12] -> scores [batch, 12, V]): windows of a synthetic Markov
  chain with next-token labels; 6 epochs bring the validation loss near its 0.940 floor.
- tokens: embedding of int64 ids [batch, 12], a causal-mask buffer (-inf above the diagonal)
  added to the attention scores of an nn.TransformerEncoder, a linear head. Trained 3
  epochs (SGD lr 0.05) on synthetic token ids: the run ends (a trained -inf mask turns the
  loss into NaN at the second step), the test accuracy beats chance (0.1) by far, the
  checkpoint's mask is bitwise the exported one (-inf stays -inf: PyTorch never trains
  buffers) while the embedding moved, and a second run gives bitwise the same step losses.
- sequence: an LSTM over float [batch, 7, 6]; signal: a Conv1d net over float [batch, 1, 64].
  Each trains an epoch on synthetic data of its input's shape (loss of the last steps below
  the first steps').
- Mistakes, each one "onnx-train: error:" line and a non-zero exit: token ids that feed no
  embedding table (their range is unknown: the line names the input and --data npz), an
  image shape (synthetic:N:CxHxW) for a model whose input is not an image, and a sequence
  length that is not fixed.

Run by CTest (target synthetic_inputs_test); by hand:
    /usr/bin/python3 tests/data/synthetic_inputs_test.py --onnx-train build/tools/onnx-train --workdir /tmp/si
"""
import json
import os
import subprocess
import sys
import warnings

try:
    import numpy as np
    import onnx
    import onnx.numpy_helper
    import torch
    from torch import nn
except ImportError as e:
    sys.exit(f"synthetic_inputs_test: {e}; install python3-torch and python3-onnx (scripts/install-deps.sh)")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # the shared helpers
from check_tally import Checks  # noqa: E402
from ot_cli import initializers, test_args, test_parser  # noqa: E402

SEQ, VOCAB, CLASSES = 12, 40, 10


class Tokens(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 16)
        layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
        self.fc = nn.Linear(16, CLASSES)
        self.register_buffer("mask", torch.triu(torch.full((SEQ, SEQ), float("-inf")), diagonal=1))

    def forward(self, ids):
        return self.fc(self.encoder(self.embed(ids), mask=self.mask).mean(1))


class NoEmbedding(nn.Module):
    """int64 ids used as numbers: nothing tells their range."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(SEQ, CLASSES)

    def forward(self, ids):
        return self.fc(ids.float())


class Sequence(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(6, 16, batch_first=True)
        self.fc = nn.Linear(16, CLASSES)

    def forward(self, x):
        return self.fc(self.rnn(x)[0][:, -1])


class Signal(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv1d(1, 8, 5, padding=2), nn.BatchNorm1d(8), nn.ReLU(), nn.MaxPool1d(2))
        self.fc = nn.Linear(8 * 32, CLASSES)

    def forward(self, x):
        return self.fc(self.net(x).flatten(1))


def export(module, example, path, dynamic=None):
    axes = {"input": {0: "batch"}, "logits": {0: "batch"}}
    if dynamic:
        axes["input"].update(dynamic)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.train(), example, path, input_names=["input"], output_names=["logits"],
                          dynamic_axes=axes, training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                          opset_version=17)


def main():
    p = test_parser(__doc__)
    args = test_args(p)
    torch.manual_seed(0)
    check = Checks(width=70)

    def train(model, tag, extra):
        ckpt, metrics = os.path.join(args.workdir, tag + "_ckpt"), os.path.join(args.workdir, tag + ".jsonl")
        if os.path.exists(metrics):
            os.remove(metrics)
        proc = subprocess.run([args.onnx_train, model, "--data", "synthetic", "--checkpoint-dir", ckpt, "--metrics",
                               metrics, "--threads", "2", "--quiet", "--seed", "3"] + extra,
                              capture_output=True, text=True, timeout=600)
        rows = [json.loads(ln) for ln in open(metrics)] if os.path.exists(metrics) else []
        return proc, rows, ckpt

    def one_error_line(cmd, fragments, name):
        proc = subprocess.run([args.onnx_train] + cmd, capture_output=True, text=True, timeout=300)
        lines = proc.stderr.strip().splitlines()
        ok = (proc.returncode != 0 and len(lines) == 1 and lines[0].startswith("onnx-train: error: ")
              and all(f in lines[0] for f in fragments))
        check(name, ok, f"exit {proc.returncode}: {proc.stderr.strip()[:300]!r}")

    # Token ids with a causal-mask buffer.
    tokens = os.path.join(args.workdir, "tokens.onnx")
    export(Tokens(), torch.randint(0, VOCAB, (2, SEQ)), tokens)
    before = initializers(tokens)
    runs = []
    for tag in ("tokens_a", "tokens_b"):
        proc, rows, ckpt = train(tokens, tag, ["--epochs", "3", "--lr", "0.05"])
        runs.append([r["loss"] for r in rows if r["type"] == "step"])
    check("tokens: trains 3 epochs on synthetic token ids", proc.returncode == 0,
          (proc.stderr.strip().splitlines() or [""])[-1][:300])
    epochs = [r for r in rows if r["type"] == "epoch"]
    acc = epochs[-1].get("test_acc", 0) if epochs else 0
    check("tokens: test accuracy well above chance", acc > 0.3, f"{acc:.3f}")
    onnx_files = sorted(f for f in os.listdir(ckpt) if f.endswith(".onnx")) if os.path.isdir(ckpt) else []
    if onnx_files:
        after = initializers(os.path.join(ckpt, onnx_files[-1]))
        check("tokens: the -inf mask buffer is not trained", np.array_equal(after["mask"], before["mask"]),
              f"{int(np.sum(np.isinf(after['mask'])))} infinities of {int(np.sum(np.isinf(before['mask'])))}")
        moved = float(np.abs(after["embed.weight"] - before["embed.weight"]).max())
        check("tokens: the embedding is trained", moved > 1e-3, f"moved by up to {moved:.2e}")
    else:
        check("tokens: a checkpoint was written", False)
    check("tokens: a second run gives bitwise the same step losses", runs[0] == runs[1] and len(runs[0]) == 96,
          f"{len(runs[0])} and {len(runs[1])} steps")

    # A language model (ids [N, T] -> scores [N, T, V]): synthetic windows of a Markov chain whose
    # loss floor is 0.940 nats a token (uniform guessing: ln V).
    class TinyLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(VOCAB, 32)
            self.head = torch.nn.Linear(32, VOCAB)

        def forward(self, ids):
            return self.head(torch.tanh(self.embed(ids)))

    lm = os.path.join(args.workdir, "tiny_lm.onnx")
    export(TinyLM(), torch.randint(0, VOCAB, (2, SEQ)), lm)
    proc, rows, _ = train(lm, "tiny_lm", ["--epochs", "6", "--optimizer", "adam", "--lr", "0.01", "--no-checkpoints"])
    epochs = [r for r in rows if r["type"] == "epoch"]
    val = epochs[-1].get("val_loss", float("nan")) if epochs else float("nan")
    check("language model: synthetic next-token windows, validation loss near the 0.940 floor",
          proc.returncode == 0 and 0.9 < val < 1.15, f"val loss {val:.4f} (ln V = {np.log(VOCAB):.3f}); "
          f"{proc.stderr.strip()[-200:]}")

    # Float sequences and signals.
    for name, module, shape in (("sequence", Sequence(), (7, 6)), ("signal", Signal(), (1, 64))):
        path = os.path.join(args.workdir, name + ".onnx")
        export(module, torch.randn((2,) + shape), path)
        proc, rows, _ = train(path, name, ["--epochs", "1", "--optimizer", "adam", "--lr", "3e-3"])
        losses = [r["loss"] for r in rows if r["type"] == "step"]
        q = max(1, len(losses) // 4)
        ok = proc.returncode == 0 and len(losses) > 4 and np.mean(losses[-q:]) < np.mean(losses[:q])
        check(f"{name}: float {list(shape)} samples, loss falls over an epoch", ok,
              f"first quarter {np.mean(losses[:q]) if losses else float('nan'):.3f}, last "
              f"{np.mean(losses[-q:]) if losses else float('nan'):.3f}; {proc.stderr.strip()[-200:]}")

    # Mistakes.
    plain_ids = os.path.join(args.workdir, "no_embedding.onnx")
    export(NoEmbedding(), torch.randint(0, VOCAB, (2, SEQ)), plain_ids)
    one_error_line([plain_ids, "--data", "synthetic", "--no-checkpoints"], ["'input'", "token ids", "npz"],
                   "token ids without an embedding table: one error line")
    one_error_line([tokens, "--data", "synthetic:64:3x8x8", "--no-checkpoints"], ["synthetic:64:3x8x8", "image"],
                   "an image shape for a token model: one error line")
    free_len = os.path.join(args.workdir, "free_length.onnx")
    export(Sequence(), torch.randn(2, 7, 6), free_len, dynamic={1: "time"})
    one_error_line([free_len, "--data", "synthetic", "--no-checkpoints"], ["'input'", "fixed shape"],
                   "a sequence length that is not fixed: one error line")

    return check.finish("synthetic_inputs_test")


if __name__ == "__main__":
    sys.exit(main())
