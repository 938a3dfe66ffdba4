"""What the Python tests share for driving onnx-train: tensor files (binary ONNX TensorProto,
the format of `grad`, `infer` and ONNX's own test data), `onnx-train grad` on one batch, a
command that must succeed (or fail), and the epoch records of a --metrics file."""
import argparse
import json
import os
import subprocess
import sys

import onnx
import onnx.numpy_helper


def test_args(doc):
    """The arguments CTest gives every Python test (--onnx-train, --workdir; the folder made)."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--onnx-train", required=True)
    p.add_argument("--workdir", required=True)
    args = p.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    return args


def write_tensor(array, name, path):
    """array as a TensorProto file named `name`."""
    with open(path, "wb") as f:
        f.write(onnx.numpy_helper.from_array(array, name=name).SerializeToString())


def read_tensor(path):
    """(name, array) of a TensorProto file."""
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t.name, onnx.numpy_helper.to_array(t)


def read_dir(folder):
    """{name: array} of every TensorProto file in a folder (what grad and infer write)."""
    return dict(read_tensor(os.path.join(folder, f)) for f in os.listdir(folder))


def last_error_line(proc):
    text = proc.stderr.strip() or proc.stdout.strip() or "exit %d" % proc.returncode
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return (lines[-1] if lines else text)[:600]


def run_grad(binary, model_path, x, y, workdir, tag, extra=()):
    """`onnx-train grad` of one batch: x and y are arrays (written as input and labels) or
    TensorProto files. Returns {initializer name or 'loss': array}; raises RuntimeError with
    the tool's last error line."""
    if not isinstance(x, str):
        path = os.path.join(workdir, tag + "_x.pb")
        write_tensor(x, "input", path)
        x = path
    if not isinstance(y, str):
        path = os.path.join(workdir, tag + "_y.pb")
        write_tensor(y, "labels", path)
        y = path
    out = os.path.join(workdir, tag + "_grads")
    proc = subprocess.run([binary, "grad", model_path, "--input", "input=" + x, "--input", "labels=" + y, "-o", out,
                           *extra], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(last_error_line(proc))
    return read_dir(out)


def run(tool, argv, expect_ok=True, timeout=600):
    """Runs onnx-train; exits the test with the output when it fails (or, with expect_ok
    False, when it succeeds). Returns stdout + stderr."""
    p = subprocess.run([tool] + argv, capture_output=True, text=True, timeout=timeout)
    out = p.stdout + p.stderr
    if expect_ok and p.returncode != 0:
        sys.exit("FAIL: onnx-train %s exited %d:\n%s" % (" ".join(argv), p.returncode, out))
    if not expect_ok and p.returncode == 0:
        sys.exit("FAIL: onnx-train %s should have failed:\n%s" % (" ".join(argv), out))
    return out


def epochs(metrics):
    """The epoch records of a --metrics JSON-lines file."""
    with open(metrics) as f:
        return [r for r in map(json.loads, f) if r.get("type") == "epoch"]
