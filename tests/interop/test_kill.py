"""SIGKILL `unroll` at many points of a run: the destination holds either nothing new (the
earlier output untouched, or nothing at all) or a complete checkpoint that Orbax restores and
that equals the reference. A later run recovers from whatever a killed run left behind.

The run is made long enough to hit (a few hundred ms) by unrolling a MaxText checkpoint with
larger dimensions than the other interop fixtures, written once by real Orbax and cached.
Kill points are spread evenly over a measured run, with jitter, from process start to past
the end.
"""
import dataclasses
import hashlib
import os
import pathlib
import random
import shutil
import signal
import subprocess
import time

import pytest

import maxtext_fixtures
import reference

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONFIG = ROOT / "tests" / "data" / "example" / "unroll.yml"
BIG = dataclasses.replace(maxtext_fixtures.DIMS, vocab=2048, emb=256, heads=8, kv_heads=4,
                          head_dim=32, mlp=2048, layers=4)
KILLS = int(os.environ.get("UNROLL_KILL_POINTS", "30"))
# Files that record the time of the run (everything else is byte-for-byte reproducible).
TIMED = ("commit_success.txt", "_CHECKPOINT_METADATA", "manifest.ocdbt")


def _cached_fixture(fixture_cache, dims, tag):
    """A linen checkpoint (ocdbt + zarr3, float32) with the given dimensions, cached."""
    key = hashlib.sha256(repr(dims).encode()).hexdigest()[:10]
    base = pathlib.Path(fixture_cache) / f"{tag}-linen-{key}-{maxtext_fixtures._source_hash()}"
    saved = maxtext_fixtures.DIMS
    maxtext_fixtures.DIMS = dims
    try:
        if not (base / "fixture.json").is_file():
            tmp = base.with_name(base.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            maxtext_fixtures.write_checkpoint("linen", "ocdbt-zarr3", "float32", tmp)
            os.rename(tmp, base)
        info = maxtext_fixtures.describe("linen", "ocdbt-zarr3", "float32", base)
    finally:
        maxtext_fixtures.DIMS = saved
    return info


@pytest.fixture(scope="module")
def big_fixture(fixture_cache):
    return _cached_fixture(fixture_cache, BIG, "kill")


def _args(unroll_bin, info, out, extra=()):
    cfg = info.config
    return [str(unroll_bin), str(CONFIG), "-q", f"{info.input_key}={info.items}",
            f"base_output_directory={out}", "run_name=run",
            f"base_num_decoder_layers={cfg['num_decoder_layers']}",
            f"param_scan_axis={cfg['param_scan_axis']}", "scan_layers=true",
            "force_unroll=true", "pure_nnx=false", f"decoder_block={cfg['decoder_block']}",
            "checkpoint_storage_use_ocdbt=true", "checkpoint_storage_use_zarr3=true", *extra]


def _files(d):
    """Relative path -> bytes of every file under d, the time-stamped ones excluded."""
    d = pathlib.Path(d)
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*"))
            if p.is_file() and p.name not in TIMED}


def _names(d):
    d = pathlib.Path(d)
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


def _tree_hash(root):
    h = hashlib.sha256()
    root = pathlib.Path(root)
    for p in sorted(root.rglob("*")):
        h.update(str(p.relative_to(root)).encode() + b"\0")
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


def _kill_at(args, delay):
    """Start unroll, SIGKILL it after `delay` seconds; return whether it had already exited."""
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(delay)
    finished = proc.poll() is not None
    if not finished:
        proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    if finished:
        assert proc.returncode == 0, err
    return finished


def _delays(duration, n, seed):
    rng = random.Random(seed)
    span = duration * 1.15
    return [span * (k + rng.random()) / n for k in range(n)]


@pytest.fixture(scope="module")
def good_run(big_fixture, unroll_bin, tmp_path_factory):
    """A complete uninterrupted run: its files (checked against the Python reference once),
    and how long it took."""
    out = tmp_path_factory.mktemp("kill-good")
    t = time.monotonic()
    res = subprocess.run(_args(unroll_bin, big_fixture, out), capture_output=True, text=True,
                         timeout=300)
    duration = time.monotonic() - t
    assert res.returncode == 0, res.stderr
    items = out / "run" / "checkpoints" / "0" / "items"
    reference.check_unrolled(items, reference.reference_for(big_fixture, pure_nnx=False))
    return {"files": _files(out / "run" / "checkpoints"), "duration": duration,
            "names": _names(out / "run" / "checkpoints")}


def _is_complete(ckpt, good):
    """The destination holds the complete checkpoint of a good run (same files, same bytes
    apart from the timestamps, and the time-stamped files present)."""
    return _names(ckpt) == good["names"] and _files(ckpt) == good["files"]


def test_run_is_long_enough_to_kill(good_run):
    assert good_run["duration"] > 0.05, good_run["duration"]


def test_kill_without_earlier_output(big_fixture, unroll_bin, good_run, tmp_path):
    input_hash = _tree_hash(big_fixture.root)
    outcomes = {"nothing": 0, "complete": 0}
    restored = False
    for i, delay in enumerate(_delays(good_run["duration"], KILLS, seed=1)):
        out = tmp_path / f"k{i}"
        _kill_at(_args(unroll_bin, big_fixture, out), delay)
        ckpt = out / "run" / "checkpoints"
        # The publication makes checkpoints/ and then renames the step into it: a kill between
        # the two leaves it empty, which holds no checkpoint (no step): nothing was published.
        if not ckpt.exists() or not any(ckpt.iterdir()):
            outcomes["nothing"] += 1
            continue
        assert _is_complete(ckpt, good_run), f"kill at {delay:.3f}s left a partial checkpoint"
        outcomes["complete"] += 1
        if not restored:  # Orbax restores it and it equals the reference
            reference.check_unrolled(ckpt / "0" / "items",
                                     reference.reference_for(big_fixture, pure_nnx=False))
            restored = True
        shutil.rmtree(out)
    assert outcomes["nothing"] > 0, outcomes
    assert _tree_hash(big_fixture.root) == input_hash


def test_kill_with_earlier_output(big_fixture, unroll_bin, good_run, tmp_path):
    """An earlier output is replaced only once the new one is complete: after any kill the
    destination holds the earlier checkpoint or the complete new one, never neither."""
    out = tmp_path / "out"
    ckpt = out / "run" / "checkpoints"
    res = subprocess.run(_args(unroll_bin, big_fixture, out), capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    input_hash = _tree_hash(big_fixture.root)
    for i, delay in enumerate(_delays(good_run["duration"], KILLS, seed=2)):
        before = _tree_hash(ckpt)
        _kill_at(_args(unroll_bin, big_fixture, out), delay)
        assert ckpt.is_dir(), f"kill at {delay:.3f}s left no checkpoint at the destination"
        if _tree_hash(ckpt) != before:
            assert _is_complete(ckpt, good_run), f"kill at {delay:.3f}s: partial checkpoint"
    # Whatever the kills left behind, a clean run succeeds, is complete, and tidies up.
    res = subprocess.run(_args(unroll_bin, big_fixture, out), capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    assert _is_complete(ckpt, good_run)
    reference.check_unrolled(ckpt / "0" / "items",
                             reference.reference_for(big_fixture, pure_nnx=False))
    leftovers = [p.name for p in ckpt.parent.iterdir() if p.name != "checkpoints"]
    assert not leftovers, leftovers
    assert _tree_hash(big_fixture.root) == input_hash


def test_kill_single_thread(big_fixture, unroll_bin, good_run, tmp_path):
    """Same with one worker thread (a longer, different schedule of writes)."""
    out = tmp_path / "out"
    ckpt = out / "run" / "checkpoints"
    for i, delay in enumerate(_delays(good_run["duration"] * 1.5, KILLS // 2, seed=3)):
        _kill_at(_args(unroll_bin, big_fixture, out, extra=["--threads", "1"]), delay)
        # an empty checkpoints/ (killed between its mkdir and the step's rename) holds no step:
        # nothing was published, as in test_kill_without_earlier_output
        if ckpt.exists() and any(ckpt.iterdir()):
            assert _is_complete(ckpt, good_run), f"kill at {delay:.3f}s: partial checkpoint"
        shutil.rmtree(ckpt, ignore_errors=True)


# Wide MLP weights: shards of 2 MiB and more, which unroll maps rather than reads.
WIDE = dataclasses.replace(maxtext_fixtures.DIMS, vocab=256, emb=512, heads=4, kv_heads=4,
                           head_dim=32, mlp=4096, layers=2)


def test_input_shrinks_while_mapped(fixture_cache, unroll_bin, tmp_path):
    """Large values are read through mappings of the input's data files; a file that shrinks
    under a mapping raises SIGBUS. Made deterministic with gdb: stop right after the first
    mapping, cut every data file of a copy of the input to nothing, go on. unroll reports the
    file in one line, exits with the I/O status and leaves no checkpoint behind; a later run
    on the intact input succeeds."""
    gdb = shutil.which("gdb")
    if gdb is None:
        pytest.skip("gdb is not installed (scripts/setup.sh --tests installs it)")
    big_fixture = _cached_fixture(fixture_cache, WIDE, "wide")
    copy = tmp_path / "input"
    shutil.copytree(big_fixture.items.parents[2], copy)
    items = copy / big_fixture.items.relative_to(big_fixture.items.parents[2])
    info = dataclasses.replace(big_fixture, items=items)
    data_files = sorted(p for p in items.rglob("*") if p.is_file() and p.parent.name == "d")
    assert data_files
    cut = "; ".join(f"truncate -s 0 '{p}'" for p in data_files)
    out = tmp_path / "out"
    script = tmp_path / "gdb.cmds"
    script.write_text("set pagination off\nset confirm off\n"
                      "handle SIGBUS nostop noprint pass\n"
                      "break ur_fs_map_range\nrun\nfinish\n"
                      f"shell {cut}\ndelete\ncontinue\n")
    res = subprocess.run([gdb, "-q", "-batch", "-x", str(script), "--args",
                          *_args(unroll_bin, info, out, ["--threads", "1"])],
                         capture_output=True, text=True, timeout=300)
    lines = [l for l in res.stderr.splitlines() + res.stdout.splitlines()
             if l.startswith("unroll: ")]
    assert len(lines) == 1, res.stdout + res.stderr
    assert "SIGBUS" in lines[0] and "/d/" in lines[0], lines
    assert "exited with code 03" in res.stdout, res.stdout
    assert not (out / "run" / "checkpoints").exists()
    ok = subprocess.run(_args(unroll_bin, big_fixture, out), capture_output=True, text=True,
                        timeout=300)
    assert ok.returncode == 0, ok.stderr
    reference.check_unrolled(out / "run" / "checkpoints" / "0" / "items",
                             reference.reference_for(big_fixture, pure_nnx=False))
