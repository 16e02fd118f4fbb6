#!/usr/bin/env python3
"""Peer of ember's examples/classify for bench/classify (issue 17): transformers'
text-classification pipeline on the CPU over the same sentences file.

    /work/venv/bin/python bench/classify/peer.py --model_dir DIR --sentences FILE \\
        [--batch_size 32] [--threads 2] [--precision f32|bf16] [--bf16_mode autocast|weights] \\
        [--warmup 32] [--preds OUT.txt]

FILE holds one sentence a line, exactly what `classify` reads on stdin (bench/classify/run
writes it from the "sentence" column of SST-2's dev.tsv); lines are taken as they are, less
the line end. The pipeline is `pipeline("text-classification", model=DIR, device=-1)`, called
once on the whole list with `batch_size=--batch_size` and `truncation=True` (classify truncates
at the tokenizer's model_max_length too; no SST-2 sentence comes near it).

Timing: the model load, the imports and a warm-up call on the first --warmup sentences (same
batch size, same precision) are not timed; the timed part is one pipeline call over all the
sentences: per-sentence tokenization, collation with padding to the longest of each batch,
the forward under torch.no_grad (the pipeline's own), softmax and the label lookup.

Precision:
  f32                  the checkpoint as saved (float32)
  bf16 (autocast)      the pipeline call inside torch.autocast("cpu", dtype=torch.bfloat16):
                       the linears and matmuls in bfloat16, weights kept in float32 (what
                       Accelerate's mixed_precision="bf16" does; ember's bf16 is the same idea)
  bf16 (weights)       model.to(torch.bfloat16) before the pipeline is built: everything in
                       bfloat16, LayerNorm and softmax included

--api model (a diagnostic, not the issue's peer): no pipeline; AutoTokenizer called on each batch
of --batch_size sentences (padding=True, truncation=True) and
AutoModelForSequenceClassification's forward under torch.inference_mode, argmax, id2label: the
loop a user would write by hand. The gap between the two is the pipeline's own overhead
(per-sentence tokenization, the DataLoader and collation, per-sentence postprocessing).

The last line on stdout is one JSON object: side, precision, bf16_mode, n, batch_size, threads,
seconds, sentences_per_s, load_s, warmup_s, versions. --preds writes the predicted label of
each sentence, one a line, in order.
"""
import argparse
import contextlib
import json
import os
import sys
import time


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model_dir", required=True)
    p.add_argument("--sentences", required=True, help="one sentence a line")
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--precision", choices=["f32", "bf16"], default="f32")
    p.add_argument("--bf16_mode", choices=["autocast", "weights"], default="autocast")
    p.add_argument("--warmup", type=int, default=32, help="sentences of the untimed warm-up call")
    p.add_argument("--preds", help="write the predicted labels here, one a line")
    p.add_argument("--api", choices=["pipeline", "model"], default="pipeline",
                   help="model: no pipeline, a diagnostic (see the docstring)")
    a = p.parse_args()

    import torch
    import tokenizers
    import transformers
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

    torch.set_num_threads(a.threads)
    with open(a.sentences, encoding="utf-8", newline="") as f:
        texts = [ln.rstrip("\r\n") for ln in f]
    if not texts:
        sys.exit(f"peer.py: {a.sentences} holds no sentence")

    t0 = time.perf_counter()
    if a.api == "pipeline":
        clf = pipeline("text-classification", model=a.model_dir, device=-1)
        model = clf.model
    else:
        tok = AutoTokenizer.from_pretrained(a.model_dir)
        model = AutoModelForSequenceClassification.from_pretrained(a.model_dir)
        names = [model.config.id2label[i] for i in range(model.config.num_labels)]

        def clf(batch_texts, batch_size, truncation):
            res = []
            with torch.inference_mode():
                for i in range(0, len(batch_texts), batch_size):
                    enc = tok(batch_texts[i:i + batch_size], padding=True, truncation=truncation, return_tensors="pt")
                    res += [{"label": names[int(j)]} for j in model(**enc).logits.argmax(-1)]
            return res
    if a.precision == "bf16" and a.bf16_mode == "weights":
        model.to(torch.bfloat16)
    model.eval()
    load_s = time.perf_counter() - t0

    def ctx():
        if a.precision == "bf16" and a.bf16_mode == "autocast":
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    t0 = time.perf_counter()
    with ctx():
        clf(texts[: a.warmup], batch_size=a.batch_size, truncation=True)
    warmup_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    with ctx():
        out = clf(texts, batch_size=a.batch_size, truncation=True)
    seconds = time.perf_counter() - t0

    assert len(out) == len(texts), f"the pipeline returned {len(out)} results for {len(texts)} sentences"
    if a.preds:
        with open(a.preds, "w", encoding="utf-8") as f:
            f.writelines(f"{o['label']}\n" for o in out)
    param_dtype = str(next(model.parameters()).dtype).replace("torch.", "")
    print(json.dumps({
        "side": "torch-" + a.api,
        "precision": a.precision,
        "bf16_mode": a.bf16_mode if a.precision == "bf16" else None,
        "param_dtype": param_dtype,
        "n": len(texts),
        "batch_size": a.batch_size,
        "threads": torch.get_num_threads(),
        "seconds": round(seconds, 4),
        "sentences_per_s": round(len(texts) / seconds, 2),
        "load_s": round(load_s, 3),
        "warmup_s": round(warmup_s, 3),
        "attn_implementation": getattr(model.config, "_attn_implementation", None),
        "versions": {
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
            "torch_parallel": torch.__config__.parallel_info().split("\n")[0:3],
        },
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
    }))


if __name__ == "__main__":
    main()
