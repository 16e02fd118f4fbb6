#!/usr/bin/env python3
"""Checks that transformers loads a folder written by `seqcls --output_dir` (model AND tokenizer)
and predicts what ember's `classify` predicts, sentence for sentence.

    /work/venv/bin/python tools/compare-classify.py OUTPUT_DIR DEV.tsv [build/examples/classify]

Loads OUTPUT_DIR with AutoTokenizer and AutoModelForSequenceClassification (eval mode, f32),
runs the dev sentences (column "sentence") through both, and prints: the number of sentences,
how many predicted labels agree, the largest |logit difference|, whether the tokenizer gave
the same ids as ember (checked through the logits), and the accuracy of both against the
"label" column. Exit 1 if any predicted label differs or the label names differ.
"""
import csv
import subprocess
import sys

import torch
import transformers
from transformers import AutoModelForSequenceClassification, AutoTokenizer


def main():
    out_dir, dev = sys.argv[1], sys.argv[2]
    classify = sys.argv[3] if len(sys.argv) > 3 else "build/examples/classify"
    with open(dev, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    texts = [r["sentence"] for r in rows]
    tok = AutoTokenizer.from_pretrained(out_dir)
    model = AutoModelForSequenceClassification.from_pretrained(out_dir).eval()
    names = [model.config.id2label[i] for i in range(model.config.num_labels)]
    hf_logits = []
    with torch.no_grad():
        for i in range(0, len(texts), 64):
            enc = tok(texts[i:i + 64], padding=True, truncation=True, return_tensors="pt")
            hf_logits.append(model(**enc).logits.float())
    hf_logits = torch.cat(hf_logits)
    hf_pred = [names[int(j)] for j in hf_logits.argmax(-1)]

    res = subprocess.run([classify, "--model_dir", out_dir], input="\n".join(texts) + "\n",
                         capture_output=True, text=True, check=True)
    lines = res.stdout.strip("\n").split("\n")
    assert len(lines) == len(texts), f"classify printed {len(lines)} lines for {len(texts)} sentences"
    em_logits = torch.tensor([[float(x) for x in ln.split()[:-1]] for ln in lines])
    em_pred = [ln.split()[-1] for ln in lines]
    agree = sum(a == b for a, b in zip(hf_pred, em_pred))
    diff = (em_logits - hf_logits).abs().max().item()
    gold = [names[int(r["label"])] if r["label"].strip().isdigit() and len(names) > int(r["label"]) else r["label"]
            for r in rows]
    acc_hf = sum(a == b for a, b in zip(hf_pred, gold)) / len(rows)
    acc_em = sum(a == b for a, b in zip(em_pred, gold)) / len(rows)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, tokenizer {type(tok).__name__}")
    print(f"{len(texts)} sentences: {agree} predictions agree; max |logit diff| {diff:.2e}; "
          f"accuracy transformers {acc_hf:.4f}, classify {acc_em:.4f}; labels {names}")
    sys.exit(0 if agree == len(texts) else 1)


if __name__ == "__main__":
    main()
