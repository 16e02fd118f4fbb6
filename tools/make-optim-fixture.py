#!/usr/bin/env python3
"""Golden fixture for tests/test_optim.c: optimizer trajectories, scheduler lr
sequences, grad clipping and weight-decay grouping, from PyTorch and
transformers themselves.

    /work/venv/bin/python tools/make-optim-fixture.py
        writes tests/fixtures/optim_golden.safetensors

Parameters: four float32 tensors p0 [4,3], p1 [5], p2 [2,3,2], p3 [7] (N(0,1)).
Gradients: grad.<k>.p<i> for steps k = 0..4 (float32), with magnitudes that
change from step to step (so amsgrad's running max matters). p3 has NO
gradient at step 2 (p.grad = None): torch skips it, so its step counter falls
one behind the others.

Optimizer runs (name: setup), each for 5 steps from the same initial params:
  adamw_sched: AdamW() defaults + get_linear_schedule_with_warmup(W=2, T=10),
               scheduler.step() after every optimizer.step()
  adamw_ams:   AdamW(lr=1e-2, weight_decay=0.1, amsgrad=True)
  adamw_max:   AdamW(lr=5e-3, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.0, maximize=True)
  sgd:         SGD(lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-2)
  sgd_damp:    SGD(lr=0.05, momentum=0.8, dampening=0.3, maximize=True)
  adam_l2:     Adam(lr=1e-2, weight_decay=0.1)                  (L2 decay in the gradient)
  adam_ams_max: Adam(lr=5e-3, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.05, amsgrad=True,
               maximize=True)
Stored: <run>.step<k>.p<i> (params after step k), <run>.lr (float64 [5], the lr
each step used), and the final optimizer state <run>.state.<i>.<key> as in
torch's state_dict (step as float32 0-d).

Schedulers (LambdaLR over SGD(lr=1e-3) with a second group lr=3e-4):
  sched.linear   get_linear_schedule_with_warmup(W=2, T=10)
  sched.linear0  get_linear_schedule_with_warmup(W=0, T=10)
  sched.cosine   get_cosine_schedule_with_warmup(W=3, T=10)     (num_cycles 0.5)
  sched.constant get_constant_schedule_with_warmup(W=4)
Each stores float64 [13, 2]: get_last_lr() after construction, then after each
of 12 scheduler.step() calls (steps run past T on purpose).

Clipping (clip_grad_norm_, float32 grads g0 [3,4], g1 [6], g2 [2,2,2]):
  clip.<case>.in.g<j>, clip.<case>.out.g<j>, clip.<case>.norm (float32 0-d)
  cases: normal (max_norm 1.0, norm 2), small (max_norm 100: coef clamps to 1),
         inf_norm (norm_type inf, max_norm 0.5), has_inf (an inf in g1),
         has_nan (a NaN in g2), p1 (norm_type 1.0, max_norm 2.0).

Weight-decay grouping: metadata "distilbert.names" (comma-separated parameter
names of a DistilBertForSequenceClassification, dim 64, 2 layers), "distilbert.ndims"
(their ndims), "distilbert.trainer_decay" (names transformers' Trainer decays),
"distilbert.substring_decay" (names the no_decay=["bias","LayerNorm.weight"] rule decays).
"""
import math
import os

import safetensors
import torch
import transformers
from safetensors.torch import save_file
from transformers import (DistilBertConfig, DistilBertForSequenceClassification, Trainer,
                          get_constant_schedule_with_warmup, get_cosine_schedule_with_warmup,
                          get_linear_schedule_with_warmup)

# Pinned: the committed fixture was made with these.
assert torch.__version__.split("+")[0] == "2.15.0", torch.__version__
assert safetensors.__version__ == "0.8.0", safetensors.__version__
assert transformers.__version__ == "5.24.0", transformers.__version__

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "optim_golden.safetensors")

SHAPES = [(4, 3), (5,), (2, 3, 2), (7,)]
STEPS = 5
SCALES = [3.0, 1.0, 0.5, 2.0, 0.1]
NO_GRAD = (2, 3)   # (step, param): p3 has no gradient at step 2


def run_optimizer(out, name, init, grads, make_opt, make_sched=None):
    params = [t.clone().requires_grad_(True) for t in init]
    opt = make_opt(params)
    sched = make_sched(opt) if make_sched else None
    lrs = []
    for k in range(STEPS):
        for i, p in enumerate(params):
            p.grad = None if (k, i) == NO_GRAD else grads[k][i].clone()
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        if sched:
            sched.step()
        for i, p in enumerate(params):
            out[f"{name}.step{k}.p{i}"] = p.detach().clone()
    out[f"{name}.lr"] = torch.tensor(lrs, dtype=torch.float64)
    for i, st in opt.state_dict()["state"].items():
        for key, v in st.items():
            out[f"{name}.state.{i}.{key}"] = v.detach().clone()


def scheduler_lrs(make_sched):
    p = torch.zeros(1, requires_grad=True)
    q = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([{"params": [p]}, {"params": [q], "lr": 3e-4}], lr=1e-3)
    sched = make_sched(opt)
    rows = [sched.get_last_lr()]
    for _ in range(12):
        opt.step()
        sched.step()
        rows.append(sched.get_last_lr())
    return torch.tensor(rows, dtype=torch.float64)


def clip_case(out, name, grads, max_norm, norm_type):
    params = []
    for j, g in enumerate(grads):
        p = torch.zeros_like(g, requires_grad=True)
        p.grad = g.clone()
        params.append(p)
        out[f"clip.{name}.in.g{j}"] = g.clone()
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type=norm_type)
    out[f"clip.{name}.norm"] = norm.detach().clone()
    for j, p in enumerate(params):
        out[f"clip.{name}.out.g{j}"] = p.grad.clone()


def main():
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(20240917)
    out = {}
    init = [torch.randn(s, generator=gen, dtype=torch.float32) for s in SHAPES]
    grads = [[torch.randn(s, generator=gen, dtype=torch.float32) * SCALES[k] for s in SHAPES] for k in range(STEPS)]
    for i, t in enumerate(init):
        out[f"init.p{i}"] = t
    for k in range(STEPS):
        for i in range(len(SHAPES)):
            if (k, i) != NO_GRAD:
                out[f"grad.{k}.p{i}"] = grads[k][i]

    run_optimizer(out, "adamw_sched", init, grads, lambda ps: torch.optim.AdamW(ps),
                  lambda o: get_linear_schedule_with_warmup(o, num_warmup_steps=2, num_training_steps=10))
    run_optimizer(out, "adamw_ams", init, grads,
                  lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1, amsgrad=True))
    run_optimizer(out, "adamw_max", init, grads,
                  lambda ps: torch.optim.AdamW(ps, lr=5e-3, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.0,
                                               maximize=True))
    run_optimizer(out, "sgd", init, grads,
                  lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-2))
    run_optimizer(out, "sgd_damp", init, grads,
                  lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.8, dampening=0.3, maximize=True))
    run_optimizer(out, "adam_l2", init, grads, lambda ps: torch.optim.Adam(ps, lr=1e-2, weight_decay=0.1))
    run_optimizer(out, "adam_ams_max", init, grads,
                  lambda ps: torch.optim.Adam(ps, lr=5e-3, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.05,
                                              amsgrad=True, maximize=True))

    out["sched.linear"] = scheduler_lrs(lambda o: get_linear_schedule_with_warmup(o, 2, 10))
    out["sched.linear0"] = scheduler_lrs(lambda o: get_linear_schedule_with_warmup(o, 0, 10))
    out["sched.cosine"] = scheduler_lrs(lambda o: get_cosine_schedule_with_warmup(o, 3, 10))
    out["sched.constant"] = scheduler_lrs(lambda o: get_constant_schedule_with_warmup(o, 4))

    cg = [torch.randn(s, generator=gen, dtype=torch.float32) for s in [(3, 4), (6,), (2, 2, 2)]]
    base = math.sqrt(sum(float((g.double() ** 2).sum()) for g in cg))
    cg = [g * (2.0 / base) for g in cg]   # total 2-norm ~2
    clip_case(out, "normal", cg, 1.0, 2.0)
    clip_case(out, "small", cg, 100.0, 2.0)
    clip_case(out, "inf_norm", cg, 0.5, float("inf"))
    clip_case(out, "p1", cg, 2.0, 1.0)
    with_inf = [g.clone() for g in cg]
    with_inf[1][2] = float("inf")
    clip_case(out, "has_inf", with_inf, 1.0, 2.0)
    with_nan = [g.clone() for g in cg]
    with_nan[2][1, 0, 1] = float("nan")
    clip_case(out, "has_nan", with_nan, 1.0, 2.0)

    cfg = DistilBertConfig(vocab_size=1000, dim=64, n_layers=2, n_heads=4, hidden_dim=128, num_labels=2)
    model = DistilBertForSequenceClassification(cfg)
    named = list(model.named_parameters())
    trainer_decay = set(Trainer.get_decay_parameter_names(None, model))
    no_decay = ["bias", "LayerNorm.weight"]
    substring_decay = [n for n, _ in named if not any(nd in n for nd in no_decay)]
    meta = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "distilbert.names": ",".join(n for n, _ in named),
        "distilbert.ndims": ",".join(str(p.ndim) for _, p in named),
        "distilbert.trainer_decay": ",".join(n for n, _ in named if n in trainer_decay),
        "distilbert.substring_decay": ",".join(substring_decay),
    }
    os.makedirs(os.path.dirname(FIXTURE), exist_ok=True)
    save_file({k: v.contiguous() for k, v in out.items()}, FIXTURE, metadata=meta)
    print(f"wrote {FIXTURE}: {len(out)} tensors")


if __name__ == "__main__":
    main()
