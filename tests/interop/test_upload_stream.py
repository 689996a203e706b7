"""An OCDBT output to an object store is not staged whole on local disk: each data file goes up
as soon as the writer moves on to the next one, and leaves the disk (unroll/job_stream.h).
Watched from outside: the bytes unroll holds under $TMPDIR (where it stages; files, and files
open whose names are gone) are sampled during the run and must stay well below the output's
size; the output must still restore (unroll verify
against the input), and a failure late in the upload must leave nothing in the bucket."""
import os
import subprocess
import threading
import time
import uuid

import pytest

import s3_fixtures
from gcs_servers import FakeGcs
from test_s3 import CONFIG, adam_checkpoint  # noqa: F401 (a fixture)

BUCKET = "unroll-stream"
FILE_BYTES = 512 << 10  # checkpoint_storage_target_data_file_size_bytes: many data files


s3 = s3_fixtures.server_fixture(BUCKET)


def fresh():
    return f"s3://{BUCKET}/out-{uuid.uuid4().hex[:8]}"


def argv(unroll_bin, items, meta, out):
    return [str(unroll_bin), str(CONFIG), "-q", f"load_full_state_path={items}",
            f"base_output_directory={out}", "run_name=run", "force_unroll=true",
            "scan_layers=true", "pure_nnx=false", f"base_num_decoder_layers={meta['layers']}",
            f"checkpoint_storage_target_data_file_size_bytes={FILE_BYTES}"]


class DiskWatch:
    """Samples every few milliseconds the bytes `proc` holds on disk below `root`: the files
    there, and the files it holds open whose names are already removed (a data file handed
    to the upload keeps its blocks until the upload is done)."""

    def __init__(self, root, proc):
        self.root, self.proc, self.peak, self.samples = root, proc, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self):
        total = 0
        try:
            paths = list(self.root.rglob("*"))
        except OSError:  # a directory removed while walked (the staging, at the end)
            paths = []
        for p in paths:
            try:
                if p.is_file():
                    total += p.stat().st_size
            except OSError:
                pass  # removed while we looked
        fd_dir = f"/proc/{self.proc.pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            fds = []
        for fd in fds:
            try:
                target = os.readlink(f"{fd_dir}/{fd}")
                if target.startswith(str(self.root)) and target.endswith(" (deleted)"):
                    total += os.stat(f"{fd_dir}/{fd}").st_size
            except OSError:
                pass
        return total

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self._sample())
            self.samples += 1
            time.sleep(0.002)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def test_output_is_not_staged_whole(unroll_bin, s3, adam_checkpoint, tmp_path):  # noqa: F811
    items, meta = adam_checkpoint
    out = fresh()
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    # the upload of each part is slowed a little, so the run lasts while the disk is watched
    proxy = s3_fixtures.FaultProxy(s3.port, stall_s=0.05)
    try:
        proxy.reset(plan=["slow"] * 1000, match=lambda m, p: m == "PUT")
        env = s3.env(endpoint=proxy.endpoint, TMPDIR=str(tmp))
        proc = subprocess.Popen(argv(unroll_bin, items, meta, out), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)
        with DiskWatch(tmp, proc) as watch:
            _, stderr = proc.communicate(timeout=300)
    finally:
        proxy.stop()
    assert proc.returncode == 0, stderr
    prefix = out[len(f"s3://{BUCKET}/"):] + "/run/checkpoints/0/items"
    keys = s3.list(BUCKET, prefix)
    data = [k for k in keys if k.startswith("d/")]
    assert len(data) >= 8, keys
    kv = s3._kv(BUCKET, prefix)
    out_bytes = sum(len(kv.read(k).result().value) for k in data)
    print(f"peak local bytes {watch.peak}, output data files {out_bytes} ({len(data)}), "
          f"{watch.samples} samples")
    assert watch.samples > 20, watch.samples
    # the file being written, two going up, the last ones (B-tree), metadata: a few files
    assert watch.peak <= 5 * FILE_BYTES + (256 << 10), (watch.peak, out_bytes)
    assert watch.peak < out_bytes / 2, (watch.peak, out_bytes)
    assert not any(tmp.iterdir()), list(tmp.iterdir())  # staging removed
    ver = subprocess.run([str(unroll_bin), "verify", str(items),
                          f"{out}/run/checkpoints/0/items", str(CONFIG), "pure_nnx=false",
                          f"base_num_decoder_layers={meta['layers']}"],
                         capture_output=True, text=True, env=s3.env(), timeout=300)
    assert ver.returncode == 0, ver.stdout + ver.stderr


def test_failed_manifest_upload_deletes_the_streamed_files(unroll_bin, s3, adam_checkpoint,  # noqa: F811
                                                          tmp_path):
    """The data files went up during the conversion; the manifest's PUT then fails for good:
    exit 3, and nothing of the run is left in the bucket (streamed files included)."""
    items, meta = adam_checkpoint
    out = fresh()
    proxy = s3_fixtures.FaultProxy(s3.port)
    try:
        proxy.reset(plan=["503"] * 50,
                    match=lambda m, p: m == "PUT" and p.split("?")[0].endswith("manifest.ocdbt"))
        env = s3.env(endpoint=proxy.endpoint, UNROLL_HTTP_RETRIES="2",
                     TMPDIR=str(tmp_path))
        res = subprocess.run(argv(unroll_bin, items, meta, out), capture_output=True,
                             text=True, timeout=300, env=env)
        data_puts = [p for m, p, r, n in proxy.served if m == "PUT" and "/d/" in p]
    finally:
        proxy.stop()
    assert res.returncode == 3, res.stderr
    assert "manifest.ocdbt" in res.stderr and "nothing published" in res.stderr, res.stderr
    assert "data files streamed during the conversion were deleted" in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert len(data_puts) >= 8, data_puts
    prefix = out[len(f"s3://{BUCKET}/"):]
    assert s3.list(BUCKET, prefix) == []


def test_streamed_to_gcs(unroll_bin, adam_checkpoint, tmp_path):  # noqa: F811
    """The same on fake-gcs-server: many data files streamed, the output verifies."""
    items, meta = adam_checkpoint
    with FakeGcs() as gcs:
        gcs.create_bucket("stream")
        env = {k: v for k, v in os.environ.items()
               if k not in ("GOOGLE_APPLICATION_CREDENTIALS", "GCE_METADATA_HOST")}
        env.update(STORAGE_EMULATOR_HOST=gcs.url, HOME=str(tmp_path), TMPDIR=str(tmp_path))
        out = "gs://stream/out"
        res = subprocess.run(argv(unroll_bin, items, meta, out), capture_output=True,
                             text=True, timeout=300, env=env)
        assert res.returncode == 0, res.stderr
        names = gcs.names("stream", "out/run/checkpoints/0/items/")
        assert len([n for n in names if "/items/d/" in n]) >= 8, names
        ver = subprocess.run([str(unroll_bin), "verify", str(items),
                              f"{out}/run/checkpoints/0/items", str(CONFIG), "pure_nnx=false",
                              f"base_num_decoder_layers={meta['layers']}"],
                             capture_output=True, text=True, env=env, timeout=300)
        assert ver.returncode == 0, ver.stdout + ver.stderr


def test_plain_zarr_output_is_not_staged_whole(unroll_bin, s3, adam_checkpoint, tmp_path):  # noqa: F811
    """Plain zarr (checkpoint_storage_use_ocdbt=false) into a bucket: each chunk goes up as
    soon as the writer has stored it and leaves the disk, so the local disk holds far less
    than the output; every object in the bucket is, bit for bit, the file the same
    conversion writes to a local directory, and the output verifies against the input."""
    items, meta = adam_checkpoint
    out = fresh()
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    plain = ["checkpoint_storage_use_ocdbt=false"]
    proxy = s3_fixtures.FaultProxy(s3.port, stall_s=0.05)
    try:
        proxy.reset(plan=["slow"] * 1000, match=lambda m, p: m == "PUT")
        env = s3.env(endpoint=proxy.endpoint, TMPDIR=str(tmp))
        proc = subprocess.Popen(argv(unroll_bin, items, meta, out) + plain,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env)
        with DiskWatch(tmp, proc) as watch:
            _, stderr = proc.communicate(timeout=300)
    finally:
        proxy.stop()
    assert proc.returncode == 0, stderr
    assert not any(tmp.iterdir()), list(tmp.iterdir())  # staging removed
    local = tmp_path / "local"
    res = subprocess.run(argv(unroll_bin, items, meta, str(local)) + plain, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    step = local / "run" / "checkpoints" / "0"
    prefix = out[len(f"s3://{BUCKET}/"):] + "/run/checkpoints/0"
    kv = s3._kv(BUCKET, prefix)
    keys = s3.list(BUCKET, prefix)
    files = sorted(str(p.relative_to(step)) for p in step.rglob("*") if p.is_file())
    assert keys == files
    out_bytes = 0
    for k in keys:
        value = kv.read(k).result().value
        out_bytes += len(value)
        if not k.endswith(("commit_success.txt", "_CHECKPOINT_METADATA")):  # time, location
            assert value == (step / k).read_bytes(), k
    chunks = [k for k in keys if "/c/" in k]
    print(f"peak local bytes {watch.peak}, output {out_bytes} ({len(keys)} objects, "
          f"{len(chunks)} chunks), {watch.samples} samples")
    assert len(chunks) >= 8, keys
    assert watch.samples > 20, watch.samples
    assert watch.peak < out_bytes / 3, (watch.peak, out_bytes)
    ver = subprocess.run([str(unroll_bin), "verify", str(items),
                          f"{out}/run/checkpoints/0/items", str(CONFIG), "pure_nnx=false",
                          f"base_num_decoder_layers={meta['layers']}"],
                         capture_output=True, text=True, env=s3.env(), timeout=300)
    assert ver.returncode == 0, ver.stdout + ver.stderr
