#!/usr/bin/env python3
"""Golden fixtures for tests/test_roberta.c: a tiny RoBERTa made and run by
Hugging Face transformers, so ember's RoBERTa family is checked against the
real thing (logits, loss and the gradient of every parameter).

    /work/venv/bin/python tools/make-roberta-fixture.py
        writes tests/fixtures/roberta-tiny-cls/            (config.json, model.safetensors:
                                                             RobertaForSequenceClassification)
               tests/fixtures/roberta_tiny_cls_golden.safetensors

The model: hidden 32, 2 layers, 4 heads, intermediate 64, vocab 100,
max_position_embeddings 40 (RoBERTa's count includes the pad_token_id + 1 rows
before the first position), one token type, layer_norm_eps 1e-5 (as
roberta-base), pad_token_id 1, 3 labels. Its weights are HF's init perturbed
with seeded noise (LayerNorm too, so that every gradient is non-trivial; the
padding rows of the word and position embeddings stay zero, as HF's init
leaves them). The batch (4 x 10) starts with <s> (id 0) and is right-padded
with id 1 on three different lengths; one row also holds a left-padded
sequence (padding inside the mask's ones is not what tokenizers make, so the
mask follows the ids). Everything runs in float32, in eval mode (dropout
off), with the eager attention (SDPA is checked to agree).

    /work/venv/bin/python tools/make-roberta-fixture.py --verify DIR
        loads DIR (a RoBERTa classifier written by ember's em_save_pretrained
        from roberta-tiny-cls) with transformers, checks that every key loads
        (no missing, no unexpected) and compares its logits on the golden batch
        with the golden ones.

Golden tensors: input_ids (i64 [4,10]), attention_mask (i64 [4,10]), labels
(i64 [4]), position_ids (what HF's create_position_ids_from_input_ids made,
for reading), logits ([4,3]), loss (0-d), grad.<parameter name> for every
parameter of the classifier.
"""
import os
import sys

import safetensors
import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import RobertaConfig, RobertaForSequenceClassification

# Pinned: the committed fixtures were made with these.
assert torch.__version__.split("+")[0] == "2.15.0", torch.__version__
assert transformers.__version__ == "5.24.0", transformers.__version__
assert safetensors.__version__ == "0.8.0", safetensors.__version__

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "tests", "fixtures")
CLS_DIR = os.path.join(FIX, "roberta-tiny-cls")
GOLDEN = os.path.join(FIX, "roberta_tiny_cls_golden.safetensors")
PAD = 1


def make():
    torch.manual_seed(3)
    g = torch.Generator().manual_seed(20261202)
    cfg = RobertaConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=40, type_vocab_size=1, layer_norm_eps=1e-5,
                        pad_token_id=PAD, bos_token_id=0, eos_token_id=2, num_labels=3)
    model = RobertaForSequenceClassification(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=p.dtype)
            if "LayerNorm" in name:
                p.add_(noise * 0.1)
            elif name.endswith("bias"):
                p.copy_(noise * 0.05)
            else:
                p.add_(noise * 0.05)
                if name.endswith(("word_embeddings.weight", "position_embeddings.weight")):
                    p[PAD].zero_()   # the padding rows, as HF's init leaves them
    model.eval()

    rows, cols = 4, 10
    ids = torch.randint(3, 100, (rows, cols), generator=g, dtype=torch.int64)
    ids[:, 0] = 0                                   # <s>
    mask = torch.ones(rows, cols, dtype=torch.int64)
    for r, n in {1: 7, 2: 4}.items():               # right padding
        ids[r, n:] = PAD
        mask[r, n:] = 0
    ids[3, :3] = PAD                                # left padding: positions skip it
    mask[3, :3] = 0
    ids[3, 3] = 0
    labels = torch.tensor([2, 0, 1, 2], dtype=torch.int64)
    pos = model.roberta.embeddings.create_position_ids_from_input_ids(ids, PAD)

    def run():
        model.zero_grad(set_to_none=True)
        out = model(input_ids=ids, attention_mask=mask, labels=labels)
        out.loss.backward()
        return out

    model.set_attn_implementation("sdpa")
    logits_sdpa = run().logits.detach()
    model.set_attn_implementation("eager")
    out = run()
    assert torch.allclose(out.logits, logits_sdpa, rtol=1e-5, atol=1e-6), (out.logits - logits_sdpa).abs().max()
    model.save_pretrained(CLS_DIR)
    gold = {"input_ids": ids, "attention_mask": mask, "labels": labels, "position_ids": pos,
            "logits": out.logits.detach(), "loss": out.loss.detach()}
    for n, p in model.named_parameters():
        gold["grad." + n] = p.grad.detach()
    save_file({k: v.contiguous() for k, v in gold.items()}, GOLDEN,
              metadata={"source": f"tools/make-roberta-fixture.py, torch {torch.__version__}, transformers "
                                  f"{transformers.__version__}: RobertaForSequenceClassification hidden 32, "
                                  f"2 layers, 4 heads, vocab 100, 3 labels"})
    print(f"wrote {CLS_DIR}, {GOLDEN}: loss {out.loss.item():.9g}, {len(gold) - 6} gradients, "
          f"position_ids {pos.tolist()}")


def verify(path):
    model, info = RobertaForSequenceClassification.from_pretrained(path, output_loading_info=True)
    model.eval()
    problems = {k: v for k, v in info.items() if v}
    gold = load_file(GOLDEN)
    with torch.no_grad():
        got = model(input_ids=gold["input_ids"], attention_mask=gold["attention_mask"]).logits
    rel = ((got - gold["logits"]).abs().max() / gold["logits"].abs().max()).item()
    print(f"{path}: loading problems {problems or 'none'}; logits vs golden: relative {rel:.3g}")
    ok = not problems and rel < 1e-5
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    torch.set_num_threads(1)   # bit-identical fixtures from run to run
    if len(sys.argv) == 3 and sys.argv[1] == "--verify":
        sys.exit(verify(sys.argv[2]))
    if len(sys.argv) != 1:
        sys.exit(__doc__)
    make()
