#!/usr/bin/env bash
# Install what building and testing unroll needs, only what is missing (idempotent, fast
# when everything is there). Debian, as root (or with sudo).
#   scripts/setup.sh            build dependencies (compiler, cmake, libzstd, cJSON, libyaml,
#                               libcurl and OpenSSL for s3:// and gs://)
#   scripts/setup.sh --tests    also cmocka, valgrind, gdb, the clang toolchain of scripts/lint.sh
#                               and scripts/format.sh, and the Python interop stack in .venv
set -euo pipefail
cd "$(dirname "$0")/.."

want_tests=0
[ "${1:-}" = "--tests" ] && want_tests=1

pkgs=(gcc make cmake pkg-config libzstd-dev libcjson-dev libyaml-dev zlib1g-dev
      libcurl4-openssl-dev libssl-dev)
if [ "$want_tests" = 1 ]; then
  # openmpi-bin: mpirun launches the multi-process tests (tests/interop/test_multiprocess.py)
  # openssl: the command that makes tests/interop/test_tls_ca.py's CA and server certificate
  pkgs+=(libcmocka-dev python3-venv valgrind gdb time openmpi-bin openssl)
  # clang beside gcc (scripts/lint.sh) and the formatter: 16 is the oldest clang-format that
  # reads .clang-format (AlignTrailingComments Kind), and Debian 12 ships it.
  pkgs+=(clang-16 clang-tidy-16 clang-format-16)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# python3-venv may be absent as a package where Python itself ships venv (pyenv builds).
if [ "${#missing[@]}" -gt 0 ] && printf '%s\n' "${missing[@]}" | grep -qx python3-venv; then
  if python3 -c 'import venv, ensurepip' 2>/dev/null; then
    missing=("${missing[@]/python3-venv/}")
  fi
fi
missing=($(printf '%s\n' "${missing[@]}" | grep -v '^$' || true))
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ "$want_tests" = 1 ]; then
  req=tests/interop/requirements.txt
  stamp=.venv/.requirements.sha256
  sum=$(sha256sum "$req" | cut -d' ' -f1)
  if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$sum" ]; then
    echo "setup: creating .venv from $req" >&2
    python3 -m venv .venv
    .venv/bin/pip install -q --upgrade pip >/dev/null
    .venv/bin/pip install -q -r "$req"
    echo "$sum" > "$stamp"
  fi
  # the newest Orbax beside the pinned one: the package alone, for a subprocess's PYTHONPATH
  req=tests/interop/requirements-orbax-newest.txt
  stamp=.venv/orbax-newest/.requirements.sha256
  sum=$(sha256sum "$req" | cut -d' ' -f1)
  if [ "$(cat "$stamp" 2>/dev/null)" != "$sum" ]; then
    echo "setup: installing $req into .venv/orbax-newest" >&2
    rm -rf .venv/orbax-newest
    .venv/bin/pip install -q --no-deps --target .venv/orbax-newest -r "$req"
    echo "$sum" > "$stamp"
  fi
fi

# The Hugging Face client (tests/hf: transformers on the CPU build of torch that the machine
# image ships for Python 3.11, found by pip in its configured wheel folder): .venv-hf, which
# tests/maxtext/test_hf.py runs to load unroll's folders.
if [ "$want_tests" = 1 ]; then
  req=tests/hf/requirements.txt
  stamp=.venv-hf/.requirements.sha256
  sum=$(sha256sum "$req" | cut -d' ' -f1)
  if [ ! -x .venv-hf/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$sum" ]; then
    echo "setup: creating .venv-hf from $req" >&2
    rm -rf .venv-hf
    python3 -m venv .venv-hf
    .venv-hf/bin/pip install -q --upgrade pip >/dev/null
    .venv-hf/bin/pip install -q -r "$req"
    echo "$sum" > "$stamp"
  fi
fi

# The MaxText suite (tests/maxtext) runs the released maxtext package, which needs Python 3.12:
# a second venv, .venv-maxtext, from pyenv's 3.12 (or UNROLL_PYTHON312). The requirements file is a
# complete freeze, installed --no-deps: maxtext's own metadata pulls in the GPU/cloud stack.
if [ "$want_tests" = 1 ]; then
  req=tests/maxtext/requirements.txt
  stamp=.venv-maxtext/.requirements.sha256
  sum=$(sha256sum "$req" | cut -d' ' -f1)
  if [ ! -x .venv-maxtext/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$sum" ]; then
    py=${UNROLL_PYTHON312:-}
    if [ -z "$py" ] && command -v pyenv >/dev/null 2>&1; then
      py=$(ls -d "$(pyenv root)"/versions/3.12.*/bin/python 2>/dev/null | sort -V | tail -1 || true)
    fi
    [ -z "$py" ] && command -v python3.12 >/dev/null 2>&1 && py=$(command -v python3.12)
    if [ -z "$py" ] || ! "$py" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
      echo "setup: tests/maxtext needs Python 3.12 (pyenv install 3.12, or set UNROLL_PYTHON312)" >&2
      exit 1
    fi
    echo "setup: creating .venv-maxtext ($py) from $req" >&2
    rm -rf .venv-maxtext
    "$py" -m venv .venv-maxtext
    .venv-maxtext/bin/pip install -q --no-deps -r "$req"
    echo "$sum" > "$stamp"
  fi
fi
