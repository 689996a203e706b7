"""The object-store benchmark: unroll against a local SeaweedFS S3 server (bench/README.md,
"Object stores").

    .venv/bin/python bench/s3_bench.py --ckpt <dir from make_checkpoint.py make> \
        --workdir <dir> [--threads T] [--unroll build/src/cli/unroll] [--config yml] \
        [--no-reference]

Starts SeaweedFS on 127.0.0.1 (tests/interop/s3_fixtures.py: signatures checked), uploads the
checkpoint once with TensorStore's s3 driver, then times under /usr/bin/time -v:
  local->local   unroll on the local copy (the file benchmark's (a)), --threads T;
  s3->local      unroll reading s3://, writing a local directory (unroll's default workers
                 for a remote input, 16, or --remote-threads);
  s3->s3         unroll reading and writing s3://;
  floor          TensorStore's OCDBT-on-s3 kvstore reading every parameter value (raw bytes,
                 no decoding) with the same number of requests in flight as unroll (32): the
                 network floor for the bytes unroll must fetch (s3->local's base);
  floor r+w      the same GETs, then PUTs of as many bytes as s3->local's output (what s3->s3
                 uploads), random, in objects of 64 MiB (unroll's part size), 16 at once
                 (unroll's upload threads): the floor for s3->s3 (FLOOR_RW);
  reference      bench/reference_unroll.py run --input s3://...: MaxText's pipeline (Orbax
                 restore of the full state from the bucket: TensorStore's s3 driver for the
                 arrays, etils.epath + s3fs for the metadata; jnp.take per layer, bf16, Orbax
                 save to a local directory). Its output is then compared with unroll's
                 s3->local output bit for bit (reference_unroll.py compare, not timed).
Prints a table with each row's ratio to both floors and writes <workdir>/s3_results.json; exit
status 1 if a run failed or the two outputs differ."""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "interop"))
import s3_fixtures  # noqa: E402

BUCKET = "unroll-bench"

FLOOR = r'''
import sys, time, concurrent.futures as cf, tensorstore as ts
endpoint, bucket, prefix, inflight = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
kv = ts.KvStore.open({"driver": "ocdbt", "base": {"driver": "s3", "bucket": bucket,
    "path": prefix + "/", "endpoint": endpoint, "aws_region": "us-east-1"}},
    context=ts.Context({"data_copy_concurrency": {"limit": inflight},
                        "s3_request_concurrency": {"limit": inflight}})).result()
keys = [k for k in kv.list().result() if k.startswith(b"params.") and b"/c/" in k]
total = 0
pending = []
for k in keys:
    pending.append(kv.read(k))
for f in pending:
    total += len(f.result().value)
print(f"{len(keys)} values, {total} bytes")
'''

# The read+write floor (s3 and gcs alike): FLOOR's ranged GETs of every parameter chunk, then
# PUTs of `out_bytes` random (incompressible, as zstd's output is) bytes to the same server,
# cut into objects of at most `piece` bytes, `put_inflight` at once: what any converter that
# reads these chunks and stores an output of that size must move through this server. The
# reads and the writes each go through one TensorStore context whose request-concurrency limit
# is the number in flight; the writes start when the reads are done (unroll stages a data file
# before it uploads it). Prints one JSON line with the two phases' seconds (Python's start and
# the OCDBT listing excluded from them; the row's wall time includes them, as the read floor's).
FLOOR_RW = r'''
import json, os, sys, time, tensorstore as ts
base, inflight, out_bytes, piece, put_inflight, out_path = (json.loads(sys.argv[1]),
    int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6])
limits = {"data_copy_concurrency": {"limit": inflight}, "s3_request_concurrency":
          {"limit": inflight}, "gcs_request_concurrency": {"limit": inflight}}
kv = ts.KvStore.open({"driver": "ocdbt", "base": base}, context=ts.Context(limits)).result()
keys = [k for k in kv.list().result() if k.startswith(b"params.") and b"/c/" in k]
t0 = time.monotonic()
pending = [kv.read(k) for k in keys]
total = sum(len(f.result().value) for f in pending)
t1 = time.monotonic()
for k in limits:
    limits[k]["limit"] = put_inflight
dst = ts.KvStore.open(dict(base, path=out_path), context=ts.Context(limits)).result()
blob = os.urandom(min(piece, out_bytes))
pending, off = [], 0
while off < out_bytes:
    n = min(piece, out_bytes - off)
    pending.append(dst.write(f"piece-{off // piece:05d}", blob if n == len(blob) else blob[:n]))
    off += n
for f in pending:
    f.result()
t2 = time.monotonic()
print(json.dumps({"values": len(keys), "bytes_read": total, "read_s": round(t1 - t0, 3),
                  "objects_put": len(pending), "bytes_put": out_bytes,
                  "put_s": round(t2 - t1, 3)}))
'''

PUT_PIECE = 64 << 20  # the floor's objects: unroll's S3 part size (UR_S3_PART_DEFAULT)
PUT_INFLIGHT = 16  # unroll's upload threads for a remote output (job_run.c remote_finish)


def tree_bytes(root: pathlib.Path) -> int:
    """The bytes of every file under root: what an upload of that tree PUTs."""
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file())


def parse_with_common(ap):
    """The options every bucket bench takes (the binary, the config), then parse."""
    ap.add_argument("--unroll", default=str(ROOT / "build" / "src" / "cli" / "unroll"))
    ap.add_argument("--config", default=str(ROOT / "tests" / "data" / "example" / "unroll.yml"))
    return ap.parse_args()


def checkpoint_and_workdir(a):
    """The bench checkpoint (--ckpt, made by make_checkpoint.py), its description, and --workdir
    emptied."""
    ckpt = pathlib.Path(a.ckpt).resolve()
    meta = json.loads((ckpt / "bench_checkpoint.json").read_text())
    work = pathlib.Path(a.workdir).resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    return ckpt, meta, work


def timed(name, args, env, log_dir):
    out = log_dir / f"{name}.time"
    t0 = time.time()
    p = subprocess.run(["/usr/bin/time", "-v", "-o", str(out), *args], capture_output=True,
                       text=True, env=env)
    wall = time.time() - t0
    text = out.read_text() if out.exists() else ""

    def field(pat):
        m = re.search(pat, text)
        return float(m.group(1)) if m else float("nan")

    cpu = field(r"User time \(seconds\): ([0-9.]+)") + field(r"System time \(seconds\): ([0-9.]+)")
    rss = field(r"Maximum resident set size \(kbytes\): ([0-9]+)") / 1024
    (log_dir / f"{name}.stderr").write_text(p.stderr)
    (log_dir / f"{name}.stdout").write_text(p.stdout)
    return {"tool": name, "rc": p.returncode, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
            "peak_rss_mib": round(rss, 1)}


def floor_phases(work: pathlib.Path, row: dict) -> dict | None:
    """FLOOR_RW's JSON line (its read and PUT seconds), from the row's saved stdout."""
    lines = (work / f"{row['tool']}.stdout").read_text().strip().splitlines()
    try:
        return json.loads(lines[-1]) if row["rc"] == 0 and lines else None
    except json.JSONDecodeError:
        return None


def print_table(rows, width, targets):
    """Each row's wall time over the read floor and over the read+write floor (x_floor,
    x_rw_floor in the results), then the issue-27 ratios: `targets` maps a row to the floor it
    is held to (reads only for a local output, reads and PUTs for a bucket output)."""
    floors = {"read": next(r["wall_s"] for r in rows if r["tool"].startswith("floor (")),
              "r+w": next((r["wall_s"] for r in rows if r["tool"].startswith("floor r+w")), 0)}
    print(f"{'tool':{width}} {'wall s':>7} {'x read':>7} {'x r+w':>7} {'CPU s':>7} "
          f"{'peak RSS MiB':>13} status")
    for r in rows:
        r["x_floor"] = round(r["wall_s"] / floors["read"], 2) if floors["read"] else None
        r["x_rw_floor"] = round(r["wall_s"] / floors["r+w"], 2) if floors["r+w"] else None
        print(f"{r['tool']:{width}} {r['wall_s']:7.2f} {r['x_floor'] or 0:7.2f} "
              f"{r['x_rw_floor'] or 0:7.2f} {r['cpu_s']:7.2f} {r['peak_rss_mib']:13.1f} "
              f"{r['rc']}")
    ph = next((r.get("phases") for r in rows if r["tool"].startswith("floor r+w")), None)
    if ph:
        print(f"floor r+w inside: GETs {ph['read_s']:.2f} s ({ph['bytes_read']} bytes), PUTs "
              f"{ph['put_s']:.2f} s ({ph['bytes_put']} bytes in {ph['objects_put']} objects); "
              "the rest of its wall time is Python's start and the OCDBT listing")
    limit = {"read": 1.1, "r+w": 1.3}
    for tool, floor in targets.items():
        r = next((r for r in rows if r["tool"] == tool), None)
        if r is not None and floors[floor]:
            x = r["wall_s"] / floors[floor]
            print(f"{tool} / {floor} floor: {x:.2f}x (target <= {limit[floor]}x: "
                  f"{'met' if x <= limit[floor] else 'missed'})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", required=True, help="directory written by make_checkpoint.py make")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--remote-threads", type=int, default=0,
                    help="unroll --threads for the s3 runs (default: unroll's own, 16)")
    ap.add_argument("--target-data-file-bytes", type=int, default=0,
                    help="checkpoint_storage_target_data_file_size_bytes of the output (several "
                         "data files: the s3 output streams them during the conversion)")
    ap.add_argument("--no-reference", action="store_true", help="skip the Python reference")
    a = parse_with_common(ap)
    ckpt, meta, work = checkpoint_and_workdir(a)
    (work / "seaweedfs").mkdir()  # S3Server writes its identities file there first
    server = s3_fixtures.S3Server(work / "seaweedfs")
    try:
        server.make_bucket(BUCKET)
        env = server.env()
        os.environ.update({k: v for k, v in env.items() if k.startswith("AWS_")})
        t0 = time.time()
        n = server.upload_tree(ckpt / "checkpoints", BUCKET, "in/checkpoints")
        print(f"uploaded {n} objects in {time.time() - t0:.1f} s", file=sys.stderr)
        items_local = ckpt / "checkpoints" / str(meta["step"]) / "items"
        items_s3 = f"s3://{BUCKET}/in/checkpoints/{meta['step']}/items"
        common = ["force_unroll=true", "scan_layers=true", "pure_nnx=false",
                  f"base_num_decoder_layers={meta['layers']}", "run_name=bench", "-q"]
        if a.target_data_file_bytes:
            common.append("checkpoint_storage_target_data_file_size_bytes="
                          f"{a.target_data_file_bytes}")
        local_threads = ["--threads", str(a.threads)]
        remote_threads = ["--threads", str(a.remote_threads)] if a.remote_threads else []
        rows = []
        # warm the page cache (local input; SeaweedFS's volume files) the same way for all
        subprocess.run(["sh", "-c", f"cat $(find {items_local} {work}/seaweedfs -type f) "
                                    "> /dev/null"])
        rows.append(timed("local->local", [a.unroll, a.config,
                                           f"load_full_state_path={items_local}",
                                           f"base_output_directory={work}/out-local", *common,
                                           *local_threads],
                          env, work))
        rows.append(timed("s3->local", [a.unroll, a.config, f"load_full_state_path={items_s3}",
                                        f"base_output_directory={work}/out-s3local", *common,
                                        *remote_threads],
                          env, work))
        rows.append(timed("s3->s3", [a.unroll, a.config, f"load_full_state_path={items_s3}",
                                     f"base_output_directory=s3://{BUCKET}/out", *common,
                                     *remote_threads],
                          env, work))
        rows.append(timed("floor (TensorStore ranged GETs)",
                          [sys.executable, "-c", FLOOR, server.endpoint, BUCKET,
                           f"in/checkpoints/{meta['step']}/items", "32"], env, work))
        base = {"driver": "s3", "bucket": BUCKET,
                "path": f"in/checkpoints/{meta['step']}/items/", "endpoint": server.endpoint,
                "aws_region": s3_fixtures.REGION}
        rows.append(timed("floor r+w (GETs, then PUTs of the output's bytes)",
                          [sys.executable, "-c", FLOOR_RW, json.dumps(base), "32",
                           str(tree_bytes(work / "out-s3local")), str(PUT_PIECE),
                           str(PUT_INFLIGHT), "floor-put/"], env, work))
        rows[-1]["phases"] = floor_phases(work, rows[-1])
        if not a.no_reference:
            rows.append(timed("reference s3->local (Orbax, jnp.take)",
                              [sys.executable, str(ROOT / "bench" / "reference_unroll.py"),
                               "run", "--checkpoint", str(ckpt), "--input",
                               f"s3://{BUCKET}/in/checkpoints",
                               "--base-output-directory", str(work / "out-ref"),
                               "--run-name", "bench", "--times", str(work / "ref_times.json")],
                              env, work))
    finally:
        server.stop()
    same = None
    ref = [r for r in rows if r["tool"].startswith("reference")]
    if ref and ref[0]["rc"] == 0:
        # unroll's s3->local output against the reference's, leaf by leaf, bit for bit
        p = subprocess.run([sys.executable, str(ROOT / "bench" / "reference_unroll.py"),
                            "compare", str(work / "out-s3local" / "bench" / "checkpoints" / "0"
                                           / "items"),
                            str(work / "out-ref" / "bench" / "checkpoints" / "0" / "items")],
                           capture_output=True, text=True)
        (work / "compare.out").write_text(p.stdout + p.stderr)
        same = p.returncode == 0
        last = (p.stdout + p.stderr).strip().splitlines()[-1:] or ["(no output)"]
        print(f"unroll s3->local vs reference: {last[0]} (all of it: {work}/compare.out)")
    print_table(rows, 50, {"s3->local": "read", "s3->s3": "r+w"})
    s3_local = next(r for r in rows if r["tool"] == "s3->local")
    if ref and s3_local["wall_s"] > 0:
        print(f"reference / unroll s3->local: {ref[0]['wall_s'] / s3_local['wall_s']:.1f}x")
    (work / "s3_results.json").write_text(json.dumps({"checkpoint": meta, "threads": a.threads,
                                                      "rows": rows, "reference_identical": same},
                                                     indent=1))
    return 0 if all(r["rc"] == 0 for r in rows) and same is not False else 1


if __name__ == "__main__":
    sys.exit(main())
