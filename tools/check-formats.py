#!/usr/bin/env python3
"""Checks ember's file formats with their own readers (issue 14). Run by hand, never by tests:

    meson compile -C build
    /work/venv/bin/python tools/check-formats.py [--bin build/examples] [--workdir DIR]

What it proves, on one run of `seqcls` on its small built-in task (2 epochs, checkpoint per epoch):
  tensorboard  the event file is a valid TFRecord stream (every record's CRC checked by
               tensorboard's own reader) and EventAccumulator sees exactly the scalars of ember's
               JSONL log of the same run: same tags, same steps, same values as float32.
  safetensors  every .safetensors ember wrote (the model folder, each checkpoint's model, optimizer
               and scheduler files) opens with the safetensors package (safe_open, framework="pt",
               and safetensors.numpy) with the names, dtypes and shapes of its header; the last
               checkpoint holds the saved model's weights; what ember reads back from a checkpoint
               (a --resume_from_checkpoint run that trains nothing and saves) is bit-identical.
  transformers AutoConfig, AutoTokenizer and AutoModelForSequenceClassification load the model
               folder with no missing, unexpected or mismatched tensor; the optimizer state lines
               up with torch's parameter order; and tools/compare-classify.py finds the same
               labels and logits (to 1e-4) as ember's `classify` on a few sentences.
One PASS/FAIL line per check; exit 1 on any failure (the work folder is then kept).
Verified with tensorboard 2.21.0, safetensors 0.8.0, transformers 5.24.0, torch 2.15.0.
"""
import argparse
import glob
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np
import safetensors
import tensorboard
import torch
import transformers
from safetensors import safe_open
from safetensors.numpy import load_file as load_numpy
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub import errors, pywrap_tensorflow
from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

transformers.utils.logging.disable_progress_bar()
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TASK = ["--train_size", "800", "--dev_size", "100", "--epochs", "2", "--batch_size", "16", "--seed", "42"]
# JSONL key -> TensorBoard tag (seqcls.c logs both at each optimizer step and at each epoch's end)
STEP_TAGS = {"loss": "train/loss", "lr": "train/lr"}
EPOCH_TAGS = {"dev_accuracy": "eval/accuracy", "dev_f1": "eval/f1"}
DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
          "I64": torch.int64, "I32": torch.int32, "U8": torch.uint8, "BOOL": torch.bool}
SENTENCES = [("the movie was great", 1), ("This film is BORING, and the plot is dull.", 0),
             ("a wonderful cast with a superb script", 1), ("the ending was awful", 0),
             ("Gripping thriller; the music is beautiful!", 1), ("it was flat", 0),
             ("tedious sequel with clumsy dialogue and a lifeless lead", 0),
             ("the director's camera work is charming", 1), ("an unheard-of comedy that was fun", 1),
             ("Ünïcödé accents and a painful hour", 0), ("the acting was not bad but the pace was weak", 0)]
failures, passed = [], []


def check(name, ok, detail=""):
    ok = bool(ok)
    print(f"{'PASS' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)
    (passed if ok else failures).append(name)
    return ok


def seqcls(bin_dir, *args):
    res = subprocess.run([os.path.join(bin_dir, "seqcls"), *TASK, *args], capture_output=True, text=True)
    if res.returncode:
        print(res.stdout[-2000:] + res.stderr[-2000:])
    return res.returncode == 0


def read_tensors(path):
    """The file through safe_open(pt) and safetensors.numpy, checked against its raw JSON header."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    meta = header.pop("__metadata__", None)
    with safe_open(path, framework="pt") as f:
        assert f.metadata() == meta, f"metadata {f.metadata()} != header {meta}"
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    assert sorted(tensors) == sorted(header), "tensor names differ from the header"
    as_numpy = load_numpy(path)
    assert sorted(as_numpy) == sorted(header), "safetensors.numpy sees other names"
    for k, h in header.items():
        t = tensors[k]
        assert t.dtype == DTYPES[h["dtype"]] and list(t.shape) == h["shape"], f"{k}: {t.dtype} {list(t.shape)} vs {h}"
        if t.dtype != torch.bfloat16:   # numpy has no bfloat16
            assert np.array_equal(as_numpy[k], t.numpy()), f"{k}: numpy and torch values differ"
    return meta, tensors, n


def same(a, b):
    return sorted(a) == sorted(b) and all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a)


def check_tensorboard(work):
    files = glob.glob(os.path.join(work, "tb", "events.out.tfevents.*"))
    if not check("tensorboard event file", len(files) == 1, f"{len(files)} file(s) in tb/"):
        return
    reader, events = pywrap_tensorflow.PyRecordReader_New(files[0]), []
    try:   # tensorboard's TFRecord reader: length and data CRC32C of every record
        while True:
            reader.GetNext()
            events.append(event_pb2.Event.FromString(reader.curr_event))
    except errors.OutOfRangeError:
        pass
    except errors.DataLossError as e:
        return check("tensorboard records", False, str(e))
    version = events[0].file_version if events else None
    check("tensorboard records", version == "brain.Event:2",
          f"{len(events)} records, CRCs good, first file_version {version!r}")
    acc = event_accumulator.EventAccumulator(files[0], size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    seen = {(tag, e.step): e.value for tag in acc.Tags()["scalars"] for e in acc.Scalars(tag)}
    want = {}
    with open(os.path.join(work, "run.jsonl")) as f:
        for rec in map(json.loads, f):
            for key, tag in {**STEP_TAGS, **(EPOCH_TAGS if "epoch" in rec else {})}.items():
                if key in rec:
                    want[(tag, rec["step"])] = rec[key]
    check("tensorboard tags/steps = JSONL", set(seen) == set(want),
          f"{len(seen)} scalars, tags {sorted(acc.Tags()['scalars'])}"
          + (f"; only in TB {sorted(set(seen) - set(want))[:5]}, only in JSONL {sorted(set(want) - set(seen))[:5]}"
             if set(seen) != set(want) else ""))
    bad = [(k, seen[k], want[k]) for k in set(seen) & set(want)
           if not (seen[k] == float(np.float32(want[k])) or abs(seen[k] - want[k]) <= 1e-6 * abs(want[k]))]
    check("tensorboard values = JSONL", not bad,
          f"{len(seen)} values equal as float32" if not bad else f"{len(bad)} differ, e.g. {sorted(bad)[:3]}")


def check_safetensors(work):
    files = sorted(glob.glob(os.path.join(work, "**", "*.safetensors"), recursive=True))
    read = {}
    for path in files:
        name = os.path.relpath(path, work)
        try:
            meta, tensors, header_len = read_tensors(path)
        except Exception as e:   # the package refusing the file is the failure this looks for
            check(f"safetensors {name}", False, f"{type(e).__name__}: {e}")
            continue
        read[name] = tensors
        print(f"     __metadata__ {json.dumps(meta, sort_keys=True)}")
        dtypes = sorted({str(t.dtype).replace("torch.", "") for t in tensors.values()})
        ok = not name.endswith("model.safetensors") or (meta or {}).get("format") == "pt"
        aligned = "8-aligned" if header_len % 8 == 0 else "not 8-aligned as the reference writer's"
        check(f"safetensors {name}", ok, f"{len(tensors)} tensors {dtypes}, {os.path.getsize(path)} bytes, "
              f"header {header_len} ({aligned})"
              + ("" if ok else "; a model file needs __metadata__ format 'pt' for transformers"))
    ckpts = sorted(glob.glob(os.path.join(work, "run", "checkpoints", "checkpoint_*")),
                   key=lambda p: int(p.rsplit("_", 1)[1]))
    last = os.path.relpath(os.path.join(ckpts[-1], "model.safetensors"), work) if ckpts else None
    check("safetensors files found", len(files) >= 5 and last in read and "run/model.safetensors" in read,
          f"{len(files)} files, {len(ckpts)} checkpoint(s)")
    if last in read and "run/model.safetensors" in read:
        check("last checkpoint model = saved model", same(read[last], read["run/model.safetensors"]),
              f"{last} vs run/model.safetensors, {len(read[last])} tensors bit-identical")
    if last in read and "resumed/model.safetensors" in read:
        check("ember reads back its checkpoint", same(read[last], read["resumed/model.safetensors"]),
              f"--resume_from_checkpoint {os.path.dirname(last)} saved the same {len(read[last])} tensors")
    return ckpts


def check_transformers(work, bin_dir, ckpts):
    model_dir = os.path.join(work, "run")
    config = AutoConfig.from_pretrained(model_dir)
    check("transformers AutoConfig", config.model_type == "distilbert" and config.num_labels == 2,
          f"{config.model_type}, id2label {config.id2label}")
    tok = AutoTokenizer.from_pretrained(model_dir)
    ids = tok("This film is BORING")["input_ids"]
    check("transformers AutoTokenizer", tok.unk_token_id not in ids[1:-1],
          f"{type(tok).__name__}, vocab {len(tok)}: 'This film is BORING' -> {tok.convert_ids_to_tokens(ids)}")
    model, info = AutoModelForSequenceClassification.from_pretrained(model_dir, output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    n_params = sum(1 for _ in model.parameters())
    check("transformers AutoModelForSequenceClassification", not problems,
          f"{type(model).__name__}, {n_params} tensors loaded" if not problems else str(problems))
    if ckpts:   # torch AdamW numbers the state by group, in the order seqcls.c builds the groups
        with safe_open(os.path.join(ckpts[-1], "optimizer.safetensors"), framework="pt") as f:
            meta = f.metadata()
            groups = [[int(i) for i in meta[f"param_groups.{g}.params"].split(",")]
                      for g in range(int(meta["param_groups"]))]
            named = list(model.named_parameters())
            no_decay = {nd: [p for n, p in named if bool(re.search(r"bias|LayerNorm|layer_norm", n)) == nd]
                        for nd in (False, True)}
            order = [p for g in range(len(groups))
                     for p in no_decay[float(meta[f"param_groups.{g}.weight_decay"]) == 0]]
            ok = [i for g in groups for i in g] == list(range(len(order))) and all(
                list(f.get_slice(f"state.{i}.{k}").get_shape()) == list(p.shape)
                for i, p in enumerate(order) for k in ("exp_avg", "exp_avg_sq"))
        check("optimizer state lines up with torch parameters", ok,
              f"{len(groups)} groups of {[len(g) for g in groups]}, exp_avg/exp_avg_sq shapes match")
    dev = os.path.join(work, "sentences.tsv")
    with open(dev, "w", encoding="utf-8") as f:
        f.write("sentence\tlabel\n" + "".join(f"{s}\t{y}\n" for s, y in SENTENCES))
    res = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "compare-classify.py"), model_dir, dev,
                          os.path.join(bin_dir, "classify")], capture_output=True, text=True)
    print("     " + res.stdout.strip().replace("\n", "\n     "))
    diff = re.search(r"max \|logit diff\| (\S+);", res.stdout)
    check("transformers logits = ember classify", res.returncode == 0 and diff and float(diff[1]) <= 1e-4,
          f"compare-classify.py exit {res.returncode}, max |logit diff| {diff[1] if diff else '?'} (limit 1e-4)"
          + ("" if res.returncode == 0 else "\n" + res.stderr[-1500:]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "examples"), help="folder with seqcls and classify")
    ap.add_argument("--workdir", help="write the run here and keep it (default: a temporary folder)")
    args = ap.parse_args()
    print(f"python {sys.version.split()[0]}, tensorboard {tensorboard.__version__}, safetensors "
          f"{safetensors.__version__}, transformers {transformers.__version__}, torch {torch.__version__}, "
          f"numpy {np.__version__}")
    work = args.workdir or tempfile.mkdtemp(prefix="ember-check-formats-")
    os.makedirs(work, exist_ok=True)
    print(f"work folder {work}, binaries {args.bin}")
    ok = seqcls(args.bin, "--output_dir", os.path.join(work, "run"), "--checkpointing_steps", "epoch",
                "--log", os.path.join(work, "run.jsonl"), "--tensorboard", os.path.join(work, "tb"))
    ckpts = sorted(glob.glob(os.path.join(work, "run", "checkpoints", "checkpoint_*")))
    if check("seqcls run (TensorBoard, JSONL log, model folder, checkpoints)", ok and ckpts,
             f"{len(ckpts)} checkpoint(s)"):
        last = max(ckpts, key=lambda p: int(p.rsplit("_", 1)[1]))
        check("seqcls --resume_from_checkpoint (ember's own reader)",
              seqcls(args.bin, "--output_dir", os.path.join(work, "resumed"), "--resume_from_checkpoint", last))
        check_tensorboard(work)
        ckpts = check_safetensors(work)
        check_transformers(work, args.bin, ckpts)
    print(f"FAIL: {len(failures)} of {len(failures) + len(passed)} checks failed: {failures}" if failures
          else f"PASS: all {len(passed)} checks passed")
    if failures:
        print(f"kept {work}")
    elif not args.workdir:
        shutil.rmtree(work)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
