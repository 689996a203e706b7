"""`unroll` with gs:// locations, end to end, against fake-gcs-server on 127.0.0.1:

- checkpoints that real Orbax saved are put into the bucket byte for byte by TensorStore's gcs
  driver (gcs_fixtures.upload_tree), in every storage layout the file tests cover;
- `unroll` converts gs -> local, local -> gs and gs -> gs;
- what it wrote to the bucket is read back by TensorStore's gcs driver (listing, bytes) and
  restored by stock Orbax, and compared bit for bit with the Python reference unroll;
- `verify`, `inspect` and `ls` take gs:// locations.
"""
import copy
import dataclasses
import pathlib
import subprocess

import pytest

import maxtext_fixtures
import reference
from gcs_fixtures import download_tree, ts_list, upload_tree
from gcs_servers import FakeGcs, clean_env
from test_unroll import run_unroll

BUCKET = "ckpts"


@pytest.fixture(scope="module")
def gcs():
    with FakeGcs() as server:
        server.create_bucket(BUCKET)
        yield server


@pytest.fixture
def env(gcs, tmp_path, monkeypatch):
    """unroll's environment: the emulator, and no ambient Google credentials."""
    e = clean_env(STORAGE_EMULATOR_HOST=gcs.url, HOME=tmp_path)
    for k in ("GOOGLE_APPLICATION_CREDENTIALS", "GCE_METADATA_HOST", "UNROLL_GCS_ENDPOINT"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.url)
    monkeypatch.setenv("HOME", str(tmp_path))
    return e


_staged = {}


def staged(gcs, info, name):
    """The fixture uploaded once per module under gs://ckpts/<name>/checkpoints; returns a copy
    of its FixtureInfo whose input key names the gs:// item dir."""
    if name not in _staged:
        n = upload_tree(gcs.url, info.root, BUCKET, f"{name}/checkpoints")
        assert n > 5
        _staged[name] = True
    rel = pathlib.Path(info.config[info.input_key]).relative_to(info.root)
    cfg = copy.deepcopy(info.config)
    cfg[info.input_key] = f"gs://{BUCKET}/{name}/checkpoints/{rel.as_posix()}"
    return dataclasses.replace(info, config=cfg)


def check_bucket_output(gcs, prefix, tmp_path, expected):
    """TensorStore lists and reads what unroll wrote under gs://ckpts/<prefix>; stock Orbax
    restores that copy; it must equal `expected` bit for bit."""
    names = ts_list(gcs.url, BUCKET, prefix)
    assert "0/items/_METADATA" in names, names
    assert "0/commit_success.txt" in names or any(n.endswith("commit_success.txt")
                                                  for n in names), names
    local = tmp_path / "from-bucket" / "checkpoints"
    download_tree(gcs.url, BUCKET, prefix, local)
    reference.check_unrolled(local / "0" / "items", expected)


@pytest.mark.parametrize("layout", tuple(maxtext_fixtures.LAYOUTS))
def test_gs_to_local(unroll_bin, make_fixture, gcs, env, tmp_path, layout):
    info = make_fixture("linen", layout, "float32")
    remote = staged(gcs, info, f"in-{layout}")
    res = run_unroll(unroll_bin, remote, tmp_path / "out")
    assert res.returncode == 0, res.stderr
    reference.check_unrolled(tmp_path / "out" / "run" / "checkpoints" / "0" / "items",
                             reference.reference_for(info))


@pytest.mark.parametrize("layout", ["ocdbt-zarr3", "plain-zarr2"])
def test_local_to_gs(unroll_bin, make_fixture, gcs, env, tmp_path, layout):
    info = make_fixture("nnx", layout, "bfloat16")
    out = f"gs://{BUCKET}/l2g-{layout}"
    res = run_unroll(unroll_bin, info, out)
    assert res.returncode == 0, res.stderr
    check_bucket_output(gcs, f"l2g-{layout}/run/checkpoints", tmp_path,
                        reference.reference_for(info))


def test_gs_to_gs(unroll_bin, make_fixture, gcs, env, tmp_path):
    info = make_fixture("linen", "ocdbt-zarr3", "float32")
    remote = staged(gcs, info, "in-ocdbt-zarr3")
    res = run_unroll(unroll_bin, remote, f"gs://{BUCKET}/g2g")
    assert res.returncode == 0, res.stderr
    check_bucket_output(gcs, "g2g/run/checkpoints", tmp_path, reference.reference_for(info))


def test_verify_inspect_ls_on_gs(unroll_bin, make_fixture, gcs, env, tmp_path):
    info = make_fixture("linen", "ocdbt-zarr3", "float32")
    remote = staged(gcs, info, "in-ocdbt-zarr3")
    res = run_unroll(unroll_bin, remote, f"gs://{BUCKET}/vil")
    assert res.returncode == 0, res.stderr
    scanned = remote.config[remote.input_key]
    unrolled = f"gs://{BUCKET}/vil/run/checkpoints/0/items"

    def run(*args):
        return subprocess.run([str(unroll_bin), *args], capture_output=True, text=True,
                              env=env, timeout=300)

    r = run("verify", scanned, unrolled)
    assert r.returncode == 0, r.stderr
    r = run("inspect", "--json", unrolled)
    assert r.returncode == 0, r.stderr
    local = run("inspect", "--json", str(info.items))
    assert local.returncode == 0
    r_in = run("inspect", "--json", scanned)
    assert r_in.returncode == 0, r_in.stderr
    root = f"gs://{BUCKET}/in-ocdbt-zarr3/checkpoints"
    assert r_in.stdout.replace(root, "R") == local.stdout.replace(str(info.root), "R")
    # The same answers as for a local copy of what unroll wrote to the bucket.
    copy_dir = tmp_path / "vil"
    download_tree(gcs.url, BUCKET, "vil/run/checkpoints", copy_dir)
    for args in (("ls", "--sizes"), ("inspect", "--json")):
        r = run(*args, unrolled)
        here = run(*args, str(copy_dir / "0" / "items"))
        assert r.returncode == 0 and here.returncode == 0, r.stderr + here.stderr
        assert r.stdout.strip()
        assert r.stdout.replace(f"gs://{BUCKET}/vil/run/checkpoints", "R") == \
            here.stdout.replace(str(copy_dir), "R")
    r_in = run("ls", scanned)
    local = run("ls", str(info.items))
    assert r_in.returncode == 0, r_in.stderr
    assert r_in.stdout == local.stdout
