#!/usr/bin/env python3
"""Chaos test of the launcher's restarts: a data-parallel run (--world-size 3, recovery
snapshots every 50 steps) whose workers are SIGKILLed at two seeded random steps (a random
rank each time), restarted by `--max-restarts 3` from the latest snapshot, must end with
bitwise the same weights as the same run without kills. A second case kills the launcher
itself and reruns the same command with --resume. With --backend mpi (ctest chaos_test_mpi)
the workers are an MPI job that the launcher starts through mpirun, and each restart starts
a new one; that run does the kills and restarts case only (no heartbeats over mpirun).

Run by CTest (target chaos_test); by hand:
    python3 tests/distributed/chaos_test.py --onnx-train build/tools/onnx-train --workdir /tmp/chaos
"""
import hashlib
import os
import random
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # the shared helpers
from check_tally import Checks  # noqa: E402
from ot_cli import test_args, test_parser  # noqa: E402

COMMON = ["--world-size", "3", "--epochs", "2", "--max-steps", "120", "--batch", "16", "--lr", "0.02",
          "--momentum", "0.9", "--seed", "5", "--snapshot-every", "50", "--quiet", "--threads", "3", "--timeout", "20",
          "--grace-period", "3"]

def final_state_digest(ckpt_dir, epochs):
    """Digest of the final inference model (trained weights and BatchNorm statistics)."""
    path = os.path.join(ckpt_dir, "epoch_%04d.onnx" % epochs)
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


SNAPSHOT_EVERY = 50
TOTAL_STEPS = 240  # 2 epochs x --max-steps 120


def resumed_steps(stdout):
    """Step counts of the snapshots that restarted workers resumed from, in order."""
    return [int(n) for n in re.findall(r"resumed from \S+: epoch \d+, (\d+) steps done", stdout)]


def train(args, workdir, extra, env_extra=None, world=None):
    ckpt = os.path.join(workdir, "ckpt")
    cmd = [args.onnx_train, args.model] + COMMON + ["--checkpoint-dir", ckpt, "--backend", args.backend] + extra
    env = dict(os.environ)
    if args.backend == "mpi":  # mpirun refuses root unless told
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.update(env_extra or {})
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600), ckpt


def main():
    p = test_parser(__doc__)
    p.add_argument("--backend", default="gloo", help="gloo, or mpi: the kills-and-restarts case over mpirun")
    args = test_args(p, fresh=True)
    args.model = os.path.join(args.workdir, "simplenn.onnx")
    subprocess.run([args.onnx_train, "make-model", "simplenn", "-o", args.model, "--seed", "3"], check=True,
                   capture_output=True)
    check = Checks(width=60)

    ref, ref_ckpt = train(args, os.path.join(args.workdir, "clean"), [])
    check("uninterrupted run", ref.returncode == 0, ref.stderr[-300:])
    want = final_state_digest(ref_ckpt, 2)

    rng = random.Random(2026)
    # Both kills fall after the first snapshot and in different snapshot intervals, so each
    # restart must resume from a snapshot at a step > 0.
    while True:
        kills = sorted(rng.sample(range(SNAPSHOT_EVERY + 5, TOTAL_STEPS - 5), 2))
        if kills[0] // SNAPSHOT_EVERY != kills[1] // SNAPSHOT_EVERY and all(k % SNAPSHOT_EVERY for k in kills):
            break
    victim = rng.randrange(3)
    r, ck = train(args, os.path.join(args.workdir, "chaos"), ["--max-restarts", "3"],
                  {"ONNXTRAIN_FAULT_KILL_AT_STEPS": ",".join(map(str, kills)), "ONNXTRAIN_FAULT_RANK": str(victim)})
    restarts = r.stdout.count("restarting all")
    check(f"rank {victim} SIGKILLed at steps {kills}: run finishes", r.returncode == 0, r.stderr[-300:])
    check("  two restarts observed", restarts == 2, f"({restarts})")
    want_resume = [k // SNAPSHOT_EVERY * SNAPSHOT_EVERY for k in kills]
    got_resume = resumed_steps(r.stdout)
    check(f"  each restart resumed from the latest snapshot (steps {want_resume})", got_resume == want_resume,
          f"(resumed from {got_resume})")
    computed = kills[0] + (kills[1] - want_resume[0]) + (TOTAL_STEPS - want_resume[1])
    check(f"  steps computed in all ({computed}) fewer than twice the run's ({2 * TOTAL_STEPS})",
          got_resume == want_resume and computed < 2 * TOTAL_STEPS)
    check("  final weights bitwise equal to the uninterrupted run",
          r.returncode == 0 and final_state_digest(ck, 2) == want)

    if args.backend != "gloo":
        print(f"chaos_test ({args.backend}): {check.passed} passed, {check.failed} failed")
        return 0 if check.failed == 0 else 1

    r, ck = train(args, os.path.join(args.workdir, "giveup"), ["--max-restarts", "1"],
                  {"ONNXTRAIN_FAULT_KILL_AT_STEPS": "20,30", "ONNXTRAIN_FAULT_RANK": "2"})
    check("more failures than --max-restarts: non-zero exit naming the worker",
          r.returncode != 0 and "rank 2" in r.stderr and "gave up" in r.stderr, r.stderr[-200:])

    # A hung worker (stopped, no heartbeat) is taken as failed and the workers restart.
    r, ck = train(args, os.path.join(args.workdir, "hang"), ["--max-restarts", "2", "--heartbeat-timeout", "3"],
                  {"ONNXTRAIN_FAULT_KILL_AT_STEPS": "30", "ONNXTRAIN_FAULT_RANK": "1", "ONNXTRAIN_FAULT_MODE": "hang"})
    check("hung worker detected by its heartbeat, workers restarted from step 0 (no snapshot yet), same final weights",
          r.returncode == 0 and "restarting all" in r.stdout and "no checkpoint in" in r.stdout and
          final_state_digest(ck, 2) == want,
          (r.stdout + r.stderr)[-200:] if r.returncode else "")

    # Kill the launcher itself mid-run, then rerun the same command with --resume.
    workdir = os.path.join(args.workdir, "launcher")
    ckpt = os.path.join(workdir, "ckpt")
    cmd = [args.onnx_train, args.model] + COMMON + ["--checkpoint-dir", ckpt, "--max-restarts", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline and not (os.path.isdir(ckpt) and any(f.startswith("step_") for f in os.listdir(ckpt))):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the launcher and its worker
    proc.wait()
    r = subprocess.run(cmd + ["--resume"], capture_output=True, text=True, timeout=600)
    got_resume = resumed_steps(r.stdout)
    check("launcher killed, rerun with --resume: resumed from a snapshot at step > 0",
          len(got_resume) == 1 and got_resume[0] > 0, f"(resumed from {got_resume})")
    check("launcher killed, rerun with --resume: same final weights",
          r.returncode == 0 and final_state_digest(ckpt, 2) == want, r.stderr[-300:])
    print(f"chaos_test: {check.passed} passed, {check.failed} failed")
    return 0 if check.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
