#!/bin/sh
# Builds ember's libFuzzer harnesses (not part of the normal build):
#   tools/fuzz/build.sh [OUTDIR]        (default: build-fuzz/ at the repository root)
# The library is compiled by meson with clang, ASan+UBSan and
# -fsanitize=fuzzer-no-link into OUTDIR/lib; each harness links against it:
#   OUTDIR/fuzz_tsv, fuzz_csv, fuzz_jsonl  data/table.c (+ the tokenized dataset)
#   OUTDIR/fuzz_tokenizer                  data/tokenizer*.c
# Run one from the repository root, e.g.
#   mkdir -p /tmp/corpus && cp tests/fixtures/fuzz-regress/csv/* /tmp/corpus/
#   build-fuzz/fuzz_csv -max_total_time=60 -dict=tools/fuzz/csv.dict /tmp/corpus
# (EMBER_VOCAB overrides ../shared/data/bert-base-uncased/vocab.txt.) Keep
# crashers and interesting inputs in tests/fixtures/fuzz-regress/<kind>/:
# tests/test_readers.c replays them in every build, ASan's included.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/build-fuzz}
mkdir -p "$out"
out=$(cd "$out" && pwd)
if [ ! -f "$out/lib/build.ninja" ]; then
    CC=clang meson setup "$out/lib" "$root" -Dcuda=disabled -Donednn=disabled -Dmpi=disabled -Dbuildtype=debugoptimized \
        -Db_sanitize=address,undefined -Db_lundef=false -Dc_args=-fsanitize=fuzzer-no-link
fi
meson compile -C "$out/lib" ember:static_library
deps=$(pkg-config --libs libcjson libutf8proc openblas)
cflags="-g -O1 -fsanitize=fuzzer,address,undefined -fopenmp -D_GNU_SOURCE -I$root -I$out/lib"
for kind in tsv csv jsonl; do
    K=$(echo "$kind" | tr a-z A-Z)
    clang $cflags -DFUZZ_KIND=EM__TABLE_$K "$root/tools/fuzz/fuzz_table.c" "$out/lib/libember.a" $deps -lm -lpthread \
        -o "$out/fuzz_$kind"
done
clang $cflags "$root/tools/fuzz/fuzz_tokenizer.c" "$out/lib/libember.a" $deps -lm -lpthread -o "$out/fuzz_tokenizer"
echo "built: $out/fuzz_tsv $out/fuzz_csv $out/fuzz_jsonl $out/fuzz_tokenizer"
