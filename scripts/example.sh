#!/usr/bin/env bash
# Build unroll and run it on the small example checkpoint shipped in tests/data/example:
# a scanned MaxText Linen training state (OCDBT + zarr3, float32, 3 layers). The param-only,
# unscanned bfloat16 checkpoint goes to build/example-out/example/checkpoints/0/items.
# Installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
bin=build/src/cli/unroll
example=tests/data/example
out=build/example-out

echo "== input: $example/checkpoints/9/items"
"$bin" inspect "$example/checkpoints/9/items" | tail -n 1
echo "== unroll"
"$bin" "$example/unroll.yml" \
  load_full_state_path="$example/checkpoints/9/items" \
  base_output_directory="$out" run_name=example \
  force_unroll=true
echo "== output: $out/example/checkpoints/0/items"
"$bin" inspect "$out/example/checkpoints/0/items"
echo "== unroll verify (every output leaf against its slice of the input)"
"$bin" verify "$example/checkpoints/9/items" "$out/example/checkpoints/0/items"
