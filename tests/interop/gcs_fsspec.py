"""A minimal fsspec filesystem for gs:// on the GCS JSON API of an emulator, so that real
Orbax can save straight into a fake-gcs-server bucket.

Orbax writes arrays through TensorStore (its gcs driver, pointed at the server with
TENSORSTORE_GCS_HTTP_URL) and everything else (_METADATA, _CHECKPOINT_METADATA,
commit_success.txt, directory checks) through etils.epath, which hands gs:// paths to fsspec.
fsspec's own gs implementation is gcsfs, which pins an fsspec release other than the one the
test stack pins; this class stands in for it with the few calls epath makes (objects are
files, name prefixes ending in '/' are directories, mkdir is a no-op as on GCS).
"""
from __future__ import annotations

import io
import json
import os
import urllib.error
import urllib.parse
import urllib.request

import fsspec


class _Upload(io.BytesIO):
    def __init__(self, fs, path):
        super().__init__()
        self.fs, self.path = fs, path

    def close(self):
        if not self.closed:
            self.fs._put(self.path, self.getvalue())
        super().close()


class EmulatorGcsFileSystem(fsspec.AbstractFileSystem):
    protocol = ("gs", "gcs")
    root_marker = ""

    @property
    def endpoint(self):
        # read at each call, not kept: etils.epath and fsspec cache filesystem instances, and
        # a later test module's emulator listens on another port. TensorStore's variable
        # names the same emulator (use_emulator sets both; some tests then route unroll
        # elsewhere by unsetting STORAGE_EMULATOR_HOST).
        url = os.environ.get("STORAGE_EMULATOR_HOST") or os.environ["TENSORSTORE_GCS_HTTP_URL"]
        return url.rstrip("/")

    @classmethod
    def _strip_protocol(cls, path):
        path = str(path)
        for p in ("gs://", "gcs://"):
            if path.startswith(p):
                path = path[len(p):]
        return path.rstrip("/")

    @staticmethod
    def _split(path):
        bucket, _, key = path.partition("/")
        return bucket, key

    def _get_json(self, url):
        with urllib.request.urlopen(url) as r:
            return json.load(r)

    def _list(self, bucket, prefix, delimiter="/"):
        items, prefixes, token = [], [], None
        while True:
            q = {"prefix": prefix}
            if delimiter:
                q["delimiter"] = delimiter
            if token:
                q["pageToken"] = token
            r = self._get_json(f"{self.endpoint}/storage/v1/b/{bucket}/o?"
                               + urllib.parse.urlencode(q))
            items += r.get("items", [])
            prefixes += r.get("prefixes", [])
            token = r.get("nextPageToken")
            if not token:
                return items, prefixes

    def _put(self, path, data: bytes):
        bucket, key = self._split(self._strip_protocol(path))
        q = urllib.parse.urlencode({"uploadType": "media", "name": key})
        req = urllib.request.Request(f"{self.endpoint}/upload/storage/v1/b/{bucket}/o?{q}",
                                     data=data, method="POST",
                                     headers={"Content-Type": "application/octet-stream"})
        urllib.request.urlopen(req).read()
        self.invalidate_cache()

    def _get(self, path) -> bytes:
        bucket, key = self._split(self._strip_protocol(path))
        k = urllib.parse.quote(key, safe="")
        try:
            with urllib.request.urlopen(
                    f"{self.endpoint}/storage/v1/b/{bucket}/o/{k}?alt=media") as r:
                return r.read()
        except urllib.error.HTTPError as e:
            if e.code == 404:
                raise FileNotFoundError(path) from None
            raise

    def ls(self, path, detail=True, **kwargs):
        path = self._strip_protocol(path)
        bucket, key = self._split(path)
        items, prefixes = self._list(bucket, key + "/" if key else "")
        out = [{"name": f"{bucket}/{i['name']}", "size": int(i["size"]), "type": "file"}
               for i in items if not i["name"].endswith("/")]
        out += [{"name": f"{bucket}/{p.rstrip('/')}", "size": 0, "type": "directory"}
                for p in prefixes]
        if not out:
            info = self.info(path)  # a file, or FileNotFoundError
            out = [info]
        return out if detail else [o["name"] for o in out]

    def info(self, path, **kwargs):
        path = self._strip_protocol(path)
        bucket, key = self._split(path)
        if not key:
            return {"name": bucket, "size": 0, "type": "directory"}
        k = urllib.parse.quote(key, safe="")
        try:
            r = self._get_json(f"{self.endpoint}/storage/v1/b/{bucket}/o/{k}")
            return {"name": path, "size": int(r["size"]), "type": "file"}
        except urllib.error.HTTPError as e:
            if e.code != 404:
                raise
        items, prefixes = self._list(bucket, key + "/")
        if items or prefixes:
            return {"name": path, "size": 0, "type": "directory"}
        raise FileNotFoundError(path)

    def _open(self, path, mode="rb", **kwargs):
        if "r" in mode:
            return io.BytesIO(self._get(path))
        return _Upload(self, path)

    def mkdir(self, path, create_parents=True, **kwargs):
        pass  # GCS has no directories

    def makedirs(self, path, exist_ok=False):
        pass

    def rm_file(self, path):
        bucket, key = self._split(self._strip_protocol(path))
        k = urllib.parse.quote(key, safe="")
        req = urllib.request.Request(f"{self.endpoint}/storage/v1/b/{bucket}/o/{k}",
                                     method="DELETE")
        try:
            urllib.request.urlopen(req).read()
        except urllib.error.HTTPError as e:
            if e.code != 404:
                raise
        self.invalidate_cache()

    def rm(self, path, recursive=False, maxdepth=None):
        paths = path if isinstance(path, list) else [path]
        for p in paths:
            p = self._strip_protocol(p)
            bucket, key = self._split(p)
            if recursive:
                items, _ = self._list(bucket, key + "/" if key else "", delimiter=None)
                for i in items:
                    self.rm_file(f"{bucket}/{i['name']}")
            try:
                self.rm_file(p)
            except FileNotFoundError:
                pass

    def cp_file(self, path1, path2, **kwargs):
        self._put(path2, self._get(path1))

    def mv(self, path1, path2, recursive=False, maxdepth=None, **kwargs):
        src = self._strip_protocol(path1)
        if self.info(src)["type"] == "directory":
            bucket, key = self._split(src)
            dst = self._strip_protocol(path2)
            items, _ = self._list(bucket, key + "/", delimiter=None)
            for i in items:
                rel = i["name"][len(key) + 1:]
                self.cp_file(f"{bucket}/{i['name']}", f"{dst}/{rel}")
                self.rm_file(f"{bucket}/{i['name']}")
        else:
            self.cp_file(src, path2)
            self.rm_file(src)


def register():
    fsspec.register_implementation("gs", EmulatorGcsFileSystem, clobber=True)
    fsspec.register_implementation("gcs", EmulatorGcsFileSystem, clobber=True)
