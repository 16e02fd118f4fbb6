"""Your own op with its backward, and a module that uses it: the Python peer of examples/06_custom_function.c.

Softsign, y = x / (1 + |x|), dy/dx = 1 / (1 + |x|)^2, as a torch.autograd.Function; its
backward checked against central differences (gradcheck, float64); then a two-layer MLP of
our own that uses it fits y = sin(3 x1) x2 with AdamW.

    python examples/peers/custom_function.py

Exits 1 unless gradcheck passes and the fit's mean squared error drops below 0.02.
"""
import sys

import torch
from torch import nn


class Softsign(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)  # the derivative needs x
        return x / (1 + x.abs())

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        return grad_out / (1 + x.abs()) ** 2


class MLP(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.l1 = nn.Linear(2, hidden)
        self.l2 = nn.Linear(hidden, 1)

    def forward(self, x):
        return self.l2(Softsign.apply(self.l1(x)))


def main():
    torch.manual_seed(7)
    x64 = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    torch.autograd.gradcheck(Softsign.apply, (x64,))  # raises GradcheckError with the worst element
    print("gradcheck of Softsign: passed")
    x = torch.rand(512, 2) * 2 - 1  # 512 points in [-1, 1]^2, target sin(3 x1) x2
    y = torch.sin(3 * x[:, 0:1]) * x[:, 1:2]
    model = MLP(32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for step in range(400):
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step % 100 == 0 or step == 399:
            print(f"step {step:3d}  mse {loss.item():.5f}")
    if not loss.item() < 0.02:
        sys.exit(f"the fit did not converge: mse {loss.item():.4f} >= 0.02")


if __name__ == "__main__":
    main()
