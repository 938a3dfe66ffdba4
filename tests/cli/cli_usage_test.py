#!/usr/bin/env python3
"""The program explains itself: --help and -h on every command (usage on stdout, exit 0),
--version, usage errors as one short line that points to the command's --help, and
"did you mean" for near-miss flags and commands.

Run by CTest (target cli_usage_test); by hand:
    python3 tests/cli/cli_usage_test.py --onnx-train build/tools/onnx-train --workdir /tmp/cu
"""
import os
import re
import sys

from cli_checks import Checks, cli_test_args, run

COMMANDS = ["train", "eval", "infer", "grad", "export", "make-model", "dump-batch", "bench-comm", "check"]


def main():
    args = cli_test_args(__doc__)
    checks = Checks("cli_usage_test")
    expect = checks.expect

    for cmd in COMMANDS:
        for flag in ("--help", "-h"):
            r = run(args.onnx_train, cmd, flag)
            expect(r.returncode == 0, f"{cmd} {flag}: exit {r.returncode}, stderr {r.stderr.strip()[:200]}")
            expect(r.stdout.startswith("usage: onnx-train"), f"{cmd} {flag}: stdout does not start with usage: "
                   f"{r.stdout[:80]!r}")
            expect(r.stderr == "", f"{cmd} {flag}: wrote to stderr: {r.stderr[:200]!r}")
            if cmd != "train":
                expect(cmd in r.stdout.splitlines()[0], f"{cmd} {flag}: usage line does not name the command")
    r = run(args.onnx_train, "help", "eval")
    expect(r.returncode == 0 and "onnx-train eval" in r.stdout, "help eval")
    r = run(args.onnx_train, "model.onnx", "-h")
    expect(r.returncode == 0 and "--epochs" in r.stdout, "MODEL.onnx -h: train's usage")
    r = run(args.onnx_train, "--version")
    expect(r.returncode == 0 and re.fullmatch(r"onnx-train \d+\.\d+\.\d+\n", r.stdout), f"--version: {r.stdout!r}")

    def expect_error(argv, fragments, max_len=300):
        r = run(args.onnx_train, *argv)
        lines = r.stderr.strip().splitlines()
        ok = r.returncode == 1 and len(lines) == 1 and lines[0].startswith("onnx-train: error: ")
        expect(ok, f"{argv}: exit {r.returncode}, stderr {r.stderr[:300]!r}")
        if lines:
            expect(len(lines[-1]) <= max_len, f"{argv}: error line of {len(lines[-1])} characters")
            for f in fragments:
                expect(f in lines[-1], f"{argv}: {f!r} not in {lines[-1]!r}")

    model = os.path.join(args.workdir, "m.onnx")
    expect_error(["model.onnx", "--epoch", "3"], ["--epoch", "did you mean --epochs?", "see onnx-train train --help"])
    expect_error(["model.onnx", "--max-step", "3"], ["did you mean --max-steps?"])
    expect_error(["train", "model.onnx", "--batchsize", "3"], ["did you mean --batch?"])
    # torchvision's names are aliases of ours: --batch-size reaches the model check, not the flag parser.
    expect_error(["train", "model.onnx", "--batch-size", "3"], ["model.onnx"])
    expect_error(["eval", "m.onnx", "--dat", "x"], ["did you mean --data?", "see onnx-train eval --help"])
    expect_error(["export", "m.onnx", "--foo"], ["unknown option --foo (see onnx-train export --help)"])
    expect_error(["evl", "m.onnx"], ["unknown command 'evl'", "did you mean eval?"])
    expect_error(["train"], ["training needs exactly one MODEL.onnx", "see onnx-train train --help"])
    expect_error(["train", "a.onnx", "b.onnx"], ["see onnx-train train --help"])
    expect_error(["grad"], ["grad needs exactly one MODEL.onnx", "see onnx-train grad --help"])
    expect_error(["train", model, "--epochs"], ["--epochs needs a value", "see onnx-train train --help"])
    return checks.report()


if __name__ == "__main__":
    sys.exit(main())
