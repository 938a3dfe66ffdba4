#!/usr/bin/env python3
"""--amp fp16 with dynamic loss scaling against PyTorch 2.x's torch.autocast("cpu", float16) and
torch.amp.GradScaler("cpu"): the same weights, the same batches.

The small ResNet and the tiny ViT of amp_parity_test.py are exported by PyTorch 2.x and trained
16 steps (batch 16, --no-shuffle on an npz) by onnx-train with --amp fp16 and without, and by
PyTorch in float32 and under autocast float16 with a GradScaler. On this CPU float16 is emulated
(float32 products of operands the Cast nodes rounded to float16). Checks:
  - at the default scale (65536), our fp16 curve lies within MARGIN x PyTorch's own
    fp16-vs-fp32 distance (FLOOR if larger), differs from our float32 curve (the casts really
    round), and no step is skipped by either;
  - a forced overflow (initial scale 2^28) skips exactly the steps GradScaler skips, with the
    same scale after every step (halved on each skip), for the ResNet with SGD momentum and the
    ViT with Adam (whose bias correction shows a step counter that counted skipped steps);
    the curves then stay within the distance bound;
  - the weights are bitwise unchanged by skipped steps: all steps skipped under a huge static
    scale leave the trained weights equal to the model's;
  - `export --amp fp16` shows Cast-to-float16 nodes in front of every product's operands, the
    scaled seed, the unscaled gradients (one per parameter), the all-finite output and every
    optimizer update gated by a Where on it;
  - the checkpoint is a float32 inference model, and a run killed at step 5 and resumed from its
    step-3 snapshot (scale and growth counter in the state; steps skipped before and after the
    snapshot) ends bitwise equal to an uninterrupted one;
  - data parallel (2 ranks) from 2^28: the run completes with steps skipped and the scale halved
    on each (the all-finite flag reads the allreduced gradients, so the ranks agree);
  - --loss-scale with a non-positive or malformed value, or without --amp fp16: one error line.
About 40-60 s on 2 cores.
"""
import copy
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
import onnx.numpy_helper
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "common"))
sys.path.insert(0, os.path.join(HERE, ".."))  # amp_parity_test.py
import ot_cli  # noqa: E402
from amp_parity_test import SmallResNet, TinyViT, make_data  # noqa: E402  (the bf16 test's models and data)

STEPS, BATCH, LR, MOMENTUM, ADAM_LR = 16, 16, 0.05, 0.9, 1e-3
MARGIN, FLOOR = 3.0, 2e-3
HUGE = 2.0 ** 28
FAILURES = []


def check(what, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + what + (f": {detail}" if detail else ""), flush=True)
    if not ok:
        FAILURES.append(what)


def torch_run(model, x, y, amp, opt, init_scale=65536.0):
    """Per-step losses, skipped flags and the scale after each step, as GradScaler's recipe runs."""
    torch.manual_seed(0)
    m = copy.deepcopy(model).train()
    o = (torch.optim.SGD(m.parameters(), lr=LR, momentum=MOMENTUM) if opt == "sgd"
         else torch.optim.Adam(m.parameters(), lr=ADAM_LR, eps=1e-8))
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, enabled=amp)
    losses, skipped, scales = [], [], []
    for s in range(STEPS):
        xb, yb = torch.from_numpy(x[s * BATCH:(s + 1) * BATCH]), torch.from_numpy(y[s * BATCH:(s + 1) * BATCH])
        o.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16, enabled=amp):
            loss = nn.functional.cross_entropy(m(xb), yb)
        before = scaler.get_scale() if amp else 1.0
        scaler.scale(loss).backward()
        scaler.step(o)
        scaler.update()
        after = scaler.get_scale() if amp else 1.0
        losses.append(float(loss))
        skipped.append(after < before)
        scales.append(after)
    return losses, skipped, scales


def optimizer_flags(opt):
    if opt == "sgd":
        return ["--opt", "sgd", "--lr", repr(LR), "--momentum", repr(MOMENTUM)]
    return ["--opt", "adam", "--lr", repr(ADAM_LR), "--epsilon", "1e-8"]


def ours_run(args, onnx_path, npz, tag, opt, extra=()):
    metrics = os.path.join(args.workdir, tag + ".jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    out = ot_cli.run(args.onnx_train, [onnx_path, "--data", "npz:" + npz, "--no-shuffle", "--batch", str(BATCH),
                                       "--epochs", "1", *optimizer_flags(opt), "--no-checkpoints", "--quiet",
                                       "--threads", "2", "--metrics", metrics, *extra])
    with open(metrics) as f:
        rows = [r for r in (json.loads(line) for line in f) if r.get("type") == "step"]
    return ([r["loss"] for r in rows], [r.get("skipped", False) for r in rows],
            [r.get("loss_scale", 1.0) for r in rows], out)


def distance(curve, ref):
    return max(abs(a - b) / abs(b) for a, b in zip(curve, ref))


def check_curves(args, name, model, path, npz, x, y, opt):
    ref, _, _ = torch_run(model, x, y, False, opt)
    t16, t_skip, _ = torch_run(model, x, y, True, opt)
    o16, o_skip, o_scales, out = ours_run(args, path, npz, name + "_fp16", opt, ["--amp", "fp16"])
    o32, _, _, _ = ours_run(args, path, npz, name + "_f32", opt)
    check(f"{name}: the CPU says float16 is emulated, in one line",
          sum("--amp fp16 on the CPU" in ln for ln in out.splitlines()) == 1)
    if len(o16) != STEPS or len(o32) != STEPS:
        check(f"{name}: {STEPS} steps", False, f"{len(o16)} and {len(o32)}")
        return
    d_torch, d_ours, d_ours32 = distance(t16, ref), distance(o16, ref), distance(o32, ref)
    bound = max(MARGIN * d_torch, FLOOR)
    print(f"{name} ({opt}): loss {ref[0]:.4f} -> {ref[-1]:.4f}; distance from PyTorch fp32: PyTorch fp16 "
          f"{d_torch:.2e}, ours fp16 {d_ours:.2e}, ours fp32 {d_ours32:.2e}")
    check(f"{name}: our fp16 curve within {MARGIN} x PyTorch's fp16-vs-fp32 distance", d_ours <= bound,
          f"{d_ours:.2e} vs {bound:.2e}")
    d_self = distance(o16, o32)
    check(f"{name}: our fp16 curve is not our fp32 one (float16 really rounded)", d_self > 0.05 * d_torch,
          f"{d_self:.2e} apart (PyTorch's pair {d_torch:.2e})")
    check(f"{name}: at scale 65536 no step skipped, by PyTorch or us, and the scale stays",
          not any(t_skip) and not any(o_skip) and all(s == 65536.0 for s in o_scales))


def check_forced_overflow(args, name, model, path, npz, x, y, opt):
    ref, _, _ = torch_run(model, x, y, False, opt)
    t16, t_skip, t_scales = torch_run(model, x, y, True, opt, init_scale=HUGE)
    o16, o_skip, o_scales, out = ours_run(args, path, npz, name + "_overflow", opt,
                                          ["--amp", "fp16", "--loss-scale", f"dynamic:{HUGE:.0f}"])
    n = sum(t_skip)
    print(f"{name} ({opt}) from scale 2^28: PyTorch skips steps {[i for i, s in enumerate(t_skip) if s]}, "
          f"ours {[i for i, s in enumerate(o_skip) if s]}; scales {t_scales[-1]:g} and {o_scales[-1]:g}")
    check(f"{name}: from 2^28 PyTorch skips some steps and then trains", 0 < n < STEPS, f"{n} skipped")
    check(f"{name}: we skip exactly the steps GradScaler skips", o_skip == t_skip)
    check(f"{name}: the scale after every step is GradScaler's (halved on each skip)",
          [float(s) for s in o_scales] == [float(s) for s in t_scales])
    lines = [ln for ln in out.splitlines() if "steps skipped under --amp fp16" in ln]
    check(f"{name}: the epoch line says how many steps were skipped", len(lines) == 1 and f"{n} of {STEPS}" in lines[0],
          (lines or ["none"])[0])
    d_torch, d_ours = distance(t16, ref), distance(o16, ref)
    bound = max(MARGIN * d_torch, FLOOR)
    check(f"{name}: after the skips our curve stays within {MARGIN} x PyTorch's distance", d_ours <= bound,
          f"{d_ours:.2e} vs {bound:.2e}")


def trained_weights(model_path, initial_path):
    """The checkpoint's initializers that are trained (not BatchNorm statistics), beside the model's."""
    m = onnx.load(model_path)
    start = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(initial_path).graph.initializer}
    stats = {n.input[i] for n in m.graph.node if n.op_type == "BatchNormalization" for i in (3, 4) if i < len(n.input)}
    out = {t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer
           if t.name in start and t.name not in stats and t.data_type == onnx.TensorProto.FLOAT}
    return out, start


def check_skipped_steps_leave_weights(args, path, npz):
    ck = os.path.join(args.workdir, "ck-static")
    shutil.rmtree(ck, ignore_errors=True)
    out = ot_cli.run(args.onnx_train, [path, "--data", "npz:" + npz, "--no-shuffle", "--batch", str(BATCH),
                                       "--epochs", "1", *optimizer_flags("sgd"), "--amp", "fp16", "--loss-scale",
                                       "static:1e30", "--checkpoint-dir", ck, "--quiet", "--threads", "2"])
    trained, start = trained_weights(os.path.join(ck, "epoch_0001.onnx"), path)
    same = [n for n in trained if np.array_equal(trained[n], start[n])]
    check(f"static scale 1e30: every step skipped and the {len(trained)} trained weights bitwise unchanged",
          f"{STEPS} of {STEPS} steps skipped" in out and trained and len(same) == len(trained),
          f"{len(trained) - len(same)} changed")


def check_export(args, path, name):
    out_path = os.path.join(args.workdir, name + "_train_fp16.onnx")
    ot_cli.run(args.onnx_train, ["export", path, "-o", out_path, "--amp", "fp16", "--momentum", str(MOMENTUM)])
    g = onnx.load(out_path).graph
    producer = {o: n for n in g.node for o in n.output}
    operands = {"Conv": [0, 1], "MatMul": [0, 1], "Gemm": [0, 1], "ConvGrad": [0, 1, 2]}
    products = [n for n in g.node if n.op_type in operands]
    uncast = [f"{n.op_type} {n.name} input {i}" for n in products for i in operands[n.op_type]
              if i < len(n.input) and not (n.input[i] in producer and producer[n.input[i]].op_type == "Cast"
                                            and producer[n.input[i]].attribute[0].i == onnx.TensorProto.FLOAT16)]
    check(f"{name}: export --amp fp16 casts every operand of its {len(products)} products to float16",
          products and not uncast, "; ".join(uncast[:4]))
    inputs = {i.name for i in g.input}
    outputs = {o.name: o for o in g.output}
    seed = [n for n in g.node if n.op_type == "Mul" and "amp/loss_scale" in n.input and
            any(i.endswith("/grad_seed") for i in n.input)]
    unscaled = [n for n in g.node if n.op_type == "Mul" and n.output[0].endswith("/unscaled")]
    params = {t.name for t in g.initializer} & {n.input[2] for n in g.node if n.op_type == "Momentum"}
    check(f"{name}: the scale is an input and the seed gradient is multiplied by it",
          "amp/loss_scale" in inputs and len(seed) == 1)
    check(f"{name}: one unscaling Mul per parameter gradient ({len(unscaled)} for {len(params)})",
          params and len(unscaled) == len(params))
    finite = outputs.get("amp/grads_finite")
    check(f"{name}: the all-finite flag is a bool output",
          finite is not None and finite.type.tensor_type.elem_type == onnx.TensorProto.BOOL)
    updates = [o for o in outputs if o.endswith("/new")]
    gated = [o for o in updates if o in producer and producer[o].op_type == "Where" and
             producer[o].input[0] == "amp/grads_finite"]
    momentum_reads = [i for n in g.node if n.op_type == "Momentum" for i in n.input[3:4]]
    check(f"{name}: every optimizer update ({len(gated)} of {len(updates)} state outputs) is gated by the flag",
          gated and all(producer[o].op_type == "Where" for o in updates if not o.endswith("running_mean/new")
                        and not o.endswith("running_var/new") and producer[o].op_type != "BatchNormalization")
          and all(r.endswith("/unscaled") for r in momentum_reads))


def check_checkpoint_and_resume(args, path, npz):
    def run(tag, env):
        ck = os.path.join(args.workdir, "ck-" + tag)
        shutil.rmtree(ck, ignore_errors=True)
        cmd = [args.onnx_train, path, "--data", "npz:" + npz, "--no-shuffle", "--batch", str(BATCH), "--epochs", "1",
               *optimizer_flags("sgd"), "--amp", "fp16", "--loss-scale", f"dynamic:{2.0 ** 28:.0f}",
               "--checkpoint-dir", ck, "--snapshot-every", "3", "--max-restarts", "1", "--quiet", "--threads", "2",
               # Two separate runs are compared: under auto each times its own convolution algorithms
               # (a resume restores its run's choices), and timings may choose differently.
               "--conv-algo", "direct"]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ, **env))
        if p.returncode != 0:
            sys.exit(f"FAIL: {' '.join(cmd)}:\n{p.stdout}{p.stderr}")
        m = onnx.load(os.path.join(ck, "epoch_0001.onnx"))
        return m, {t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer}, p.stdout
    whole_model, whole, whole_out = run("whole", {})
    types = {t.data_type for t in whole_model.graph.initializer}
    casts = [n for n in whole_model.graph.node if n.op_type == "Cast"]
    check("checkpoint: a float32 inference model (no float16 initializer, no amp node)",
          onnx.TensorProto.FLOAT16 not in types and onnx.TensorProto.FLOAT in types and
          not any(n.name.startswith("amp/") for n in casts) and
          not any(i.name.startswith("amp/") for i in whole_model.graph.input))
    skipped = [ln for ln in whole_out.splitlines() if "steps skipped" in ln]
    check("resume test: steps are skipped on both sides of the step-3 snapshot (from 2^28)",
          skipped and any(f"{k} of {STEPS}" in skipped[0] for k in range(4, STEPS)), (skipped or ["none"])[0])
    _, resumed, out = run("killed", {"ONNXTRAIN_FAULT_KILL_AT_STEPS": "5"})
    check("resume under --amp fp16: killed at step 5, restarted", "restart" in out or "resumed" in out)
    same = all(np.array_equal(resumed[n], whole[n]) for n in whole)
    check("resume under --amp fp16: final weights bitwise equal to the uninterrupted run (the scale restored)", same)


def check_data_parallel(args, path, npz):
    """Two ranks of batch 8 from 2^28: the finite flag reads the allreduced gradients, so both
    ranks skip the same steps (a disagreement would desynchronise the collectives' bucket
    order or the weights); rank 0's record halves the scale on each skip."""
    metrics = os.path.join(args.workdir, "dp.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    ot_cli.run(args.onnx_train, [path, "--data", "npz:" + npz, "--no-shuffle", "--batch", str(BATCH // 2),
                                 "--epochs", "1", *optimizer_flags("sgd"), "--no-checkpoints", "--quiet",
                                 "--threads", "1", "--world-size", "2", "--amp", "fp16", "--loss-scale",
                                 f"dynamic:{HUGE:.0f}", "--metrics", metrics, "--timeout", "120"])
    with open(metrics) as f:
        rows = [r for r in (json.loads(line) for line in f) if r.get("type") == "step"]
    expected, ok = HUGE, True
    for r in rows:
        if r["skipped"]:
            expected /= 2
        ok = ok and r["loss_scale"] == expected
    skipped = sum(r["skipped"] for r in rows)
    check(f"data parallel (2 ranks): {skipped} of {len(rows)} steps skipped, the scale halved on each",
          len(rows) == STEPS and 0 < skipped < STEPS and ok)


def check_bad_input(args, path, npz):
    for value, amp in [("static:0", "fp16"), ("static:-2", "fp16"), ("static:abc", "fp16"), ("dynamic:inf", "fp16"),
                       ("static", "fp16"), ("sometimes", "fp16"), ("static:1e60", "fp16"), ("static:8", None)]:
        cmd = [args.onnx_train, path, "--data", "npz:" + npz, "--batch", str(BATCH), "--epochs", "1", "--max-steps",
               "1", "--no-checkpoints", "--quiet", "--loss-scale", value] + (["--amp", amp] if amp else [])
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        errors = [ln for ln in p.stderr.splitlines() if ln.strip()]
        check(f"--loss-scale {value}{' --amp ' + amp if amp else ''}: refused in one line naming --loss-scale",
              p.returncode != 0 and len(errors) == 1 and "--loss-scale" in errors[0], (errors or ["no error"])[0])


def main():
    args = ot_cli.test_args(__doc__)
    npz = os.path.join(args.workdir, "images.npz")
    x, y = make_data(npz)
    torch.manual_seed(0)
    models = {"resnet": SmallResNet(), "vit": TinyViT()}
    paths = {}
    for name, model in models.items():
        paths[name] = os.path.join(args.workdir, name + ".onnx")
        torch.onnx.export(model.train(), torch.from_numpy(x[:2]), paths[name], input_names=["input"],
                          output_names=["logits"], dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}},
                          opset_version=17, training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                          dynamo=False)
    opts = {"resnet": "sgd", "vit": "adam"}
    for name, model in models.items():
        check_curves(args, name, model, paths[name], npz, x, y, opts[name])
        check_forced_overflow(args, name, model, paths[name], npz, x, y, opts[name])
        check_export(args, paths[name], name)
    check_skipped_steps_leave_weights(args, paths["resnet"], npz)
    check_checkpoint_and_resume(args, paths["resnet"], npz)
    check_data_parallel(args, paths["resnet"], npz)
    check_bad_input(args, paths["resnet"], npz)
    if FAILURES:
        sys.exit(f"{len(FAILURES)} check(s) failed: " + "; ".join(FAILURES))
    print("all checks passed")


if __name__ == "__main__":
    main()
