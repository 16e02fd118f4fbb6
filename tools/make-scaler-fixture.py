#!/usr/bin/env python3
"""Golden fixture for tests/test_amp.c: torch.amp.GradScaler on scripted
sequences of finite, inf and NaN gradients, on the CPU.

    /work/venv/bin/python tools/make-scaler-fixture.py
        writes tests/fixtures/scaler_golden.safetensors

Each scenario <s> sets the gradients by hand (no backward) before each step t:
    scaler.unscale_(opt)  (explicitly, for every optimizer; step() then skips it)
    scaler.step(opt)      (SGD: p -= lr * g, skipped on inf/NaN)
    scaler.update()
and stores, for t = 0..T-1 (float32 unless noted):
    <s>.init.<o>.p<i>      the parameters before step 0
    <s>.grad.<o>.p<i>      [T, ...] the gradient set before step t (scaled)
    <s>.unscaled.<o>.p<i>  [T, ...] the gradient after unscale_
    <s>.param.<o>.p<i>     [T, ...] the parameter after step t
    <s>.found_inf.<o>      [T] the optimizer's found_inf after unscale_
    <s>.stepped.<o>        [T] int32: 1 when step() ran optimizer.step()
    <s>.scale              [T] scale after update()
    <s>.tracker            [T] int32: growth tracker after update()
    <s>.scaled_loss        0-d: scaler.scale(tensor(1.2345)) before step 0
Metadata: "<s>.opts" = "init_scale,growth_factor,backoff_factor,growth_interval",
"<s>.lr" = the SGD lr, "<s>.n_opts", "<s>.n_params.<o>", "<s>.steps",
"<s>.state_dict" = the final state_dict() as
"scale,growth_factor,backoff_factor,growth_interval,_growth_tracker".

Scenarios:
  interval3  init 1024, growth 2, backoff 0.5, interval 3; one SGD(lr=0.1)
             over p0 [5], p1 [2,3]; infs, NaNs and -infs scripted between
             clean runs (growth after 3 clean steps, backoff on each bad one).
  defaults   torch's defaults (2^16, 2, 0.5, 2000); SGD(lr=0.01) over p0 [4];
             2010 steps: an inf at step 5, so 2000 clean steps later (step
             2005) the scale grows; a NaN at step 2008.
  two_opts   init 8, growth 4, backoff 0.25, interval 2; two SGDs (lr 0.5 and
             0.25), A over a0 [3], B over b0 [2,2]; bad gradients in one
             optimizer only: that one skips, the other steps, the scale backs
             off (found_inf summed over optimizers).
  overflow   init 2^127, interval 1: every clean step tries to grow to 2^128,
             which is inf in f32, so the scale stays (tracker reset).
"""
import math

import safetensors
import torch
from safetensors.torch import save_file

# Pinned: the committed fixture was made with these.
assert torch.__version__.split("+")[0] == "2.15.0", torch.__version__
assert safetensors.__version__ == "0.8.0", safetensors.__version__

OUT = "tests/fixtures/scaler_golden.safetensors"
torch.manual_seed(7)

tensors = {}
meta = {}


def bad_grad(g, kind, where):
    g = g.clone()
    flat = g.view(-1)
    flat[where % flat.numel()] = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}[kind]
    return g


def run(name, opts, lrs, shapes, steps, bad):
    """shapes[o] = list of param shapes of optimizer o; bad = {(t, o): kind}."""
    init_scale, growth, backoff, interval = opts
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_factor=growth,
                                  backoff_factor=backoff, growth_interval=interval)
    params = [[torch.randn(s) for s in ps] for ps in shapes]
    for o, ps in enumerate(params):
        for i, p in enumerate(ps):
            tensors[f"{name}.init.{o}.p{i}"] = p.clone()
    params = [[p.clone().requires_grad_(True) for p in ps] for ps in params]
    optims = [torch.optim.SGD(ps, lr=lr) for ps, lr in zip(params, lrs)]
    tensors[f"{name}.scaled_loss"] = scaler.scale(torch.tensor(1.2345, dtype=torch.float32)).detach().clone()

    rec = {k: [[[] for _ in ps] for ps in params] for k in ("grad", "unscaled", "param")}
    found = [[] for _ in params]
    stepped = [[] for _ in params]
    scales, trackers = [], []
    for t in range(steps):
        scale_now = scaler.get_scale()
        for o, ps in enumerate(params):
            for i, p in enumerate(ps):
                # gradients of a loss scaled by the current scale: magnitudes near the scale
                # (capped, so that the overflow scenario's only infs are the scripted ones)
                g = torch.randn(p.shape) * min(scale_now, 2.0**120)
                if (t, o) in bad and i == len(ps) - 1:
                    g = bad_grad(g, bad[(t, o)], t)
                p.grad = g
                rec["grad"][o][i].append(g.clone())
        for o, opt in enumerate(optims):
            scaler.unscale_(opt)
            for i, p in enumerate(params[o]):
                rec["unscaled"][o][i].append(p.grad.clone())
            found[o].append(float(sum(v.item() for v in scaler._per_optimizer_states[id(opt)]["found_inf_per_device"].values())))
            before = [p.detach().clone() for p in params[o]]
            scaler.step(opt)
            changed = any(not torch.equal(b, p.detach()) for b, p in zip(before, params[o]))
            stepped[o].append(1 if changed else 0)
            assert changed == (found[o][-1] == 0.0)
            for i, p in enumerate(params[o]):
                rec["param"][o][i].append(p.detach().clone())
        scaler.update()
        scales.append(scaler.get_scale())
        trackers.append(int(scaler._get_growth_tracker()))

    for k, per in rec.items():
        for o, ps in enumerate(per):
            for i, lst in enumerate(ps):
                tensors[f"{name}.{k}.{o}.p{i}"] = torch.stack(lst).contiguous()
    for o in range(len(params)):
        tensors[f"{name}.found_inf.{o}"] = torch.tensor(found[o], dtype=torch.float32)
        tensors[f"{name}.stepped.{o}"] = torch.tensor(stepped[o], dtype=torch.int32)
        meta[f"{name}.n_params.{o}"] = str(len(params[o]))
    tensors[f"{name}.scale"] = torch.tensor(scales, dtype=torch.float32)
    tensors[f"{name}.tracker"] = torch.tensor(trackers, dtype=torch.int32)
    meta[f"{name}.opts"] = ",".join(repr(float(x)) for x in opts[:3]) + f",{opts[3]}"
    meta[f"{name}.lr"] = ",".join(repr(float(x)) for x in lrs)
    meta[f"{name}.n_opts"] = str(len(params))
    meta[f"{name}.steps"] = str(steps)
    sd = scaler.state_dict()
    meta[f"{name}.state_dict"] = ",".join(repr(float(sd[k])) if isinstance(sd[k], float) else str(sd[k])
                                          for k in ("scale", "growth_factor", "backoff_factor",
                                                    "growth_interval", "_growth_tracker"))


run("interval3", (1024.0, 2.0, 0.5, 3), [0.1], [[(5,), (2, 3)]], 16,
    {(3, 0): "inf", (7, 0): "nan", (8, 0): "-inf", (12, 0): "inf", (13, 0): "nan"})
run("defaults", (2.0**16, 2.0, 0.5, 2000), [0.01], [[(4,)]], 2010,
    {(5, 0): "inf", (2008, 0): "nan"})
run("two_opts", (8.0, 4.0, 0.25, 2), [0.5, 0.25], [[(3,)], [(2, 2)]], 10,
    {(2, 0): "inf", (5, 1): "nan", (6, 1): "inf", (9, 0): "nan"})
run("overflow", (2.0**127, 2.0, 0.5, 1), [1e-3], [[(3,)]], 4, {(2, 0): "inf"})

meta["scenarios"] = "interval3,defaults,two_opts,overflow"
meta["torch"] = torch.__version__
save_file(tensors, OUT, metadata=meta)
print(f"wrote {OUT}: {len(tensors)} tensors")
