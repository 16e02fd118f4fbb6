"""SST-2 with transformers and Accelerate: the Python peer of examples/08_sst2_loop.c.

A small DistilBERT from scratch (or, given a Hugging Face folder, that model with a fresh
classification head), trained with AdamW and linear warmup for MAX_STEPS optimizer steps
on the shuffled SST-2 train set, then the dev accuracy gathered across processes.
Run from the repository root (the data is ../shared/data):

    python examples/peers/sst2_loop.py [MODEL_DIR]
    ACCELERATE_USE_CPU=true torchrun --nproc_per_node 2 examples/peers/sst2_loop.py   # 2 processes on the CPU

Exits 1 unless the dev accuracy is above 0.7.
"""
import csv
import sys

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader
from transformers import (AutoModelForSequenceClassification, AutoTokenizer, BertTokenizerFast, DataCollatorWithPadding,
                          DistilBertConfig, DistilBertForSequenceClassification, get_linear_schedule_with_warmup)

DATA = "../shared/data"
MAX_LEN, BATCH, MAX_STEPS = 66, 16, 400


def load(path, tokenizer):
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    enc = tokenizer([r["sentence"] for r in rows], truncation=True, max_length=MAX_LEN)
    return [{"input_ids": ids, "labels": int(r["label"])} for ids, r in zip(enc["input_ids"], rows)]


def main():
    accelerator = Accelerator()
    torch.manual_seed(42)
    if len(sys.argv) > 1:  # a Hugging Face folder: fine-tune it
        tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
        model = AutoModelForSequenceClassification.from_pretrained(sys.argv[1], num_labels=2)
    else:  # a small DistilBERT from scratch
        tokenizer = BertTokenizerFast(f"{DATA}/bert-base-uncased/vocab.txt")
        config = DistilBertConfig(vocab_size=tokenizer.vocab_size, dim=64, hidden_dim=256, n_layers=2, n_heads=4,
                                  max_position_embeddings=MAX_LEN)
        model = DistilBertForSequenceClassification(config)
    collate = DataCollatorWithPadding(tokenizer)
    train_dl = DataLoader(load(f"{DATA}/sst2/train.tsv", tokenizer), batch_size=BATCH, shuffle=True, collate_fn=collate)
    dev_dl = DataLoader(load(f"{DATA}/sst2/dev.tsv", tokenizer), batch_size=64, collate_fn=collate)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5 if len(sys.argv) > 1 else 1e-3)
    steps = MAX_STEPS * accelerator.num_processes  # a prepared scheduler steps once per process per optimizer step
    scheduler = get_linear_schedule_with_warmup(optimizer, steps // 10, steps)
    model, optimizer, train_dl, dev_dl, scheduler = accelerator.prepare(model, optimizer, train_dl, dev_dl, scheduler)
    model.train()
    for step, batch in enumerate(train_dl):
        loss = model(**batch).loss
        accelerator.backward(loss)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        if step + 1 == MAX_STEPS:
            break
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for batch in dev_dl:
            preds, labels = accelerator.gather_for_metrics((model(**batch).logits.argmax(-1), batch["labels"]))
            correct += (preds == labels).sum().item()
            total += len(labels)
    accuracy = correct / total
    accelerator.print(f"dev accuracy {accuracy:.4f} ({total} sentences) after {MAX_STEPS} steps")
    if not accuracy > 0.7:
        sys.exit(f"training failed: dev accuracy {accuracy:.4f} <= 0.7")


if __name__ == "__main__":
    main()
