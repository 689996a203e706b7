#!/usr/bin/env bash
# Multi-process conversion benchmark (docs/multi-process.md, bench/README.md):
#   1 process x 2 threads, 2 processes x 1 thread, 4 processes x 1 thread (oversubscribed on
#   2 cores) on the N GiB bench checkpoint: wall time, total CPU, peak RSS and bytes read per
#   process; the cost of resuming (a rerun of a share that is already complete); and the
#   merge of a synthetic 1,000-process layout (bench/multiprocess_merge.py).
#
#   bench/multiprocess.sh --config <base.yml> --workdir <dir> [--params-gib N] [--merge-procs P]
#
# The checkpoint is generated with bench/make_checkpoint.py (cached in <workdir>/ckpt-<N>).
# Environment: PYTHON (default .venv/bin/python), UNROLL_BIN (default build/src/cli/unroll).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-$root/.venv/bin/python}
UNROLL=${UNROLL_BIN:-$root/build/src/cli/unroll}
params_gib=2
merge_procs=1000
config=""
workdir=""
while [ $# -gt 0 ]; do
    case "$1" in
        --params-gib) params_gib=$2; shift 2 ;;
        --merge-procs) merge_procs=$2; shift 2 ;;
        --config) config=$2; shift 2 ;;
        --workdir) workdir=$2; shift 2 ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        *) echo "multiprocess.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ -n "$config" ] && [ -n "$workdir" ] || { echo "multiprocess.sh: --config and --workdir are required" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "multiprocess.sh: /usr/bin/time missing (apt-get install time)" >&2; exit 2; }
mkdir -p "$workdir"
workdir=$(cd "$workdir" && pwd)
ckpt=$workdir/ckpt-$params_gib
if [ ! -f "$ckpt/bench_checkpoint.json" ]; then
    "$PYTHON" "$root/bench/make_checkpoint.py" make --params-gib "$params_gib" --out "$ckpt" >&2
fi
items=$("$PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]))["items"])' "$ckpt/bench_checkpoint.json")
layers=$("$PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]))["layers"])' "$ckpt/bench_checkpoint.json")
cat "$items"/d/* "$items"/ocdbt.process_*/d/* > /dev/null 2>&1 || true   # warm page cache

args() {  # $1: output directory
    echo "$config" "load_full_state_path=$items" "base_output_directory=$1" run_name=unroll \
        force_unroll=true scan_layers=true pure_nnx=false "base_num_decoder_layers=$layers"
}

# one configuration: $1 name, $2 processes, $3 threads per process
run_config() {
    local name=$1 procs=$2 threads=$3 out=$workdir/out-$1 start end
    rm -rf "$out"; mkdir -p "$out"
    start=$(date +%s.%N)
    if [ "$procs" = 1 ]; then
        /usr/bin/time -v -o "$out/time.0" "$UNROLL" $(args "$out") -j"$threads" 2> "$out/err.0"
    else
        for i in $(seq 0 $((procs - 1))); do
            /usr/bin/time -v -o "$out/time.$i" "$UNROLL" $(args "$out") -j"$threads" \
                --process-count "$procs" --process-index "$i" 2> "$out/err.$i" &
        done
        wait
    fi
    end=$(date +%s.%N)
    "$PYTHON" - "$name" "$procs" "$threads" "$start" "$end" "$out" <<'EOF'
import pathlib, re, sys
name, procs, threads, start, end, out = sys.argv[1:]
out = pathlib.Path(out)
cpu = 0.0
rows = []
for i in range(int(procs)):
    t = (out / f"time.{i}").read_text()
    u = float(re.search(r"User time \(seconds\): ([\d.]+)", t).group(1))
    s = float(re.search(r"System time \(seconds\): ([\d.]+)", t).group(1))
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", t).group(1)) / 1024
    err = (out / f"err.{i}").read_text()
    m = re.search(r"([\d.]+) MiB of ([\d.]+) MiB read", err)
    share = f"{float(m.group(1)) / 1024:.3f} GiB" if m else "all"
    cpu += u + s
    rows.append(f"p{i}: rss {rss:.0f} MiB, cpu {u + s:.2f} s, read {share}")
wall = float(end) - float(start)
print(f"| {name} | {wall:.2f} | {cpu:.2f} | " + "; ".join(rows) + " |")
EOF
}

echo "| configuration | wall s | total CPU s | per process |"
echo "|---|---|---|---|"
run_config "1x2" 1 2
run_config "2x1" 2 1
run_config "4x1" 4 1

# resume: shares 0-2 of 4 done, then share 0 rerun (already complete: skipped)
out=$workdir/out-resume
rm -rf "$out"; mkdir -p "$out"
for i in 0 1 2; do "$UNROLL" $(args "$out") -q -j1 --process-count 4 --process-index "$i"; done
start=$(date +%s.%N)
"$UNROLL" $(args "$out") -q -j1 --process-count 4 --process-index 0
end=$(date +%s.%N)
awk -v a="$start" -v b="$end" 'BEGIN { printf "resume: rerun of a complete share: %.3f s\n", b - a }'
rm -rf "$workdir"/out-*

# the merge on a synthetic many-process layout
"$PYTHON" "$root/bench/multiprocess_merge.py" --unroll "$UNROLL" --procs "$merge_procs" \
    --workdir "$workdir/merge-$merge_procs"
