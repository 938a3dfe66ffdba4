#!/usr/bin/env python3
"""Fine-tuning flags through the command line: --freeze / --train-only glob patterns,
--freeze-bn-stats, --param-group, each against what it promises.

The model: a small conv net exported by torch in training mode, c1 = Conv+BN+ReLU,
c2 = Conv+BN+ReLU, global average pool, fc (initializers c1.0.weight, c1.1.running_mean,
..., fc.weight).
- Frozen backbone: 2 epochs on synthetic data with --freeze 'c1.*' leave c1's weights and
  BN scale/bias bitwise as exported (its running statistics move, as PyTorch's with
  requires_grad=False in train mode); with --freeze-bn-stats every running statistic stays
  bitwise too while c2's BN scale still trains; --train-only 'fc.*' moves only fc.
- Pruned backward: `export --freeze 'c1.*'` has no gradient node reading a c1 initializer
  and c2's ConvGrad computes no input gradient (nothing trainable lies upstream); with
  --train-only 'fc.*' there is no ConvGrad at all; counts against the unfrozen export.
- --param-group: the exported SGD graph run by `infer` for one step against the gradient of
  `grad` on the same batch: lr=2x moves its group by 2 lr G, the rest by lr G; wd=Y adds
  lr Y W; an absolute lr=X with --lr is X / lr times the base; lr=0x leaves its group
  bitwise fixed; a later group overrides an earlier one. Training with lr=0x keeps c2
  bitwise fixed over an epoch while the others move.
- Bad patterns and group specs: one line naming the pattern (and a few initializer
  names), non-zero exit.
Run by CTest (target finetune_test); by hand:
    /usr/bin/python3 tests/cli/finetune_test.py --onnx-train build/tools/onnx-train --workdir /tmp/ft
"""
import os
import shutil
import subprocess
import sys
import warnings

import numpy as np
import onnx
from onnx import numpy_helper as nh
import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # the shared helpers
from ot_cli import initializers, read_dir, test_args, test_parser  # noqa: E402

FAILED = []


def check(label, ok, detail=""):
    print(("ok    " if ok else "FAIL  ") + label + ("" if ok or not detail else ": " + str(detail)[:500]))
    if not ok:
        FAILED.append(label)
    return ok


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.c2 = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        return self.fc(self.c2(self.c1(x)).mean(dim=(2, 3)))


def export_net(path):
    torch.manual_seed(0)
    net = Net()
    with torch.no_grad():  # statistics away from 0/1, so that a change shows
        for bn in (net.c1[1], net.c2[1]):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, torch.zeros(4, 3, 16, 16), path, input_names=["input"], output_names=["logits"],
                          dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}},
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)


class Runner:
    def __init__(self, binary, workdir):
        self.binary, self.workdir = binary, workdir

    def __call__(self, *argv):
        return subprocess.run([self.binary] + list(argv), capture_output=True, text=True, cwd=self.workdir,
                              timeout=300)

    def train(self, model, tag, *flags):
        ckpt = os.path.join(self.workdir, tag)
        shutil.rmtree(ckpt, ignore_errors=True)
        r = self(model, "--data", "synthetic:64", "--epochs", "2", "--batch", "16", "--lr", "0.05", "--momentum",
                 "0.9", "--threads", "2", "--quiet", "--checkpoint-dir", ckpt, *flags)
        if r.returncode != 0:
            return None, r
        return initializers(os.path.join(ckpt, "epoch_0002.onnx")), r


def same(a, b):
    return a.shape == b.shape and a.tobytes() == b.tobytes()


def frozen_backbone(run, model, start):
    names = sorted(start)
    c1_params = ["c1.0.weight", "c1.0.bias", "c1.1.weight", "c1.1.bias"]
    stats = [n for n in names if n.endswith("running_mean") or n.endswith("running_var")]
    check("the export has the expected initializers", all(n in start for n in c1_params + ["fc.weight"]) and
          len(stats) == 4, names)

    end, r = run.train(model, "freeze", "--freeze", "c1.*")
    if check("--freeze 'c1.*': trains", end is not None, r.stderr[-400:]):
        check("--freeze 'c1.*': c1's weights and BN scale/bias bitwise unchanged after 2 epochs",
              all(same(start[n], end[n]) for n in c1_params), [n for n in c1_params if not same(start[n], end[n])])
        check("--freeze 'c1.*': c2 and fc moved",
              all(not same(start[n], end[n]) for n in ["c2.0.weight", "c2.1.weight", "fc.weight", "fc.bias"]))
        check("--freeze 'c1.*' alone: c1's running statistics still update (PyTorch's train mode)",
              not same(start["c1.1.running_mean"], end["c1.1.running_mean"]))

    end, r = run.train(model, "freeze_bn", "--freeze", "c1.*", "--freeze-bn-stats")
    if check("--freeze 'c1.*' --freeze-bn-stats: trains", end is not None, r.stderr[-400:]):
        check("--freeze-bn-stats: every running statistic bitwise unchanged after 2 epochs",
              all(same(start[n], end[n]) for n in stats), [n for n in stats if not same(start[n], end[n])])
        check("--freeze-bn-stats: c1 bitwise unchanged", all(same(start[n], end[n]) for n in c1_params))
        check("--freeze-bn-stats: c2's BN scale and bias still train",
              not same(start["c2.1.weight"], end["c2.1.weight"]) and not same(start["c2.1.bias"], end["c2.1.bias"]))
        # The model's other initializers (frozen BN's epsilon included) stay as they were.
        moved = sorted(n for n in start if not same(start[n], end[n]))
        eps = {n: float(v) for n, v in end.items() if n.endswith("frozen_epsilon")}
        check("--freeze-bn-stats: the frozen BatchNorms' epsilons stay 1e-5 (not trained)",
              len(eps) == 2 and all(v == float(np.float32(1e-5)) for v in eps.values()), eps)
        check("--freeze-bn-stats: only c2's and fc's parameters moved",
              moved == sorted(["c2.0.weight", "c2.0.bias", "c2.1.weight", "c2.1.bias", "fc.weight", "fc.bias"]),
              moved)

    end, r = run.train(model, "train_only", "--train-only", "fc.*")
    if check("--train-only 'fc.*': trains", end is not None, r.stderr[-400:]):
        moved = sorted(n for n in start if not same(start[n], end[n]) and "running" not in n)
        check("--train-only 'fc.*': only fc's parameters moved", moved == ["fc.bias", "fc.weight"], moved)

    end, r = run.train(model, "group_zero", "--param-group", "c2.*:lr=0x", "--max-steps", "2")
    if check("--param-group 'c2.*:lr=0x': trains", end is not None, r.stderr[-400:]):
        c2 = ["c2.0.weight", "c2.0.bias", "c2.1.weight", "c2.1.bias"]
        check("--param-group 'c2.*:lr=0x': c2 bitwise unchanged", all(same(start[n], end[n]) for n in c2),
              [n for n in c2 if not same(start[n], end[n])])
        check("--param-group 'c2.*:lr=0x': c1 and fc moved",
              all(not same(start[n], end[n]) for n in ["c1.0.weight", "fc.weight"]))


def gradient_nodes(path):
    """The backward's nodes of our domain (BatchNormTraining is the forward's training form)."""
    g = onnx.load(path).graph
    return [n for n in g.node if n.domain == "org.onnxtrain" and n.op_type != "BatchNormTraining"]


def pruned_backward(run, model, start):
    full, frozen, head = (os.path.join(run.workdir, f"export_{t}.onnx") for t in ("full", "frozen", "head"))
    r_full = run("export", model, "-o", full, "--no-optimizer")
    r_frozen = run("export", model, "-o", frozen, "--no-optimizer", "--freeze", "c1.*")
    r_head = run("export", model, "-o", head, "--no-optimizer", "--train-only", "fc.*")
    if not check("export with --freeze / --train-only: exit 0",
                 r_full.returncode == 0 and r_frozen.returncode == 0 and r_head.returncode == 0,
                 (r_full.stderr + r_frozen.stderr + r_head.stderr)[-400:]):
        return
    c1 = {n for n in start if n.startswith("c1.")}
    g_full, g_frozen, g_head = gradient_nodes(full), gradient_nodes(frozen), gradient_nodes(head)
    conv_full = [n for n in g_full if n.op_type == "ConvGrad"]
    conv_frozen = [n for n in g_frozen if n.op_type == "ConvGrad"]
    check("unfrozen export: 2 ConvGrad nodes, the first computes no input gradient (the image)",
          len(conv_full) == 2 and sum(1 for n in conv_full if n.output[0] == "") == 1,
          [(n.input[2], list(n.output)) for n in conv_full])
    readers = [n.name or n.op_type for n in g_frozen if c1 & set(n.input)]
    check("--freeze 'c1.*': no gradient node reads a c1 initializer", not readers, readers)
    check("--freeze 'c1.*': one ConvGrad (c2's), computing no input gradient into the frozen c1",
          len(conv_frozen) == 1 and conv_frozen[0].input[2] == "c2.0.weight" and conv_frozen[0].output[0] == "",
          [(n.input[2], list(n.output)) for n in conv_frozen])
    outputs = [o.name for o in onnx.load(frozen).graph.output]
    check("--freeze 'c1.*': no c1 gradient output", not any(o.startswith("c1.") and "grad" in o for o in outputs),
          outputs)
    check(f"--freeze 'c1.*': fewer gradient nodes ({len(g_frozen)} against {len(g_full)})",
          0 < len(g_frozen) < len(g_full))
    check("--train-only 'fc.*': no ConvGrad and no BatchNorm gradient",
          not any("Conv" in n.op_type or "BatchNorm" in n.op_type for n in g_head), [n.op_type for n in g_head])
    print(f"      gradient nodes: full {len(g_full)}, --freeze 'c1.*' {len(g_frozen)}, --train-only 'fc.*' "
          f"{len(g_head)}")


def write_feeds(folder, feeds):
    os.makedirs(folder, exist_ok=True)
    args = []
    for k, v in feeds.items():
        f = os.path.join(folder, k + ".pb")
        with open(f, "wb") as fh:
            fh.write(nh.from_array(v, k).SerializeToString())
        args += ["--input", f"{k}={f}"]
    return args


def param_groups(run, model, start):
    w = run.workdir
    rng = np.random.default_rng(5)
    x = rng.standard_normal((8, 3, 16, 16)).astype(np.float32)
    y = rng.integers(0, 10, 8).astype(np.int64)
    feeds = write_feeds(os.path.join(w, "pg_in"), {"input": x, "labels": y})
    r = run("grad", model, *feeds, "-o", os.path.join(w, "pg_grad"), "--no-fusion")
    if not check("grad: exit 0", r.returncode == 0, r.stderr[-400:]):
        return
    grads = read_dir(os.path.join(w, "pg_grad"))
    lr = 0.1
    step_feeds = write_feeds(os.path.join(w, "pg_step_in"), {"input": x, "labels": y, "lr": np.array(lr, np.float32),
                                                             "step": np.array(1, np.int64)})
    # Not the convolutions' biases: BatchNorm follows them, so their gradient is rounding noise.
    params = ["c1.0.weight", "c1.1.weight", "c2.0.weight", "c2.1.bias", "fc.weight", "fc.bias"]

    def one_step(tag, *flags):
        path = os.path.join(w, f"pg_{tag}.onnx")
        r = run("export", model, "-o", path, "--optimizer", "sgd", "--momentum", "0", *flags)
        if r.returncode != 0:
            return None, r.stderr
        out = os.path.join(w, f"pg_{tag}_out")
        r = run("infer", path, *step_feeds, "-o", out)
        if r.returncode != 0:
            return None, r.stderr
        return read_dir(out), ""

    # Expected: new = W - lr * factor * (G + wd * W).
    cases = [
        ("2x", ["--param-group", "fc.*:lr=2x"], {"fc.weight": (2, 0), "fc.bias": (2, 0)}),
        ("wd", ["--param-group", "fc.*,c2.0.weight:wd=0.5"], {"fc.weight": (1, 0.5), "fc.bias": (1, 0.5),
                                                                "c2.0.weight": (1, 0.5)}),
        ("absolute", ["--lr", "0.1", "--param-group", "c[12].1.*:lr=0.03"],
         {"c1.1.weight": (0.3, 0), "c2.1.bias": (0.3, 0)}),
        ("override", ["--param-group", "c2.*,fc.*:lr=0x", "--param-group", "fc.*:lr=3x,wd=0.1"],
         {"c2.0.weight": (0, 0), "c2.1.bias": (0, 0), "fc.weight": (3, 0.1), "fc.bias": (3, 0.1)}),
    ]
    for tag, flags, groups in cases:
        out, err = one_step(tag, *flags)
        label = "export " + " ".join(flags)
        if not check(f"{label}: exported and stepped", out is not None, err[-400:]):
            continue
        bad = []
        for p in params:
            factor, wd = groups.get(p, (1, 0))
            new = out[p + "/new"]
            if factor == 0:
                if not same(new, start[p]):
                    bad.append(f"{p}: not bitwise unchanged at lr=0x")
                continue
            expected_step = lr * factor * (grads[p].astype(np.float64) + wd * start[p])
            step = start[p].astype(np.float64) - new
            # new = W - step rounded to float32: a few ulps of W, beyond that 1e-5 of the step.
            excess = np.abs(step - expected_step) - 4 * np.spacing(np.abs(start[p]))
            err = float(excess.max() / (np.abs(expected_step).max() + 1e-30))
            if err > 1e-5:
                bad.append(f"{p}: step off by {err:.2e} of its size (factor {factor}, wd {wd})")
        check(f"{label}: each parameter's first SGD step is lr x factor x (G + wd W)", not bad, bad)


def bad_patterns(run, model):
    cases = [
        (["--freeze", "c3.*"], ["c3.*", "c1.0.weight"]),
        (["--freeze", "c1.*,nope"], ["'nope'"]),
        (["--train-only", "head.*"], ["--train-only", "head.*"]),
        (["--param-group", "head.*:lr=2x"], ["head.*"]),
        (["--param-group", "fc.*"], ["fc.*", "lr="]),
        (["--param-group", "fc.*:lr=fast"], ["lr=fast"]),
        (["--param-group", "fc.*:momentum=0.5"], ["momentum=0.5"]),
        (["--param-group", "c1.1.running_mean:lr=2x"], ["do not train"]),
        (["--freeze", "fc.*", "--param-group", "fc.*:lr=2x"], ["do not train"]),
    ]
    for flags, needles in cases:
        r = run(model, "--data", "synthetic:32", "--epochs", "1", "--batch", "16", "--threads", "2", "--quiet",
                "--no-checkpoints", *flags)
        last = (r.stderr.strip().splitlines() or [""])[-1]
        check(f"train {' '.join(flags)}: one line naming it, non-zero exit",
              r.returncode != 0 and all(n in last for n in needles), f"exit {r.returncode}: {last}")
    r = run("export", model, "-o", os.path.join(run.workdir, "bad.onnx"), "--param-group", "fc.*:lr=0.01")
    last = (r.stderr.strip().splitlines() or [""])[-1]
    check("export with an absolute group lr and no --lr: refused naming --lr", r.returncode != 0 and "--lr" in last,
          last)
    r = run("grad", model, "-o", os.path.join(run.workdir, "bad_grad"), "--train-only", "fc.*,zz?")
    last = (r.stderr.strip().splitlines() or [""])[-1]
    check("grad --train-only with a pattern matching nothing: refused", r.returncode != 0 and "zz?" in last, last)


def main():
    ap = test_parser(__doc__)
    args = test_args(ap)
    model = os.path.join(args.workdir, "net.onnx")
    export_net(model)
    start = initializers(model)
    run = Runner(os.path.abspath(args.onnx_train), args.workdir)
    frozen_backbone(run, model, start)
    pruned_backward(run, model, start)
    param_groups(run, model, start)
    bad_patterns(run, model)
    if FAILED:
        print(f"{len(FAILED)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
