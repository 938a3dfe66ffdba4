#!/usr/bin/env python3
"""Writes the seed corpus of one fuzz target of tests/fuzz into a folder (scripts/fuzz.sh
calls it): small valid IDX files (plain and gzip), CIFAR-10 record files and checkpoint
states (tests/fuzz/seeds/checkpoint_*.textproto encoded with protoc, plus the trailer that
train/checkpoint/checkpoint.cc writes), .npy arrays, and small PNG (grey, RGB, RGBA, grey+alpha)
and JPEG images.

    make_seeds.py idx_reader|cifar10_reader|checkpoint_reader|npy_reader|image_decoder OUT_DIR
"""
import glob
import gzip
import os
import struct
import subprocess
import sys
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))


def idx(dims, fill=lambda i: i % 256):
    count = 1
    for d in dims:
        count *= d
    header = bytes([0, 0, 0x08, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims)
    return header + bytes(fill(i) for i in range(count))


def idx_seeds():
    plain = {
        "labels_5": idx([5], lambda i: i % 10),
        "images_2x4x4": idx([2, 4, 4]),
        "rank4_1x2x2x3": idx([1, 2, 2, 3]),
        "empty_0x28x28": idx([0, 28, 28]),
    }
    seeds = {name + ".idx": data for name, data in plain.items()}
    for name, data in plain.items():
        seeds[name + ".idx.gz"] = gzip.compress(data, mtime=0)
    return seeds


def cifar_seeds():
    # First byte: records per file - 1 (the fuzz target's convention); then the records.
    def records(n, label=lambda r: r % 10):
        return b"".join(bytes([label(r)]) + bytes((r + i) % 256 for i in range(3072)) for r in range(n))
    return {
        "one_record": bytes([0]) + records(1),
        "two_records": bytes([1]) + records(2),
        "label_9": bytes([0]) + records(1, lambda r: 9),
    }


def checkpoint_seeds():
    seeds = {}
    for text in sorted(glob.glob(os.path.join(HERE, "seeds", "checkpoint_*.textproto"))):
        with open(text, "rb") as f:
            payload = subprocess.run(
                ["protoc", "--encode=onnx.ModelProto", "-I/usr/include/onnx", "/usr/include/onnx/onnx.proto"],
                stdin=f, check=True, capture_output=True).stdout
        trailer = b"OTCK" + struct.pack("<IQ", zlib.crc32(payload), len(payload))
        seeds[os.path.basename(text)[:-len(".textproto")] + ".state"] = payload + trailer
    return seeds


def npy(descr, shape, data):
    shape_text = "(" + ", ".join(str(d) for d in shape) + (",)" if len(shape) == 1 else ")")
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape_text)
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + data


def npy_seeds():
    return {
        "f4_2x3.npy": npy("<f4", (2, 3), struct.pack("<6f", *range(6))),
        "i8_4.npy": npy("<i8", (4,), struct.pack("<4q", 1, 2, 3, 4)),
        "u1_1x2x2.npy": npy("|u1", (1, 2, 2), bytes([0, 64, 128, 255])),
        "f8_scalar.npy": npy("<f8", (), struct.pack("<d", 1.5)),
        "b1_0x5.npy": npy("|b1", (0, 5), b""),
    }


def png(width, height, colour_type, channels, interlace=0):
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    rows = b"".join(b"\x00" + bytes((x * 37 + y * 11 + c) % 256 for x in range(width) for c in range(channels))
                    for y in range(height))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, colour_type, 0, 0, interlace)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(rows)) +
            chunk(b"IEND", b""))


# An 8x8 grey JPEG (quality 50) written once by PIL.
JPEG_8X8_GREY = bytes.fromhex("ffd8ffe000104a46494600010100000100010000ffdb004300100b0c0e0c0a100e0d0e1211101318281a181616183123251d283a333d3c3933383740485c4e404457453738506d51575f626768673e4d71797064785c656763ffc0000b080008000801011100ffc4001f0000010501010101010100000000000000000102030405060708090a0bffc400b5100002010303020403050504040000017d01020300041105122131410613516107227114328191a1082342b1c11552d1f02433627282090a161718191a25262728292a3435363738393a434445464748494a535455565758595a636465666768696a737475767778797a838485868788898a92939495969798999aa2a3a4a5a6a7a8a9aab2b3b4b5b6b7b8b9bac2c3c4c5c6c7c8c9cad2d3d4d5d6d7d8d9dae1e2e3e4e5e6e7e8e9eaf1f2f3f4f5f6f7f8f9faffda0008010100003f00483c1dff004cff004affd9")


def image_seeds():
    return {
        "grey_5x3.png": png(5, 3, 0, 1),
        "rgb_4x4.png": png(4, 4, 2, 3),
        "rgba_3x2.png": png(3, 2, 6, 4),
        "grey_alpha_2x2.png": png(2, 2, 4, 2),
        "grey_8x8.jpg": JPEG_8X8_GREY,
    }


def main():
    target, out = sys.argv[1], sys.argv[2]
    makers = {"idx_reader": idx_seeds, "cifar10_reader": cifar_seeds, "checkpoint_reader": checkpoint_seeds,
              "npy_reader": npy_seeds, "image_decoder": image_seeds}
    if target not in makers:
        sys.exit("make_seeds.py: unknown target '%s' (%s)" % (target, ", ".join(makers)))
    os.makedirs(out, exist_ok=True)
    for name, data in makers[target]().items():
        with open(os.path.join(out, "seed_" + name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
