#!/usr/bin/env python3
"""Data-parallel training through the launcher (`--world-size N`), on loopback:

- Equivalence: N = 2 and 4 ranks with batch B each end with the same weights as 1 rank with
  batch N*B on the same samples (SimpleNN, and a BatchNorm-free conv net), rtol 1e-5.
- No hangs: a rank killed mid-epoch makes the others fail within --timeout with a message
  naming the lost rank, and the launcher exits non-zero; a rank that never joins makes the
  one that did fail within --timeout naming the missing rank.

Run by CTest (target data_parallel_test); by hand:
    /usr/bin/python3 tests/distributed/data_parallel_test.py --onnx-train build/tools/onnx-train --workdir /tmp/dp
"""
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import onnx
import onnx.numpy_helper
from onnx import TensorProto, helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # the shared helpers
from check_tally import Checks  # noqa: E402
from ot_cli import checkpoint_weights, test_args, test_parser  # noqa: E402


def conv_net(path):
    """Conv(1->8, 3x3, pad 1) -> Relu -> Conv(8->8, 3x3, stride 2) -> Relu -> GlobalAveragePool
    -> Flatten -> Gemm(8 -> 10): no BatchNorm, so per-rank batches reduce exactly."""
    rng = np.random.default_rng(4)
    def init(name, shape, scale):
        return onnx.numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)
    inits = [init("c1.weight", (8, 1, 3, 3), 0.3), init("c1.bias", (8,), 0.1), init("c2.weight", (8, 8, 3, 3), 0.2),
             init("c2.bias", (8,), 0.1), init("fc.weight", (10, 8), 0.3), init("fc.bias", (10,), 0.1)]
    nodes = [helper.make_node("Conv", ["input", "c1.weight", "c1.bias"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Conv", ["b", "c2.weight", "c2.bias"], ["c"], strides=[2, 2]),
             helper.make_node("Relu", ["c"], ["d"]),
             helper.make_node("GlobalAveragePool", ["d"], ["e"]),
             helper.make_node("Flatten", ["e"], ["f"]),
             helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["logits"], transB=1)]
    graph = helper.make_graph(nodes, "convnet",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 1, 28, 28])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), path)


# Steps per equivalence run. Every run gives each rank the 1-rank run's two threads, so that
# oneDNN sums in the same blocking: with one thread per rank, the first conv layer's bias
# gradient (a sum over 16x28x28 positions) rounds differently enough that its weights drift
# ~2e-5 apart (norm-relative) within 20 steps, which is rounding, not a different update.
# So small runs keep their threads too (ONNXTRAIN_SERIAL_BELOW_BYTES=0; by default a run
# this small plans on one thread, runtime/executor/executor.h).
STEPS = 40


def train(args, model, tag, world, batch, extra=(), env=None, timeout=300):
    ckpt = os.path.join(args.workdir, tag)
    shutil.rmtree(ckpt, ignore_errors=True)
    cmd = [args.onnx_train, model, "--world-size", str(world), "--batch", str(batch), "--epochs", "1",
           "--max-steps", str(STEPS), "--lr", "0.05", "--momentum", "0.9", "--seed", "9", "--checkpoint-dir", ckpt,
           "--quiet", "--threads", str(2 * world)] + list(extra)  # two threads per rank, as in the 1-rank run
    start = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE", ONNXTRAIN_SERIAL_BELOW_BYTES="0", **(env or {})))
    return r, ckpt, time.time() - start


def main():
    p = test_parser(__doc__)
    args = test_args(p, fresh=True)
    check = Checks()

    simplenn = os.path.join(args.workdir, "simplenn.onnx")
    subprocess.run([args.onnx_train, "make-model", "simplenn", "-o", simplenn, "--seed", "2"], check=True,
                   capture_output=True)
    convnet = os.path.join(args.workdir, "convnet.onnx")
    conv_net(convnet)
    for name, model in [("simplenn", simplenn), ("conv net", convnet)]:
        r, ck, _ = train(args, model, name + "-1x32", 1, 32)
        if r.returncode != 0:
            check(f"{name}: 1 rank, batch 32", False, r.stderr[-300:])
            continue
        ref = checkpoint_weights(ck)
        for world in (2, 4):
            r, ck, _ = train(args, model, f"{name}-{world}x{32 // world}", world, 32 // world)
            if r.returncode != 0:
                check(f"{name}: {world} ranks", False, (r.stdout + r.stderr)[-300:])
                continue
            got = checkpoint_weights(ck)
            worst = max(float(np.max(np.abs(got[k] - v)) / max(float(np.max(np.abs(v))), 1e-12)) for k, v in ref.items())
            check(f"{name}: {world} ranks x batch {32 // world} == 1 rank x batch 32 ({STEPS} steps)", worst <= 1e-5,
                  f"(max rel diff {worst:.1e})")

    # A rank killed mid-epoch: the others end within the timeout, naming it.
    r, _, secs = train(args, simplenn, "kill", 2, 16, ["--timeout", "10", "--grace-period", "5"],
                       {"ONNXTRAIN_FAULT_KILL_AT_STEPS": "15", "ONNXTRAIN_FAULT_RANK": "1"})
    check("rank 1 SIGKILLed: launcher exits non-zero naming rank 1", r.returncode != 0 and "rank 1" in r.stderr,
          f"({secs:.1f} s)")
    check("  and within the timeout (no hang)", secs < 40, f"({secs:.1f} s)")

    # A rank that never joins: start rank 0 of 2 by hand.
    env = dict(os.environ, ONNXTRAIN_RANK="0", ONNXTRAIN_WORLD_SIZE="2", ONNXTRAIN_LOCAL_RANK="0",
               ONNXTRAIN_RUN_ID="lonely", ONNXTRAIN_RDZV="file:" + os.path.join(args.workdir, "rdzv-lonely"))
    start = time.time()
    r = subprocess.run([args.onnx_train, simplenn, "--epochs", "1", "--max-steps", "5", "--timeout", "3",
                        "--no-checkpoints", "--quiet"], capture_output=True, text=True, env=env, timeout=120)
    secs = time.time() - start
    check("rank 1 never joins: rank 0 fails naming rank 1",
          r.returncode != 0 and "rank 0: rank 1 of 2 did not join" in r.stderr,
          f"({secs:.1f} s) {r.stderr.strip()[-160:]}")
    check("  within the timeout", secs < 30, f"({secs:.1f} s)")
    return check.finish("data_parallel_test")


if __name__ == "__main__":
    sys.exit(main())
