#!/usr/bin/env python3
"""PyTorch peer of bench/allreduce/allreduce.c: torch.distributed all_reduce
(SUM, f32) on the gloo backend between N local processes, timed the same way
(two warmups; about 1 s of repetitions, 5..50, each after a barrier; the median
of the slowest rank's times), with algorithm bandwidth = bytes / time and bus
bandwidth = algbw * 2 (N - 1) / N.

    python bench/allreduce/allreduce_peer.py [--ember BUILD/bench/allreduce/bench_allreduce]
                                            [--np 2] [--quick] [SIZE_MIB ...]

With --ember, it first runs the ember benchmark under mpirun with the same
sizes (shared-memory path, then EMBER_SHM=0 for OpenMPI's own all-reduce) and
prints one table with ember, OpenMPI, gloo and ember/gloo. Each rank uses one
thread (torch.set_num_threads(1)), as each ember rank does.
Tested with torch 2.15 (CPU), Python 3.11.
"""
import argparse
import os
import socket
import subprocess
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, world, port, sizes, quick, out):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    rows = []
    for mib in sizes:
        n = int(mib * 1048576 / 4)
        t = torch.full((n,), 1.0 + rank, dtype=torch.float32)
        dist.all_reduce(t)
        want = world * (world + 1) / 2
        assert t[0].item() == want and t[-1].item() == want, "wrong sum"
        dist.all_reduce(t)
        t0 = time.perf_counter()
        dist.barrier()
        dist.all_reduce(t)
        one = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(one, op=dist.ReduceOp.MAX)
        reps = int((0.3 if quick else 1.0) / max(one.item(), 1e-6))
        reps = min(max(reps, 5), 50)
        times = torch.zeros(reps, dtype=torch.float64)
        for r in range(reps):
            dist.barrier()
            a = time.perf_counter()
            dist.all_reduce(t)
            times[r] = time.perf_counter() - a
        dist.all_reduce(times, op=dist.ReduceOp.MAX)
        st = times.sort().values
        med, best = st[reps // 2].item(), st[0].item()
        algbw = n * 4 / med / 1e9
        bus = 2 * (world - 1) / world
        rows.append((mib, reps, med * 1e3, algbw, algbw * bus, best * 1e3, n * 4 / best / 1e9 * bus))
    if rank == 0:
        out.put(rows)
    dist.destroy_process_group()


def run_gloo(world, sizes, quick):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, world, port, sizes, quick, q)) for r in range(world)]
    for p in procs:
        p.start()
    rows = q.get()
    for p in procs:
        p.join()
    return rows


def run_ember(exe, world, sizes, quick, shm):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", EM_NUM_THREADS="1")
    if not shm:
        env["EMBER_SHM"] = "0"
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(world), exe, "--csv"]
    if quick:
        cmd.append("--quick")
    cmd += [str(s) for s in sizes]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines()[1:]:
        f = line.split(",")
        rows.append((float(f[0]), int(f[1]), float(f[2]), float(f[3]), float(f[4]), float(f[5]), float(f[6])))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ember", help="path to bench_allreduce")
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("sizes", nargs="*", type=float, default=[1, 25, 100])
    a = ap.parse_args()
    print(f"all_reduce SUM f32, {a.np} ranks on one node, 1 thread each; torch {torch.__version__}, "
          f"{os.cpu_count()} CPUs")
    gloo = run_gloo(a.np, a.sizes, a.quick)
    if not a.ember:
        print(f"{'MiB':>6} {'reps':>5} {'ms':>9} {'algbw GB/s':>11} {'busbw GB/s':>11} {'best busbw':>11}")
        for mib, reps, ms, alg, bus, _, best in gloo:
            print(f"{mib:>6g} {reps:>5d} {ms:>9.3f} {alg:>11.3f} {bus:>11.3f} {best:>11.3f}")
        return
    ember = run_ember(a.ember, a.np, a.sizes, a.quick, True)
    ompi = run_ember(a.ember, a.np, a.sizes, a.quick, False)
    print("busbw GB/s from the median time (= algbw for 2 ranks; 'best' from the fastest repetition);")
    print("ember: shared memory on one node; OpenMPI: ember with EMBER_SHM=0; gloo: torch.distributed")
    print(f"{'MiB':>6} {'ember':>8} {'OpenMPI':>8} {'gloo':>8} {'ember/gloo':>10} {'ember ms':>9} {'gloo ms':>9}"
          f" {'best ember':>10} {'best gloo':>10} {'best ratio':>10}")
    for e, o, g in zip(ember, ompi, gloo):
        print(f"{e[0]:>6g} {e[4]:>8.3f} {o[4]:>8.3f} {g[4]:>8.3f} {e[4] / g[4]:>9.2f}x {e[2]:>9.3f} {g[2]:>9.3f}"
              f" {e[6]:>10.3f} {g[6]:>10.3f} {e[6] / g[6]:>9.2f}x")


if __name__ == "__main__":
    main()
