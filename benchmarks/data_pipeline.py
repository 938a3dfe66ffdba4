#!/usr/bin/env python3
"""Data-pipeline benchmark: decode + transform img/s of onnx-train's image-folder pipeline
beside torchvision's ImageFolder + DataLoader(num_workers=2) with the same transforms, on the
same folder of JPEGs, measured in the same run on the same machine.

The folder is made here from Fashion-MNIST (Debian's dataset-fashion-mnist): N training
images, turned RGB and upscaled (bilinear) to 64x64 and to 224x224, saved as JPEG quality 90
in ImageFolder layout. Pipelines (both sides):
  train: RandomResizedCrop(S) + RandomHorizontalFlip + ToTensor + Normalize
  eval:  Resize(S * 8 / 7) + CenterCrop(S) + ToTensor + Normalize
Ours runs `data_pipeline_tool bench` (tests/data/data_pipeline_tool.cc) with --data-workers 2
(decode and transform of a batch's samples on 2 threads); torchvision iterates a
DataLoader(batch_size=64, num_workers=2). Each side makes one untimed pass first (page cache,
worker start), then the timed passes. Besides img/s (wall clock) the table gives CPU
milliseconds per image (user + system, all threads and worker processes), which a busy
machine distorts less than wall-clock rates.

    /usr/bin/python3 benchmarks/data_pipeline.py --tool build/tests/data/data_pipeline_tool [--count 2000]
"""
import argparse
import gzip
import os
import re
import subprocess
import sys
import time

import numpy as np

FMNIST = "/usr/share/datasets/fashion-mnist"
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def make_folder(root, size, count):
    from PIL import Image
    if os.path.exists(os.path.join(root, "done")):
        return
    b = gzip.open(f"{FMNIST}/train-images-idx3-ubyte.gz").read()
    x = np.frombuffer(b[16:], np.uint8).reshape(-1, 28, 28)[:count]
    y = np.frombuffer(gzip.open(f"{FMNIST}/train-labels-idx1-ubyte.gz").read()[8:], np.uint8)[:count]
    for i, (img, lab) in enumerate(zip(x, y)):
        d = os.path.join(root, f"class{lab}")
        os.makedirs(d, exist_ok=True)
        Image.fromarray(img).convert("RGB").resize((size, size), Image.BILINEAR).save(
            os.path.join(d, f"{i:05d}.jpg"), quality=90)
    open(os.path.join(root, "done"), "w").close()


def torchvision_rate(root, size, train, passes, workers, batch):
    import torch
    import torchvision
    import torchvision.transforms as T
    norm = [T.ToTensor(), T.Normalize(MEAN, STD)]
    tf = T.Compose(([T.RandomResizedCrop(size), T.RandomHorizontalFlip()] if train
                    else [T.Resize(size * 8 // 7), T.CenterCrop(size)]) + norm)
    ds = torchvision.datasets.ImageFolder(root, transform=tf)
    for _ in torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=workers):  # warm-up pass
        pass
    c0 = cpu_seconds()
    loader = torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=workers, shuffle=False,
                                         persistent_workers=True)
    n, t0 = 0, time.perf_counter()
    for _ in range(passes):
        for x, _ in loader:
            n += x.shape[0]
    rate = n / (time.perf_counter() - t0)
    del loader  # joins the workers, so that their CPU time is counted
    import gc
    gc.collect()
    return rate, 1e3 * (cpu_seconds() - c0) / n


def cpu_seconds():
    """User + system time of this process and of its finished children."""
    import resource
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def our_rate(tool, root, size, train, passes, workers, batch):
    flags = (["--random-resized-crop", str(size), "--hflip", "--train"] if train
             else ["--resize", str(size * 8 // 7), "--center-crop", str(size)])
    cmd = [tool, "bench", "--data", f"imagefolder:{root}", "--input", f"3x{size}x{size}", "--batch", str(batch),
           "--data-workers", str(workers), "--mean", ",".join(map(str, MEAN)), "--std", ",".join(map(str, STD)),
           "--val-fraction", "0.01"] + flags
    subprocess.run(cmd + ["--epochs", "1"], check=True, capture_output=True)  # warm-up pass
    c0 = cpu_seconds()
    out = subprocess.run(cmd + ["--epochs", str(passes)], check=True, capture_output=True, text=True).stdout
    n = int(re.search(r"images ([0-9]+)", out).group(1))
    return float(re.search(r"images_per_second ([0-9.]+)", out).group(1)), 1e3 * (cpu_seconds() - c0) / n


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tool", default="build/tests/data/data_pipeline_tool")
    ap.add_argument("--workdir", default="/tmp/onnx-train-data-bench")
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--sizes", default="64,224")
    args = ap.parse_args()
    print(f"{'size':>5} {'pipeline':>8} {'ours img/s':>11} {'torchvision img/s':>18} {'ratio':>6}   "
          f"{'ours CPU ms/img':>15} {'torchvision CPU ms/img':>22} {'ratio':>6}")
    for size in map(int, args.sizes.split(",")):
        root = os.path.join(args.workdir, f"fmnist_jpeg_{size}_{args.count}")
        make_folder(root, size, args.count)
        for train in (True, False):
            ours, ours_cpu = our_rate(args.tool, root, size, train, args.passes, args.workers, args.batch)
            tv, tv_cpu = torchvision_rate(root, size, train, args.passes, args.workers, args.batch)
            print(f"{size:>5} {'train' if train else 'eval':>8} {ours:>11.0f} {tv:>18.0f} {ours / tv:>6.2f}   "
                  f"{ours_cpu:>15.3f} {tv_cpu:>22.3f} {tv_cpu / ours_cpu:>6.2f}", flush=True)
    print(f"(ours: {args.workers} data workers; torchvision: DataLoader num_workers={args.workers}; "
          f"batch {args.batch}; {args.count} JPEGs; {os.cpu_count()} CPUs; "
          f"load average {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
