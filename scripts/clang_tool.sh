# Sourced by scripts/format.sh and scripts/lint.sh: clang_tool <override> <name> prints the
# tool to run: the override when set (CC, CLANG_TIDY, CLANG_FORMAT), else the newest
# <name>-N for N in 19..16, else a plain <name> of version 16 or later; exits 2 when there is
# none (scripts/setup.sh --tests installs the -16 tools).
clang_tool() {
  if [ -n "$1" ]; then
    echo "$1"
    return
  fi
  for v in 19 18 17 16; do
    if command -v "$2-$v" >/dev/null 2>&1; then
      echo "$2-$v"
      return
    fi
  done
  if command -v "$2" >/dev/null 2>&1; then
    major=$("$2" --version | sed -n 's/.*version \([0-9]*\).*/\1/p' | head -n 1)
    if [ "${major:-0}" -ge 16 ]; then
      echo "$2"
      return
    fi
  fi
  echo "$(basename "$0"): needs $2 16 or later (scripts/setup.sh --tests installs it)" >&2
  exit 2
}
