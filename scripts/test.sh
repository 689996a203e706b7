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

status=0
ctest --test-dir "$UNROLL_BUILD_DIR" --output-on-failure -j"$(nproc)" "$@" || status=1

# The released maxtext package in the loop (Python 3.12, .venv-maxtext): trains tiny models,
# converts them, decodes with MaxText's engine. Its trained checkpoints are cached beside the
# fixtures. A missing environment fails here (setup.sh above builds it), never skips.
export UNROLL_BIN="$UNROLL_BUILD_DIR/src/cli/unroll"
export UNROLL_MAXTEXT_CACHE="${UNROLL_FIXTURE_CACHE:-$UNROLL_BUILD_DIR/fixtures}/maxtext"
# the Hugging Face client that loads `unroll to_huggingface` folders (tests/maxtext/test_hf.py)
export UNROLL_HF_PYTHON="$root/.venv-hf/bin/python"
if [ -z "${UNROLL_SKIP_MAXTEXT:-}" ] && [ "$#" = 0 ]; then
  (cd tests/maxtext && "$root/.venv-maxtext/bin/python" -m pytest -q -p no:cacheprovider .) || status=1
fi
exit $status
