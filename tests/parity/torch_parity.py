#!/usr/bin/env python3
"""PyTorch parity of `onnx-train infer` on the reference models.

Defines the recipe's ResNet34 (torchvision resnet34, 3x3 stride-2 stem without bias, no
max-pool) and SimpleNN (Flatten + Linear) in PyTorch, exports them with torch.onnx.export in
TrainingMode.TRAINING and TrainingMode.EVAL with a dynamic batch axis, runs
`onnx-train infer` on an input batch and compares the logits with the module's own output
in train() (batch statistics) or eval() (running statistics) mode. Then checks that
`onnx-train make-model` writes the same node structure as torch's training export, that its
initializers are exactly the module's state_dict, and that infer on it matches PyTorch with
those weights loaded.

Run by CTest (target torch_parity); by hand:
    python3 tests/parity/torch_parity.py --onnx-train build/tools/onnx-train --workdir /tmp/parity
Needs Debian's python3-torch, python3-torchvision and python3-onnx (scripts/install-deps.sh).
"""
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # the shared helpers
from ot_cli import call, read_tensor, test_args, test_parser, write_tensor  # noqa: E402
from torch_models import build, export, torch_forward  # noqa: E402

try:
    import numpy as np
    import onnx
    import onnx.numpy_helper
    import torch
    import torchvision
except ImportError as e:  # a dependency is missing: fail with what to do
    sys.exit(f"torch_parity: {e}; install python3-torch, python3-torchvision and python3-onnx "
             f"(scripts/install-deps.sh) and run this with that Python ({sys.executable} lacks them)")

RTOL = 1e-4


def run_infer(binary, model_path, x, workdir, tag):
    in_path = os.path.join(workdir, tag + "_input.pb")
    out_dir = os.path.join(workdir, tag + "_out")
    write_tensor(x, "input", in_path)
    proc = call([binary, "infer", model_path, "--input", "input=" + in_path, "-o", out_dir])
    if proc.returncode != 0:
        raise RuntimeError(summarize_error(proc.stderr.strip() or "exit %d" % proc.returncode))
    return read_tensor(os.path.join(out_dir, "logits.pb"))[1]


def summarize_error(stderr):
    """The last line of onnx-train's error; for missing kernels just the op names."""
    last = stderr.splitlines()[-1]
    missing = sorted(set(re.findall(r"(\w+) \(opset \d+\): \d+ node", last)))
    return "kernels missing: " + ", ".join(missing) if missing else last[:300]


def compare(ours, ref):
    """Max error relative to the output's scale, and whether every element is within
    |ours - ref| <= RTOL * (|ref| + max|ref|)."""
    if ours.shape != ref.shape:
        return float("inf"), False, f"shape {ours.shape} != torch {ref.shape}"
    scale = float(np.max(np.abs(ref))) or 1.0
    diff = np.abs(ours.astype(np.float64) - ref.astype(np.float64))
    ok = bool(np.all(diff <= RTOL * (np.abs(ref) + scale)))
    return float(np.max(diff)) / scale, ok, ""


def node_signature(model):
    return [(n.name, n.op_type, list(n.input), list(n.output),
             sorted((a.name, str(onnx.helper.get_attribute_value(a))) for a in n.attribute)) for n in model.graph.node]


class Report:
    def __init__(self):
        self.rows = []

    def add(self, case, err, ok, note=""):
        self.rows.append((case, err, ok, note))
        status = "ok" if ok else "FAIL"
        err_text = "" if err is None else f"max rel err {err:.2e}"
        print(f"  {case:<46} {err_text:<21} {status} {note}", flush=True)

    def failures(self):
        return [r for r in self.rows if not r[2]]


def check_export_parity(args, report, model, shape, classes, batch, training, rng):
    c, h, w = shape
    module = build(model, c, h, w, classes)
    mode = "train" if training else "eval"
    tag = f"{model}_{c}x{h}x{w}_{mode}"
    path = os.path.join(args.workdir, tag + ".onnx")
    export(module, shape, path, training)
    x = rng.standard_normal((batch,) + shape).astype(np.float32)
    case = f"torch export {tag} batch {batch}"
    try:
        ours = run_infer(args.onnx_train, path, x, args.workdir, tag)
    except RuntimeError as e:
        report.add(case, None, False, str(e))
        return
    err, ok, note = compare(ours, torch_forward(module, x, training))
    report.add(case, err, ok, note)


def check_make_model(args, report, model, shape, classes, batch, rng):
    """make-model's file: torch's node structure, state_dict initializers, torch's output."""
    c, h, w = shape
    tag = f"make_model_{model}_{c}x{h}x{w}"
    path = os.path.join(args.workdir, tag + ".onnx")
    subprocess.run([args.onnx_train, "make-model", model, "-o", path, "--input", f"{c}x{h}x{w}",
                    "--classes", str(classes), "--seed", "5"], check=True, capture_output=True)
    ours_model = onnx.load(path)
    onnx.checker.check_model(ours_model, full_check=True)

    module = build(model, c, h, w, classes)
    torch_path = os.path.join(args.workdir, tag + "_torch_train.onnx")
    export(module, shape, torch_path, training=True)
    same_nodes = node_signature(ours_model) == node_signature(onnx.load(torch_path))
    report.add(f"make-model {model} {c}x{h}x{w}: node structure", None, same_nodes,
               "" if same_nodes else "differs from torch's training export")

    inits = {t.name: onnx.numpy_helper.to_array(t) for t in ours_model.graph.initializer}
    state = {k: v for k, v in module.state_dict().items() if not k.endswith("num_batches_tracked")}
    same_names = set(inits) == set(state) and all(inits[k].shape == tuple(v.shape) for k, v in state.items())
    report.add(f"make-model {model} {c}x{h}x{w}: state_dict names", None, same_names,
               "" if same_names else f"only ours: {sorted(set(inits) - set(state))[:3]} "
                                     f"only torch: {sorted(set(state) - set(inits))[:3]}")
    if not same_names:
        return
    module.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in inits.items()}, strict=False)
    x = rng.standard_normal((batch,) + shape).astype(np.float32)
    case = f"make-model {model} {c}x{h}x{w} batch {batch} vs torch"
    try:
        ours = run_infer(args.onnx_train, path, x, args.workdir, tag)
    except RuntimeError as e:
        report.add(case, None, False, str(e))
        return
    err, ok, note = compare(ours, torch_forward(module, x, training=True))
    report.add(case, err, ok, note)


def main():
    p = test_parser(__doc__)
    args = test_args(p)
    torch.manual_seed(0)
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    rng = np.random.default_rng(0)
    start = time.time()
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, onnx {onnx.__version__}; "
          f"export opset {torch.onnx._constants.ONNX_DEFAULT_OPSET}; rtol {RTOL}", flush=True)
    report = Report()
    for training in (True, False):
        check_export_parity(args, report, "resnet34", (3, 32, 32), 10, 4, training, rng)
        check_export_parity(args, report, "simplenn", (1, 28, 28), 10, 4, training, rng)
    check_export_parity(args, report, "resnet34", (1, 28, 28), 10, 3, True, rng)
    check_export_parity(args, report, "simplenn", (3, 32, 32), 10, 3, False, rng)
    check_make_model(args, report, "resnet34", (3, 32, 32), 10, 4, rng)
    check_make_model(args, report, "simplenn", (1, 28, 28), 10, 4, rng)
    failed = report.failures()
    print(f"torch_parity: {len(report.rows) - len(failed)} passed, {len(failed)} failed "
          f"in {time.time() - start:.1f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
