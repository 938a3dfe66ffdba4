#!/usr/bin/env python3
"""Writes the seed corpus of one fuzz target of tests/fuzz into a folder (scripts/fuzz.sh
calls it): small valid IDX files (plain and gzip), CIFAR-10 record files and checkpoint
states (tests/fuzz/seeds/checkpoint_*.textproto encoded with protoc, plus the trailer that
train/checkpoint.cc writes).

    make_seeds.py idx_reader|cifar10_reader|checkpoint_reader OUT_DIR
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


def main():
    target, out = sys.argv[1], sys.argv[2]
    makers = {"idx_reader": idx_seeds, "cifar10_reader": cifar_seeds, "checkpoint_reader": checkpoint_seeds}
    if target not in makers:
        sys.exit("make_seeds.py: unknown target '%s' (%s)" % (target, ", ".join(makers)))
    os.makedirs(out, exist_ok=True)
    for name, data in makers[target]().items():
        with open(os.path.join(out, "seed_" + name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
