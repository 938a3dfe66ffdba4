"""The PyTorch installs a speed benchmark measures beside onnx-train in the same run.

PyTorch 2.x is the benchmark peer: the venv of scripts/install-torch2.sh (pinned torch 2.x
from PyPI, /var/cache/onnx-train/torch2 unless TORCH2_PYTHON says otherwise). Debian's
PyTorch 1.13 (/usr/bin/python3, python3-torch) runs beside it, so that both ratios come from
one run. A missing venv is skipped with a line that says so; Debian's torch is required.
"""
import os
import subprocess
import sys

TORCH2_VENV_PYTHON = "/var/cache/onnx-train/torch2/bin/python"
PROBE = "import torch, torchvision; print(torch.__version__)"


class Peer:
    """One PyTorch: `key` names its JSON fields (torch2, torch1), `label` its table columns."""

    def __init__(self, key, python, version):
        self.key, self.python, self.version = key, python, version
        self.label = "t" + ".".join(version.split("+")[0].split(".")[:2])  # t2.15, t1.13

    def __repr__(self):
        return f"{self.key}: pytorch-{self.version} ({self.python})"


def default_torch2_python():
    return os.environ.get("TORCH2_PYTHON", TORCH2_VENV_PYTHON)


def probe(python):
    """torch's version under `python`, or None with the reason."""
    if not python:
        return None, "not asked for"
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        return None, f"no {python} (scripts/install-torch2.sh makes it)"
    # From /tmp: a `torch` folder in the current directory would shadow the package.
    out = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, cwd="/tmp")
    if out.returncode != 0:
        return None, f"{python} cannot import torch and torchvision: {out.stderr.strip()[-200:]}"
    return out.stdout.strip().splitlines()[-1], ""


def find_peers(torch2_python, torch1_python, log=None):
    """[Peer] in table order, PyTorch 2.x first. Prints a line per peer (skips included) to
    `log` (stdout by default). Exits if Debian's PyTorch cannot run."""
    log = log or sys.stdout
    peers = []
    version, why = probe(torch2_python)
    if version is None:
        print(f"# PyTorch 2.x peer skipped: {why}", file=log, flush=True)
    elif not version.startswith("2."):
        print(f"# PyTorch 2.x peer skipped: {torch2_python} has torch {version}", file=log, flush=True)
    else:
        peers.append(Peer("torch2", torch2_python, version))
    version, why = probe(torch1_python)
    if version is None:
        sys.exit(f"# Debian's PyTorch cannot run: {why}")
    peers.append(Peer("torch1", torch1_python, version))
    for p in peers:
        print(f"# peer {p.label} = pytorch-{p.version} ({p.python})", file=log, flush=True)
    return peers


def fmt(value, width, digits):
    """A number right-aligned in `width`, or '-' where there is none; a ratio below 0.1 keeps
    two significant digits rather than showing 0.00."""
    if value is None or value != value:
        return f"{'-':>{width}}"
    if 0 < abs(value) < 0.1 and digits == 2:
        return f"{value:>{width}.2g}"
    return f"{value:>{width}.{digits}f}"


def time_columns(peers, ms_width, ratio_width, digits, tag=""):
    """Table columns of each peer's step time and ours/peer, PyTorch 2.x first; `tag` (" bf16")
    goes into the titles."""
    cols = []
    for p in peers:
        cols += [(f"{p.label}{tag} ms", ms_width, f"{p.key}_ms", digits),
                 (f"ours/{p.label}{tag}", ratio_width, f"ours_vs_{p.key}", 2)]
    return cols


def rss_columns(peers, width, ratio_width=0):
    """Table columns of each peer's peak RSS and, with ratio_width, ours/peer."""
    cols = []
    for p in peers:
        cols.append((f"{p.label} MB", width, f"{p.key}_rss_mb", 0))
        if ratio_width:
            cols.append((f"ours/{p.label}", ratio_width, f"ours_vs_{p.key}_rss", 2))
    return cols


def print_table(columns, rows):
    """columns: (title, width, row key, digits), digits None for left-aligned text."""
    print(" ".join(f"{t:<{w}}" if d is None else f"{t:>{w}}" for t, w, _, d in columns))
    for r in rows:
        print(" ".join(f"{str(r.get(k, '')):<{w}}" if d is None else fmt(r.get(k), w, d) for _, w, k, d in columns))


def print_errors(rows):
    """A line for each `<who>_error` field of the rows: which side failed, and why."""
    for r in rows:
        for k, v in r.items():
            if k.endswith("_error"):
                where = " ".join(f"{f} {r[f]}" for f in ("batch", "amp") if f in r)
                print(f"# {r['model']} {where}: {k[:-len('_error')]} failed: {v}")
