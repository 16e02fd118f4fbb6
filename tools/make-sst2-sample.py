#!/usr/bin/env python3
"""Draws the SST-2 sample shipped in examples/data/sst2/ from the full GLUE files.

    python3 tools/make-sst2-sample.py [../shared/data/sst2] [examples/data/sst2]

train.tsv: N_TRAIN rows drawn without replacement from GLUE SST-2 train.tsv with
random.Random(SEED).sample over the row indices, then written in their original
file order; dev.tsv: the full 872-row GLUE dev set, unchanged. Bytes are copied
verbatim (the trailing space before the TAB included). Running it twice gives
identical files; the README records their sha256.
"""
import hashlib
import os
import random
import sys

SEED = 20261201
N_TRAIN = 5000


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else "../shared/data/sst2"
    dst = sys.argv[2] if len(sys.argv) > 2 else "examples/data/sst2"
    with open(os.path.join(src, "train.tsv"), "rb") as f:
        lines = f.read().split(b"\n")
    header, rows = lines[0], [r for r in lines[1:] if r]
    assert header == b"sentence\tlabel" and len(rows) == 67349, "not the GLUE SST-2 train.tsv"
    keep = sorted(random.Random(SEED).sample(range(len(rows)), N_TRAIN))
    os.makedirs(dst, exist_ok=True)
    with open(os.path.join(dst, "train.tsv"), "wb") as f:
        f.write(header + b"\n" + b"".join(rows[i] + b"\n" for i in keep))
    with open(os.path.join(src, "dev.tsv"), "rb") as f:
        dev = f.read()
    with open(os.path.join(dst, "dev.tsv"), "wb") as f:
        f.write(dev)
    for name in ("train.tsv", "dev.tsv"):
        with open(os.path.join(dst, name), "rb") as f:
            data = f.read()
        pos = sum(1 for r in data.split(b"\n")[1:] if r.endswith(b"\t1"))
        n = data.count(b"\n") - 1
        print(f"{hashlib.sha256(data).hexdigest()}  {name}  {n} rows, {pos} positive")


if __name__ == "__main__":
    main()
