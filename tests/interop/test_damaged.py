"""Damaged checkpoints and hostile environments, generated from real Orbax fixtures.

Each case copies a real MaxText checkpoint written by Orbax/TensorStore (maxtext_fixtures.py),
damages the copy (truncated files, flipped bytes, bad CRCs, missing files and chunks,
metadata that disagrees with the data, unknown dtypes and codecs, unreadable files) or the
place the output goes (not writable, disk full), runs `unroll` on it and checks that the run
  - exits with the documented status (README "Exit statuses"),
  - prints exactly one line on stderr naming the file or the tensor at fault,
  - leaves nothing behind: no checkpoint directory, no `*.unroll-tmp`,
  - does not modify its input (hash of the whole input tree before and after).
"""
import hashlib
import json
import os
import pathlib
import resource
import shutil
import signal
import struct
import subprocess
import tempfile

import pytest

import maxtext_fixtures

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONFIG = ROOT / "tests" / "data" / "example" / "unroll.yml"

EXIT_INTERNAL, EXIT_USAGE, EXIT_IO, EXIT_CORRUPT, EXIT_UNSUPPORTED = 1, 2, 3, 4, 5

OCDBT_MAGIC = {"btree": 0x0CDB20DE, "vnode": 0x0CDB1234, "manifest": 0x0CDB3A2A}
# A layer-stacked leaf (scan axis 1) and a leaf outside the layer stack.
SCANNED = "params.params.decoder.layers.mlp.wo.kernel"
UNSCANNED = "params.params.token_embedder.embedding"


def tree_hash(root) -> str:
    """Names, modes and bytes of every entry under root."""
    h = hashlib.sha256()
    root = pathlib.Path(root)
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        h.update(f"{p.relative_to(root)}\0{st.st_mode:o}\0".encode())
        if p.is_file() and not p.is_symlink():
            h.update(p.read_bytes())
    return h.hexdigest()


class Case:
    """A private copy of a cached fixture, ready to damage and run unroll on."""

    def __init__(self, make_fixture, tmp_path, layout, kind="linen", dtype="float32"):
        tmp_path = pathlib.Path(tmp_path)
        src = make_fixture(kind, layout, dtype)
        base = tmp_path / "input"
        shutil.copytree(src.root.parent, base, symlinks=True)
        self.info = maxtext_fixtures.describe(kind, layout, dtype, base)
        self.items = self.info.items
        self.input_root = base
        self.out = tmp_path / "out"
        self.layout = layout

    def array_dir(self, name):
        return self.items / name

    def run(self, extra=(), preexec_fn=None, items=None):
        cfg = self.info.config
        use_ocdbt, use_zarr3 = maxtext_fixtures.LAYOUTS[self.layout]
        args = [os.environ.get("UNROLL_BIN", str(ROOT / "build" / "src" / "cli" / "unroll")),
                str(CONFIG), "-q",
                f"{self.info.input_key}={items or self.items}",
                f"base_output_directory={self.out}", "run_name=run",
                f"base_num_decoder_layers={cfg['num_decoder_layers']}",
                f"first_num_dense_layers={cfg.get('first_num_dense_layers', 0)}",
                f"param_scan_axis={cfg['param_scan_axis']}",
                "scan_layers=true", "force_unroll=true",
                f"pure_nnx={str(cfg['pure_nnx']).lower()}",
                f"decoder_block={cfg['decoder_block']}",
                f"checkpoint_storage_use_ocdbt={str(use_ocdbt).lower()}",
                f"checkpoint_storage_use_zarr3={str(use_zarr3).lower()}", *extra]
        return subprocess.run(args, capture_output=True, text=True, timeout=300,
                              preexec_fn=preexec_fn)

    def fails(self, status, names, **kw):
        """Run and check the failure contract. `names`: the line must name one of them."""
        before = tree_hash(self.input_root)
        res = self.run(**kw)
        line = res.stderr.strip()
        assert res.returncode == status, f"exit {res.returncode}, stderr: {res.stderr!r}"
        assert line and "\n" not in line, f"not one line: {res.stderr!r}"
        assert any(n in line for n in names), f"{line!r} names none of {names}"
        assert not (self.out / "run" / "checkpoints").exists(), "checkpoint dir left behind"
        left = [str(p) for p in self.out.rglob("*.unroll-tmp")] if self.out.exists() else []
        assert not left, f"temporary output left behind: {left}"
        assert tree_hash(self.input_root) == before, "input tree modified"
        return line


def _objects(blob, magic):
    """(offset, length) of every OCDBT object with this magic in a data file."""
    out = []
    m = struct.pack(">I", magic)
    at = blob.find(m)
    while at >= 0:
        (length,) = struct.unpack_from("<Q", blob, at + 4)
        if 16 <= length <= len(blob) - at:
            out.append((at, length))
        at = blob.find(m, at + 1)
    return out


def _data_files(items):
    return sorted(p for p in items.rglob("d/*") if p.is_file())


def _flip(path, offset, mask=0x40):
    b = bytearray(path.read_bytes())
    b[offset] ^= mask
    path.write_bytes(bytes(b))


def _edit_json(path, fn):
    doc = json.loads(path.read_text())
    fn(doc)
    path.write_text(json.dumps(doc))


def _shards(array_dir):
    return sorted(p for p in (array_dir / "c").rglob("*") if p.is_file())


# ---- OCDBT damage ---------------------------------------------------------------------------

def test_truncated_manifest(make_fixture, tmp_path):
    c = Case(make_fixture, tmp_path, "ocdbt-zarr3")
    m = c.items / "manifest.ocdbt"
    m.write_bytes(m.read_bytes()[:-9])
    c.fails(EXIT_CORRUPT, ["manifest.ocdbt"])


def test_empty_manifest(make_fixture, tmp_path):
    c = Case(make_fixture, tmp_path, "ocdbt-zarr2")
    (c.items / "manifest.ocdbt").write_bytes(b"")
    c.fails(EXIT_CORRUPT, ["manifest.ocdbt"])


def test_manifest_bad_crc(make_fixture, tmp_path):
    c = Case(make_fixture, tmp_path, "ocdbt-zarr3")
    m = c.items / "manifest.ocdbt"
    _flip(m, m.stat().st_size - 1)
    line = c.fails(EXIT_CORRUPT, ["manifest.ocdbt"])
    assert "CRC" in line or "crc" in line


def _top_data_files(c):
    """The data files of the merged top-level database: Orbax's merge copies every (small)
    value inline into them, so a run reads these and never the per-process database."""
    files = sorted((c.items / "d").iterdir())
    assert files
    return files


def test_truncated_data_file(make_fixture, tmp_path):
    c = Case(make_fixture, tmp_path, "ocdbt-zarr3")
    files = _top_data_files(c)
    for f in files:
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    c.fails(EXIT_CORRUPT, [f.name for f in files])


def test_btree_node_flipped_byte(make_fixture, tmp_path):
    """A byte flipped inside every kind of B+tree node the run reads: the node's CRC-32C."""
    c = Case(make_fixture, tmp_path, "ocdbt-zarr3")
    hit = None
    for f in _data_files(c.items):
        nodes = _objects(f.read_bytes(), OCDBT_MAGIC["btree"])
        if nodes:
            at, length = nodes[0]
            _flip(f, at + length // 2)
            hit = f
            break
    assert hit is not None, "no B+tree node found in the fixture's data files"
    line = c.fails(EXIT_CORRUPT, [hit.name])
    assert "CRC" in line or "crc" in line or "corrupt" in line.lower() or "zstd" in line


def test_btree_node_bad_crc(make_fixture, tmp_path):
    c = Case(make_fixture, tmp_path, "ocdbt-zarr2")
    hit = None
    for f in _data_files(c.items):
        nodes = _objects(f.read_bytes(), OCDBT_MAGIC["btree"])
        if nodes:
            at, length = nodes[-1]
            _flip(f, at + length - 2, 0x01)  # the stored CRC itself
            hit = f
            break
    assert hit is not None
    line = c.fails(EXIT_CORRUPT, [hit.name])
    assert "CRC" in line


def test_missing_data_file(make_fixture, tmp_path):
    """A data file the manifest references is gone: an I/O error naming it (exit 3, as for any
    missing file), never "key not found"."""
    c = Case(make_fixture, tmp_path, "ocdbt-zarr3")
    files = _top_data_files(c)
    for f in files:
        f.unlink()
    line = c.fails(EXIT_IO, [f.name for f in files])
    assert "data file" in line


def test_missing_data_dir(make_fixture, tmp_path):
    c = Case(make_fixture, tmp_path, "ocdbt-zarr2")
    shutil.rmtree(c.items / "d")
    line = c.fails(EXIT_IO, ["/d/"])
    assert "data file" in line


def test_missing_manifest(make_fixture, tmp_path):
    """_METADATA says OCDBT but manifest.ocdbt is gone while ocdbt.process_0/ is there: what a
    save holds before Orbax merges the per-process databases (an unfinished save, exit 4),
    never read through ocdbt.process_0/."""
    c = Case(make_fixture, tmp_path, "ocdbt-zarr3")
    (c.items / "manifest.ocdbt").unlink()
    line = c.fails(EXIT_CORRUPT, ["manifest.ocdbt"])
    assert "ocdbt.process_" in line


# ---- zarr damage ----------------------------------------------------------------------------

def test_missing_chunk(make_fixture, tmp_path):
    """Orbax wrote every chunk (store_array_data_equal_to_fill_value): a missing one is damage
    (exit 4), not fill."""
    c = Case(make_fixture, tmp_path, "plain-zarr3")
    meta = json.loads((c.items / "_METADATA").read_text())
    assert meta.get("store_array_data_equal_to_fill_value") is True
    shard = _shards(c.array_dir(SCANNED))[-1]
    shard.unlink()
    c.fails(EXIT_CORRUPT, [SCANNED])


def test_missing_chunk_zarr2(make_fixture, tmp_path):
    c = Case(make_fixture, tmp_path, "plain-zarr2")
    d = c.array_dir(UNSCANNED)
    chunk = sorted(p for p in d.iterdir() if p.name[0].isdigit())[0]
    chunk.unlink()
    c.fails(EXIT_CORRUPT, [UNSCANNED])


def test_truncated_shard(make_fixture, tmp_path):
    c = Case(make_fixture, tmp_path, "plain-zarr3")
    shard = _shards(c.array_dir(SCANNED))[0]
    shard.write_bytes(shard.read_bytes()[:-7])
    c.fails(EXIT_CORRUPT, [SCANNED])


def test_shard_index_bad_crc(make_fixture, tmp_path):
    c = Case(make_fixture, tmp_path, "plain-zarr3")
    shard = _shards(c.array_dir(UNSCANNED))[0]
    _flip(shard, shard.stat().st_size - 10)  # inside the index (bytes + crc32c codecs)
    line = c.fails(EXIT_CORRUPT, [UNSCANNED])
    assert "CRC" in line or "crc" in line


def test_chunk_zstd_garbage(make_fixture, tmp_path):
    c = Case(make_fixture, tmp_path, "plain-zarr2")
    d = c.array_dir(UNSCANNED)
    chunk = sorted(p for p in d.iterdir() if p.name[0].isdigit())[0]
    chunk.write_bytes(b"\x28\xb5\x2f\xfd" + b"\xff" * 40)
    c.fails(EXIT_CORRUPT, [UNSCANNED])


def test_truncated_zarr_json(make_fixture, tmp_path):
    c = Case(make_fixture, tmp_path, "plain-zarr3")
    z = c.array_dir(SCANNED) / "zarr.json"
    z.write_bytes(z.read_bytes()[:40])
    c.fails(EXIT_CORRUPT, [SCANNED])


def test_metadata_shape_disagrees_with_data(make_fixture, tmp_path):
    """zarr.json claims a larger array than the stored chunks cover (every chunk was written,
    so the chunks past the old edge are missing data)."""
    c = Case(make_fixture, tmp_path, "plain-zarr3")
    z = c.array_dir(UNSCANNED) / "zarr.json"
    _edit_json(z, lambda d: d["shape"].__setitem__(0, d["shape"][0] + 5))
    c.fails(EXIT_CORRUPT, [UNSCANNED])


def test_inner_chunk_shape_disagrees_with_data(make_fixture, tmp_path):
    """The shard's inner chunk shape changed: the stored index no longer fits the shard."""
    c = Case(make_fixture, tmp_path, "plain-zarr3")
    z = c.array_dir(SCANNED) / "zarr.json"

    def shrink(d):
        cfg = d["codecs"][0]["configuration"]
        cfg["chunk_shape"] = [1] * len(cfg["chunk_shape"])
    _edit_json(z, shrink)
    c.fails(EXIT_CORRUPT, [SCANNED])


def test_chunk_shape_disagrees_with_data(make_fixture, tmp_path):
    """The inner chunk shape changed: the stored chunks decode to the wrong size."""
    c = Case(make_fixture, tmp_path, "plain-zarr2")
    z = c.array_dir(UNSCANNED) / ".zarray"

    def grow(d):
        d["chunks"] = [n * 2 for n in d["chunks"]]
    _edit_json(z, grow)
    c.fails(EXIT_CORRUPT, [UNSCANNED])


def test_scan_lengths_disagree_within_group(make_fixture, tmp_path):
    """One leaf of the layer stack has fewer layers than the others (zarr.json and _METADATA
    both edited, so the checkpoint is self-consistent except across the group)."""
    c = Case(make_fixture, tmp_path, "plain-zarr3")
    z = c.array_dir(SCANNED) / "zarr.json"
    axis = c.info.param_scan_axis
    _edit_json(z, lambda d: d["shape"].__setitem__(axis, d["shape"][axis] - 1))
    md = c.items / "_METADATA"
    doc = json.loads(md.read_text())
    for key, entry in doc["tree_metadata"].items():
        if key.replace("'", "").replace("(", "").replace(")", "").replace(", ", ".") == SCANNED:
            ws = entry["value_metadata"].get("write_shape")
            if ws:
                ws[axis] -= 1
    md.write_text(json.dumps(doc))
    line = c.fails(EXIT_CORRUPT, [SCANNED, "layers"])
    assert "layer" in line


def test_unknown_dtype(make_fixture, tmp_path):
    c = Case(make_fixture, tmp_path, "plain-zarr3")
    z = c.array_dir(UNSCANNED) / "zarr.json"
    _edit_json(z, lambda d: d.__setitem__("data_type", "float8_e9m9"))
    c.fails(EXIT_UNSUPPORTED, [UNSCANNED])


def test_unknown_dtype_zarr2(make_fixture, tmp_path):
    c = Case(make_fixture, tmp_path, "plain-zarr2")
    z = c.array_dir(UNSCANNED) / ".zarray"
    _edit_json(z, lambda d: d.__setitem__("dtype", "<c32"))
    c.fails(EXIT_UNSUPPORTED, [UNSCANNED])


def test_unknown_codec(make_fixture, tmp_path):
    c = Case(make_fixture, tmp_path, "plain-zarr3")
    z = c.array_dir(UNSCANNED) / "zarr.json"

    def blosc(d):
        inner = d["codecs"][0]["configuration"]["codecs"]
        inner[-1] = {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5,
                                                        "shuffle": "shuffle", "typesize": 4,
                                                        "blocksize": 0}}
    _edit_json(z, blosc)
    c.fails(EXIT_UNSUPPORTED, [UNSCANNED])


def test_unknown_compressor_zarr2(make_fixture, tmp_path):
    c = Case(make_fixture, tmp_path, "plain-zarr2")
    z = c.array_dir(UNSCANNED) / ".zarray"
    _edit_json(z, lambda d: d.__setitem__("compressor", {"id": "lz4", "acceleration": 1}))
    c.fails(EXIT_UNSUPPORTED, [UNSCANNED])


# ---- Orbax metadata damage ------------------------------------------------------------------

def test_truncated_metadata(make_fixture, tmp_path):
    c = Case(make_fixture, tmp_path, "ocdbt-zarr3")
    md = c.items / "_METADATA"
    md.write_bytes(md.read_bytes()[:100])
    c.fails(EXIT_CORRUPT, ["_METADATA"])


def test_metadata_not_json_object(make_fixture, tmp_path):
    c = Case(make_fixture, tmp_path, "plain-zarr2")
    (c.items / "_METADATA").write_text("[1, 2, 3]")
    c.fails(EXIT_CORRUPT, ["_METADATA"])


def test_sharding_garbage(make_fixture, tmp_path):
    c = Case(make_fixture, tmp_path, "ocdbt-zarr3")
    (c.items / "_sharding").write_bytes(b"{\"cGFy\": 12")
    c.fails(EXIT_CORRUPT, ["_sharding"])


# ---- unreadable input -----------------------------------------------------------------------

def test_unreadable_metadata_file(make_fixture, tmp_path):
    """A directory where _METADATA is expected (root ignores file modes, so no chmod 000)."""
    c = Case(make_fixture, tmp_path, "ocdbt-zarr3")
    md = c.items / "_METADATA"
    md.unlink()
    md.mkdir()
    c.fails(EXIT_IO, ["_METADATA"])


def test_unreadable_shard_file(make_fixture, tmp_path):
    c = Case(make_fixture, tmp_path, "plain-zarr3")
    shard = _shards(c.array_dir(SCANNED))[0]
    shard.unlink()
    shard.mkdir()
    c.fails(EXIT_IO, [SCANNED])


def test_unreadable_data_file(make_fixture, tmp_path):
    c = Case(make_fixture, tmp_path, "ocdbt-zarr3")
    files = _top_data_files(c)
    for f in files:
        f.unlink()
        f.mkdir()
    c.fails(EXIT_IO, [f.name for f in files])


def test_unreadable_file_as_other_user(make_fixture, tmp_path):
    """chmod 000 on a data file, run as nobody: permission denied is an I/O error (3)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to drop to nobody")
    # pytest's own tmp_path lives under a 0700 root directory: use a world-readable one.
    base = pathlib.Path(tempfile.mkdtemp(prefix="unroll-damaged-", dir=tmp_path.anchor + "tmp"))
    try:
        base.chmod(0o755)
        c = Case(make_fixture, base, "plain-zarr3")
        for p in [base, *base.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        shard = _shards(c.array_dir(SCANNED))[0]
        shard.chmod(0)
        c.out.mkdir()
        c.out.chmod(0o777)
        uid = 65534

        def drop():
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        line = c.fails(EXIT_IO, [SCANNED], preexec_fn=drop)
        assert "ermission" in line
    finally:
        shutil.rmtree(base, ignore_errors=True)


# ---- output that cannot be written ----------------------------------------------------------

def test_output_dir_is_a_file(make_fixture, tmp_path):
    c = Case(make_fixture, tmp_path, "ocdbt-zarr3")
    c.out.write_text("not a directory")
    before = c.out.read_text()
    res = c.run()
    assert res.returncode == EXIT_IO, res.stderr
    line = res.stderr.strip()
    assert line and "\n" not in line and str(c.out) in line, line
    assert c.out.read_text() == before


def test_output_run_dir_is_a_file(make_fixture, tmp_path):
    """base_output_directory/run_name is a regular file: the checkpoint dir cannot be made."""
    c = Case(make_fixture, tmp_path, "plain-zarr3")
    c.out.mkdir()
    (c.out / "run").write_text("a file where the run directory goes")
    res = c.run()
    line = res.stderr.strip()
    assert res.returncode == EXIT_IO, res.stderr
    assert line and "\n" not in line and str(c.out / "run") in line, line
    assert (c.out / "run").read_text() == "a file where the run directory goes"
    assert sorted(p.name for p in c.out.iterdir()) == ["run"]


def test_output_parent_not_writable_as_other_user(make_fixture, tmp_path):
    """A read-only output directory (mode 0555, run as nobody): exit 3 naming it."""
    if os.geteuid() != 0:
        pytest.skip("needs root to drop to nobody")
    base = pathlib.Path(tempfile.mkdtemp(prefix="unroll-damaged-", dir=tmp_path.anchor + "tmp"))
    try:
        base.chmod(0o755)
        c = Case(make_fixture, base, "plain-zarr2")
        for p in [base, *base.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        c.out.mkdir()
        c.out.chmod(0o555)
        uid = 65534

        def drop():
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        line = c.fails(EXIT_IO, [str(c.out)], preexec_fn=drop)
        assert "ermission" in line
        assert not any(c.out.iterdir())
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _limit_file_size(limit):
    def f():
        # Ignore SIGXFSZ so an over-limit write fails with EFBIG instead of killing the process.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return f


@pytest.mark.parametrize("layout", ["ocdbt-zarr3", "plain-zarr2"])
@pytest.mark.parametrize("limit", [1, 700, 3000])
def test_disk_full(make_fixture, tmp_path, layout, limit):
    """RLIMIT_FSIZE: every write past `limit` bytes of a file fails (EFBIG), as on a full disk.
    The run fails with an I/O error naming what it was writing, and removes its partial output."""
    c = Case(make_fixture, tmp_path, layout)
    c.fails(EXIT_IO, [str(c.out), "run/checkpoints", ".unroll-tmp", "_METADATA", "d/",
                      "manifest", "zarr", "_sharding"], preexec_fn=_limit_file_size(limit))


def test_disk_full_keeps_earlier_output(make_fixture, tmp_path):
    c = Case(make_fixture, tmp_path, "ocdbt-zarr3")
    ok = c.run()
    assert ok.returncode == 0, ok.stderr
    ckpt = c.out / "run" / "checkpoints"
    before = tree_hash(ckpt)
    res = c.run(preexec_fn=_limit_file_size(2000))
    assert res.returncode == EXIT_IO, res.stderr
    assert tree_hash(ckpt) == before
    assert not list(c.out.rglob("*.unroll-tmp"))


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_small_tmpfs(make_fixture, tmp_path):
    """A real full disk: a 64 KiB tmpfs as the output directory."""
    c = Case(make_fixture, tmp_path, "plain-zarr3")
    c.out.mkdir()
    mnt = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(c.out)],
                         capture_output=True, text=True)
    if mnt.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mnt.stderr.strip()}")
    try:
        c.fails(EXIT_IO, [str(c.out), "No space", "space"])
        assert not any(c.out.iterdir())
    finally:
        subprocess.run(["umount", str(c.out)], check=False)
