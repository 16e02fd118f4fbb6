#!/bin/sh
# ember tests — the bounded OpenMP spin (tensor/omp_env.c): libgomp itself
# reports (OMP_DISPLAY_ENV, asked for by EMBER_OMP_DISPLAY=1) the spin count it
# runs with, in a program built with ember_dep (the `ember` command):
#   nothing set by the user      -> GOMP_SPINCOUNT 3000 (ember's default)
#   GOMP_SPINCOUNT=77            -> 77 (the user's value wins)
#   OMP_WAIT_POLICY=passive      -> 0 (the user's policy wins)
#   OMP_WAIT_POLICY= or GOMP_SPINCOUNT= (empty) -> 3000 (no choice made)
# This fails if the library stops being initialized before libgomp (the
# DT_NEEDED order meson.build arranges): libgomp would then report 300000.
# Usage: test_omp_env.sh EMBER_COMMAND
set -u
ember=$1
fail=0
spin() {  # the spin count libgomp reports, with the environment given
  env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT EMBER_OMP_DISPLAY=1 "$@" "$ember" env 2>&1 |
    sed -n "s/^ *GOMP_SPINCOUNT = '\([0-9]*\)'.*/\1/p" | head -n 1
}
check() {  # what, got, want
  if [ "$2" = "$3" ]; then echo "ok: $1: $2"; else echo "FAIL: $1: libgomp's spin count is '$2', want '$3'"; fail=1; fi
}
check "default" "$(spin)" 3000
check "GOMP_SPINCOUNT=77" "$(spin GOMP_SPINCOUNT=77)" 77
check "OMP_WAIT_POLICY=passive" "$(spin OMP_WAIT_POLICY=passive)" 0
check "OMP_WAIT_POLICY= (empty: no choice)" "$(spin OMP_WAIT_POLICY=)" 3000
check "GOMP_SPINCOUNT= (empty: no choice)" "$(spin GOMP_SPINCOUNT=)" 3000
exit $fail
