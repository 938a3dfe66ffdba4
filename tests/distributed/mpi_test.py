#!/usr/bin/env python3
"""Training over the MPI backend (`--backend mpi`), on one host:

- SimpleNN with --world-size 2 and 4 through the launcher (which runs mpirun) ends with the
  same weights as --backend gloo (max relative difference 1e-6; both sum the same float32
  gradients, so they agree to rounding).
- `mpirun -np 2 onnx-train MODEL --backend mpi` (MPI's own rank discovery, no --world-size)
  trains to those weights too; without --threads each rank takes its share of the cores.
- A rank killed mid-epoch: the launcher exits non-zero naming it, within the timeout.
- `onnx-train bench-comm --backend mpi` computes right sums (its `wrong` column is 0).

Run by CTest (target mpi_test, which sets OMPI_ALLOW_RUN_AS_ROOT for root); by hand:
    /usr/bin/python3 tests/distributed/mpi_test.py --onnx-train build/tools/onnx-train --workdir /tmp/mpi
"""
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # the shared helpers
from check_tally import Checks  # noqa: E402
from ot_cli import checkpoint_weights, test_args, test_parser  # noqa: E402

STEPS = 20
MPIRUN = ["mpirun", "--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,vader"]


def max_rel_diff(a, b):
    return max(float(np.max(np.abs(b[k] - v)) / max(float(np.max(np.abs(v))), 1e-12)) for k, v in a.items())


def main():
    p = test_parser(__doc__)
    args = test_args(p, fresh=True)
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    check = Checks(width=70)

    model = os.path.join(args.workdir, "simplenn.onnx")
    subprocess.run([args.onnx_train, "make-model", "simplenn", "-o", model, "--seed", "2"], check=True,
                   capture_output=True)

    def options(tag, batch, threads):
        ckpt = os.path.join(args.workdir, tag)
        return ckpt, [model, "--batch", str(batch), "--epochs", "1", "--max-steps", str(STEPS), "--lr", "0.05",
                      "--momentum", "0.9", "--seed", "9", "--checkpoint-dir", ckpt, "--quiet", "--threads",
                      str(threads)]

    def train(tag, world, backend, extra=(), prefix=(), timeout=300):
        ckpt, opts = options(tag, 32 // world, 2 * world)
        cmd = list(prefix) + [args.onnx_train] + opts + ["--backend", backend] + list(extra)
        if not prefix:
            cmd += ["--world-size", str(world)]
        start = time.time()
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        return r, ckpt, time.time() - start

    for world in (2, 4):
        r_gloo, ck_gloo, _ = train(f"gloo-{world}", world, "gloo")
        r_mpi, ck_mpi, secs = train(f"mpi-{world}", world, "mpi")
        if r_gloo.returncode != 0 or r_mpi.returncode != 0:
            check(f"SimpleNN {world} ranks: mpi == gloo", False, (r_gloo.stderr + r_mpi.stderr)[-400:])
            continue
        ok_backend = f"{world} ranks over mpi" in r_mpi.stdout
        worst = max_rel_diff(checkpoint_weights(ck_gloo), checkpoint_weights(ck_mpi))
        check(f"SimpleNN --world-size {world} --backend mpi == --backend gloo ({STEPS} steps)",
              worst <= 1e-6 and ok_backend, f"(max rel diff {worst:.1e}, {secs:.1f} s)")
        if world == 2:
            # The same job started by mpirun itself: ranks from MPI, no --world-size.
            r, ck, secs = train("mpirun-2", 2, "mpi", prefix=MPIRUN + ["-np", "2"])
            if r.returncode != 0:
                check("mpirun -np 2 onnx-train MODEL --backend mpi", False, (r.stdout + r.stderr)[-400:])
            else:
                worst = max_rel_diff(checkpoint_weights(ck_gloo), checkpoint_weights(ck))
                check("mpirun -np 2 onnx-train MODEL --backend mpi == --backend gloo", worst <= 1e-6,
                      f"(max rel diff {worst:.1e}, {secs:.1f} s)")

    # Started by mpirun without --threads or OMP_NUM_THREADS, each rank takes its share of the
    # cores (before, every rank took every core, and MPI's busy polling made that 100x slower).
    bare = {k: v for k, v in env.items() if k != "OMP_NUM_THREADS"}
    r = subprocess.run(MPIRUN + ["-np", "2", args.onnx_train, model, "--backend", "mpi", "--max-steps", "3",
                                 "--epochs", "1", "--no-checkpoints"], capture_output=True, text=True, timeout=300,
                       env=bare)
    share = max(1, (os.cpu_count() or 1) // 2)
    check(f"mpirun -np 2 without --threads: {share} thread(s) per rank, said once",
          r.returncode == 0 and r.stdout.count(f"threads: {share} per rank") == 1, (r.stdout + r.stderr)[-400:])

    # A rank killed mid-epoch: mpirun ends the job; the launcher names the rank.
    ckpt, opts = options("kill", 16, 4)
    start = time.time()
    r = subprocess.run([args.onnx_train] + opts + ["--backend", "mpi", "--world-size", "2", "--max-steps", "40",
                                                   "--timeout", "10"],
                       capture_output=True, text=True, timeout=120,
                       env=dict(env, ONNXTRAIN_FAULT_KILL_AT_STEPS="15", ONNXTRAIN_FAULT_RANK="1"))
    secs = time.time() - start
    first = r.stderr.strip().splitlines()[0] if r.stderr.strip() else ""
    check("rank 1 SIGKILLed: launcher exits non-zero naming rank 1", r.returncode != 0 and "worker rank 1" in first,
          f"({secs:.1f} s) {first[:120]}")
    check("  and within the timeout (no hang)", secs < 40, f"({secs:.1f} s)")

    # bench-comm over MPI: every size sums right.
    r = subprocess.run([args.onnx_train, "bench-comm", "--backend", "mpi", "--world-size", "2", "--max-bytes",
                        "1048576", "--iters", "3", "--warmup", "1"], capture_output=True, text=True, timeout=120,
                       env=env)
    rows = [line.split() for line in r.stdout.splitlines() if line.strip() and line.split()[0].isdigit()]
    check("bench-comm --backend mpi: 10 sizes, no wrong element",
          r.returncode == 0 and "backend mpi" in r.stdout and len(rows) == 10 and all(row[5] == "0" for row in rows),
          f"({len(rows)} rows) {r.stderr.strip()[-200:]}")

    return check.finish("mpi_test")


if __name__ == "__main__":
    sys.exit(main())
