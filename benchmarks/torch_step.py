#!/usr/bin/env python3
"""PyTorch's side of the training-step benchmark (benchmarks/compare_train_step.py): the time
of one CPU training step and the process's peak RSS for the two reference models that
`onnx-train make-model` writes (models/reference_models.cc):

  simplenn  Flatten + Linear(784, 10) on 1x28x28, batch 32 and 1024
  resnet34  torchvision's resnet34(num_classes=10) with the CIFAR-10 stem (conv1 a 3x3
            stride-2 convolution, padding 1, no bias; no max-pool) on 3x32x32, batch 128

One step is zero_grad, forward, CrossEntropyLoss, backward and SGD (momentum 0.9), the step
train_step_bench times on our side. Warm-up steps run first and are not timed.

    python3 benchmarks/torch_step.py [--threads 2] [--model simplenn|resnet34|all]
                                     [--batch B] [--amp bf16|fp16] [--steps N] [--warmup W]

--amp runs forward and loss under torch.autocast("cpu", dtype) (weights, gradients and the
optimizer stay float32), the mixed-precision reference. --batch keeps one batch size only
(a fresh process per case gives each case its own peak RSS).

Any PyTorch with torchvision will do: Debian's 1.13 (/usr/bin/python3) or the 2.x venv of
scripts/install-torch2.sh. Prints one JSON object per case:
  {"framework": "pytorch-<version>", "model", "batch", "threads", "amp", "step_ms",
   "img_per_s", "peak_rss_mb"}
A figure means something only beside onnx-train's, measured in the same run.
"""
import argparse
import json
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from blas_threads import hold_blas_threads  # noqa: E402

hold_blas_threads(default=2)  # Debian's torch: OpenBLAS reads its thread count as it loads

import torch  # noqa: E402
from torch import nn  # noqa: E402

# model -> [(batch, input shape, learning rate, timed steps)]
CASES = {
    "simplenn": [(32, (1, 28, 28), 0.01, 2000), (1024, (1, 28, 28), 0.01, 200)],
    "resnet34": [(128, (3, 32, 32), 0.1, 5)],
}
AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def make_model(name):
    if name == "simplenn":
        return nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 10))
    from torchvision.models import resnet34
    net = resnet34(num_classes=10)
    # The CIFAR-10 recipe swaps the stem after construction: nn.Conv2d's default init.
    net.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=2, padding=1, bias=False)
    net.maxpool = nn.Identity()
    return net


def time_steps(net, images, labels, lr, warmup, steps, amp):
    net.train()
    optimizer = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    dtype = AMP_DTYPES.get(amp)

    def one_step():
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            loss = criterion(net(images), labels)
        loss.backward()
        optimizer.step()

    for _ in range(warmup):
        one_step()
    start = time.perf_counter()
    for _ in range(steps):
        one_step()
    return (time.perf_counter() - start) / steps


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", choices=["simplenn", "resnet34", "all"], default="all")
    ap.add_argument("--batch", type=int, default=0, help="only this batch size (0: every case of the model)")
    ap.add_argument("--amp", choices=sorted(AMP_DTYPES), default=None)
    ap.add_argument("--steps", type=int, default=0, help="timed steps (0: the case's own count)")
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    names = list(CASES) if args.model == "all" else [args.model]
    ran = 0
    for name in names:
        for batch, shape, lr, steps in CASES[name]:
            if args.batch and batch != args.batch:
                continue
            images = torch.randn(batch, *shape)
            labels = torch.randint(0, 10, (batch,))
            seconds = time_steps(make_model(name), images, labels, lr, args.warmup,
                                 args.steps or steps, args.amp)
            print(json.dumps({"framework": "pytorch-" + torch.__version__, "model": name, "batch": batch,
                              "threads": args.threads, "amp": args.amp or "off",
                              "step_ms": round(1000 * seconds, 4), "img_per_s": round(batch / seconds, 1),
                              "peak_rss_mb": round(peak_rss_mb(), 1)}), flush=True)
            ran += 1
    if not ran:
        sys.exit(f"torch_step: no case for --model {args.model} --batch {args.batch}")


if __name__ == "__main__":
    main()
