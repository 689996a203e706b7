"""A multi-process conversion into an object store (unroll/job_share_remote.h): each process
writes its share under the final step prefix, the finisher is the process whose conditional
create of the claim object succeeds, and the top-level manifest, metadata and commit marker go
up last. Against a real S3 server (SeaweedFS) and fake-gcs-server. The oracle as in
test_multiprocess.py: the output, restored by stock Orbax (from a TensorStore download for S3,
straight from the bucket for GCS), equals the single-process output bit for bit.

Also here: multi-process and resumable runs whose input is in a bucket (each process reads its
share's chunks from there), into a local directory or a bucket, and a single-process `--resume`
run into a bucket (share 0 of 1), killed and rerun.

fake-gcs-server ignores ifGenerationMatch on uploads: as in test_gcs.py a proxy in front of it
answers 412 for an existing object, here holding a lock over the check and the upload so that
the create is atomic as on GCS."""
import fcntl
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import uuid

import pytest

import reference
from test_kill import ROOT
import s3_fixtures
from gcs_fixtures import (check_in_bucket, download_tree, ts_list, upload_tree,
                          use_emulator)
from gcs_servers import FakeGcs, GateProxy
from test_multiprocess import _args, big, single  # noqa: F401 (fixtures)

BUCKET = "unroll-multi"


s3 = s3_fixtures.server_fixture(BUCKET)


def _out():
    return f"out-{uuid.uuid4().hex[:8]}"


def _run(unroll_bin, info, s3, out, count, index, check=True):
    r = subprocess.run(_args(unroll_bin, info, f"s3://{BUCKET}/{out}",
                             ["-j1", "--process-count", count, "--process-index", index]),
                       env=s3.env(), capture_output=True, timeout=600)
    if check:
        assert r.returncode == 0, r.stderr.decode()
    return r


def _step_keys(s3, out):
    return s3.list(BUCKET, f"{out}/run/checkpoints/0")


def _check_same(s3, out, count, single, tmp_path):
    keys = _step_keys(s3, out)
    for i in range(count):
        assert f"items/ocdbt.process_{i}/manifest.ocdbt" in keys
    assert "items/manifest.ocdbt" in keys and "commit_success.txt" in keys
    assert not [k for k in keys if k.startswith("unroll-multi/")], keys
    local = tmp_path / "down"
    s3.download_tree(BUCKET, f"{out}/run/checkpoints", local)
    items = local / "0" / "items"
    reference.compare_trees(reference.restore(items), single[1], "multi-process output in S3")
    # the finisher records what every share's writer was given: unrolled layers
    meta = json.loads((local / "0" / "_CHECKPOINT_METADATA").read_text())
    assert meta["custom_metadata"]["scan_layers"] is False


@pytest.mark.parametrize("count", [2, 4])
def test_background_processes_into_s3(unroll_bin, big, single, s3, tmp_path, count):
    out = _out()
    procs = [subprocess.Popen(_args(unroll_bin, big, f"s3://{BUCKET}/{out}",
                                    ["-j1", "--process-count", count, "--process-index", i]),
                              env=s3.env(), stderr=subprocess.PIPE)
             for i in range(count)]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err.decode()
    _check_same(s3, out, count, single, tmp_path)


def test_missing_share_publishes_nothing_then_rerun(unroll_bin, big, single, s3, tmp_path):
    out = _out()
    _run(unroll_bin, big, s3, out, 3, 0)
    _run(unroll_bin, big, s3, out, 3, 2)
    keys = _step_keys(s3, out)
    assert "items/ocdbt.process_0/manifest.ocdbt" in keys
    assert "items/manifest.ocdbt" not in keys
    assert not [k for k in keys if k.endswith("commit_success.txt")], keys
    r = subprocess.run([str(unroll_bin), "merge", f"s3://{BUCKET}/{out}/run/checkpoints"],
                       env=s3.env(), capture_output=True, timeout=300)
    assert r.returncode == 3, r.stderr.decode()
    assert b"process index 1" in r.stderr and r.stderr.count(b"\n") == 1, r.stderr
    assert "commit_success.txt" not in _step_keys(s3, out)
    # ls and inspect on the partial output name the complete shares
    for cmd in ("ls", "inspect"):
        r = subprocess.run([str(unroll_bin), cmd, f"s3://{BUCKET}/{out}/run/checkpoints"],
                           env=s3.env(), capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert "share 0: complete" in r.stdout and "share 1: not complete" in r.stdout
        assert "share 2: complete" in r.stdout and "2 of 3 shares complete" in r.stdout
    _run(unroll_bin, big, s3, out, 3, 1)
    _check_same(s3, out, 3, single, tmp_path)
    # a rerun after the publication does nothing
    _run(unroll_bin, big, s3, out, 3, 1)


def test_claim_held_elsewhere_then_merge(unroll_bin, big, single, s3, tmp_path):
    """The claim decides: with the claim object already created (another would-be finisher),
    the last share does not finish; `unroll merge` does, afterwards."""
    out = _out()
    _run(unroll_bin, big, s3, out, 2, 0)
    st, _ = s3.request("PUT", f"/{BUCKET}/{out}/run/checkpoints/0/unroll-multi/finish.claim",
                       b"another finisher\n")
    assert st == 200
    _run(unroll_bin, big, s3, out, 2, 1)
    keys = _step_keys(s3, out)
    assert "items/manifest.ocdbt" not in keys and "commit_success.txt" not in keys, keys
    r = subprocess.run([str(unroll_bin), "merge", f"s3://{BUCKET}/{out}/run/checkpoints"],
                       env=s3.env(), capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode()
    _check_same(s3, out, 2, single, tmp_path)


def test_two_would_be_finishers_exactly_one_finishes(unroll_bin, big, single, s3, tmp_path):
    """Both shares complete, the claim free: two processes rerun at once (a complete share is
    not redone, each goes straight to the finish). Exactly one of them publishes."""
    out = _out()
    claim = f"/{BUCKET}/{out}/run/checkpoints/0/unroll-multi/finish.claim"
    _run(unroll_bin, big, s3, out, 2, 0)
    assert s3.request("PUT", claim, b"held\n")[0] == 200
    _run(unroll_bin, big, s3, out, 2, 1)
    assert "commit_success.txt" not in _step_keys(s3, out)
    assert s3.request("DELETE", claim)[0] in (200, 204)
    procs = []
    for i in range(2):
        args = _args(unroll_bin, big, f"s3://{BUCKET}/{out}",
                     ["-j1", "--process-count", 2, "--process-index", i])
        args.remove("-q")  # the notes say who finished
        procs.append(subprocess.Popen(args, env=s3.env(), stderr=subprocess.PIPE, text=True))
    errs = []
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
        errs.append(err)
    assert sum("merged and wrote" in e for e in errs) == 1, errs
    assert all("already complete: not redone" in e for e in errs), errs
    _check_same(s3, out, 2, single, tmp_path)


def test_other_run_or_foreign_objects_are_refused(unroll_bin, big, s3):
    out = _out()
    _run(unroll_bin, big, s3, out, 3, 0)
    r = _run(unroll_bin, big, s3, out, 2, 1, check=False)
    assert r.returncode == 2 and b"run.txt" in r.stderr, r.stderr
    out2 = _out()
    st, _ = s3.request("PUT", f"/{BUCKET}/{out2}/run/checkpoints/0/stray", b"x")
    assert st == 200
    r = _run(unroll_bin, big, s3, out2, 2, 0, check=False)
    assert r.returncode == 2 and b"stray" in r.stderr, r.stderr


def _claim_text(s3, out):
    st, body = s3.request("GET", f"/{BUCKET}/{out}/run/checkpoints/0/unroll-multi/finish.claim")
    return body.decode() if st == 200 else None


def test_finisher_killed_mid_upload_rerun_of_its_index_publishes(unroll_bin, big, single, s3,
                                                                  tmp_path):
    """The finisher is stopped (gdb) while it uploads the finish, after every data object,
    manifest and metadata and the items/ marker, before the step's marker, and killed: its claim
    stays. A rerun of another index leaves it to the claim's holder; a rerun of the finisher's
    own index (a Slurm or Kubernetes retry) takes it over, redoes the finish over what the dead
    one uploaded, and publishes the same output as a single process."""
    gdb = _gdb()
    out = _out()
    _run(unroll_bin, big, s3, out, 2, 0)
    last = _args(unroll_bin, big, f"s3://{BUCKET}/{out}",
                 ["-j1", "--process-count", 2, "--process-index", 1])
    # the write of a commit marker in put_one; the second one is the step's own
    src = ROOT / "src" / "job" / "job_upload.c"
    line = next(n for n, text in enumerate(src.read_text().splitlines(), 1)
                if "ur_kvstore_write(j->dst, it->key, text.data" in text)
    script = tmp_path / "gdb.cmds"
    script.write_text("set pagination off\nset confirm off\n"
                      f"break job_upload.c:{line}\nignore 1 1\nrun\nkill\n")
    env = s3.env()
    env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":detect_leaks=0").lstrip(":")
    res = subprocess.run([gdb, "-q", "-batch", "-x", str(script), "--args", *last],
                         capture_output=True, text=True, timeout=600, env=env)
    assert "Breakpoint 1," in res.stdout, res.stdout + res.stderr
    keys = _step_keys(s3, out)
    assert "items/manifest.ocdbt" in keys and "items/commit_success.txt" in keys, keys
    assert "commit_success.txt" not in keys, keys
    claim = _claim_text(s3, out)
    assert claim is not None and claim.startswith("process 1 of 2, pid "), claim
    assert " started " in claim, claim
    # another index: the claim is not its own; nothing published
    r = _run(unroll_bin, big, s3, out, 2, 0)
    assert "commit_success.txt" not in _step_keys(s3, out)
    # the finisher's own index: taken over
    args = list(last)
    args.remove("-q")
    r = subprocess.run(args, env=s3.env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "took over the finish" in r.stderr, r.stderr
    _check_same(s3, out, 2, single, tmp_path)


def test_rerun_after_publication_with_other_arguments_is_refused(unroll_bin, big, single, s3,
                                                                 tmp_path):
    out = _out()
    for i in range(2):
        _run(unroll_bin, big, s3, out, 2, i)
    assert "unroll-run.txt" in _step_keys(s3, out)
    # the same arguments: nothing to do
    _run(unroll_bin, big, s3, out, 2, 0)
    # another process count, another memory limit (slab budget): refused, nothing touched
    r = _run(unroll_bin, big, s3, out, 3, 0, check=False)
    assert r.returncode == 2 and b"unroll-run.txt" in r.stderr, r.stderr
    assert r.stderr.count(b"\n") == 1, r.stderr
    args = _args(unroll_bin, big, f"s3://{BUCKET}/{out}",
                 ["-j1", "--memory-limit", "64M", "--process-count", 2, "--process-index", 1])
    r = subprocess.run(args, env=s3.env(), capture_output=True, timeout=600)
    assert r.returncode == 2 and b"other arguments" in r.stderr, r.stderr
    _check_same(s3, out, 2, single, tmp_path)


def test_rerun_after_publication_removes_what_a_dead_finisher_left(unroll_bin, big, single, s3,
                                                                  tmp_path):
    """A finisher killed after the commit marker, before it deleted the run's objects, leaves
    S/unroll-multi/ (a directory in the step, where Orbax looks for items): a rerun of any index
    finds the step published and deletes them."""
    out = _out()
    for i in range(2):
        _run(unroll_bin, big, s3, out, 2, i)
    step = f"/{BUCKET}/{out}/run/checkpoints/0"
    st, run_txt = s3.request("GET", f"{step}/unroll-run.txt")
    assert st == 200
    for key, body in (("run.txt", run_txt), ("shares/0.done", b"x"),
                      ("finish.claim", b"process 1 of 2, pid 1 on elsewhere, started 0\n")):
        assert s3.request("PUT", f"{step}/unroll-multi/{key}", body)[0] == 200
    _run(unroll_bin, big, s3, out, 2, 0)
    _check_same(s3, out, 2, single, tmp_path)


def test_run_identity_is_the_same_on_every_machine(unroll_bin, big, single, s3, tmp_path):
    """Processes on machines that mount the input and the config at other paths (here: a
    symbolic link to the input, a copy of the config) join the same run; run.txt names no
    local path. The notes name the destination without a trailing slash."""
    out = _out()
    _run(unroll_bin, big, s3, out, 2, 0)
    st, body = s3.request("GET", f"/{BUCKET}/{out}/run/checkpoints/0/unroll-multi/run.txt")
    assert st == 200
    assert str(big.items) not in body.decode() and str(ROOT) not in body.decode(), body
    cfg = tmp_path / "elsewhere" / "unroll.yml"
    cfg.parent.mkdir()
    args = _args(unroll_bin, big, f"s3://{BUCKET}/{out}",
                 ["-j1", "--process-count", 2, "--process-index", 1])
    shutil.copy(args[1], cfg)
    link = tmp_path / "elsewhere" / "input"
    link.symlink_to(big.items)
    args[1] = str(cfg)
    key = args[3].split("=", 1)[0]
    args[3] = f"{key}={link}"
    args.remove("-q")
    r = subprocess.run(args, env=s3.env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert f"uploading it to s3://{BUCKET}/{out}/run/checkpoints\n" in r.stderr, r.stderr
    _check_same(s3, out, 2, single, tmp_path)


# ---- an input in a bucket; --resume into a bucket -------------------------------------------


@pytest.fixture(scope="module")
def big_in_s3(s3, big):
    """The `big` checkpoint copied into the bucket by TensorStore: its item location."""
    assert s3.upload_tree(big.root, BUCKET, "in/big/checkpoints") > 0
    return f"s3://{BUCKET}/in/big/checkpoints/{big.step}/items"


def _args_in(unroll_bin, info, in_url, out, extra=()):
    """_args reading the input at `in_url` instead of the fixture's local item dir."""
    key = f"{info.input_key}="
    return [f"{key}{in_url}" if a.startswith(key) else a
            for a in _args(unroll_bin, info, out, extra)]


def _multi(count, index, *more):
    return ["-j1", *more, "--process-count", count, "--process-index", index]


def _check_local(out, count, single, what):
    items = out / "run" / "checkpoints" / "0" / "items"
    for i in range(count):
        assert (items / f"ocdbt.process_{i}" / "manifest.ocdbt").is_file()
    assert not (out / "run" / "checkpoints.unroll-multi").exists()
    reference.compare_trees(reference.restore(items), single[1], what)
    return items


def _wait_for(pattern, proc, timeout=120):
    """Poll until a file matching the glob `pattern` exists (or proc ends); its path or None."""
    deadline = time.time() + timeout
    while proc.poll() is None and time.time() < deadline:
        hits = glob.glob(str(pattern))
        if hits:
            return hits[0]
        time.sleep(0.002)
    return None


@pytest.mark.parametrize("count", [2, 4])
def test_s3_input_processes_into_local_dir(unroll_bin, big, single, s3, big_in_s3, tmp_path,
                                           count):
    """Each process reads its share's chunks from the bucket (the shares' bytes add up to the
    input's, none reads it all); the output equals the single-process one, and (4 processes)
    MaxText's reference through Orbax's three ways of restoring."""
    procs = [subprocess.Popen([a for a in _args_in(unroll_bin, big, big_in_s3, tmp_path,
                                                   _multi(count, i)) if a != "-q"],
                              env=s3.env(), stderr=subprocess.PIPE, text=True)
             for i in range(count)]
    shares = []
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
        m = re.search(r"complete: [\d.]+ MiB of [\d.]+ MiB read \(([\d.]+)%\)", err)
        assert m is not None, err
        shares.append(float(m.group(1)))
    assert all(0 < x < 100 for x in shares) and abs(sum(shares) - 100) < 0.5, shares
    items = _check_local(tmp_path, count, single, "multi-process output of an S3 input")
    if count == 4:
        reference.check_unrolled(items, reference.reference_for(big))


def test_s3_input_processes_into_s3(unroll_bin, big, single, s3, big_in_s3, tmp_path):
    out = _out()
    procs = [subprocess.Popen(_args_in(unroll_bin, big, big_in_s3, f"s3://{BUCKET}/{out}",
                                       _multi(3, i)), env=s3.env(), stderr=subprocess.PIPE)
             for i in range(3)]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err.decode()
    _check_same(s3, out, 3, single, tmp_path)
    # the run's identity names the input's location (the same on every machine)
    st, run_txt = s3.request("GET", f"/{BUCKET}/{out}/run/checkpoints/0/unroll-run.txt")
    assert st == 200 and f"\ninput {big_in_s3}\n" in run_txt.decode(), run_txt


def test_s3_input_killed_share_continues(unroll_bin, big, single, s3, big_in_s3, tmp_path):
    """A share reading from the bucket, SIGKILLed after its first commit: rerun, it continues
    from there, and the output is the single-process one."""
    staging = tmp_path / "run" / "checkpoints.unroll-multi"
    args = _args_in(unroll_bin, big, big_in_s3, tmp_path, _multi(2, 0, "--commit-every", "256K"))
    v = subprocess.Popen(args, env=s3.env(), stderr=subprocess.PIPE)
    _wait_for(staging / "shares" / "0.progress", v)
    v.send_signal(signal.SIGKILL)
    v.communicate()
    assert v.returncode == -signal.SIGKILL, "the share ended before its first commit"
    r = subprocess.run([a for a in args if a != "-q"], env=s3.env(), capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "continuing a killed run of it (from work item" in r.stderr, r.stderr
    subprocess.run(_args_in(unroll_bin, big, big_in_s3, tmp_path, _multi(2, 1)), env=s3.env(),
                   check=True, timeout=600)
    _check_local(tmp_path, 2, single, "resumed multi-process output of an S3 input")


@pytest.mark.parametrize("dest", ["local", "s3"])
def test_s3_input_rerun_with_another_input_is_refused(unroll_bin, big, s3, big_in_s3, tmp_path,
                                                      dest):
    """Another input location holding the same top-level files (so the same fingerprints) is
    another input: a share given it is refused, nothing is published."""
    other = f"in/other-{uuid.uuid4().hex[:8]}/items"
    for name in ("manifest.ocdbt", "_METADATA"):
        body = (big.items / name).read_bytes()
        assert s3.request("PUT", f"/{BUCKET}/{other}/{name}", body)[0] == 200
    out = tmp_path if dest == "local" else f"s3://{BUCKET}/{_out()}"
    subprocess.run(_args_in(unroll_bin, big, big_in_s3, out, _multi(2, 0)), env=s3.env(),
                   check=True, timeout=600)
    r = subprocess.run(_args_in(unroll_bin, big, f"s3://{BUCKET}/{other}", out, _multi(2, 1)),
                       env=s3.env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and "another input" in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1, r.stderr
    if dest == "local":
        assert not (tmp_path / "run" / "checkpoints").exists()
    else:
        keys = _step_keys(s3, out[len(f"s3://{BUCKET}/"):])
        assert "commit_success.txt" not in keys and "items/ocdbt.process_1/manifest.ocdbt" \
            not in keys, keys
        # an input inside the output step: refused before anything is written
        inner = _out()
        for name in ("manifest.ocdbt", "_METADATA"):
            body = (big.items / name).read_bytes()
            path = f"/{BUCKET}/{inner}/run/checkpoints/0/in/{name}"
            assert s3.request("PUT", path, body)[0] == 200
        r = subprocess.run(_args_in(unroll_bin, big,
                                    f"s3://{BUCKET}/{inner}/run/checkpoints/0/in",
                                    f"s3://{BUCKET}/{inner}", _multi(2, 0)),
                           env=s3.env(), capture_output=True, text=True, timeout=600)
        assert r.returncode == 2 and "overlap" in r.stderr, r.stderr
        assert "unroll-multi/run.txt" not in _step_keys(s3, inner)


def _gdb_kill_at(gdb, function, args, env, tmp_path):
    """Run `args` under gdb until `function` is called, then kill it."""
    script = tmp_path / "gdb.cmds"
    script.write_text(f"set pagination off\nset confirm off\nbreak {function}\nrun\nkill\n")
    env = dict(env)
    env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":detect_leaks=0").lstrip(":")
    res = subprocess.run([gdb, "-q", "-batch", "-x", str(script), "--args", *args],
                         capture_output=True, text=True, timeout=600, env=env)
    assert "Breakpoint 1," in res.stdout, res.stdout + res.stderr
    return res.stdout + res.stderr


def test_resume_into_s3_killed_and_rerun(unroll_bin, big, single, s3, tmp_path):
    """--resume into a bucket runs as share 0 of 1 of the object-store protocol, converting in
    $TMPDIR/unroll-share-<run>-0. SIGKILLed after its first local commit: a rerun with other
    arguments is refused, one without --resume too, and one with the same arguments continues
    from the commit. Killed (gdb) after converting, before uploading: the rerun uploads without
    converting again; killed after uploading, before the finish: the rerun only finishes. Each
    time the output is the single-process one and the local tree is gone."""
    out = _out()
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = s3.env(TMPDIR=str(tmp))
    args = _args(unroll_bin, big, f"s3://{BUCKET}/{out}",
                 ["-j1", "--resume", "--commit-every", "256K"])
    v = subprocess.Popen(args, env=env, stderr=subprocess.PIPE)
    _wait_for(tmp / "unroll-share-*" / "checkpoints.unroll-multi" / "shares" / "0.progress", v)
    v.send_signal(signal.SIGKILL)
    v.communicate()
    assert v.returncode == -signal.SIGKILL, "the run ended before its first commit"
    keys = _step_keys(s3, out)
    assert "unroll-multi/run.txt" in keys and "commit_success.txt" not in keys, keys
    r = subprocess.run(args + ["pure_nnx=true"], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 2 and "other arguments" in r.stderr, r.stderr
    # the same share started twice on this machine: the second is refused, the tree kept
    lock = glob.glob(str(tmp / "unroll-share-*" / "checkpoints.unroll-multi" / "shares"
                         / "0.lock"))
    assert len(lock) == 1, lock
    with open(lock[0], "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # as a running attempt holds it
        r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 3 and "being run by another process" in r.stderr, r.stderr
    assert os.path.exists(lock[0])
    # without --resume the staged run is objects in the step like any others: refused
    r = subprocess.run([a for a in args if a != "--resume"], env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 2 and "already holds" in r.stderr, r.stderr
    r = subprocess.run([a for a in args if a != "-q"], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    assert "continuing a killed run of it (from work item" in r.stderr, r.stderr
    _check_same(s3, out, 1, single, tmp_path / "a")
    assert not list(tmp.iterdir())

    gdb = _gdb()
    out = _out()
    args = _args(unroll_bin, big, f"s3://{BUCKET}/{out}", ["-j1", "--resume"])
    _gdb_kill_at(gdb, "ur_job_rshare_upload", args, env, tmp_path)
    assert not [k for k in _step_keys(s3, out) if k.startswith("items/")]
    said = _gdb_kill_at(gdb, "ur_job_rshare_finish", [a for a in args if a != "-q"], env,
                        tmp_path)
    assert "converted by an earlier attempt, not redone" in said, said
    keys = _step_keys(s3, out)
    assert "unroll-multi/shares/0.done" in keys and "commit_success.txt" not in keys, keys
    r = subprocess.run([a for a in args if a != "-q"], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    assert "share 0 of 1 is already complete: not redone" in r.stderr, r.stderr
    _check_same(s3, out, 1, single, tmp_path / "b")
    assert not list(tmp.iterdir())


def test_resume_into_s3_does_not_take_a_tree_of_another_run(unroll_bin, big, single, s3,
                                                             tmp_path):
    """A killed run's local tree is found again only by the same run: after the bucket's staged
    run is deleted and the config's content changed (same path, same local run text), the rerun
    starts afresh instead of continuing what the other run converted."""
    out = _out()
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = s3.env(TMPDIR=str(tmp))
    cfg = tmp_path / "unroll.yml"
    args = _args(unroll_bin, big, f"s3://{BUCKET}/{out}",
                 ["-j1", "--resume", "--commit-every", "256K"])
    shutil.copy(args[1], cfg)
    args[1] = str(cfg)
    v = subprocess.Popen(args, env=env, stderr=subprocess.PIPE)
    _wait_for(tmp / "unroll-share-*" / "checkpoints.unroll-multi" / "shares" / "0.progress", v)
    v.send_signal(signal.SIGKILL)
    v.communicate()
    assert v.returncode == -signal.SIGKILL, "the run ended before its first commit"
    # (a request the killed run had sent, its progress going up, may land after a listing)
    for _ in range(50):
        keys = _step_keys(s3, out)
        if not keys:
            break
        for key in keys:
            assert s3.request("DELETE",
                              f"/{BUCKET}/{out}/run/checkpoints/0/{key}")[0] in (200, 204)
        time.sleep(0.1)
    assert not _step_keys(s3, out)
    with open(cfg, "a") as f:
        f.write("\n# edited\n")
    r = subprocess.run([a for a in args if a != "-q"], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    assert "continuing a killed run" not in r.stderr, r.stderr
    _check_same(s3, out, 1, single, tmp_path / "a")


def _gdb() -> str:
    """gdb, which the tests that stop a run at a chosen point drive (never skipped)."""
    gdb = shutil.which("gdb")
    assert gdb is not None, "gdb is not installed (scripts/setup.sh --tests installs it)"
    return gdb


def _machines(tmp_path):
    """Two empty TMPDIRs: the first attempt's machine and the one a rerun "elsewhere" uses."""
    first, second = tmp_path / "vm1", tmp_path / "vm2"
    first.mkdir()
    second.mkdir()
    return first, second


def _gdb_kill_after_saves(gdb, args, env, tmp_path, saves, then=""):
    """Run `args` under gdb; on the call of ur_job_rprogress_save after `saves` complete
    ones (the share's progress in the bucket saved that many times), optionally run to the
    breakpoint `then` too, and kill it there."""
    script = tmp_path / "gdb-saves.cmds"
    more = f"break {then}\ncontinue\n" if then else ""
    script.write_text("set pagination off\nset confirm off\nset breakpoint pending off\n"
                      f"break ur_job_rprogress_save\nignore 1 {saves}\nrun\n{more}kill\n")
    env = dict(env)
    env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":detect_leaks=0").lstrip(":")
    res = subprocess.run([gdb, "-q", "-batch", "-x", str(script), "--args", *args],
                         capture_output=True, text=True, timeout=600, env=env)
    said = res.stdout + res.stderr
    assert "Breakpoint 1," in said, said
    assert not then or "hit Breakpoint 2" in said, said
    return said


def _mark_next(s3, out, i):
    """The resume point of share i's progress mark in the bucket."""
    code, body = s3.request("GET", f"/{BUCKET}/{out}/run/checkpoints/0/unroll-multi/shares/"
                                   f"{i}.progress")
    assert code == 200, (code, body)
    first = body.decode().splitlines()[0]
    assert first.startswith("next_item "), body
    return int(first.split()[1])


def _mark_files(s3, out, i):
    """The data files ("d/<hex>") share i's progress mark in the bucket lists."""
    code, body = s3.request("GET", f"/{BUCKET}/{out}/run/checkpoints/0/unroll-multi/shares/"
                                   f"{i}.progress")
    assert code == 200, (code, body)
    return {line.split()[0] for line in body.decode().splitlines()[1:] if line.startswith("d/")}


def test_share_into_s3_killed_continues_on_another_machine(unroll_bin, big, single, s3,
                                                           tmp_path):
    """A share into the bucket uploads its progress at each commit (data files, manifest,
    metadata, then the mark). Killed after two commits and rerun on "another machine" (an
    empty TMPDIR), it fetches the share's database as of the mark and continues from the
    mark's work item (not redoing the committed pieces), and the published output is the
    single-process one. On the binary before the progress was kept in the bucket: no
    ur_job_rprogress_save to stop at, and a rerun elsewhere redid the whole share."""
    gdb = _gdb()
    out = _out()
    first, second = _machines(tmp_path)
    args = _args(unroll_bin, big, f"s3://{BUCKET}/{out}",
                 _multi(2, 0, "--commit-every", "128K"))
    _gdb_kill_after_saves(gdb, args, s3.env(TMPDIR=str(first)), tmp_path, 2)
    at = _mark_next(s3, out, 0)
    assert at > 0
    keys = _step_keys(s3, out)
    assert "items/ocdbt.process_0/manifest.ocdbt" in keys, keys
    assert "unroll-multi/shares/0.done" not in keys and "commit_success.txt" not in keys, keys
    listed = _mark_files(s3, out, 0)
    assert listed
    proxy = s3_fixtures.FaultProxy(s3.port)  # sees what the rerun sends
    try:
        r = subprocess.run([a for a in args if a != "-q"],
                           env=s3.env(proxy.endpoint, TMPDIR=str(second)),
                           capture_output=True, text=True, timeout=600)
    finally:
        proxy.stop()
    assert r.returncode == 0, r.stderr
    assert f"fetched its progress from the store (work items before {at})" in r.stderr, r.stderr
    assert f"continuing a killed run of it (from work item {at})" in r.stderr, r.stderr
    # the data files the mark lists were fetched, and not uploaded again
    fetched = {"d/" + p.split("?")[0].rsplit("/", 1)[1]
               for m, p, _, _ in proxy.served if m == "GET" and "/ocdbt.process_0/d/" in p}
    assert listed <= fetched, (listed, fetched)
    sent = [p for m, p, _, _ in proxy.served if m in ("PUT", "POST")]
    assert sent and not [p for p in sent if any(f in p for f in listed)], sent
    r = subprocess.run([a for a in _args(unroll_bin, big, f"s3://{BUCKET}/{out}",
                                         _multi(2, 1)) if a != "-q"],
                       env=s3.env(TMPDIR=str(second)), capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    _check_same(s3, out, 2, single, tmp_path / "a")
    assert not list(second.iterdir())


def test_resume_into_s3_killed_mid_progress_upload_continues_elsewhere(unroll_bin, big, single,
                                                                       s3, tmp_path):
    """--resume into the bucket (share 0 of 1), killed on its third progress upload between
    the new data files and the manifest: the bucket holds data files no mark lists. Rerun
    with an empty TMPDIR, it continues from the second mark (the files of the killed upload
    sent again or deleted, never taken as sent), and the output is the single-process one."""
    gdb = _gdb()
    out = _out()
    first, second = _machines(tmp_path)
    args = _args(unroll_bin, big, f"s3://{BUCKET}/{out}",
                 ["-j1", "--resume", "--commit-every", "128K"])
    # uploads go through ur_kvstore_write_view (called from another file, so its key is there
    # to test even at -O2; inside it, ur_kvstore_write is inlined and an ASan build loses the
    # key, where gdb then stops at the first write whatever it is)
    _gdb_kill_after_saves(gdb, args, s3.env(TMPDIR=str(first)), tmp_path, 2,
                          "ur_kvstore_write_view if $_streq(key, \"manifest.ocdbt\")")
    at = _mark_next(s3, out, 0)
    listed = _mark_files(s3, out, 0)
    data = {k.split("/", 2)[2] for k in _step_keys(s3, out)
            if k.startswith("items/ocdbt.process_0/d/")}
    assert listed < data, (listed, data)  # the killed upload's data files, unlisted
    r = subprocess.run([a for a in args if a != "-q"], env=s3.env(TMPDIR=str(second)),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert f"fetched its progress from the store (work items before {at})" in r.stderr, r.stderr
    _check_same(s3, out, 1, single, tmp_path / "a")
    assert not list(second.iterdir())


# ---- GCS ------------------------------------------------------------------------------------

GBUCKET = "multi"


class AtomicCondProxy(GateProxy):
    """GateProxy(cond=True) with its existence check and the upload under one lock."""

    def __init__(self, upstream):
        super().__init__(upstream, token=None, cond=True)
        self.cond_lock = threading.Lock()

    def handle(self, h, method):
        if "ifGenerationMatch=0" in h.path:
            with self.cond_lock:
                return super().handle(h, method)
        return super().handle(h, method)


@pytest.fixture(scope="module")
def gcs():
    with FakeGcs() as server:
        server.create_bucket(GBUCKET)
        with AtomicCondProxy(server.url) as proxy:
            yield server, proxy


def _genv(proxy):
    env = {k: v for k, v in os.environ.items()
           if k not in ("GOOGLE_APPLICATION_CREDENTIALS", "UNROLL_GCS_ENDPOINT",
                        "CLOUDSDK_CONFIG")}
    env["STORAGE_EMULATOR_HOST"] = proxy.url
    return env


def _gcs_run(unroll_bin, info, proxy, out, count, index):
    r = subprocess.run(_args(unroll_bin, info, f"gs://{GBUCKET}/{out}",
                             ["-j1", "--process-count", count, "--process-index", index]),
                       env=_genv(proxy), capture_output=True, timeout=600)
    assert r.returncode == 0, r.stderr.decode()


@pytest.mark.parametrize("count", [3])
def test_background_processes_into_gcs(unroll_bin, big, single, gcs, tmp_path, monkeypatch,
                                       count):
    server, proxy = gcs
    out = _out()
    procs = [subprocess.Popen(_args(unroll_bin, big, f"gs://{GBUCKET}/{out}",
                                    ["-j1", "--process-count", count, "--process-index", i]),
                              env=_genv(proxy), stderr=subprocess.PIPE)
             for i in range(count)]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err.decode()
    use_emulator(monkeypatch, server.url)
    names = ts_list(GBUCKET, f"{out}/run/checkpoints")
    for i in range(count):
        assert f"0/items/ocdbt.process_{i}/manifest.ocdbt" in names
    assert "0/commit_success.txt" in names
    assert not [n for n in names if "/unroll-multi/" in n], names
    check_in_bucket(f"gs://{GBUCKET}/{out}/run/checkpoints/0/items", single[1], tmp_path)


def test_gcs_missing_share_then_merge_refused_then_rerun(unroll_bin, big, single, gcs, tmp_path,
                                                         monkeypatch):
    server, proxy = gcs
    use_emulator(monkeypatch, server.url)  # TensorStore's listing
    out = _out()
    _gcs_run(unroll_bin, big, proxy, out, 2, 1)
    assert "0/items/manifest.ocdbt" not in ts_list(GBUCKET, f"{out}/run/checkpoints")
    r = subprocess.run([str(unroll_bin), "merge", f"gs://{GBUCKET}/{out}/run/checkpoints"],
                       env=_genv(proxy), capture_output=True, timeout=300)
    assert r.returncode == 3 and b"process index 0" in r.stderr, r.stderr
    names = ts_list(GBUCKET, f"{out}/run/checkpoints")
    assert not [n for n in names if n.endswith("commit_success.txt")], names
    _gcs_run(unroll_bin, big, proxy, out, 2, 0)
    check_in_bucket(f"gs://{GBUCKET}/{out}/run/checkpoints/0/items", single[1], tmp_path)


def test_gcs_input_processes_into_gcs(unroll_bin, big, single, gcs, tmp_path, monkeypatch):
    """An input in a GCS bucket, 2 processes writing into GCS: the output equals the
    single-process one."""
    server, proxy = gcs
    use_emulator(monkeypatch, server.url)
    assert upload_tree(big.root, GBUCKET, "in/big/checkpoints") > 0
    in_url = f"gs://{GBUCKET}/in/big/checkpoints/{big.step}/items"
    out = _out()
    procs = [subprocess.Popen(_args_in(unroll_bin, big, in_url, f"gs://{GBUCKET}/{out}",
                                       _multi(2, i)), env=_genv(proxy), stderr=subprocess.PIPE)
             for i in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err.decode()
    names = ts_list(GBUCKET, f"{out}/run/checkpoints")
    assert "0/items/ocdbt.process_1/manifest.ocdbt" in names and "0/commit_success.txt" in names
    assert not [n for n in names if "/unroll-multi/" in n], names
    download_tree(GBUCKET, f"{out}/run/checkpoints", tmp_path / "down")
    reference.compare_trees(reference.restore(tmp_path / "down" / "0" / "items"), single[1],
                            "multi-process output of a GCS input")
