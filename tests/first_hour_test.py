#!/usr/bin/env python3
"""A new user's first hour (issue 15), as CLI checks of messages and exit codes:

- interrupt: SIGINT during a run finishes the step, saves a recovery snapshot, prints
  "interrupted at epoch E step S; saved X; continue with: ..." and exits 130; running the
  printed command ends with bitwise the weights of the uninterrupted run (one process and
  --world-size 2).

Run by CTest (target first_hour_test); by hand:
    /usr/bin/python3 tests/first_hour_test.py --onnx-train build/tools/onnx-train --workdir /tmp/fh [--only NAME]
"""
import argparse
import hashlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

ENV = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")


class Checker:
    def __init__(self):
        self.passed = self.failed = 0

    def __call__(self, name, ok, detail=""):
        print(f"  {name:<64} {'ok' if ok else 'FAILED'} {'' if ok else detail}", flush=True)
        self.passed += bool(ok)
        self.failed += not ok
        return ok


def run(args, argv, timeout=300, cwd=None):
    return subprocess.run([args.onnx_train, *argv], capture_output=True, text=True, timeout=timeout, env=ENV,
                          cwd=cwd or args.workdir)


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def count_steps(metrics):
    try:
        with open(metrics) as f:
            return sum(1 for line in f if '"type":"step"' in line)
    except FileNotFoundError:
        return 0


def run_interrupted(args, argv, metrics, after_steps, timeout=300):
    """Starts onnx-train, sends SIGINT once the metrics file shows `after_steps` steps;
    returns (exit status, stdout, stderr)."""
    p = subprocess.Popen([args.onnx_train, *argv, "--metrics", metrics], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=ENV, cwd=args.workdir)
    deadline = time.time() + timeout
    while count_steps(os.path.join(args.workdir, metrics)) < after_steps and p.poll() is None and time.time() < deadline:
        time.sleep(0.005)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out, err


# ---------------------------------------------------------------------------------------------
def case_interrupt(args, check):
    model = "simplenn.onnx"
    run(args, ["make-model", "simplenn", "-o", model, "--seed", "4"])
    for world in (1, 2):
        common = [model, "--epochs", "2", "--max-steps", "60", "--batch", "128", "--lr", "0.05", "--momentum", "0.9",
                  "--seed", "7", "--threads", str(2 * world)] + (["--world-size", str(world)] if world > 1 else [])
        tag = f"world {world}"
        ref_dir, int_dir = f"ref{world}", f"int{world}"
        for d in (ref_dir, int_dir):
            shutil.rmtree(os.path.join(args.workdir, d), ignore_errors=True)
        ref = run(args, common + ["--checkpoint-dir", ref_dir, "--quiet"])
        if not check(f"{tag}: uninterrupted run", ref.returncode == 0, ref.stderr[-400:]):
            continue
        metrics = f"int{world}.jsonl"
        if os.path.exists(os.path.join(args.workdir, metrics)):
            os.remove(os.path.join(args.workdir, metrics))
        rc, out, err = run_interrupted(args, common + ["--checkpoint-dir", int_dir, "--quiet"], metrics, 15)
        check(f"{tag}: exit status 130 after SIGINT", rc == 130, f"rc {rc}; {out[-300:]} {err[-300:]}")
        m = re.search(r"interrupted at epoch (\d+) step (\d+); saved (\S+); continue with: (.*)$", out, re.M)
        if not check(f"{tag}: says where it stopped and how to continue", m, f"stdout {out[-500:]!r}"):
            continue
        check(f"{tag}: said once", out.count("interrupted at epoch") == 1, out[-500:])
        check(f"{tag}: stopped mid-run", (int(m.group(1)), int(m.group(2))) < (2, 0), m.group(0))
        check(f"{tag}: saved state exists", os.path.exists(os.path.join(args.workdir, m.group(3))), m.group(3))
        check(f"{tag}: nothing on stderr", err.strip() == "", err[-300:])
        cont = shlex.split(m.group(4))
        check(f"{tag}: continue command is onnx-train ... --resume X",
              cont[0] == "onnx-train" and cont[-2:] == ["--resume", m.group(3)] and "--threads" in cont, m.group(4))
        if world > 1:
            check(f"{tag}: continue command keeps --world-size", "--world-size" in cont, m.group(4))
        res = run(args, cont[1:])
        check(f"{tag}: continued run", res.returncode == 0, res.stderr[-400:])
        want = digest(os.path.join(args.workdir, ref_dir, "epoch_0002.onnx"))
        got_path = os.path.join(args.workdir, int_dir, "epoch_0002.onnx")
        check(f"{tag}: interrupted + resumed == uninterrupted, bitwise",
              os.path.exists(got_path) and digest(got_path) == want)
        acc = lambda s: re.search(r"test accuracy ([\d.]+)%", s).group(1) if "test accuracy" in s else None
        check(f"{tag}: same final test accuracy", acc(ref.stdout) is not None and acc(ref.stdout) == acc(res.stdout),
              f"{acc(ref.stdout)} vs {acc(res.stdout)}")


CASES = {"interrupt": case_interrupt}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--onnx-train", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--only", default="", help="comma-separated case names")
    args = p.parse_args()
    args.onnx_train = os.path.abspath(args.onnx_train)
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    check = Checker()
    only = [c for c in args.only.split(",") if c]
    for name, case in CASES.items():
        if only and name not in only:
            continue
        print(f"{name}:", flush=True)
        case(args, check)
    print(f"first_hour_test: {check.passed} passed, {check.failed} failed")
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
