#!/usr/bin/env python3
"""PyTorch parity of the losses `onnx-train grad --loss ...` attaches (graph/autodiff/autodiff.cc).

Small models exported by torch (legacy exporter, training mode, opset 17) at batch 3: an
Embedding+Linear token model ([N, T, V] scores, classes last), a 1x1-conv segmentation net
([N, C, H, W], classes on axis 1), a Linear regressor and a log-softmax classifier. For each
loss `onnx-train grad` computes the loss and every parameter gradient; PyTorch autograd
computes the same with torch.nn.functional's loss in float64 (the oracle) and float32. The
rule of tests/parity/torch_grad_parity.py: our loss within 1e-4 (relative) of float64, and each of
our float32 gradients within max(1e-4, 3x PyTorch float32's distance) of float64, relative
by norm per tensor. Cases: per-token cross-entropy with ignored positions (-100), with
label smoothing too, per-pixel cross-entropy with --ignore-index 255, nll, mse, l1,
smooth-l1 (beta 0.5 and 1) and bce-with-logits. Then labels of the wrong shape or dtype
must fail with one line naming the labels, the loss and both shapes, and `export --loss
mse` must write a training graph that onnx.checker accepts.

Run by CTest (target loss_parity_test); by hand:
    /usr/bin/python3 tests/parity/loss_parity_test.py --onnx-train build/tools/onnx-train --workdir /tmp/lp
"""

import copy
import os
import subprocess
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # the shared helpers
from ot_cli import read_dir, run_or_raise, test_args, test_parser, write_tensor  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

BATCH = 3
VOCAB, SEQ = 11, 5


class TokenModel(nn.Module):
    """Token ids [N, T] -> scores [N, T, V] (classes last, as PyTorch's language models)."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 8)
        self.proj = nn.Linear(8, VOCAB)

    def forward(self, x):
        return self.proj(torch.tanh(self.emb(x)))


def seg_net():
    return nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.Tanh(), nn.Conv2d(6, 4, 1))


def regressor(outputs=3):
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, outputs))


def log_softmax_classifier():
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 5), nn.LogSoftmax(dim=1))


def export(module, x, path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(copy.deepcopy(module), torch.from_numpy(x), path, input_names=["input"],
                          output_names=["output"], training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, opset_version=17)


def torch_step(module, x, y, loss_fn, dtype):
    m = copy.deepcopy(module).to(dtype)
    m.train()
    xt = torch.from_numpy(x)
    if xt.is_floating_point():
        xt = xt.to(dtype)
    yt = torch.from_numpy(y)
    if yt.is_floating_point():
        yt = yt.to(dtype)
    loss = loss_fn(m(xt), yt)
    loss.backward()
    return float(loss), {n: p.grad.double().numpy() for n, p in m.named_parameters()}


def our_grads(args, tag, module, x, y, flags):
    path = os.path.join(args.workdir, tag + ".onnx")
    export(module, x, path)
    xp, yp = os.path.join(args.workdir, tag + "_x.pb"), os.path.join(args.workdir, tag + "_y.pb")
    write_tensor(x, "input", xp)
    write_tensor(y, "labels", yp)
    out = os.path.join(args.workdir, tag + "_grads")
    run_or_raise(args.onnx_train, ["grad", path, "--input", "input=" + xp, "--input", "labels=" + yp, "-o", out] + flags)
    return path, read_dir(out)


def matched(ours, name, shape, taken):
    """Our gradient of torch parameter `name`: by name, or (a Linear on rank-3 input, which
    the exporter writes as MatMul with its own transposed initializer) by transposed shape."""
    if name in ours and ours[name].shape == shape:
        return ours[name]
    for key, g in ours.items():
        if key != "loss" and g.ndim == 2 and g.T.shape == shape and key not in taken:
            taken.add(key)
            return g.T
    return None


def check(args, tag, module, x, y, loss_fn, flags):
    try:
        return compare(args, tag, module, x, y, loss_fn, flags)
    except RuntimeError as e:  # onnx-train failed
        print(f"  {tag:<22} {' '.join(flags):<46} failed: {e}", flush=True)
        return False


def compare(args, tag, module, x, y, loss_fn, flags):
    ref_loss, ref = torch_step(module, x, y, loss_fn, torch.float64)
    _, ref32 = torch_step(module, x, y, loss_fn, torch.float32)
    _, ours = our_grads(args, tag, module, x, y, flags)
    failures = []
    loss = float(ours["loss"])
    loss_err = abs(loss - ref_loss) / max(abs(ref_loss), 1e-6)
    if loss_err > 1e-4:
        failures.append(f"loss {loss} vs torch {ref_loss}")
    worst, worst_name, worst_t32 = 0.0, "", 0.0
    taken = set()
    for name, g in ref.items():
        a = matched(ours, name, g.shape, taken)
        if a is None:
            failures.append(f"no gradient for {name} {g.shape}")
            continue
        scale = max(np.linalg.norm(g), 1e-3)
        err = float(np.linalg.norm(a.astype(np.float64) - g) / scale)
        t32 = float(np.linalg.norm(ref32[name] - g) / scale)
        if err > worst:
            worst, worst_name = err, name
        worst_t32 = max(worst_t32, t32)
        if err > max(1e-4, 3 * t32):
            failures.append(f"{name}: {err:.2e} from float64 by norm (torch float32: {t32:.2e})")
    print(f"  {tag:<22} {' '.join(flags):<46} loss rel err {loss_err:.1e}  {len(ref)} grads: worst by norm "
          f"{worst:.2e} ({worst_name}), torch float32 worst {worst_t32:.2e}  {'ok' if not failures else 'FAILED'}",
          flush=True)
    for f in failures[:6]:
        print("    " + f)
    return not failures


def expect_error(args, tag, path, x, y, flags, words):
    """grad with labels that do not fit: non-zero exit, one error line holding `words`."""
    xp, yp = os.path.join(args.workdir, tag + "_x.pb"), os.path.join(args.workdir, tag + "_y.pb")
    write_tensor(x, "input", xp)
    write_tensor(y, "labels", yp)
    proc = subprocess.run([args.onnx_train, "grad", path, "--input", "input=" + xp, "--input", "labels=" + yp, "-o",
                           os.path.join(args.workdir, tag + "_grads")] + flags, capture_output=True, text=True)
    lines = proc.stderr.strip().splitlines()
    ok = proc.returncode != 0 and len(lines) == 1 and all(w in lines[0] for w in words)
    print(f"  {tag:<22} refused: {lines[-1] if lines else '(no message)'}  {'ok' if ok else 'FAILED'}", flush=True)
    return ok


def main():
    p = test_parser(__doc__)
    args = test_args(p)
    torch.set_num_threads(2)
    torch.manual_seed(7)
    rng = np.random.default_rng(7)
    results = []

    # Per-token cross-entropy: [N, T, V] scores, labels [N, T] with ignored positions.
    tokens = TokenModel()
    ids = rng.integers(0, VOCAB, size=(BATCH, SEQ)).astype(np.int64)
    y_tok = rng.integers(0, VOCAB, size=(BATCH, SEQ)).astype(np.int64)
    y_tok[0, 1] = y_tok[1, 4] = y_tok[2, 0] = -100
    results.append(check(args, "token_ce", tokens, ids, y_tok,
                         lambda o, y: F.cross_entropy(o.reshape(-1, VOCAB), y.reshape(-1)), []))
    results.append(check(args, "token_ce_smooth", tokens, ids, y_tok,
                         lambda o, y: F.cross_entropy(o.reshape(-1, VOCAB), y.reshape(-1), label_smoothing=0.1),
                         ["--loss", "cross-entropy", "--label-smoothing", "0.1"]))

    # Per-pixel cross-entropy: [N, C, H, W] scores, labels [N, H, W], 255 ignored.
    seg = seg_net()
    img = rng.standard_normal((BATCH, 3, 5, 6)).astype(np.float32)
    y_pix = rng.integers(0, 4, size=(BATCH, 5, 6)).astype(np.int64)
    y_pix[rng.random(y_pix.shape) < 0.2] = 255
    results.append(check(args, "pixel_ce", seg, img, y_pix, lambda o, y: F.cross_entropy(o, y, ignore_index=255),
                         ["--loss", "cross-entropy", "--ignore-index", "255"]))

    # nll on log-probabilities.
    clf = log_softmax_classifier()
    feats = rng.standard_normal((BATCH, 6)).astype(np.float32)
    y_cls = rng.integers(0, 5, size=BATCH).astype(np.int64)
    results.append(check(args, "nll", clf, feats, y_cls, lambda o, y: F.nll_loss(o, y), ["--loss", "nll"]))

    # Regression and multi-label: float targets shaped as the output.
    reg = regressor()
    target = rng.standard_normal((BATCH, 3)).astype(np.float32)
    results.append(check(args, "mse", reg, feats, target, F.mse_loss, ["--loss", "mse"]))
    results.append(check(args, "l1", reg, feats, target, F.l1_loss, ["--loss", "l1"]))
    for beta in (0.5, 1.0):
        results.append(check(args, f"smooth_l1_beta{beta}", reg, feats, target,
                             lambda o, y, b=beta: F.smooth_l1_loss(o, y, beta=b),
                             ["--loss", "smooth-l1", "--smooth-l1-beta", str(beta)]))
    multi = regressor(4)
    with torch.no_grad():  # logits of several sizes, a few large ones
        multi[2].weight.mul_(6.0)
    hot = (rng.random((BATCH, 4)) < 0.4).astype(np.float32)
    results.append(check(args, "bce_with_logits", multi, feats, hot, F.binary_cross_entropy_with_logits,
                         ["--loss", "bce-with-logits"]))

    # Labels that do not fit the loss.
    reg_path = os.path.join(args.workdir, "mse.onnx")
    results.append(expect_error(args, "mse_int_labels", reg_path, feats, y_cls, ["--loss", "mse"],
                                ["'labels'", "mse", "int64[3]", "float32[N, 3]"]))
    tok_path = os.path.join(args.workdir, "token_ce.onnx")
    results.append(expect_error(args, "token_ce_flat_labels", tok_path, ids, y_tok.reshape(-1), [],
                                ["'labels'", "cross-entropy", "int64[15]", "int64[N, 5]"]))

    # export --loss mse: a training graph onnx.checker accepts, the loss nodes in it.
    out = os.path.join(args.workdir, "mse_training.onnx")
    run_or_raise(args.onnx_train, ["export", reg_path, "--loss", "mse", "-o", out])
    m = onnx.load(out)
    onnx.checker.check_model(m, full_check=False)
    ops = {n.op_type for n in m.graph.node}
    ok = {"Sub", "Mul", "ReduceMean"} <= ops and any(i.name == "labels" and i.type.tensor_type.elem_type ==
                                                     onnx.TensorProto.FLOAT for i in m.graph.input)
    print(f"  export --loss mse: onnx.checker accepts it, float labels, Sub/Mul/ReduceMean loss nodes "
          f"{'ok' if ok else 'FAILED'}")
    results.append(ok)

    failed = results.count(False)
    print(f"loss_parity_test: {len(results) - failed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
