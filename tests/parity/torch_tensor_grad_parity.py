#!/usr/bin/env python3
"""PyTorch autograd parity of the tensor-family gradient rules on torch-exported modules.

Small modules that route trainable values through indexing, shape and data-movement ops
(embedding with repeated token ids, slicing with steps and negative indices, chunk/split,
torch.where, repeat/expand, tril/triu, cumsum, topk, gather/scatter, pixel_shuffle and
pixel_unshuffle, F.interpolate nearest/bilinear/bicubic, F.pad reflect/replicate, flip, roll,
an indexed assignment, GridSample in every mode (forward, and dX and dGrid), ShuffleNetV2's channel shuffle and a
ViT's class-token plumbing, these two with a dynamic batch axis so that torch exports their
sizes as int64 Shape/Gather/Concat chains) are exported by torch.onnx.export
in training mode at two opsets each, and `onnx-train grad` computes the mean cross-entropy
loss and every parameter gradient. PyTorch autograd computes the same in float64 (the
oracle) and float32; each of our float32 gradients must lie within max(1e-4, 3x PyTorch
float32's own distance from float64), relative by norm per tensor with a floor of 1e-3 on
the denominator, and the loss within 1e-4. `onnx-train export` of each must pass the ONNX
checker with full shape inference.

Run by CTest (target torch_tensor_grad_parity); by hand:
    /usr/bin/python3 tests/parity/torch_tensor_grad_parity.py --onnx-train build/tools/onnx-train --workdir /tmp/tgp
"""
import copy
import os
import sys
import time
import warnings

try:
    import numpy as np
    import onnx
    import onnx.numpy_helper
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError as e:  # a dependency is missing: fail with what to do
    sys.exit(f"torch_tensor_grad_parity: {e}; install python3-torch and python3-onnx (scripts/install-deps.sh)")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # the shared helpers
from grad_compare import compare_gradients, export_failures  # noqa: E402
from ot_cli import run_grad, test_args, test_parser  # noqa: E402

BATCH, CLASSES = 4, 5


class Embedding(nn.Module):
    """Token ids (int64, with repeats) -> embedding rows -> mean over time -> logits."""
    input_kind = ("tokens", (BATCH, 7), 11)

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(11, 6)
        self.fc = nn.Linear(6, CLASSES)

    def forward(self, ids):
        return self.fc(self.emb(ids).mean(dim=1))


class Image(nn.Module):
    """Base for modules on a float [B, 4, 6, 6] input: a 1x1 conv, then `body`, then a head."""
    input_kind = ("image", (BATCH, 4, 6, 6), None)

    def __init__(self, features):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 1)
        self.fc = nn.Linear(features, CLASSES)

    def forward(self, x):
        return self.fc(torch.flatten(self.body(self.conv(x)), 1))


class Indexing(Image):
    def __init__(self):
        super().__init__(4 * 5 * 3 + 4 * 6 + 3 * 6 * 6)
        self.register_buffer("rows", torch.tensor([0, 3, 3, 1]))

    def body(self, h):
        a = h[:, :, 1:, ::2]                                   # Slice with a step
        b = h[:, :, -1, :]                                     # Gather of a negative index
        c = torch.index_select(h, 1, self.rows)[:, 1:]         # Gather with a repeated index
        return torch.cat([a.flatten(1), b.flatten(1), c.flatten(1)], 1)


class ChunkSplit(Image):
    def __init__(self):
        super().__init__(2 * 6 * 6 + 4 * 4 * 6)

    def body(self, h):
        p, q = torch.chunk(h, 2, dim=1)
        r, s, t = torch.split(h, [1, 4, 1], dim=2)   # t unused
        return torch.cat([(p * q).flatten(1), (s + r).flatten(1)], 1)


class WhereRepeat(Image):
    def __init__(self):
        super().__init__(4 * 12 * 6 + 4 * 6 * 6)
        self.other = nn.Parameter(torch.randn(1, 4, 1, 6))

    def body(self, h):
        w = torch.where(h > 0.1, h, self.other * 2)            # broadcast other
        return torch.cat([h.repeat(1, 1, 2, 1).flatten(1), w.flatten(1)], 1)


class TrilCumsum(Image):
    def __init__(self):
        super().__init__(4 * 6 * 6 * 3)

    def body(self, h):
        return torch.cat([torch.tril(h, -1).flatten(1), torch.triu(h, 2).flatten(1),
                          torch.cumsum(h, dim=3).flatten(1)], 1)


class TopKGather(Image):
    def __init__(self):
        super().__init__(4 * 6 * 3 + 4 * 6 * 6)
        self.register_buffer("idx", torch.tensor([[[[5, 0, 5, 2, 1, 1]]]]).expand(BATCH, 4, 6, 6).contiguous())
        self.upd = nn.Parameter(torch.randn(BATCH, 4, 2, 6))

    def body(self, h):
        v, _ = torch.topk(h, 3, dim=3)
        g = torch.gather(h, 3, self.idx)                       # GatherElements, repeated indices
        s = torch.scatter(g, 2, self.idx[:, :, :2, :] % 6, self.upd)  # ScatterElements
        return torch.cat([v.flatten(1), s.flatten(1)], 1)


class PixelShuffle(Image):
    def __init__(self):
        super().__init__(1 * 12 * 12 + 16 * 3 * 3)

    def body(self, h):
        return torch.cat([F.pixel_shuffle(h, 2).flatten(1), F.pixel_unshuffle(h, 2).flatten(1)], 1)


class Interpolate(Image):
    def __init__(self):
        super().__init__(4 * 12 * 12 * 3 + 4 * 9 * 9)

    def body(self, h):
        return torch.cat([F.interpolate(h, scale_factor=2, mode="nearest").flatten(1),
                          F.interpolate(h, size=(12, 12), mode="bilinear", align_corners=False).flatten(1),
                          F.interpolate(h, size=(12, 12), mode="bilinear", align_corners=True).flatten(1),
                          F.interpolate(h, size=(9, 9), mode="bicubic", align_corners=False).flatten(1)], 1)


class PadFlipRollPut(Image):
    """F.pad reflect/replicate (Pad reflect/edge), flip (negative-step Slice), roll (Slice +
    Concat) and an indexed assignment of a parameter row (ScatterND)."""

    def __init__(self):
        super().__init__(4 * 7 * 9 * 2 + 4 * 6 * 6 * 3)
        self.row = nn.Parameter(torch.randn(BATCH, 4, 6))

    def body(self, h):
        a = F.pad(h, (1, 2, 0, 1), mode="reflect")
        b = F.pad(h, (2, 1, 1, 0), mode="replicate")
        c = torch.flip(h, dims=[3])
        d = torch.roll(h, shifts=2, dims=2)
        e = h.clone()
        e[:, :, 1] = self.row * 2
        return torch.cat([a.flatten(1), b.flatten(1), c.flatten(1), d.flatten(1), e.flatten(1)], 1)


class ChannelShuffle(Image):
    """ShuffleNetV2's channel split and shuffle: with a dynamic batch axis torch exports
    the sizes as Shape -> Gather -> Unsqueeze -> Concat -> Reshape chains."""
    dynamic = True

    def __init__(self):
        super().__init__(4 * 6 * 6)

    def body(self, h):
        a, b = h.chunk(2, dim=1)
        h = torch.cat([a, torch.relu(b)], 1)
        n, c, hh, ww = h.size()
        return h.view(n, 2, c // 2, hh, ww).transpose(1, 2).contiguous().view(n, -1, hh, ww)


class TokensWithClass(Image):
    """A ViT's token plumbing: patches flattened to tokens, a class token expanded to the
    (dynamic) batch and prepended, a position embedding added, the class token read out."""
    dynamic = True

    def __init__(self):
        super().__init__(4 + 4)
        self.cls = nn.Parameter(torch.randn(1, 1, 4))
        self.pos = nn.Parameter(torch.randn(1, 37, 4))

    def body(self, h):
        n = h.shape[0]
        t = h.reshape(n, h.shape[1], -1).permute(0, 2, 1)
        t = torch.cat([self.cls.expand(n, -1, -1), t], dim=1) + self.pos
        return torch.cat([t[:, 0], t[:, 1:].mean(1)], 1)


class GridSampleAllModes(nn.Module):
    """GridSample (opset 16) on the input in every mode x padding_mode x align_corners, on a
    fixed grid reaching outside [-1, 1]; the trained layers after it see the sampled values,
    so the loss and their gradients check the forward kernel."""
    input_kind = ("image", (BATCH, 4, 6, 6), None)

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(5)
        # A plain attribute, not a buffer: the trace inlines it as a Constant node, so it is
        # not an initializer that onnx-train would train.
        self.grid = torch.rand(BATCH, 5, 7, 2, generator=g) * 2.6 - 1.3
        self.combos = [(m, p, a) for m in ("bilinear", "nearest", "bicubic")
                       for p in ("zeros", "border", "reflection") for a in (False, True)]
        self.conv = nn.Conv2d(4 * len(self.combos), 3, 1)
        self.fc = nn.Linear(3 * 5 * 7, CLASSES)

    def to(self, dtype):  # the grid follows the module's type (torch_grads runs in float64)
        self.grid = self.grid.to(dtype)
        return super().to(dtype)

    def forward(self, x):
        s = [F.grid_sample(x, self.grid, mode=m, padding_mode=p, align_corners=a) for m, p, a in self.combos]
        return self.fc(torch.flatten(self.conv(torch.cat(s, 1)), 1))


class GridSampleTrainGrid(Image):
    """GridSample's gradient: a trained grid (dGrid) samples the conv's output (dX) in
    every mode x padding_mode x align_corners."""

    def __init__(self):
        combos = [(m, p, a) for m in ("bilinear", "nearest", "bicubic")
                  for p in ("zeros", "border", "reflection") for a in (False, True)]
        super().__init__(len(combos) * 4 * 5 * 7)
        self.combos = combos
        self.grid = nn.Parameter(torch.rand(BATCH, 5, 7, 2) * 2.6 - 1.3)

    def body(self, h):
        return torch.cat([F.grid_sample(h, self.grid, mode=m, padding_mode=p, align_corners=a).flatten(1)
                          for m, p, a in self.combos], 1)


# (module, opsets): two opsets each; Trilu needs opset 14.
CASES = [(Embedding, (13, 17)), (Indexing, (13, 17)), (ChunkSplit, (13, 17)), (WhereRepeat, (13, 17)),
         (TrilCumsum, (14, 17)), (TopKGather, (13, 17)), (PixelShuffle, (13, 17)), (Interpolate, (13, 17)),
         (PadFlipRollPut, (13, 17)), (ChannelShuffle, (11, 13)), (TokensWithClass, (13, 17)),
         (GridSampleAllModes, (16, 17)), (GridSampleTrainGrid, (16, 17))]


def make_input(kind, rng):
    name, shape, vocab = kind
    if name == "tokens":
        return rng.integers(0, vocab, size=shape).astype(np.int64)
    return rng.standard_normal(shape).astype(np.float32)


def torch_grads(module, x, y, dtype):
    m = copy.deepcopy(module).to(dtype)
    m.train()
    m.zero_grad()
    inp = torch.from_numpy(x)
    if inp.is_floating_point():
        inp = inp.to(dtype)
    loss = F.cross_entropy(m(inp), torch.from_numpy(y))
    loss.backward()
    return float(loss), {n: p.grad.double().numpy() for n, p in m.named_parameters()}


def check(args, cls, opset, seed):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    module = cls()
    x = make_input(cls.input_kind, rng)
    y = rng.integers(0, CLASSES, size=BATCH).astype(np.int64)
    tag = f"{cls.__name__}_opset{opset}"
    path = os.path.join(args.workdir, tag + ".onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dynamic = {"input": {0: "batch"}, "logits": {0: "batch"}} if getattr(cls, "dynamic", False) else None
        torch.onnx.export(copy.deepcopy(module), torch.from_numpy(x[:2]) if dynamic else torch.from_numpy(x), path,
                          input_names=["input"], output_names=["logits"], dynamic_axes=dynamic,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False, opset_version=opset)
    ref_loss, ref = torch_grads(module, x, y, torch.float64)
    _, ref32 = torch_grads(module, x, y, torch.float32)
    ours = run_grad(args.onnx_train, path, x, y, args.workdir, tag)
    failures, loss_err, worst, worst_name, worst_t32 = compare_gradients(ours, ref_loss, ref, ref32, 1e-4)
    # The training graph, saved by `onnx-train export`, passes the ONNX checker with shape inference.
    failures += export_failures(args.onnx_train, path, os.path.join(args.workdir, tag + "_training.onnx"))
    print(f"  {tag:<22} loss rel err {loss_err:.1e}  {len(ref)} grads: worst by norm {worst:.2e} ({worst_name}), "
          f"torch float32 worst {worst_t32:.2e}  {'ok' if not failures else 'FAILED'}", flush=True)
    for f in failures[:6]:
        print("    " + f)
    return not failures


def main():
    p = test_parser(__doc__)
    p.add_argument("--only", default="", help="run the cases whose module name contains this")
    args = test_args(p)
    torch.set_num_threads(2)
    start = time.time()
    passed = failed = 0
    for i, (cls, opsets) in enumerate(CASES):
        if args.only and args.only not in cls.__name__:
            continue
        for opset in opsets:
            try:
                ok = check(args, cls, opset, seed=200 + i)
            except RuntimeError as e:
                print(f"  {cls.__name__} opset {opset}: onnx-train failed: {e}")
                ok = False
            passed += ok
            failed += not ok
    print(f"torch_tensor_grad_parity: {passed} passed, {failed} failed in {time.time() - start:.1f} s")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
