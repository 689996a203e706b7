#!/usr/bin/env bash
# Format the C sources with .clang-format (clang-format >= 16), or check them:
#   scripts/format.sh           rewrite every tracked .c/.h file in place
#   scripts/format.sh --check   change nothing; list the files that are not formatted and
#                               exit 1 if there is any
#   scripts/format.sh [--check] FILE...   only these files
# clang-format is CLANG_FORMAT, else clang-format-16 or later, else `clang-format` if it is
# 16 or later (scripts/setup.sh --tests installs clang-format-16).
set -euo pipefail
cd "$(dirname "$0")/.."

check=0
if [ "${1:-}" = "--check" ]; then
  check=1
  shift
fi

. scripts/clang_tool.sh
cf=$(clang_tool "${CLANG_FORMAT:-}" clang-format)

if [ "$#" -gt 0 ]; then
  files=("$@")
else
  mapfile -t files < <(git ls-files '*.c' '*.h')
fi

if [ "$check" = 0 ]; then
  "$cf" -i --style=file "${files[@]}"
  exit 0
fi
bad=0
for f in "${files[@]}"; do
  if ! "$cf" --style=file --dry-run -Werror "$f" >/dev/null 2>&1; then
    echo "not formatted: $f (scripts/format.sh $f)"
    bad=1
  fi
done
exit $bad
