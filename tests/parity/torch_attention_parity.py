#!/usr/bin/env python3
"""PyTorch float64 parity of fused attention (graph/passes/fusion.h, runtime/cpu/matmul/attention.cc's flash
path) on torch-exported models, and a count that the fusion fired.

Small classifiers around attention: nn.TransformerEncoderLayer (nn.MultiheadAttention, 2
heads, GELU) without a mask, with a causal float mask and with a learned additive bias, and
a hand-written multi-head attention (Q K^T / sqrt(d), a -inf causal constant added or not),
at sequence lengths 1, 7 and 150 (past one 128-wide tile of the kernel). Under PyTorch 1.13
(Debian's python3) each is exported by the legacy exporter in training mode at opset 17;
under PyTorch 2.x (the torch2 venv) by the dynamo exporter at opset 18, which writes
scaled_dot_product_attention as Mul(Q, sqrt s), Mul(K^T, sqrt s), MatMul, Softmax, MatMul:
with optimize=False (the scale a Sqrt, the causal mask a Where, both computed) for the
gradients, and with the default optimize=True (both folded to constants; the weights
renamed, so the loss only is compared) too.
`onnx-train check` must report one fused attention per layer, and `onnx-train grad` (which
fuses) gives the mean cross-entropy loss and every parameter gradient; PyTorch autograd
gives the same in float64 (the oracle) and float32. Each float32 gradient of ours must be
within max(1e-4, 3x PyTorch float32's own distance) of float64, relative by norm per tensor
(grad_compare.py, as torch_nn_parity.py).

Run by CTest (torch_attention_parity, torch2_attention_parity); by hand:
    /usr/bin/python3 tests/parity/torch_attention_parity.py --onnx-train build/tools/onnx-train --workdir /tmp/ap
"""
import contextlib
import io
import math
import os
import re
import subprocess
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # the shared helpers
from torch_models import export as legacy_export, torch_grads  # noqa: E402  (exits if torch is missing)
from ot_cli import run_grad  # noqa: E402
from grad_compare import compare_gradients, parity_args, report_case, run_cases  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

TORCH2 = int(torch.__version__.split(".")[0]) >= 2
WIDTH, HEADS = 16, 2


def causal_float(t):
    return torch.triu(torch.full((t, t), float("-inf")), diagonal=1)


class EncoderNet(nn.Module):
    """in -> nn.TransformerEncoderLayer -> mean over positions -> classes."""

    def __init__(self, t, classes, mask):
        super().__init__()
        self.inp = nn.Linear(4, WIDTH)
        self.layer = nn.TransformerEncoderLayer(WIDTH, HEADS, 32, dropout=0.0, activation="gelu", batch_first=True)
        self.fc = nn.Linear(WIDTH, classes)
        if mask == "causal":
            self.register_buffer("mask", causal_float(t))
        elif mask == "bias":
            self.mask = nn.Parameter(torch.randn(t, t) * 0.5)
        else:
            self.mask = None

    def forward(self, x):
        return self.fc(self.layer(self.inp(x), src_mask=self.mask).mean(1))


class HandAttentionNet(nn.Module):
    """Multi-head attention written out: softmax(Q K^T / sqrt(d) [+ causal]) V."""

    def __init__(self, t, classes, causal):
        super().__init__()
        self.qkv = nn.Linear(4, 3 * WIDTH)
        self.fc = nn.Linear(WIDTH, classes)
        self.causal = causal
        self.register_buffer("mask", causal_float(t))

    def forward(self, x):
        n, t, _ = x.shape
        q, k, v = self.qkv(x).view(n, t, 3, HEADS, WIDTH // HEADS).permute(2, 0, 3, 1, 4)
        s = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(WIDTH // HEADS)
        if self.causal:
            s = s + self.mask
        y = torch.matmul(torch.softmax(s, dim=-1), v)
        return self.fc(torch.tanh(y.transpose(1, 2).reshape(n, t, WIDTH)).mean(1))


class SdpaNet(nn.Module):
    """F.scaled_dot_product_attention (PyTorch 2.x)."""

    def __init__(self, t, classes, causal):
        super().__init__()
        self.qkv = nn.Linear(4, 3 * WIDTH)
        self.fc = nn.Linear(WIDTH, classes)
        self.causal = causal

    def forward(self, x):
        n, t, _ = x.shape
        q, k, v = self.qkv(x).view(n, t, 3, HEADS, WIDTH // HEADS).permute(2, 0, 3, 1, 4)
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.fc(torch.tanh(y.transpose(1, 2).reshape(n, t, WIDTH)).mean(1))


def cases():
    out = [
        ("encoder_nomask", lambda t, k: EncoderNet(t, k, None)),
        ("encoder_causal", lambda t, k: EncoderNet(t, k, "causal")),
        ("encoder_bias", lambda t, k: EncoderNet(t, k, "bias")),
        ("hand_nomask", lambda t, k: HandAttentionNet(t, k, False)),
        ("hand_causal", lambda t, k: HandAttentionNet(t, k, True)),
    ]
    if TORCH2:  # the dynamo exporter fails on nn.TransformerEncoder's mask checks; SDPA instead
        out = [c for c in out if c[0].startswith("hand")] + [
            ("sdpa_nomask", lambda t, k: SdpaNet(t, k, False)),
            ("sdpa_causal", lambda t, k: SdpaNet(t, k, True)),
        ]
    return out


def export(module, t, path, batch, optimize=False):
    if not TORCH2:
        legacy_export(module, (t, 4), path, training=True, opset=17)
        return
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(module.train(), (torch.randn(batch, t, 4),), path, input_names=["input"], output_names=["logits"],
                          dynamo=True, external_data=False, optimize=optimize, opset_version=18)


def fused_attention(onnx_train, path):
    out = subprocess.run([onnx_train, "check", path], capture_output=True, text=True)
    m = re.search(r"(\d+) attention decomposition", out.stdout)
    return int(m.group(1)) if m else 0


def check(args, name, make, t, seed, classes=3, batch=3):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    module = make(t, classes)
    tag = f"{name}_T{t}"
    path = os.path.join(args.workdir, tag + ".onnx")
    export(module, t, path, batch)
    fused = fused_attention(args.onnx_train, path)
    failures = [] if fused == 1 else [f"{fused} attention fusions in the export, expected 1"]
    x = rng.standard_normal((batch, t, 4)).astype(np.float32)
    y = rng.integers(0, classes, size=batch).astype(np.int64)
    ref_loss, ref = torch_grads(module, x, y, torch.float64)[:2]
    ref32 = torch_grads(module, x, y, torch.float32)[1]
    ours = run_grad(args.onnx_train, path, x, y, args.workdir, tag)
    more, loss_err, worst, worst_name, worst_t32 = compare_gradients(ours, ref_loss, ref, ref32, 1e-4)
    failures += more
    if TORCH2:  # the exporter's default optimize=True: constants folded (scale, causal mask), weights renamed
        opt_path = os.path.join(args.workdir, tag + "_optimized.onnx")
        export(module, t, opt_path, batch, optimize=True)
        fused_opt = fused_attention(args.onnx_train, opt_path)
        opt_loss = float(run_grad(args.onnx_train, opt_path, x, y, args.workdir, tag + "_optimized")["loss"])
        if fused_opt != 1 or abs(opt_loss - ref_loss) > 1e-4 * abs(ref_loss):
            failures.append(f"optimize=True export: {fused_opt} fusions, loss {opt_loss} vs torch {ref_loss}")
    return report_case(tag, f"fused {fused}  loss rel err {loss_err:.1e}  {len(ref)} grads: worst {worst:.2e} "
                            f"({worst_name}), torch float32 worst {worst_t32:.2e}", failures)


def main():
    args = parity_args(__doc__)
    torch.set_num_threads(2)
    print(f"PyTorch {torch.__version__}, {'dynamo opset 18' if TORCH2 else 'legacy opset 17'} exports", flush=True)
    return run_cases("torch_attention_parity",
                     [(f"{name} T {t}", lambda name=name, make=make, t=t, i=i: check(args, name, make, t, seed=300 + i))
                      for i, (name, make) in enumerate(cases()) for t in (1, 7, 150)])


if __name__ == "__main__":
    sys.exit(main())
