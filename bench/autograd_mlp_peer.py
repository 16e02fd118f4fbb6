#!/usr/bin/env python3
"""PyTorch peer of bench/autograd_mlp.c: the same 2-layer MLP forward and
backward on the CPU with 2 threads, timed the same way (median of the
repetitions after warmup; grads set to None outside the timed region).

    python bench/autograd_mlp_peer.py [--ember BUILD/bench/bench_autograd_mlp] [--quick]

With --ember, it first runs bench_autograd_mlp --csv in the same environment
and prints ember and PyTorch side by side; without it, PyTorch alone.
Tested with torch 2.15.0+cu132 (CPU), Python 3.11.
"""
import os
import subprocess
import time

import torch
import torch.nn.functional as F

from peer_util import compare_args

BATCH, IN, HIDDEN = 256, 1024, 1024
# name, activation, out (as bench/autograd_mlp.c)
CONFIGS = [("relu out=1024", "relu", 1024), ("gelu out=1024", "gelu", 1024), ("relu out=10", "relu", 10)]


def make_mlp(out):
    s = 1.0 / 32.0
    ps = [(torch.rand(*shape) - 0.5) * 2 * s for shape in ((HIDDEN, IN), (HIDDEN,), (out, HIDDEN), (out,))]
    for p in ps:
        p.requires_grad_(True)
    x = torch.randn(BATCH, IN)
    y = torch.tensor([(i * 7) % out for i in range(BATCH)], dtype=torch.int64)
    return ps, x, y


def forward(act, ps, x, y):
    w1, b1, w2, b2 = ps
    h = x @ w1.T + b1
    h = F.gelu(h) if act == "gelu" else F.relu(h)
    return F.cross_entropy(h @ w2.T + b2, y, reduction="mean")


def run(act, out, quick):
    ps, x, y = make_mlp(out)
    warmup, reps = (2, 7) if quick else (3, 21)
    tf, tb, tn = [], [], []
    for r in range(-warmup, reps):
        t0 = time.perf_counter()
        loss = forward(act, ps, x, y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        del loss
        for p in ps:
            p.grad = None
        t3 = time.perf_counter()
        with torch.no_grad():
            forward(act, ps, x, y)
        t4 = time.perf_counter()
        if r >= 0:
            tf.append(t1 - t0)
            tb.append(t2 - t1)
            tn.append(t4 - t3)
    med = lambda v: sorted(v)[len(v) // 2]
    return med(tf), med(tb), med(tn)


def run_ember(path, quick):
    cmd = [path, "--csv"] + (["--quick"] if quick else [])
    text = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    info, rows = {}, {}
    for line in text.splitlines():
        f = line.split(",")
        if f[0] == "info":
            info[f[1]] = ",".join(f[2:])
        elif f[0] == "mlp" and f[1] != "config":
            rows[f[1]] = tuple(float(v) for v in f[2:6])
    return info, rows


def main():
    args = compare_args("bench_autograd_mlp")
    torch.manual_seed(0)
    ember = run_ember(args.ember, args.quick) if args.ember else None
    print(f"autograd_mlp_peer: torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}; "
          f"batch {BATCH}, in {IN}, hidden {HIDDEN}, f32")
    if ember:
        print(f"bench_autograd_mlp: {ember[0].get('threads')} threads")
        print(f"{'config':<14} | {'fwd ms':>7} {'bwd ms':>7} {'bwd/fwd':>7} | {'torch fwd':>9} {'bwd':>7} "
              f"{'bwd/fwd':>7} | {'ember/torch fwd':>15} {'bwd':>6}")
    else:
        print(f"{'config':<14} {'fwd ms':>7} {'bwd ms':>7} {'bwd/fwd':>7} {'fwd no-grad ms':>14}")
    for name, act, out in CONFIGS:
        f, b, n = run(act, out, args.quick)
        if ember and name in ember[1]:
            ef, eb, er, _ = ember[1][name]
            print(f"{name:<14} | {ef:7.3f} {eb:7.3f} {er:7.2f} | {1e3 * f:9.3f} {1e3 * b:7.3f} {b / f:7.2f} | "
                  f"{ef / (1e3 * f):15.2f} {eb / (1e3 * b):6.2f}")
        else:
            print(f"{name:<14} {1e3 * f:7.3f} {1e3 * b:7.3f} {b / f:7.2f} {1e3 * n:14.3f}")


if __name__ == "__main__":
    main()
