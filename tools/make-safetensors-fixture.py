#!/usr/bin/env python3
"""Golden safetensors fixture for tests/test_safetensors.c, written by PyTorch.

    /work/venv/bin/python tools/make-safetensors-fixture.py
        writes tests/fixtures/st_torch.safetensors: one small tensor of every
        dtype ember supports, with known (arange-based or special) values and
        metadata {"format": "pt"}.

    /work/venv/bin/python tools/make-safetensors-fixture.py --verify FILE
        checks that FILE (written by ember: run test_safetensors with
        EMBER_ST_INTEROP_OUT=FILE) loads in the Python library with the same
        tensors and metadata, and reports whether its bytes are identical to
        what the Python library writes for the same tensors.

The values here are mirrored, independently, in tests/test_safetensors.c
(test "torch_fixture"); change both together.
"""
import os
import sys

import safetensors
import torch
from safetensors import safe_open
from safetensors.torch import save, save_file

# Pinned: the committed fixture was made with these.
assert torch.__version__.split("+")[0] == "2.15.0", torch.__version__
assert safetensors.__version__ == "0.8.0", safetensors.__version__

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "st_torch.safetensors")
METADATA = {"format": "pt"}


def make_tensors():
    inf, nan = float("inf"), float("nan")
    return {
        # i * 0.25 - 1, exact in f32
        "f32": torch.arange(12, dtype=torch.float32).reshape(3, 4) * 0.25 - 1.0,
        # inf, -inf, nan, -0, the smallest subnormal, the largest finite
        "f32_special": torch.tensor([inf, -inf, nan, -0.0, 1e-45, 3.4028234663852886e38], dtype=torch.float32),
        # i / 3 in f64 (correctly rounded, as C's division)
        "f64": torch.arange(5, dtype=torch.float64) / 3.0,
        # (i - 6) * 0.125, exact in f16
        "f16": ((torch.arange(12, dtype=torch.float32) - 6) * 0.125).to(torch.float16).reshape(2, 3, 2),
        # i * 1.5 - 3, exact in bf16
        "bf16": (torch.arange(8, dtype=torch.float32) * 1.5 - 3.0).to(torch.bfloat16),
        "i64": torch.tensor([-(2**63), -1, 0, 1, 2**53 + 1, 2**63 - 1], dtype=torch.int64),
        # (i - 3) * 1000003
        "i32": ((torch.arange(6, dtype=torch.int32) - 3) * 1000003).reshape(3, 2),
        # i % 3 == 0
        "bool": torch.arange(7) % 3 == 0,
        "scalar": torch.tensor(3.25, dtype=torch.float32),
        "empty": torch.zeros(0, 4, dtype=torch.float32),
    }


def same(a, b):
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    # bitwise, so NaN and -0 count
    return torch.equal(a.reshape(-1).contiguous().view(torch.uint8), b.reshape(-1).contiguous().view(torch.uint8))


def verify(path):
    want = make_tensors()
    ok = True
    with safe_open(path, framework="pt") as f:
        meta = f.metadata()
        if meta != METADATA:
            print(f"metadata differs: {meta!r} != {METADATA!r}")
            ok = False
        keys = set(f.keys())
        if keys != set(want):
            print(f"tensor names differ: {sorted(keys)} != {sorted(want)}")
            ok = False
        for name in sorted(keys & set(want)):
            got = f.get_tensor(name)
            if not same(got, want[name]):
                print(f"tensor {name!r} differs: {got!r} != {want[name]!r}")
                ok = False
    with open(path, "rb") as fh:
        ember_bytes = fh.read()
    identical = ember_bytes == save(want, metadata=METADATA)
    print(f"{path}: loads in safetensors {safetensors.__version__}: {'OK' if ok else 'MISMATCH'}; "
          f"bytes identical to the Python writer's: {identical}")
    return 0 if ok else 1


def main(argv):
    if len(argv) == 3 and argv[1] == "--verify":
        return verify(argv[2])
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    save_file(make_tensors(), FIXTURE, metadata=METADATA)
    print(f"wrote {FIXTURE} ({os.path.getsize(FIXTURE)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
