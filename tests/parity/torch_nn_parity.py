#!/usr/bin/env python3
"""PyTorch float64 parity of the nn-family gradients on torch-exported models.

Small classifiers built around one op family each: nn.InstanceNorm{1,2,3}d(affine=True),
nn.GroupNorm (exported before opset 18 as Reshape -> InstanceNormalization(ones, zeros)
-> Reshape -> Mul -> Add), nn.ConvTranspose2d (stride, padding, output_padding, groups,
dilation, no bias), nn.ConvTranspose1d and 3d, torch.einsum forms ('bhid,bhjd->bhij', 'bij,bjk->bik', 'i,j->ij',
'ij->ji', 'ij->i', an ellipsis form) and torch.matmul with 1-D and broadcast batched
operands ([T] x [B,T,E], [B,H,T,D] x [D,E], [B,T,E] x [E]), each exported by
torch.onnx.export in training mode at opsets 13 and 17. `onnx-train grad` gives the mean
cross-entropy loss and every parameter gradient; PyTorch autograd gives the same in float64
(the oracle) and float32. Each float32 gradient of ours must be within max(1e-4, 3x
PyTorch float32's own distance) of float64, relative by norm per tensor (denominator floored
at 1e-3), as in torch_grad_parity.py, whose helpers this script reuses. `onnx-train
export` of each model must give a training graph that the ONNX checker accepts (full check,
with shape inference).

Run by CTest (target torch_nn_parity); by hand:
    /usr/bin/python3 tests/parity/torch_nn_parity.py --onnx-train build/tools/onnx-train --workdir /tmp/nnp
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # the shared helpers
from torch_models import export, torch_grads  # noqa: E402  (exits if torch is missing)
from ot_cli import run_grad, test_args, test_parser, write_tensor  # noqa: E402
from grad_compare import compare_gradients, export_failures, run_cases  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402


class InstanceNormNet(nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.norm = nn.InstanceNorm2d(4, affine=True)
        self.fc = nn.Linear(4 * 6 * 5, classes)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return self.fc(torch.flatten(torch.tanh(self.norm(self.conv(x))), 1))


class GroupNormNet(nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.norm = nn.GroupNorm(3, 6)
        self.fc = nn.Linear(6 * 6 * 5, classes)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return self.fc(torch.flatten(torch.tanh(self.norm(self.conv(x))), 1))


class ConvTransposeNet(nn.Module):
    def __init__(self, classes, **kw):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.up = nn.ConvTranspose2d(4, 6, 3, **kw)
        with torch.no_grad():
            out = self.up(self.conv(torch.zeros(1, 3, 6, 5)))
        self.fc = nn.Linear(out.numel(), classes)

    def forward(self, x):
        return self.fc(torch.flatten(torch.tanh(self.up(torch.tanh(self.conv(x)))), 1))


class NdNet(nn.Module):
    """Conv{1,3}d -> InstanceNorm or ConvTranspose of the same rank -> Linear."""

    def __init__(self, classes, dims, spatial, kind, **kw):
        super().__init__()
        conv = {1: nn.Conv1d, 3: nn.Conv3d}[dims]
        self.conv = conv(2, 4, 3, padding=1)
        if kind == "instancenorm":
            self.body = {1: nn.InstanceNorm1d, 3: nn.InstanceNorm3d}[dims](4, affine=True)
            with torch.no_grad():
                self.body.weight.uniform_(0.5, 1.5)
                self.body.bias.uniform_(-0.5, 0.5)
        else:
            self.body = {1: nn.ConvTranspose1d, 3: nn.ConvTranspose3d}[dims](4, 4, 3, **kw)
        with torch.no_grad():
            out = self.body(self.conv(torch.zeros((1, 2) + spatial)))
        self.fc = nn.Linear(out.numel(), classes)

    def forward(self, x):
        return self.fc(torch.flatten(torch.tanh(self.body(torch.tanh(self.conv(x)))), 1))


class EinsumNet(nn.Module):
    """x [N, 2, 3, 4] as [batch, heads, tokens, dim]."""

    def __init__(self, classes):
        super().__init__()
        self.s = nn.Parameter(torch.rand(2, 1, 4) + 0.5)
        self.w = nn.Parameter(torch.randn(4, 5) * 0.5)
        self.u = nn.Parameter(torch.randn(3))
        self.v = nn.Parameter(torch.randn(5))
        self.m = nn.Parameter(torch.randn(5, 5) * 0.5)
        self.fc = nn.Linear(3 * 5 + 3, classes)

    def forward(self, x):
        att = torch.einsum("bhid,bhjd->bhij", x, x * self.s).softmax(-1)
        mixed = torch.einsum("bhij,bhjd->bhid", att, x)
        proj = torch.einsum("...id,de->...ie", mixed, self.w) + torch.einsum("i,j->ij", self.u, self.v)
        flat = torch.einsum("bhie->bie", proj)                       # sum over heads
        flat = torch.einsum("bie,bef->bif", flat, torch.einsum("ij->ji", self.m).expand(x.shape[0], 5, 5))
        rows = torch.einsum("bij->bi", torch.tanh(flat))             # 'ij->i' per sample
        return self.fc(torch.cat([torch.flatten(flat, 1), rows], 1))


class MatMulNet(nn.Module):
    """x [N, 4, 6] as [batch, tokens T, features E]."""

    def __init__(self, classes):
        super().__init__()
        self.pool = nn.Parameter(torch.randn(4) * 0.5)        # [T]
        self.w = nn.Parameter(torch.randn(3, 5) * 0.5)        # [D, E'] on [B, H, T, D]
        self.u = nn.Parameter(torch.randn(6) * 0.5)           # [E]
        self.fc = nn.Linear(6 + 2 * 4 * 5 + 4, classes)

    def forward(self, x):
        a = torch.matmul(self.pool, x)                        # [T] x [B, T, E] -> [B, E]
        heads = x.reshape(x.shape[0], 4, 2, 3).transpose(1, 2)  # [B, H=2, T, D=3]
        b = torch.matmul(torch.tanh(heads), self.w)           # [B, H, T, D] x [D, E'] -> [B, H, T, E']
        c = torch.matmul(x, self.u)                           # [B, T, E] x [E] -> [B, T]
        return self.fc(torch.cat([a, torch.flatten(b, 1), torch.tanh(c)], 1))


def cases():
    return [
        ("instancenorm2d_affine", lambda k: InstanceNormNet(k), (3, 6, 5)),
        ("groupnorm_3_of_6", lambda k: GroupNormNet(k), (3, 6, 5)),
        ("convtranspose2d_s2_op1", lambda k: ConvTransposeNet(k, stride=2, output_padding=1), (3, 6, 5)),
        ("convtranspose2d_pad_s23_op12", lambda k: ConvTransposeNet(k, stride=(2, 3), padding=1,
                                                                    output_padding=(1, 2)), (3, 6, 5)),
        ("convtranspose2d_g2_dil2_nobias", lambda k: ConvTransposeNet(k, groups=2, dilation=2, bias=False), (3, 6, 5)),
        ("instancenorm1d_affine", lambda k: NdNet(k, 1, (7,), "instancenorm"), (2, 7)),
        ("instancenorm3d_affine", lambda k: NdNet(k, 3, (3, 4, 3), "instancenorm"), (2, 3, 4, 3)),
        ("convtranspose1d_s2_op1", lambda k: NdNet(k, 1, (7,), "convtranspose", stride=2, output_padding=1), (2, 7)),
        ("convtranspose3d_g2_s2_pad", lambda k: NdNet(k, 3, (3, 4, 3), "convtranspose", stride=(2, 1, 2), padding=1,
                                                      groups=2), (2, 3, 4, 3)),
        ("einsum_forms", lambda k: EinsumNet(k), (2, 3, 4)),
        ("matmul_1d_and_batched", lambda k: MatMulNet(k), (4, 6)),
    ]


def check(args, name, make, shape, opset, seed, classes=5, batch=3):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    module = make(classes)
    tag = f"{name}_opset{opset}"
    path = os.path.join(args.workdir, tag + ".onnx")
    export(module, shape, path, training=True, opset=opset)
    x = rng.standard_normal((batch,) + shape).astype(np.float32)
    y = rng.integers(0, classes, size=batch).astype(np.int64)
    ref_loss, ref = torch_grads(module, x, y, torch.float64)[:2]  # (no ReLU in these models)
    ref32 = torch_grads(module, x, y, torch.float32)[1]
    xp, yp = os.path.join(args.workdir, tag + "_x.pb"), os.path.join(args.workdir, tag + "_y.pb")
    write_tensor(x, "input", xp)
    write_tensor(y, "labels", yp)
    ours = run_grad(args.onnx_train, path, xp, yp, args.workdir, tag)
    failures, loss_err, worst, worst_name, worst_t32 = compare_gradients(ours, ref_loss, ref, ref32, 1e-4)
    failures += export_failures(args.onnx_train, path, os.path.join(args.workdir, tag + ".train.onnx"))
    print(f"  {tag:<40} loss rel err {loss_err:.1e}  {len(ref)} grads: worst {worst:.2e} ({worst_name}), "
          f"torch float32 worst {worst_t32:.2e}  {'ok' if not failures else 'FAILED'}", flush=True)
    for f in failures[:8]:
        print("    " + f)
    return not failures


def main():
    p = test_parser(__doc__)
    args = test_args(p)
    torch.set_num_threads(2)
    return run_cases("torch_nn_parity",
                     [(f"{name} opset {opset}",
                       lambda name=name, make=make, shape=shape, opset=opset, i=i: check(args, name, make, shape, opset,
                                                                                      seed=200 + i))
                      for i, (name, make, shape) in enumerate(cases()) for opset in (13, 17)])


if __name__ == "__main__":
    sys.exit(main())
