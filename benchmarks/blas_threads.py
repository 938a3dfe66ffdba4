"""Holds PyTorch's BLAS to the benchmark's thread count.

Debian's PyTorch runs matrix products on OpenBLAS, whose own thread pool ignores
torch.set_num_threads: a "1 thread" PyTorch side used every core for them (torchvision's ViT
step at batch 128 took 1.8 s with both cores of a 2-core machine, 2.6 s with one), and slowed
whatever shared the machine. OpenBLAS reads its thread count once, as it loads, so call
hold_blas_threads before importing torch.
"""
import os
import sys


def hold_blas_threads(default):
    """Sets OPENBLAS_NUM_THREADS (and OMP_NUM_THREADS) to the command line's --threads N or
    --threads=N, else `default`, unless the environment already sets them."""
    threads = str(default)
    for i, arg in enumerate(sys.argv):
        if arg == "--threads" and i + 1 < len(sys.argv):
            threads = sys.argv[i + 1]
        elif arg.startswith("--threads="):
            threads = arg.split("=", 1)[1]
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        os.environ.setdefault(var, threads)
