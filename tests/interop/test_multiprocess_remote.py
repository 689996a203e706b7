"""A multi-process conversion into an object store (unroll/orbax_share_remote.h): each process
writes its share under the final step prefix, the finisher is the process whose conditional
create of the claim object succeeds, and the top-level manifest, metadata and commit marker go
up last. Against a real S3 server (SeaweedFS) and fake-gcs-server. The oracle as in
test_multiprocess.py: the output, restored by stock Orbax (from a TensorStore download for S3,
straight from the bucket for GCS), equals the single-process output bit for bit.

fake-gcs-server ignores ifGenerationMatch on uploads: as in test_gcs.py a proxy in front of it
answers 412 for an existing object, here holding a lock over the check and the upload so that
the create is atomic as on GCS."""
import os
import shutil
import subprocess
import threading
import uuid

import pytest

import reference
from test_kill import ROOT
import s3_fixtures
from gcs_fixtures import check_in_bucket, ts_list, use_emulator
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
    gdb = shutil.which("gdb")
    assert gdb is not None, "gdb is not installed (scripts/setup.sh --tests installs it)"
    out = _out()
    _run(unroll_bin, big, s3, out, 2, 0)
    last = _args(unroll_bin, big, f"s3://{BUCKET}/{out}",
                 ["-j1", "--process-count", 2, "--process-index", 1])
    # the write of a commit marker in put_one; the second one is the step's own
    src = ROOT / "src" / "orbax" / "orbax_upload.c"
    line = next(n for n, text in enumerate(src.read_text().splitlines(), 1)
                if "ur_kvstore_write(j->dst, it->key, text.data" in text)
    script = tmp_path / "gdb.cmds"
    script.write_text("set pagination off\nset confirm off\n"
                      f"break orbax_upload.c:{line}\nignore 1 1\nrun\nkill\n")
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
