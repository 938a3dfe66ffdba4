#!/usr/bin/env python3
"""Image folders against PIL and torchvision: decoded pixels equal PIL's (PNG exactly, JPEG
within 1 level), Resize/CenterCrop/model-size adaptation/channel conversion equal
torchvision's transforms on PIL images within 1e-2 after normalisation, .npz through
numpy's own writer (float64 narrowed, named keys); bad input (truncated or corrupt JPEG/PNG, non-images, empty class
folders, npy dtype/shape mismatches, labels out of range) ends training with an error that
names the file, and --skip-bad-images lists and skips bad files.

Images come from Fashion-MNIST (Debian's dataset-fashion-mnist), encoded by PIL.

Run by CTest (image_data_test_py); by hand:
    python3 tests/data/image_data_test.py --onnx-train build/tools/onnx-train \
        --tool build/tests/data_pipeline_tool --workdir /tmp/idt
"""
import os
import shutil
import subprocess
import sys

import numpy as np
from PIL import Image
import torch
import torchvision.transforms as T

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # the shared helpers
from check_tally import Checks  # noqa: E402
from fashion_data import fashion_subset  # noqa: E402
from ot_cli import test_args, test_parser  # noqa: E402


def colour(g):
    """An RGB image from a grey one, with three different channels."""
    g = g.astype(np.int32)
    return np.stack([g, 255 - g, (g * 3 // 4 + 40) % 256], axis=-1).astype(np.uint8)


def write_folder(root, images, labels, ext, **save):
    """root/train/c<label>/<i>.<ext> (and root/val with the first image, so that the train split
    is every file); returns the training paths in ImageFolder's order."""
    paths = []
    os.makedirs(os.path.join(root, "val", f"c{labels[0]}"), exist_ok=True)
    images[0].save(os.path.join(root, "val", f"c{labels[0]}", f"v.{ext}"), **save)
    for i, (img, lab) in enumerate(zip(images, labels)):
        d = os.path.join(root, "train", f"c{lab}")
        os.makedirs(d, exist_ok=True)
        p = os.path.join(d, f"{i:04d}.{ext}")
        img.save(p, **save)
        paths.append(p)
    return sorted(paths, key=lambda p: (p.split("/")[-2], p))


def main():
    ap = test_parser(__doc__)
    ap.add_argument("--tool", required=True)
    args = test_args(ap, fresh=True)
    os.chdir(args.workdir)
    checks = Checks(width=72)
    check = checks.that

    def dump(data, inp, *flags, split="train"):
        out = f"dump_{abs(hash((data, inp, flags, split)))}.npy"
        r = subprocess.run([args.tool, "dump", "--data", data, "--input", inp, "--split", split, "--o", out, *flags],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(r.stderr)
        return np.load(out), np.load(out + ".labels.npy")

    x, y = fashion_subset("test", 24)
    grey = [Image.fromarray(a) for a in x]
    rgb = [Image.fromarray(colour(a)) for a in x]
    rgba = [Image.fromarray(np.concatenate([colour(a), a[..., None]], axis=-1), "RGBA") for a in x]
    # Odd sizes: upscaled by nearest neighbour to sizes that exercise rounding paths.
    sizes = [(37, 50), (50, 37), (28, 28), (61, 45), (33, 33), (45, 80)]
    odd = [im.resize(sizes[i % len(sizes)], Image.NEAREST) for i, im in enumerate(rgb)]

    cases = {
        "png_l": (grey, "png", {}, "1x28x28", "L"),
        "png_rgb": (rgb, "png", {}, "3x28x28", "RGB"),
        "png_rgba": (rgba, "png", {}, "3x28x28", "RGB"),  # ImageFolder's loader: convert('RGB')
        "jpg_l": (grey, "jpg", {"quality": 90}, "1x28x28", "L"),
        "jpg_rgb": (rgb, "jpg", {"quality": 85}, "3x28x28", "RGB"),
    }
    paths = {}
    for name, (imgs, ext, save, inp, mode) in cases.items():
        paths[name] = write_folder(name, imgs, y, ext, **save)
        ours, labels = dump(f"imagefolder:{name}", inp)
        want = np.stack([np.asarray(Image.open(p).convert(mode), np.float32).reshape(
            28, 28, -1).transpose(2, 0, 1) for p in paths[name]])
        got = ours * 255.0
        diff = np.abs(got - want).max()
        lim = 1.0 if ext == "jpg" else 0.0
        check(ours.shape == want.shape and diff <= lim + 1e-3, f"decode {name} equals PIL", f"(max diff {diff:.3f} levels)")
        want_labels = [int(p.split("/")[-2][1:]) for p in paths[name]]
        check(list(labels) == want_labels, f"decode {name}: labels are the class folders in sorted order")

    # Transforms against torchvision on PIL images.
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    paths["odd"] = write_folder("odd", odd, y, "png")
    pil = [Image.open(p).convert("RGB") for p in paths["odd"]]
    ms = ["--mean", ",".join(map(str, mean)), "--std", ",".join(map(str, std))]
    norm = T.Normalize(mean, std)
    tv_cases = [
        ("Resize(30)+CenterCrop(24)", "3x24x24", ["--resize", "30", "--center-crop", "24"],
         T.Compose([T.Resize(30), T.CenterCrop(24)])),
        ("Resize(40)+CenterCrop(41)", "3x41x41", ["--resize", "40", "--center-crop", "41"],
         T.Compose([T.Resize(40), T.CenterCrop(41)])),
        ("model size, no flags: Resize((64, 64))", "3x64x64", [], T.Resize((64, 64))),
        ("RandomResizedCrop(20) at evaluation: Resize(20)+CenterCrop(20)", "3x20x20",
         ["--random-resized-crop", "20"], T.Compose([T.Resize(20), T.CenterCrop(20)])),
    ]
    for what, inp, flags, tf in tv_cases:
        ours, _ = dump("imagefolder:odd", inp, *flags, *ms)
        want = torch.stack([norm(T.functional.to_tensor(tf(im))) for im in pil]).numpy()
        diff = np.abs(ours - want).max()
        check(ours.shape == want.shape and diff <= 1e-2, f"transform {what} equals torchvision", f"(max {diff:.2e})")
    # RGB -> grey (Grayscale, PIL's L) and grey -> RGB, resized to a model size.
    ours, _ = dump("imagefolder:odd", "1x32x32", "--mean", "0.5", "--std", "0.25")
    want = torch.stack([T.Normalize([0.5], [0.25])(T.functional.to_tensor(T.Resize((32, 32))(im.convert("L"))))
                        for im in pil]).numpy()
    diff = np.abs(ours - want).max()
    check(diff <= 1e-2, "RGB folder into a 1x32x32 model equals Grayscale+Resize", f"(max {diff:.2e})")
    ours, _ = dump("imagefolder:png_l", "3x40x40")
    want = torch.stack([T.functional.to_tensor(T.Resize((40, 40))(Image.open(p).convert("RGB")))
                        for p in paths["png_l"]]).numpy()
    diff = np.abs(ours - want).max()
    check(diff <= 1e-2, "grey folder into a 3x40x40 model equals convert('RGB')+Resize", f"(max {diff:.2e})")
    # Fashion-MNIST IDX adapted the same way as a folder of its images.
    idx_ours, _ = dump("fashion-mnist", "3x40x40", "--mean", "0", "--std", "1", split="test")
    want_idx = torch.stack([T.functional.to_tensor(T.Resize((40, 40))(im.convert("RGB"))) for im in grey]).numpy()
    diff = np.abs(idx_ours[:24] - want_idx).max()
    check(diff <= 1e-2, "fashion-mnist IDX into a 3x40x40 model equals torchvision's Resize", f"(max {diff:.2e})")
    # uint8 arrays of images: [N, H, W] grey and [N, H, W, C] colour, resized like image files.
    np.save("grey_u8.npy", x)
    np.save("rgb_u8.npy", np.stack([colour(a) for a in x]))
    np.save("u8_labels.npy", y.astype(np.int64))
    for arr, mode in (("grey_u8", "L"), ("rgb_u8", "RGB")):
        ours, _ = dump(f"npy:{arr}.npy,u8_labels.npy,{arr}.npy,u8_labels.npy", "3x40x40", split="test")
        src = grey if mode == "L" else rgb
        want = torch.stack([T.functional.to_tensor(T.Resize((40, 40))(im.convert("RGB"))) for im in src]).numpy()
        diff = np.abs(ours - want).max() if ours.shape == want.shape else float("inf")
        check(diff <= 1e-2, f"uint8 npy {arr} into a 3x40x40 model equals torchvision's Resize", f"(max {diff:.2e})")
    # Training batches: RandomResizedCrop + flip stay in range and are the same on every run.
    a, _ = dump("imagefolder:odd", "3x24x24", "--random-resized-crop", "24", "--hflip", "--train-batch", "3,5",
                "--seed", "7", "--count", "8")
    b, _ = dump("imagefolder:odd", "3x24x24", "--random-resized-crop", "24", "--hflip", "--train-batch", "3,5",
                "--seed", "7", "--count", "8", "--data-workers", "3")
    c, _ = dump("imagefolder:odd", "3x24x24", "--random-resized-crop", "24", "--hflip", "--train-batch", "3,6",
                "--seed", "7", "--count", "8")
    check(np.array_equal(a, b), "augmented batch is the same with 1 and 3 data workers")
    check(not np.array_equal(a, c), "another batch index draws other crops")
    check(a.min() >= 0 and a.max() <= 1, "augmented values stay in [0, 1] without --mean/--std")

    # Bad input through the program: a SimpleNN for 1x28x28 images.
    subprocess.run([args.onnx_train, "make-model", "simplenn", "-o", "simple.onnx", "--input", "1x28x28"], check=True,
                   capture_output=True)

    def train(data, *flags):
        return subprocess.run([args.onnx_train, "simple.onnx", "--data", data, "--epochs", "1", "--batch", "8",
                               "--no-checkpoints", "--quiet", *flags], capture_output=True, text=True, timeout=120)

    def expect_error(what, data, needles, *flags):
        r = train(data, *flags)
        msg = r.stderr + r.stdout
        check(r.returncode != 0 and all(n in msg for n in needles), f"bad input: {what}",
              "" if r.returncode != 0 and all(n in msg for n in needles) else f"(exit {r.returncode}: {msg[-400:]})")

    def bad_folder(name, mutate):
        shutil.copytree("png_l", name)
        return mutate(name)

    good = paths["png_l"]
    rel = lambda p, root: p.replace("png_l/", root + "/", 1)
    # Truncated PNG and JPEG: found when the batch is decoded.
    t = bad_folder("trunc_png", lambda r: rel(good[5], r))
    data = open(t, "rb").read()
    open(t, "wb").write(data[:len(data) // 2])
    expect_error("truncated PNG", "imagefolder:trunc_png", [t.split("/")[-1], "not a readable PNG", "sample"],
                 "--val-fraction", "0.2")
    shutil.copytree("jpg_l", "trunc_jpg")
    tj = paths["jpg_l"][3].replace("jpg_l/", "trunc_jpg/", 1)
    data = open(tj, "rb").read()
    open(tj, "wb").write(data[:len(data) * 2 // 3])
    expect_error("truncated JPEG", "imagefolder:trunc_jpg", [os.path.basename(tj), "not a readable JPEG"],
                 "--val-fraction", "0.2")
    # Corrupt JPEG header bytes.
    shutil.copytree("jpg_l", "corrupt_jpg")
    cj = paths["jpg_l"][7].replace("jpg_l/", "corrupt_jpg/", 1)
    data = bytearray(open(cj, "rb").read())
    data[2:40] = b"\x00" * 38
    open(cj, "wb").write(bytes(data))
    expect_error("corrupt JPEG", "imagefolder:corrupt_jpg", [os.path.basename(cj), "JPEG"], "--val-fraction", "0.2")
    # A text file named .png: refused before training.
    n = bad_folder("notimg", lambda r: rel(good[2], r))
    open(n, "w").write("not an image\n")
    expect_error("non-image named .png", "imagefolder:notimg", [os.path.basename(n), "not a JPEG or PNG image"])
    # An empty class folder.
    bad_folder("emptycls", lambda r: os.makedirs(r + "/train/zzz"))
    expect_error("empty class folder", "imagefolder:emptycls", ["zzz", "holds no .jpg"])
    # --skip-bad-images: counted, listed, and training goes on.
    r = train("imagefolder:trunc_png", "--skip-bad-images", "--val-fraction", "0.2")
    msg = r.stdout + r.stderr
    check(r.returncode == 0 and "skipped 1 bad image" in msg and os.path.basename(t) in msg,
          "--skip-bad-images lists the truncated PNG and trains", "" if r.returncode == 0 else msg[-400:])
    r = train("imagefolder:notimg", "--skip-bad-images")
    msg = r.stdout + r.stderr
    check(r.returncode == 0 and "skipped 1 bad image" in msg and os.path.basename(n) in msg,
          "--skip-bad-images also skips a non-image named .png", "" if r.returncode == 0 else msg[-400:])
    # dump-batch --model: the batch a 3x40x40 model gets from a grey folder, as a TensorProto.
    import onnx
    import onnx.numpy_helper
    subprocess.run([args.onnx_train, "make-model", "simplenn", "-o", "rgb40.onnx", "--input", "3x40x40"], check=True,
                   capture_output=True)
    r = subprocess.run([args.onnx_train, "dump-batch", "--data", "imagefolder:png_l", "--split", "train", "--count",
                        "24", "--model", "rgb40.onnx", "-o", "dumped"], capture_output=True, text=True)
    ok = r.returncode == 0
    if ok:
        got = onnx.numpy_helper.to_array(onnx.load_tensor("dumped/input.pb"))
        want = torch.stack([T.functional.to_tensor(T.Resize((40, 40))(Image.open(p).convert("RGB")))
                            for p in paths["png_l"]]).numpy()
        diff = np.abs(got - want).max() if got.shape == want.shape else float("inf")
        ok = diff <= 1e-2
    check(ok, "dump-batch --model writes the batch the model gets (grey folder -> 3x40x40)",
          (r.stdout + r.stderr)[-300:] if not ok else "")
    # More class folders than the model has outputs.
    subprocess.run([args.onnx_train, "make-model", "simplenn", "-o", "five.onnx", "--input", "1x28x28", "--classes",
                    "5"], check=True, capture_output=True)
    r = subprocess.run([args.onnx_train, "five.onnx", "--data", "imagefolder:png_l", "--epochs", "1",
                        "--no-checkpoints"], capture_output=True, text=True)
    check(r.returncode != 0 and "10 classes" in r.stderr and "scores only 5" in r.stderr,
          "a folder of 10 classes into a 5-class model is refused", r.stderr[-300:])
    # A 4-channel model cannot take images.
    subprocess.run([args.onnx_train, "make-model", "simplenn", "-o", "rgba.onnx", "--input", "4x28x28"], check=True,
                   capture_output=True)
    r = subprocess.run([args.onnx_train, "rgba.onnx", "--data", "imagefolder:png_l", "--epochs", "1",
                        "--no-checkpoints"], capture_output=True, text=True)
    check(r.returncode != 0 and "4-channel" in r.stderr, "a 4-channel model is refused for image data",
          r.stderr[-300:])
    # NumPy: dtype and shape that do not fit, labels out of range.
    xf = np.random.RandomState(1).rand(40, 1, 28, 28).astype(np.float32)
    yl = np.arange(40, dtype=np.int64) % 10
    np.save("xf.npy", xf)
    np.save("xi.npy", (xf * 100).astype(np.int64))
    np.save("xs.npy", xf[:, :, :20, :])
    np.save("yl.npy", yl)
    np.save("ybad.npy", np.where(yl == 3, 12, yl))
    np.save("xc.npy", xf.astype(np.complex64))
    expect_error("npy int64 images for a float model", "npy:xi.npy,yl.npy", ["xi.npy", "int64", "float"])
    expect_error("npy shape", "npy:xs.npy,yl.npy", ["xs.npy", "(40, 1, 20, 28)"])
    expect_error("npy labels out of range", "npy:xf.npy,ybad.npy", ["ybad.npy", "label 12 at index 3"])
    expect_error("npy complex dtype", "npy:xc.npy,yl.npy", ["xc.npy", "unsupported .npy dtype"])
    r = train("npy:xf.npy,yl.npy", "--val-fraction", "0.25")
    check(r.returncode == 0, "float32 npy images train", (r.stdout + r.stderr)[-300:])
    np.savez("f.npz", images=xf.astype(np.float64), labels=yl.astype(np.int32))
    r = train("npz:f.npz", "--npz-keys", "images,labels", "--val-fraction", "0.25")
    check(r.returncode == 0 and "converted to float" in r.stdout, "float64 npz with --npz-keys trains as float32",
          (r.stdout + r.stderr)[-300:])
    expect_error("npz without the keys", "npz:f.npz", ["f.npz", "has no array 'x'", "images"])

    # eval on an image folder: the model's size and the class folders' labels.
    r = subprocess.run([args.onnx_train, "simple.onnx", "--data", "imagefolder:png_l", "--epochs", "1", "--batch", "4",
                        "--checkpoint-dir", "ck", "--quiet"], capture_output=True, text=True)
    e = subprocess.run([args.onnx_train, "eval", "ck/epoch_0001.onnx", "--data", "imagefolder:png_rgb"],
                       capture_output=True, text=True)
    check(r.returncode == 0 and e.returncode == 0 and " of 1)" in e.stdout and "3 -> 1 channels" in e.stdout,
          "eval on an RGB image folder with a grey model: converts and scores the val split",
          "" if e.returncode == 0 else (e.stdout + e.stderr)[-300:])

    return checks.finish("image_data_test")


if __name__ == "__main__":
    sys.exit(main())
