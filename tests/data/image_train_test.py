#!/usr/bin/env python3
"""Training on real data layouts (small subsets, so that it runs in a few minutes on 2 cores):

- SimpleNN, 2 epochs on an ImageFolder of PNGs made from a Fashion-MNIST subset, reaches the
  test accuracy of the same subset as IDX files (same order, same normalisation) within 0.5
  points.
- ResNet18 exported by PyTorch (torchvision.models.resnet18, 3x64x64 input) trains on
  Fashion-MNIST IDX files through the channel and size adaptation: the loss falls and the
  test accuracy is above chance.
- A token classifier exported by PyTorch (Embedding -> mean over tokens -> Linear, int64
  [N, 12] input) trains on an .npz of int64 token ids to above 90% on a separable task.
- Data parallel: 2 ranks with batch B on an image folder end with the weights of 1 rank with
  batch 2B (the DistributedSampler shards the folder as it does IDX).
- Resume: training on an image folder with --random-resized-crop, --hflip and --augment,
  stopped after epoch 1 and resumed, ends bitwise equal to the uninterrupted run.

Run by CTest (image_train_test); by hand:
    python3 tests/data/image_train_test.py --onnx-train build/tools/onnx-train \
        --tool build/tests/data_pipeline_tool --workdir /tmp/itt
"""
import os
import re
import sys
import warnings

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # the shared helpers
from check_tally import Checks  # noqa: E402
from ot_cli import initializers, run_timed, step_losses, test_args, test_parser, write_idx  # noqa: E402
from fashion_data import fashion_subset  # noqa: E402


def subset(split, n):
    x, y = fashion_subset(split, n)
    # ImageFolder order: by class, then by file name (our names keep the original order).
    order = np.argsort(y, kind="stable")
    return x[order], y[order]


def make_folder_and_idx(root, idx_dir, n_train, n_test):
    os.makedirs(idx_dir, exist_ok=True)
    for split, folder, n in (("train", "train", n_train), ("test", "val", n_test)):
        x, y = subset(split, n)
        for i, (img, lab) in enumerate(zip(x, y)):
            d = os.path.join(root, folder, f"class{lab}")
            os.makedirs(d, exist_ok=True)
            Image.fromarray(img).save(os.path.join(d, f"{i:05d}.png"))
        pre = "train" if split == "train" else "t10k"
        write_idx(os.path.join(idx_dir, f"{pre}-images-idx3-ubyte"), x)
        write_idx(os.path.join(idx_dir, f"{pre}-labels-idx1-ubyte"), y)




def accuracy(out):
    m = re.search(r"test accuracy ([0-9.]+)%", out)
    return float(m.group(1)) if m else -1.0


def export_resnet18(path):
    import torch
    import torchvision
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    m = torchvision.models.resnet18(num_classes=10).eval()
    torch.onnx.export(m, torch.zeros(2, 3, 64, 64), path, input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}}, opset_version=17,
                      do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING)


def export_token_classifier(path, vocab, seq, classes):
    import torch

    class TokenClassifier(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(vocab, 16)
            self.fc = torch.nn.Linear(16, classes)

        def forward(self, tokens):
            return self.fc(self.emb(tokens).mean(dim=1))

    torch.manual_seed(0)
    torch.onnx.export(TokenClassifier(), torch.zeros(2, seq, dtype=torch.int64), path, input_names=["tokens"],
                      output_names=["logits"], dynamic_axes={"tokens": {0: "batch"}, "logits": {0: "batch"}},
                      opset_version=17)


def main():
    ap = test_parser(__doc__)
    ap.add_argument("--tool", required=True)
    ap.add_argument("--cases", default="folder,resnet,tokens,dp,resume",
                    help="comma-separated subset of folder,resnet,tokens,dp,resume")
    args = test_args(ap, fresh=True)
    cases = set(args.cases.split(","))
    os.chdir(args.workdir)
    checks = Checks(width=72)
    check = checks.that
    bin_ = args.onnx_train

    if cases & {"folder", "dp", "resume"}:  # their image folder (and IDX twin) and model
        make_folder_and_idx("fm_folder", "fm_idx", 3000, 1000)
        run_timed([bin_, "make-model", "simplenn", "-o", "simple.onnx", "--input", "1x28x28"])

    # --- SimpleNN: image folder vs IDX of the same subset ---
    if "folder" in cases:
        common = ["--epochs", "2", "--batch", "32", "--seed", "3", "--quiet", "--threads", "2"]
        r_idx, t_idx = run_timed([bin_, "simple.onnx", "--data", "mnist:fm_idx", "--checkpoint-dir", "ck_idx",
                            "--mean", "0.2860", "--std", "0.3530"] + common)
        r_fold, t_fold = run_timed([bin_, "simple.onnx", "--data", "imagefolder:fm_folder", "--checkpoint-dir", "ck_fold",
                              "--mean", "0.2860", "--std", "0.3530", "--data-workers", "2"] + common)
        a_idx, a_fold = accuracy(r_idx.stdout), accuracy(r_fold.stdout)
        check(a_idx > 60 and abs(a_idx - a_fold) <= 0.5,
              "SimpleNN 2 epochs: image folder accuracy within 0.5 points of IDX",
              f"(folder {a_fold:.2f}%, IDX {a_idx:.2f}%; {t_fold:.1f} s vs {t_idx:.1f} s)")
        classes = open("ck_fold/classes.txt").read().split()
        check(classes == [f"class{i}" for i in range(10)], "classes.txt beside the checkpoints lists the class folders")

    # --- ResNet18 for 3x64x64 on Fashion-MNIST through adaptation ---
    if "resnet" in cases:
        export_resnet18("resnet18.onnx")
        make_folder_and_idx("fm_small_folder", "fm_small_idx", 640, 200)  # ResNet18's
        r, t = run_timed([bin_, "resnet18.onnx", "--data", "mnist:fm_small_idx", "--epochs", "2", "--batch", "32", "--lr", "0.02",
                    "--momentum", "0.9", "--seed", "1", "--no-checkpoints", "--quiet", "--metrics", "resnet.jsonl",
                    "--threads", "2"], timeout=500)
        first_line = r.stdout.splitlines()[0] if r.stdout else ""
        check(r.returncode == 0 and "3x64x64" in first_line and "grey copied to RGB" in first_line,
              "ResNet18 3x64x64 on 1x28x28 data: the first line says how the data is adapted", f"({first_line!r})")
        losses = step_losses("resnet.jsonl") if os.path.exists("resnet.jsonl") else []
        head, tail = (np.mean(losses[:5]), np.mean(losses[-5:])) if len(losses) >= 10 else (0, 0)
        acc = accuracy(r.stdout)
        # 20 steps from scratch on 640 images: the loss falls clearly; the test accuracy (BatchNorm
        # running statistics after 20 updates) is above chance (10%) on 200 test images.
        check(len(losses) >= 10 and tail < head * 0.8 and acc > 12,
              "ResNet18 (exported by PyTorch) trains on Fashion-MNIST through adaptation",
              f"(loss {head:.3f} -> {tail:.3f} over {len(losses)} steps, test accuracy {acc:.1f}%, {t:.0f} s)")

    # --- token classifier on an .npz of int64 ids ---
    if "tokens" in cases:
        vocab, seq, k = 40, 12, 4
        rng = np.random.RandomState(0)
        def tokens(n):
            y = rng.randint(0, k, size=n)
            # Each class draws most tokens from its own 10 ids, some from anywhere.
            own = y[:, None] * 10 + rng.randint(0, 10, size=(n, seq))
            noise = rng.randint(0, vocab, size=(n, seq))
            x = np.where(rng.rand(n, seq) < 0.7, own, noise)
            return x.astype(np.int64), y.astype(np.int64)
        x, y = tokens(2000)
        xt, yt = tokens(500)
        np.savez("tokens.npz", x=x, y=y, x_test=xt, y_test=yt)
        export_token_classifier("tokens.onnx", vocab, seq, k)
        r, t = run_timed([bin_, "tokens.onnx", "--data", "npz:tokens.npz", "--epochs", "3", "--batch", "32", "--optimizer",
                    "adam", "--lr", "0.01", "--no-checkpoints", "--quiet", "--threads", "2"])
        acc = accuracy(r.stdout)
        check(r.returncode == 0 and acc > 90, "token classifier (Embedding+mean+Linear, int64 ids) on npz > 90%",
              f"(test accuracy {acc:.2f}%, {t:.1f} s)")

    # --- data parallel on an image folder: 2 ranks x 16 == 1 rank x 32 ---
    if "dp" in cases:
        dp = ["--epochs", "1", "--max-steps", "20", "--lr", "0.05", "--momentum", "0.9", "--seed", "9", "--quiet",
              "--mean", "0.2860", "--std", "0.3530", "--data-workers", "1"]
        r1, _ = run_timed([bin_, "simple.onnx", "--data", "imagefolder:fm_folder", "--batch", "32", "--checkpoint-dir", "dp1",
                     "--threads", "2"] + dp)
        r2, _ = run_timed([bin_, "simple.onnx", "--data", "imagefolder:fm_folder", "--batch", "16", "--world-size", "2",
                     "--checkpoint-dir", "dp2", "--threads", "4"] + dp)
        ok = r1.returncode == 0 and r2.returncode == 0
        worst = 0.0
        if ok:
            w1, w2 = initializers("dp1/epoch_0001.onnx"), initializers("dp2/epoch_0001.onnx")
            for name in w1:
                worst = max(worst, float(np.abs(w1[name] - w2[name]).max() / (np.abs(w1[name]).max() + 1e-12)))
        check(ok and worst < 1e-5, "2 ranks x batch 16 on an image folder end with 1 rank x batch 32's weights",
              f"(max relative difference {worst:.1e})")

    # --- bitwise resume with augmentation on an image folder ---
    if "resume" in cases:
        aug = ["--batch", "32", "--seed", "5", "--quiet", "--threads", "2", "--random-resized-crop", "28", "--hflip",
               "--augment", "--max-steps", "15", "--data-workers", "2"]
        ra, _ = run_timed([bin_, "simple.onnx", "--data", "imagefolder:fm_folder", "--epochs", "2", "--checkpoint-dir",
                     "res_a"] + aug)
        rb1, _ = run_timed([bin_, "simple.onnx", "--data", "imagefolder:fm_folder", "--epochs", "1", "--checkpoint-dir",
                      "res_b"] + aug)
        rb2, _ = run_timed([bin_, "simple.onnx", "--data", "imagefolder:fm_folder", "--epochs", "2", "--checkpoint-dir",
                      "res_b", "--resume"] + aug)
        same = all(x.returncode == 0 for x in (ra, rb1, rb2)) and \
            open("res_a/epoch_0002.onnx", "rb").read() == open("res_b/epoch_0002.onnx", "rb").read()
        check(same, "image folder with --random-resized-crop/--hflip/--augment resumes bitwise")
        # Resuming with other transforms is refused (the batches would differ).
        rd, _ = run_timed([bin_, "simple.onnx", "--data", "imagefolder:fm_folder", "--epochs", "3", "--checkpoint-dir",
                     "res_b", "--resume"] + [a for a in aug if a != "--hflip"])
        check(rd.returncode != 0 and "transforms=" in rd.stderr, "resume with other transforms is refused",
              rd.stderr.strip()[-200:])
    return checks.finish("image_train_test")


if __name__ == "__main__":
    sys.exit(main())
