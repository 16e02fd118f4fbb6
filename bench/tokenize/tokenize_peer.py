#!/usr/bin/env python3
"""Peer of bench/tokenize/tokenize.c: Hugging Face's fast BERT tokenizer (the Rust
`tokenizers` core behind BertTokenizerFast) on the same text, on one thread.

The text: SST-2 train sentences repeated to --mb MB. Tokens count the WordPiece ids
without [CLS]/[SEP]; the checksum (sum of all ids, specials included) must equal
the one bench_tokenize prints. Usage: tokenize_peer.py [--vocab F] [--sst2 F] [--mb N]
"""
import argparse
import os
import sys
import time

# One thread: tokenizers' batch encoder runs sequentially without parallelism.
os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["RAYON_RS_NUM_CPUS"] = "1"

import transformers  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from peer_util import load_tokenizer, shared  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", default=shared("bert-base-uncased/vocab.txt"))
    ap.add_argument("--sst2", default=shared("sst2/train.tsv"))
    ap.add_argument("--mb", type=float, default=4)
    a = ap.parse_args()
    tok = load_tokenizer(a.vocab)
    sent = []
    with open(a.sst2, encoding="utf-8") as f:
        next(f)
        for line in f:
            sent.append(line.rstrip("\n").split("\t")[0])
    texts, size = [], 0
    while size < a.mb * 1e6:
        s = sent[len(texts) % len(sent)]
        texts.append(s)
        size += len(s.encode("utf-8"))
    tok(texts[:2000])

    def best_of(fn, reps=3):
        """Best wall time and best CPU time of this thread (steadier on a loaded machine)."""
        best, best_cpu, out = 1e30, 1e30, None
        for _ in range(reps):
            t0, c0 = time.perf_counter(), time.thread_time()
            out = fn()
            best = min(best, time.perf_counter() - t0)
            best_cpu = min(best_cpu, time.thread_time() - c0)
        return best, best_cpu, out

    t_call, c_call, ids = best_of(lambda: tok(texts)["input_ids"])
    tokens = sum(len(x) - 2 for x in ids)
    checksum = sum(sum(x) for x in ids)
    backend = tok.backend_tokenizer
    t_rust, c_rust, _ = best_of(lambda: backend.encode_batch(texts))
    print(f"HF transformers {transformers.__version__}: {len(texts)} texts, {size / 1e6:.2f} MB, {tokens} tokens, checksum {checksum}")
    print(f"HF BertTokenizerFast tokenizer(texts), 1 thread:      {t_call:.3f} s  {tokens / t_call / 1e6:.2f} M tokens/s"
          f"  (CPU time {c_call:.3f} s: {tokens / c_call / 1e6:.2f} M tokens/s)")
    print(f"HF tokenizers Tokenizer.encode_batch(texts), 1 thread: {t_rust:.3f} s  {tokens / t_rust / 1e6:.2f} M tokens/s"
          f"  (CPU time {c_rust:.3f} s: {tokens / c_rust / 1e6:.2f} M tokens/s)")


if __name__ == "__main__":
    main()
