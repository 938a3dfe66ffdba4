"""What the Python tests share for driving onnx-train: their arguments, running the program,
tensor files (binary ONNX TensorProto, the format of `grad`, `infer` and ONNX's own test data),
`onnx-train grad` on one batch, the weights of a model or checkpoint, IDX data files, and the
records of a --metrics file.

A test imports it by path, from any family folder:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
    import ot_cli
"""
import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

import onnx
import onnx.numpy_helper


def test_parser(doc):
    """A parser of the arguments CTest gives every Python test (--onnx-train, --workdir), for a
    test that adds its own."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--onnx-train", required=True)
    p.add_argument("--workdir", required=True)
    return p


def test_args(doc_or_parser, fresh=False):
    """The parsed arguments (a module docstring, or a parser from test_parser): --onnx-train made
    absolute, --workdir made (emptied first when fresh)."""
    p = test_parser(doc_or_parser) if isinstance(doc_or_parser, str) else doc_or_parser
    args = p.parse_args()
    args.onnx_train = os.path.abspath(args.onnx_train)
    if fresh:
        shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir, exist_ok=True)
    return args


def call(cmd, timeout=600, env=None, cwd=None):
    """Runs a command (onnx-train's path first) and returns the CompletedProcess, text captured."""
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)


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
    """{name: array} of every TensorProto file in a folder (what grad and infer write); a
    tensor without a name goes by its file's."""
    tensors = {}
    for f in os.listdir(folder):
        name, array = read_tensor(os.path.join(folder, f))
        tensors[name or os.path.splitext(f)[0]] = array
    return tensors


def initializers(model_path):
    """{name: array} of a model's initializers (a checkpoint's weights)."""
    return {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(model_path).graph.initializer}


def checkpoint_weights(folder, epoch=1):
    """initializers of the checkpoint epoch_000E.onnx in a --checkpoint-dir."""
    return initializers(os.path.join(folder, "epoch_%04d.onnx" % epoch))


def read_idx(path):
    """The array of an IDX file (gzipped or not), as Fashion-MNIST's files hold them."""
    b = gzip.open(path).read() if path.endswith(".gz") else open(path, "rb").read()
    rank = b[3]
    dims = [int.from_bytes(b[4 + 4 * i:8 + 4 * i], "big") for i in range(rank)]
    return np.frombuffer(b, dtype=np.uint8, offset=4 + 4 * rank).reshape(dims)


def write_idx(path, array):
    """A uint8 array as an IDX file, gzipped when the name ends in .gz."""
    header = bytes([0, 0, 8, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    with (gzip.open if path.endswith(".gz") else open)(path, "wb") as f:
        f.write(header + np.ascontiguousarray(array, dtype=np.uint8).tobytes())


def last_error_line(proc):
    text = proc.stderr.strip() or proc.stdout.strip() or "exit %d" % proc.returncode
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return (lines[-1] if lines else text)[:600]


def run_or_raise(binary, argv, timeout=None):
    """Runs onnx-train; raises RuntimeError with its last error line when it fails. Returns the
    CompletedProcess."""
    proc = call([binary, *argv], timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(last_error_line(proc))
    return proc


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
    run_or_raise(binary, ["grad", model_path, "--input", "input=" + x, "--input", "labels=" + y, "-o", out, *extra])
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


def run_timed(cmd, timeout=400):
    """Runs a command with idle OpenMP threads passive (they yield the CPU to other processes);
    prints it and the ends of its output when it fails. Returns (CompletedProcess, seconds)."""
    t = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE"))
    if r.returncode != 0:
        print(f"command failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r, time.time() - t


def records(metrics, kind):
    """The records of one type ("epoch", "step", ...) of a --metrics JSON-lines file."""
    with open(metrics) as f:
        return [r for r in map(json.loads, f) if r.get("type") == kind]


def epochs(metrics):
    """The epoch records of a --metrics JSON-lines file."""
    return records(metrics, "epoch")


def step_losses(metrics):
    """The loss of every step of a --metrics file."""
    return [r["loss"] for r in records(metrics, "step")]
