#!/usr/bin/env python3
"""Golden fixtures for tests/test_distilbert.c: a tiny DistilBERT made and run
by Hugging Face transformers, so ember's DistilBERT is checked against the real
thing (logits, loss and the gradient of every parameter).

    /work/venv/bin/python tools/make-distilbert-fixture.py
        writes tests/fixtures/distilbert-tiny/           (config.json, model.safetensors:
                                                            DistilBertForSequenceClassification)
               tests/fixtures/distilbert-tiny-mlm/       (DistilBertForMaskedLM, same config:
                                                            the layout of distilbert-base-uncased)
               tests/fixtures/distilbert_tiny_golden.safetensors
               tests/fixtures/bert-tiny/                 (BertModel, MiniLM-style: no "bert." prefix)
               tests/fixtures/bert_tiny_golden.safetensors
               tests/fixtures/bert-tiny-cls/             (BertForSequenceClassification with the pooler,
                                                            token types, 3 labels)
               tests/fixtures/bert_tiny_cls_golden.safetensors (its batch, logits, loss, every gradient)
    /work/venv/bin/python tools/make-distilbert-fixture.py --bert-cls
        writes only the last two (the others stay as they are)

    /work/venv/bin/python tools/make-distilbert-fixture.py --verify DIR
        loads DIR (a sequence classifier written by ember's em_save_pretrained
        from distilbert-tiny or bert-tiny) with transformers, checks that every
        key loads (no missing, no unexpected), and compares its logits (BERT:
        its body's hidden states) on the golden batch with the golden ones.

The model: dim 64, 2 layers, 4 heads, hidden_dim 256, vocab 1000,
max_position_embeddings 64, 3 labels with names. Its weights are HF's init
perturbed with seeded noise (LayerNorm weights and biases too, so that their
gradients are not trivial). The batch (4 x 12) is right-padded with id 0 and
attention_mask 0 on three different lengths. Everything runs in float32, in
eval mode (dropout off), with the eager attention (SDPA is checked to agree).

Golden tensors: input_ids (i64 [4,12]), attention_mask (i64 [4,12]), labels
(i64 [4]), logits ([4,3]), loss (0-d), grad.<parameter name> for all the
names of the classifier, logits64 (the same in float64, to tell ember's own
rounding from HF's), and mlm.last_hidden_state ([4,12,64]):
DistilBertModel's output with the MLM checkpoint's weights.

BERT (hidden 32, 2 layers, 4 heads, intermediate 64, vocab 100, 2 token
types): bert_tiny_golden holds input_ids, attention_mask, token_type_ids
([3,7]), last_hidden_state and pooler_output, from BertModel in eval mode.
"""
import json
import os
import sys

import safetensors
import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import (BertConfig, BertForSequenceClassification, BertModel, DistilBertConfig,
                          DistilBertForMaskedLM, DistilBertForSequenceClassification)

# Pinned: the committed fixtures were made with these.
assert torch.__version__.split("+")[0] == "2.15.0", torch.__version__
assert transformers.__version__ == "5.24.0", transformers.__version__
assert safetensors.__version__ == "0.8.0", safetensors.__version__

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "tests", "fixtures")
CLS_DIR = os.path.join(FIX, "distilbert-tiny")
MLM_DIR = os.path.join(FIX, "distilbert-tiny-mlm")
GOLDEN = os.path.join(FIX, "distilbert_tiny_golden.safetensors")
BERT_DIR = os.path.join(FIX, "bert-tiny")
BERT_GOLDEN = os.path.join(FIX, "bert_tiny_golden.safetensors")
BERT_CLS_DIR = os.path.join(FIX, "bert-tiny-cls")
BERT_CLS_GOLDEN = os.path.join(FIX, "bert_tiny_cls_golden.safetensors")

LABELS = {0: "negative", 1: "neutral", 2: "positive"}
LENGTHS = [12, 9, 5, 12]
SEQ = 12


def config():
    return DistilBertConfig(vocab_size=1000, max_position_embeddings=64, n_layers=2, n_heads=4, dim=64,
                            hidden_dim=256, num_labels=3, id2label=LABELS,
                            label2id={v: k for k, v in LABELS.items()})


def perturb(model, g):
    """HF's init is N(0, 0.02) and LayerNorm 1/0; add noise so every gradient is non-trivial."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=p.dtype)
            if "LayerNorm" in name or "layer_norm" in name:
                p.add_(noise * 0.1)
            elif name.endswith("bias"):
                p.copy_(noise * 0.05)
            else:
                p.add_(noise * 0.05)


def batch(g):
    ids = torch.randint(1, 1000, (len(LENGTHS), SEQ), generator=g, dtype=torch.int64)
    mask = torch.zeros(len(LENGTHS), SEQ, dtype=torch.int64)
    for i, n in enumerate(LENGTHS):
        mask[i, :n] = 1
        ids[i, n:] = 0          # pad_token_id
    ids[:, 0] = 101            # a [CLS]-like first token
    labels = torch.tensor([0, 2, 1, 2], dtype=torch.int64)
    return ids, mask, labels


def run(model, ids, mask, labels):
    model.zero_grad(set_to_none=True)
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    out.loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    return out.logits.detach().clone(), out.loss.detach().clone(), grads


def make():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(20261130)
    model = DistilBertForSequenceClassification(config())
    perturb(model, g)
    model.eval()
    ids, mask, labels = batch(g)

    model.set_attn_implementation("eager")
    logits, loss, grads = run(model, ids, mask, labels)
    model.set_attn_implementation("sdpa")
    logits_sdpa, _, _ = run(model, ids, mask, labels)
    assert torch.allclose(logits, logits_sdpa, rtol=1e-5, atol=1e-6), (logits - logits_sdpa).abs().max()
    model.set_attn_implementation("eager")

    m64 = DistilBertForSequenceClassification(config()).double()
    m64.load_state_dict({k: v.double() for k, v in model.state_dict().items()})
    m64.set_attn_implementation("eager")
    m64.eval()
    logits64, _, grads64 = run(m64, ids, mask, labels)

    model.save_pretrained(CLS_DIR)

    mlm = DistilBertForMaskedLM(config())
    perturb(mlm, g)
    mlm.eval()
    mlm.set_attn_implementation("eager")
    mlm.save_pretrained(MLM_DIR)
    with torch.no_grad():
        hidden = mlm.distilbert(input_ids=ids, attention_mask=mask).last_hidden_state

    out = {"input_ids": ids, "attention_mask": mask, "labels": labels, "logits": logits, "loss": loss,
           "logits64": logits64, "mlm.last_hidden_state": hidden}
    for n, gr in grads.items():
        out["grad." + n] = gr
    save_file({k: v.contiguous() for k, v in out.items()}, GOLDEN,
              metadata={"source": f"tools/make-distilbert-fixture.py, torch {torch.__version__}, transformers "
                                  f"{transformers.__version__}: DistilBertForSequenceClassification dim 64, 2 layers, "
                                  f"4 heads, vocab 1000, 3 labels"})   # one key: safetensors orders keys at random
    # HF's own float32 rounding, measured against float64: per tensor, max |g32 - g64| over max |g64|
    # (k_lin.bias has a gradient that is exactly 0 in exact arithmetic: its error is over the largest gradient)
    scale = max(g.abs().max().item() for g in grads64.values())
    errs = {n: ((grads[n].double() - grads64[n]).abs().max() / max(grads64[n].abs().max().item(), 1e-3 * scale)).item()
            for n in grads}
    worst = max(errs, key=errs.get)
    print(f"wrote {CLS_DIR}, {MLM_DIR}, {GOLDEN}: loss {loss.item():.9g}, {len(grads)} gradients; "
          f"HF f32 vs f64: logits {((logits.double() - logits64).abs().max() / logits64.abs().max()).item():.3g}, "
          f"worst gradient {worst} {errs[worst]:.3g}")


def tiny_bert(model_cls, seed, gseed, **extra):
    """A tiny BERT-layout model (vocab 100, hidden 32, 2 layers, 4 heads) with noisy weights, eval
    mode, eager attention; and the generator that made the noise (the batch draws from it next)."""
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(gseed)
    cfg = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=32, type_vocab_size=2, **extra)
    model = model_cls(cfg)
    perturb(model, g)
    model.eval()
    model.set_attn_implementation("eager")
    return model, g


def bert_batch(g, rows, cols, pad_from, type_spans):
    """ids (padding 0 from pad_from[row]), mask, token types (1 over each (row, start, end))."""
    ids = torch.randint(1, 100, (rows, cols), generator=g, dtype=torch.int64)
    mask = torch.ones(rows, cols, dtype=torch.int64)
    for r, start in pad_from.items():
        mask[r, start:] = 0
    ids[mask == 0] = 0
    types = torch.zeros(rows, cols, dtype=torch.int64)
    for r, a, b in type_spans:
        types[r, a:b] = 1
    return ids, mask, types


def make_bert():
    model, g = tiny_bert(BertModel, 1, 7)
    ids, mask, types = bert_batch(g, 3, 7, {1: 5, 2: 3}, [(0, 4, 7), (1, 3, 5)])
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, token_type_ids=types)
    model.save_pretrained(BERT_DIR)
    save_file({"input_ids": ids, "attention_mask": mask, "token_type_ids": types,
               "last_hidden_state": out.last_hidden_state.contiguous(), "pooler_output": out.pooler_output.contiguous()},
              BERT_GOLDEN, metadata={"source": f"tools/make-distilbert-fixture.py, torch {torch.__version__}, "
                                               f"transformers {transformers.__version__}: BertModel"})
    print(f"wrote {BERT_DIR}, {BERT_GOLDEN}")


def make_bert_cls():
    """BertForSequenceClassification (pooler + classifier, token types, padding) with noisy weights:
    logits, loss and the gradient of every parameter, for the BERT half of the parity test."""
    model, g = tiny_bert(BertForSequenceClassification, 2, 11, num_labels=3)
    ids, mask, types = bert_batch(g, 4, 9, {1: 6, 3: 4}, [(0, 5, 9), (2, 3, 7)])
    labels = torch.tensor([2, 0, 1, 2], dtype=torch.int64)
    model.zero_grad(set_to_none=True)
    out = model(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels)
    out.loss.backward()
    model.save_pretrained(BERT_CLS_DIR)
    gold = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types, "labels": labels,
            "logits": out.logits.detach().contiguous(), "loss": out.loss.detach().contiguous()}
    for n, p in model.named_parameters():
        gold["grad." + n] = p.grad.detach().contiguous()
    save_file(gold, BERT_CLS_GOLDEN, metadata={"source": f"tools/make-distilbert-fixture.py, torch {torch.__version__}, "
                                                          f"transformers {transformers.__version__}: "
                                                          f"BertForSequenceClassification"})
    print(f"wrote {BERT_CLS_DIR}, {BERT_CLS_GOLDEN}: loss {out.loss.item():.9g}, "
          f"{sum(1 for _ in model.parameters())} gradients")


def verify(path):
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    bert = cfg.get("model_type") == "bert"
    cls = BertForSequenceClassification if bert else DistilBertForSequenceClassification
    model, info = cls.from_pretrained(path, output_loading_info=True)
    model.eval()
    problems = {k: v for k, v in info.items() if v}
    gold = load_file(BERT_GOLDEN if bert else GOLDEN)
    with torch.no_grad():
        if bert:   # the body's weights are bert-tiny's: compare its hidden states
            got = model.bert(input_ids=gold["input_ids"], attention_mask=gold["attention_mask"],
                             token_type_ids=gold["token_type_ids"]).last_hidden_state
            want = gold["last_hidden_state"]
        else:
            got = model(input_ids=gold["input_ids"], attention_mask=gold["attention_mask"]).logits
            want = gold["logits"]
    diff = (got - want).abs().max().item()
    rel = diff / want.abs().max().item()
    print(f"{path}: architectures {cfg.get('architectures')}, model_type {cfg.get('model_type')}, "
          f"id2label {model.config.id2label}, loading problems {problems or 'none'}")
    print(f"{'last_hidden_state' if bert else 'logits'} vs golden: max abs diff {diff:.3g}, relative {rel:.3g}")
    ok = not problems and rel < 1e-5
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    torch.set_num_threads(1)   # bit-identical fixtures from run to run
    if len(sys.argv) == 3 and sys.argv[1] == "--verify":
        sys.exit(verify(sys.argv[2]))
    if sys.argv[1:] == ["--bert-cls"]:
        sys.exit(make_bert_cls())
    if len(sys.argv) != 1:
        sys.exit(__doc__)
    make()
    make_bert()
    make_bert_cls()
