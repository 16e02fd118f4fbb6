#!/usr/bin/env python3
"""Golden fixture for tests/test_mlp_golden.c: a 2-layer MLP's loss and
gradients, computed by PyTorch's autograd in float64.

    /work/venv/bin/python tools/make-mlp-fixture.py
        writes tests/fixtures/mlp_golden.safetensors

The model (the C test rebuilds it with ember ops, from the tensors stored here):

    h      = gelu(x @ w1^T + b1)          x [6,8], w1 [16,8], b1 [16], erf gelu
    logits = h @ w2^T + b2                w2 [4,16], b2 [4]
    loss   = cross_entropy(logits, target, ignore_index=-100, reduction="mean")

target holds one ignored row (-100), so the mean divides by 5, not 6. Every
tensor that is a leaf of the graph requires grad, the input x included.

Stored tensors (float64 unless noted): x, w1, b1, w2, b2, target (int64), and
the expected results: logits, loss (0-d), grad.x, grad.w1, grad.b1, grad.w2,
grad.b2. Metadata records the torch version.
"""
import os

import safetensors
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

# Pinned: the committed fixture was made with these.
assert torch.__version__.split("+")[0] == "2.15.0", torch.__version__
assert safetensors.__version__ == "0.8.0", safetensors.__version__

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "mlp_golden.safetensors")

N, IN, HIDDEN, OUT = 6, 8, 16, 4
IGNORE = -100


def main():
    g = torch.Generator().manual_seed(20240611)
    f64 = torch.float64
    x = torch.randn(N, IN, generator=g, dtype=f64)
    # nn.Linear's default init, drawn explicitly so the script does not depend on module internals
    w1 = (torch.rand(HIDDEN, IN, generator=g, dtype=f64) * 2 - 1) / IN ** 0.5
    b1 = (torch.rand(HIDDEN, generator=g, dtype=f64) * 2 - 1) / IN ** 0.5
    w2 = (torch.rand(OUT, HIDDEN, generator=g, dtype=f64) * 2 - 1) / HIDDEN ** 0.5
    b2 = (torch.rand(OUT, generator=g, dtype=f64) * 2 - 1) / HIDDEN ** 0.5
    target = torch.tensor([0, 3, 1, IGNORE, 2, 3], dtype=torch.int64)

    leaves = {"x": x, "w1": w1, "b1": b1, "w2": w2, "b2": b2}
    for t in leaves.values():
        t.requires_grad_(True)
    h = F.gelu(x @ w1.T + b1)
    logits = h @ w2.T + b2
    loss = F.cross_entropy(logits, target, ignore_index=IGNORE, reduction="mean")
    loss.backward()

    out = {name: t.detach().clone() for name, t in leaves.items()}
    out["target"] = target
    out["logits"] = logits.detach().clone()
    out["loss"] = loss.detach().clone()   # 0-d
    for name, t in leaves.items():
        out["grad." + name] = t.grad.detach().clone()
    os.makedirs(os.path.dirname(FIXTURE), exist_ok=True)
    save_file({k: v.contiguous() for k, v in out.items()}, FIXTURE,
              metadata={"torch": torch.__version__, "model": "gelu MLP 8-16-4, cross_entropy mean, ignore_index -100"})
    print(f"wrote {FIXTURE}: loss {loss.item():.17g}")


if __name__ == "__main__":
    main()
