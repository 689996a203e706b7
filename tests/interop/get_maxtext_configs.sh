#!/usr/bin/env bash
# Download MaxText's configs (base.yml, models/*.yml, ...) from the `maxtext` package on PyPI,
# without its dependencies, and unpack them into DEST/configs.
#
#   tests/interop/get_maxtext_configs.sh DEST [VERSION]
#
# The wheel keeps them at maxtext/configs/ (base.yml, models/<name>.yml, inference/, ...).
# maxtext wheels declare Requires-Python >= 3.12; only files are taken from the wheel, so the
# interpreter running pip does not matter (--ignore-requires-python). Prints DEST/configs.
set -euo pipefail

dest=${1:?usage: get_maxtext_configs.sh DEST [VERSION]}
version=${2:-0.2.5}  # pinned: the configs the tests were checked against
pip=${PIP:-pip}
if ! command -v "$pip" >/dev/null 2>&1; then
    pip="python3 -m pip"
fi

mkdir -p "$dest"
if [[ -f "$dest/configs/base.yml" && -d "$dest/configs/models" ]]; then
    echo "$dest/configs"
    exit 0
fi

spec=maxtext
if [[ -n "$version" ]]; then
    spec="maxtext==$version"
fi
wheels="$dest/wheel"
rm -rf "$wheels"
mkdir -p "$wheels"
$pip download --no-deps --ignore-requires-python --only-binary=:all: -d "$wheels" "$spec" >&2
whl=$(ls "$wheels"/maxtext-*.whl | head -n 1)

tmp="$dest/unpack.$$"
rm -rf "$tmp"
mkdir -p "$tmp"
python3 - "$whl" "$tmp" <<'PY'
import sys, zipfile
whl, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as z:
    names = [n for n in z.namelist() if n.startswith("maxtext/configs/") and n.endswith((".yml", ".yaml"))]
    if not any(n == "maxtext/configs/base.yml" for n in names):
        sys.exit(f"{whl}: no maxtext/configs/base.yml")
    for n in names:
        z.extract(n, out)
PY
rm -rf "$dest/configs"
mv "$tmp/maxtext/configs" "$dest/configs"
rm -rf "$tmp"
basename "$whl" > "$dest/configs/WHEEL"
echo "$dest/configs"
