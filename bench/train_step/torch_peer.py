#!/usr/bin/env python3
"""PyTorch peer of bench/train_step/train_step.c: the same DistilBERT training
step (forward with the loss, backward, AdamW, get_linear_schedule_with_warmup,
zero_grad) with transformers' DistilBertForSequenceClassification, on the CPU
with 2 threads, timed the same way (median of the steps after 2 warmup steps).

    /work/venv/bin/python bench/train_step/torch_peer.py \
        [--ember BUILD/bench/train_step/bench_train_step] [--config A|B|C] [--steps N]

Each config runs in a child process, twice:
  tuned  2 intra-op threads, 1 inter-op thread (one pool), OMP/MKL thread
         counts pinned to 2, jemalloc preloaded (LD_PRELOAD) when installed
         (Debian libjemalloc2), so large blocks are not mmap'd and zero-faulted
         anew every step;
  stock  torch.set_num_threads(2) and nothing else (glibc malloc).
With --ember, bench_train_step runs first, in the same environment, and the
table shows ember's speed relative to PyTorch: torch ms/step over ember
ms/step (> 1 means ember is faster; issue 4 asks for >= 0.8 against tuned
on config A). Peak RSS is each child's ru_maxrss. Pinned: torch 2.15.0,
transformers 5.24.0.
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
    "C": (128, 2, 2, 512, 8192, 32, 64),
}
JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"


def child(name, steps, tuned):
    import resource

    import torch
    import transformers
    from transformers import DistilBertConfig, DistilBertForSequenceClassification, get_linear_schedule_with_warmup

    assert torch.__version__.split("+")[0] == "2.15.0", torch.__version__
    assert transformers.__version__ == "5.24.0", transformers.__version__
    torch.set_num_threads(2)
    if tuned:
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:
            pass
    dim, layers, heads, ffn, vocab, seq, batch = CONFIGS[name]
    torch.manual_seed(0)
    cfg = DistilBertConfig(vocab_size=vocab, dim=dim, n_layers=layers, n_heads=heads, hidden_dim=ffn, num_labels=2)
    model = DistilBertForSequenceClassification(cfg)
    model.train()
    no_decay = ["bias", "LayerNorm.weight"]
    groups = [
        {"params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)], "weight_decay": 0.01},
        {"params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=5e-5)
    sched = get_linear_schedule_with_warmup(opt, 10, 1000)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, vocab, (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    labels = torch.arange(batch) % 2
    ts, tf, tb, to = [], [], [], []
    for r in range(-2, steps):
        t0 = time.perf_counter()
        out = model(input_ids=ids, attention_mask=mask, labels=labels)
        t1 = time.perf_counter()
        out.loss.backward()
        t2 = time.perf_counter()
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        t3 = time.perf_counter()
        if r >= 0:
            ts.append(t3 - t0), tf.append(t1 - t0), tb.append(t2 - t1), to.append(t3 - t2)
    med = lambda v: sorted(v)[len(v) // 2]
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps({"ms": 1e3 * med(ts), "fwd": 1e3 * med(tf), "bwd": 1e3 * med(tb), "opt": 1e3 * med(to),
                      "tok": batch * seq / med(ts), "rss": rss, "attn": model.config._attn_implementation,
                      "torch": torch.__version__, "threads": torch.get_num_threads()}))


def run_child(name, steps, tuned):
    env = dict(os.environ)
    if tuned:
        env.update(OMP_NUM_THREADS="2", MKL_NUM_THREADS="2")
        if os.path.exists(JEMALLOC):
            env["LD_PRELOAD"] = JEMALLOC
    else:
        for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "LD_PRELOAD"):
            env.pop(k, None)
    out = subprocess.run([sys.executable, __file__, "--child", name, "--steps", str(steps)] + (["--tuned"] if tuned else []),
                         env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_ember(path, names, steps):
    rows = {}
    for name in names:
        text = subprocess.run([path, "--csv", "--config", name, "--steps", str(steps)], check=True, capture_output=True,
                              text=True).stdout
        for line in text.splitlines():
            f = line.split(",")
            if f[0] == "info" and f[1] == "libraries":
                rows["libraries"] = f[2]
            if f[0] == "train_step" and f[1] == name:
                rows[name] = {"ms": float(f[2]), "tok": float(f[3]), "fwd": float(f[4]), "bwd": float(f[5]),
                              "opt": float(f[6]), "rss": float(f[7])}
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ember", help="path of bench_train_step; run it first and compare")
    ap.add_argument("--config", choices=sorted(CONFIGS), action="append")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--child")
    ap.add_argument("--tuned", action="store_true")
    args = ap.parse_args()
    if args.child:
        child(args.child, args.steps, args.tuned)
        return
    names = args.config or sorted(CONFIGS)
    ember = run_ember(args.ember, names, args.steps) if args.ember else {}
    jem = os.path.exists(JEMALLOC)
    print(f"train_step peer: 2 threads, f32, median of {args.steps} steps after 2 warmup; tuned = 1 pool"
          f"{' + jemalloc' if jem else ' (jemalloc not installed)'}; OPENBLAS_CORETYPE="
          f"{os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")
    hdr = f"{'cfg':<3} | {'torch tuned ms':>14} {'tok/s':>7} {'fwd':>6} {'bwd':>6} {'opt':>6} {'RSS MiB':>7} | " \
          f"{'stock ms':>8} {'RSS MiB':>7}"
    if ember:
        hdr += f" | {'ember ms':>8} {'tok/s':>7} {'fwd':>6} {'bwd':>6} {'opt':>6} {'RSS MiB':>7} | {'x tuned':>7} {'x stock':>7}"
    if ember.get("libraries"):
        print(f"ember's libraries: {ember['libraries']}")
    print(hdr)
    for name in names:
        t = run_child(name, args.steps, True)
        s = run_child(name, args.steps, False)
        line = f"{name:<3} | {t['ms']:14.1f} {t['tok']:7.0f} {t['fwd']:6.1f} {t['bwd']:6.1f} {t['opt']:6.1f} {t['rss']:7.0f} | " \
               f"{s['ms']:8.1f} {s['rss']:7.0f}"
        if name in ember:
            e = ember[name]
            line += f" | {e['ms']:8.1f} {e['tok']:7.0f} {e['fwd']:6.1f} {e['bwd']:6.1f} {e['opt']:6.1f} {e['rss']:7.0f} | " \
                    f"{t['ms'] / e['ms']:7.2f} {s['ms'] / e['ms']:7.2f}"
        print(line, flush=True)
    print(f"(torch {t['torch']}, attention {t['attn']})")


if __name__ == "__main__":
    main()
