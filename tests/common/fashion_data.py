"""Fashion-MNIST as the training tests feed it: the first images with seeded noise, written as
an IDX folder that `--data fashion-mnist:DIR` reads, and the data set's normalisation."""
import os

import numpy as np

from ot_cli import read_idx, run_or_raise, step_losses, write_idx

FASHION = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530


def jittered_fashion(workdir, count):
    """The first `count` Fashion-MNIST training images with 0-3 levels of seeded noise added,
    written as an IDX directory for onnx-train (the test split linked unchanged). Plain
    Fashion-MNIST has large constant backgrounds: whole regions of ReLU inputs share one
    value, and float32 rounding in any framework decides on which side of zero they fall,
    so PyTorch float32 itself drifts by percents from float64 within a few momentum steps.
    The noise breaks those ties and makes the float64 comparison tight."""
    images = read_idx(os.path.join(FASHION, "train-images-idx3-ubyte.gz"))[:count]
    labels = read_idx(os.path.join(FASHION, "train-labels-idx1-ubyte.gz"))[:count]
    noise = np.random.default_rng(7).integers(0, 4, size=images.shape)
    images = np.minimum(images.astype(np.int64) + noise, 255).astype(np.uint8)
    data_dir = os.path.join(workdir, "fashion-jitter")
    os.makedirs(data_dir, exist_ok=True)
    write_idx(os.path.join(data_dir, "train-images-idx3-ubyte.gz"), images)
    write_idx(os.path.join(data_dir, "train-labels-idx1-ubyte.gz"), labels)
    for name in ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        link = os.path.join(data_dir, name)
        if not os.path.exists(link):
            os.symlink(os.path.join(FASHION, name), link)
    return images, labels


def fashion_subset(split, count):
    """The first `count` images (uint8 [N, 28, 28]) and labels of a split ("train" or "test")."""
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(os.path.join(FASHION, prefix + "-images-idx3-ubyte.gz"))[:count]
    labels = read_idx(os.path.join(FASHION, prefix + "-labels-idx1-ubyte.gz"))[:count]
    return images, labels


def normalized(images):
    """uint8 images [N, 28, 28] as the model input onnx-train makes of them: float32
    [N, 1, 28, 28], x / 255 then (x - MEAN) / STD."""
    return ((images.astype(np.float32) / 255.0 - MEAN) / STD).astype(np.float32)[:, None, :, :]


def trained_step_losses(onnx_train, model_path, workdir, tag, steps, batch, lr, options=(), timeout=None):
    """onnx-train's loss at every step of `steps` steps on jittered_fashion's folder in order
    (no shuffling, no checkpoints, 2 threads), read from its --metrics file."""
    metrics = os.path.join(workdir, tag + ".jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    run_or_raise(onnx_train, [model_path, "--data", "fashion-mnist:" + os.path.join(workdir, "fashion-jitter"),
                              "--no-shuffle", "--epochs", "1", "--max-steps", str(steps), "--batch", str(batch),
                              "--lr", str(lr), "--metrics", metrics, "--no-checkpoints", "--quiet", "--threads", "2",
                              *options], timeout=timeout)
    return step_losses(metrics)
