#!/usr/bin/env bash
# Benchmark: unroll (a) against the Python reference pipeline (b), the I/O+codec floor (c),
# the codec floor (d: libzstd alone) and the read floor (e), on a generated MaxText-shaped
# checkpoint of N GiB of fp32 parameters, then on one of 2N GiB. The machine's floor is
# max((e), (d) over the threads).
# See bench/README.md.
#
#   bench/run.sh --config <base.yml> --workdir <dir> [--params-gib N] [--threads T]
#                [--sizes "N1 N2 ..."] [--skip-reference] [--no-verify] [--keep-outputs]
#                [--cold] [--many-layers L] [-- extra unroll key=value ...]
#
# --sizes none: only the many-layers case.
# --many-layers L (default 128, 0: skip): also time unroll on T threads and on 1, and the
# floors, on a checkpoint of L layers of small arrays (9 per layer), to show that the
# threads stay busy when the arrays are many and small.
#
# Environment: PYTHON (default .venv/bin/python, created by scripts/setup.sh --tests when
# missing), UNROLL_BIN (skip the build and use this binary), UNROLL_BUILD_DIR (default build).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bench=$root/bench

params_gib=2
threads=$(nproc)
config=""
workdir=""
sizes=""
skip_ref=0
verify=1
keep=0
cold=0
many_layers=128
extra=()
while [ $# -gt 0 ]; do
    case "$1" in
        --params-gib) params_gib=$2; shift 2 ;;
        --threads) threads=$2; shift 2 ;;
        --config) config=$2; shift 2 ;;
        --workdir) workdir=$2; shift 2 ;;
        --sizes) sizes=$2; shift 2 ;;
        --skip-reference) skip_ref=1; shift ;;
        --no-verify) verify=0; shift ;;
        --keep-outputs) keep=1; shift ;;
        --cold) cold=1; shift ;;
        --) shift; extra=("$@"); break ;;
        --many-layers) many_layers=$2; shift 2 ;;
        -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
        *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
if [ -z "$config" ] || [ -z "$workdir" ]; then
    echo "run.sh: --config and --workdir are required (--help)" >&2
    exit 2
fi
[ -f "$config" ] || { echo "run.sh: config $config not found" >&2; exit 2; }
config=$(cd "$(dirname "$config")" && pwd)/$(basename "$config")
[ "$sizes" != none ] || sizes=" "
[ -n "$sizes" ] || sizes="$params_gib $(awk -v n="$params_gib" 'BEGIN { print n * 2 }')"
mkdir -p "$workdir"
workdir=$(cd "$workdir" && pwd)
log() { echo "bench: $*" >&2; }

# --- tools --------------------------------------------------------------------------------
if [ ! -x /usr/bin/time ]; then
    log "installing GNU time"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq time
fi
PYTHON=${PYTHON:-$root/.venv/bin/python}
if [ ! -x "$PYTHON" ]; then
    log "no $PYTHON: running scripts/setup.sh --tests"
    bash "$root/scripts/setup.sh" --tests
fi
if [ -z "${UNROLL_BIN:-}" ]; then
    log "building unroll (scripts/build.sh)"
    bash "$root/scripts/build.sh"
    UNROLL_BIN=$root/${UNROLL_BUILD_DIR:-build}/src/cli/unroll
fi
[ -x "$UNROLL_BIN" ] || { echo "run.sh: no unroll binary at $UNROLL_BIN" >&2; exit 1; }
mkdir -p "$workdir/bin"
log "building floor"
cc -O3 -std=c11 -o "$workdir/bin/floor" "$bench/floor.c" -lzstd -lpthread
FLOOR=$workdir/bin/floor

# Run a command under /usr/bin/time -v; never abort the benchmark on its failure (the status
# is recorded in <name>.rc and reported).
measure() {
    local dir=$1 name=$2; shift 2
    local rc=0
    /usr/bin/time -v -o "$dir/$name.time" "$@" > "$dir/$name.stdout" 2> "$dir/$name.stderr" \
        || rc=$?
    echo "$rc" > "$dir/$name.rc"
    if [ "$rc" != 0 ]; then
        log "$name exited with status $rc (see $dir/$name.stderr):"
        tail -n 5 "$dir/$name.stderr" >&2 || true
    fi
    return 0
}

# Same page-cache state before every measurement: either read the whole input once (warm,
# default) or drop the caches (--cold; needs root).
prepare_cache() {
    local items=$1
    sync
    if [ "$cold" = 1 ]; then
        echo 3 > /proc/sys/vm/drop_caches || { echo "run.sh: cannot drop caches" >&2; exit 1; }
    else
        find "$items" -type f -exec cat {} + > /dev/null
    fi
}

first=1
for size in $sizes; do
    ckpt=$workdir/ckpt-$size
    log "=== ${size} GiB of fp32 parameters: checkpoint $ckpt"
    "$PYTHON" "$bench/make_checkpoint.py" make --params-gib "$size" --out "$ckpt" >&2
    items=$("$PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]))["items"])' \
        "$ckpt/bench_checkpoint.json")
    layers=$("$PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]))["layers"])' \
        "$ckpt/bench_checkpoint.json")
    if [ ! -f "$ckpt/chunks.tsv" ]; then
        "$PYTHON" "$bench/make_checkpoint.py" chunks --items "$items" --out "$ckpt/chunks.tsv.tmp"
        mv "$ckpt/chunks.tsv.tmp" "$ckpt/chunks.tsv"
    fi
    run=$workdir/runs/$size
    rm -rf "$run"
    mkdir -p "$run/out"
    echo "$threads" > "$run/threads"

    log "(a) unroll --threads $threads"
    prepare_cache "$items"
    measure "$run" unroll "$UNROLL_BIN" "$config" \
        load_full_state_path="$items" base_output_directory="$run/out" run_name=unroll \
        force_unroll=true scan_layers=true pure_nnx=false base_num_decoder_layers="$layers" \
        "${extra[@]}" --threads "$threads" -q

    if [ "$skip_ref" = 0 ]; then
        log "(b) reference_unroll.py"
        prepare_cache "$items"
        measure "$run" reference "$PYTHON" "$bench/reference_unroll.py" run \
            --checkpoint "$ckpt" --base-output-directory "$run/out" --run-name reference \
            --times "$run/reference.phases.json"
    fi

    log "(c) floor -t $threads"
    prepare_cache "$items"
    measure "$run" floor "$FLOOR" -t "$threads" "$ckpt/chunks.tsv" "$run/out/floor.out"

    log "(d) codec floor: floor -c -t $threads (on (a)'s output)"
    "$PYTHON" "$bench/make_checkpoint.py" chunks \
        --items "$run/out/unroll/checkpoints/0/items" --out "$run/out.chunks.tsv"
    measure "$run" codec "$FLOOR" -c "$run/out.chunks.tsv" -t "$threads" "$ckpt/chunks.tsv"

    log "(e) read floor: floor -r -t $threads"
    prepare_cache "$items"
    measure "$run" read "$FLOOR" -r -t "$threads" "$ckpt/chunks.tsv" "$run/out/read.out"

    if [ "$first" = 1 ] && [ "$verify" = 1 ] && [ "$skip_ref" = 0 ]; then
        log "verifying (a) == (b), bit for bit"
        a=$run/out/unroll/checkpoints/0/items
        b=$run/out/reference/checkpoints/0/items
        rc=0
        "$PYTHON" "$bench/reference_unroll.py" compare "$a" "$b" > "$run/verify.txt" 2>&1 \
            || rc=$?
        echo "$rc" > "$run/verify.rc"
        tail -n 3 "$run/verify.txt" >&2
    fi
    du -sb "$items" | cut -f1 > "$run/input.bytes"
    for t in unroll reference; do
        if [ -d "$run/out/$t" ]; then
            du -sb "$run/out/$t" | cut -f1 > "$run/$t.out.bytes"
        fi
    done
    if [ "$keep" = 0 ]; then
        rm -rf "$run/out"
    fi
    first=0
done

# --- many layers of small arrays ------------------------------------------------------------
if [ "$many_layers" -gt 0 ]; then
    ckpt=$workdir/ckpt-layers$many_layers
    log "=== $many_layers layers of small arrays: checkpoint $ckpt"
    "$PYTHON" "$bench/make_checkpoint.py" make --layers "$many_layers" --out "$ckpt" >&2
    items=$("$PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]))["items"])' \
        "$ckpt/bench_checkpoint.json")
    if [ ! -f "$ckpt/chunks.tsv" ]; then
        "$PYTHON" "$bench/make_checkpoint.py" chunks --items "$items" --out "$ckpt/chunks.tsv.tmp"
        mv "$ckpt/chunks.tsv.tmp" "$ckpt/chunks.tsv"
    fi
    run=$workdir/runs/layers$many_layers
    rm -rf "$run"
    mkdir -p "$run/out"
    for t in "$threads" 1; do
        log "(a) unroll --threads $t"
        prepare_cache "$items"
        measure "$run" "unroll-t$t" "$UNROLL_BIN" "$config" \
            load_full_state_path="$items" base_output_directory="$run/out" run_name="unroll-t$t" \
            force_unroll=true scan_layers=true pure_nnx=false \
            base_num_decoder_layers="$many_layers" "${extra[@]}" --threads "$t" -q
    done
    log "(c) floor -t $threads"
    prepare_cache "$items"
    measure "$run" floor "$FLOOR" -t "$threads" "$ckpt/chunks.tsv" "$run/out/floor.out"
    log "(d) codec floor: floor -c -t $threads (on (a)'s output)"
    "$PYTHON" "$bench/make_checkpoint.py" chunks \
        --items "$run/out/unroll-t$threads/checkpoints/0/items" --out "$run/out.chunks.tsv"
    measure "$run" codec "$FLOOR" -c "$run/out.chunks.tsv" -t "$threads" "$ckpt/chunks.tsv"
    [ "$keep" = 1 ] || rm -rf "$run/out"
    "$PYTHON" "$bench/report.py" many-layers --run "$run" --threads "$threads" \
        --layers "$many_layers" --json "$workdir/many_layers.json"
fi

if [ -n "${sizes// /}" ]; then
    "$PYTHON" "$bench/report.py" --workdir "$workdir" --sizes $sizes --json "$workdir/results.json"
fi
