#!/usr/bin/env python3
"""Sharding fixture for tests/test_sampler.c: what Accelerate's own DataLoader
preparation yields on every rank, over a grid of
(N, batch_size, world, drop_last, even_batches, split_batches).

    /work/venv/bin/python tools/make-shard-fixture.py
        writes tests/fixtures/shard_grid.txt

Each grid point runs accelerate.data_loader.prepare_data_loader (the code path
of Accelerator.prepare, which wraps the batch sampler in BatchSamplerShard when
world > 1 and leaves a plain torch BatchSampler when world == 1) on a
DataLoader over range(N) with a SequentialSampler, once per rank, and records
what that rank iterates: the dataset indices of every batch, len(dataloader)
(Accelerate's __len__, which over-counts with split_batches and
even_batches=False: huggingface/accelerate#4122), and GradientState.remainder
seen during the iteration.

Format (text, one line per rank; '#' lines are comments):
    R N bs world drop_last even split rank acc_len remainder n_batches|b0|b1|...
      where each b is the batch's indices separated by spaces ("" if empty)
    E N bs world drop_last even split
      Accelerate refused the combination (split_batches with bs % world != 0)
batch_size is the DataLoader's batch_size: per process without split_batches,
the global batch with it (Accelerate's convention).
"""
import os

import accelerate
import torch
from accelerate.data_loader import prepare_data_loader
from accelerate.state import GradientState
from torch.utils.data import DataLoader

# Pinned: the committed fixture was made with these.
assert accelerate.__version__ == "1.15.0", accelerate.__version__
assert torch.__version__.split("+")[0] == "2.15.0", torch.__version__

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "shard_grid.txt")

NS = [0, 1, 2, 3, 5, 7, 8, 10, 13, 16, 17, 33]
BATCH_SIZES = [1, 2, 3, 4, 6, 8]
WORLDS = [1, 2, 3, 4, 8]


def run_rank(n, bs, world, rank, drop_last, even, split):
    dl = DataLoader(list(range(n)), batch_size=bs, shuffle=False, drop_last=drop_last)
    p = prepare_data_loader(dl, device=torch.device("cpu"), num_processes=world, process_index=rank,
                            split_batches=split, put_on_device=False, even_batches=even)
    batches, remainder = [], None
    for b in p:
        batches.append([int(x) for x in b])
        remainder = GradientState().remainder
    if remainder is None:   # no batch at all: read it the way a loop would
        p.begin()
        remainder = GradientState().remainder
        p.end()
    return len(p), remainder, batches


def main():
    lines = ["# made by tools/make-shard-fixture.py with accelerate %s, torch %s"
             % (accelerate.__version__, torch.__version__.split("+")[0])]
    for n in NS:
        for bs in BATCH_SIZES:
            for world in WORLDS:
                for drop_last in (0, 1):
                    for even in (0, 1):
                        for split in (0, 1):
                            key = "%d %d %d %d %d %d" % (n, bs, world, drop_last, even, split)
                            try:
                                runs = [run_rank(n, bs, world, r, bool(drop_last), bool(even), bool(split))
                                        for r in range(world)]
                            except ValueError:
                                lines.append("E " + key)
                                continue
                            for r, (acc_len, rem, batches) in enumerate(runs):
                                body = "|".join(" ".join(map(str, b)) for b in batches)
                                lines.append("R %s %d %d %d %d|%s" % (key, r, acc_len, rem, len(batches), body))
    with open(FIXTURE, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote", FIXTURE, len(lines), "lines")


if __name__ == "__main__":
    main()
