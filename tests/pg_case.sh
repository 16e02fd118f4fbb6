#!/bin/sh
# ember tests — process-group failure cases, judged from outside mpirun.
#   pg_case.sh MPIRUN TEST_PG timeout   rank 0 must report EM_ERR_TIMEOUT after
#       its 2 s timeout, and mpirun must then stop rank 1 (asleep for 30 s).
#   pg_case.sh MPIRUN TEST_PG kill      rank 1 SIGKILLs itself: mpirun must exit
#       non-zero well within rank 0's 20 s timeout (no hang).
mpirun=$1 exe=$2 mode=$3
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s)
timeout 120 "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -np 2 "$exe" "$mode" >"$log" 2>&1
rc=$?
elapsed=$(( $(date +%s) - start ))
cat "$log"
echo "mpirun exit status $rc after ${elapsed} s"
fail() { echo "FAIL: $*"; exit 1; }
case $mode in
timeout)
    grep -q '^PASS timeout' "$log" || fail "rank 0 did not report the timeout"
    [ "$elapsed" -lt 25 ] || fail "the job took ${elapsed} s: the sleeping rank was not stopped"
    ;;
kill)
    [ "$rc" -ne 0 ] || fail "mpirun exited 0 although rank 1 was killed"
    [ "$rc" -ne 124 ] || fail "mpirun hung (killed by timeout 120)"
    [ "$elapsed" -lt 20 ] || fail "the job took ${elapsed} s to end after a rank died"
    ;;
*) fail "unknown mode $mode" ;;
esac
echo "PASS $mode"
