#!/usr/bin/env python3
"""Segmentation end to end through the CLI (train/data/segmentation_folder.cc, train/task.cc): a
small fully convolutional net trains on image/mask folder pairs with --ignore-index 255 and
reports pixel accuracy and mean IoU; the figures are checked against numpy.

  * data: 24x24 RGB PNGs, each a noisy grey background (class 0) with a red rectangle (class 1)
    and a blue one (class 2); the red rectangle's outline is 255 in the mask (ignored, as VOC
    marks borders). Masks alternate between palette and grey PNGs (both hold indices). Written
    by this test's own PNG encoder (zlib), so no imaging library is needed;
  * the net (Conv 3x3, ReLU, Conv 3x3, ReLU, Conv 1x1 -> 3 classes, [N, 3, 24, 24]) is exported
    by torch 1.13; after 20 epochs the test mean IoU is > 0.9;
  * `eval` of the trained model prints pixel accuracy and mean IoU; numpy recomputes both from
    `infer`'s outputs for the same images (the oracle: no code of ours scores them);
  * two ranks (batch 4 each) report the same epoch figures as one rank at batch 8: the epoch
    line sums the confusion counts over the ranks, not rank 0's share;
  * --data synthetic makes image/mask pairs for the net (test mean IoU > 0.8 after 5 epochs);
  * Pascal VOC's layout (JPEGImages, SegmentationClass, ImageSets lists) with a net whose H x W
    are free trains at the images' own size;
  * resume is exact: 10 epochs and a resume to 20 give the weights of 20 in one go, bitwise;
  * bad input: an image without its mask, and an RGB mask, are one error line naming the file.

Run by CTest (target segmentation_test); by hand:
    /usr/bin/python3 tests/data/segmentation_test.py --onnx-train build/tools/onnx-train --workdir /tmp/seg
"""

import os
import re
import shutil
import struct
import sys
import warnings
import zlib

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # the shared helpers
from ot_cli import epochs, run, test_args, test_parser  # noqa: E402

try:
    import torch
    import torch.nn as nn
    import onnx
    from onnx import numpy_helper
except ImportError:
    print("SKIP: no torch or onnx")
    sys.exit(0)

SIZE = 24
PALETTE = [(0, 0, 0), (128, 0, 0), (0, 128, 0)] + [(0, 0, 0)] * 252 + [(224, 224, 192)]  # VOC-like, 255 last


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def write_png(path, pixels, palette=None):
    """pixels: uint8 [H, W] (grey, or indices with a palette) or [H, W, 3] (RGB)."""
    h, w = pixels.shape[:2]
    color = 2 if pixels.ndim == 3 else (3 if palette else 0)
    raw = b"".join(b"\x00" + pixels[y].tobytes() for y in range(h))
    data = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, color, 0, 0, 0))
    if palette:
        data += png_chunk(b"PLTE", b"".join(bytes(c) for c in palette))
    data += png_chunk(b"IDAT", zlib.compress(raw)) + png_chunk(b"IEND", b"")
    with open(path, "wb") as f:
        f.write(data)


def make_sample(rng):
    img = rng.integers(90, 140, size=(SIZE, SIZE, 3)).astype(np.uint8)
    mask = np.zeros((SIZE, SIZE), np.uint8)
    for cls, color in ((1, (220, 40, 40)), (2, (40, 40, 220))):
        h, w = rng.integers(5, 11, size=2)
        y, x = rng.integers(1, SIZE - h - 1), rng.integers(1, SIZE - w - 1)
        img[y:y + h, x:x + w] = np.clip(np.array(color) + rng.integers(-20, 20, size=(h, w, 3)), 0, 255)
        mask[y:y + h, x:x + w] = cls
        if cls == 1:  # the outline is ignored
            mask[y, x:x + w] = mask[y + h - 1, x:x + w] = 255
            mask[y:y + h, x] = mask[y:y + h, x + w - 1] = 255
    return img, mask


def write_split(root, split, count, rng):
    os.makedirs(os.path.join(root, split, "images"))
    os.makedirs(os.path.join(root, split, "masks"))
    images, masks = [], []
    for i in range(count):
        img, mask = make_sample(rng)
        name = "s%03d" % i
        write_png(os.path.join(root, split, "images", name + ".png"), img)
        write_png(os.path.join(root, split, "masks", name + ".png"), mask, PALETTE if i % 2 else None)
        images.append(img)
        masks.append(mask)
    return np.stack(images), np.stack(masks)


def numpy_figures(pred, mask, classes=3, ignore=255):
    keep = mask != ignore
    p, t = pred[keep], mask[keep].astype(np.int64)
    acc = float((p == t).mean())
    ious = []
    for c in range(classes):
        tp = np.sum((p == c) & (t == c))
        denom = np.sum(p == c) + np.sum(t == c) - tp
        if denom > 0:
            ious.append(tp / denom)
    return acc, float(np.mean(ious))


def main():
    ap = test_parser(__doc__)
    args = test_args(ap)
    tool = os.path.abspath(args.onnx_train)
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    os.chdir(args.workdir)
    rng = np.random.default_rng(0)
    write_split("seg", "train", 64, rng)
    val_images, val_masks = write_split("seg", "val", 16, rng)

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
                        nn.Conv2d(16, 3, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, torch.zeros(1, 3, SIZE, SIZE), "fcn.onnx", input_names=["x"], output_names=["out"],
                          dynamic_axes={"x": {0: "batch"}, "out": {0: "batch"}}, opset_version=17,
                          do_constant_folding=False)

    common = ["--data", "segmentation:seg", "--ignore-index", "255", "--epochs", "20", "--lr", "0.05", "--momentum",
              "0.9", "--threads", "2", "--seed", "1"]
    out = run(tool, ["fcn.onnx"] + common + ["--batch", "8", "--metrics", "one.jsonl", "--checkpoint-dir", "one"])
    print(out.strip().splitlines()[-3])
    last = epochs("one.jsonl")[-1]
    assert "test_miou" in last and "miou" in last, last
    assert last["test_miou"] > 0.9 and last["test_acc"] > 0.95, "the net did not learn the rectangles: %s" % last
    assert re.search(r"Pixel acc: [\d.]+% \| mIoU: [\d.]+", out), out
    print("ok: trained, test mIoU %.4f, pixel accuracy %.2f%%" % (last["test_miou"], 100 * last["test_acc"]))

    # eval against numpy's figures from infer's outputs.
    model = "one/epoch_0020.onnx"
    ev = run(tool, ["eval", model, "--data", "segmentation:seg", "--ignore-index", "255", "--threads", "2"])
    m = re.search(r"pixel accuracy ([\d.]+)% \((\d+) of (\d+)\), mean IoU ([\d.]+)", ev)
    assert m, ev
    x = val_images.transpose(0, 3, 1, 2).astype(np.float32) / 255.0
    onnx.save_tensor(numpy_helper.from_array(x, "x"), "x.pb")
    run(tool, ["infer", model, "--input", "x=x.pb", "-o", "inferred", "--threads", "2"])
    scores = numpy_helper.to_array(onnx.load_tensor("inferred/out.pb"))
    acc, miou = numpy_figures(scores.argmax(1), val_masks)
    assert int(m.group(3)) == int(np.sum(val_masks != 255)), (m.group(0), np.sum(val_masks != 255))
    assert abs(float(m.group(1)) / 100 - acc) < 1e-4 and abs(float(m.group(4)) - miou) < 1e-4, (m.group(0), acc, miou)
    assert abs(last["test_miou"] - miou) < 1e-4, (last["test_miou"], miou)
    print("ok: eval %s = numpy (pixel accuracy %.4f, mean IoU %.4f)" % (m.group(0), acc, miou))

    # Two ranks at batch 4 = one rank at batch 8, epoch figures included.
    run(tool, ["fcn.onnx"] + common + ["--batch", "4", "--world-size", "2", "--metrics", "two.jsonl",
                                       "--checkpoint-dir", "two"])
    one, two = epochs("one.jsonl"), epochs("two.jsonl")
    for a, b in zip(one, two):
        for key in ("loss", "acc", "miou"):
            assert abs(a[key] - b[key]) < 2e-3 * max(1.0, abs(a[key])), ("epoch", a["epoch"], key, a[key], b[key])
    print("ok: two ranks report one rank's epoch figures (last: pixel acc %.4f vs %.4f, mIoU %.4f vs %.4f)" %
          (one[-1]["acc"], two[-1]["acc"], one[-1]["miou"], two[-1]["miou"]))

    # Resume is exact: 10 epochs, then --resume to 20, equal bit for bit to 20 in one go
    # (a fixed convolution algorithm on both sides: timed choices could differ between runs).
    fixed = ["--conv-algo", "direct", "--batch", "8"]
    run(tool, ["fcn.onnx"] + common + fixed + ["--checkpoint-dir", "whole"])
    half = [a if a != "20" else "10" for a in common]
    run(tool, ["fcn.onnx"] + half + fixed + ["--checkpoint-dir", "split"])
    run(tool, ["fcn.onnx"] + common + fixed + ["--checkpoint-dir", "split", "--resume", "latest"])
    a = {t.name: numpy_helper.to_array(t) for t in onnx.load("whole/epoch_0020.onnx").graph.initializer}
    b = {t.name: numpy_helper.to_array(t) for t in onnx.load("split/epoch_0020.onnx").graph.initializer}
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a), "a resumed run differs"
    print("ok: 10 epochs + resume to 20 = 20 in one go, bitwise (%d tensors)" % len(a))

    # --data synthetic makes image/mask pairs for a segmentation net (scores [N, K, H, W]).
    out = run(tool, ["fcn.onnx", "--data", "synthetic:256", "--epochs", "5", "--lr", "0.05", "--momentum", "0.9",
                     "--threads", "2", "--no-checkpoints"])
    m = re.search(r"test pixel accuracy ([\d.]+)%, mean IoU ([\d.]+)", out)
    assert "masks [N, 24, 24]" in out and m and float(m.group(2)) > 0.8, out
    print("ok: synthetic image/mask pairs train (test mean IoU %s)" % m.group(2))

    # Pascal VOC's layout (JPEGImages, SegmentationClass, ImageSets/Segmentation lists) and a
    # net exported with a free H x W: the images' own size is taken.
    os.makedirs("voc/JPEGImages")
    os.makedirs("voc/SegmentationClass")
    os.makedirs("voc/ImageSets/Segmentation")
    for split, part in (("train", "train"), ("val", "val")):
        names = sorted(f[:-4] for f in os.listdir("seg/%s/images" % part))
        for n in names:
            shutil.copy("seg/%s/images/%s.png" % (part, n), "voc/JPEGImages/%s_%s.png" % (part, n))
            shutil.copy("seg/%s/masks/%s.png" % (part, n), "voc/SegmentationClass/%s_%s.png" % (part, n))
        with open("voc/ImageSets/Segmentation/%s.txt" % split, "w") as f:
            f.write("".join("%s_%s\n" % (part, n) for n in names))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, torch.zeros(1, 3, SIZE, SIZE), "fcn_dyn.onnx", input_names=["x"], output_names=["out"],
                          dynamic_axes={"x": {0: "batch", 2: "h", 3: "w"}, "out": {0: "batch", 2: "h", 3: "w"}},
                          opset_version=17, do_constant_folding=False)
    out = run(tool, ["fcn_dyn.onnx", "--data", "segmentation:voc", "--ignore-index", "255", "--epochs", "2", "--batch",
                     "8", "--lr", "0.05", "--momentum", "0.9", "--threads", "2", "--no-checkpoints"])
    assert "voc/ImageSets/Segmentation/train.txt: 64 image/mask pairs" in out, out
    assert "voc/ImageSets/Segmentation/val.txt: 16 image/mask pairs" in out and "Test mIoU" in out, out
    print("ok: Pascal VOC's layout and a free-size export train")

    # Bad input: an image without its mask; a colour mask.
    shutil.copytree("seg", "bad")
    os.remove("bad/train/masks/s003.png")
    err = run(tool, ["fcn.onnx", "--data", "segmentation:bad", "--epochs", "1"], expect_ok=False)
    assert "s003.png" in err and "has no mask" in err and "Traceback" not in err, err
    shutil.rmtree("bad")
    shutil.copytree("seg", "bad")
    write_png("bad/train/masks/s005.png", np.zeros((SIZE, SIZE, 3), np.uint8))
    err = run(tool, ["fcn.onnx", "--data", "segmentation:bad", "--epochs", "1"], expect_ok=False)
    assert "s005.png" in err and "colour channels" in err, err
    print("ok: a missing mask and an RGB mask are named")
    print("PASS")


if __name__ == "__main__":
    main()
