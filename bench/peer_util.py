"""What the Python peers of the benchmarks share: the command line of the
peers that compare with an ember bench (bench/ops_peer.py,
bench/autograd_mlp_peer.py), paths under ../shared/data and HF's fast BERT
tokenizer (bench/tokenize, bench/dataloader). A peer outside bench/ imports it
after putting bench/ on sys.path."""
import argparse
import os


def compare_args(bench):
    """--ember PATH (the ember bench to run first and compare with) and --quick,
    parsed; torch then runs on 2 threads, as the ember benches do."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--ember", help=f"path of {bench}; run it first and compare")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    import torch
    torch.set_num_threads(2)
    return args


def shared(rel):
    """rel under $EMBER_SHARED_DATA, else ../shared/data."""
    return os.path.join(os.environ.get("EMBER_SHARED_DATA", "../shared/data"), rel)


def load_tokenizer(vocab):
    """BertTokenizerFast over the vocab.txt at vocab."""
    from transformers import BertTokenizerFast
    try:  # transformers >= 5: the vocabulary as a dict
        from tokenizers.models import WordPiece
        return BertTokenizerFast(vocab=WordPiece.read_file(vocab))
    except TypeError:  # transformers 4
        return BertTokenizerFast(vocab_file=vocab)
