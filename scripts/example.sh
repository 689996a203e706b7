#!/usr/bin/env bash
# Build unroll and run it on the small example checkpoint shipped in tests/data/example.
# Installs what is missing. Output goes to build/example-out/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh -DUR_TESTS=OFF
bin=build/src/cli/unroll
example=tests/data/example/checkpoints/1/items
echo "== unroll inspect $example"
"$bin" inspect "$example"
