"""What the command-driving test scripts share: a tally of named checks, printed one line
each, that decides the exit status (ot_cli.test_args(..., fresh=True) gives the fresh work
folder)."""


class Checks:
    """checks(name, ok, detail) prints "  name  ok|FAILED detail", counts it and returns ok. With
    detail_on_failure, a passing check's detail shows only when it starts with "(" (a figure)."""

    def __init__(self, width=66, detail_on_failure=False):
        self.width, self.detail_on_failure = width, detail_on_failure
        self.passed = self.failed = 0

    def __call__(self, name, ok, detail=""):
        shown = detail if not ok or not self.detail_on_failure or detail.startswith("(") else ""
        print(f"  {name:<{self.width}} {'ok' if ok else 'FAILED'} {shown}", flush=True)
        self.passed += bool(ok)
        self.failed += not ok
        return ok

    def that(self, ok, name, detail=""):
        """The same with the condition first: checks.that(x == y, "x equals y")."""
        return self(name, ok, detail)

    def finish(self, title):
        print(f"{title}: {self.passed} passed, {self.failed} failed")
        return 0 if self.failed == 0 else 1
