"""Checkpoints in a fake-gcs-server bucket, moved by TensorStore's own gcs kvstore driver
(pointed at the server with TENSORSTORE_GCS_HTTP_URL): `upload_tree` puts a checkpoint that
real Orbax wrote into the bucket byte for byte, `download_tree` brings a tree back so that
stock Orbax restores it, `ts_list` is TensorStore's listing of a prefix."""
from __future__ import annotations

import os
import pathlib


def _kvstore(gcs_url: str, bucket: str, prefix: str):
    os.environ["TENSORSTORE_GCS_HTTP_URL"] = gcs_url
    # No credentials to look for: the emulator needs none.
    os.environ.pop("GOOGLE_APPLICATION_CREDENTIALS", None)
    import tensorstore as ts
    path = prefix.strip("/") + "/" if prefix.strip("/") else ""
    return ts.KvStore.open({"driver": "gcs", "bucket": bucket, "path": path}).result()


def upload_tree(gcs_url: str, local: pathlib.Path, bucket: str, prefix: str) -> int:
    """Every file under `local` to gs://bucket/prefix/<relative path>; returns the count."""
    kv = _kvstore(gcs_url, bucket, prefix)
    n = 0
    for f in sorted(pathlib.Path(local).rglob("*")):
        if f.is_file():
            kv.write(f.relative_to(local).as_posix(), f.read_bytes()).result()
            n += 1
    return n


def ts_list(gcs_url: str, bucket: str, prefix: str) -> list[str]:
    kv = _kvstore(gcs_url, bucket, prefix)
    return sorted(k.decode() for k in kv.list().result())


def download_tree(gcs_url: str, bucket: str, prefix: str, local: pathlib.Path) -> int:
    """Every object under gs://bucket/prefix/ to local/<relative name>; returns the count."""
    kv = _kvstore(gcs_url, bucket, prefix)
    n = 0
    for key in kv.list().result():
        dst = pathlib.Path(local) / key.decode()
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(kv.read(key).result().value)
        n += 1
    return n
