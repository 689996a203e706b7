"""Sizing for users (bench/README.md, "Sizing a conversion"): what converting a MaxText
llama2-70b and llama3.1-405b full-state checkpoint takes on 1, 8 and 64 processes, input and
output in a bucket, from the costs measured on the development machine.

    .venv/bin/python bench/sizing.py [--big /tmp/bigbench/run1/big.json] [--cores 16]
        [--bucket-gbps 1.0] [--markdown]

The model, per process p of P (each converts 1/P of the parameter chunks, docs/multi-process.md):
  input bytes   = fp32 parameter bytes x stored/decoded ratio / P (unroll reads the parameter
                  chunks only; mu and nu are never fetched)
  output bytes  = bf16 output bytes / P (output/param ratio measured)
  CPU seconds   = (cpu_per_gib_local + http_cpu_per_gib) x parameter GiB / P
                  + per_leaf_s x output leaves (every process declares every leaf)
                  + per_process_s (opening the input, declaring the leaves: the calibrating
                  2-process run's extra CPU over the 1-process run, per process)
  wall seconds  = max(CPU / cores, input / bucket bandwidth, output / bucket bandwidth)
                  + the finisher's merge (per_share_merge_s x P)
  peak RSS      = the measured bucket-to-bucket peak (bounded by --memory-limit, not the model)
  local disk    = 4 x the 2 GiB data-file target (streamed uploads keep at most a few data
                  files; checked before the run), whatever the model
Measured constants (defaults; --big replaces the first two with a bench/big.sh run's):
  cpu_per_gib_local  2.77 CPU s per GiB of fp32 parameters, cold local run at 10 GiB
  out_ratio          0.39 bf16 output bytes per fp32 parameter byte (zstd level 3, 10 GiB run)
  http_cpu_per_gib   1.72 CPU s per GiB, s3->s3 minus local->local (bench/s3_bench.py)
  per_leaf_s         0.00012 s per output leaf (100,000 leaves, bench/README.md)
  rss_mib            515 MiB, s3->s3 peak (bench/s3_bench.py, 16 workers)
  per_process_s      0.75 s (bench/big.sh `multi`: 2 processes x 1 thread used 25.44 CPU s
                     where 1 process x 2 threads used 23.93, on the 10 GiB checkpoint)
Assumed (flags): cores per process (16), bucket bandwidth per process each way (1 GB/s), and
  per_share_merge_s 0.05 s per share for the finisher's merge from a bucket (one round trip per
  share's manifest and B+tree root; 1,000 local shares merge in 0.54 s, docs/multi-process.md).
"""
from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import make_checkpoint  # noqa: E402  (leaf_table, num_params: no jax at import)

GiB = 1024**3
# MaxText 0.2.5 configs/models/llama2-70b.yml and llama3.1-405b.yml
MODELS = {
    "llama2-70b": dict(emb=8192, heads=64, kv_heads=8, head_dim=128, mlp=28672, vocab=32000,
                       layers=80),
    "llama3.1-405b": dict(emb=16384, heads=128, kv_heads=8, head_dim=128, mlp=53248,
                          vocab=128256, layers=126),
}
STORED_RATIO = 0.923  # stored / decoded bytes of fp32 parameters (random normal, zstd 3)


def output_leaves(d: dict) -> int:
    """Unscanned leaves: the 3 unstacked ones, and each stacked leaf once per layer."""
    table = make_checkpoint.leaf_table(d)
    stacked = sum(1 for path, _, _ in table if "layers" in path)
    return (len(table) - stacked) + stacked * d["layers"]


def size(model: str, procs: int, c: dict) -> dict:
    d = MODELS[model]
    params = make_checkpoint.num_params(d)
    gib = 4 * params / GiB
    leaves = output_leaves(d)
    cpu = (c["cpu_per_gib_local"] + c["http_cpu_per_gib"]) * gib / procs \
        + c["per_leaf_s"] * leaves + c["per_process_s"]
    bw = c["bucket_gbps"] * 1e9
    inp = 4 * params * STORED_RATIO / procs
    out = 4 * params * c["out_ratio"] / procs
    wall = max(cpu / c["cores"], inp / bw, out / bw) + c["per_share_merge_s"] * procs
    return {"model": model, "processes": procs, "params": params, "params_gib": gib,
            "full_state_gib": 3 * gib, "output_leaves": leaves,
            "input_gib_per_process": inp / GiB, "output_gib_per_process": out / GiB,
            "cpu_s_per_process": cpu, "wall_s": wall,
            "bound": "CPU" if cpu / c["cores"] >= max(inp, out) / bw else "bucket",
            "rss_mib_per_process": c["rss_mib"], "local_disk_gib_per_process": 4 * 2}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--big", help="big.json of a bench/big.sh run (its CPU per GiB, output ratio)")
    ap.add_argument("--cores", type=int, default=16)
    ap.add_argument("--bucket-gbps", type=float, default=1.0)
    ap.add_argument("--json")
    a = ap.parse_args()
    c = dict(cpu_per_gib_local=2.77, out_ratio=0.39, http_cpu_per_gib=1.72, per_leaf_s=0.00012,
             rss_mib=515, per_process_s=0.75, per_share_merge_s=0.05, cores=a.cores,
             bucket_gbps=a.bucket_gbps)
    if a.big:
        big = json.loads(pathlib.Path(a.big).read_text())
        u, info = big["tools"]["unroll"], big["checkpoint"]
        c["cpu_per_gib_local"] = u["cpu_s"] / (info["params_bytes"] / GiB)
        c["out_ratio"] = u["out_bytes"] / info["params_bytes"]
    rows = [size(m, p, c) for m in MODELS for p in (1, 8, 64)]
    print(f"constants: {json.dumps(c)}")
    print("| model | params | fp32 params / full state | processes | input per process | "
          "output per process | CPU s per process | wall (bound) | peak RSS per process | "
          "local disk per process |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        w = r["wall_s"]
        wall = f"{w / 3600:.1f} h" if w >= 3600 else f"{w / 60:.1f} min" if w >= 60 else f"{w:.0f} s"
        print(f"| {r['model']} | {r['params'] / 1e9:.1f}B | {r['params_gib']:.0f} / "
              f"{r['full_state_gib']:.0f} GiB | {r['processes']} | "
              f"{r['input_gib_per_process']:.1f} GiB | {r['output_gib_per_process']:.1f} GiB | "
              f"{r['cpu_s_per_process']:.0f} | {wall} ({r['bound']}) | "
              f"{r['rss_mib_per_process']} MiB | {r['local_disk_gib_per_process']} GiB |")
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps({"constants": c, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
