#!/usr/bin/env bash
# Prove that two builds of unroll behave alike, byte for byte: run the example and the interop
# tests that convert every layout family with scripts/compare_twin.sh standing in for the
# binary, so that every conversion the tests make (its --dry-run, its output files' sha256,
# stdout, stderr, exit status) and every `unroll verify` they run is done by both builds and
# compared. For refactors that must not change behaviour (issue 14).
#
#   scripts/compare_outputs.sh OLD_UNROLL NEW_UNROLL [pytest arguments ...]
#
# Default pytest arguments: test_layouts, test_unroll, test_verify, test_answers, test_config
# (they generate the fixtures of every family into $UNROLL_FIXTURE_CACHE on first use). The
# tests themselves see NEW's results. Records go to $COMPARE_LOG (default
# build/compare/<time>); exit status 1 when any invocation differs (listed from DIFFS).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
if [ $# -lt 2 ]; then
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
old=$(realpath "$1") new=$(realpath "$2")
shift 2
log=${COMPARE_LOG:-$root/build/compare/$(date -u +%Y%m%dT%H%M%S)}
mkdir -p "$log"
export COMPARE_OLD=$old COMPARE_NEW=$new COMPARE_LOG=$log
twin=$root/scripts/compare_twin.sh
: "${UNROLL_FIXTURE_CACHE:=$root/build/fixtures}"
export UNROLL_FIXTURE_CACHE

# the example (tests/data/example), as scripts/example.sh runs it
ex=tests/data/example
exout=$(mktemp -d)
"$twin" "$ex/unroll.yml" load_full_state_path="$ex/checkpoints/9/items" \
    base_output_directory="$exout" run_name=example force_unroll=true >/dev/null 2>&1
"$twin" "$ex/unroll.yml" load_full_state_path="$ex/checkpoints/9/items" \
    base_output_directory="$exout" run_name=example-linen force_unroll=true pure_nnx=false \
    >/dev/null 2>&1
"$twin" verify "$ex/checkpoints/9/items" "$exout/example/checkpoints/0/items" >/dev/null 2>&1
"$twin" verify "$ex/checkpoints/9/items" "$exout/example-linen/checkpoints/0/items" \
    "$ex/unroll.yml" >/dev/null 2>&1
"$twin" inspect "$exout/example/checkpoints/0/items" >/dev/null 2>&1
rm -rf -- "$exout"

if [ $# -eq 0 ]; then
    set -- tests/interop/test_layouts.py tests/interop/test_unroll.py \
        tests/interop/test_verify.py tests/interop/test_answers.py tests/interop/test_config.py
fi
UNROLL_BIN=$twin "$root/.venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
tests_rc=$?

n=$(find "$log" -mindepth 1 -maxdepth 1 -type d | wc -l)
dry=$(find "$log" -name 'dry-new.rc' | wc -l)
outs=$(grep -l compared "$log"/*/outputs 2>/dev/null | wc -l)
files=$(cat "$log"/*/new.sha256 2>/dev/null | wc -l)
echo "compare: $n invocations, $dry dry runs, $outs conversions with $files output files" \
    "hashed by both builds (records: $log)"
if [ -s "$log/DIFFS" ]; then
    echo "compare: $(wc -l <"$log/DIFFS") DIFFERENCES:"
    cat "$log/DIFFS"
    exit 1
fi
echo "compare: no difference (pytest exit status $tests_rc)"
exit $(( tests_rc != 0 ))
