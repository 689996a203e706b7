"""Confinement and special files, on real Orbax fixtures (issue 12, items 5, 6 and 11).

`unroll` reads nothing from outside the checkpoint's root (the item directory; for a LoRA
adapter's adapter_config.json, the adapter's directory): a symbolic link inside the input
that leads out of it is refused, one that stays inside is followed, and the root itself may
be reached through links. A FIFO or device where a file is expected is refused at once,
never waited on. Each failure follows test_damaged.py's contract: the documented exit
status, one stderr line naming the file, nothing written, the input unchanged.
"""
import hashlib
import os
import pathlib
import shutil
import signal
import stat
import subprocess

import pytest

from test_damaged import (EXIT_IO, EXIT_USAGE, SCANNED, UNSCANNED, Case, _shards,
                          _top_data_files)

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONFIG = ROOT / "tests" / "data" / "example" / "unroll.yml"
BIN = os.environ.get("UNROLL_BIN", str(ROOT / "build" / "src" / "cli" / "unroll"))
# A run on these fixtures takes well under a second; one that waits on a FIFO never ends.
PROMPT_S = 20


def _alarm():
    """preexec_fn: the run is killed by SIGALRM (exit -14) if it is still there after
    PROMPT_S seconds, i.e. if it blocked on a FIFO."""
    signal.alarm(PROMPT_S)


def _outside(c, path, name="outside"):
    """Move `path` out of the checkpoint (next to it, in a directory of its own) and leave a
    relative symbolic link to it in its place: the bytes are exactly what Orbax wrote, only
    their place is wrong."""
    away = c.input_root.parent / name
    away.mkdir(exist_ok=True)
    target = away / (path.name + "." + hashlib.sha1(str(path).encode()).hexdigest()[:8])
    shutil.move(str(path), str(target))
    path.symlink_to(os.path.relpath(target, path.parent))
    return target


def _fifo(path):
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()
    os.mkfifo(path)


def _outputs(out):
    """Hash of what a run wrote (names, modes and bytes), less the files that hold the time
    of the run (the OCDBT manifest's version has a commit time; the data files it points
    at are compared)."""
    h = hashlib.sha256()
    root = out / "run" / "checkpoints"
    for p in sorted(root.rglob("*")):
        if p.name in ("_CHECKPOINT_METADATA", "commit_success.txt", "manifest.ocdbt"):
            continue
        h.update(f"{p.relative_to(root)}\0{p.lstat().st_mode:o}\0".encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


# ---- symbolic links out of the checkpoint ----------------------------------------------------

def test_chunk_linked_out_of_the_checkpoint(make_fixture, tmp_path):
    """A zarr shard replaced by a link to a (valid) file outside the item directory: refused,
    never copied into the output."""
    c = Case(make_fixture, tmp_path, "plain-zarr3")
    shard = _shards(c.array_dir(SCANNED))[0]
    _outside(c, shard)
    line = c.fails(EXIT_IO, [str(shard)], preexec_fn=_alarm)
    assert "symbolic link" in line


def test_zarr2_chunk_linked_out_of_the_checkpoint(make_fixture, tmp_path):
    c = Case(make_fixture, tmp_path, "plain-zarr2")
    d = c.array_dir(UNSCANNED)
    chunk = sorted(p for p in d.iterdir() if p.name[0].isdigit())[0]
    _outside(c, chunk)
    line = c.fails(EXIT_IO, [str(chunk)], preexec_fn=_alarm)
    assert "symbolic link" in line


def test_data_file_linked_out_of_the_checkpoint(make_fixture, tmp_path):
    """An OCDBT data file (read through its database's table) linked out of the root."""
    c = Case(make_fixture, tmp_path, "ocdbt-zarr3")
    files = _top_data_files(c)
    for f in files:
        _outside(c, f)
    line = c.fails(EXIT_IO, [f.name for f in files], preexec_fn=_alarm)
    assert "symbolic link" in line


def test_data_dir_linked_out_of_the_checkpoint(make_fixture, tmp_path):
    """The whole d/ directory is a link to a copy outside: each file is reached through a
    link that leaves the root."""
    c = Case(make_fixture, tmp_path, "ocdbt-zarr2")
    _outside(c, c.items / "d")
    line = c.fails(EXIT_IO, ["/d/"], preexec_fn=_alarm)
    assert "symbolic link" in line


@pytest.mark.parametrize("name", ["_METADATA", "_sharding", "manifest.ocdbt"])
def test_metadata_file_linked_out_of_the_checkpoint(make_fixture, tmp_path, name):
    c = Case(make_fixture, tmp_path, "ocdbt-zarr3")
    _outside(c, c.items / name)
    line = c.fails(EXIT_IO, [name], preexec_fn=_alarm)
    assert "symbolic link" in line


def test_absolute_link_is_refused(make_fixture, tmp_path):
    """An absolute link is refused even when it names a file inside the root (openat2's
    RESOLVE_BENEATH): where it leads depends on the machine, not on the checkpoint."""
    c = Case(make_fixture, tmp_path, "plain-zarr3")
    md = c.items / "_METADATA"
    keep = c.items / "metadata.real"
    md.rename(keep)
    md.symlink_to(keep.resolve())
    c.fails(EXIT_IO, ["_METADATA"], preexec_fn=_alarm)


# ---- symbolic links that stay inside are followed ---------------------------------------------

def _inside(path, items):
    """Move `path` to items/.moved/ and link to it relatively: a link that stays inside."""
    stash = items / ".moved"
    stash.mkdir(exist_ok=True)
    target = stash / (path.name + "." + hashlib.sha1(str(path).encode()).hexdigest()[:8])
    shutil.move(str(path), str(target))
    path.symlink_to(os.path.relpath(target, path.parent))


@pytest.mark.parametrize("layout", ["ocdbt-zarr3", "plain-zarr3", "plain-zarr2"])
def test_links_inside_the_checkpoint_are_followed(make_fixture, tmp_path, layout):
    """Chunks, data files, the data directory and the metadata files as relative links that
    stay inside the item directory, and the item directory reached through a linked step
    directory: the run succeeds and writes exactly what it writes from the plain copy."""
    plain = Case(make_fixture, tmp_path / "plain", layout)
    res = plain.run(preexec_fn=_alarm)
    assert res.returncode == 0, res.stderr
    want = _outputs(plain.out)

    c = Case(make_fixture, tmp_path / "linked", layout)
    for name in ("_METADATA", "_sharding"):
        _inside(c.items / name, c.items)
    if layout.startswith("ocdbt"):
        _inside(c.items / "d", c.items)
    else:
        _inside(_shards(c.array_dir(SCANNED))[0] if layout.endswith("3")
                else sorted(p for p in c.array_dir(UNSCANNED).iterdir()
                            if p.name[0].isdigit())[0], c.items)
    step = c.items.parent
    linked_step = step.parent / "latest"
    linked_step.symlink_to(step.name)
    res = c.run(preexec_fn=_alarm, items=linked_step / "items")
    assert res.returncode == 0, res.stderr
    assert _outputs(c.out) == want


# ---- LoRA adapter_config.json -------------------------------------------------------------------

def _lora_case(make_fixture, tmp_path):
    c = Case(make_fixture, tmp_path, "ocdbt-zarr3")
    lora = make_fixture("lora", "ocdbt-zarr3", "float32")
    adapters = c.input_root / "adapters"
    shutil.copytree(lora.root, adapters, symlinks=True)
    return c, adapters, sorted(p for p in adapters.iterdir() if p.is_dir())


def _lora_args(c, adapters):
    return [f"lora_input_adapters_path={adapters}", "pure_nnx=false"]


def test_lora_adapter_config_linked_to_a_private_file(make_fixture, tmp_path):
    """adapter_config.json linked to a private (0600) file elsewhere: refused, not published
    (world-readable or otherwise)."""
    c, adapters, ids = _lora_case(make_fixture, tmp_path)
    secret = tmp_path / "private" / "secret.json"
    secret.parent.mkdir()
    secret.write_text('{"r": 2, "note": "private"}')
    secret.chmod(0o600)
    cfg = ids[-1] / "adapter_config.json"
    cfg.unlink()
    cfg.symlink_to(os.path.relpath(secret, cfg.parent))
    line = c.fails(EXIT_IO, [str(cfg)], extra=_lora_args(c, adapters), preexec_fn=_alarm)
    assert "symbolic link" in line
    assert not c.out.exists() or not list(c.out.rglob("adapter_config.json"))


def test_lora_adapter_config_keeps_its_permissions(make_fixture, tmp_path):
    """A private adapter_config.json stays private in the output; a public one stays as it
    is (less the umask); a link to a file inside the adapter's directory is followed."""
    c, adapters, ids = _lora_case(make_fixture, tmp_path)
    private, public = ids[0] / "adapter_config.json", ids[-1] / "adapter_config.json"
    private.chmod(0o600)
    (ids[-1] / "configs").mkdir()
    public.rename(ids[-1] / "configs" / "adapter.json")
    public.symlink_to("configs/adapter.json")
    (ids[-1] / "configs" / "adapter.json").chmod(0o644)
    want = {p.parent.name: p.read_bytes() for p in (private, public)}

    def run():
        os.umask(0o022)
        _alarm()
    res = c.run(extra=_lora_args(c, adapters), preexec_fn=run)
    assert res.returncode == 0, res.stderr
    loras = c.out / "run" / "checkpoints" / "loras"
    out_private = loras / ids[0].name / "adapter_config.json"
    out_public = loras / ids[-1].name / "adapter_config.json"
    assert stat.S_IMODE(out_private.stat().st_mode) == 0o600
    assert stat.S_IMODE(out_public.stat().st_mode) == 0o644
    assert not out_public.is_symlink()
    assert out_private.read_bytes() == want[ids[0].name]
    assert out_public.read_bytes() == want[ids[-1].name]


# ---- FIFOs and devices where a file is expected ------------------------------------------------

@pytest.mark.parametrize("layout,name", [
    ("ocdbt-zarr3", "_METADATA"),
    ("ocdbt-zarr3", "_sharding"),
    ("ocdbt-zarr3", "manifest.ocdbt"),
    ("plain-zarr2", "_METADATA"),
])
def test_fifo_as_metadata_file(make_fixture, tmp_path, layout, name):
    c = Case(make_fixture, tmp_path, layout)
    _fifo(c.items / name)
    line = c.fails(EXIT_IO, [name], preexec_fn=_alarm)
    assert "FIFO" in line


def test_fifo_as_data_file(make_fixture, tmp_path):
    c = Case(make_fixture, tmp_path, "ocdbt-zarr3")
    files = _top_data_files(c)
    for f in files:
        _fifo(f)
    line = c.fails(EXIT_IO, [f.name for f in files], preexec_fn=_alarm)
    assert "FIFO" in line


def test_fifo_as_chunk(make_fixture, tmp_path):
    c = Case(make_fixture, tmp_path, "plain-zarr3")
    shard = _shards(c.array_dir(SCANNED))[0]
    _fifo(shard)
    line = c.fails(EXIT_IO, [str(shard), SCANNED], preexec_fn=_alarm)
    assert "FIFO" in line


def test_fifo_as_zarr2_chunk(make_fixture, tmp_path):
    c = Case(make_fixture, tmp_path, "plain-zarr2")
    chunk = sorted(p for p in c.array_dir(UNSCANNED).iterdir() if p.name[0].isdigit())[0]
    _fifo(chunk)
    line = c.fails(EXIT_IO, [str(chunk), UNSCANNED], preexec_fn=_alarm)
    assert "FIFO" in line


def test_device_as_chunk(make_fixture, tmp_path):
    """/dev/zero linked in as a zarr v2 chunk: outside the root, so refused before anything
    reads it; a character device inside the root (made with mknod where allowed) is refused
    as not a regular file."""
    c = Case(make_fixture, tmp_path, "plain-zarr2")
    chunk = sorted(p for p in c.array_dir(UNSCANNED).iterdir() if p.name[0].isdigit())[0]
    chunk.unlink()
    try:
        os.mknod(chunk, 0o644 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero
    except OSError:
        chunk.symlink_to("/dev/zero")
    c.fails(EXIT_IO, [str(chunk), UNSCANNED], preexec_fn=_alarm)


# ---- the config -----------------------------------------------------------------------------

def _config_run(*args):
    return subprocess.run([BIN, *map(str, args)], capture_output=True, text=True,
                          timeout=PROMPT_S + 10, preexec_fn=_alarm)


def _usage_error_naming(res, path):
    line = res.stderr.strip()
    assert res.returncode == EXIT_USAGE, f"exit {res.returncode}, stderr: {res.stderr!r}"
    assert line and "\n" not in line, res.stderr
    assert str(path) in line, line
    return line


def test_fifo_as_config(tmp_path):
    fifo = tmp_path / "base.yml"
    os.mkfifo(fifo)
    line = _usage_error_naming(_config_run(fifo), fifo)
    assert "FIFO" in line


def test_fifo_as_base_config(tmp_path):
    fifo = tmp_path / "parent.yml"
    os.mkfifo(fifo)
    cfg = tmp_path / "child.yml"
    cfg.write_text("base_config: parent.yml\nrun_name: x\n")
    line = _usage_error_naming(_config_run(cfg), fifo)
    assert "FIFO" in line


def test_fifo_as_model_file(tmp_path):
    shutil.copy(CONFIG, tmp_path / "base.yml")
    (tmp_path / "models").mkdir()
    fifo = tmp_path / "models" / "tiny.yml"
    os.mkfifo(fifo)
    line = _usage_error_naming(_config_run(tmp_path / "base.yml", "model_name=tiny"), fifo)
    assert "FIFO" in line


def test_dev_zero_as_config():
    line = _usage_error_naming(_config_run("/dev/zero"), "/dev/zero")
    assert "device" in line


def test_directory_as_config(tmp_path):
    line = _usage_error_naming(_config_run(tmp_path), tmp_path)
    assert "directory" in line


def test_directory_as_base_config(tmp_path):
    (tmp_path / "parent.yml").mkdir()
    cfg = tmp_path / "child.yml"
    cfg.write_text("base_config: parent.yml\n")
    _usage_error_naming(_config_run(cfg), "parent.yml")
