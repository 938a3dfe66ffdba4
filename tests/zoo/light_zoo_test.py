#!/usr/bin/env python3
"""The nine classic ONNX Model Zoo architectures of ONNX's "light" test models (AlexNet,
DenseNet-121, Inception v1 and v2, ResNet-50, ShuffleNet, SqueezeNet, VGG-19, ZFNet-512;
opset 9, IR 3) made trainable and run through `onnx-train check`, `infer` and `grad`.

ONNX ships these models with every float weight replaced by a ConstantOfShape node (see
the README beside them). Each such node whose shape input is a constant becomes an
initializer of that shape with seeded, PyTorch-default-like values: conv and Gemm weights
uniform in +-1/sqrt(fan_in), biases zero, BatchNormalization scale and variance one, its
bias and mean zero; the per-channel scale and shift that DenseNet and Inception v2 apply
after BatchNormalization (Unsqueeze, Mul, Add) one and zero. Then, per model:
  check: `onnx-train check` loads, checks and shape-infers it;
  infer: `onnx-train infer` on a random batch of 1 (the models' fixed batch) gives a finite
         output of the declared shape;
  grad:  `onnx-train grad` on a random batch of 2 with int64 labels gives a finite loss and
         a finite gradient file for every weight (the batch of 1 is rebound to 2).
  finetune: `onnx-train MODEL --data imagefolder:DIR --num-classes 5 --batch 2` trains one
         epoch on a 5-class image folder (small PNGs, resized to the model's 224x224), the
         1000-way classifier replaced; `onnx-train eval` runs the checkpoint, whose output
         has 5 classes.

A model listed in KNOWN (with the work it waits for) is run and reported but not counted;
one that passes is flagged XPASS so its entry can be removed. Any other model that fails a
step fails the test.

Run by CTest (target light_zoo_test); by hand:
    /usr/bin/python3 tests/zoo/light_zoo_test.py --onnx-train build/tools/onnx-train --workdir /tmp/light \
        [--models squeezenet,resnet50] [--keep]
"""
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # the shared helpers
from ot_cli import read_tensor, test_args, test_parser, write_tensor  # noqa: E402

LIGHT_DIR = "/var/cache/onnx-train/onnx-1.19.1/share/onnx-backend-test-data/light"
MODELS = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet",
          "vgg19", "zfnet512"]

# Models that wait for other work: name -> what. Filled from this file's own runs; an
# entry whose model passes is reported as XPASS.
KNOWN = {}


def consumers(graph):
    out = {}
    for node in graph.node:
        for i, name in enumerate(node.input):
            out.setdefault(name, []).append((node, i))
    return out


def role(name, uses, depth=0):
    """How a weight is used: ('weight', fan_in), ('zeros',), ('ones',) or ('other',)."""
    for node, i in uses.get(name, []):
        op = node.op_type
        if op == "Conv" and i == 1:
            return ("weight", None)
        if op == "Gemm" and i == 1:
            trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
            return ("gemm_weight", trans_b)
        if op in ("Conv", "Gemm") and i == 2:
            return ("zeros",)
        if op == "BatchNormalization":  # running mean and variance are state, not trained
            return {1: ("ones",), 2: ("zeros",), 3: ("state_zeros",), 4: ("state_ones",)}[i]
        if op in ("Unsqueeze", "Reshape", "Identity") and i == 0 and depth < 3:
            return role(node.output[0], uses, depth + 1)
        if op == "Mul":
            return ("ones",)
        if op in ("Add", "Sum"):
            return ("zeros",)
    return ("other",)


def make_trainable(path, out_path, seed):
    """Replaces each float ConstantOfShape of constant shape by a random initializer;
    returns the names of those that are trained (all but BatchNorm running statistics)."""
    model = onnx.load(path)
    graph = model.graph
    rng = np.random.default_rng(seed)
    inits = {t.name: t for t in graph.initializer}
    uses = consumers(graph)
    keep, new_inits, trainable = [], [], []
    for node in graph.node:
        value = next((a.t for a in node.attribute if a.name == "value"), None)
        is_float = value is None or value.data_type == TensorProto.FLOAT
        if node.op_type != "ConstantOfShape" or not is_float or node.input[0] not in inits:
            keep.append(node)
            continue
        shape = [int(d) for d in numpy_helper.to_array(inits[node.input[0]])]
        r = role(node.output[0], uses)
        if r[0] == "weight":
            fan_in = int(np.prod(shape[1:]))
            data = rng.uniform(-1, 1, shape) / np.sqrt(fan_in)
        elif r[0] == "gemm_weight":
            fan_in = shape[1] if r[1] else shape[0]
            data = rng.uniform(-1, 1, shape) / np.sqrt(fan_in)
        elif r[0] in ("ones", "state_ones"):
            data = np.ones(shape)
        elif r[0] in ("zeros", "state_zeros"):
            data = np.zeros(shape)
        else:
            data = rng.uniform(-0.1, 0.1, shape)
        new_inits.append(numpy_helper.from_array(data.astype(np.float32), node.output[0]))
        if not r[0].startswith("state"):
            trainable.append(node.output[0])
    del graph.node[:]
    graph.node.extend(keep)
    graph.initializer.extend(new_inits)
    # IR 3 wants every initializer among the graph inputs; drop the shape inputs no longer read.
    used = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
    for t in new_inits:
        graph.input.append(helper.make_tensor_value_info(t.name, TensorProto.FLOAT, list(t.dims)))
    dead = [t.name for t in graph.initializer if t.name not in used]
    for name in dead:
        idx = [i for i, t in enumerate(graph.initializer) if t.name == name]
        for i in reversed(idx):
            del graph.initializer[i]
    kept_inputs = [v for v in graph.input if v.name in used]
    del graph.input[:]
    graph.input.extend(kept_inputs)
    onnx.save(model, out_path)
    return trainable


def data_input(model_path):
    model = onnx.load(model_path, load_external_data=False)
    inits = {t.name for t in model.graph.initializer}
    real = [v for v in model.graph.input if v.name not in inits]
    assert len(real) == 1, [v.name for v in real]
    v = real[0]
    out_dims = [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
    return v.name, [d.dim_value for d in v.type.tensor_type.shape.dim], [o.name for o in model.graph.output], out_dims


def first_error(proc):
    text = (proc.stderr or "") + (proc.stdout or "")
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    for l in lines:
        if "error" in l.lower() or "not " in l.lower() or "fail" in l.lower():
            return l[:300]
    return (lines[-1] if lines else "exit status %d" % proc.returncode)[:300]


def run(cmd, timeout):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(cmd, 124, "", "timed out after %d s" % timeout)


def run_model(name, args, seed):
    """Returns (steps passed, first error or None)."""
    work = os.path.join(args.workdir, name)
    os.makedirs(work, exist_ok=True)
    model_path = os.path.join(work, name + ".onnx")
    trainable = make_trainable(os.path.join(LIGHT_DIR, "light_%s.onnx" % name), model_path, seed)
    if not trainable:
        return [], "no ConstantOfShape weight was replaced"
    steps = []
    try:
        proc = run([args.onnx_train, "check", model_path], 300)
        if proc.returncode != 0:
            return steps, "check: " + first_error(proc)
        steps.append("check")

        inp, dims, outputs, out_dims = data_input(model_path)
        rng = np.random.default_rng(seed + 1)
        x1 = rng.standard_normal([1] + dims[1:]).astype(np.float32)
        write_tensor(x1, "", os.path.join(work, "x1.pb"))
        out_dir = os.path.join(work, "infer")
        proc = run([args.onnx_train, "infer", model_path, "--input", "%s=%s" % (inp, os.path.join(work, "x1.pb")),
                    "-o", out_dir], 600)
        if proc.returncode != 0:
            return steps, "infer: " + first_error(proc)
        for o in outputs:
            path = os.path.join(out_dir, o.replace("/", "_") + ".pb")
            if not os.path.exists(path):
                path = os.path.join(out_dir, o + ".pb")
            if not os.path.exists(path):
                return steps, "infer: no file for output %s in %s" % (o, sorted(os.listdir(out_dir)))
            y = read_tensor(path)[1]
            if y.shape[0] != 1 or not np.all(np.isfinite(y)):
                return steps, "infer: output %s of shape %s is not a finite batch of 1" % (o, y.shape)
        steps.append("infer")

        x2 = rng.standard_normal([2] + dims[1:]).astype(np.float32)
        write_tensor(x2, "", os.path.join(work, "x2.pb"))
        # One class label per sample (SqueezeNet's and DenseNet's [N, 1000, 1, 1] scores too).
        label_shape = [2]
        write_tensor(rng.integers(0, out_dims[1], size=label_shape).astype(np.int64), "", os.path.join(work, "labels.pb"))
        grad_dir = os.path.join(work, "grad")
        proc = run([args.onnx_train, "grad", model_path, "--input", "%s=%s" % (inp, os.path.join(work, "x2.pb")),
                    "--input", "labels=" + os.path.join(work, "labels.pb"), "-o", grad_dir], 900)
        if proc.returncode != 0:
            return steps, "grad: " + first_error(proc)
        loss = read_tensor(os.path.join(grad_dir, "loss.pb"))[1]
        if not np.all(np.isfinite(loss)):
            return steps, "grad: loss %s is not finite" % loss
        names = set()
        for f in os.listdir(grad_dir):
            if not f.endswith(".pb") or f == "loss.pb":
                continue
            t = TensorProto()
            with open(os.path.join(grad_dir, f), "rb") as fh:
                t.ParseFromString(fh.read())
            if not np.all(np.isfinite(numpy_helper.to_array(t))):
                return steps, "grad: gradient %s is not finite" % t.name
            names.add(t.name)
        missing = [w for w in trainable if w not in names]
        if missing:
            return steps, "grad: no gradient for %d of %d weights, e.g. %s" % (len(missing), len(trainable), missing[0])
        steps.append("grad")

        ck = os.path.join(work, "checkpoints")
        proc = run([args.onnx_train, model_path, "--data", "imagefolder:" + args.images, "--num-classes", "5",
                    "--epochs", "1", "--batch", "2", "--lr", "0.001", "--checkpoint-dir", ck, "--threads", "2",
                    "--quiet", "--seed", str(seed)], 1200)
        if proc.returncode != 0:
            return steps, "finetune: " + first_error(proc)
        checkpoint = os.path.join(ck, "epoch_0001.onnx")
        scores = onnx.load(checkpoint).graph.output[0].type.tensor_type.shape.dim
        if len(scores) < 2 or scores[1].dim_value != 5:
            return steps, "finetune: the checkpoint's output has shape %s, not [N, 5, ...]" % [
                d.dim_value or d.dim_param for d in scores]
        proc = run([args.onnx_train, "eval", checkpoint, "--data", "imagefolder:" + args.images, "--threads", "2"], 600)
        if proc.returncode != 0 or "test accuracy" not in proc.stdout:
            return steps, "eval of the fine-tuned checkpoint: " + first_error(proc)
        steps.append("finetune")
        return steps, None
    finally:
        if not args.keep:
            for f in ("x1.pb", "x2.pb"):
                p = os.path.join(work, f)
                if os.path.exists(p):
                    os.remove(p)
            if os.path.exists(model_path):
                os.remove(model_path)


def make_image_folder(root):
    """A 5-class image folder, train/ and val/: 2 and 1 48x48 PNGs a class, each class a
    colour with noise."""
    from PIL import Image
    rng = np.random.default_rng(7)
    colours = [(220, 40, 40), (40, 200, 60), (50, 60, 220), (230, 210, 40), (40, 210, 210)]
    for split, count in (("train", 2), ("val", 1)):
        for c, colour in enumerate(colours):
            folder = os.path.join(root, split, "class_%d" % c)
            os.makedirs(folder, exist_ok=True)
            for i in range(count):
                pixels = np.clip(np.array(colour) + rng.normal(0, 25, (48, 48, 3)), 0, 255).astype(np.uint8)
                Image.fromarray(pixels).save(os.path.join(folder, "%d.png" % i))
    return root


def main():
    ap = test_parser(__doc__)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--keep", action="store_true", help="keep the trainable models and inputs")
    args = test_args(ap)
    args.images = make_image_folder(os.path.join(args.workdir, "images"))
    failures, xpass = [], []
    print("%-14s %-27s %s" % ("model", "steps passed", "first error"))
    for k, name in enumerate(args.models.split(",")):
        steps, err = run_model(name, args, seed=100 + k)
        tag = ""
        if err is None and name in KNOWN:
            tag = "XPASS (remove from KNOWN: %s)" % KNOWN[name]
            xpass.append(name)
        elif err is not None and name in KNOWN:
            tag = "known: %s" % KNOWN[name]
        elif err is not None:
            failures.append(name)
        print("%-14s %-27s %s %s" % (name, ",".join(steps) or "-", err or "ok", tag), flush=True)
    if xpass:
        print("XPASS: %s now pass; remove them from KNOWN" % ", ".join(xpass))
    if failures:
        print("FAILED: %s" % ", ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
