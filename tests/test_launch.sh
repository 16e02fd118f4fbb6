#!/bin/sh
# ember config / ember launch: precedence (flags > environment > config file >
# defaults), the mpirun command line, and clear errors for bad config files.
# Usage: test_launch.sh PATH/TO/ember
set -u
ember=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export EMBER_CONFIG_FILE="$dir/cfg/default_config.yaml"
unset EMBER_MIXED_PRECISION EMBER_NUM_PROCESSES EMBER_GRADIENT_ACCUMULATION_STEPS EMBER_USE_CPU
pass=0; fail=0
check() {  # name, command output, expected substring
  if printf '%s' "$2" | grep -qF -- "$3"; then pass=$((pass + 1)); echo "ok - $1"
  else fail=$((fail + 1)); echo "not ok - $1: expected '$3' in:"; printf '%s\n' "$2"; fi
}

"$ember" config --num_processes 3 --mixed_precision bf16 >/dev/null
check "config writes YAML" "$(cat "$EMBER_CONFIG_FILE")" "num_processes: 3"
check "config file used" "$("$ember" launch --quiet --dry_run ./prog 2>&1)" "mpirun -np 3"
check "env beats config" "$(EMBER_NUM_PROCESSES=2 "$ember" launch --quiet --dry_run ./prog 2>&1)" "mpirun -np 2"
check "flag beats env" "$(EMBER_NUM_PROCESSES=2 "$ember" launch --quiet --dry_run --num_processes 4 ./prog 2>&1)" "mpirun -np 4"
check "dashed flags as Accelerate accepts them" "$(EMBER_NUM_PROCESSES=2 "$ember" launch --quiet --dry-run --num-processes 5 ./prog 2>&1)" "mpirun -np 5"
out=$(EMBER_MIXED_PRECISION=fp16 "$ember" launch --dry_run --mixed_precision no ./prog a 2>&1)
check "table shows the source" "$out" "mixed_precision                flag         no"
check "program args pass through" "$out" "OMP_NUM_THREADS ./prog a"
check "mixed_precision says the program's own wins" "$out" "(a program that sets its own wins)"
check "distributed_type follows the process count" "$("$ember" launch --dry_run --num_processes 2 ./prog 2>&1)" "distributed_type               derived      MULTI_CPU"
check "one process is NO" "$("$ember" launch --dry_run --num_processes 1 ./prog 2>&1)" "distributed_type               derived      NO"
check "one process runs the program directly" "$("$ember" launch --quiet --dry_run --num_processes 1 ./prog x 2>&1)" "./prog x"
printf 'num_processes: 2\nbogus_key: 1\n' > "$dir/bad.yaml"
out=$("$ember" launch --config_file "$dir/bad.yaml" ./prog 2>&1); rc=$?
check "unknown key names file:line" "$out" "$dir/bad.yaml:2: unknown setting 'bogus_key'"
check "unknown key exits 2" "rc=$rc" "rc=2"
printf 'num_processes: [1\n' > "$dir/syntax.yaml"
check "YAML syntax error names the file" "$("$ember" launch --config_file "$dir/syntax.yaml" ./prog 2>&1)" "$dir/syntax.yaml:"
check "bad flag value" "$("$ember" launch --mixed_precision fp8 ./prog 2>&1)" "invalid value 'fp8' for mixed_precision"
check "multi-machine needs a hostfile" "$("$ember" launch --num_machines 2 --num_processes 4 ./prog 2>&1)" "needs --hostfile"
check "real run on 2 ranks" "$("$ember" launch --quiet --num_processes 2 sh -c 'echo rank=$OMPI_COMM_WORLD_RANK' 2>&1 | sort | tr '\n' ' ')" "rank=0 rank=1"
# hostile configs and answers: refused by name, nothing half-written, nothing hangs
printf 'num_processes: 2\nhostfile: *a\nmixed_precision: bf16\n' > "$dir/alias.yaml"
check "a YAML alias is refused" "$("$ember" launch --config_file "$dir/alias.yaml" --dry_run ./prog 2>&1)" "$dir/alias.yaml:2: aliases (*name) are not supported"
check "a count past the limit is refused" "$("$ember" launch --num_processes 4294967297 --dry_run ./prog 2>&1)" "invalid value '4294967297' for num_processes"
mkfifo "$dir/fifo.yaml"
check "a FIFO config is refused, not read" "$(timeout 20 "$ember" launch --config_file "$dir/fifo.yaml" --dry_run ./prog 2>&1; echo "rc=$?")" "$dir/fifo.yaml: not a regular file"
out=$(timeout 20 "$ember" config --config_file "$dir/u.yaml" --hostfile "$(printf 'h\377')" 2>&1); rc=$?
check "a value that is not UTF-8 is refused" "$out rc=$rc" "invalid value"
check "... with status 2" "rc=$rc" "rc=2"
check "... and nothing written" "$(ls "$dir" | grep -c 'u.yaml')" "0"
printf 'num_processes: 4\nmixed_precision: bf16\nbogus: 1\n' > "$dir/keep.yaml"
cp "$dir/keep.yaml" "$dir/keep.orig"
"$ember" config --config_file "$dir/keep.yaml" </dev/null >/dev/null 2>&1; rc=$?
check "interactive config over a file that does not load fails" "rc=$rc" "rc=1"
check "... and leaves the file as it was" "$(cmp "$dir/keep.yaml" "$dir/keep.orig" && echo same)" "same"
out=$(printf '\n\n' | "$ember" config --config_file "$dir/eof.yaml" 2>&1); rc=$?
check "answers ending early write nothing" "$out rc=$rc" "was not written"
check "... with status 1" "rc=$rc" "rc=1"
check "... and no file" "$(ls "$dir" | grep -c 'eof.yaml')" "0"
long=$(printf '%0600d' 0)
printf '\n\n\n\n%s\n\n\n\n\n' "$dir/$long" | "$ember" config --config_file "$dir/long.yaml" >/dev/null 2>&1
check "a long answer is kept whole" "$(cat "$dir/long.yaml")" "$long"
check "... and does not answer the next question" "$(cat "$dir/long.yaml")" "mixed_precision: no"
"$ember" config --config_file "$dir/merge.yaml" --num_processes 3 --mixed_precision bf16 >/dev/null
"$ember" config --config_file "$dir/merge.yaml" --use_cpu true >/dev/null
check "config by flags keeps the file's other settings" "$(cat "$dir/merge.yaml")" "num_processes: 3"
check "... and sets the flag's" "$(cat "$dir/merge.yaml")" "use_cpu: true"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
