#!/usr/bin/env python3
"""PyTorch peer of bench/amp/amp_bench.c: the same matmuls in f32 and bf16,
and the same DistilBERT training step (forward with the loss under
torch.autocast("cpu", dtype=torch.bfloat16) or in f32, backward, AdamW,
zero_grad) with transformers' DistilBertForSequenceClassification, timed
the same way (median after 2 warmup steps).

    /work/venv/bin/python bench/amp/amp_peer.py \
        [--ember BUILD/bench/amp/bench_amp] [--config A|B] [--steps N] [--no-matmul]
        [--threads N] [--cpu-time]

PyTorch runs tuned, as an expert would: 2 intra-op threads (--threads), 1
inter-op thread, OMP/MKL thread counts pinned to the same, jemalloc
preloaded (LD_PRELOAD) when installed. With --ember, bench_amp runs first
with the same thread count (EM_NUM_THREADS), and the tables show ember/torch
ratios (> 1: ember faster). --cpu-time times both with the process CPU
clock: with --threads 1 on a shared, oversubscribed machine it measures the
work instead of the wait for a core. Pinned: torch 2.15.0, transformers 5.24.0.
"""
import argparse
import json
import os
import subprocess
import sys
import time

CONFIGS = {  # dim, layers, heads, ffn, vocab, seq, batch
    "A": (768, 6, 12, 3072, 30522, 128, 8),
    "B": (256, 4, 4, 1024, 30522, 64, 32),
}
SHAPES = [  # key (as amp_bench.c's), batch, m, n, k, a stored transposed, b stored transposed
    ("qkv", 1, 1024, 768, 768, False, True),
    ("ffn1", 1, 1024, 3072, 768, False, True),
    ("ffn2", 1, 1024, 768, 3072, False, True),
    ("ffn2_dx", 1, 1024, 3072, 768, False, False),
    ("ffn1_dw", 1, 3072, 768, 1024, True, False),
    ("attn_qk", 96, 128, 128, 64, False, True),
    ("attn_pv", 96, 128, 64, 128, False, False),
]
JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"


THREADS = int(os.environ.get("AMP_PEER_THREADS", "2"))
CLOCK = time.process_time if os.environ.get("AMP_PEER_CPU_TIME") == "1" else time.perf_counter


def setup_torch():
    import torch
    import transformers

    assert torch.__version__.split("+")[0] == "2.15.0", torch.__version__
    assert transformers.__version__ == "5.24.0", transformers.__version__
    torch.set_num_threads(THREADS)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    return torch


def median_time(fn, min_reps=5, max_reps=15, budget=1.0):
    for _ in range(2):
        fn()
    t = []
    total = 0.0
    while len(t) < max_reps and (len(t) < min_reps or total < budget):
        t0 = CLOCK()
        fn()
        t.append(CLOCK() - t0)
        total += t[-1]
    t.sort()
    return t[len(t) // 2]


def child_matmul():
    torch = setup_torch()
    out = {}
    for name, b, m, n, k, ta, tb in SHAPES:
        res = []
        for dt in (torch.float32, torch.bfloat16):
            a = torch.randn(*(([b] if b > 1 else []) + ([k, m] if ta else [m, k]))).to(dt)
            w = torch.randn(*(([b] if b > 1 else []) + ([n, k] if tb else [k, n]))).to(dt)
            a = a.transpose(-1, -2) if ta else a
            w = w.transpose(-1, -2) if tb else w
            res.append(median_time(lambda: torch.matmul(a, w)))
        fl = 2.0 * b * m * n * k
        out[name] = (fl / res[0] * 1e-9, fl / res[1] * 1e-9)
    print(json.dumps(out))


def child_train(name, steps, bf16):
    torch = setup_torch()
    from transformers import DistilBertConfig, DistilBertForSequenceClassification

    dim, layers, heads, ffn, vocab, seq, batch = CONFIGS[name]
    torch.manual_seed(0)
    cfg = DistilBertConfig(vocab_size=vocab, dim=dim, n_layers=layers, n_heads=heads, hidden_dim=ffn, num_labels=2)
    model = DistilBertForSequenceClassification(cfg)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-5)
    ids = torch.randint(1, vocab, (batch, seq))
    labels = torch.arange(batch) % 2

    def step():
        if bf16:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=labels).loss
        else:
            loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)

    t = median_time(step, min_reps=steps, max_reps=steps, budget=0.0)
    print(json.dumps({"ms": 1e3 * t}))


def run_child(args):
    env = dict(os.environ, OMP_NUM_THREADS=str(THREADS), MKL_NUM_THREADS=str(THREADS))
    if os.path.exists(JEMALLOC):
        env["LD_PRELOAD"] = JEMALLOC
    out = subprocess.run([sys.executable, __file__] + args, env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_ember(path, names, steps, matmul):
    mm, tr = {}, {}
    args = [path, "--csv", "--steps", str(steps)] + (["--matmul"] if matmul else []) + (["--train"] if names else [])
    if names and len(names) == 1:
        args += ["--config", names[0]]
    if CLOCK is time.process_time:
        args.append("--cpu-time")
    env = dict(os.environ, EM_NUM_THREADS=str(THREADS))
    text = subprocess.run(args, env=env, check=True, capture_output=True, text=True).stdout
    for line in text.splitlines():
        f = line.split(",")
        if f[0] == "matmul" and f[1] not in ("shape", "all"):
            mm[f[1]] = (float(f[2]), float(f[3]))
        elif f[0] == "train" and f[1] != "config":
            tr[f[1]] = (float(f[2]), float(f[3]))
        elif f[0] == "info" and f[1] == "libraries":
            print(f"ember's libraries: {f[2]}")
    return mm, tr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ember")
    ap.add_argument("--config", choices=list(CONFIGS))
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--no-matmul", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cpu-time", action="store_true")
    ap.add_argument("--child-matmul", action="store_true")
    ap.add_argument("--child-train")
    ap.add_argument("--bf16", action="store_true")
    a = ap.parse_args()
    if a.child_matmul:
        return child_matmul()
    if a.child_train:
        return child_train(a.child_train, a.steps, a.bf16)

    # children and bench_amp read these
    os.environ["AMP_PEER_THREADS"] = str(a.threads)
    os.environ["AMP_PEER_CPU_TIME"] = "1" if a.cpu_time else "0"
    global THREADS, CLOCK
    THREADS = a.threads
    CLOCK = time.process_time if a.cpu_time else time.perf_counter
    names = [a.config] if a.config else list(CONFIGS)
    print(f"amp_peer: {THREADS} threads, {'process CPU' if a.cpu_time else 'wall'} time, jemalloc {'preloaded' if os.path.exists(JEMALLOC) else 'not installed'}, "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")
    em_mm, em_tr = run_ember(a.ember, names, a.steps, not a.no_matmul) if a.ember else ({}, {})
    if not a.no_matmul:
        pt = run_child(["--child-matmul"])
        print(f"\n{'matmul GFLOP/s':14s} {'torch f32':>9s} {'torch bf16':>10s} {'ember f32':>9s} {'ember bf16':>10s}"
              f" {'em bf16/f32':>11s} {'em/torch bf16':>13s}")
        for name, *_ in SHAPES:
            t32, t16 = pt[name]
            e32, e16 = em_mm.get(name, (float("nan"), float("nan")))
            print(f"{name:14s} {t32:9.1f} {t16:10.1f} {e32:9.1f} {e16:10.1f} {e16 / e32:10.2f}x {e16 / t16:12.2f}x")
    print(f"\n{'train step ms':14s} {'torch f32':>9s} {'torch bf16':>10s} {'ember f32':>9s} {'ember bf16':>10s}"
          f" {'em bf16 speedup':>15s} {'em/torch bf16':>13s}")
    for name in names:
        t32 = run_child(["--child-train", name, "--steps", str(a.steps)])["ms"]
        t16 = run_child(["--child-train", name, "--steps", str(a.steps), "--bf16"])["ms"]
        e32, e16 = em_tr.get(name, (float("nan"), float("nan")))
        print(f"{name:14s} {t32:9.1f} {t16:10.1f} {e32:9.1f} {e16:10.1f} {e32 / e16:14.2f}x {t16 / e16:12.2f}x")


if __name__ == "__main__":
    main()
