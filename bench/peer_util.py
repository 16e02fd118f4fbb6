"""What the Python peers of the tokenizer benchmarks share (bench/tokenize,
bench/dataloader): paths under ../shared/data and HF's fast BERT tokenizer.
A peer imports it after putting bench/ on sys.path."""
import os


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
