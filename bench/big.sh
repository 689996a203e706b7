#!/usr/bin/env bash
# The cold-cache run at full size (bench/README.md, "A 30 GiB full state, cold"): on a
# checkpoint written by `make_checkpoint.py make` (e.g. --params-gib 10), each tool from a cold
# page cache (sync; echo 3 > /proc/sys/vm/drop_caches; needs root), one after the other, under
# /usr/bin/time -v, with the load average (uptime) before and after each:
#   read     floor -r: pread of every stored parameter chunk, nothing else (the read floor)
#   unroll   unroll with UNROLL_PHASES=1 (where its time goes), then `unroll verify` (warm),
#            then the codec floor on its output (floor -c: libzstd alone decoding every input
#            chunk and encoding every output chunk, preloaded; not a cold run)
#   floor    floor: read, decode, cast, encode, write (the I/O + codec floor)
#   reference  bench/reference_unroll.py (the Python pipeline), under bench/memcap.sh
#   maxtext  MaxText's generate_param_only_checkpoint, under bench/memcap.sh
#   multi    unroll as 2 processes x T/2 threads (--process-count 2), started together; the
#            sizing table's calibration (bench/sizing.py)
#   hf       unroll to_huggingface (weight_dtype bfloat16: the same bytes as the conversion's
#            output before its compression), against the unroll run's time (not by default)
#
#   bench/big.sh --ckpt DIR --workdir DIR [--threads T] [--mem-cap BYTES] [--only "a b"]
#                [--no-verify]   (unroll verify on the output, not cold: about 20 s at 10 GiB)
#
# Outputs are deleted once measured (unroll's after verify). Raw files in <workdir>/<tool>.*;
# a summary in <workdir>/big.json. Environment: UNROLL_BIN, PYTHON (default .venv/bin/python),
# MAXTEXT_PYTHON (default .venv-maxtext/bin/python).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bench=$root/bench
ckpt="" workdir="" threads=$(nproc) verify=1 cap=$((16 << 30)) only="read unroll floor reference maxtext multi"
while [ $# -gt 0 ]; do
    case "$1" in
        --ckpt) ckpt=$2; shift 2 ;;
        --workdir) workdir=$2; shift 2 ;;
        --threads) threads=$2; shift 2 ;;
        --mem-cap) cap=$2; shift 2 ;;
        --only) only=$2; shift 2 ;;
        --no-verify) verify=0; shift ;;
        -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
        *) echo "big.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ -n "$ckpt" ] && [ -n "$workdir" ] || { echo "big.sh: --ckpt and --workdir (--help)" >&2; exit 2; }
PYTHON=${PYTHON:-$root/.venv/bin/python}
MAXTEXT_PYTHON=${MAXTEXT_PYTHON:-$root/.venv-maxtext/bin/python}
UNROLL_BIN=${UNROLL_BIN:-$root/build/src/cli/unroll}
mkdir -p "$workdir/out" "$workdir/bin"
workdir=$(cd "$workdir" && pwd)
ckpt=$(cd "$ckpt" && pwd)
cc -O3 -std=c11 -o "$workdir/bin/floor" "$bench/floor.c" -lzstd -lpthread
meta() { "$PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' \
    "$ckpt/bench_checkpoint.json" "$1"; }
items=$(meta items)
layers=$(meta layers)
dims=$("$PYTHON" -c 'import json,sys; d=json.load(open(sys.argv[1]))["dims"]; print(" ".join(
    f"{k}={d[v]}" for k, v in (("base_emb_dim","emb"), ("base_num_query_heads","heads"),
    ("base_num_kv_heads","kv_heads"), ("head_dim","head_dim"), ("base_mlp_dim","mlp"),
    ("vocab_size","vocab"), ("base_num_decoder_layers","layers")) if v in d))' \
    "$ckpt/bench_checkpoint.json")
if [ ! -f "$ckpt/chunks.tsv" ]; then
    "$PYTHON" "$bench/make_checkpoint.py" chunks --items "$items" --out "$ckpt/chunks.tsv.tmp"
    mv "$ckpt/chunks.tsv.tmp" "$ckpt/chunks.tsv"
fi
config=$root/tests/data/example/unroll.yml
# a model other than llama2 (make_checkpoint.py --shape): its config beside it, its keys
[ -f "$ckpt/unroll.yml" ] && config=$ckpt/unroll.yml
read -r -a model < <("$PYTHON" -c 'import json,sys; print(" ".join(json.load(open(sys.argv[1])).get(
    "model_args", [])))' "$ckpt/bench_checkpoint.json")
maxtext_yml=$("$MAXTEXT_PYTHON" -c 'import maxtext, os; print(os.path.join(
    os.path.dirname(maxtext.__file__), "configs", "base.yml"))')
log() { echo "big: $*" >&2; }

# cold NAME command...: drop the page cache, then time the command (its status in NAME.rc)
cold() {
    local name=$1 rc=0
    shift
    sync
    echo 3 > /proc/sys/vm/drop_caches
    uptime > "$workdir/$name.uptime"
    log "$name (cold)"
    /usr/bin/time -v -o "$workdir/$name.time" "$@" > "$workdir/$name.stdout" \
        2> "$workdir/$name.stderr" || rc=$?
    echo "$rc" > "$workdir/$name.rc"
    uptime >> "$workdir/$name.uptime"
    [ "$rc" = 0 ] || { log "$name: status $rc"; tail -n 3 "$workdir/$name.stderr" >&2 || true; }
}

for tool in $only; do
    case "$tool" in
    read)
        cold read "$workdir/bin/floor" -r -t "$threads" "$ckpt/chunks.tsv" "$workdir/out/read" ;;
    unroll)
        rm -rf "$workdir/out/unroll"
        UNROLL_PHASES=1 cold unroll "$UNROLL_BIN" "$config" load_full_state_path="$items" \
            base_output_directory="$workdir/out" run_name=unroll force_unroll=true \
            scan_layers=true pure_nnx=false base_num_decoder_layers="$layers" ${model[@]+"${model[@]}"} \
            --threads "$threads" -q
        du -sb "$workdir/out/unroll" | cut -f1 > "$workdir/unroll.out.bytes"
        # the codec floor: this very output's chunks encoded, the input's decoded
        log "codec floor (floor -c)"
        "$PYTHON" "$bench/make_checkpoint.py" chunks \
            --items "$workdir/out/unroll/checkpoints/0/items" --out "$workdir/out/chunks.tsv"
        /usr/bin/time -v -o "$workdir/codec.time" "$workdir/bin/floor" -c \
            "$workdir/out/chunks.tsv" -t "$threads" "$ckpt/chunks.tsv" \
            > "$workdir/codec.stdout" 2> "$workdir/codec.stderr" || echo $? > "$workdir/codec.rc"
        [ -f "$workdir/codec.rc" ] || echo 0 > "$workdir/codec.rc"
        rm -f "$workdir/out/chunks.tsv"
        if [ "$verify" = 0 ]; then
            rm -rf "$workdir/out/unroll"
            continue
        fi
        log "unroll verify"
        rc=0
        /usr/bin/time -v -o "$workdir/verify.time" "$UNROLL_BIN" verify "$items" \
            "$workdir/out/unroll/checkpoints/0/items" "$config" \
            base_num_decoder_layers="$layers" ${model[@]+"${model[@]}"} \
            > "$workdir/verify.stdout" 2>&1 || rc=$?
        echo "$rc" > "$workdir/verify.rc"
        tail -n 2 "$workdir/verify.stdout" >&2
        rm -rf "$workdir/out/unroll" ;;
    floor)
        cold floor "$workdir/bin/floor" -t "$threads" "$ckpt/chunks.tsv" "$workdir/out/floor"
        rm -f "$workdir/out/floor" ;;
    reference)
        cold reference "$bench/memcap.sh" "$cap" "$PYTHON" "$bench/reference_unroll.py" run \
            --checkpoint "$ckpt" --base-output-directory "$workdir/out" --run-name reference \
            --times "$workdir/reference.phases.json"
        rm -rf "$workdir/out/reference" ;;
    maxtext)
        # shellcheck disable=SC2086 # $dims: key=value words
        DECOUPLE_GCLOUD=TRUE JAX_PLATFORMS=cpu JAX_DEFAULT_PRNG_IMPL=unsafe_rbg cold maxtext \
            "$bench/memcap.sh" "$cap" "$MAXTEXT_PYTHON" -m \
            maxtext.utils.generate_param_only_checkpoint "$maxtext_yml" \
            load_full_state_path="$items" base_output_directory="$workdir/out" \
            run_name=maxtext force_unroll=true $dims per_device_batch_size=1 \
            max_target_length=16 max_prefill_predict_length=8 async_checkpointing=false \
            hardware=cpu attention=dot_product skip_jax_distributed_system=true
        rm -rf "$workdir/out/maxtext" ;;
    multi)
        rm -rf "$workdir/out/multi"
        sync
        echo 3 > /proc/sys/vm/drop_caches
        uptime > "$workdir/multi.uptime"
        log "multi: 2 processes (cold)"
        t0=$(date +%s.%N)
        for i in 0 1; do
            /usr/bin/time -v -o "$workdir/multi.$i.time" "$UNROLL_BIN" "$config" \
                load_full_state_path="$items" base_output_directory="$workdir/out" \
                run_name=multi force_unroll=true scan_layers=true pure_nnx=false \
                base_num_decoder_layers="$layers" --threads $(((threads + 1) / 2)) -q \
                --process-count 2 --process-index "$i" > "$workdir/multi.$i.stdout" \
                2> "$workdir/multi.$i.stderr" &
        done
        rc=0
        wait || rc=$?
        echo "$rc" > "$workdir/multi.rc"
        awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f\n", b - a }' \
            > "$workdir/multi.wall"
        uptime >> "$workdir/multi.uptime"
        du -sb "$workdir/out/multi" | cut -f1 > "$workdir/multi.out.bytes"
        rm -rf "$workdir/out/multi" ;;
    hf)
        rm -rf "$workdir/out/hf"
        UNROLL_PHASES=1 cold hf "$UNROLL_BIN" to_huggingface "$config" \
            load_full_state_path="$items" base_output_directory="$workdir/out/hf" \
            pure_nnx=false base_num_decoder_layers="$layers" weight_dtype=bfloat16 \
            ${model[@]+"${model[@]}"} --threads "$threads" -q
        du -sb "$workdir/out/hf" | cut -f1 > "$workdir/hf.out.bytes"
        rm -rf "$workdir/out/hf" ;;
    *) echo "big.sh: unknown tool $tool" >&2; exit 2 ;;
    esac
done
"$PYTHON" "$bench/report.py" big --workdir "$workdir" --ckpt "$ckpt" --cap "$cap"
