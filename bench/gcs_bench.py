"""The GCS benchmark: unroll against a local fake-gcs-server, and the Python reference pipeline
reading the same bucket (bench/README.md, "Google Cloud Storage").

    .venv/bin/python bench/gcs_bench.py --ckpt <dir from make_checkpoint.py make> \
        --workdir <dir> [--threads T] [--remote-threads N] [--no-reference]

Starts fake-gcs-server on 127.0.0.1 (tests/interop/gcs_servers.py, in-memory backend), copies
the checkpoint into a bucket once with TensorStore's gcs driver, then times each of these
under /usr/bin/time -v, one after the other:
  local->local   unroll on the local copy (the file benchmark's (a)), --threads T;
  gs->local      unroll reading gs://, writing a local directory;
  gs->gs         unroll reading and writing gs://;
  floor          TensorStore's OCDBT-on-gcs kvstore reading every parameter value (raw bytes,
                 no decoding) with 32 requests in flight, as unroll allows (gs->local's base);
  floor r+w      the same GETs, then PUTs of as many bytes as gs->local's output in objects of
                 64 MiB, 16 at once (s3_bench.FLOOR_RW): gs->gs's base;
  upload         TensorStore's gcs driver writing the files of the gs->local output to the
                 bucket, all at once (one request per object, as TensorStore does): what the
                 emulator takes to store the bytes gs->gs uploads (not a ratio's base);
  reference      bench/reference_unroll.py run --input gs://...: MaxText's pipeline (Orbax
                 restore of the full state from the bucket, jnp.take per layer, bf16, Orbax
                 save to a local directory).
Prints a table with each row's ratio to both floors and writes <workdir>/gcs_results.json."""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "interop"))
sys.path.insert(0, str(ROOT / "bench"))
from gcs_servers import FakeGcs  # noqa: E402
from s3_bench import (FLOOR_RW, PUT_INFLIGHT, PUT_PIECE, checkpoint_and_workdir,  # noqa: E402
                      floor_phases, parse_with_common, print_table, timed, tree_bytes)

BUCKET = "unroll-bench"

FLOOR = r'''
import sys, tensorstore as ts
bucket, prefix, inflight = sys.argv[1], sys.argv[2], int(sys.argv[3])
kv = ts.KvStore.open({"driver": "ocdbt", "base": {"driver": "gcs", "bucket": bucket,
    "path": prefix + "/"}},
    context=ts.Context({"data_copy_concurrency": {"limit": inflight},
                        "gcs_request_concurrency": {"limit": inflight}})).result()
keys = [k for k in kv.list().result() if k.startswith(b"params.") and b"/c/" in k]
pending = [kv.read(k) for k in keys]
total = sum(len(f.result().value) for f in pending)
print(f"{len(keys)} values, {total} bytes")
'''


UPLOAD = r'''
import pathlib, sys, tensorstore as ts
local, bucket, prefix = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
dst = ts.KvStore.open({"driver": "gcs", "bucket": bucket, "path": prefix + "/"}).result()
files = [f for f in local.rglob("*") if f.is_file()]
pending = [dst.write(str(f.relative_to(local)), f.read_bytes()) for f in files]
for f in pending:
    f.result()
print(f"{len(files)} objects, {sum(f.stat().st_size for f in files)} bytes")
'''


def upload_tree(local: pathlib.Path, bucket: str, prefix: str) -> int:
    """Every file under `local` to gs://bucket/prefix/ with TensorStore's gcs driver."""
    import tensorstore as ts
    src = ts.KvStore.open({"driver": "file", "path": str(local).rstrip("/") + "/"}).result()
    dst = ts.KvStore.open({"driver": "gcs", "bucket": bucket,
                           "path": prefix.strip("/") + "/"}).result()
    keys = src.list().result()
    pending = [dst.write(k, src.read(k).result().value) for k in keys]
    for f in pending:
        f.result()
    return len(keys)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", required=True, help="directory written by make_checkpoint.py make")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--remote-threads", type=int, default=0,
                    help="unroll --threads for the gs runs (default: unroll's own, 16)")
    ap.add_argument("--no-reference", action="store_true", help="skip the Python reference")
    a = parse_with_common(ap)
    ckpt, meta, work = checkpoint_and_workdir(a)
    rows = []
    with FakeGcs() as server:
        server.create_bucket(BUCKET)
        env = dict(os.environ, STORAGE_EMULATOR_HOST=server.url,
                   TENSORSTORE_GCS_HTTP_URL=server.url, HOME=str(work))
        for k in ("GOOGLE_APPLICATION_CREDENTIALS", "GCE_METADATA_HOST", "CLOUDSDK_CONFIG"):
            env.pop(k, None)
        os.environ.update({k: env[k] for k in ("STORAGE_EMULATOR_HOST",
                                               "TENSORSTORE_GCS_HTTP_URL")})
        t0 = time.time()
        n = upload_tree(ckpt / "checkpoints", BUCKET, "in/checkpoints")
        print(f"uploaded {n} objects in {time.time() - t0:.1f} s", file=sys.stderr)
        items_local = ckpt / "checkpoints" / str(meta["step"]) / "items"
        items_gs = f"gs://{BUCKET}/in/checkpoints/{meta['step']}/items"
        common = ["force_unroll=true", "scan_layers=true", "pure_nnx=false",
                  f"base_num_decoder_layers={meta['layers']}", "run_name=bench", "-q"]
        local_threads = ["--threads", str(a.threads)]
        remote_threads = ["--threads", str(a.remote_threads)] if a.remote_threads else []
        subprocess.run(["sh", "-c", f"cat $(find {items_local} -type f) > /dev/null"])
        rows.append(timed("local->local", [a.unroll, a.config,
                                           f"load_full_state_path={items_local}",
                                           f"base_output_directory={work}/out-local", *common,
                                           *local_threads], env, work))
        rows.append(timed("gs->local", [a.unroll, a.config, f"load_full_state_path={items_gs}",
                                        f"base_output_directory={work}/out-gslocal", *common,
                                        *remote_threads], env, work))
        rows.append(timed("gs->gs", [a.unroll, a.config, f"load_full_state_path={items_gs}",
                                     f"base_output_directory=gs://{BUCKET}/out", *common,
                                     *remote_threads], env, work))
        rows.append(timed("upload (TensorStore writes gs->local's output)",
                          [sys.executable, "-c", UPLOAD, str(work / "out-gslocal"), BUCKET,
                           "upload"], env, work))
        rows.append(timed("floor (TensorStore ranged GETs)",
                          [sys.executable, "-c", FLOOR, BUCKET,
                           f"in/checkpoints/{meta['step']}/items", "32"], env, work))
        base = {"driver": "gcs", "bucket": BUCKET, "path": f"in/checkpoints/{meta['step']}/items/"}
        rows.append(timed("floor r+w (GETs, then PUTs of the output's bytes)",
                          [sys.executable, "-c", FLOOR_RW, json.dumps(base), "32",
                           str(tree_bytes(work / "out-gslocal")), str(PUT_PIECE),
                           str(PUT_INFLIGHT), "floor-put/"], env, work))
        rows[-1]["phases"] = floor_phases(work, rows[-1])
        if not a.no_reference:
            rows.append(timed("reference gs->local (Orbax, jnp.take)",
                              [sys.executable, str(ROOT / "bench" / "reference_unroll.py"),
                               "run", "--checkpoint", str(ckpt), "--input",
                               f"gs://{BUCKET}/in/checkpoints",
                               "--base-output-directory", str(work / "out-ref"),
                               "--run-name", "bench", "--times", str(work / "ref_times.json")],
                              env, work))
    print_table(rows, 50, {"gs->local": "read", "gs->gs": "r+w"})
    ref = [r for r in rows if r["tool"].startswith("reference")]
    gs_local = next(r for r in rows if r["tool"] == "gs->local")
    if ref and gs_local["wall_s"] > 0:
        print(f"reference / unroll gs->local: {ref[0]['wall_s'] / gs_local['wall_s']:.1f}x")
    (work / "gcs_results.json").write_text(json.dumps({"checkpoint": meta, "threads": a.threads,
                                                       "rows": rows}, indent=1))
    return 0 if all(r["rc"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
