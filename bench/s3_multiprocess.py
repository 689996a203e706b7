"""Multi-process conversion into an object store (docs/multi-process.md, "Into an object store"): 2 processes
x 1 thread against 1 process x 2 threads, both writing s3:// on a local SeaweedFS server.

    .venv/bin/python bench/s3_multiprocess.py --ckpt <dir from make_checkpoint.py make> \
        --workdir <dir> [--unroll build/src/cli/unroll] [--config yml]

The input is local (a multi-process run reads a local directory). Each configuration runs once,
each process under /usr/bin/time -v: wall time of the whole configuration (first start to last
exit), total CPU of its processes, and the largest peak RSS of one process. Prints a table and
writes <workdir>/s3_multiprocess.json."""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "interop"))
import s3_fixtures  # noqa: E402
from s3_bench import checkpoint_and_workdir, parse_with_common  # noqa: E402

BUCKET = "unroll-bench"


def field(text, pat):
    m = re.search(pat, text)
    return float(m.group(1)) if m else float("nan")


def configuration(name, argvs, env, work):
    """Run argvs at once, each under /usr/bin/time -v; the configuration's row."""
    t0 = time.time()
    procs = []
    for i, argv in enumerate(argvs):
        tfile = work / f"{name}.{i}.time"
        err = open(work / f"{name}.{i}.stderr", "w")
        procs.append((subprocess.Popen(["/usr/bin/time", "-v", "-o", str(tfile), *argv],
                                       stderr=err, env=env), tfile, err))
    rcs, cpu, rss = [], 0.0, 0.0
    for p, tfile, err in procs:
        rcs.append(p.wait())
        err.close()
        text = tfile.read_text() if tfile.exists() else ""
        cpu += field(text, r"User time \(seconds\): ([0-9.]+)")
        cpu += field(text, r"System time \(seconds\): ([0-9.]+)")
        rss = max(rss, field(text, r"Maximum resident set size \(kbytes\): ([0-9]+)") / 1024)
    wall = time.time() - t0
    return {"config": name, "rc": max(rcs), "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
            "peak_rss_mib_per_process": round(rss, 1)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", required=True, help="directory written by make_checkpoint.py make")
    ap.add_argument("--workdir", required=True)
    a = parse_with_common(ap)
    ckpt, meta, work = checkpoint_and_workdir(a)
    items = ckpt / "checkpoints" / str(meta["step"]) / "items"
    server = s3_fixtures.S3Server(work / "seaweedfs")
    rows = []
    try:
        server.make_bucket(BUCKET)
        env = dict(os.environ, **server.env())
        env["TMPDIR"] = str(work)
        common = [a.unroll, a.config, f"load_full_state_path={items}", "force_unroll=true",
                  "scan_layers=true", "pure_nnx=false",
                  f"base_num_decoder_layers={meta['layers']}", "run_name=bench", "-q"]
        subprocess.run(["sh", "-c", f"cat $(find {items} -type f) > /dev/null"])
        rows.append(configuration(
            "1 process x 2 threads",
            [[*common, f"base_output_directory=s3://{BUCKET}/one", "--threads", "2"]], env, work))
        rows.append(configuration(
            "2 processes x 1 thread",
            [[*common, f"base_output_directory=s3://{BUCKET}/two", "--threads", "1",
              "--process-count", "2", "--process-index", str(i)] for i in range(2)], env, work))
    finally:
        server.stop()
    print(f"{'configuration':26} {'wall s':>7} {'CPU s':>7} {'peak RSS MiB/process':>21} status")
    for r in rows:
        print(f"{r['config']:26} {r['wall_s']:7.2f} {r['cpu_s']:7.2f} "
              f"{r['peak_rss_mib_per_process']:21.1f} {r['rc']}")
    (work / "s3_multiprocess.json").write_text(json.dumps({"checkpoint": meta, "rows": rows},
                                                          indent=1))
    return 0 if all(r["rc"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
