"""Checkpoints in a fake-gcs-server bucket, written and read by the real Python stack:

- `orbax_save` saves a fixture's state with a stock Orbax CheckpointManager straight into
  gs://bucket/... (arrays through TensorStore's gcs driver, pointed at the server with
  TENSORSTORE_GCS_HTTP_URL; metadata through etils.epath -> fsspec -> gcs_fsspec), as
  maxtext_fixtures._save does for local fixtures; on gs:// Orbax uses its commit-file mode
  (commit_success.txt, no renames);
- `check_in_bucket` restores an item dir from the bucket with stock Orbax (no target, with a
  target, through a CheckpointManager) and compares it bit for bit with the reference;
- `ts_list` / `download_tree` / `upload_tree` are TensorStore's gcs kvstore's view of a prefix.
The process environment must hold STORAGE_EMULATOR_HOST (see `use_emulator`).
"""
from __future__ import annotations

import os
import pathlib

import jax
import orbax.checkpoint as ocp
from etils import epath

import gcs_fsspec
import maxtext_fixtures as mf
import reference


def use_emulator(monkeypatch, url: str):
    """Point TensorStore, epath and unroll at the emulator for this test."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", url)
    monkeypatch.setenv("TENSORSTORE_GCS_HTTP_URL", url)
    for k in ("GOOGLE_APPLICATION_CREDENTIALS", "GCE_METADATA_HOST", "UNROLL_GCS_ENDPOINT",
              "CLOUDSDK_CONFIG"):
        monkeypatch.delenv(k, raising=False)
    gcs_fsspec.register()


def orbax_save(kind: str, layout: str, dtype: str, root_url: str) -> str:
    """Save fixture (kind, layout, dtype) under root_url (a CheckpointManager root); returns
    the gs:// item dir."""
    state, b, mesh_shape, _, step = mf._build(kind, dtype)
    use_ocdbt, use_zarr3 = mf.LAYOUTS[layout]
    chunk = mf.SMALL_CHUNK_BYTES if kind == "params" else mf.MAXTEXT_CHUNK_BYTES
    sharded = mf._shard(state, b.specs, mf._mesh(mesh_shape))
    save_args = jax.tree.map(lambda _: ocp.SaveArgs(chunk_byte_size=chunk), sharded)
    handler = ocp.PyTreeCheckpointHandler(use_ocdbt=use_ocdbt, use_zarr3=use_zarr3)
    options = ocp.CheckpointManagerOptions(create=True, enable_async_checkpointing=False)
    with ocp.CheckpointManager(epath.Path(root_url), item_names=("items",),
                               item_handlers={"items": handler}, options=options) as mngr:
        mngr.save(step, args=ocp.args.Composite(items=ocp.args.PyTreeSave(
            item=sharded, save_args=save_args,
            ocdbt_target_data_file_size=mf.MAXTEXT_CHUNK_BYTES)))
        mngr.wait_until_finished()
    return f"{root_url}/{step}/items"


def check_in_bucket(items_url: str, expected: dict, scratch: pathlib.Path) -> None:
    """Stock Orbax restores gs://<bucket>/<root>/<step>/items straight from the bucket (no
    target, then with a target) and it must equal `expected` bit for bit; then the whole
    <root>, copied out by TensorStore, passes reference.check_unrolled, whose CheckpointManager
    must list the step (Orbax's step listing on gs:// asks google-cloud-storage about the
    bucket, which the test stack does not have)."""
    items = epath.Path(items_url)
    ckptr = ocp.PyTreeCheckpointer()
    reference.compare_trees(reference._to_pure(ckptr.restore(items)), expected,
                            f"{items_url} (no target)")
    target = reference.target_of(expected)
    got = ckptr.restore(items, args=ocp.args.PyTreeRestore(
        item=target, restore_args=ocp.checkpoint_utils.construct_restore_args(target)))
    reference.compare_trees(reference._to_pure(got), expected, f"{items_url} (target)")
    bucket, _, key = items_url[len("gs://"):].partition("/")
    root_key, step, _ = key.rsplit("/", 2)
    download_tree(bucket, root_key, scratch / "checkpoints")
    reference.check_unrolled(scratch / "checkpoints" / step / "items", expected)


def _kvstore(bucket: str, prefix: str):
    import tensorstore as ts
    path = prefix.strip("/") + "/" if prefix.strip("/") else ""
    return ts.KvStore.open({"driver": "gcs", "bucket": bucket, "path": path}).result()


def ts_list(bucket: str, prefix: str) -> list[str]:
    return sorted(k.decode() for k in _kvstore(bucket, prefix).list().result())


def download_tree(bucket: str, prefix: str, local: pathlib.Path) -> int:
    """Every object under gs://bucket/prefix/ to local/<relative name>; returns the count."""
    kv = _kvstore(bucket, prefix)
    n = 0
    for key in kv.list().result():
        dst = pathlib.Path(local) / key.decode()
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(kv.read(key).result().value)
        n += 1
    return n


def upload_tree(local: pathlib.Path, bucket: str, prefix: str) -> int:
    """Every file under `local` to gs://bucket/prefix/<relative name> by TensorStore; returns
    the count."""
    import tensorstore as ts
    src = ts.KvStore.open({"driver": "file", "path": str(local).rstrip("/") + "/"}).result()
    dst = _kvstore(bucket, prefix)
    keys = src.list().result()
    for k in keys:
        dst.write(k, src.read(k).result().value).result()
    return len(keys)
