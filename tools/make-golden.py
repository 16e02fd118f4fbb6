#!/usr/bin/env python3
"""Writes tests/fixtures/golden_ops.safetensors: inputs and PyTorch's outputs
for the ops that tests/test_golden.c compares ember against.

Pinned versions (the script refuses to run under others, so that a fixture
always says which PyTorch made it):
    torch       2.15.0+cu132
    Python 3.11, CPU only

The file is written by hand in the safetensors format (8-byte little-endian
header length, JSON header, raw little-endian data), with the tensors and
the metadata in sorted order, so that the same inputs give the same bytes.

Usage:  python tools/make-golden.py [OUT]   (default: tests/fixtures/golden_ops.safetensors)

Every input is f32 and stored as it is given to ember. The outputs are
computed by PyTorch in f64 from those f32 inputs (x.double()) and then
rounded to f32 once, so the fixture carries PyTorch's semantics with the
least rounding error; ember's f32 results are compared with f32 tolerances.
Scalars that are not tensors (eps, ignore_index, dims) go to __metadata__.

Tensors (name: shape):
  matmul.a [3,5,7], matmul.b [7,4], matmul.out [3,5,4]
  matmul_bcast.a [2,1,4,6], matmul_bcast.b [3,6,5], matmul_bcast.out [2,3,4,5]
  matmul_t.a [9,6], matmul_t.b [9,8], matmul_t.out [6,8] = a^T b (ember: em_transpose(a) as a view)
  softmax.x [4,5,37], softmax.out_last (dim -1), softmax.out_dim1 (dim 1)
  log_softmax.out_last, log_softmax.out_dim1 (same x)
  layer_norm.x [6,48], .weight [48], .bias [48], .dy [6,48]
      -> .y, .mean [6], .rstd [6], .dx, .dweight, .dbias      (eps in metadata)
  gelu.x [512] -> gelu.out (erf form), gelu.out_tanh (approximate="tanh")
  cross_entropy.logits [16,10], .target i64 [16] (some = ignore_index),
      .dloss [] -> .loss_mean [], .dlogits_mean [16,10] (grad of dloss*loss_mean),
      .loss_none [16]
"""
import json
import os
import struct
import sys

import torch

TORCH_VERSION = "2.15.0+cu132"
assert torch.__version__ == TORCH_VERSION, f"torch {torch.__version__}, this script pins {TORCH_VERSION}"

LN_EPS = 1e-12          # DistilBERT's layer_norm_eps
IGNORE_INDEX = -100     # torch's default


def f32(t):
    return t.detach().to(torch.float32).contiguous()


DTYPES = {torch.float32: "F32", torch.float64: "F64", torch.int64: "I64", torch.int32: "I32"}


def write_safetensors(path, tensors, metadata):
    """Atomic write (path.tmp, then rename), sorted names, offsets packed in
    name order, header padded with spaces to a multiple of 8 bytes."""
    header, blobs, offset = {"__metadata__": dict(sorted(metadata.items()))}, [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        data = t.numpy().tobytes()   # x86-64: already little-endian
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
    os.replace(tmp, path)


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "tests", "fixtures", "golden_ops.safetensors")
    torch.manual_seed(1234)
    g = {}

    def rnd(*shape, scale=1.0, shift=0.0):
        return (torch.randn(*shape, dtype=torch.float64) * scale + shift).to(torch.float32)

    # matmul: batched x shared, broadcast batch dims, a transposed operand
    a, b = rnd(3, 5, 7), rnd(7, 4)
    g["matmul.a"], g["matmul.b"], g["matmul.out"] = a, b, f32(torch.matmul(a.double(), b.double()))
    a, b = rnd(2, 1, 4, 6), rnd(3, 6, 5)
    g["matmul_bcast.a"], g["matmul_bcast.b"] = a, b
    g["matmul_bcast.out"] = f32(torch.matmul(a.double(), b.double()))
    a, b = rnd(9, 6), rnd(9, 8)            # out = a^T @ b, ember takes em_transpose(a)
    g["matmul_t.a"], g["matmul_t.b"], g["matmul_t.out"] = a, b, f32(a.double().t() @ b.double())

    # softmax / log_softmax: one slice shifted far up to test stability
    x = rnd(4, 5, 37, scale=3.0)
    x[1, 2] += 80.0
    g["softmax.x"] = x
    xd = x.double()
    g["softmax.out_last"] = f32(torch.softmax(xd, dim=-1))
    g["softmax.out_dim1"] = f32(torch.softmax(xd, dim=1))
    g["log_softmax.out_last"] = f32(torch.log_softmax(xd, dim=-1))
    g["log_softmax.out_dim1"] = f32(torch.log_softmax(xd, dim=1))

    # layer_norm forward and backward
    x, w, bias, dy = rnd(6, 48, scale=2.0, shift=0.5), rnd(48, scale=0.5, shift=1.0), rnd(48, scale=0.1), rnd(6, 48)
    xd, wd, bd = (t.double().requires_grad_() for t in (x, w, bias))
    y, mean, rstd = torch.native_layer_norm(xd, [48], wd, bd, LN_EPS)
    y.backward(dy.double())
    g.update({"layer_norm.x": x, "layer_norm.weight": w, "layer_norm.bias": bias, "layer_norm.dy": dy,
              "layer_norm.y": f32(y), "layer_norm.mean": f32(mean.reshape(6)), "layer_norm.rstd": f32(rstd.reshape(6)),
              "layer_norm.dx": f32(xd.grad), "layer_norm.dweight": f32(wd.grad), "layer_norm.dbias": f32(bd.grad)})

    # gelu, both forms, over the interesting range and a few far points
    x = torch.cat([torch.linspace(-8, 8, 497, dtype=torch.float64),
                   torch.tensor([-30.0, -10.0, -1e-4, 0.0, 1e-4, 10.0, 30.0, 3.0, -3.0, 0.5, -0.5, 1.0, -1.0,
                                 2.0, -2.0], dtype=torch.float64)]).to(torch.float32)
    g["gelu.x"] = x
    g["gelu.out"] = f32(torch.nn.functional.gelu(x.double()))
    g["gelu.out_tanh"] = f32(torch.nn.functional.gelu(x.double(), approximate="tanh"))

    # cross_entropy with ignore_index, mean reduction (forward + grad) and none
    logits = rnd(16, 10, scale=2.0)
    logits[3] += 50.0
    target = torch.randint(0, 10, (16,), dtype=torch.int64)
    target[[2, 7, 11]] = IGNORE_INDEX
    dloss = torch.tensor(0.75, dtype=torch.float32)
    ld = logits.double().requires_grad_()
    loss = torch.nn.functional.cross_entropy(ld, target, ignore_index=IGNORE_INDEX, reduction="mean")
    loss.backward(dloss.double())
    g.update({"cross_entropy.logits": logits, "cross_entropy.target": target, "cross_entropy.dloss": dloss,
              "cross_entropy.loss_mean": f32(loss), "cross_entropy.dlogits_mean": f32(ld.grad),
              "cross_entropy.loss_none": f32(torch.nn.functional.cross_entropy(
                  logits.double(), target, ignore_index=IGNORE_INDEX, reduction="none"))})

    meta = {"generator": "tools/make-golden.py", "torch": torch.__version__,
            "layer_norm.eps": repr(LN_EPS), "cross_entropy.ignore_index": str(IGNORE_INDEX)}
    write_safetensors(out, g, meta)
    print(f"wrote {out}: {len(g)} tensors, {os.path.getsize(out)} bytes")


if __name__ == "__main__":
    main()
