"""A run continued after its input changed (issue 25, item 2): the run identity (run.txt) knows
the input by every value's size and version (local: mtime and inode; S3: ETag; GCS:
generation) and _METADATA's
content, and the config by its content, so a rerun (--resume, another process of the run) over
an input rewritten with other values -- same tree, so the same _METADATA -- is refused with
exit 2 naming what changed, and nothing is published; it never mixes the two inputs' values.

The inputs are real Orbax checkpoints: A, and B = A's state with every float negated, saved by
Orbax the same way (OCDBT, and plain zarr). The oracle: stock Orbax restoring the output, bit
for bit equal to a fresh conversion of the input it came from."""
import hashlib
import os
import pathlib
import shutil
import signal
import subprocess
import time
import uuid

import jax
import numpy as np
import pytest

import maxtext_fixtures
from gcs_fixtures import upload_tree, use_emulator
from gcs_servers import FakeGcs
import reference
import s3_fixtures
from test_kill import BIG, CONFIG, _args

BUCKET = "unroll-ident"
s3 = s3_fixtures.server_fixture(BUCKET)


def _negated(x):
    if isinstance(x, (np.ndarray, jax.Array)) and np.issubdtype(x.dtype, np.floating):
        return -x   # every value's bits differ (its sign), with no floating-point exception
    return x


def _variant(fixture_cache, layout, negate):
    """The BIG linen checkpoint, every float negated if `negate`, saved by Orbax in `layout`
    (cached): (FixtureInfo, its `checkpoints` directory)."""
    key = hashlib.sha256(repr((BIG, layout, negate)).encode()).hexdigest()[:10]
    base = (pathlib.Path(fixture_cache)
            / f"ident-{layout}-{key}-{maxtext_fixtures._source_hash()}")
    saved = maxtext_fixtures.DIMS
    maxtext_fixtures.DIMS = BIG
    try:
        if not (base / "done").is_file():
            tmp = base.with_name(base.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            state, b, mesh_shape, _, step = maxtext_fixtures._build("linen", "float32")
            if negate:
                state = jax.tree.map(_negated, state)
            use_ocdbt, use_zarr3 = maxtext_fixtures.LAYOUTS[layout]
            maxtext_fixtures._save(tmp / "checkpoints", step, state, b.specs, mesh_shape,
                                   use_ocdbt, use_zarr3, maxtext_fixtures.MAXTEXT_CHUNK_BYTES)
            (tmp / "done").write_text("")
            shutil.rmtree(base, ignore_errors=True)
            tmp.rename(base)
        info = maxtext_fixtures.describe("linen", layout, "float32", base)
    finally:
        maxtext_fixtures.DIMS = saved
    return info, base / "checkpoints"


def _with_input(args, info, location):
    key = f"{info.input_key}="
    return [f"{key}{location}" if a.startswith(key) else a for a in args]


def _fresh(unroll_bin, info, location, out, env=None):
    """A fresh single-process conversion of the input at `location`: what Orbax restores."""
    subprocess.run(_with_input(_args(unroll_bin, info, out, ["-j2"]), info, location),
                   check=True, env=env, timeout=600)
    return reference.restore(out / "run" / "checkpoints" / "0" / "items")


def _kill_after_first_commit(args, staging, env=None):
    v = subprocess.Popen(args, stderr=subprocess.PIPE, env=env)
    progress = staging / "shares" / "0.progress"
    deadline = time.time() + 120
    while not progress.exists() and v.poll() is None and time.time() < deadline:
        time.sleep(0.002)
    v.send_signal(signal.SIGKILL)
    v.communicate()
    assert v.returncode == -signal.SIGKILL, "the run ended before its first commit"


def _place(src, dst):
    """The checkpoint tree src copied to dst, in place of whatever dst held."""
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)


@pytest.fixture(scope="module")
def inputs(fixture_cache):
    """layout -> (info, A's checkpoints dir, B's checkpoints dir)."""
    out = {}
    for layout in ("ocdbt-zarr3", "plain-zarr3"):
        info, a = _variant(fixture_cache, layout, False)
        _, b = _variant(fixture_cache, layout, True)
        step = f"{info.step}/items/_METADATA"
        # the point of the test: the tree metadata cannot tell A from B
        assert (a / step).read_bytes() == (b / step).read_bytes()
        out[layout] = (info, a, b)
    return out


def _resume_args(unroll_bin, info, location, out):
    return _with_input(_args(unroll_bin, info, out, ["-j1", "--resume", "--commit-every",
                                                     "256K"]), info, location)


@pytest.mark.parametrize("layout", ["ocdbt-zarr3", "plain-zarr3"])
def test_changed_local_input_is_refused(unroll_bin, inputs, layout, tmp_path):
    info, a, b = inputs[layout]
    root = tmp_path / "in" / "checkpoints"
    items = root / str(info.step) / "items"
    _place(a, root)
    out = tmp_path / "out"
    staging = out / "run" / "checkpoints.unroll-multi"
    args = _resume_args(unroll_bin, info, items, out)
    _kill_after_first_commit(args, staging)
    _place(b, root)   # Orbax's B where A was: same path, same tree, other values
    r = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert r.returncode == 2, r.stderr
    assert "input changed since the run started" in r.stderr, r.stderr
    assert str(staging) in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert not (out / "run" / "checkpoints").exists()
    # started over (the hint), it converts B alone: equal to a fresh conversion of B
    shutil.rmtree(staging)
    r = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    reference.compare_trees(reference.restore(out / "run" / "checkpoints" / "0" / "items"),
                            _fresh(unroll_bin, info, items, tmp_path / "fresh"),
                            "the rerun over B")


@pytest.mark.parametrize("layout", ["ocdbt-zarr3", "plain-zarr3"])
def test_unchanged_local_input_continues(unroll_bin, inputs, layout, tmp_path):
    """The identity is stable: the rerun over the same input continues the killed run, and
    publishes what a fresh conversion does."""
    info, a, _ = inputs[layout]
    items = a / str(info.step) / "items"
    out = tmp_path / "out"
    args = _resume_args(unroll_bin, info, items, out)
    _kill_after_first_commit(args, out / "run" / "checkpoints.unroll-multi")
    r = subprocess.run([x for x in args if x != "-q"], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    assert "continuing a killed run of it" in r.stderr, r.stderr
    reference.compare_trees(reference.restore(out / "run" / "checkpoints" / "0" / "items"),
                            _fresh(unroll_bin, info, items, tmp_path / "fresh"),
                            "the resumed run")


def _s3_replace(s3, local, prefix):
    """The objects under `prefix` replaced by the tree `local` (deleted first, as a new save
    into the same location leaves no object of the old one)."""
    for key in s3.list(BUCKET, prefix):
        assert s3.request("DELETE", f"/{BUCKET}/{prefix}/{key}")[0] in (200, 204)
    assert s3.upload_tree(local, BUCKET, prefix) > 0


def test_changed_s3_input_is_refused(unroll_bin, inputs, s3, tmp_path):
    """An input in a bucket, known by its objects' sizes and ETags from one listing: rewritten
    between the killed run and its rerun, the rerun is refused; unchanged, it continues."""
    info, a, b = inputs["ocdbt-zarr3"]
    prefix = f"in-{uuid.uuid4().hex[:8]}/checkpoints"
    url = f"s3://{BUCKET}/{prefix}/{info.step}/items"
    _s3_replace(s3, a, prefix)
    env = s3.env()
    # unchanged: continued
    out = tmp_path / "same"
    args = _resume_args(unroll_bin, info, url, out)
    _kill_after_first_commit(args, out / "run" / "checkpoints.unroll-multi", env)
    r = subprocess.run([x for x in args if x != "-q"], capture_output=True, text=True,
                       env=env, timeout=600)
    assert r.returncode == 0 and "continuing a killed run of it" in r.stderr, r.stderr
    # changed: refused, nothing published
    out = tmp_path / "changed"
    staging = out / "run" / "checkpoints.unroll-multi"
    args = _resume_args(unroll_bin, info, url, out)
    _kill_after_first_commit(args, staging, env)
    _s3_replace(s3, b, prefix)
    r = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 2, r.stderr
    assert "input changed since the run started" in r.stderr, r.stderr
    assert str(staging) in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert not (out / "run" / "checkpoints").exists()
    shutil.rmtree(staging)
    r = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    reference.compare_trees(reference.restore(out / "run" / "checkpoints" / "0" / "items"),
                            _fresh(unroll_bin, info, url, tmp_path / "fresh", env),
                            "the rerun over B in the bucket")


def test_changed_gcs_input_is_refused(unroll_bin, inputs, tmp_path, monkeypatch):
    """A plain-zarr input in GCS (fake-gcs-server), known by its objects' sizes and
    generations from one listing: rewritten under the same names between two processes of a
    run, the second is refused naming a changed object, and nothing is published."""
    info, a, b = inputs["plain-zarr3"]
    with FakeGcs() as server:
        server.create_bucket(BUCKET)
        use_emulator(monkeypatch, server.url)
        env = {k: v for k, v in os.environ.items() if k != "UNROLL_GCS_ENDPOINT"}
        env["STORAGE_EMULATOR_HOST"] = server.url
        assert upload_tree(a, BUCKET, "in/checkpoints") > 0
        url = f"gs://{BUCKET}/in/checkpoints/{info.step}/items"
        out = tmp_path / "out"
        args = _with_input(_args(unroll_bin, info, out, ["-j1", "--process-count", "2"]), info,
                           url)
        subprocess.run(args + ["--process-index", "0"], check=True, env=env, timeout=600)
        assert upload_tree(b, BUCKET, "in/checkpoints") > 0   # the same names, new generations
        r = subprocess.run(args + ["--process-index", "1"], capture_output=True, text=True,
                           env=env, timeout=600)
    assert r.returncode == 2, r.stderr
    assert "input changed since the run started: " in r.stderr, r.stderr
    assert "/c/" in r.stderr and r.stderr.count("\n") == 1, r.stderr   # a chunk object named
    assert not (out / "run" / "checkpoints").exists()


def test_config_edited_between_processes_is_refused(unroll_bin, inputs, tmp_path):
    """The config is known by its content, not its path: edited (same path) between two
    processes of a run so that it converts differently, the second process is refused naming
    it (before, it converted its share by the other config and the finish was stuck on shares
    from different plans); with the content put back, the run completes."""
    info, a, _ = inputs["ocdbt-zarr3"]
    items = a / str(info.step) / "items"
    cfg = tmp_path / "unroll.yml"
    text = CONFIG.read_text()
    cfg.write_text(text)
    out = tmp_path / "out"
    args = _with_input(_args(unroll_bin, info, out), info, items)
    args = [str(cfg) if x == str(CONFIG) else x for x in args
            if x != "checkpoint_storage_use_zarr3=true"]
    assert str(cfg) in args
    subprocess.run(args + ["--process-count", "2", "--process-index", "0"], check=True,
                   timeout=600)
    edited = text.replace("checkpoint_storage_use_zarr3: true", "checkpoint_storage_use_zarr3: false")
    assert edited != text
    cfg.write_text(edited)
    second = args + ["--process-count", "2", "--process-index", "1"]
    r = subprocess.run(second, capture_output=True, text=True, timeout=600)
    assert r.returncode == 2, r.stderr
    assert "the config file unroll.yml (content)" in r.stderr, r.stderr
    assert not (out / "run" / "checkpoints").exists()
    cfg.write_text(text)
    r = subprocess.run(second, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    reference.compare_trees(reference.restore(out / "run" / "checkpoints" / "0" / "items"),
                            _fresh(unroll_bin, info, items, tmp_path / "fresh"),
                            "the multi-process run")


def _overwrite_in_place(src, dst):
    """Every file of the tree src renamed over the same path in dst (the directories stay, so
    a reader holding one open sees the new files)."""
    for f in sorted(p for p in pathlib.Path(src).rglob("*") if p.is_file()):
        target = dst / f.relative_to(src)
        shutil.copyfile(f, target.with_name(target.name + ".new"))
        target.with_name(target.name + ".new").replace(target)


def test_input_changed_while_a_share_reads_it_is_refused(unroll_bin, inputs, tmp_path):
    """The input's identity is taken again once a share is converted: a plain-zarr input
    rewritten in place while the share reads it (stopped after its first commit, B's files
    renamed over A's, continued: the rest of its chunks come from B) is not marked done,
    nothing is published, and the rerun is refused."""
    info, a, b = inputs["plain-zarr3"]
    root = tmp_path / "in" / "checkpoints"
    _place(a, root)
    out = tmp_path / "out"
    staging = out / "run" / "checkpoints.unroll-multi"
    args = _resume_args(unroll_bin, info, root / str(info.step) / "items", out)
    v = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (staging / "shares" / "0.progress").exists() and v.poll() is None \
            and time.time() < deadline:
        time.sleep(0.002)
    v.send_signal(signal.SIGSTOP)
    assert v.poll() is None, "the run ended before its first commit"
    _overwrite_in_place(b, root)
    v.send_signal(signal.SIGCONT)
    _, err = v.communicate(timeout=600)
    assert v.returncode == 2, err
    assert "input changed while share 0/1 read it" in err, err
    assert not (staging / "shares" / "0.done").exists()
    assert not (out / "run" / "checkpoints").exists()
    r = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and "input changed since the run started" in r.stderr, r.stderr
    assert not (out / "run" / "checkpoints").exists()
