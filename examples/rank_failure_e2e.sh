#!/bin/sh
# ember fault test — a rank that fails (or ends early) stops the whole job in
# seconds, not at the collective timeout (EMBER_TIMEOUT is set to 600 s here,
# so a pass cannot come from the timeout).
#   rank_failure_e2e.sh EMBER SEQCLS NP
# Each case runs `ember launch --num_processes NP seqcls ...` on the built-in
# task, with one rank given a different command line through a wrapper:
#   log      --log into a folder that does not exist (only rank 0 opens the log)
#   epochs   the last rank trains 1 epoch, the others 3 (it ends early, cleanly)
#   config   the last rank builds a model of another width (DDP's first
#            all-reduce finds the mismatch)
#   data     the last rank reads a training file with a malformed row
# Every case must exit non-zero within LIMIT seconds and print a message that
# names the cause.
ember=$1 seqcls=$2 np=${3:-2}
LIMIT=60
export EMBER_TIMEOUT=600 OMP_NUM_THREADS=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
last=$((np - 1))
printf 'sentence\tlabel\nthe film\t1\nthe plot\t0\textra\n' >"$work/bad.tsv"
printf '[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\nfilm\nplot\n' >"$work/vocab.txt"
cat >"$work/wrap.sh" <<WRAP
#!/bin/sh
# the last rank gets extra arguments: \$EXTRA
if [ "\${OMPI_COMM_WORLD_RANK:-0}" = "$last" ]; then exec "$seqcls" "\$@" \$EXTRA; fi
exec "$seqcls" "\$@"
WRAP
chmod +x "$work/wrap.sh"

run_case() {   # name, expected text, EXTRA for the last rank, common args...
    name=$1 text=$2 extra=$3; shift 3
    start=$(date +%s)
    EXTRA="$extra" timeout 300 "$ember" launch --quiet --num_processes "$np" "$work/wrap.sh" "$@" >"$work/$name.log" 2>&1
    rc=$? took=$(($(date +%s) - start))
    [ $rc -ne 0 ] || { cat "$work/$name.log"; fail "$name: the job exited 0"; }
    [ $rc -ne 124 ] || { cat "$work/$name.log"; fail "$name: still running after 300 s"; }
    [ $took -le $LIMIT ] || { cat "$work/$name.log"; fail "$name: took $took s (limit $LIMIT s)"; }
    grep -qF -- "$text" "$work/$name.log" || { cat "$work/$name.log"; fail "$name: no \"$text\" in the output"; }
    echo "ok: $name: exit $rc after $took s: $(grep -F -- "$text" "$work/$name.log" | head -n 1 | cut -c1-200)"
}

run_case log "$work/nonexistent" "" --epochs 3 --log "$work/nonexistent/run.jsonl"
run_case epochs "ended its program" "--epochs 1" --epochs 3
run_case config "DDP needs the same model on every rank" "--dim 32" --epochs 1
run_case data "bad.tsv:3" "--train $work/bad.tsv --dev $work/bad.tsv --vocab $work/vocab.txt" --epochs 1
echo PASS
