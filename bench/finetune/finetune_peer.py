#!/usr/bin/env python3
"""PyTorch peer of ember's examples/seqcls for bench/finetune (issue 13).

The canonical Hugging Face Accelerate fine-tuning loop, in the shape of
transformers' examples/pytorch/text-classification/run_glue_no_trainer.py
(same flag spelling, same optimizer grouping, same schedule), reduced to
what the benchmark needs: a GLUE-style TSV (header "sentence<TAB>label")
read with the csv module instead of the `datasets` library, one text column,
single-label classification, accuracy and binary F1 on the dev file.

    /work/venv/bin/python bench/finetune/finetune_peer.py \\
        --model_name_or_path models/all-MiniLM-L6-v2 \\
        --train_file ../shared/data/sst2/train.tsv --validation_file ../shared/data/sst2/dev.tsv \\
        --max_length 66 --per_device_train_batch_size 32 --learning_rate 1e-4 \\
        --num_train_epochs 1 --num_warmup_steps 211 --weight_decay 0.01 \\
        --mixed_precision bf16 --seed 42 --threads 2

Progress lines (every 100 optimizer steps) go to stderr; the last line on
stdout is one JSON object with the results (see `main`).
"""
import time

T_START = time.perf_counter()  # wall_s counts the imports below

import argparse  # noqa: E402
import csv  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

import accelerate  # noqa: E402
import transformers  # noqa: E402
from accelerate import Accelerator  # noqa: E402
from accelerate.utils import set_seed  # noqa: E402
from transformers import (  # noqa: E402
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorWithPadding,
    get_scheduler,
)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Fine-tune a sequence classifier on a GLUE-style TSV with Accelerate.")
    p.add_argument("--model_name_or_path", required=True, help="checkpoint folder (config.json, weights, tokenizer)")
    p.add_argument("--train_file", required=True, help="TSV with a header: sentence<TAB>label")
    p.add_argument("--validation_file", required=True, help="TSV with the same columns")
    p.add_argument("--max_length", type=int, default=66, help="truncate to this many tokens; padding is per batch")
    p.add_argument("--per_device_train_batch_size", type=int, default=32)
    p.add_argument("--per_device_eval_batch_size", type=int, default=32)
    p.add_argument("--learning_rate", type=float, default=1e-4)
    p.add_argument("--weight_decay", type=float, default=0.01)
    p.add_argument("--num_train_epochs", type=int, default=1)
    p.add_argument("--max_train_steps", type=int, default=None, help="overrides --num_train_epochs")
    p.add_argument("--num_warmup_steps", type=int, default=0)
    p.add_argument("--mixed_precision", choices=["no", "bf16"], default="no")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    p.add_argument("--output_dir", default=None, help="save_pretrained the model and tokenizer here")
    p.add_argument("--train_rows", type=int, default=None, help="use only the first N training rows")
    p.add_argument("--text_column", default="sentence")
    p.add_argument("--label_column", default="label")
    return p.parse_args(argv)


def read_tsv(path, text_column, label_column, limit=None):
    """GLUE TSV: a header row, tab-separated, no quoting (SST-2 sentences hold
    bare quote characters, so csv's default quoting would merge rows)."""
    texts, labels = [], []
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader)
        try:
            ti, li = header.index(text_column), header.index(label_column)
        except ValueError:
            sys.exit(f"{path}: header {header} lacks {text_column!r} or {label_column!r}")
        for row in reader:
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            if limit is not None and len(texts) >= limit:
                break
            texts.append(row[ti])
            labels.append(row[li].strip())
    return texts, labels


def encode(tokenizer, texts, labels, label_to_id, max_length):
    """Tokenize once up front (what datasets.map does in run_glue_no_trainer):
    truncation only, no padding; the collator pads each batch to its longest."""
    enc = tokenizer(texts, truncation=True, max_length=max_length, padding=False)
    keys = list(enc.keys())
    return [dict({k: enc[k][i] for k in keys}, labels=label_to_id[labels[i]]) for i in range(len(texts))]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def install_dtype_probe(model, accelerator):
    """Forward hooks that report, once, which dtype the matmuls really ran in:
    the output of the first attention projection and of the classifier
    (nn.Linear outputs take autocast's compute dtype), and whether CPU
    autocast was on at that point. Accelerate wraps model.forward so that the
    logits it returns are cast back to float32 -- hence the probe on the
    Linear modules rather than on the returned logits."""
    found = {}
    handles = []
    linears = [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    probes = [linears[0], linears[-1]] if linears else []

    def make_hook(name):
        def hook(module, inputs, output):
            if name not in found:
                found[name] = (output.dtype, torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"))
        return hook

    for name, mod in probes:
        handles.append(mod.register_forward_hook(make_hook(name)))

    def report_and_remove(logits):
        for h in handles:
            h.remove()
        parts = [f"{n}: out {d[0]} (autocast cpu enabled={d[1]}, dtype={d[2]})" for n, d in found.items()]
        accelerator.print(
            f"[peer] mixed_precision={accelerator.mixed_precision} native_amp={accelerator.native_amp}; "
            + "; ".join(parts) + f"; returned logits {logits.dtype}",
            file=sys.stderr,
        )
        dtypes = {str(d[0]).replace("torch.", "") for d in found.values()}
        return dtypes.pop() if len(dtypes) == 1 else ",".join(sorted(dtypes))

    return report_and_remove


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    accelerator = Accelerator(mixed_precision=args.mixed_precision)
    set_seed(args.seed)

    # Data
    train_texts, train_labels = read_tsv(args.train_file, args.text_column, args.label_column, args.train_rows)
    dev_texts, dev_labels = read_tsv(args.validation_file, args.text_column, args.label_column)
    label_list = sorted(set(train_labels))
    num_labels = len(label_list)
    if num_labels != 2:
        sys.exit(f"expected 2 labels in {args.train_file}, found {label_list}")
    label_to_id = {v: i for i, v in enumerate(label_list)}
    unknown = set(dev_labels) - set(label_to_id)
    if unknown:
        sys.exit(f"{args.validation_file}: labels {sorted(unknown)} not seen in the training data")

    tokenizer = AutoTokenizer.from_pretrained(args.model_name_or_path)
    model = AutoModelForSequenceClassification.from_pretrained(
        args.model_name_or_path,
        num_labels=num_labels,
        id2label={i: l for l, i in label_to_id.items()},
        label2id=dict(label_to_id),
    )

    with accelerator.main_process_first():
        train_dataset = encode(tokenizer, train_texts, train_labels, label_to_id, args.max_length)
        eval_dataset = encode(tokenizer, dev_texts, dev_labels, label_to_id, args.max_length)

    data_collator = DataCollatorWithPadding(tokenizer, pad_to_multiple_of=None)
    generator = torch.Generator()
    generator.manual_seed(args.seed)
    train_dataloader = DataLoader(
        train_dataset, shuffle=True, collate_fn=data_collator,
        batch_size=args.per_device_train_batch_size, generator=generator,
    )
    eval_dataloader = DataLoader(eval_dataset, collate_fn=data_collator, batch_size=args.per_device_eval_batch_size)

    # Optimizer: no weight decay on biases and LayerNorm weights
    no_decay = ["bias", "LayerNorm.weight"]
    grouped = [
        {"params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)],
         "weight_decay": args.weight_decay},
        {"params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)],
         "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(grouped, lr=args.learning_rate)

    # Schedule, sized before prepare as run_glue_no_trainer does: the prepared
    # scheduler steps num_processes times per optimizer step.
    overrode_max_train_steps = False
    num_update_steps_per_epoch = math.ceil(len(train_dataloader) / accelerator.num_processes)
    if args.max_train_steps is None:
        args.max_train_steps = args.num_train_epochs * num_update_steps_per_epoch
        overrode_max_train_steps = True
    lr_scheduler = get_scheduler(
        name="linear",
        optimizer=optimizer,
        num_warmup_steps=args.num_warmup_steps * accelerator.num_processes,
        num_training_steps=args.max_train_steps if overrode_max_train_steps
        else args.max_train_steps * accelerator.num_processes,
    )

    model, optimizer, train_dataloader, eval_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, eval_dataloader, lr_scheduler
    )
    num_update_steps_per_epoch = len(train_dataloader)
    if overrode_max_train_steps:
        args.max_train_steps = args.num_train_epochs * num_update_steps_per_epoch
    args.num_train_epochs = math.ceil(args.max_train_steps / num_update_steps_per_epoch)

    total_batch_size = args.per_device_train_batch_size * accelerator.num_processes
    log(f"[peer] torch {torch.__version__} transformers {transformers.__version__} accelerate {accelerate.__version__}; "
        f"threads {torch.get_num_threads()}; {len(train_dataset)} train / {len(eval_dataset)} dev rows; "
        f"batch {total_batch_size}; {args.max_train_steps} steps, warmup {args.num_warmup_steps}, "
        f"lr {args.learning_rate}, epochs {args.num_train_epochs}, mixed_precision {accelerator.mixed_precision}")

    dtype_probe = install_dtype_probe(accelerator.unwrap_model(model), accelerator)
    matmul_dtype = None

    completed_steps = 0
    train_s = eval_s = 0.0
    dev_accuracy = dev_f1 = None
    window_loss, window_n = 0.0, 0
    for epoch in range(args.num_train_epochs):
        # training
        model.train()
        t_epoch = time.perf_counter()
        for batch in train_dataloader:
            outputs = model(**batch)
            if matmul_dtype is None:
                matmul_dtype = dtype_probe(outputs.logits)
            loss = outputs.loss
            accelerator.backward(loss)
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
            completed_steps += 1
            window_loss += loss.item()
            window_n += 1
            if completed_steps % 100 == 0:
                accelerator.print(
                    f"[peer] step {completed_steps}/{args.max_train_steps} loss {window_loss / window_n:.4f} "
                    f"lr {lr_scheduler.get_last_lr()[0]:.3e} elapsed {train_s + time.perf_counter() - t_epoch:.1f} s",
                    file=sys.stderr, flush=True,
                )
                window_loss, window_n = 0.0, 0
            if completed_steps >= args.max_train_steps:
                break
        train_s += time.perf_counter() - t_epoch

        # evaluation
        t_eval = time.perf_counter()
        model.eval()
        preds, refs = [], []
        for batch in eval_dataloader:
            with torch.no_grad():
                outputs = model(**batch)
            predictions = outputs.logits.argmax(dim=-1)
            predictions, references = accelerator.gather_for_metrics((predictions, batch["labels"]))
            preds.append(predictions.cpu())
            refs.append(references.cpu())
        p, r = torch.cat(preds), torch.cat(refs)
        dev_accuracy = (p == r).float().mean().item()
        tp = ((p == 1) & (r == 1)).sum().item()
        fp = ((p == 1) & (r == 0)).sum().item()
        fn = ((p == 0) & (r == 1)).sum().item()
        dev_f1 = 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0
        eval_s += time.perf_counter() - t_eval
        accelerator.print(
            f"[peer] epoch {epoch} step {completed_steps}: dev accuracy {dev_accuracy:.4f} f1 {dev_f1:.4f} "
            f"(train {train_s:.1f} s, eval {eval_s:.1f} s)", file=sys.stderr, flush=True,
        )
        if completed_steps >= args.max_train_steps:
            break

    if args.output_dir is not None:
        accelerator.wait_for_everyone()
        os.makedirs(args.output_dir, exist_ok=True)
        unwrapped = accelerator.unwrap_model(model)
        unwrapped.save_pretrained(args.output_dir, is_main_process=accelerator.is_main_process,
                                  save_function=accelerator.save)
        if accelerator.is_main_process:
            tokenizer.save_pretrained(args.output_dir)

    result = {
        "side": "torch",
        "mixed_precision": args.mixed_precision,
        "threads": args.threads,
        "train_rows": len(train_dataset),
        "steps": completed_steps,
        "dev_accuracy": round(dev_accuracy, 6),
        "dev_f1": round(dev_f1, 6),
        "train_s": round(train_s, 3),
        "eval_s": round(eval_s, 3),
        "wall_s": round(time.perf_counter() - T_START, 3),
        "matmul_dtype": matmul_dtype,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "accelerate": accelerate.__version__,
    }
    if accelerator.is_main_process:
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
