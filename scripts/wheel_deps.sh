#!/usr/bin/env bash
# The toolchain and static libraries the wheel's unroll is linked with, so that it runs on any
# Linux of the architecture with glibc >= $UR_GLIBC (default 2.28: RHEL/Rocky 8, Debian 11,
# Ubuntu 20.04):
#   scripts/wheel_deps.sh DIR [x86_64|aarch64]     (scripts/package.sh calls it; idempotent)
# leaves in DIR
#   bin/cc                  Zig's clang (PyPI package `ziglang`) for <arch>-linux-gnu.<UR_GLIBC>:
#                           it compiles against glibc headers of that version and links against
#                           stubs that export only that version's symbols, so a newer symbol is
#                           a link error, not a wheel that fails at run time
#   prefix/lib/*.a          libcurl (HTTP and HTTPS only) and cJSON, built here from Debian's
#                           source packages with bin/cc; OpenSSL, libzstd, libyaml and zlib are
#                           Debian's own static archives (the -dev packages of the architecture,
#                           downloaded, not installed), linked through bin/cc: their calls
#                           resolve against the old glibc or the link fails
#   prefix/include          the headers of those libraries only (never /usr/include, whose glibc
#                           headers are newer than the target)
#   prefix/lib/pkgconfig    one .pc per library whose Libs is the complete static link
#   cmake-args              what CMake needs for the architecture (a cross build on another)
#   sysroot/                Debian's libc6 of the architecture when it is not this machine's,
#                           to run the binary with qemu-user in checks
# The wheel then needs nothing but glibc. Building OpenSSL from source costs minutes on two
# cores; Debian's archive of it is the same code, and the link against the old glibc is the
# check that its symbol needs are old enough (the newest it takes is getentropy, 2.25).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# = 1 ] || [ $# = 2 ] || { echo "usage: scripts/wheel_deps.sh DIR [x86_64|aarch64]" >&2; exit 2; }
dir=$(realpath -m "$1")
arch=${2:-x86_64}
case "$arch" in
  x86_64) debarch=amd64 ;;
  aarch64) debarch=arm64 ;;
  *) echo "wheel_deps: unknown architecture $arch" >&2; exit 2 ;;
esac
multiarch=$arch-linux-gnu
cross=()
if [ "$arch" != "$(uname -m)" ]; then
  cross=(-DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR="$arch")
fi
glibc=${UR_GLIBC:-2.28}
zig_version=0.17.1
stamp="zig $zig_version $arch glibc $glibc"
if [ "$(cat "$dir/.done" 2>/dev/null)" = "$stamp" ]; then
  exit 0
fi
rm -rf "$dir"
mkdir -p "$dir/bin" "$dir/src" "$dir/prefix/lib/pkgconfig" "$dir/prefix/include"
prefix=$dir/prefix
jobs=$(nproc)

# -- the compiler -------------------------------------------------------------------------
python3 -m venv "$dir/venv"
"$dir/venv/bin/pip" install -q "ziglang==$zig_version"
zig=$("$dir/venv/bin/python" -c 'import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))')
cat > "$dir/bin/cc" <<EOF
#!/bin/sh
# Zig's clang for $multiarch.$glibc (scripts/wheel_deps.sh)
: "\${ZIG_GLOBAL_CACHE_DIR:=$dir/zig-cache}"
: "\${ZIG_LOCAL_CACHE_DIR:=$dir/zig-cache}"
export ZIG_GLOBAL_CACHE_DIR ZIG_LOCAL_CACHE_DIR
exec "$zig" cc -target $multiarch.$glibc "\$@"
EOF
chmod +x "$dir/bin/cc"
cc=$dir/bin/cc

# -- Debian's packages: a private apt state ---------------------------------------------------
# Nothing under /etc or /var/lib/dpkg changes: the system's Debian entries of this release, as
# deb (for the architecture's -dev packages) and deb-src (curl, cJSON); apt checks what it
# downloads against the signed index.
apt=$dir/apt
mkdir -p "$apt/lists/partial"
python3 - "$apt/sources.sources" <<'EOF'
import glob, re, sys
rel = dict(l.strip().split("=", 1) for l in open("/etc/os-release") if "=" in l)["VERSION_CODENAME"]
mine = re.compile(r"^%s(-[a-z]+)?$" % re.escape(rel))
out = []
for f in glob.glob("/etc/apt/sources.list.d/*.sources"):
    for stanza in open(f).read().split("\n\n"):
        fields = dict((k.strip(), v.strip()) for k, v in
                      (l.split(":", 1) for l in stanza.splitlines() if ":" in l and not l.startswith("#")))
        suites = [s for s in fields.get("Suites", "").split() if mine.match(s)]
        if "deb" in fields.get("Types", "").split() and suites:
            out.append("Types: deb deb-src\nURIs: %s\nSuites: %s\nComponents: %s\n%s" % (
                fields["URIs"], " ".join(suites), fields.get("Components", "main"),
                "Signed-By: %s\n" % fields["Signed-By"] if "Signed-By" in fields else ""))
line = re.compile(r"^deb\s+(\[[^\]]*\]\s+)?(\S+)\s+(\S+)\s+(.*)$")
for f in ["/etc/apt/sources.list"] + glob.glob("/etc/apt/sources.list.d/*.list"):
    try:
        lines = open(f).read().splitlines()
    except OSError:
        continue
    for l in lines:
        m = line.match(l.split("#", 1)[0].strip())
        if m and mine.match(m.group(3)):
            out.append("Types: deb deb-src\nURIs: %s\nSuites: %s\nComponents: %s\n" % m.group(2, 3, 4))
if not out:
    sys.exit("wheel_deps: no Debian %s entry in /etc/apt to take sources from" % rel)
open(sys.argv[1], "w").write("\n".join(out))
EOF
aptopt=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$apt/parts"
        -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache"
        -o APT::Sandbox::User=root -o "APT::Architecture=$debarch"
        -o "APT::Architectures::=$debarch" -o Dir::State::status=/dev/null)
mkdir -p "$apt/parts" "$apt/cache/archives/partial" "$dir/debs" "$dir/root"
mv "$apt/sources.sources" "$apt/parts/debian.sources"
apt-get "${aptopt[@]}" update -qq
(cd "$dir/src" && apt-get "${aptopt[@]}" source -qq --download-only curl cjson >/dev/null)
for p in curl cjson; do
  dpkg-source -q -x --no-check "$dir/src/${p}"_*.dsc "$dir/src/$p" >/dev/null
done
debs=(libssl-dev libzstd-dev libyaml-dev zlib1g-dev)
[ "${#cross[@]}" = 0 ] || debs+=(libc6)
(cd "$dir/debs" && apt-get "${aptopt[@]}" download -qq "${debs[@]}" >/dev/null)
for d in "$dir"/debs/*.deb; do
  dpkg-deb -x "$d" "$dir/root"
done
debver() { # the upstream version of a downloaded package
  dpkg-deb -f "$dir"/debs/"$1"_*.deb Version | sed 's/^[0-9]*://; s/[-+~].*//; s/\.dfsg.*//'
}

# -- Debian's static archives and their headers ---------------------------------------------
for a in libssl libcrypto libzstd libyaml libz; do
  cp "$dir/root/usr/lib/$multiarch/$a.a" "$prefix/lib/"
done
cp -r "$dir/root/usr/include/openssl" "$prefix/include/"
cp -r "$dir/root/usr/include/$multiarch/openssl/." "$prefix/include/openssl/"
for h in zstd.h zstd_errors.h zdict.h yaml.h zlib.h zconf.h; do
  cp "$dir/root/usr/include/$h" "$prefix/include/"
done
if [ "${#cross[@]}" != 0 ]; then
  mv "$dir/root" "$dir/sysroot"
else
  rm -rf "$dir/root"
fi

# -- libcurl and cJSON from Debian's source packages ------------------------------------------

# cJSON: one file
"$cc" -O2 -c "$dir/src/cjson/cJSON.c" -o "$dir/src/cJSON.o"
ar rcs "$prefix/lib/libcjson.a" "$dir/src/cJSON.o"
mkdir -p "$prefix/include/cjson"
cp "$dir/src/cjson/cJSON.h" "$prefix/include/cjson/"

# libcurl: HTTP and HTTPS through OpenSSL, nothing else (no LDAP, SSH, IDN, PSL, HTTP/2,
# compression). The CA bundle compiled in is Debian's; on other systems unroll looks for the
# system's (src/kvstore/http/http.c).
# A cross build cannot run curl's test of poll(); glibc's is fine.
[ "${#cross[@]}" = 0 ] || cross_curl=(-DHAVE_POLL_FINE=1)
cmake -S "$dir/src/curl" -B "$dir/src/curl-build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_AR="$(command -v ar)" ${cross[@]+"${cross[@]}"} \
  ${cross_curl[@]+"${cross_curl[@]}"} \
  -DCMAKE_FIND_ROOT_PATH="$prefix" -DCMAKE_FIND_ROOT_PATH_MODE_LIBRARY=ONLY \
  -DCMAKE_FIND_ROOT_PATH_MODE_INCLUDE=ONLY -DCMAKE_FIND_ROOT_PATH_MODE_PACKAGE=ONLY \
  -DBUILD_SHARED_LIBS=OFF -DBUILD_CURL_EXE=OFF -DBUILD_TESTING=OFF -DENABLE_MANUAL=OFF \
  -DHTTP_ONLY=ON -DCURL_DISABLE_LDAP=ON -DCURL_USE_OPENSSL=ON -DOPENSSL_ROOT_DIR="$prefix" \
  -DOPENSSL_USE_STATIC_LIBS=ON -DCURL_USE_LIBSSH2=OFF -DUSE_NGHTTP2=OFF -DCURL_ZLIB=OFF \
  -DCURL_BROTLI=OFF -DCURL_ZSTD=OFF -DUSE_LIBIDN2=OFF -DCURL_USE_GSSAPI=OFF \
  -DENABLE_THREADED_RESOLVER=ON -DCURL_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt \
  -DCURL_CA_PATH=none >"$dir/src/curl-configure.log" 2>&1 ||
  { tail -n 30 "$dir/src/curl-configure.log" >&2; exit 1; }
cmake --build "$dir/src/curl-build" --target libcurl -j"$jobs" >"$dir/src/curl-build.log" 2>&1 ||
  { tail -n 30 "$dir/src/curl-build.log" >&2; exit 1; }
cp "$dir/src/curl-build/lib/libcurl.a" "$prefix/lib/"
mkdir -p "$prefix/include/curl"
cp "$dir/src/curl/include/curl/"*.h "$prefix/include/curl/"

# -- pkg-config files: Libs is the whole static link -------------------------------------
pc() { # name version libs [cflags]
  cat > "$prefix/lib/pkgconfig/$1.pc" <<EOF
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: $1
Description: $1, static (scripts/wheel_deps.sh)
Version: $2
Libs: -L\${libdir} $3
Cflags: -I\${includedir}${4:-}
EOF
}
dscver() { sed -n 's/^Version: *//p' "$dir/src/$1"_*.dsc | sed 's/^[0-9]*://; s/[-+~].*//'; }
pc libzstd "$(debver libzstd-dev)" "-lzstd"
pc yaml-0.1 "$(debver libyaml-dev)" "-lyaml"
pc zlib "$(debver zlib1g-dev)" "-lz"
pc libcjson "$(dscver cjson)" "-lcjson"
pc libcrypto "$(debver libssl-dev)" "-lcrypto -ldl -lpthread"
pc libssl "$(debver libssl-dev)" "-lssl -lcrypto -ldl -lpthread"
pc libcurl "$(dscver curl)" "-lcurl -lssl -lcrypto -ldl -lpthread" " -DCURL_STATICLIB"
printf '%s\n' ${cross[@]+"${cross[@]}"} > "$dir/cmake-args"
echo "$stamp" > "$dir/.done"
