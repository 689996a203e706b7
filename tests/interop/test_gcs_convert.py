"""`unroll` with gs:// locations, end to end, against fake-gcs-server on 127.0.0.1:

- the inputs are saved straight into the bucket by stock Orbax (gcs_fixtures.orbax_save:
  TensorStore's gcs driver for the arrays, commit-file mode), in every storage layout the file
  tests cover;
- `unroll` converts gs -> local, local -> gs and gs -> gs;
- what it wrote to the bucket is listed by TensorStore's gcs driver and restored by stock
  Orbax straight from the bucket, and compared bit for bit with the Python reference unroll;
- `verify`, `inspect` and `ls` take gs:// locations and answer as for a local copy.
"""
import copy
import dataclasses
import subprocess

import pytest

import maxtext_fixtures
import reference
from gcs_fixtures import check_in_bucket, download_tree, orbax_save, ts_list, use_emulator
from gcs_servers import FakeGcs, GateProxy, TokenServer, make_service_account
from test_unroll import run_unroll

BUCKET = "ckpts"


@pytest.fixture(scope="module")
def gcs():
    with FakeGcs() as server:
        server.create_bucket(BUCKET)
        yield server


@pytest.fixture
def emu(gcs, tmp_path, monkeypatch):
    use_emulator(monkeypatch, gcs.url)
    monkeypatch.setenv("HOME", str(tmp_path))  # no gcloud ADC file
    return gcs


_saved = {}


def in_bucket(info, name):
    """The fixture's state saved once per module by Orbax under gs://ckpts/<name>/checkpoints;
    returns a copy of its FixtureInfo whose input key names that gs:// item dir."""
    if name not in _saved:
        _saved[name] = orbax_save(info.kind, info.layout, info.dtype,
                                  f"gs://{BUCKET}/{name}/checkpoints")
    cfg = copy.deepcopy(info.config)
    cfg[info.input_key] = _saved[name]
    return dataclasses.replace(info, config=cfg)


def check_output(prefix, expected, scratch):
    names = ts_list(BUCKET, prefix)
    assert "0/items/_METADATA" in names and "0/commit_success.txt" in names, names
    check_in_bucket(f"gs://{BUCKET}/{prefix}/0/items", expected, scratch)


@pytest.mark.parametrize("layout", tuple(maxtext_fixtures.LAYOUTS))
def test_gs_to_local(unroll_bin, make_fixture, emu, tmp_path, layout):
    info = make_fixture("linen", layout, "float32")
    res = run_unroll(unroll_bin, in_bucket(info, f"in-{layout}"), tmp_path / "out")
    assert res.returncode == 0, res.stderr
    reference.check_unrolled(tmp_path / "out" / "run" / "checkpoints" / "0" / "items",
                             reference.reference_for(info))


@pytest.mark.parametrize("layout", ["ocdbt-zarr3", "plain-zarr2"])
def test_local_to_gs(unroll_bin, make_fixture, emu, tmp_path, layout):
    info = make_fixture("nnx", layout, "bfloat16")
    res = run_unroll(unroll_bin, info, f"gs://{BUCKET}/l2g-{layout}")
    assert res.returncode == 0, res.stderr
    check_output(f"l2g-{layout}/run/checkpoints", reference.reference_for(info), tmp_path)


def test_gs_to_gs(unroll_bin, make_fixture, emu, tmp_path):
    info = make_fixture("linen", "ocdbt-zarr3", "float32")
    res = run_unroll(unroll_bin, in_bucket(info, "in-ocdbt-zarr3"), f"gs://{BUCKET}/g2g")
    assert res.returncode == 0, res.stderr
    check_output("g2g/run/checkpoints", reference.reference_for(info), tmp_path)


def test_verify_inspect_ls_on_gs(unroll_bin, make_fixture, emu, tmp_path):
    info = make_fixture("linen", "ocdbt-zarr3", "float32")
    remote = in_bucket(info, "in-ocdbt-zarr3")
    res = run_unroll(unroll_bin, remote, f"gs://{BUCKET}/vil")
    assert res.returncode == 0, res.stderr
    scanned = remote.config[remote.input_key]
    unrolled = f"gs://{BUCKET}/vil/run/checkpoints/0/items"

    def run(*args):
        return subprocess.run([str(unroll_bin), *args], capture_output=True, text=True,
                              timeout=300)

    r = run("verify", scanned, unrolled)
    assert r.returncode == 0, r.stderr
    # Across stores, a checkpoint that is not the unrolled form is refused: here the local
    # scanned input itself stands as the "unrolled" one.
    r = run("verify", scanned, str(info.items))
    assert r.returncode == 6, r.stderr
    assert r.stderr.count("\n") == 1 and "verify: " in r.stderr and "issues" in r.stderr
    # The same answers as for local copies of the bucket's checkpoints.
    for url, prefix in ((scanned, "in-ocdbt-zarr3/checkpoints"),
                        (unrolled, "vil/run/checkpoints")):
        copy_dir = tmp_path / prefix
        download_tree(BUCKET, prefix, copy_dir)
        here_items = copy_dir / url.split("/checkpoints/", 1)[1]
        for args in (("ls", "--sizes"), ("inspect", "--json")):
            r = run(*args, url)
            here = run(*args, str(here_items))
            assert r.returncode == 0 and here.returncode == 0, r.stderr + here.stderr
            assert r.stdout.strip()
            assert r.stdout.replace(f"gs://{BUCKET}/{prefix}", "R") == \
                here.stdout.replace(str(copy_dir), "R")


# ---- faults: 503/429 answers and connections dropped mid-body, between unroll and GCS -------

@pytest.fixture
def faulty(gcs, emu, monkeypatch):
    """Route unroll (not the Python stack) through a fault-injecting proxy: unroll then sees a
    plain endpoint (UNROLL_GCS_ENDPOINT, anonymous credentials), retries fast."""
    proxies = []

    def make(**faults):
        p = GateProxy(gcs.url, token=None, **faults).__enter__()
        proxies.append(p)
        monkeypatch.delenv("STORAGE_EMULATOR_HOST")
        monkeypatch.setenv("UNROLL_GCS_ENDPOINT", p.url)
        monkeypatch.setenv("UNROLL_HTTP_BACKOFF_MS", "5")
        return p

    yield make
    for p in proxies:
        p.__exit__(None, None, None)


def test_gs_to_local_survives_faults(unroll_bin, make_fixture, faulty, tmp_path):
    info = make_fixture("linen", "ocdbt-zarr3", "float32")
    remote = in_bucket(info, "in-ocdbt-zarr3")
    proxy = faulty(status_every={503: 4, 429: 7}, drop_every=3)
    res = run_unroll(unroll_bin, remote, tmp_path / "out")
    assert res.returncode == 0, res.stderr
    assert proxy.injected.get(503) and proxy.injected.get(429) and proxy.injected.get("drop"), \
        proxy.injected
    reference.check_unrolled(tmp_path / "out" / "run" / "checkpoints" / "0" / "items",
                             reference.reference_for(info))


def test_local_to_gs_survives_faults(unroll_bin, make_fixture, faulty, tmp_path, monkeypatch):
    info = make_fixture("linen", "ocdbt-zarr3", "bfloat16")
    proxy = faulty(status_every={503: 3})
    res = run_unroll(unroll_bin, info, f"gs://{BUCKET}/faulty-out")
    assert res.returncode == 0, res.stderr
    assert proxy.injected.get(503), proxy.injected
    check_output("faulty-out/run/checkpoints", reference.reference_for(info), tmp_path)


def test_gcs_down_is_exit_3_and_nothing_published(unroll_bin, make_fixture, faulty, tmp_path,
                                                  monkeypatch):
    info = make_fixture("linen", "ocdbt-zarr3", "float32")
    remote = in_bucket(info, "in-ocdbt-zarr3")
    faulty(always=503)
    monkeypatch.setenv("UNROLL_HTTP_RETRIES", "2")
    res = run_unroll(unroll_bin, remote, tmp_path / "out")
    assert res.returncode == 3, res.stderr
    line = res.stderr.strip()
    assert "\n" not in line, res.stderr
    assert f"gs://{BUCKET}/in-ocdbt-zarr3/checkpoints/9" in line and "HTTP 503" in line, line
    assert "3 attempts" in line, line
    assert not (tmp_path / "out" / "run" / "checkpoints" / "0").exists()


def test_upload_failure_leaves_nothing_published(unroll_bin, make_fixture, faulty, gcs,
                                                 monkeypatch):
    """Uploads fail for good after the third: exit 3, what was written is deleted, no commit
    marker anywhere."""
    info = make_fixture("linen", "ocdbt-zarr3", "float32")
    proxy = faulty(fail_uploads_after=3)
    monkeypatch.setenv("UNROLL_HTTP_RETRIES", "2")
    res = run_unroll(unroll_bin, info, f"gs://{BUCKET}/putfail")
    assert res.returncode == 3, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "HTTP 503" in res.stderr and "nothing published" in res.stderr, res.stderr
    assert proxy.uploads > 3
    assert gcs.names(BUCKET, "putfail/") == []


def test_destination_with_objects_is_refused_unless_replace(unroll_bin, make_fixture, emu,
                                                            gcs, tmp_path):
    info = make_fixture("linen", "ocdbt-zarr3", "float32")
    out = f"gs://{BUCKET}/replace"
    assert run_unroll(unroll_bin, info, out).returncode == 0
    before = {n: gcs.get(BUCKET, n) for n in gcs.names(BUCKET, "replace/")}
    res = run_unroll(unroll_bin, info, out)
    assert res.returncode == 2
    assert "already holds" in res.stderr and "--replace" in res.stderr
    assert {n: gcs.get(BUCKET, n) for n in gcs.names(BUCKET, "replace/")} == before
    res = run_unroll(unroll_bin, info, out, extra=["--replace"])
    assert res.returncode == 0, res.stderr
    check_output("replace/run/checkpoints", reference.reference_for(info), tmp_path)


def test_dropped_leaves_are_never_downloaded(unroll_bin, make_fixture, faulty, tmp_path):
    """Plain layout: the optimizer state's chunks are never fetched (its array metadata is, as
    the checkpoint is opened); the parameters' are."""
    info = make_fixture("linen", "plain-zarr3", "float32")
    remote = in_bucket(info, "in-plain-zarr3")
    proxy = faulty()
    res = run_unroll(unroll_bin, remote, tmp_path / "out")
    assert res.returncode == 0, res.stderr
    paths = [p for p, _ in proxy.served]
    assert any("/params" in p for p in paths), paths
    meta_files = ("zarr.json", ".zarray", ".zattrs", ".zgroup")
    assert [p for p in paths if "opt_state" in p and not p.endswith(meta_files)] == []


def test_gs_to_local_with_a_service_account(unroll_bin, make_fixture, emu, gcs, tmp_path,
                                            monkeypatch):
    """The conversion's parallel readers share one access token: one JWT grant for the run,
    and every request the bucket sees carries it."""
    info = make_fixture("linen", "ocdbt-zarr3", "float32")
    remote = in_bucket(info, "in-ocdbt-zarr3")
    with TokenServer() as tok, GateProxy(gcs.url, token="good-token") as proxy:
        sa, pub, email = make_service_account(tmp_path, tok.url + "/token")
        tok.public_key, tok.email = pub, email
        monkeypatch.delenv("STORAGE_EMULATOR_HOST")
        monkeypatch.setenv("UNROLL_GCS_ENDPOINT", proxy.url)
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(sa))
        res = run_unroll(unroll_bin, remote, tmp_path / "out")
        assert res.returncode == 0, res.stderr
        assert tok.log == ["jwt"]
        assert len(proxy.auth_seen) > 5 and set(proxy.auth_seen) == {"Bearer good-token"}
    reference.check_unrolled(tmp_path / "out" / "run" / "checkpoints" / "0" / "items",
                             reference.reference_for(info))
