#!/usr/bin/env python3
"""ONNX Runtime Training (the closest peer) on the same models: training-step time.

    python ort_step.py --model resnet34|simplenn --onnx MODEL.onnx --batch B [--threads 2]

Builds training artifacts with onnxruntime.training.artifacts.generate_artifacts (cross
entropy loss, SGD), then times Module train steps + Optimizer steps. Prints one JSON object.
Needs onnxruntime-training-cpu (a benchmark-only dependency; scripts/bench-train.sh installs
it into a virtual environment)."""
import argparse
import json
import os
import resource
import tempfile
import time

import numpy as np
import onnx
import onnxruntime
from onnxruntime.training import artifacts
from onnxruntime.training.api import CheckpointState, Module, Optimizer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--onnx", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--lr", type=float, default=0.1)
    args = ap.parse_args()
    model = onnx.load(args.onnx)
    # ORT derives its own training and eval graphs: give it BatchNormalization in the
    # plain form (one output, no training_mode), as an inference export has it.
    for node in model.graph.node:
        if node.op_type == "BatchNormalization":
            keep = [a for a in node.attribute if a.name != "training_mode"]
            del node.attribute[:]
            node.attribute.extend(keep)
            del node.output[1:]
    params = [t.name for t in model.graph.initializer if "running" not in t.name]
    out = tempfile.mkdtemp(prefix="ort_artifacts_")
    artifacts.generate_artifacts(model, requires_grad=params, frozen_params=[],
                                 loss=artifacts.LossType.CrossEntropyLoss, optimizer=artifacts.OptimType.SGD,
                                 artifact_directory=out)
    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    state = CheckpointState.load_checkpoint(os.path.join(out, "checkpoint"))
    try:
        module = Module(os.path.join(out, "training_model.onnx"), state, os.path.join(out, "eval_model.onnx"),
                        session_options=so)
    except TypeError:  # older API without session options
        module = Module(os.path.join(out, "training_model.onnx"), state, os.path.join(out, "eval_model.onnx"))
    opt = Optimizer(os.path.join(out, "optimizer_model.onnx"), module)
    opt.set_learning_rate(args.lr)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim[1:]]
    rng = np.random.default_rng(0)
    x = rng.standard_normal([args.batch] + shape).astype(np.float32)
    y = rng.integers(0, 10, size=args.batch).astype(np.int64)
    module.train()
    warmup = 2
    for i in range(warmup + args.steps):
        if i == warmup:
            start = time.perf_counter()
        module(x, y)
        opt.step()
        module.lazy_reset_grad()
    t = (time.perf_counter() - start) / args.steps
    print(json.dumps({"framework": "onnxruntime-training-" + onnxruntime.__version__, "model": args.model,
                      "batch": args.batch, "threads": args.threads, "step_ms": round(1000 * t, 4),
                      "img_per_s": round(args.batch / t, 1),
                      "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}), flush=True)


if __name__ == "__main__":
    main()
