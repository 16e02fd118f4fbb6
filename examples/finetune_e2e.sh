#!/bin/sh
# ember e2e — seqcls as a fine-tuning script, and classify on its output.
#   finetune_e2e.sh resume SEQCLS CLASSIFY
#       no temporary folder outlives a failed or SIGTERM'd run; a run killed
#       with SIGKILL mid-epoch, resumed with
#       --resume_from_checkpoint latest, ends with the same model.safetensors,
#       byte for byte, as an uninterrupted run (1 process, built-in task).
#   finetune_e2e.sh pretrained SEQCLS CLASSIFY FIXTURES
#       a head-less BERT folder (tests/fixtures/bert-tiny + a vocab.txt) is
#       fine-tuned on TSV, CSV and JSONL files with string labels; the head is
#       reported as new, the encoder loads; id2label comes from the data;
#       classify prints the label names for the output folder, refuses the
#       head-less folder (unless --allow_new_head), and bad data is refused
#       with the file and line named.
#   finetune_e2e.sh minilm SEQCLS CLASSIFY MODEL_DIR
#       a short fine-tune of the real all-MiniLM-L6-v2 (tools/fetch-model) on
#       the shipped SST-2 sample; skipped (77) when the folder is absent.
mode=$1 seqcls=$2 classify=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
expect_fail() {   # name, expected text, command...: must exit non-zero and print the text
    name=$1 text=$2; shift 2
    "$@" >"$work/x.out" 2>&1 && fail "$name: exited 0"
    grep -qF -- "$text" "$work/x.out" || { cat "$work/x.out"; fail "$name: no \"$text\" in the message"; }
    echo "ok: $name: $(grep -F -- "$text" "$work/x.out" | head -n 1)"
}

case $mode in
resume)
    # the built-in task's temporary folder goes on every exit path (issue 14):
    # a failing run, and a run stopped by SIGTERM while it writes the task
    mkdir -p "$work/tmp"
    expect_fail "bad --vocab" "/nonexistent" env TMPDIR="$work/tmp" "$seqcls" --vocab /nonexistent
    TMPDIR="$work/tmp" "$seqcls" --train_size 3000000 --epochs 1 >"$work/t.log" 2>&1 &
    pid=$!
    i=0
    while [ -z "$(ls "$work/tmp")" ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i + 1)); done
    [ -n "$(ls "$work/tmp")" ] || fail "no ember-seqcls-* folder appeared"
    kill -TERM $pid
    wait $pid
    [ -z "$(ls "$work/tmp")" ] || fail "left behind after SIGTERM: $(ls "$work/tmp")"
    echo "ok: temporary folders removed after an error and after SIGTERM"
    args="--epochs 3 --checkpointing_steps 25 --checkpoints_total_limit 2"
    # a first checkpoint cut short leaves only its .tmp-* folder: "latest" starts from the beginning
    mkdir -p "$work/cut/checkpoints/checkpoint_0.tmp-ember"
    "$seqcls" --epochs 1 --train_size 64 --dev_size 32 --output_dir "$work/cut" --resume_from_checkpoint latest \
        >"$work/cut.log" 2>&1 || { cat "$work/cut.log"; fail "resume latest beside a cut-short checkpoint"; }
    grep -q "no checkpoint in .* yet: starting from the beginning" "$work/cut.log" ||
        { cat "$work/cut.log"; fail "a .tmp-* folder was taken for a checkpoint"; }
    echo "ok: a cut-short checkpoint folder is not a checkpoint"
    "$seqcls" $args --output_dir "$work/u" >"$work/u.log" 2>&1 || { cat "$work/u.log"; fail "uninterrupted run"; }
    "$seqcls" $args --output_dir "$work/r" >"$work/r1.log" 2>&1 &
    pid=$!
    i=0   # kill it once checkpoint_6 (optimizer step 175, mid-epoch 1) is complete
    while [ ! -d "$work/r/checkpoints/checkpoint_6" ] && kill -0 $pid 2>/dev/null && [ $i -lt 6000 ]; do
        sleep 0.01; i=$((i + 1))
    done
    kill -9 $pid 2>/dev/null || fail "the run ended before it could be killed"
    wait $pid
    [ -f "$work/r/model.safetensors" ] && fail "the killed run got to save its final model"
    "$seqcls" $args --output_dir "$work/r" --resume_from_checkpoint latest >"$work/r2.log" 2>&1 ||
        { cat "$work/r2.log"; fail "the resumed run"; }
    grep '^resumed from' "$work/r2.log" || fail "the resumed run did not resume"
    grep -q 'epoch 0 dev' "$work/r2.log" && fail "the resumed run repeated epoch 0"
    cmp "$work/u/model.safetensors" "$work/r/model.safetensors" ||
        fail "the resumed run's weights differ from the uninterrupted run's"
    echo "ok: killed after checkpoint_6, resumed, final weights identical byte for byte"
    # the checkpoints carry a manifest: a changed model config or precision is refused, a damaged file too
    [ -f "$work/r/checkpoints/checkpoint_14/manifest.json" ] || fail "no manifest.json in the checkpoint"
    "$seqcls" $args --output_dir "$work/r" --resume_from_checkpoint latest --heads 8 >"$work/h.log" 2>&1 &&
        fail "resuming with --heads 8 was accepted"
    grep -q "model 0's config" "$work/h.log" || { cat "$work/h.log"; fail "no config mismatch message"; }
    "$seqcls" $args --output_dir "$work/r" --resume_from_checkpoint latest --mixed_precision no >"$work/p.log" 2>&1 &&
        fail "resuming in another precision was accepted"
    grep -q "saved with mixed_precision bf16, and this run has no" "$work/p.log" || { cat "$work/p.log"; fail "no precision message"; }
    "$seqcls" $args --output_dir "$work/r2" --resume_from_checkpoint "$work/r/checkpoints/checkpoint_14" \
        --mixed_precision no --ignore_mismatched_config >"$work/o.log" 2>&1 || { cat "$work/o.log"; fail "override"; }
    grep -q "continuing (ignore_mismatched_config)" "$work/o.log" || { cat "$work/o.log"; fail "the override said nothing"; }
    printf 'X' | dd of="$work/r/checkpoints/checkpoint_14/optimizer.safetensors" bs=1 seek=4000 conv=notrunc 2>/dev/null
    "$seqcls" $args --output_dir "$work/r" --resume_from_checkpoint latest >"$work/d.log" 2>&1 &&
        fail "a damaged checkpoint was resumed"
    grep -q "optimizer.safetensors: CRC-32C" "$work/d.log" || { cat "$work/d.log"; fail "no damage message"; }
    echo "ok: changed config, changed precision and a damaged byte refused; the override continues"
    n=$(ls "$work/r/checkpoints" | wc -l)
    [ "$n" -eq 2 ] || fail "checkpoints_total_limit 2 left $n checkpoints: $(ls "$work/r/checkpoints")"
    ;;
pretrained)
    fixtures=$4
    m="$work/tiny"   # a head-less BertModel (vocab 100, 32 positions) with a vocab.txt
    mkdir -p "$m" && cp "$fixtures/bert-tiny/config.json" "$fixtures/bert-tiny/model.safetensors" "$m/"
    words="the a movie film story plot it was is this and with of script music ending cast pace
           good great superb fun moving bad awful dull boring weak"
    { printf '[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n'; for w in $words; do echo "$w"; done; } >"$m/vocab.txt"
    # sentences of neutral words plus one sentiment word; labels are strings
    gen() {   # rows seed
        awk -v n="$1" -v seed="$2" 'BEGIN {
            srand(seed); split("the a movie film story plot it was is this and with of script music ending cast pace", N, " ");
            split("good great superb fun moving", P, " "); split("bad awful dull boring weak", Q, " ");
            for (i = 0; i < n; i++) {
                pos = rand() < 0.5; s = ""; k = 3 + int(rand() * 5); at = int(rand() * k);
                for (j = 0; j < k; j++) { s = s (j ? " " : "") N[1 + int(rand() * 18)];
                    if (j == at) s = s " " (pos ? P[1 + int(rand() * 5)] : Q[1 + int(rand() * 5)]) }
                print s "\t" (pos ? "upbeat" : "glum")
            } }'
    }
    { printf 'sentence\tlabel\n'; gen 600 1; } >"$work/train.tsv"
    { printf 'sentence\tlabel\n'; gen 200 2; } >"$work/dev.tsv"
    awk -F'\t' 'NR == 1 { print "label,sentence"; next } { print $2 ",\"" $1 "\"" }' "$work/train.tsv" >"$work/train.csv"
    awk -F'\t' 'NR > 1 { printf "{\"sentence\": \"%s\", \"label\": \"%s\"}\n", $1, $2 }' "$work/dev.tsv" >"$work/dev.jsonl"
    common="--model_name_or_path $m --max_length 32 --num_train_epochs 3 --learning_rate 3e-3 --mixed_precision no"
    "$seqcls" $common --train_file "$work/train.tsv" --validation_file "$work/dev.tsv" --output_dir "$work/out" \
        --min_accuracy 0.9 >"$work/t.log" 2>&1 || { cat "$work/t.log"; fail "fine-tune of the head-less folder"; }
    grep -v '%' "$work/t.log"
    grep -q 'classifier.weight' "$work/t.log" || fail "the new head was not reported"
    for f in config.json model.safetensors vocab.txt tokenizer.json tokenizer_config.json special_tokens_map.json \
             all_results.json; do
        [ -f "$work/out/$f" ] || fail "the output folder lacks $f"
    done
    grep -q '"glum"' "$work/out/config.json" && grep -q '"upbeat"' "$work/out/config.json" ||
        fail "config.json lacks the label names: $(cat "$work/out/config.json")"
    printf 'a superb and moving film\nthe plot was dull\n' | "$classify" --model_dir "$work/out" >"$work/c.out" ||
        fail "classify exited $?"
    cat "$work/c.out"
    [ "$(awk '{print $3}' "$work/c.out" | tr '\n' ' ')" = "upbeat glum " ] || fail "classify's labels are wrong"
    # the same task as CSV (train) and JSONL (dev), by extension
    "$seqcls" $common --num_train_epochs 1 --train_file "$work/train.csv" --validation_file "$work/dev.jsonl" \
        >"$work/f.log" 2>&1 || { cat "$work/f.log"; fail "CSV + JSONL"; }
    grep '^final dev accuracy' "$work/f.log"
    # refusals
    expect_fail "classify on a head-less folder" "has no trained classification head" "$classify" --model_dir "$m"
    echo 'a good film' | "$classify" --model_dir "$m" --allow_new_head >/dev/null 2>&1 || fail "--allow_new_head"
    printf 'sentence\tlabel\n' >"$work/empty.tsv"
    expect_fail "header-only training file" "$work/empty.tsv: the file has no data rows" \
        "$seqcls" $common --train_file "$work/empty.tsv" --validation_file "$work/dev.tsv"
    expect_fail "header-only dev file" "$work/empty.tsv: the file has no data rows" \
        "$seqcls" $common --train_file "$work/train.tsv" --validation_file "$work/empty.tsv"
    { printf 'sentence\tlabel\n'; printf 'a film\tupbeat\n'; printf 'the plot\tneutral\n'; } >"$work/odd.tsv"
    expect_fail "a dev label unseen in training" "$work/odd.tsv:3: label \"neutral\"" \
        "$seqcls" $common --train_file "$work/train.tsv" --validation_file "$work/odd.tsv"
    expect_fail "wrong --label_names count" "must give exactly 2 non-empty names" \
        "$seqcls" $common --train_file "$work/train.tsv" --validation_file "$work/dev.tsv" --label_names a,b,c
    expect_fail "no such label column" "no label column \"stars\"" \
        "$seqcls" $common --train_file "$work/train.tsv" --validation_file "$work/dev.tsv" --label_column stars
    printf 'sentence\tlabel\tsentence\n' >"$work/dup.tsv"
    expect_fail "a header naming a column twice" "$work/dup.tsv:1: the header names column \"sentence\" twice" \
        "$seqcls" $common --train_file "$work/dup.tsv" --validation_file "$work/dev.tsv"
    cp -r "$m" "$work/big" && for i in $(seq 1 80); do echo "extra$i"; done >>"$work/big/vocab.txt"
    expect_fail "a vocabulary larger than the embedding" "config.json's vocab_size is 100: they do not belong together" \
        "$seqcls" --model_name_or_path "$work/big" --max_length 32 --train_file "$work/train.tsv" --validation_file "$work/dev.tsv"
    expect_fail "classify with a vocabulary larger than the embedding" "embedding only 100 rows" \
        "$classify" --model_dir "$work/big" --allow_new_head
    expect_fail "an unknown option" "unknown option --bogus" "$seqcls" --bogus 1
    # hostile values and inputs, each refused by name (or, for --max_length, cut as run_glue does)
    { printf 'sentence\tlabel\n'; printf 'a film\tupbeat\n'; printf 'the plot\t glum\n'; } >"$work/blank.tsv"
    expect_fail "a label with a blank at its edge" "$work/blank.tsv:3: the label \" glum\" starts or ends with a blank" \
        "$seqcls" $common --train_file "$work/blank.tsv" --validation_file "$work/dev.tsv"
    expect_fail "an infinite learning rate" "--learning_rate must be a finite number > 0" \
        "$seqcls" $common --train_file "$work/train.tsv" --validation_file "$work/dev.tsv" --learning_rate inf
    expect_fail "a negative weight decay" "--weight_decay must be a finite number >= 0" \
        "$seqcls" $common --train_file "$work/train.tsv" --validation_file "$work/dev.tsv" --weight_decay -5
    expect_fail "a NaN clip norm" "--max_grad_norm must be a finite number >= 0" \
        "$seqcls" $common --train_file "$work/train.tsv" --validation_file "$work/dev.tsv" --max_grad_norm nan
    expect_fail "more steps than epochs can count" "epochs of" \
        "$seqcls" $common --train_file "$work/train.tsv" --validation_file "$work/dev.tsv" --max_train_steps 10737418240
    long=$(printf '%0950d' 0)
    expect_fail "a path past the buffers" "--output_dir is 950 bytes long; at most 900" \
        "$seqcls" $common --train_file "$work/train.tsv" --validation_file "$work/dev.tsv" --output_dir "$long"
    "$seqcls" --model_name_or_path "$m" --max_length 100 --max_train_steps 2 --mixed_precision no \
        --train_file "$work/train.tsv" --validation_file "$work/dev.tsv" >"$work/ml.log" 2>&1 ||
        { cat "$work/ml.log"; fail "--max_length past the model's positions stopped the run"; }
    grep -q -- "--max_length 100 is longer than the model takes (32 positions" "$work/ml.log" ||
        { cat "$work/ml.log"; fail "--max_length past the model's positions was not said"; }
    echo "ok: --max_length 100 on a 32-position model: cut to 32, said"
    expect_fail "classify --batch_size 0" "--batch_size 0: want a whole number from 1" \
        "$classify" --model_dir "$work/out" --batch_size 0
    expect_fail "classify --max_length past int" "--max_length 4294967299: want a whole number" \
        "$classify" --model_dir "$work/out" --max_length 4294967299
    printf 'a superb film\nbad\000byte\nthe plot was dull\n' | "$classify" --model_dir "$work/out" >"$work/nul.out" 2>"$work/nul.err" &&
        fail "classify with a NUL byte exited 0"
    grep -q "stdin:2: a NUL byte" "$work/nul.err" || { cat "$work/nul.err"; fail "the NUL byte was not said"; }
    [ "$(awk '{print $3}' "$work/nul.out" | tr '\n' ' ')" = "upbeat glum " ] || fail "the lines around the NUL byte"
    echo "ok: classify names a NUL byte's line and classifies the others"
    expect_fail "classify reading a directory" "cannot read stdin" sh -c "\"$classify\" --model_dir \"$work/out\" < \"$work\""
    if [ -w /dev/full ]; then
        echo 'a good film' | "$classify" --model_dir "$work/out" >/dev/full 2>"$work/full.err" && fail "classify > /dev/full exited 0"
        grep -q "cannot write stdout" "$work/full.err" || { cat "$work/full.err"; fail "a failed write was not said"; }
        echo "ok: classify > /dev/full fails and says so"
    fi
    cp -r "$work/out" "$work/fewer" && sed 's/"num_hidden_layers": 2/"num_hidden_layers": 1/' "$work/out/config.json" >"$work/fewer/config.json"
    expect_fail "classify with a config.json of fewer layers than its weights" "the model described by config.json does not have" \
        "$classify" --model_dir "$work/fewer"
    expect_fail "resume latest without an output dir" "need --output_dir" "$seqcls" --resume_from_checkpoint latest
    ;;
minilm)
    model=$4
    [ -f "$model/model.safetensors" ] || { echo "SKIP: no $model (tools/fetch-model installs it)"; exit 77; }
    data=$(dirname "$0")/data/sst2
    "$seqcls" --model_name_or_path "$model" --train_file "$data/train.tsv" --validation_file "$data/dev.tsv" \
        --label_names negative,positive --max_length 66 --per_device_train_batch_size 32 --learning_rate 1e-4 \
        --max_train_steps 60 --num_warmup_steps 6 --output_dir "$work/out" --min_accuracy 0.75 >"$work/m.log" 2>&1 ||
        { cat "$work/m.log"; fail "the MiniLM fine-tune (60 steps) did not reach 75% dev accuracy"; }
    grep -v '%' "$work/m.log"
    printf 'a truly wonderful film\nthe plot was awful\n' | "$classify" --model_dir "$work/out" >"$work/c.out" ||
        fail "classify exited $?"
    cat "$work/c.out"
    [ "$(awk '{print $3}' "$work/c.out" | tr '\n' ' ')" = "positive negative " ] || fail "classify's labels are wrong"
    # bf16 autocast inference: the same labels, logits within 0.1 of f32's
    printf 'a truly wonderful film\nthe plot was awful\n' | "$classify" --model_dir "$work/out" --mixed_precision bf16 \
        >"$work/c16.out" || fail "classify --mixed_precision bf16 exited $?"
    paste "$work/c.out" "$work/c16.out" | awk '$3 != $6 || ($1-$4)^2 > 0.01 || ($2-$5)^2 > 0.01 { bad = 1 } END { exit bad }' ||
        { cat "$work/c16.out"; fail "bf16 inference disagrees with f32"; }
    expect_fail "classify on the head-less MiniLM" "has no trained classification head" "$classify" --model_dir "$model"
    ;;
*) fail "unknown mode $mode" ;;
esac
echo PASS
