"""Fashion-MNIST as the training tests feed it: the first images with seeded noise, written as
an IDX folder that `--data fashion-mnist:DIR` reads, and the data set's normalisation."""
import os

import numpy as np

from ot_cli import read_idx, write_idx

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
