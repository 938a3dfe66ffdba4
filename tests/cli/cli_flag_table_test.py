#!/usr/bin/env python3
"""The command line is declared as tables (tools/flag_table.h, tools/main.cc): every
command's --help names every flag of its table, a flag that a command does not take is
an error naming the flag and the command (exit 1), and every command still dispatches.

Run by CTest (target cli_flag_table_test); by hand:
    python3 tests/cli/cli_flag_table_test.py --onnx-train build/tools/onnx-train --workdir /tmp/cft
"""
import os
import re
import shutil
import sys

from cli_checks import Checks, cli_test_args, run

COMMANDS = ["train", "eval", "infer", "grad", "export", "make-model", "dump-batch", "bench-comm", "check"]


def names(text, flag):
    """Whether the usage text names --flag (or -o) as a whole word."""
    word = "-o" if flag == "o" else "--" + flag
    return re.search(r"(?<![\w-])" + re.escape(word) + r"(?![\w-])", text) is not None


def main():
    args = cli_test_args(__doc__)
    checks = Checks("cli_flag_table_test")
    expect = checks.expect

    r = run(args.onnx_train, "--list-flags")
    expect(r.returncode == 0, f"--list-flags: exit {r.returncode}")
    table = {}
    for line in r.stdout.splitlines():
        cmd, flag = line.split()[:2]
        table.setdefault(cmd, set()).add(flag[2:])
    expect(sorted(table) == sorted(COMMANDS), f"commands with flags: {sorted(table)}")
    expect(len(table.get("train", ())) >= 80, f"train has {len(table.get('train', ()))} flags")

    # Usage: each command's --help names every flag of its table; the program's --help
    # names every command.
    top = run(args.onnx_train, "--help").stdout
    for cmd in COMMANDS:
        expect(re.search(r"^  " + re.escape(cmd) + r"\b", top, re.M), f"--help does not list {cmd}")
        r = run(args.onnx_train, cmd, "--help")
        expect(r.returncode == 0 and r.stdout.startswith("usage: onnx-train"), f"{cmd} --help: exit {r.returncode}")
        for flag in sorted(table.get(cmd, ())):
            expect(names(r.stdout, flag), f"{cmd} --help does not name --{flag}")

    # A flag another command takes, given to one that does not: rejected, naming both.
    r = run(args.onnx_train, "eval", "m.onnx", "--lr", "0.1")
    line = r.stderr.strip()
    expect(r.returncode == 1, f"eval --lr: exit {r.returncode}")
    expect(line.startswith("onnx-train: error: ") and "--lr" in line and "eval" in line,
           f"eval --lr: {line!r}")
    expect("train" in line, f"eval --lr does not say train takes it: {line!r}")
    for flag in ("hflip", "mixup-alpha", "label-smoothing", "model-ema"):  # training-only, once ignored by eval
        r = run(args.onnx_train, "eval", "m.onnx", "--" + flag, "1")
        expect(r.returncode == 1 and f"--{flag}" in r.stderr and "eval" in r.stderr,
               f"eval --{flag}: exit {r.returncode}, {r.stderr.strip()!r}")
    all_flags = set().union(*table.values())
    for cmd in COMMANDS:
        foreign = sorted(all_flags - table.get(cmd, set()) - {"o", "input"})
        flag = foreign[0]
        r = run(args.onnx_train, cmd, "x.onnx", "--" + flag, "1")
        expect(r.returncode == 1 and f"--{flag}" in r.stderr and f" for {cmd}" in r.stderr,
               f"{cmd} --{flag}: exit {r.returncode}, {r.stderr.strip()!r}")
    # A near miss still gets its suggestion.
    r = run(args.onnx_train, "eval", "m.onnx", "--dat", "x")
    expect(r.returncode == 1 and "did you mean --data?" in r.stderr, f"eval --dat: {r.stderr.strip()!r}")

    # Dispatch: every command runs its own handler (its own first check, not "unknown command").
    own_error = {
        "train": "training needs exactly one MODEL.onnx",
        "eval": "eval needs exactly one MODEL.onnx",
        "infer": "infer needs exactly one MODEL.onnx",
        "grad": "grad needs exactly one MODEL.onnx",
        "export": "export needs exactly one MODEL.onnx",
        "make-model": "make-model needs a model name",
        "dump-batch": "dump-batch needs -o DIR",
        "bench-comm": "bench-comm takes no positional arguments",
        "check": "check needs exactly one MODEL.onnx",
    }
    for cmd in COMMANDS:
        argv = [cmd, "a", "b"] if cmd == "bench-comm" else [cmd]
        r = run(args.onnx_train, *argv)
        expect(r.returncode == 1 and own_error[cmd] in r.stderr, f"{cmd}: {r.stderr.strip()!r}")
    r = run(args.onnx_train, "missing.onnx", "--epochs", "1")
    expect(r.returncode == 1 and "missing.onnx" in r.stderr, f"MODEL.onnx trains: {r.stderr.strip()!r}")
    model = os.path.join(args.workdir, "s.onnx")
    r = run(args.onnx_train, "make-model", "simplenn", "-o", model)
    expect(r.returncode == 0, f"make-model: {r.stderr.strip()!r}")
    r = run(args.onnx_train, "check", model)
    expect(r.returncode == 0 and "ok:" in r.stdout, f"check: {r.stderr.strip()!r}")

    # --backend mpi as root: the launcher tells mpirun what Open MPI needs, in one line.
    if shutil.which("mpirun") and os.geteuid() == 0:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OMPI_ALLOW_RUN_AS_ROOT")}
        r = run(args.onnx_train, "bench-comm", "--backend", "mpi", "--world-size", "2", "--max-bytes", "4096",
                env=env, timeout=120)
        if "no MPI backend" not in r.stderr and "-DONNXTRAIN_MPI" not in r.stderr:
            expect(r.returncode == 0 and "--allow-run-as-root" in r.stdout and "busbw" in r.stdout,
                   f"bench-comm --backend mpi as root: exit {r.returncode}, {(r.stdout + r.stderr)[-300:]!r}")

    return checks.report()


if __name__ == "__main__":
    sys.exit(main())
