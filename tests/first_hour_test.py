#!/usr/bin/env python3
"""A new user's first hour (issue 15), as CLI checks of messages and exit codes:

- interrupt: SIGINT during a run finishes the step, saves a recovery snapshot, prints
  "interrupted at epoch E step S; saved X; continue with: ..." and exits 130; running the
  printed command ends with bitwise the weights of the uninterrupted run (one process and
  --world-size 2); the resumed run's epoch lines count the whole epoch (same steps, loss and
  accuracy as the uninterrupted run's).
- resume: a finished run says "already complete (epoch E of E)" and exits 0 with no accuracy;
  "done:" counts the whole run; `--resume MODEL.onnx` is explained, or accepted when it is a
  checkpoint we wrote; a failed start leaves no empty checkpoint folder.
- dp_output: --world-size 2 prints one prefix per line, "Batchsize: B per rank (2B global)",
  "1 gradient bucket", a warning for a capped --max-steps, and rank 0's progress bar on a
  terminal (a pseudo-terminal here).

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
        epoch_lines = lambda s: [re.sub(r"\| [\d.]+ img/s \| [\d.]+ s$", "", l) for l in s.splitlines()
                                 if re.match(r"(\[\w+ ?\d*\] )?Epoch \d+ \|", l)]
        check(f"{tag}: resumed epoch lines count the whole epoch", epoch_lines(ref.stdout)[-1:] ==
              epoch_lines(res.stdout)[-1:] and epoch_lines(ref.stdout)[0] == (epoch_lines(out) + epoch_lines(res.stdout))[0],
              f"{epoch_lines(ref.stdout)} vs {epoch_lines(out)} + {epoch_lines(res.stdout)}")
        acc = lambda s: re.search(r"test accuracy ([\d.]+)%", s).group(1) if "test accuracy" in s else None
        check(f"{tag}: same final test accuracy", acc(ref.stdout) is not None and acc(ref.stdout) == acc(res.stdout),
              f"{acc(ref.stdout)} vs {acc(res.stdout)}")


def case_resume(args, check):
    model = "simplenn.onnx"
    run(args, ["make-model", "simplenn", "-o", model, "--seed", "4"])
    common = [model, "--epochs", "2", "--max-steps", "20", "--batch", "64", "--threads", "2", "--quiet"]
    shutil.rmtree(os.path.join(args.workdir, "done"), ignore_errors=True)
    first = run(args, common + ["--checkpoint-dir", "done", "--epochs", "1"])
    check("resume: 1-epoch run", first.returncode == 0 and "done: 1 epoch, 20 steps;" in first.stdout,
          first.stdout[-300:] + first.stderr[-300:])
    more = run(args, common + ["--checkpoint-dir", "done", "--resume"])
    check("resume: done line counts the whole run (2 epochs, 40 steps)",
          more.returncode == 0 and "done: 2 epochs, 40 steps;" in more.stdout, more.stdout[-300:] + more.stderr[-300:])
    again = run(args, common + ["--checkpoint-dir", "done", "--resume"])
    check("resume: finished run is 'already complete (epoch 2 of 2)', exit 0",
          again.returncode == 0 and "already complete (epoch 2 of 2)" in again.stdout, again.stdout + again.stderr)
    check("resume: finished run prints no accuracy", "accuracy" not in again.stdout and "done:" not in again.stdout,
          again.stdout)
    ckpt_model = os.path.join("done", "epoch_0002.onnx")
    as_model = run(args, common + ["--checkpoint-dir", "done", "--resume", ckpt_model])
    check("resume: --resume CHECKPOINT.onnx we wrote is accepted",
          as_model.returncode == 0 and "already complete (epoch 2 of 2)" in as_model.stdout,
          as_model.stdout + as_model.stderr)
    bad = run(args, common + ["--checkpoint-dir", "done", "--resume", model])
    check("resume: --resume MODEL.onnx is explained, exit 1",
          bad.returncode == 1 and "that is a model, not a training state" in bad.stderr
          and f"onnx-train {model}" in bad.stderr, bad.stderr)
    shutil.rmtree(os.path.join(args.workdir, "never"), ignore_errors=True)
    failed = run(args, common + ["--checkpoint-dir", "never", "--resume", "missing.state"])
    check("resume: failed start exits 1", failed.returncode == 1, failed.stderr)
    check("resume: failed start leaves no empty checkpoint folder",
          not os.path.exists(os.path.join(args.workdir, "never")), str(os.listdir(args.workdir)))


def case_dp_output(args, check):
    import pty
    model = "simplenn.onnx"
    run(args, ["make-model", "simplenn", "-o", model, "--seed", "4"])
    argv = [model, "--world-size", "2", "--epochs", "1", "--max-steps", "100000", "--batch", "64", "--threads", "2",
            "--checkpoint-dir", "dp", "--lr", "0.05"]
    master, slave = pty.openpty()
    p = subprocess.Popen([args.onnx_train, *argv], stdout=slave, stderr=subprocess.PIPE, env=ENV, cwd=args.workdir)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    p.wait(timeout=300)
    os.close(master)
    out = b"".join(chunks).decode(errors="replace").replace("\r\n", "\n")
    check("dp_output: run ok", p.returncode == 0, out[-500:])
    lines = [l.split("\r")[-1].replace("\033[K", "") for l in out.split("\n")]
    check("dp_output: one prefix per line", not any(re.match(r"\[rank \d+\] \[", l) for l in lines),
          "\n".join(l for l in lines if re.match(r"\[rank \d+\] \[", l))[:300])
    check("dp_output: Batchsize: 64 per rank (128 global)",
          any(re.match(r"\[rank 0\] Epoch 0 \| Batchsize: 64 per rank \(128 global\) \|", l) for l in lines),
          out[-600:])
    check("dp_output: '1 gradient bucket;'", "2 ranks over gloo, 1 gradient bucket;" in out, out[:600])
    check("dp_output: warns that --max-steps is capped",
          "warning: --max-steps 100000 is more than an epoch's 469 steps" in out, out[:800])
    check("dp_output: rank 0's progress bar on a terminal", re.search(r"\r\[rank 0\] Epoch 0 \[[=> ]+\] \d+/469", out),
          repr(out[:800]))
    check("dp_output: no bar from rank 1", "[rank 1] Epoch" not in out, "")


CASES = {"interrupt": case_interrupt, "resume": case_resume, "dp_output": case_dp_output}


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
