#!/usr/bin/env bash
# The clang half of CI, beside the gcc build of scripts/test.sh (docs/conventions.md §8):
#   1. the library, the CLI and the unit tests built with clang and -Werror (UR_WERROR=ON) in
#      build-clang/ (or UNROLL_CLANG_BUILD_DIR), and the unit tests run;
#   2. clang-tidy with the checks of .clang-tidy over every project .c file under src/
#      (warnings are errors there too).
# clang and clang-tidy: CC / CLANG_TIDY, else the newest clang-N / clang-tidy-N (16 or later),
# else plain clang / clang-tidy (scripts/setup.sh --tests installs clang-16 and clang-tidy-16).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${UNROLL_CLANG_BUILD_DIR:-build-clang}

. scripts/clang_tool.sh
cc=$(clang_tool "${CC:-}" clang)
tidy=$(clang_tool "${CLANG_TIDY:-}" clang-tidy)

echo "== clang build ($cc, -Werror) in $build"
cmake -S . -B "$build" -DCMAKE_C_COMPILER="$cc" -DUR_WERROR=ON -DUR_TESTS=ON \
  -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >/dev/null
cmake --build "$build" -j"$(nproc)"
echo "== unit tests (clang build)"
# all but the exhaustive fault run of the publication protocol (6,000 faulted runs, 4 minutes
# of a core): it checks the protocol's logic, not the compiler's code, and runs whole in the gcc
# build (scripts/test.sh) and one case in 13 under ASan (scripts/sanitize.sh)
ctest --test-dir "$build" -L unit -E '^unit\.job\.run_faults$' --output-on-failure -j"$(nproc)"

echo "== clang-tidy ($tidy, .clang-tidy)"
git ls-files 'src/*.c' |
  xargs -P"$(nproc)" -n4 "$tidy" -p "$build" --quiet 2> >(grep -v '^[0-9]* warnings\? generated\.$' >&2)
echo "lint: ok"
