#!/usr/bin/env python3
"""Peer of bench/dataloader/dataloader.c: PyTorch's DataLoader over SST-2 train
pretokenized by HF's BertTokenizerFast ([CLS]/[SEP], truncation to 128), with
transformers' DataCollatorWithPadding, batch 32, shuffle, and 0, 1 and 2
worker processes (torch's defaults otherwise: workers restart each epoch).

Per epoch it prints wall batches/s and the CPU time the main process spends
per batch. The checksum (the sum of all input_ids and the count of real tokens
over one epoch) does not depend on the order and must equal bench_dataloader's.
Usage: dataloader_peer.py [--vocab F] [--sst2 F] [--epochs N] [--batch B]
"""
import argparse
import os
import sys
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import transformers  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402
from transformers import DataCollatorWithPadding  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from peer_util import load_tokenizer, shared  # noqa: E402


class Pretokenized(torch.utils.data.Dataset):
    def __init__(self, enc, labels):
        self.enc, self.labels = enc, labels

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return {"input_ids": self.enc["input_ids"][i], "token_type_ids": self.enc["token_type_ids"][i],
                "attention_mask": self.enc["attention_mask"][i], "label": self.labels[i]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", default=shared("bert-base-uncased/vocab.txt"))
    ap.add_argument("--sst2", default=shared("sst2/train.tsv"))
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32)
    a = ap.parse_args()
    tok = load_tokenizer(a.vocab)
    sent, labels = [], []
    with open(a.sst2, encoding="utf-8") as f:
        next(f)
        for line in f:
            s, lab = line.rstrip("\n").split("\t")
            sent.append(s)
            labels.append(int(lab))
    t0 = time.perf_counter()
    ds = Pretokenized(tok(sent, truncation=True, max_length=128), labels)
    print(f"torch {torch.__version__.split('+')[0]} DataLoader + transformers {transformers.__version__} "
          f"DataCollatorWithPadding: SST-2 train, {len(ds)} sentences tokenized in {time.perf_counter() - t0:.2f} s; "
          f"batch {a.batch}, shuffle")
    collate = DataCollatorWithPadding(tok)
    for workers in (0, 1, 2):
        dl = DataLoader(ds, batch_size=a.batch, shuffle=True, collate_fn=collate, num_workers=workers,
                        generator=torch.Generator().manual_seed(42))
        best, best_cpu = 1e30, 1e30
        for _ in range(a.epochs):
            id_sum = tokens = padded = nb = 0
            t0, c0 = time.perf_counter(), time.process_time()
            for b in dl:
                id_sum += int(b["input_ids"].sum())
                tokens += int(b["attention_mask"].sum())
                padded += b["input_ids"].numel()
                nb += 1
            best = min(best, time.perf_counter() - t0)
            best_cpu = min(best_cpu, time.process_time() - c0)
        print(f"torch num_workers={workers}: {nb} batches/epoch, best of {a.epochs} epochs {best:.3f} s: "
              f"{nb / best:8.0f} batches/s; main-process CPU {1e6 * best_cpu / nb:.2f} us/batch "
              f"(checksum {id_sum}, {tokens} tokens, {100.0 * (padded - tokens) / padded:.1f}% padding)")


if __name__ == "__main__":
    main()
