#!/usr/bin/env python3
"""PyTorch autograd parity of `onnx-train grad` on recurrent classifiers (LSTM, GRU, RNN).

Each case is a small classifier around torch.nn.LSTM / GRU / RNN (1 or 2 layers, uni- or
bidirectional, batch_first or not, with or without a learned initial state h0 (and c0)
expanded over the batch, padded batches packed with pack_padded_sequence), whose logits read every output of the recurrent layer: the last
step of Y, the last layer's Y_h (and Y_c). It is exported with torch.onnx.export in
training mode at opsets 13 and 17 (torch lays the gates out for ONNX with Slice, Concat
and Unsqueeze on the weights, picks the last step with Gather and joins directions with
Transpose and Reshape), and `onnx-train grad` computes the mean cross-entropy loss and
every parameter gradient. PyTorch autograd computes the same in float64 (the oracle) and
in float32; each of our float32 gradients must lie within max(1e-4, 3x PyTorch float32's
own distance from float64), relative by norm per tensor. Prints the worst figures.

Run by CTest (target torch_rnn_parity); by hand:
    /usr/bin/python3 tests/parity/torch_rnn_parity.py --onnx-train build/tools/onnx-train --workdir /tmp/rp
"""
import copy
import os
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # the shared helpers
from ot_cli import run_grad, test_args, test_parser  # noqa: E402
from grad_compare import compare_gradients, run_cases  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

FEATURES, HIDDEN, CLASSES, SEQ = 5, 7, 4, 6


class RecurrentClassifier(torch.nn.Module):
    def __init__(self, kind, layers, bidirectional, batch_first, learned_h0, lengths=None):
        super().__init__()
        # lengths: a packed batch (pack_padded_sequence, unsorted), exported as sequence_lens.
        self.lengths = torch.tensor(lengths) if lengths else None
        self.kind, self.batch_first = kind, batch_first
        self.rnn = getattr(torch.nn, kind)(FEATURES, HIDDEN, num_layers=layers, bidirectional=bidirectional,
                                           batch_first=batch_first)
        dirs = 2 if bidirectional else 1
        states = dirs * layers
        self.h0 = torch.nn.Parameter(0.5 * torch.randn(states, 1, HIDDEN)) if learned_h0 else None
        self.c0 = torch.nn.Parameter(0.5 * torch.randn(states, 1, HIDDEN)) if learned_h0 and kind == "LSTM" else None
        width = HIDDEN * dirs + HIDDEN * (2 if kind == "LSTM" else 1)
        self.fc = torch.nn.Linear(width, CLASSES)

    def forward(self, x):
        batch = x.shape[0] if self.batch_first else x.shape[1]
        if self.lengths is not None:
            x = torch.nn.utils.rnn.pack_padded_sequence(x, self.lengths, batch_first=self.batch_first,
                                                        enforce_sorted=False)
        if self.h0 is not None:
            h = self.h0.expand(-1, batch, -1)
            state = (h, self.c0.expand(-1, batch, -1)) if self.kind == "LSTM" else h
            y, final = self.rnn(x, state)
        else:
            y, final = self.rnn(x)
        if self.lengths is not None:
            y, _ = torch.nn.utils.rnn.pad_packed_sequence(y, batch_first=self.batch_first, total_length=SEQ)
        last = y[:, -1] if self.batch_first else y[-1]
        feats = [last] + ([final[0][-1], final[1][-1]] if self.kind == "LSTM" else [final[-1]])
        return self.fc(torch.cat(feats, dim=1))


def export(module, x, path, opset):
    axis = 0 if module.batch_first else 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(copy.deepcopy(module), torch.from_numpy(x), path, input_names=["input"],
                          output_names=["logits"], dynamic_axes={"input": {axis: "batch"}, "logits": {0: "batch"}},
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False, opset_version=opset)


def torch_grads(module, x, y, dtype):
    m = copy.deepcopy(module).to(dtype)
    m.train()
    m.zero_grad()
    loss = F.cross_entropy(m(torch.from_numpy(x).to(dtype)), torch.from_numpy(y))
    loss.backward()
    return float(loss), {n: p.grad.double().numpy() for n, p in m.named_parameters()}


def check(args, case, seed):
    kind, layers, bidirectional, batch_first, learned_h0, batch, opset = case[:7]
    lengths = case[7] if len(case) > 7 else None
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    module = RecurrentClassifier(kind, layers, bidirectional, batch_first, learned_h0, lengths)
    tag = (f"{kind}_l{layers}{'_bi' if bidirectional else ''}{'_bf' if batch_first else ''}"
           f"{'_h0' if learned_h0 else ''}{'_packed' if lengths else ''}_b{batch}_opset{opset}")
    shape = (batch, SEQ, FEATURES) if batch_first else (SEQ, batch, FEATURES)
    x = rng.standard_normal(shape).astype(np.float32)
    y = rng.integers(0, CLASSES, size=batch).astype(np.int64)
    path = os.path.join(args.workdir, tag + ".onnx")
    export(module, x, path, opset)
    ref_loss, ref = torch_grads(module, x, y, torch.float64)
    _, ref32 = torch_grads(module, x, y, torch.float32)
    ours = run_grad(args.onnx_train, path, x, y, args.workdir, tag)
    failures, loss_err, worst, worst_name, worst_t32 = compare_gradients(ours, ref_loss, ref, ref32, 1e-5)
    print(f"  {tag:<32} loss rel err {loss_err:.1e}  {len(ref)} grads: worst by norm {worst:.2e} ({worst_name}), "
          f"torch float32 worst {worst_t32:.2e}  {'ok' if not failures else 'FAILED'}", flush=True)
    for f in failures[:8]:
        print("    " + f)
    return not failures


# (kind, layers, bidirectional, batch_first, learned h0, batch, opset[, packed lengths])
CASES = [
    ("LSTM", 1, False, False, False, 3, 13), ("LSTM", 1, False, False, False, 3, 17),
    ("LSTM", 2, True, True, True, 4, 13), ("LSTM", 2, True, True, True, 4, 17),
    ("LSTM", 1, True, False, True, 1, 17), ("LSTM", 2, False, True, False, 2, 13),
    ("GRU", 1, False, True, False, 3, 13), ("GRU", 1, False, True, False, 3, 17),
    ("GRU", 2, True, False, True, 4, 13), ("GRU", 2, True, False, True, 4, 17),
    ("GRU", 1, True, True, True, 1, 13),
    ("RNN", 1, False, False, True, 3, 13), ("RNN", 2, True, True, False, 4, 17),
    ("RNN", 2, True, False, True, 2, 13),
    ("LSTM", 1, True, True, True, 4, 14, [6, 4, 5, 2]), ("GRU", 2, True, False, False, 3, 17, [3, 6, 1]),
    ("RNN", 1, False, True, True, 3, 13, [2, 6, 6]),
]


def main():
    p = test_parser(__doc__)
    args = test_args(p)
    torch.set_num_threads(2)
    return run_cases("torch_rnn_parity", [(f"{case}", lambda case=case, i=i: check(args, case, seed=200 + i))
                                          for i, case in enumerate(CASES)])


if __name__ == "__main__":
    sys.exit(main())
