#!/usr/bin/env bash
# A stand-in for the unroll binary (UNROLL_BIN) that runs two builds of unroll on the same
# arguments and records whether they agree; used by scripts/compare_outputs.sh, which sets:
#   COMPARE_OLD, COMPARE_NEW  the two unroll executables (NEW's result is what the caller sees)
#   COMPARE_LOG               a directory: one record per invocation, and a line in DIFFS for
#                             each disagreement
# A conversion is compared three ways: its --dry-run (stdout, stderr, exit status), the real
# run's stdout/stderr/status, and the sha256 of every file it wrote under
# <base_output_directory>/<run_name> (OLD's output is removed before NEW runs; the conversion
# is run once only, by NEW, when that directory existed before or the arguments do not name
# it). verify/inspect/ls: stdout, stderr and status. Paths that hold a pid are normalised.
set -u
old=${COMPARE_OLD:?} new=${COMPARE_NEW:?} log=${COMPARE_LOG:?}
mkdir -p "$log"
id=$(date +%s%N)-$$
rec="$log/$id"
mkdir -p "$rec"
printf '%q ' "$@" >"$rec/args"
echo >>"$rec/args"

# pids in staging/lock names; the summary line's wall time
norm() {
    sed -E 's/\.[0-9]+\.unroll-tmp/.PID.unroll-tmp/g; s/pid [0-9]+/pid PID/g;
            s/, [0-9.]+ s, ([0-9]+) threads$/, T s, \1 threads/' "$1"
}

# run BIN TAG ARGS...: stdout/stderr/status into $rec/TAG.*
run() {
    local bin=$1 tag=$2
    shift 2
    "$bin" "$@" >"$rec/$tag.out" 2>"$rec/$tag.err" </dev/null
    echo $? >"$rec/$tag.rc"
}

same() { # same TAG_A TAG_B WHAT
    local a=$1 b=$2 what=$3 f
    for f in out err rc; do
        if ! cmp -s <(norm "$rec/$a.$f") <(norm "$rec/$b.$f"); then
            echo "$id $what: $f differs: $(cat "$rec/args")" >>"$log/DIFFS"
        fi
    done
}

# tree_hash DIR > "sha256  relative/path" per file; in the files stamped with the time or the
# staging path, those are masked first: the OCDBT manifest is hashed as OLD's `ls --manifest`
# dump less its commit_time (every field of it but that one); everything else as written
tree_hash() {
    (cd "$1" && find . -type f -print0 | sort -z | while IFS= read -r -d '' f; do
        case "${f##*/}" in
        _CHECKPOINT_METADATA | commit_success.txt)
            h=$(sed -E 's/"(init|commit)_timestamp_nsecs": [0-9]+/"\1_timestamp_nsecs": T/g;
                        s/\.[0-9]+\.unroll-tmp/.PID.unroll-tmp/g' "$f" | sha256sum) ;;
        manifest.ocdbt)
            h=$("$old" ls --manifest "${f%/*}" | sed -E 's/commit_time=[0-9]+/commit_time=T/' |
                sha256sum) ;;
        *) h=$(sha256sum <"$f") ;;
        esac
        echo "${h%% *}  $f"
    done)
}

kind=convert
case "${1:-}" in
verify | inspect | ls | --help | -h | --version | help) kind=other ;;
esac
for a in "$@"; do
    case "$a" in -n | --dry-run) kind=other ;; esac
done

if [ "$kind" = other ]; then
    run "$old" old "$@"
    run "$new" new "$@"
    same old new "${1:-}"
    cat "$rec/new.out"
    cat "$rec/new.err" >&2
    exit "$(cat "$rec/new.rc")"
fi

run "$old" dry-old --dry-run "$@"
run "$new" dry-new --dry-run "$@"
same dry-old dry-new dry-run

base="" name=""
for a in "$@"; do
    case "$a" in
    base_output_directory=*) base=${a#base_output_directory=} ;;
    run_name=*) name=${a#run_name=} ;;
    esac
done
dest=""
if [ -n "$base" ] && [ -n "$name" ]; then
    dest="$base/$name"
fi
if [ -n "$dest" ] && [ ! -e "$dest" ]; then
    run "$old" old "$@"
    if [ -d "$dest" ]; then
        tree_hash "$dest" >"$rec/old.sha256"
        rm -rf -- "$dest"
    fi
    run "$new" new "$@"
    if [ -d "$dest" ]; then
        tree_hash "$dest" >"$rec/new.sha256"
    fi
    same old new convert
    if ! cmp -s "$rec/old.sha256" "$rec/new.sha256" 2>/dev/null &&
        [ -e "$rec/old.sha256" -o -e "$rec/new.sha256" ]; then
        echo "$id convert: output files differ: $(cat "$rec/args")" >>"$log/DIFFS"
    fi
    [ -e "$rec/new.sha256" ] && echo compared >"$rec/outputs"
else
    echo "not compared (destination exists or not named)" >"$rec/outputs"
    run "$new" new "$@"
fi
cat "$rec/new.out"
cat "$rec/new.err" >&2
exit "$(cat "$rec/new.rc")"
