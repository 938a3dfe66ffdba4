"""The comparison the per-family PyTorch parity scripts share: onnx-train's float32
gradients against PyTorch float64, each tensor held to max(1e-4, 3x PyTorch float32's own
distance) by norm (denominator floored at 1e-3), and the exported training graph checked
by the ONNX checker."""
import os
import subprocess

import numpy as np
import onnx

from ot_cli import test_args as parity_args  # noqa: F401  (same folder)


def compare_gradients(ours, ref_loss, ref, ref32, loss_tol):
    """ours: onnx-train's tensors (with "loss"); ref/ref32: PyTorch float64/float32 gradients.
    Returns (failures, loss_err, worst, worst_name, worst_t32)."""
    failures = []
    loss = float(ours["loss"])
    loss_err = abs(loss - ref_loss) / abs(ref_loss)
    if loss_err > loss_tol:
        failures.append(f"loss {loss} vs torch {ref_loss}")
    worst, worst_name, worst_t32 = 0.0, "", 0.0
    for name, g in ref.items():
        if name not in ours:
            failures.append("no gradient for " + name)
            continue
        a = ours[name].astype(np.float64)
        if a.shape != g.shape:
            failures.append(f"{name}: shape {a.shape} vs torch {g.shape}")
            continue
        scale = max(np.linalg.norm(g), 1e-3)
        err = float(np.linalg.norm(a - g) / scale)
        t32 = float(np.linalg.norm(ref32[name] - g) / scale)
        if err > worst:
            worst, worst_name = err, name
        worst_t32 = max(worst_t32, t32)
        if err > max(1e-4, 3 * t32):
            failures.append(f"{name}: {err:.2e} from float64 by norm (torch float32: {t32:.2e})")
    return failures, loss_err, worst, worst_name, worst_t32


def export_failures(onnx_train, model_path, training_path, options=()):
    """`onnx-train export` of the model (with export `options`); the training graph must pass
    the ONNX checker with shape inference. Returns a list of failure lines (empty when fine)."""
    proc = subprocess.run([onnx_train, "export", model_path, "-o", training_path] + list(options),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return ["export failed: " + (proc.stderr.strip().splitlines() or ["exit %d" % proc.returncode])[-1][:300]]
    try:
        onnx.checker.check_model(onnx.load(training_path), full_check=True)
    except Exception as e:  # noqa: BLE001  (the checker raises several types)
        return ["the ONNX checker rejects the exported training graph: " + str(e).splitlines()[0][:300]]
    finally:
        if os.path.exists(training_path):
            os.remove(training_path)
    return []


def report_case(tag, summary, failures):
    """One case's line (`summary` then ok/FAILED) and its first failures; True when it passed."""
    print(f"  {tag:<22} {summary}  {'ok' if not failures else 'FAILED'}", flush=True)
    for f in failures[:8]:
        print("    " + f)
    return not failures


def run_cases(script, cases):
    """Runs (label, check) pairs, check() -> bool; an onnx-train failure (RuntimeError) fails
    its case. Prints the tally; returns the exit status."""
    import time
    start = time.time()
    passed = failed = 0
    for label, check in cases:
        try:
            ok = check()
        except RuntimeError as e:
            print(f"  {label}: onnx-train failed: {e}")
            ok = False
        passed += ok
        failed += not ok
    print(f"{script}: {passed} passed, {failed} failed in {time.time() - start:.1f} s")
    return 0 if failed == 0 else 1
