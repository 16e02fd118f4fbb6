#!/bin/sh
# ember e2e — the seqcls and classify examples on the built-in task.
#   seqcls_e2e.sh single SEQCLS CLASSIFY EMBER BUILDDIR
#       trains on one process (>= 95% dev accuracy), saves the model, then runs
#       classify on the saved folder: one line per sentence, two logits and a
#       label, and the obvious sentences get the obvious labels.
#   seqcls_e2e.sh launch SEQCLS CLASSIFY EMBER BUILDDIR
#       the same training on 1 process and under `ember launch
#       --num_processes 2`: the final accuracies agree within 1 point; the
#       launched run's --log and --tensorboard outputs come from the main
#       process only (one JSONL file with one line per optimizer step plus one
#       per epoch, one event file).
mode=$1 seqcls=$2 classify=$3 ember=$4 out=$5
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
accuracy() { sed -n 's/^final dev accuracy \([0-9.]*\)$/\1/p' "$1" | tail -1; }

if [ "$mode" = single ]; then
    "$seqcls" --min-accuracy 0.95 --output-dir "$work/model" >"$work/one.log" 2>&1
else
    "$seqcls" --min-accuracy 0.95 >"$work/one.log" 2>&1
fi
rc=$?
cat "$work/one.log"
[ $rc -eq 0 ] || fail "seqcls exited $rc"
one=$(accuracy "$work/one.log")
[ -n "$one" ] || fail "no final accuracy line"

case $mode in
single)
    for f in config.json model.safetensors vocab.txt; do
        [ -f "$work/model/$f" ] || fail "the saved folder lacks $f"
    done
    printf 'a wonderful and moving film\nthe plot was dull and the acting awful\n\nit was superb\tthe ending was boring\n' |
        "$classify" --model-dir "$work/model" >"$work/cls.out" 2>"$work/cls.err"
    rc=$?
    cat "$work/cls.out" "$work/cls.err"
    [ $rc -eq 0 ] || fail "classify exited $rc"
    [ "$(wc -l <"$work/cls.out")" -eq 4 ] || fail "classify printed $(wc -l <"$work/cls.out") lines for 4 sentences"
    awk 'NF != 3 { exit 1 } $1 + 0 != $1 || $2 + 0 != $2 { exit 1 }' "$work/cls.out" ||
        fail "a line is not: logit logit label"
    [ "$(sed -n 1p "$work/cls.out" | awk '{print $3}')" = positive ] || fail "sentence 1 should be positive"
    [ "$(sed -n 2p "$work/cls.out" | awk '{print $3}')" = negative ] || fail "sentence 2 should be negative"
    ;;
launch)
    "$ember" launch --num_processes 2 "$seqcls" --min-accuracy 0.95 --log "$work/two.jsonl" \
        --tensorboard "$work/tb" >"$work/two.log" 2>&1
    rc=$?
    cat "$work/two.log"
    [ $rc -eq 0 ] || fail "ember launch --num_processes 2 seqcls exited $rc"
    grep -q '^seqcls: 2 process(es)' "$work/two.log" || fail "the launched run did not see a world of 2"
    two=$(accuracy "$work/two.log")
    [ -n "$two" ] || fail "no final accuracy line from the launched run"
    awk -v a="$one" -v b="$two" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.01) }' ||
        fail "1 process: $one, 2 processes: $two: more than 1 point apart"
    echo "1 process: $one, 2 processes: $two"
    steps=$(sed -n 's/.* \([0-9]*\) optimizer steps.*/\1/p' "$work/two.log" | head -1)
    epochs=$(grep -c '^epoch [0-9]* dev accuracy' "$work/two.log")
    lines=$(wc -l <"$work/two.jsonl")
    [ -n "$steps" ] && [ "$lines" -eq $((steps + epochs)) ] ||
        fail "the JSONL log has $lines lines, want $steps steps + $epochs epochs (main process only)"
    [ "$(ls "$work/tb" | grep -c '^events\.out\.tfevents\.')" -eq 1 ] || fail "want one TensorBoard event file: $(ls "$work/tb")"
    [ -s "$work/tb/$(ls "$work/tb")" ] || fail "the TensorBoard event file is empty"
    echo "logs: $lines JSONL lines, one event file"
    ;;
*) fail "unknown mode $mode" ;;
esac
echo PASS
