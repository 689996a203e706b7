"""LoRA conversions (lora_input_adapters_path) with s3:// and gs:// locations, against the
real servers on 127.0.0.1 (SeaweedFS with checked signatures, fake-gcs-server): the base and
the adapters read from a bucket, the output (base/0, loras/<id>/0, loras/<id>/
adapter_config.json) written to one, each step under Orbax's commit-file rules. The oracle is
the one of test_unroll.py::test_unroll_lora_adapters: stock Orbax restores every output step
(downloaded by TensorStore, and for gs:// also straight from the bucket) and it must equal the
Python reference bit for bit."""
import json
import pathlib
import uuid

import pytest

import reference
import s3_fixtures
from gcs_fixtures import check_in_bucket, download_tree, use_emulator
from gcs_servers import FakeGcs
from test_s3 import run_unroll as run_s3
from test_unroll import run_unroll as run_local
from test_multiprocess_lora import fixtures, single  # noqa: F401 (fixtures)

S3_BUCKET = "unroll-lora"
GS_BUCKET = "lora"
LAYOUT = "ocdbt-zarr3"


s3 = s3_fixtures.server_fixture(S3_BUCKET)


@pytest.fixture(scope="module")
def gcs():
    with FakeGcs() as server:
        server.create_bucket(GS_BUCKET)
        yield server


@pytest.fixture
def emu(gcs, tmp_path, monkeypatch):
    use_emulator(monkeypatch, gcs.url)
    monkeypatch.setenv("HOME", str(tmp_path))  # no gcloud ADC file
    return gcs


def _fixtures(make_fixture):
    return make_fixture("linen", LAYOUT, "float32"), make_fixture("lora", LAYOUT, "float32")


_in_s3 = {}


def s3_inputs(s3, base, lora):
    """The base checkpoint root and the adapters directory copied into the bucket (once);
    returns (base item dir, adapters dir) as s3:// locations."""
    if not _in_s3:
        assert s3.upload_tree(base.root, S3_BUCKET, "in/base/checkpoints") > 0
        assert s3.upload_tree(lora.root, S3_BUCKET, "in/adapters") > 0
        _in_s3["base"] = f"s3://{S3_BUCKET}/in/base/checkpoints/{base.step}/items"
        _in_s3["adapters"] = f"s3://{S3_BUCKET}/in/adapters"
    return _in_s3["base"], _in_s3["adapters"]


def gs_inputs(gcs, base, lora):
    """As s3_inputs, for gs:// (the fixtures' files put into the emulator's bucket)."""
    for src, prefix in ((base.root, "in/base/checkpoints"), (lora.root, "in/adapters")):
        for f in sorted(pathlib.Path(src).rglob("*")):
            if f.is_file():
                gcs.put(GS_BUCKET, f"{prefix}/{f.relative_to(src)}", f.read_bytes())
    return (f"gs://{GS_BUCKET}/in/base/checkpoints/{base.step}/items",
            f"gs://{GS_BUCKET}/in/adapters")


def check_local_lora(ckpt: pathlib.Path, base, lora):
    """checkpoints/base/0 and every checkpoints/loras/<id> restored by stock Orbax."""
    reference.check_unrolled(ckpt / "base" / "0" / "items",
                             reference.reference_for(base, pure_nnx=False))
    reference.check_unrolled_lora(ckpt, reference.reference_for(lora, pure_nnx=False))
    assert not (ckpt / "0").exists()


def expected_keys(lora) -> set:
    keys = {"base/0/commit_success.txt", "base/0/items/_METADATA"}
    for lora_id in lora.adapters:
        keys |= {f"loras/{lora_id}/adapter_config.json", f"loras/{lora_id}/0/items/_METADATA",
                 f"loras/{lora_id}/0/commit_success.txt"}
    return keys


def s3_fresh(name):
    return f"s3://{S3_BUCKET}/out/{name}-{uuid.uuid4().hex[:8]}"


def check_s3_output(s3, out, base, lora, tmp_path):
    prefix = out[len(f"s3://{S3_BUCKET}/"):] + "/run/checkpoints"
    local = tmp_path / "downloaded" / "checkpoints"
    keys = s3.download_tree(S3_BUCKET, prefix, local)
    assert expected_keys(lora) <= set(keys), keys
    assert not any(k.startswith("0/") for k in keys), keys
    marker = (local / "base" / "0" / "commit_success.txt").read_text()
    assert marker.endswith(f"{out}/run/checkpoints/base/0"), marker
    check_local_lora(local, base, lora)
    return keys


def test_s3_to_s3(unroll_bin, make_fixture, s3, tmp_path):
    base, lora = _fixtures(make_fixture)
    src, adapters = s3_inputs(s3, base, lora)
    out = s3_fresh("b2b")
    res = run_s3(unroll_bin, base, src, out, s3.env(),
                 extra=[f"lora_input_adapters_path={adapters}", "pure_nnx=false"])
    assert res.returncode == 0, res.stderr
    check_s3_output(s3, out, base, lora, tmp_path)


def test_s3_to_local(unroll_bin, make_fixture, s3, tmp_path):
    base, lora = _fixtures(make_fixture)
    src, adapters = s3_inputs(s3, base, lora)
    res = run_s3(unroll_bin, base, src, tmp_path, s3.env(),
                 extra=[f"lora_input_adapters_path={adapters}", "pure_nnx=false"])
    assert res.returncode == 0, res.stderr
    check_local_lora(tmp_path / "run" / "checkpoints", base, lora)


def test_local_to_s3(unroll_bin, make_fixture, s3, tmp_path):
    base, lora = _fixtures(make_fixture)
    out = s3_fresh("l2b")
    res = run_s3(unroll_bin, base, base.items, out, s3.env(),
                 extra=[f"lora_input_adapters_path={lora.root}", "pure_nnx=false"])
    assert res.returncode == 0, res.stderr
    check_s3_output(s3, out, base, lora, tmp_path)


def test_s3_lora_destination_refused_unless_replace(unroll_bin, make_fixture, s3, tmp_path):
    """Every unit (base/0, loras/<id>/0, loras/<id>/adapter_config.json) counts as the
    destination: one object in any of them refuses the run; --replace replaces the units and
    only them (a sibling object under checkpoints/ stays)."""
    base, lora = _fixtures(make_fixture)
    out = s3_fresh("replace")
    env = s3.env()
    args = [f"lora_input_adapters_path={lora.root}", "pure_nnx=false"]
    prefix = out[len(f"s3://{S3_BUCKET}/"):] + "/run/checkpoints"
    some_id = sorted(lora.adapters)[-1]
    kv = s3._kv(S3_BUCKET, prefix)
    kv.write(f"loras/{some_id}/adapter_config.json", b"{}").result()
    kv.write("sibling.txt", b"not ours").result()
    before = s3.list(S3_BUCKET, prefix)
    res = run_s3(unroll_bin, base, base.items, out, env, extra=args)
    assert res.returncode == 2, res.stderr
    assert "already holds" in res.stderr and "--replace" in res.stderr
    assert f"loras/{some_id}/adapter_config.json" in res.stderr
    assert s3.list(S3_BUCKET, prefix) == before
    res = run_s3(unroll_bin, base, base.items, out, env, extra=[*args, "--replace"])
    assert res.returncode == 0, res.stderr
    keys = check_s3_output(s3, out, base, lora, tmp_path)
    assert "sibling.txt" in keys
    got = json.loads((tmp_path / "downloaded" / "checkpoints" / "loras" / some_id /
                      "adapter_config.json").read_text())
    assert got == lora.adapters[some_id].config


def test_s3_missing_adapters_is_not_found(unroll_bin, make_fixture, s3, tmp_path):
    base, _ = _fixtures(make_fixture)
    res = run_s3(unroll_bin, base, base.items, tmp_path, s3.env(),
                 extra=[f"lora_input_adapters_path=s3://{S3_BUCKET}/no/such/adapters",
                        "pure_nnx=false"])
    assert res.returncode == 3, res.stderr
    assert "no LoRA adapter" in res.stderr and "s3://" in res.stderr
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").rglob("_METADATA"))


def test_gs_to_gs_restored_from_the_bucket(unroll_bin, make_fixture, emu, tmp_path):
    base, lora = _fixtures(make_fixture)
    src, adapters = gs_inputs(emu, base, lora)
    out = f"gs://{GS_BUCKET}/g2g"
    res = run_local(unroll_bin, _with_input(base, src), out, pure_nnx=False,
                    extra=[f"lora_input_adapters_path={adapters}"])
    assert res.returncode == 0, res.stderr
    names = set(emu.names(GS_BUCKET, "g2g/run/checkpoints/"))
    assert {f"g2g/run/checkpoints/{k}" for k in expected_keys(lora)} <= names, names
    # stock Orbax restores each step straight from the bucket
    expected = reference.reference_for(lora, pure_nnx=False)
    for lora_id, (tree, _) in expected.items():
        check_in_bucket(f"{out}/run/checkpoints/loras/{lora_id}/0/items", tree,
                        tmp_path / lora_id)
    local = tmp_path / "all" / "checkpoints"
    download_tree(GS_BUCKET, "g2g/run/checkpoints", local)
    check_local_lora(local, base, lora)


def test_local_to_gs(unroll_bin, make_fixture, emu, tmp_path):
    base, lora = _fixtures(make_fixture)
    out = f"gs://{GS_BUCKET}/l2g"
    res = run_local(unroll_bin, base, out, pure_nnx=False,
                    extra=[f"lora_input_adapters_path={lora.root}"])
    assert res.returncode == 0, res.stderr
    local = tmp_path / "all" / "checkpoints"
    download_tree(GS_BUCKET, "l2g/run/checkpoints", local)
    check_local_lora(local, base, lora)


def _with_input(info, location):
    """A copy of the fixture info whose input key names `location`."""
    import copy
    import dataclasses
    cfg = copy.deepcopy(info.config)
    cfg[info.input_key] = location
    return dataclasses.replace(info, config=cfg)


def test_s3_adapters_inside_the_output_are_refused(unroll_bin, make_fixture, s3, tmp_path):
    """Adapters read from where the run would write (checkpoints/loras/<id>/... of the
    output): refused before anything is written (exit 2), the adapters left as they were."""
    base, lora = _fixtures(make_fixture)
    out = s3_fresh("overlap")
    prefix = out[len(f"s3://{S3_BUCKET}/"):] + "/run/checkpoints/loras"
    assert s3.upload_tree(lora.root, S3_BUCKET, prefix) > 0
    before = s3.list(S3_BUCKET, prefix)
    res = run_s3(unroll_bin, base, base.items, out, s3.env(),
                 extra=[f"lora_input_adapters_path={out}/run/checkpoints/loras",
                        "pure_nnx=false", "--replace"])
    assert res.returncode == 2, res.stderr
    assert "overlap" in res.stderr, res.stderr
    assert s3.list(S3_BUCKET, prefix) == before


def test_multi_process_with_adapters_in_a_bucket_is_refused(unroll_bin, make_fixture, tmp_path):
    """A multi-process run reads and writes local directories only: remote adapters are
    refused up front (exit 5, naming them), before any request."""
    base, _ = _fixtures(make_fixture)
    res = run_local(unroll_bin, base, tmp_path, pure_nnx=False,
                    extra=["lora_input_adapters_path=gs://nowhere/adapters",
                           "--process-count", "2", "--process-index", "0"])
    assert res.returncode == 5, res.stderr
    assert res.stderr.startswith("unroll: gs://nowhere/adapters: a multi-process"), res.stderr


# ------------------------------------------------------------------------------------------
# Several processes into s3:// (unroll/job_share_remote.h, a run of several units)


def _share_args(unroll_bin, base, lora, out, n, i):
    from test_unroll import unroll_args
    return unroll_args(unroll_bin, base, out, pure_nnx=False,
                       extra=[f"lora_input_adapters_path={lora.root}", "-j1",
                              "--process-count", str(n), "--process-index", str(i)])


def _check_multi_s3(s3, out, base, lora, n, tmp_path, single):
    """Every unit in Orbax's multi-process layout, no run objects left, restored equal to the
    reference (check_s3_output) and to the single-process LoRA run's output."""
    from test_multiprocess_lora import step_units
    keys = check_s3_output(s3, out, base, lora, tmp_path)
    for unit in step_units(lora):
        for i in range(n):
            assert f"{unit}/items/ocdbt.process_{i}/manifest.ocdbt" in keys, (unit, i)
        assert f"{unit}/items/manifest.ocdbt" in keys
    assert not [k for k in keys if "unroll-multi" in k], keys
    local = tmp_path / "downloaded" / "checkpoints"
    for unit, values in single.items():
        reference.compare_trees(reference.restore(local / unit / "items"), values,
                                f"{unit} (multi-process, s3)")


def test_s3_three_processes(unroll_bin, make_fixture, s3, single, tmp_path):
    import subprocess
    base, lora = _fixtures(make_fixture)
    out = s3_fresh("multi3")
    procs = [subprocess.Popen(_share_args(unroll_bin, base, lora, out, 3, i), env=s3.env(),
                              stderr=subprocess.PIPE) for i in range(3)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode()
    _check_multi_s3(s3, out, base, lora, 3, tmp_path, single)


def test_s3_unfinished_share_then_finisher_killed_and_rerun(unroll_bin, make_fixture, s3,
                                                            single, tmp_path):
    """Share 0 of 2 alone publishes no unit (no marker, no top-level manifest or _METADATA) and
    `unroll merge` is refused; share 1, the finisher, killed (SIGKILL) after every marker but
    base/0's (the adapters look published, base/0 not); rerunning only index 1 finishes the
    publication: the exact output."""
    import subprocess
    from test_multiprocess_lora import gdb_kill_at, step_units
    base, lora = _fixtures(make_fixture)
    out = s3_fresh("multikill")
    prefix = out[len(f"s3://{S3_BUCKET}/"):] + "/run/checkpoints"
    env = s3.env()
    r = subprocess.run(_share_args(unroll_bin, base, lora, out, 2, 0), env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    keys = s3.list(S3_BUCKET, prefix)
    assert not [k for k in keys if k.endswith("commit_success.txt")], keys
    for unit in step_units(lora):
        assert f"{unit}/items/_METADATA" not in keys, keys
        assert f"{unit}/items/manifest.ocdbt" not in keys, keys
    assert any(k.startswith("loras/") and "/ocdbt.process_0/" in k for k in keys), keys
    r = subprocess.run([str(unroll_bin), "merge", f"{out}/run/checkpoints"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 3 and "process index 1" in r.stderr, r.stderr
    # the marker branch of the upload (job_upload.c put_one): 2 units' items and step markers
    # each, then base/0's items marker and its own: killed at base/0's own
    markers = 2 * len(step_units(lora))
    src = pathlib.Path(__file__).resolve().parents[2] / "src" / "job" / "job_upload.c"
    line = next(n for n, text in enumerate(src.read_text().splitlines(), 1)
                if "Checkpoint commit was successful to" in text)
    gdb_kill_at(_share_args(unroll_bin, base, lora, out, 2, 1), f"job_upload.c:{line}",
                tmp_path, env, hit=markers)
    keys = s3.list(S3_BUCKET, prefix)
    assert "loras/adapter_all/0/commit_success.txt" in keys, keys
    assert "base/0/commit_success.txt" not in keys, keys
    r = subprocess.run(_share_args(unroll_bin, base, lora, out, 2, 1), env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    _check_multi_s3(s3, out, base, lora, 2, tmp_path, single)


def test_s3_share_killed_continues_on_another_machine(unroll_bin, make_fixture, s3, single,
                                                     tmp_path):
    """A LoRA share into the bucket keeps each step unit's progress there, as a single step's
    share does: killed once its base's progress was uploaded and rerun with an empty TMPDIR
    ("another machine"), it fetches the base's database as of the mark instead of converting
    it again, and the published output is exact. (Before: a LoRA share's progress was local
    only, and a rerun elsewhere redid the whole share.)"""
    import subprocess
    from test_multiprocess_lora import gdb_kill_at
    base, lora = _fixtures(make_fixture)
    out = s3_fresh("multimove")
    first, second = tmp_path / "m1", tmp_path / "m2"
    first.mkdir()
    second.mkdir()
    r = subprocess.run(_share_args(unroll_bin, base, lora, out, 2, 0),
                       env=s3.env(TMPDIR=str(first)), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    # small commits: the base's progress is uploaded before the adapters are converted
    args = _share_args(unroll_bin, base, lora, out, 2, 1) + ["--commit-every", "1K"]
    gdb_kill_at(args, "ur_job_rprogress_save", tmp_path, s3.env(TMPDIR=str(first)), hit=2)
    r = subprocess.run([str(a) for a in args if a != "-q"], env=s3.env(TMPDIR=str(second)),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "fetched the progress of base/0 from the store" in r.stderr, r.stderr
    _check_multi_s3(s3, out, base, lora, 2, tmp_path, single)
    assert not list(second.iterdir())


def test_s3_multi_process_unit_holding_objects_is_refused(unroll_bin, make_fixture, s3,
                                                          tmp_path):
    """An adapter unit that already holds an object when the run starts is refused (exit 2,
    naming it) before anything is written: the finish would add to it."""
    import subprocess
    base, lora = _fixtures(make_fixture)
    out = s3_fresh("multiheld")
    prefix = out[len(f"s3://{S3_BUCKET}/"):] + "/run/checkpoints"
    some_id = sorted(lora.adapters)[-1]
    env = s3.env()
    s3._with_creds()
    s3._kv(S3_BUCKET, prefix).write(f"loras/{some_id}/0/items/_METADATA", b"{}").result()
    before = s3.list(S3_BUCKET, prefix)
    r = subprocess.run(_share_args(unroll_bin, base, lora, out, 2, 0), env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr
    assert f"loras/{some_id}/0/items/_METADATA" in r.stderr, r.stderr
    assert "--replace" not in r.stderr, r.stderr  # refused for a multi-process run
    assert s3.list(S3_BUCKET, prefix) == before


def test_s3_multi_process_merge(unroll_bin, make_fixture, s3, single, tmp_path):
    """`unroll merge` of a LoRA run in a bucket: with the claim held by another would-be
    finisher the last share publishes nothing; merge (found at checkpoints/base/0) publishes
    every unit."""
    import subprocess
    base, lora = _fixtures(make_fixture)
    out = s3_fresh("multimerge")
    env = s3.env()
    for i in range(2):
        if i == 1:
            claim = f"/{S3_BUCKET}/{out[len(f's3://{S3_BUCKET}/'):]}/run/checkpoints/base/0/" \
                    "unroll-multi/finish.claim"
            assert s3.request("PUT", claim, b"another finisher\n")[0] == 200
        r = subprocess.run(_share_args(unroll_bin, base, lora, out, 2, i), env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
    prefix = out[len(f"s3://{S3_BUCKET}/"):] + "/run/checkpoints"
    assert not [k for k in s3.list(S3_BUCKET, prefix) if k.endswith("commit_success.txt")]
    r = subprocess.run([str(unroll_bin), "merge", f"{out}/run/checkpoints"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    _check_multi_s3(s3, out, base, lora, 2, tmp_path, single)
