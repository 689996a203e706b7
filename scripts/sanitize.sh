#!/usr/bin/env bash
# Sanitizer and valgrind gate (CI): zero findings or a non-zero exit.
#   1. Build with -DUR_SANITIZE=address,undefined in build-asan (UNROLL_ASAN_BUILD_DIR), run
#      every CTest test (unit + fuzz corpus replay) and the interop tests (pytest) against that
#      binary. UBSan is built with -fno-sanitize-recover=all, so any report fails the test.
#   2. Build the normal tree (UNROLL_BUILD_DIR, default build) and run every unit-test
#      executable and fuzz replay binary under valgrind --error-exitcode=1 --leak-check=full.
# Extra arguments go to pytest (e.g. -k damaged). UNROLL_SKIP_INTEROP=1 skips step 1's pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
scripts/setup.sh --tests
status=0

asan=$(realpath -m "${UNROLL_ASAN_BUILD_DIR:-$root/build-asan}")
cache=$(realpath -m "${UNROLL_FIXTURE_CACHE:-$root/build/fixtures}")
UNROLL_BUILD_DIR=$asan scripts/build.sh -DUR_TESTS=ON -DUR_SANITIZE=address,undefined \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUR_FIXTURE_CACHE="$cache"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
echo "== sanitize: ctest (ASan+UBSan) in $asan"
# the pytest entries (labels cli, interop) run below, with the arguments given here
ctest --test-dir "$asan" --output-on-failure -j"$(nproc)" -LE pytest || status=1
if [ "${UNROLL_SKIP_INTEROP:-0}" != 1 ]; then
  echo "== sanitize: interop tests against the ASan+UBSan binary"
  # Python is not instrumented: only the unroll subprocesses are. A sanitizer report makes
  # unroll exit non-zero (abort), which fails the test that ran it.
  if [ "$#" = 0 ]; then
    # one CTest entry per test file, side by side; the entries of the ASan build run its
    # binary (tests/pytest.cmake) on the fixtures test.sh generated
    # all but the two that run no C code (the fixture generators' and the bench generator's
    # own tests: pure Python, a minute and more of this stage)
    ctest --test-dir "$asan" --output-on-failure -j"$(nproc)" -L interop \
      -E '^interop\.(fixtures|bench_checkpoint)$' || status=1
  else
    UNROLL_BIN="$asan/src/cli/unroll" UNROLL_BUILD_DIR="$asan" UNROLL_FIXTURE_CACHE="$cache" \
      .venv/bin/python -m pytest -q tests/interop "$@" || status=1
  fi
fi

build=$(realpath -m "${UNROLL_BUILD_DIR:-$root/build}")
UNROLL_BUILD_DIR=$build scripts/build.sh -DUR_TESTS=ON -DUR_SANITIZE=
echo "== sanitize: valgrind on every unit test and fuzz replay in $build"
vg=(valgrind -q --error-exitcode=1 --leak-check=full --show-leak-kinds=definite,indirect,possible
    --errors-for-leak-kinds=definite,indirect,possible --track-origins=yes)
# tests that size their work for a native run take a smaller case under valgrind
export UNROLL_UNDER_VALGRIND=1
# One valgrind per core: each executable's report goes to its own file, printed on failure.
vg_one() {
  local exe=$1 name args=() log
  name=$(basename "$exe")
  if [[ $name == fuzz_replay_* ]]; then
    args=("$root/tests/fuzz/corpora/${name#fuzz_replay_}")
  fi
  log=$(mktemp "${TMPDIR:-/tmp}/unroll-vg.XXXXXX")
  if ! (cd "$(dirname "$exe")" && "${vg[@]}" "$exe" "${args[@]}" >"$log" 2>&1); then
    echo "valgrind: $name FAILED"
    tail -40 "$log"
    rm -f "$log"
    return 1
  fi
  rm -f "$log"
}
export -f vg_one
export root
vg_list=$(find "$build/tests" -type f -perm -u+x \( -name 'test_*' -o -name 'fuzz_replay_*' \) | sort)
n=$(printf '%s\n' "$vg_list" | grep -c . || true)
# vg is an array: hand it to the children as one quoted string
VG_CMD=$(printf '%q ' "${vg[@]}")
export VG_CMD
if ! printf '%s\n' "$vg_list" | grep . |
  xargs -d '\n' -P "$(nproc)" -n 1 bash -c 'eval "vg=($VG_CMD)"; vg_one "$1"' vg_one; then
  status=1
fi
echo "== sanitize: valgrind ran $n executables"
[ "$n" -gt 0 ] || status=1
exit $status
