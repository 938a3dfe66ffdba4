#!/usr/bin/env python3
"""A new user's first hour (issue 15), as CLI checks of messages and exit codes:

- interrupt: SIGINT during a run finishes the step, saves a recovery snapshot, prints
  "interrupted at epoch E step S; saved X; continue with: ..." and exits 130; running the
  printed command ends with bitwise the weights of the uninterrupted run (one process and
  --world-size 2); the resumed run's epoch lines count the whole epoch (same steps, loss and
  accuracy as the uninterrupted run's).
- second_signal: a second SIGINT during the step that the first one lets finish ends the
  run at once (exit 130, "interrupted again", nothing saved), also through the launcher.
- resume: a finished run says "already complete (epoch E of E)" and exits 0 with no accuracy;
  "done:" counts the whole run; `--resume MODEL.onnx` is explained, or accepted when it is a
  checkpoint we wrote; a failed start leaves no empty checkpoint folder.
- dp_output: --world-size 2 prints one prefix per line, "Batchsize: B per rank (2B global)",
  "1 gradient bucket", a warning for a capped --max-steps, and rank 0's progress bar on a
  terminal (a pseudo-terminal here).
- eval: a model with fewer classes than the data set is an error (exit 1), synthetic data
  takes the model's input shape, --per-class prints one line per class (names from
  classes.txt beside the model; Fashion-MNIST's test split has 1000 samples a class).
- exports: models exported by PyTorch in the test. A default export whose Reshape holds the
  batch (x.view(x.size(0), -1)) fails at start with "the model was exported with batch fixed
  at 2; export with dynamic_axes=... or use --batch 2" and trains with --batch 2; one with
  torch.flatten is rebound to any batch (the checkpoint's batch is symbolic). An eval-mode
  export (BatchNorm folded into convolutions, BatchNorm1d in inference form with statistics
  shared with its scale and bias) is trained in training form: `grad`'s loss and fc.weight
  gradient equal PyTorch's train() mode in float64 (within max(1e-4, 3x float32's own
  distance)); with --frozen-bn they equal eval() mode, and the running statistics stay fixed.

Run by CTest (target first_hour_test); by hand:
    /usr/bin/python3 tests/cli/first_hour_test.py --onnx-train build/tools/onnx-train --workdir /tmp/fh [--only NAME]
"""
import hashlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # the shared helpers
from ot_cli import test_args, test_parser  # noqa: E402

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
    # 60 steps an epoch take a few milliseconds: the step lines appear when an epoch ends (or
    # every quarter second), so the run has 24 epochs, and the signal, sent once 15 steps are
    # on record, arrives while epochs remain.
    epochs = 24
    for world in (1, 2):
        common = [model, "--epochs", str(epochs), "--max-steps", "60", "--batch", "128", "--lr", "0.05", "--momentum", "0.9",
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
        check(f"{tag}: stopped mid-run", (int(m.group(1)), int(m.group(2))) < (epochs, 0), m.group(0))
        check(f"{tag}: saved state exists", os.path.exists(os.path.join(args.workdir, m.group(3))), m.group(3))
        check(f"{tag}: nothing on stderr", err.strip() == "", err[-300:])
        cont = shlex.split(m.group(4))
        check(f"{tag}: continue command is onnx-train ... --resume X",
              cont[0] == "onnx-train" and cont[-2:] == ["--resume", m.group(3)] and "--threads" in cont, m.group(4))
        if world > 1:
            check(f"{tag}: continue command keeps --world-size", "--world-size" in cont, m.group(4))
        res = run(args, cont[1:])
        check(f"{tag}: continued run", res.returncode == 0, res.stderr[-400:])
        want = digest(os.path.join(args.workdir, ref_dir, f"epoch_{epochs:04d}.onnx"))
        got_path = os.path.join(args.workdir, int_dir, f"epoch_{epochs:04d}.onnx")
        check(f"{tag}: interrupted + resumed == uninterrupted, bitwise",
              os.path.exists(got_path) and digest(got_path) == want)
        epoch_lines = lambda s: [re.sub(r"\| [\d.]+ img/s \| [\d.]+ s$", "", l) for l in s.splitlines()
                                 if re.match(r"(\[\w+ ?\d*\] )?Epoch \d+ \|", l)]
        check(f"{tag}: resumed epoch lines count the whole epoch",
              len(epoch_lines(ref.stdout)) == epochs and epoch_lines(ref.stdout) == epoch_lines(out) + epoch_lines(res.stdout),
              f"{epoch_lines(ref.stdout)} vs {epoch_lines(out)} + {epoch_lines(res.stdout)}")
        acc = lambda s: re.search(r"test accuracy ([\d.]+)%", s).group(1) if "test accuracy" in s else None
        check(f"{tag}: same final test accuracy", acc(ref.stdout) is not None and acc(ref.stdout) == acc(res.stdout),
              f"{acc(ref.stdout)} vs {acc(res.stdout)}")


def case_second_signal(args, check):
    # ResNet34 on 28x28 with one thread: a step takes long enough for the second signal to
    # arrive while the first one waits for the step to end.
    run(args, ["make-model", "resnet34", "-o", "r34.onnx", "--input", "1x28x28"])
    for world in (1, 2):
        tag = f"world {world}"
        ckpt = f"twice{world}"
        shutil.rmtree(os.path.join(args.workdir, ckpt), ignore_errors=True)
        metrics = os.path.join(args.workdir, f"twice{world}.jsonl")
        if os.path.exists(metrics):
            os.remove(metrics)
        argv = ["r34.onnx", "--data", "synthetic:512", "--batch", "64", "--epochs", "1", "--threads", str(world),
                "--checkpoint-dir", ckpt, "--quiet", "--metrics", metrics] + (["--world-size", "2"] if world > 1 else [])
        p = subprocess.Popen([args.onnx_train, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=ENV, cwd=args.workdir)
        deadline = time.time() + 240
        while count_steps(metrics) < 1 and p.poll() is None and time.time() < deadline:
            time.sleep(0.01)
        p.send_signal(signal.SIGINT)
        time.sleep(0.1)
        p.send_signal(signal.SIGINT)
        start = time.time()
        out, err = p.communicate(timeout=240)
        check(f"second_signal {tag}: exit 130", p.returncode == 130, f"rc {p.returncode}; {out[-300:]} {err[-300:]}")
        check(f"second_signal {tag}: says it stopped at once", "interrupted again" in err, err[-300:])
        ckpt_path = os.path.join(args.workdir, ckpt)
        saved = [f for f in os.listdir(ckpt_path) if f.startswith("step_")] if os.path.isdir(ckpt_path) else []
        check(f"second_signal {tag}: saved nothing", "interrupted at epoch" not in out and not saved,
              f"{out[-300:]} {saved}")
        check(f"second_signal {tag}: ended within 5 s of it", time.time() - start < 5, f"{time.time() - start:.1f} s")


def case_resume(args, check):
    model = "simplenn.onnx"
    run(args, ["make-model", "simplenn", "-o", model, "--seed", "4"])
    common = [model, "--epochs", "2", "--max-steps", "20", "--batch", "64", "--threads", "2", "--quiet"]
    shutil.rmtree(os.path.join(args.workdir, "done"), ignore_errors=True)
    first = run(args, common + ["--checkpoint-dir", "done", "--epochs", "1", "--eval-every", "3", "--save-every", "2"])
    check("resume: warns that --eval-every/--save-every beyond --epochs are capped",
          "warning: --eval-every 3 is more than --epochs 1" in first.stdout
          and "warning: --save-every 2 is more than --epochs 1" in first.stdout, first.stdout[:600])
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


def case_eval(args, check):
    run(args, ["make-model", "simplenn", "-o", "five.onnx", "--classes", "5", "--seed", "1"])
    r = run(args, ["eval", "five.onnx"])
    check("eval: 5-class model on 10-class data is an error, exit 1",
          r.returncode == 1 and "has 10 classes but the model's output" in r.stderr and "scores only 5" in r.stderr,
          f"rc {r.returncode}; {r.stdout[-200:]} {r.stderr[-300:]}")
    check("eval: ... and prints no accuracy", "accuracy" not in r.stdout, r.stdout)
    run(args, ["make-model", "resnet34", "-o", "rgb16.onnx", "--input", "3x16x16", "--classes", "7"])
    r = run(args, ["eval", "rgb16.onnx", "--data", "synthetic:40"])
    check("eval: synthetic data takes the model's input shape (3x16x16)",
          r.returncode == 0 and re.search(r"accuracy: [\d.]+% \(\d+ of 40\)", r.stdout), r.stdout + r.stderr)
    model = "simplenn.onnx"
    run(args, ["make-model", "simplenn", "-o", model, "--seed", "4"])
    os.makedirs(os.path.join(args.workdir, "evalpc"), exist_ok=True)
    tr = run(args, [model, "--epochs", "1", "--max-steps", "100", "--batch", "64", "--threads", "2", "--quiet",
                    "--checkpoint-dir", "evalpc", "--lr", "0.05"])
    check("eval: training a model to evaluate", tr.returncode == 0, tr.stderr[-300:])
    names = ["top", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "boot"]
    with open(os.path.join(args.workdir, "evalpc", "classes.txt"), "w") as f:
        f.write("\n".join(names) + "\n")
    r = run(args, ["eval", os.path.join("evalpc", "epoch_0001.onnx"), "--per-class"])
    m = re.search(r"test accuracy: [\d.]+% \((\d+) of (\d+)\)", r.stdout)
    rows = re.findall(r"^(\d+) (\S+) +([\d.]+)% +(\d+) / (\d+)$", r.stdout, re.M)
    check("eval --per-class: exit 0, one row per class", r.returncode == 0 and m and len(rows) == 10,
          r.stdout + r.stderr)
    if m and len(rows) == 10:
        check("eval --per-class: names from classes.txt", [row[1] for row in rows] == names, str(rows))
        check("eval --per-class: 1000 test samples per class", all(int(row[4]) == 1000 for row in rows), str(rows))
        check("eval --per-class: rows add up to the overall count",
              sum(int(row[3]) for row in rows) == int(m.group(1)), f"{rows} vs {m.group(0)}")
        check("eval --per-class: percentages match the counts",
              all(abs(float(row[2]) - 100.0 * int(row[3]) / int(row[4])) < 0.006 for row in rows), str(rows))


EXPORT_SCRIPT = r"""
import sys, torch, torch.nn as nn
torch.manual_seed(3)
class CNN(nn.Module):
    def __init__(self, view):
        super().__init__()
        self.view = view
        self.c1 = nn.Conv2d(1, 4, 3, stride=2, padding=1); self.b1 = nn.BatchNorm2d(4)
        self.c2 = nn.Conv2d(4, 8, 3, stride=2, padding=1); self.b2 = nn.BatchNorm2d(8)
        self.b3 = nn.BatchNorm1d(8 * 7 * 7); self.fc = nn.Linear(8 * 7 * 7, 10)
    def forward(self, x):
        x = torch.relu(self.b1(self.c1(x)))
        x = torch.relu(self.b2(self.c2(x)))
        x = x.view(x.size(0), -1) if self.view else torch.flatten(x, 1)
        return self.fc(self.b3(x))
out = sys.argv[1]
m = CNN(view=False)
torch.save(m.state_dict(), out + "/cnn.pt")
m.eval()
x = torch.randn(2, 1, 28, 28)
# As a new user exports: defaults (eval mode, constant folding, fixed batch 2).
torch.onnx.export(m, x, out + "/eval_flatten.onnx", input_names=["input"], output_names=["logits"])
v = CNN(view=True); v.load_state_dict(m.state_dict()); v.eval()
torch.onnx.export(v, x, out + "/eval_view.onnx", input_names=["input"], output_names=["logits"])
"""


def case_exports(args, check):
    import numpy as np
    import onnx
    import onnx.numpy_helper
    import torch
    w = args.workdir
    r = subprocess.run([sys.executable, "-c", EXPORT_SCRIPT, w], capture_output=True, text=True, timeout=300)
    if not check("exports: PyTorch export", r.returncode == 0, r.stderr[-600:]):
        return
    quick = ["--data", "synthetic:16", "--epochs", "1", "--threads", "1", "--quiet", "--lr", "0.05"]
    # A Reshape holds the batch (x.view(x.size(0), -1) with the batch baked in): its target is
    # rewritten to take the batch from its input, one line says so, and the model trains at
    # any batch (the default 32 here) and with --world-size 2.
    shutil.rmtree(os.path.join(w, "fixed_ckpt"), ignore_errors=True)
    r = run(args, ["eval_view.onnx", "--checkpoint-dir", "fixed_ckpt", "--max-steps", "3",
                   "--data", "synthetic:64", "--epochs", "1", "--threads", "1", "--lr", "0.05"])
    rewritten = re.search(r"held the exported batch 2 as a constant in its target \[2, -?\d+\]; it now reshapes to "
                          r"\[(0|-1), -?\d+\]", r.stdout)
    check("exports: baked batch rewritten, trains at batch 32", r.returncode == 0 and bool(rewritten)
          and re.search(r"done: 1 epoch, 2 steps; test accuracy [\d.]+%", r.stdout) is not None,
          f"rc {r.returncode}; {r.stdout[-500:]} {r.stderr[-300:]}")
    check("exports: ... and says the batch is now symbolic",
          "the model was exported with batch fixed at 2; running it with any batch" in r.stdout, r.stdout[:600])
    shutil.rmtree(os.path.join(w, "fixed_ckpt"), ignore_errors=True)
    r = run(args, ["eval_view.onnx", "--checkpoint-dir", "fixed_ckpt", "--world-size", "2", "--batch", "3"] + quick)
    check("exports: ... with --world-size 2 at batch 3 too", r.returncode == 0, f"rc {r.returncode}; {r.stderr[-400:]}")
    r = run(args, ["check", "eval_view.onnx"])
    check("exports: check notes the rewrite", r.returncode == 0 and "it now reshapes to" in r.stdout,
          r.stdout[-400:] + r.stderr[-300:])
    # torch.flatten: the batch is rebound; BatchNorm comes back in training form.
    shutil.rmtree(os.path.join(w, "flat_ckpt"), ignore_errors=True)
    r = run(args, ["eval_flatten.onnx", "--batch", "8", "--checkpoint-dir", "flat_ckpt", "--max-steps", "2"] + quick)
    check("exports: fixed batch rebound, trains with --batch 8", r.returncode == 0, r.stdout[-400:] + r.stderr[-400:])
    check("exports: says the batch is now symbolic",
          "the model was exported with batch fixed at 2; running it with any batch" in r.stdout, r.stdout[:600])
    check("exports: says BatchNorm was restored / trained in training form",
          "PyTorch folded 2 BatchNorm layers into the convolutions" in r.stdout
          and "1 BatchNormalization node came in inference form" in r.stdout and "--frozen-bn" in r.stdout,
          r.stdout[:800])
    ckpt = os.path.join(w, "flat_ckpt", "epoch_0001.onnx")
    if check("exports: checkpoint written", os.path.exists(ckpt)):
        m = onnx.load(ckpt)
        check("exports: checkpoint's batch dimension is symbolic",
              m.graph.input[0].type.tensor_type.shape.dim[0].dim_param != "", str(m.graph.input[0]))
        check("exports: checkpoint has 3 BatchNormalization nodes",
              sum(n.op_type == "BatchNormalization" for n in m.graph.node) == 3,
              str([n.op_type for n in m.graph.node]))
        inits = {t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer}
        check("exports: b3's running mean is its own state and was updated",
              "b3.running_mean" in inits and np.abs(inits["b3.running_mean"]).max() > 0, str(sorted(inits)))
    # grad against PyTorch float64: train() mode by default, eval() mode with --frozen-bn.
    sd = torch.load(os.path.join(w, "cnn.pt"))
    ns = {}
    exec(EXPORT_SCRIPT.split("out = sys.argv[1]")[0], ns)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((8, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, 8).astype(np.int64)
    onnx.save_tensor(onnx.numpy_helper.from_array(x, "input"), os.path.join(w, "x.pb"))
    onnx.save_tensor(onnx.numpy_helper.from_array(y, "labels"), os.path.join(w, "y.pb"))

    def torch_loss_grad(dtype, train):
        m = ns["CNN"](view=False)
        m.load_state_dict(sd)
        m = m.to(dtype).train(train)
        loss = torch.nn.functional.cross_entropy(m(torch.from_numpy(x).to(dtype)), torch.from_numpy(y))
        loss.backward()
        return loss.item(), m.fc.weight.grad.double().numpy()

    for frozen in (False, True):
        tag = "--frozen-bn" if frozen else "default"
        out_dir = os.path.join(w, "grad_frozen" if frozen else "grad")
        r = run(args, ["grad", "eval_flatten.onnx", "--input", "input=x.pb", "--input", "labels=y.pb", "-o", out_dir,
                       "--threads", "1"] + (["--frozen-bn"] if frozen else []))
        if not check(f"exports: grad ({tag})", r.returncode == 0, r.stderr[-400:]):
            continue
        loss = float(onnx.numpy_helper.to_array(onnx.load_tensor(os.path.join(out_dir, "loss.pb"))))
        gw = onnx.numpy_helper.to_array(onnx.load_tensor(os.path.join(out_dir, "fc.weight.pb"))).astype(np.float64)
        l64, g64 = torch_loss_grad(torch.float64, train=not frozen)
        l32, g32 = torch_loss_grad(torch.float32, train=not frozen)
        tol = max(1e-4, 3 * abs(l32 - l64))
        check(f"exports: grad ({tag}) loss = PyTorch {'eval' if frozen else 'train'}() mode",
              abs(loss - l64) <= tol, f"ours {loss} torch64 {l64} tol {tol}")
        err = np.abs(gw - g64).max() / max(np.abs(g64).max(), 1e-12)
        err32 = np.abs(g32 - g64).max() / max(np.abs(g64).max(), 1e-12)
        check(f"exports: grad ({tag}) fc.weight gradient = PyTorch's", err <= max(1e-4, 3 * err32),
              f"relative error {err:.2e}, PyTorch float32's {err32:.2e}")
    shutil.rmtree(os.path.join(w, "frozen_ckpt"), ignore_errors=True)
    r = run(args, ["eval_flatten.onnx", "--batch", "8", "--checkpoint-dir", "frozen_ckpt", "--max-steps", "2",
                   "--frozen-bn"] + quick)
    check("exports: --frozen-bn trains and says so", r.returncode == 0 and
          "--frozen-bn: 1 BatchNormalization node normalises with its running statistics" in r.stdout,
          r.stdout[-400:] + r.stderr[-400:])
    ckpt = os.path.join(w, "frozen_ckpt", "epoch_0001.onnx")
    if os.path.exists(ckpt):
        inits = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(ckpt).graph.initializer}
        check("exports: --frozen-bn keeps the running statistics, trains the scale",
              np.array_equal(inits.get("b3.running_mean"), sd["b3.running_mean"].numpy())
              and np.array_equal(inits.get("b3.running_var"), sd["b3.running_var"].numpy())
              and not np.array_equal(inits.get("b3.weight"), sd["b3.weight"].numpy()), "")


CASES = {"interrupt": case_interrupt, "second_signal": case_second_signal, "resume": case_resume, "dp_output": case_dp_output, "eval": case_eval, "exports": case_exports}


def main():
    p = test_parser(__doc__)
    p.add_argument("--only", default="", help="comma-separated case names")
    args = test_args(p, fresh=True)
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
