#!/usr/bin/env bash
# Configure and build unroll in build/ (Release-like, warnings as errors). Extra arguments
# go to cmake's configure step, e.g. -DUR_SANITIZE=address,undefined.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${UNROLL_BUILD_DIR:-build}
cmake -S . -B "$build" -DUR_WERROR=ON "$@" >/dev/null
cmake --build "$build" -j"$(nproc)"
