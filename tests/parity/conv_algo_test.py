#!/usr/bin/env python3
"""--conv-algo auto|direct|winograd|taps|winograd2|winograd4 of the CPU convolutions (issue 16).

A model of two 3x3 stride-1 convolutions (16 -> 32 -> 32 channels, 12x12, with and
without bias), global average pooling and a Linear layer, exported from PyTorch, gets one
`onnx-train grad` per algorithm with --plan-dump; a model of convolutions on 2x2 and 1x1
maps (SmallMaps) checks auto's matrix products for those the same way, and one of odd maps, kernels
and pads (TapShapes) the products over data taps (runtime/cpu/conv/conv_taps.h) under --conv-algo taps,
and one of 3x3 pad-1 convolutions (WinogradShapes) our Winograd F(2x2, 3x3) (conv_winograd.h)
under --conv-algo winograd2, and F(4x4, 3x3) in its backward primitives under winograd4.
auto's timed choices are kept beside the checkpoints: a run interrupted after its first epoch
and resumed (two-convolution model on synthetic data) ends bitwise equal to the uninterrupted
run, and a damaged choices file is refused with its name.
The dump must name the algorithm asked for in each primitive (forward, backward-data,
backward-weights; auto shows its timings, and may pick taps or winograd2, and winograd4 for a backward primitive, where they were timed faster),
and each algorithm's loss and gradients must lie within max(1e-4, 3x PyTorch float32's
own distance) of PyTorch float64 (tests/common/grad_compare.py). On a CPU without oneDNN's
Winograd primitive (it needs AVX-512), winograd and auto must show direct in every
primitive with the reason, and the Winograd-specific checks are skipped with a message. An unknown --conv-algo fails
with one line naming the flag.

Run by CTest (target conv_algo_test); by hand:
    /usr/bin/python3 tests/parity/conv_algo_test.py --onnx-train build/tools/onnx-train --workdir /tmp/ca
"""
import copy
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # the shared helpers
from torch_models import export  # noqa: E402  (exits if torch is missing)
from ot_cli import read_dir, test_args, test_parser, write_tensor  # noqa: E402
from grad_compare import compare_gradients  # noqa: E402

import re  # noqa: E402
import shutil  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnx.numpy_helper  # noqa: E402
import torch  # noqa: E402


class TwoConvs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(16, 32, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(32, 32, 3, padding=1, bias=False)
        self.fc = torch.nn.Linear(32, 10)

    def forward(self, x):
        y = self.conv2(self.conv1(x))
        return self.fc(y.mean(dim=(2, 3)))


class SmallMaps(torch.nn.Module):
    """Convolutions whose maps fit in their window (2x2 and 1x1 maps under 3x3 kernels),
    which auto runs as Winograd with 3 points a side on 2x2 maps (stride 1, pad 1), as
    products over the data taps on others without dilation, and else as one dense matrix
    product: channel-blocked in and out (conv3, 2x2), blocked in and plain out with
    stride 2 (conv4: 20 channels are no block; taps), plain in and out on a 1x1 map with
    dilation 2 (conv5: taps take no dilation; dense), all with bias; conv1 and conv2 (4x4
    maps) are chosen by rule, timed or stay oneDNN's."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(16, 32, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(32, 32, 3, stride=2, padding=1)
        self.conv3 = torch.nn.Conv2d(32, 32, 3, padding=1)
        self.conv4 = torch.nn.Conv2d(32, 20, 3, stride=2, padding=1)
        self.conv5 = torch.nn.Conv2d(20, 24, 3, padding=2, dilation=2)
        self.fc = torch.nn.Linear(24, 10)

    def forward(self, x):
        y = self.conv5(self.conv4(self.conv3(self.conv2(self.conv1(x)))))
        return self.fc(y.mean(dim=(2, 3)))


class TapShapes(torch.nn.Module):
    """Stride-1 convolutions of every kind TapConv takes: 3x3 with pad 1 and bias, 5x5 with
    pad 2 into 20 channels (no channel block), 1x3 with pad (0, 1), 3x3 with no padding (a
    smaller map), 3x3 with pad 2 (a larger one, corners seeing one tap), 1x1 with bias."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(16, 24, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(24, 20, 5, padding=2, bias=False)
        self.conv3 = torch.nn.Conv2d(20, 16, (1, 3), padding=(0, 1))
        self.conv4 = torch.nn.Conv2d(16, 16, 3, padding=0, bias=False)
        self.conv5 = torch.nn.Conv2d(16, 32, 3, padding=2, bias=False)
        self.conv6 = torch.nn.Conv2d(32, 32, 1)
        self.fc = torch.nn.Linear(32, 10)

    def forward(self, x):
        y = self.conv3(self.conv2(self.conv1(x)))
        y = self.conv6(torch.tanh(self.conv5(self.conv4(y))))
        return self.fc(y.mean(dim=(2, 3)))


class WinogradShapes(torch.nn.Module):
    """3x3 stride-1 pad-1 convolutions (winograd2's): odd maps (5x7: half tiles), 20
    channels (no channel block), with and without bias, a 2x3 map after pooling; conv5
    (stride 2) is not one and stays direct."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(16, 24, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(24, 20, 3, padding=1, bias=False)
        self.conv3 = torch.nn.Conv2d(20, 16, 3, padding=1)
        self.conv4 = torch.nn.Conv2d(16, 32, 3, padding=1, bias=False)
        self.conv5 = torch.nn.Conv2d(32, 32, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(32, 10)

    def forward(self, x):
        y = self.conv3(torch.tanh(self.conv2(self.conv1(x))))
        y = self.conv5(self.conv4(torch.nn.functional.avg_pool2d(y, 2)))
        return self.fc(y.mean(dim=(2, 3)))


def check_forced(args, failures, algo, make_module, name, want):
    """`onnx-train grad --conv-algo algo` of make_module()'s model: the plan dump's entries must
    be `want` ((conv, kind, algorithm) triples) and the gradients within the rule."""
    model_path, xp, yp, ref_loss, ref, ref32 = prepare_case(args, make_module, name, (16, 5, 7), 23)
    out = os.path.join(args.workdir, algo)
    proc = subprocess.run([args.onnx_train, "grad", model_path, "--input", "input=" + xp, "--input", "labels=" + yp,
                           "-o", out, "--plan-dump", "--threads", "2", "--conv-algo", algo],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        failures.append(f"{algo}: grad failed: {proc.stderr.strip()[-300:]}")
        return
    dump = [line for line in proc.stdout.splitlines() if line.startswith("plan ") and "Conv" in line]
    entries = [(re.search(r"/(conv\d)/", line).group(1), k, alg) for line in dump
               for k, alg, _, _ in (m.groups() for m in ENTRY.finditer(line.split(": ", 1)[1]))]
    if sorted(entries) != sorted(want):
        failures.append(f"{algo}: the plan dump does not show the expected algorithms {sorted(want)}:\n"
                        + "\n".join(dump))
    f, loss_err, worst, worst_name, worst_t32 = compare_gradients(read_dir(out), ref_loss, ref, ref32, 1e-5)
    print(f"  {algo:<9} loss rel err {loss_err:.1e}, worst gradient {worst:.2e} ({worst_name}) from float64, "
          f"torch float32 {worst_t32:.2e}  {'ok' if not f else 'FAILED'}")
    failures += [f"{algo}: {line}" for line in f]


def check_choices_kept(args, failures, model_path, amp=False):
    """auto's timed choices are kept in the training state (conv_algorithms.rank0) and a
    resumed run loads them: a two-epoch run, interrupted after its first epoch (only its
    epoch-1 checkpoint and state in a new directory) and resumed, ends in the same bytes as the
    run itself, and leaves no side file beside the checkpoints. With `amp`, the same under
    --amp bf16 (ours then include F(2x2, 3x3) with bfloat16 products, winograd2-bf16)."""
    flags = ["--amp", "bf16"] if amp else []
    def train(ckpt, epochs, *extra):
        return subprocess.run([args.onnx_train, model_path, "--data", "synthetic:96", "--batch", "16", "--epochs",
                               str(epochs), "--seed", "2", "--threads", "2", "--quiet", "--save-every", "1",
                               "--checkpoint-dir",
                               os.path.join(args.workdir, ckpt), *flags, *extra], capture_output=True, text=True)
    tag = "_amp" if amp else ""
    a, b = os.path.join(args.workdir, "keep_a" + tag), os.path.join(args.workdir, "keep_b" + tag)
    for d in (a, b):
        shutil.rmtree(d, ignore_errors=True)
    whole = train("keep_a" + tag, 2)
    state = open(os.path.join(a, "epoch_0001.state"), "rb").read() if whole.returncode == 0 else b""
    if whole.returncode != 0 or b"conv_algorithms.rank0" not in state:
        failures.append(f"choices kept: the run failed or its state holds no conv_algorithms.rank0: "
                        f"{whole.stderr.strip()[-300:]}")
        return
    if any(f.startswith("conv_algorithms") for f in os.listdir(a)):
        failures.append(f"choices kept: a side file beside the checkpoints: {os.listdir(a)}")
    os.makedirs(b)
    for f in ("epoch_0001.onnx", "epoch_0001.state"):
        shutil.copy(os.path.join(a, f), b)
    resumed = train("keep_b" + tag, 2, "--resume", "latest")
    same = resumed.returncode == 0 and open(os.path.join(a, "epoch_0002.onnx"), "rb").read() == \
        open(os.path.join(b, "epoch_0002.onnx"), "rb").read()
    if not same:
        failures.append(f"choices kept: the resumed run does not end in the uninterrupted run's bytes "
                        f"(exit {resumed.returncode}: {resumed.stderr.strip()[-200:]})")
    print(f"  choices kept in the state{' (--amp bf16)' if amp else ''}, resumed run bitwise equal: {same}  "
          f"{'ok' if same else 'FAILED'}")


def prepare_case(args, make_module, name, shape, seed):
    """Exports make_module() (seeded) and writes a batch of 8: the model and batch paths, and
    PyTorch's float64 loss and gradients with its float32 gradients."""
    torch.manual_seed(seed)
    module = make_module()
    model_path = os.path.join(args.workdir, name + ".onnx")
    export(module, shape, model_path, training=True, opset=14)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((8,) + shape).astype(np.float32)
    y = rng.integers(0, 10, size=8).astype(np.int64)
    xp, yp = os.path.join(args.workdir, name + "_x.pb"), os.path.join(args.workdir, name + "_y.pb")
    write_tensor(x, "input", xp)
    write_tensor(y, "labels", yp)
    ref_loss, ref = torch_grads(module, x, y, torch.float64)
    _, ref32 = torch_grads(module, x, y, torch.float32)
    return model_path, xp, yp, ref_loss, ref, ref32


def check_small_maps(args, failures):
    model_path, xp, yp, ref_loss, ref, ref32 = prepare_case(args, SmallMaps, "small_maps", (16, 4, 4), 17)
    out = os.path.join(args.workdir, "small_auto")
    proc = subprocess.run([args.onnx_train, "grad", model_path, "--input", "input=" + xp, "--input", "labels=" + yp,
                           "-o", out, "--plan-dump", "--threads", "2"], capture_output=True, text=True)
    if proc.returncode != 0:
        failures.append(f"small maps: grad failed: {proc.stderr.strip()[-300:]}")
        return
    dump = [line for line in proc.stdout.splitlines() if line.startswith("plan ") and "Conv" in line]
    dense = sorted(re.search(r"/(conv\d)/", line).group(1) for line in dump if "=dense" in line)
    within = sorted(re.search(r"/(conv\d)/", line).group(1) for line in dump if "taps(maps within the window)" in line)
    two_by_two = sorted(re.search(r"/(conv\d)/", line).group(1) for line in dump
                        if "winograd2(maps within the window; 2x2 maps" in line)
    if dense != ["conv5", "conv5"] or within != ["conv4", "conv4"] or two_by_two != ["conv3", "conv3"]:
        failures.append("small maps: auto must run conv3 (forward and gradient) as Winograd on 2x2 maps, conv4 (stride "
                        "2) as products over data taps, conv5 (dilated) as dense products, and no other:\n"
                        + "\n".join(dump))
    f, loss_err, worst, worst_name, worst_t32 = compare_gradients(read_dir(out), ref_loss, ref, ref32, 1e-5)
    print(f"  small maps loss rel err {loss_err:.1e}, worst gradient {worst:.2e} ({worst_name}) from "
          f"float64, torch float32 {worst_t32:.2e}  {'ok' if not f else 'FAILED'}")
    failures += [f"small maps: {line}" for line in f]


# One primitive's entry in a plan-dump line: kind=algorithm(reason or timing)[implementation],
# e.g. fwd=direct(no Winograd primitive)[jit:avx2] or bwd_data=winograd(timed: ...)[jit_wino_4x3:avx512_core].
ENTRY = re.compile(r"(fwd|bwd_data|bwd_weights)=(\w+)(?:\(([^)]*)\))?\[([^\]]*)\]")


def torch_grads(module, x, y, dtype):
    m = copy.deepcopy(module).to(dtype)
    m.load_state_dict({k: v.to(dtype) for k, v in module.state_dict().items()})
    loss = torch.nn.functional.cross_entropy(m(torch.from_numpy(x).to(dtype)), torch.from_numpy(y))
    loss.backward()
    return float(loss), {n: p.grad.double().numpy() for n, p in m.named_parameters()}


def main():
    p = test_parser(__doc__)
    args = test_args(p)
    model_path, xp, yp, ref_loss, ref, ref32 = prepare_case(args, TwoConvs, "two_convs", (16, 12, 12), 16)

    failures = []
    winograd_here = True  # until the winograd run's dump says otherwise
    for algo in ["direct", "winograd", "auto"]:
        out = os.path.join(args.workdir, algo)
        proc = subprocess.run([args.onnx_train, "grad", model_path, "--input", "input=" + xp, "--input",
                               "labels=" + yp, "-o", out, "--conv-algo", algo, "--plan-dump", "--threads", "2"],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            failures.append(f"{algo}: grad failed: {proc.stderr.strip()[-300:]}")
            continue
        dump = [line for line in proc.stdout.splitlines() if line.startswith("plan ")]
        convs = [line for line in dump if "(Conv)" in line]
        grads = [line for line in dump if "(ConvGrad)" in line]
        want = "winograd" if algo == "winograd" else "direct"
        # Each primitive's entry: kind=algorithm[oneDNN implementation], e.g.
        # fwd=winograd[jit_wino_4x3:avx512_core]; the implementation must agree.
        # entries: (kind, algorithm, reason or timing, implementation)
        # (no reason or timing: None, read as "")
        entries = [(k, alg, why or "", impl) for line in dump
                   for k, alg, why, impl in (m.groups() for m in ENTRY.finditer(line.split(": ", 1)[1]))]
        impl_ok = all(("wino" in impl) == (alg == "winograd") for _, alg, _, impl in entries)
        if not impl_ok:
            failures.append(f"{algo}: an algorithm in the plan dump is not the primitive's implementation:\n"
                            + "\n".join(dump))
        if algo == "winograd" and entries and all("no Winograd primitive" in why for _, _, why, _ in entries):
            # oneDNN's Winograd convolutions are AVX-512 only (jit_wino_4x3:avx512_core): on
            # another CPU every primitive falls back to direct and says so.
            winograd_here = False
            print(f"  {algo:<8} this CPU has no Winograd primitive (oneDNN's needs AVX-512): each primitive "
                  "falls back to direct and the dump says so; the Winograd checks are skipped here")
        if not winograd_here and algo != "direct":
            if not entries or not all((alg == "direct" and ("no Winograd primitive" in why
                                                             or "forward stays direct" in why))
                                      or (algo == "auto" and alg in ("taps", "winograd2", "winograd4")
                                          and ("timed: oneDNN" in why or "forward by rule" in why))
                                      for _, alg, why, _ in entries):
                failures.append(f"{algo}: without a Winograd primitive every entry must be direct and say why:\n"
                                + "\n".join(dump))
        elif algo == "auto":
            # A backward primitive is timed: oneDNN's direct against its Winograd, or oneDNN's
            # primitive against ours (taps, winograd2, winograd4) where ours applies; which
            # side wins depends on the machine's load, so either timing is accepted.
            if (not any(("timed: direct" in line and "winograd" in line) or "timed: oneDNN" in line
                        for line in grads)
                    or not all(re.search(r"fwd=(direct|taps\(forward by rule|winograd2\(forward by rule)", line)
                               for line in convs)
                    or any("winograd4" in line for line in convs)):
                failures.append("auto: the plan dump shows no timed backward choice or a forward not direct:\n"
                                + "\n".join(dump))
        elif (len(convs) != 2 or len(grads) != 2 or not all(f"fwd={want}" in line for line in convs)
              or not all(f"bwd_weights={want}" in line for line in grads)
              or sum(f"bwd_data={want}" in line for line in grads) != 1):
            failures.append(f"{algo}: the plan dump does not show {want} in every primitive:\n" + "\n".join(dump))
        ours = read_dir(out)
        f, loss_err, worst, worst_name, worst_t32 = compare_gradients(ours, ref_loss, ref, ref32, 1e-5)
        print(f"  {algo:<8} loss rel err {loss_err:.1e}, worst gradient {worst:.2e} ({worst_name}) from float64, "
              f"torch float32 {worst_t32:.2e}  {'ok' if not f else 'FAILED'}")
        failures += [f"{algo}: {line}" for line in f]

    check_small_maps(args, failures)
    check_choices_kept(args, failures, model_path)
    if "avx512_bf16" in open("/proc/cpuinfo").read() or "amx_bf16" in open("/proc/cpuinfo").read():
        check_choices_kept(args, failures, model_path, amp=True)
    else:
        print("  choices kept under --amp bf16: skipped (this CPU has no bfloat16 instructions)")
    convs = [f"conv{i}" for i in range(1, 7)]
    check_forced(args, failures, "taps", TapShapes, "tap_shapes",
                 [(c, "fwd", "taps") for c in convs] + [(c, "bwd_weights", "taps") for c in convs]
                 + [(c, "bwd_data", "taps") for c in convs[1:]])
    convs = [f"conv{i}" for i in range(1, 5)]
    check_forced(args, failures, "winograd2", WinogradShapes, "winograd_shapes",
                 [(c, "fwd", "winograd2") for c in convs] + [(c, "bwd_weights", "winograd2") for c in convs]
                 + [(c, "bwd_data", "winograd2") for c in convs[1:]]
                 + [("conv5", "fwd", "direct"), ("conv5", "bwd_data", "direct"), ("conv5", "bwd_weights", "direct")])
    # winograd4: F(4x4, 3x3) in the backward primitives, F(2x2, 3x3) forward.
    check_forced(args, failures, "winograd4", WinogradShapes, "winograd_shapes",
                 [(c, "fwd", "winograd2") for c in convs] + [(c, "bwd_weights", "winograd4") for c in convs]
                 + [(c, "bwd_data", "winograd4") for c in convs[1:]]
                 + [("conv5", "fwd", "direct"), ("conv5", "bwd_data", "direct"), ("conv5", "bwd_weights", "direct")])
    proc = subprocess.run([args.onnx_train, "grad", model_path, "--input", "input=" + xp, "--input", "labels=" + yp,
                           "-o", os.path.join(args.workdir, "bad"), "--conv-algo", "fastest"],
                          capture_output=True, text=True)
    err = proc.stderr.strip().splitlines()
    if proc.returncode == 0 or len(err) != 1 or "--conv-algo" not in err[0]:
        failures.append(f"--conv-algo fastest: exit {proc.returncode}, stderr {proc.stderr.strip()[:300]!r}")
    for f in failures:
        print("  " + f)
    print("conv_algo_test: " + ("ok" if not failures else f"{len(failures)} failures"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
