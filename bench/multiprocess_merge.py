"""The merge of a synthetic many-process layout: P per-process OCDBT databases, written by
TensorStore with Orbax's own specs (as P Orbax processes would: `ocdbt.process_<i>/`, K arrays'
worth of keys each: a zarr.json inline and C out-of-line chunks), then merged twice on copies:
by `unroll merge --ocdbt` and by Orbax's `merge_ocdbt_per_process_files`. Prints both times
and the top-level database's size; checks that TensorStore reads the same keys from both.

  multiprocess_merge.py --unroll build/src/cli/unroll --procs 1000 --workdir DIR
"""
from __future__ import annotations

import argparse
import asyncio
import pathlib
import shutil
import subprocess
import time

import tensorstore as ts
from orbax.checkpoint._src.serialization import ocdbt_utils
from orbax.checkpoint._src.serialization import tensorstore_utils as ts_utils


def context():
    return ts.Context(ts_utils._DEFAULT_OCDBT_TS_CONTEXT)


async def write_children(d: pathlib.Path, procs: int, arrays: int, chunks: int):
    async def one(i):
        spec = ts_utils.build_kvstore_tspec(str(d), use_ocdbt=True, process_id=i)
        ts_utils.add_ocdbt_write_options(spec)
        store = await ts_utils.open_kv_store(spec, context())
        txn = ts.Transaction()
        for a in range(arrays):
            name = f"params.params.decoder.layers_{i}.w{a}"
            await store.with_transaction(txn).write(f"{name}/zarr.json", b'{"zarr_format":3}')
            for c in range(chunks):
                await store.with_transaction(txn).write(f"{name}/c/{c}/0", bytes(2048))
        await txn.commit_async()
    for start in range(0, procs, 50):
        await asyncio.gather(*(one(i) for i in range(start, min(procs, start + 50))))


async def keys(d: pathlib.Path):
    spec = ts_utils.build_kvstore_tspec(str(d), use_ocdbt=True)
    return await (await ts_utils.open_kv_store(spec, context())).list()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--unroll", required=True)
    ap.add_argument("--procs", type=int, default=1000)
    ap.add_argument("--arrays", type=int, default=4)
    ap.add_argument("--chunks", type=int, default=4)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    w = pathlib.Path(a.workdir)
    shutil.rmtree(w, ignore_errors=True)
    base = w / "children"
    base.mkdir(parents=True)
    t = time.time()
    asyncio.run(write_children(base, a.procs, a.arrays, a.chunks))
    gen = time.time() - t
    ours, theirs = w / "unroll", w / "orbax"
    shutil.copytree(base, ours)
    shutil.copytree(base, theirs)
    t = time.time()
    subprocess.run([a.unroll, "merge", "-q", "--ocdbt", str(ours)], check=True)
    t_ours = time.time() - t
    t = time.time()
    asyncio.run(ocdbt_utils.merge_ocdbt_per_process_files(theirs, context(), use_zarr3=True,
                                                          enable_validation=False))
    t_theirs = time.time() - t
    k_ours, k_theirs = asyncio.run(keys(ours)), asyncio.run(keys(theirs))
    assert k_ours == k_theirs, "the merged databases differ"
    top = sum(p.stat().st_size for p in (ours / "d").iterdir()) + (ours / "manifest.ocdbt").stat().st_size
    print(f"merge of {a.procs} processes x {a.arrays * (1 + a.chunks)} keys "
          f"({len(k_ours)} keys): unroll merge {t_ours:.2f} s, Orbax merge {t_theirs:.2f} s; "
          f"top-level database {top / 1024:.0f} KiB (children written in {gen:.1f} s)")
    shutil.rmtree(w)


if __name__ == "__main__":
    main()
