"""A regression on plain tensors with Accelerate: the Python peer of examples/07_regression.c.

2,048 points x in [-1, 1]^4, target y = sin(2 x0) + x1 x2 - x3^2 (+ noise), an MLP, AdamW with
linear warmup, and the dev mean squared error gathered across processes (gather_for_metrics).
split_batches keeps the global batch at 64 whatever the number of processes.

    python examples/peers/regression.py
    ACCELERATE_USE_CPU=true torchrun --nproc_per_node 2 examples/peers/regression.py   # 2 processes on the CPU

Exits 1 unless the dev MSE falls below 0.02 (the target's variance is about 0.6).
"""
import sys

import torch
from accelerate import Accelerator, DataLoaderConfiguration
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from transformers import get_linear_schedule_with_warmup

TRAIN_N, DEV_N, BATCH, EPOCHS, HIDDEN = 2048, 500, 64, 40, 64


def make_data(n, noise):
    x = torch.rand(n, 4) * 2 - 1
    y = torch.sin(2 * x[:, 0:1]) + x[:, 1:2] * x[:, 2:3] - x[:, 3:4] ** 2
    return TensorDataset(x, y + noise * torch.randn(n, 1))


def main():
    accelerator = Accelerator(dataloader_config=DataLoaderConfiguration(split_batches=True))  # BATCH: global batch
    torch.manual_seed(42)  # the same data and weights on every process
    train_dl = DataLoader(make_data(TRAIN_N, 0.05), batch_size=BATCH, shuffle=True)
    dev_dl = DataLoader(make_data(DEV_N, 0.0), batch_size=128)
    model = nn.Sequential(nn.Linear(4, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    # with split_batches every process gets len(train_dl) batches an epoch, and the scheduler steps once per step
    scheduler = get_linear_schedule_with_warmup(optimizer, 50, EPOCHS * len(train_dl))
    model, optimizer, train_dl, dev_dl, scheduler = accelerator.prepare(model, optimizer, train_dl, dev_dl, scheduler)
    for epoch in range(EPOCHS):
        model.train()
        for x, y in train_dl:
            loss = nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        model.eval()
        sq, seen = 0.0, 0
        with torch.no_grad():
            for x, y in dev_dl:
                pred, target = accelerator.gather_for_metrics((model(x), y))
                sq += nn.functional.mse_loss(pred, target, reduction="sum").item()
                seen += len(target)
        mse = sq / seen  # over exactly the DEV_N points, whatever the number of processes
        if epoch == 0 or epoch % 10 == 9:
            accelerator.print(f"epoch {epoch:2d}  dev mse {mse:.5f} ({seen} points)")
    if not mse < 0.02:
        sys.exit(f"training failed: dev mse {mse:.4f} >= 0.02")


if __name__ == "__main__":
    main()
