"""The smaller onnx-train commands through the command line, each against an independent
reference (cli_usage_test.py covers their help and option errors, first_hour_test.py `eval`):

- `check`: prints the model's inputs, outputs and op counts as the onnx package reads them;
  a model with an op the runtime lacks is reported and exits non-zero; a PyTorch export with
  LayerNorm and GELU decomposed (opset 13) gets a note counting what training fuses.
- `dump-batch`: the samples and labels of Fashion-MNIST read here from the IDX files
  (gzip + numpy), normalised with the data set's mean/std, at the asked offset.
- `export --optimizer adam|adagrad [--weight-decay W]`: the exported training graph run with
  `onnx-train infer` for two steps (parameters and optimizer state fed back) gives the
  parameters torch.optim.Adam / Adagrad reach from the same weights and batches, float64,
  within 1e-5 (Adam's epsilon set per step so that torch adds it where ONNX's Adam does).
- `bench-comm --backend gloo --world-size 2`: one row per size, every `wrong` entry 0 and
  busbw equal to algbw (2(n-1)/n = 1 for two ranks).
"""
import gzip
import os
import re
import subprocess
import sys

import numpy as np
import onnx
import onnx.numpy_helper as nh
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # the shared helpers
from check_tally import Checks  # noqa: E402
from ot_cli import test_args, test_parser  # noqa: E402

FASHION = "/usr/share/datasets/fashion-mnist"


def main():
    p = test_parser(__doc__)
    args = test_args(p, fresh=True)
    w = args.workdir
    check = Checks(width=70)

    def run(*cmd):
        return subprocess.run([args.onnx_train, *cmd], capture_output=True, text=True, cwd=w, timeout=300)

    simplenn = os.path.join(w, "simplenn.onnx")
    run("make-model", "simplenn", "-o", simplenn, "--seed", "5")

    # --- check ---
    r = run("check", simplenn)
    m = onnx.load(simplenn)
    ops = {}
    for n in m.graph.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    want = [f"input  {i.name}" for i in m.graph.input if i.name not in {t.name for t in m.graph.initializer}]
    want += [f"output {o.name}" for o in m.graph.output]
    want += [f"op     {k} x{v}" for k, v in sorted(ops.items())]
    check("check: exit 0, every input/output/op of the model listed",
          r.returncode == 0 and all(line in r.stdout for line in want) and "every op has a CPU kernel" in r.stdout,
          f"rc {r.returncode}; want {want}; got {r.stdout}{r.stderr}")
    bad = onnx.load(simplenn)
    bad.graph.node[0].op_type = "NoSuchOp"
    onnx.save(bad, os.path.join(w, "bad.onnx"))
    r = run("check", "bad.onnx")
    check("check: an op without a kernel is named, exit non-zero",
          r.returncode != 0 and "NoSuchOp" in r.stdout + r.stderr, f"rc {r.returncode}; {r.stdout}{r.stderr}")

    # --training: the whole training graph's ops (loss, gradients, AdamW) have CPU kernels.
    r = run("check", simplenn, "--training", "--optimizer", "adamw")
    check("check --training --optimizer adamw: the training graph's ops all have CPU kernels",
          r.returncode == 0 and "ok: every op of its training graph (adamw) has a CPU kernel" in r.stdout,
          f"rc {r.returncode}; {r.stdout}{r.stderr}")
    # --device cuda needs no GPU: it lists the ops without a CUDA kernel (CumSum has none), or
    # says the build has no CUDA kernels at all.
    class CumSum(torch.nn.Module):
        def forward(self, x):
            return torch.cumsum(x, dim=1)

    torch.onnx.export(CumSum(), torch.randn(2, 5, 4), os.path.join(w, "cumsum.onnx"), opset_version=13,
                      input_names=["x"], output_names=["y"])
    r = run("check", "cumsum.onnx", "--device", "cuda")
    if "built without CUDA kernels" in r.stderr:
        check("check --device cuda on a build without CUDA: one line saying so, exit non-zero",
              r.returncode != 0 and r.stderr.count("error:") == 1, f"rc {r.returncode}; {r.stderr}")
    else:
        check("check --device cuda: the op without a CUDA kernel is listed, exit 1",
              r.returncode == 1 and "missing CumSum (opset 13) x1" in r.stdout, f"rc {r.returncode}; {r.stdout}{r.stderr}")
        r = run("check", simplenn, "--device", "cuda")
        check("check --device cuda: SimpleNN's ops all have CUDA kernels",
              r.returncode == 0 and "has a CUDA kernel" in r.stdout, f"rc {r.returncode}; {r.stdout}{r.stderr}")

    # A PyTorch export at opset 13 with LayerNorm and GELU decomposed: the note counts them.
    ln_gelu = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 16), torch.nn.LayerNorm(16),
                                  torch.nn.GELU(), torch.nn.LayerNorm(16), torch.nn.Linear(16, 10))
    torch.onnx.export(ln_gelu, torch.randn(2, 1, 28, 28), os.path.join(w, "ln_gelu.onnx"), opset_version=13,
                      input_names=["input"], dynamic_axes={"input": {0: "N"}})
    r = run("check", "ln_gelu.onnx")
    check("check: notes that training fuses 1 GELU and 2 LayerNorm decompositions",
          r.returncode == 0 and "training fuses 1 GELU, 2 LayerNorm and 0 attention" in r.stdout, f"rc {r.returncode}; {r.stdout}{r.stderr}")

    # --- dump-batch ---
    r = run("dump-batch", "--split", "test", "--count", "6", "--offset", "17", "-o", "batch")
    if check("dump-batch: exit 0", r.returncode == 0, r.stderr):
        x = nh.to_array(onnx.load_tensor(os.path.join(w, "batch", "input.pb")))
        y = nh.to_array(onnx.load_tensor(os.path.join(w, "batch", "labels.pb")))
        with gzip.open(os.path.join(FASHION, "t10k-images-idx3-ubyte.gz")) as f:
            images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
        with gzip.open(os.path.join(FASHION, "t10k-labels-idx1-ubyte.gz")) as f:
            labels = np.frombuffer(f.read(), np.uint8, offset=8)
        ref = (images[17:23].astype(np.float64) / 255.0 - 0.2860) / 0.3530
        check("dump-batch: float [6,1,28,28], int64 [6]",
              x.dtype == np.float32 and x.shape == (6, 1, 28, 28) and y.dtype == np.int64 and y.shape == (6,),
              f"{x.dtype} {x.shape} {y.dtype} {y.shape}")
        check("dump-batch: labels 17..22 of the test split", np.array_equal(y, labels[17:23]), f"{y} vs {labels[17:23]}")
        if x.shape == ref.shape:
            err = float(np.abs(x - ref).max())
            check("dump-batch: samples 17..22 normalised (mean 0.2860, std 0.3530)", err < 1e-5, f"max |diff| {err}")

    # --- export --optimizer adam|adagrad, run by infer, against torch.optim ---
    rng = np.random.default_rng(3)
    batches = [(rng.standard_normal((8, 1, 28, 28)).astype(np.float32), rng.integers(0, 10, 8).astype(np.int64))
               for _ in range(2)]
    weights = {t.name: nh.to_array(t) for t in m.graph.initializer}
    lr = 0.01
    for opt, extra in [("adam", []), ("adam", ["--weight-decay", "0.05"]), ("adagrad", []),
                       ("adagrad", ["--weight-decay", "0.05"])]:
        wd = float(extra[1]) if extra else 0.0
        label = f"export --optimizer {opt}" + (f" --weight-decay {wd}" if wd else "")
        name = f"train_{opt}_{len(extra)}"
        r = run("export", simplenn, "-o", name + ".onnx", "--optimizer", opt, *extra)
        if not check(f"{label}: exit 0", r.returncode == 0, r.stderr):
            continue
        tg = onnx.load(os.path.join(w, name + ".onnx"))
        state = {t.name: nh.to_array(t) for t in tg.graph.initializer}
        optim_nodes = [n for n in tg.graph.node if n.domain == "ai.onnx.preview.training"]
        check(f"{label}: one {opt.capitalize()} node per parameter",
              sorted(n.op_type for n in optim_nodes) == [opt.capitalize()] * len(weights), str(optim_nodes)[:300])
        # Two steps through `infer`, the parameters and optimizer state of each step written
        # back into the graph's initializers for the next.
        for step, (xb, yb) in enumerate(batches):
            for t in tg.graph.initializer:
                t.CopyFrom(nh.from_array(state[t.name], t.name))
            model_path = f"{name}_step{step}.onnx"
            onnx.save(tg, os.path.join(w, model_path))
            d = os.path.join(w, f"{name}_in{step}")
            os.makedirs(d, exist_ok=True)
            cmd = ["infer", model_path, "-o", f"{name}_out{step}"]
            feeds = {"input": xb, "labels": yb, "lr": np.array(lr, np.float32), "step": np.array(step + 1, np.int64)}
            for k, v in feeds.items():
                f = os.path.join(d, k + ".pb")
                with open(f, "wb") as fh:
                    fh.write(nh.from_array(v, k).SerializeToString())
                cmd += ["--input", f"{k}={f}"]
            r = run(*cmd)
            if not check(f"{label}: infer step {step}", r.returncode == 0, r.stderr[-400:]):
                break
            outs = {}
            for f in os.listdir(os.path.join(w, f"{name}_out{step}")):
                t = onnx.load_tensor(os.path.join(w, f"{name}_out{step}", f))
                outs[t.name] = nh.to_array(t)
            new_names = {k: k + "/new" for k in state if k + "/new" in {o.name for o in tg.graph.output}}
            if not check(f"{label}: step {step} wrote the new parameters and state",
                         len(new_names) == len(state) - 1 and all(v in outs for v in new_names.values()),
                         f"{sorted(outs)} vs {sorted(new_names.values())}"):
                break
            for k, v in new_names.items():
                state[k] = outs[v]
        else:
            # PyTorch float64 from the same weights and batches.
            lin = torch.nn.Linear(784, 10).double()
            with torch.no_grad():
                lin.weight.copy_(torch.tensor(weights["fc.weight"], dtype=torch.float64))
                lin.bias.copy_(torch.tensor(weights["fc.bias"], dtype=torch.float64))
            if opt == "adam":
                o = torch.optim.Adam(lin.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=wd)
            else:
                o = torch.optim.Adagrad(lin.parameters(), lr=lr, eps=1e-10, weight_decay=wd)
            for t, (xb, yb) in enumerate(batches, start=1):
                if opt == "adam":
                    # ONNX's Adam adds epsilon to sqrt(v) after bias correction, torch to
                    # sqrt(v / (1 - beta2^t)): this epsilon makes torch's step the ONNX one.
                    o.param_groups[0]["eps"] = 1e-8 / np.sqrt(1 - 0.999 ** t)
                o.zero_grad()
                loss = torch.nn.functional.cross_entropy(lin(torch.tensor(xb, dtype=torch.float64).flatten(1)),
                                                         torch.tensor(yb))
                loss.backward()
                o.step()
            for k, ref in [("fc.weight", lin.weight), ("fc.bias", lin.bias)]:
                ref = ref.detach().numpy()
                moved = float(np.abs(ref - weights[k]).max())
                err = float(np.abs(state[k] - ref).max())
                check(f"{label}: {k} after 2 steps (moved {moved:.2e}) within 1e-5 of torch float64",
                      err < 1e-5 and moved > 1e-3, f"max |diff| {err:.3e}")

    # --- bench-comm --backend gloo ---
    r = run("bench-comm", "--backend", "gloo", "--world-size", "2", "--max-bytes", "65536", "--iters", "5")
    rows = re.findall(r"^\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+(\S+)$", r.stdout, re.M)
    check("bench-comm gloo: exit 0, world size 2, rows for 4 B .. 64 KiB (x4)",
          r.returncode == 0 and "world size 2" in r.stdout
          and [int(row[0]) for row in rows] == [4 * 4 ** i for i in range(8)], r.stdout + r.stderr)
    check("bench-comm gloo: elements = bytes / 4", all(int(a) == 4 * int(b) for a, b, *_ in rows), str(rows))
    check("bench-comm gloo: every 'wrong' is 0", rows and all(row[5] == "0" for row in rows), str(rows))
    check("bench-comm gloo: busbw = algbw for 2 ranks", all(row[3] == row[4] for row in rows), str(rows))

    print(f"cli_commands_test: {check.passed} passed, {check.failed} failed")
    return 0 if check.failed == 0 and check.passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
