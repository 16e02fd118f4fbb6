#!/usr/bin/env python3
"""PyTorch peer of bench/ops.c: the same GEMM shapes and memory-bound ops on
the CPU with 2 threads, timed the same way (median of repetitions after 2
warmup calls, about 0.4 s per figure).

    python bench/ops_peer.py [--ember BUILD/bench/bench_ops] [--quick]

With --ember, it first runs bench_ops --tsv in the same environment
(OPENBLAS_CORETYPE, OMP_NUM_THREADS as they are) and prints one table with
ember, PyTorch and ember/PyTorch side by side; without it, PyTorch alone.
Tested with torch 2.15.0+cu132 (CPU), Python 3.11.
"""
import os
import platform
import subprocess
import time

import torch

from peer_util import compare_args

# name, batch, m, n, k, trans_a, trans_b  (as bench/ops.c)
GEMM = [
    ("square 512", 1, 512, 512, 512, False, False),
    ("square 1024", 1, 1024, 1024, 1024, False, False),
    ("square 2048", 1, 2048, 2048, 2048, False, False),
    ("attn/out fwd x W^T", 1, 1024, 768, 768, False, True),
    ("attn/out dX = dY W", 1, 1024, 768, 768, False, False),
    ("attn/out dW = dY^T X", 1, 768, 768, 1024, True, False),
    ("ffn1 fwd x W^T", 1, 1024, 3072, 768, False, True),
    ("ffn1 dX = dY W", 1, 1024, 768, 3072, False, False),
    ("ffn1 dW = dY^T X", 1, 3072, 768, 1024, True, False),
    ("ffn2 fwd x W^T", 1, 1024, 768, 3072, False, True),
    ("ffn2 dX = dY W", 1, 1024, 3072, 768, False, False),
    ("ffn2 dW = dY^T X", 1, 768, 3072, 1024, True, False),
    ("attn scores QK^T [96]", 96, 128, 128, 64, False, True),
    ("attn context PV [96]", 96, 128, 64, 128, False, False),
]
MEM_N = 16 << 20


def median_times(fns, quick):
    """Median seconds of each function, timed round-robin (one call of each
    per round) after 2 warmup calls each, about 0.4 s per function."""
    est = 0.0
    for fn in fns:
        fn()
        t0 = time.perf_counter()
        fn()
        est = max(est, time.perf_counter() - t0)
    lo, hi = (3, 9) if quick else (5, 41)
    reps = max(lo, min(hi, int(0.4 / est) if est > 0 else hi))
    ts = [[] for _ in fns]
    for _ in range(reps):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            ts[i].append(time.perf_counter() - t0)
    return [sorted(t)[len(t) // 2] for t in ts]


def operand(batch, rows, cols, trans):
    shape = (cols, rows) if trans else (rows, cols)
    t = torch.rand((batch,) + shape if batch > 1 else shape)
    return t.transpose(-1, -2) if trans else t


def torch_gemm(quick):
    out = {}
    for name, batch, m, n, k, ta, tb in GEMM:
        if quick and m * n * k > 1100 ** 3:
            continue
        a, b = operand(batch, m, k, ta), operand(batch, k, n, tb)
        t, = median_times([lambda: torch.matmul(a, b)], quick)
        out[name] = 2.0 * batch * m * n * k / t / 1e9
    return out


def torch_memory(quick):
    """GB/s of each op and of a plain copy (dst.copy_(src)) timed in the same rounds."""
    src, dst = torch.rand(MEM_N), torch.empty(MEM_N)
    copy = lambda: dst.copy_(src)
    copy_bytes = 2.0 * MEM_N * 4
    x, y = torch.rand(MEM_N), torch.rand(MEM_N)
    xs = torch.rand(16384, 1024)
    xl, w, b = torch.rand(21845, 768), torch.rand(768), torch.rand(768)
    xt = torch.rand(4096, 4096)
    ops = [("em_add (a + b)", 12.0 * MEM_N, lambda: torch.add(x, y)),
           ("em_gelu", 8.0 * MEM_N, lambda: torch.nn.functional.gelu(x)),
           ("em_softmax [16384,1024] dim -1", 8.0 * xs.numel(), lambda: torch.softmax(xs, -1)),
           ("em_layer_norm [21845,768]", 8.0 * xl.numel(),
            lambda: torch.nn.functional.layer_norm(xl, (768,), w, b, 1e-12)),
           ("contiguous(x^T) [4096,4096]", 8.0 * xt.numel(), lambda: xt.t().contiguous())]
    res = {}
    for name, nbytes, fn in ops:
        t_op, t_copy = median_times([fn, copy], quick)
        res[name] = (nbytes / t_op / 1e9, copy_bytes / t_copy / 1e9)
    return res


def run_ember(path, quick):
    cmd = [path, "--tsv"] + (["--quick"] if quick else [])
    text = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    info, gemm, mem = {}, {}, {}
    for line in text.splitlines():
        f = line.split("\t")
        if f[0] == "info":
            info[f[1]] = f[2]
        elif f[0] == "gemm" and f[1] != "case":
            mkl = float(f[10]) if len(f) > 10 and f[10] not in ("inf", "0.0") else 0.0   # 0: oneMKL not loaded
            gemm[f[1]] = (float(f[6]), float(f[7]), float(f[8]) if f[8] != "inf" else 0.0, f[9], mkl)
        elif f[0] == "mem" and f[1] != "case" and f[4]:
            mem[f[1]] = (float(f[4]), float(f[5]))
    return info, gemm, mem


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main():
    args = compare_args("bench_ops")
    ember = run_ember(args.ember, args.quick) if args.ember else None
    print(f"ops_peer: {cpu_model()}, torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}, "
          f"mkldnn={torch.backends.mkldnn.is_available()}, mkl={torch.backends.mkl.is_available()}")
    if ember:
        info = ember[0]
        print(f"bench_ops: {info.get('threads')} threads, OpenBLAS core {info.get('openblas_core')}, "
              f"oneDNN {info.get('onednn')}, measured FMA peak {info.get('measured_peak')} GFLOP/s")
    tg = torch_gemm(args.quick)
    print("\nGEMM, f32, GFLOP/s (median)")
    if ember:
        print(f"{'case':<22} | {'ember':>6} {'openblas':>8} {'onednn':>6} {'mkl':>6} {'e/best':>6} {'picked':>8} | "
              f"{'torch':>6} {'e/torch':>7}")
        for name, *_ in GEMM:
            if name not in tg or name not in ember[1]:
                continue
            e, ob, od, lib, mk = ember[1][name]
            print(f"{name:<22} | {e:6.1f} {ob:8.1f} {od:6.1f} {mk:6.1f} {e / max(ob, od, mk):6.2f} {lib:>8} | "
                  f"{tg[name]:6.1f} {e / tg[name]:7.2f}")
    else:
        for name, gf in tg.items():
            print(f"{name:<22} {gf:7.1f}")
    tm = torch_memory(args.quick)
    print("\nMemory-bound ops, f32, 16M elements, GB/s of bytes read + written (median);")
    print("/copy: against a plain copy timed in the same rounds (ember: its fastest copy; torch: copy_)")
    if ember:
        print(f"{'op':<30} | {'ember':>6} {'/copy':>6} | {'torch':>6} {'/copy':>6} | {'e/torch':>7}")
        for name, (gb, cgb) in tm.items():
            if name in ember[2]:
                e, ebw = ember[2][name]
                print(f"{name:<30} | {e:6.1f} {e / ebw:6.2f} | {gb:6.1f} {gb / cgb:6.2f} | {e / gb:7.2f}")
            else:
                print(f"{name:<30} | {'n/a':>6} {'':>6} | {gb:6.1f} {gb / cgb:6.2f} |")
    else:
        for name, (gb, cgb) in tm.items():
            print(f"{name:<30} {gb:7.1f} {gb / cgb:6.2f}")


if __name__ == "__main__":
    main()
