"""The same conversion twice gives the same bytes (issue 25, item 9).

Orbax's commit marker names the step's final location (`Checkpoint commit was successful to
<final step path>`), not the temporary directory it was written in; unroll's named the run's
staging directory, whose name carries the process id, so two runs of one conversion (or `-j1`
against the default) differed. Apart from the timestamps (_CHECKPOINT_METADATA's init and commit
times, the OCDBT manifest's commit_time) every byte must now be the same; with SOURCE_DATE_EPOCH
set (the reproducible-builds convention) the timestamps are that time too, and the whole tree is
byte-identical. Checked for a local destination (single process and two processes) and for an
s3:// destination on a real S3 server (SeaweedFS).
"""
import json
import os
import pathlib
import shutil
import subprocess
import time
import uuid

import s3_fixtures

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "tests" / "data" / "example"
CONFIG = EXAMPLE / "unroll.yml"
BUCKET = "unroll-repro"
EPOCH = 1700000000

s3 = s3_fixtures.server_fixture(BUCKET)


def _convert(unroll_bin, out, extra=(), env=None, check=True):
    args = [str(unroll_bin), str(CONFIG), "-q", *extra,
            f"load_full_state_path={EXAMPLE / 'checkpoints' / '9' / 'items'}",
            f"base_output_directory={out}", "run_name=run", "force_unroll=true"]
    res = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
    if check:
        assert res.returncode == 0, res.stderr
    return res


def _tree(root: pathlib.Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _env(**over):
    env = dict(os.environ)
    env.pop("SOURCE_DATE_EPOCH", None)
    env.update({k: str(v) for k, v in over.items()})
    return env


def _without_timestamps(unroll_bin, tree: dict, items: pathlib.Path) -> dict:
    """The tree with the recorded times taken out: _CHECKPOINT_METADATA's two timestamps, and
    the manifest replaced by its listing (`unroll ls --manifest`) less each commit_time."""
    out = dict(tree)
    meta = json.loads(out.pop("0/_CHECKPOINT_METADATA"))
    assert isinstance(meta.pop("init_timestamp_nsecs"), int)
    assert isinstance(meta.pop("commit_timestamp_nsecs"), int)
    out["0/_CHECKPOINT_METADATA"] = json.dumps(meta, sort_keys=True).encode()
    if "0/items/manifest.ocdbt" in out:
        ls = subprocess.run([str(unroll_bin), "ls", "--manifest", str(items)],
                            capture_output=True, text=True, timeout=60)
        assert ls.returncode == 0, ls.stderr
        assert "commit_time=" in ls.stdout
        lines = [" ".join(w for w in line.split() if not w.startswith("commit_time="))
                 for line in ls.stdout.splitlines()]
        out["0/items/manifest.ocdbt"] = "\n".join(lines).encode()
    return out


def test_marker_names_the_final_location_and_runs_agree(unroll_bin, tmp_path):
    """-j1 against -j2, each from its own staging directory: the same bytes but the times;
    the marker names <checkpoints>/0 as Orbax's does."""
    out = tmp_path / "out"
    ck = out / "run" / "checkpoints"
    _convert(unroll_bin, out, ["-j1"], env=_env())
    first = _tree(ck)
    shutil.move(ck / "0", tmp_path / "first")
    _convert(unroll_bin, out, ["-j2"], env=_env())
    second = _tree(ck)

    final = ck.resolve() / "0"
    for key in ("0/commit_success.txt", "0/items/commit_success.txt"):
        assert second[key].decode() == f"Checkpoint commit was successful to {final}"
        assert first[key] == second[key]
    assert sorted(first) == sorted(second)
    a = _without_timestamps(unroll_bin, first, tmp_path / "first" / "items")
    b = _without_timestamps(unroll_bin, second, ck / "0" / "items")
    assert [k for k in a if a[k] != b[k]] == []


def test_source_date_epoch_gives_identical_trees(unroll_bin, tmp_path):
    out = tmp_path / "out"
    ck = out / "run" / "checkpoints"
    _convert(unroll_bin, out, ["-j1"], env=_env(SOURCE_DATE_EPOCH=EPOCH))
    first = _tree(ck)
    shutil.rmtree(ck / "0")
    _convert(unroll_bin, out, ["-j2"], env=_env(SOURCE_DATE_EPOCH=EPOCH))
    second = _tree(ck)
    assert first == second
    meta = json.loads(second["0/_CHECKPOINT_METADATA"])
    assert meta["init_timestamp_nsecs"] == EPOCH * 10**9
    assert meta["commit_timestamp_nsecs"] == EPOCH * 10**9
    ls = subprocess.run([str(unroll_bin), "ls", "--manifest", str(ck / "0" / "items")],
                        capture_output=True, text=True, timeout=60)
    assert f"commit_time={EPOCH * 10**9} " in ls.stdout, ls.stdout


def test_two_processes_twice_give_identical_trees(unroll_bin, tmp_path):
    out = tmp_path / "out"
    ck = out / "run" / "checkpoints"
    trees = []
    for _ in range(2):
        env = _env(SOURCE_DATE_EPOCH=EPOCH)
        procs = [subprocess.Popen(
            [str(unroll_bin), str(CONFIG), "-q", "-j1", "--process-count", "2",
             "--process-index", str(i),
             f"load_full_state_path={EXAMPLE / 'checkpoints' / '9' / 'items'}",
             f"base_output_directory={out}", "run_name=run", "force_unroll=true"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
        for p in procs:
            _, err = p.communicate(timeout=300)
            assert p.returncode == 0, err
        trees.append(_tree(ck))
        shutil.rmtree(ck / "0")
    assert trees[0] == trees[1]
    marker = trees[0]["0/commit_success.txt"].decode()
    assert marker == f"Checkpoint commit was successful to {ck.resolve() / '0'}"


def test_bucket_destination_twice_gives_identical_objects(unroll_bin, s3, tmp_path):
    """-j1, then -j2 with --replace over it: the same objects, the markers naming the step's
    location in the bucket."""
    out = f"s3://{BUCKET}/repro-{uuid.uuid4().hex[:8]}"
    prefix = out[len(f"s3://{BUCKET}/"):] + "/run/checkpoints"
    # the HTTP defaults' timeouts, not the fixture's 3 s: an attempt abandoned after 3 s on a
    # loaded server can still be applied by it later (a known defect for the claim: see
    # job_claim.c), which is not what this test is about
    env = s3.env(SOURCE_DATE_EPOCH=str(EPOCH), UNROLL_HTTP_TIMEOUT_S="20")
    trees = []
    for i, extra in enumerate((["-j1"], ["-j2", "--replace"])):
        _convert(unroll_bin, out, extra, env=env)
        # the run deletes its claim last
        claim = "0/unroll-claim.txt"
        for _ in range(50):
            if claim not in s3.list(BUCKET, prefix):
                break
            time.sleep(0.1)
        assert claim not in s3.list(BUCKET, prefix), "the run's claim was left in the bucket"
        s3.download_tree(BUCKET, prefix, tmp_path / f"down{i}")
        trees.append(_tree(tmp_path / f"down{i}"))
    assert trees[0] == trees[1]
    assert trees[0]["0/commit_success.txt"].decode() == \
        f"Checkpoint commit was successful to {out}/run/checkpoints/0"
