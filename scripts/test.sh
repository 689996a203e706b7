#!/usr/bin/env bash
# Build unroll and run every test through CTest: the cmocka unit tests, the fuzz-corpus
# replays, and the CLI and interoperability tests (pytest against the real
# Orbax/TensorStore/JAX stack; labels cli, interop). Installs what is missing.
# Extra arguments go to ctest (e.g. -L interop, -R habits). Exit status is non-zero when any
# test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

scripts/setup.sh --tests
export UNROLL_BUILD_DIR=${UNROLL_BUILD_DIR:-$root/build}
scripts/build.sh -DUR_TESTS=ON

ctest --test-dir "$UNROLL_BUILD_DIR" --output-on-failure -j"$(nproc)" "$@"
