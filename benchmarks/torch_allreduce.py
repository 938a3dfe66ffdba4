#!/usr/bin/env python3
"""torch.distributed's side of the allreduce benchmark (scripts/bench-comm.sh): a float32 sum
allreduce over the Gloo backend among N local processes, for message sizes from --min-bytes
to --max-bytes (times 4 each step), in the columns `onnx-train bench-comm` and nccl-tests use.

    python3 benchmarks/torch_allreduce.py [--world-size 2] [--min-bytes 4] [--max-bytes 67108864]
                                          [--iters 20] [--warmup 3] [--port 29531] [--json]

Rank 0 prints a header line starting with "bytes", then one line per size:
    bytes  time_us  algbw_GBps  busbw_GBps
(algbw = bytes / time in 1e9 bytes per second; busbw = algbw * 2 (n - 1) / n, the ring's
traffic per link). A size's time is the slowest rank's mean over the timed iterations, after
a barrier. --json prints one JSON object per size instead:
    {"framework": "pytorch-<version>", "backend": "gloo", "world_size", "bytes", "iters",
     "time_us", "algbw_gbps", "busbw_gbps"}
Messages of 4 MiB and more run a quarter of --iters (at least 3). Run it from a folder with no
`torch` subfolder. Any PyTorch will do (Debian's python3-torch or the 2.x venv).
"""
import argparse
import datetime
import json
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

BIG = 4 << 20


def sizes(lo, hi):
    size = max(4, lo)
    while size <= hi:
        yield size
        size *= 4


def timed_allreduce(buf, iters):
    """Mean seconds per allreduce of `buf` on the slowest rank."""
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf, op=dist.ReduceOp.SUM)
    elapsed = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    return elapsed.item()


def rank_main(rank, opts):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{opts.port}", rank=rank,
                            world_size=opts.world_size, timeout=datetime.timedelta(seconds=opts.timeout))
    n = opts.world_size
    if rank == 0 and not opts.json:
        print(f"{'bytes':>12} {'time_us':>12} {'algbw_GBps':>11} {'busbw_GBps':>11}", flush=True)
    for nbytes in sizes(opts.min_bytes, opts.max_bytes):
        count = max(1, nbytes // 4)
        buf = torch.full((count,), float(rank + 1), dtype=torch.float32)
        for _ in range(opts.warmup):
            dist.all_reduce(buf)
        iters = opts.iters if nbytes < BIG else max(3, opts.iters // 4)
        seconds = timed_allreduce(buf, iters)
        if rank != 0:
            continue
        moved = count * 4
        algbw = moved / seconds / 1e9
        busbw = algbw * 2 * (n - 1) / n
        if opts.json:
            print(json.dumps({"framework": "pytorch-" + torch.__version__, "backend": "gloo", "world_size": n,
                              "bytes": moved, "iters": iters, "time_us": round(seconds * 1e6, 2),
                              "algbw_gbps": round(algbw, 4), "busbw_gbps": round(busbw, 4)}), flush=True)
        else:
            print(f"{moved:>12} {seconds * 1e6:>12.1f} {algbw:>11.3f} {busbw:>11.3f}", flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--min-bytes", type=int, default=4)
    ap.add_argument("--max-bytes", type=int, default=64 << 20)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--port", type=int, default=29531)
    ap.add_argument("--timeout", type=int, default=300, help="seconds a rank waits for the others")
    ap.add_argument("--json", action="store_true", help="JSON lines instead of the table")
    opts = ap.parse_args()
    torch.set_num_threads(1)  # one core per rank, as bench-comm's ranks
    mp.spawn(rank_main, args=(opts,), nprocs=opts.world_size, join=True)


if __name__ == "__main__":
    main()
