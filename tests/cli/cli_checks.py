"""Shared by the command-line tests (cli_usage_test, cli_flag_table_test): the arguments
CTest gives them, running onnx-train, and a tally of checks that prints one summary line
and every failure."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # the shared helpers
from ot_cli import call, test_args as cli_test_args  # noqa: E402,F401


def run(binary, *args, env=None, timeout=60):
    return call([binary, *args], timeout=timeout, env=env)


class Checks:
    def __init__(self, name):
        self.name = name
        self.count = 0
        self.failures = []

    def expect(self, cond, what):
        self.count += 1
        if not cond:
            self.failures.append(what)

    def report(self):
        """Prints the tally; returns the exit status."""
        print(f"{self.name}: {self.count - len(self.failures)} passed, {len(self.failures)} failed")
        for f in self.failures:
            print("  FAILED: " + f)
        return 1 if self.failures else 0
