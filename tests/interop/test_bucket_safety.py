"""Never publish a wrong checkpoint from a bucket or a resume (issue 25, items 1, 3 and 4).

- Two single-process conversions of different inputs into one s3:// (or gs://) destination
  at the same time: the destination is claimed with the store's conditional create before
  anything is written, so exactly one run publishes, the other exits 3 naming the destination
  and the run holding it, and the published step is the winner's conversion (stock Orbax
  restores it bit for bit).
- A --resume run into s3:// killed between a commit's manifest upload and its progress mark:
  a rerun on another machine (an empty TMPDIR) continues from the last whole mark.
- The final publication in Orbax's commit-file order: every object of the item before the
  step's _CHECKPOINT_METADATA, the commit markers last; a run killed at each upload in turn
  never leaves a step that looks saved, and its rerun publishes the right output.

Real servers: SeaweedFS (S3) and fake-gcs-server behind the atomic conditional-create proxy of
test_multiprocess_remote.py (fake-gcs-server ignores ifGenerationMatch)."""
import dataclasses
import http.server
import os
import signal
import subprocess
import threading
import time
import uuid

import pytest

import reference
import s3_fixtures
from gcs_fixtures import download_tree, ts_list, use_emulator
from gcs_servers import FakeGcs
from test_kill import BIG, TIMED, _cached_fixture
from test_multiprocess import _args, big, single  # noqa: F401 (fixtures)
from test_multiprocess_remote import (AtomicCondProxy, _gdb, _gdb_kill_after_saves, _genv,
                                      _machines)

BUCKET = "bucket-safety"
GBUCKET = "safety"
CLAIM = "unroll-claim.txt"

s3 = s3_fixtures.server_fixture(BUCKET)


def _out():
    return f"out-{uuid.uuid4().hex[:8]}"


def _keys(s3, out):
    return s3.list(BUCKET, f"{out}/run/checkpoints/0")


def _get(s3, out, key):
    code, body = s3.request("GET", f"/{BUCKET}/{out}/run/checkpoints/0/{key}")
    assert code == 200, (code, key, body[:200])
    return body


@pytest.fixture(scope="module")
def other(fixture_cache):
    """A second input of the same layout whose values differ from `big`'s."""
    return _cached_fixture(fixture_cache, dataclasses.replace(BIG, vocab=1024), "kill")


@pytest.fixture(scope="module")
def other_single(unroll_bin, other, tmp_path_factory):
    out = tmp_path_factory.mktemp("other-single")
    subprocess.run(_args(unroll_bin, other, out, ["-j2"]), check=True)
    return reference.restore(out / "run" / "checkpoints" / "0" / "items")


def _race(unroll_bin, infos, dest, env):
    """Both conversions started at once; returns [(returncode, stderr, pid)] in input order.
    Every write goes through a proxy that delays it (0.5 s), so each run has looked at the
    destination before the other's first write lands: the two overlap whatever the timing."""
    procs = [subprocess.Popen(_args(unroll_bin, info, dest, ["-j1"]), env=env,
                              stderr=subprocess.PIPE, text=True) for info in infos]
    res = []
    for p in procs:
        _, err = p.communicate(timeout=600)
        res.append((p.returncode, err, p.pid))
    return res


def _one_winner(res, dest):
    """Exactly one run published; the other was refused naming the destination and the
    winner. Returns the winner's index."""
    ok = [i for i, r in enumerate(res) if r[0] == 0]
    assert len(ok) == 1, [(r[0], r[1][-600:]) for r in res]
    win = ok[0]
    code, err, _ = res[1 - win]
    assert code == 3, err
    assert f"{dest}/run/checkpoints/0" in err, err
    assert f"pid {res[win][2]} " in err, err  # the run holding it
    return win


def test_two_runs_into_one_s3_destination_one_publishes(unroll_bin, big, single, other,
                                                        other_single, s3, tmp_path):
    """Two conversions of different inputs into one s3:// destination at once (twice): one
    exits 0, the other 3 naming the destination and the winner's pid, and Orbax restores the
    winner's conversion from what is published. Before the claim both exited 0 and the step
    mixed the two runs' objects (their data files have the same names)."""
    for attempt in range(2):
        out = _out()
        dest = f"s3://{BUCKET}/{out}"
        slow = HoldProxy(s3.port, delay=0.5)
        try:
            res = _race(unroll_bin, [big, other], dest, s3.env(slow.endpoint))
        finally:
            slow.stop()
        win = _one_winner(res, dest)
        keys = _keys(s3, out)
        assert "commit_success.txt" in keys and CLAIM not in keys, keys
        down = tmp_path / f"down{attempt}"
        s3.download_tree(BUCKET, f"{out}/run/checkpoints", down)
        reference.compare_trees(reference.restore(down / "0" / "items"),
                                [single[1], other_single][win], "the race's winner")


@pytest.fixture(scope="module")
def gcs():
    with FakeGcs() as server:
        server.create_bucket(GBUCKET)
        with AtomicCondProxy(server.url) as proxy:
            yield server, proxy


def test_two_runs_into_one_gcs_destination_one_publishes(unroll_bin, big, single, other,
                                                         other_single, gcs, tmp_path,
                                                         monkeypatch):
    """As above into gs:// (fake-gcs-server behind the atomic conditional-create proxy)."""
    server, proxy = gcs
    out = _out()
    dest = f"gs://{GBUCKET}/{out}"
    slow = HoldProxy(int(proxy.url.rsplit(":", 1)[1]), delay=0.5)
    try:
        env = _genv(proxy)
        env["STORAGE_EMULATOR_HOST"] = slow.endpoint
        res = _race(unroll_bin, [big, other], dest, env)
    finally:
        slow.stop()
    win = _one_winner(res, dest)
    use_emulator(monkeypatch, server.url)
    names = ts_list(GBUCKET, f"{out}/run/checkpoints")
    assert "0/commit_success.txt" in names and f"0/{CLAIM}" not in names, names
    download_tree(GBUCKET, f"{out}/run/checkpoints", tmp_path / "down")
    reference.compare_trees(reference.restore(tmp_path / "down" / "0" / "items"),
                            [single[1], other_single][win], "the race's winner in GCS")


def test_claim_of_a_killed_run(unroll_bin, big, single, other, s3, tmp_path):
    """A run killed after its claim leaves it: a run of another input is refused (exit 3,
    saying how to clear it); a rerun of the same run takes it over and publishes."""
    out = _out()
    dest = f"s3://{BUCKET}/{out}"
    args = _args(unroll_bin, big, dest, ["-j1"])
    _gdb_kill_at_upload(_gdb(), args, s3.env(), tmp_path)
    keys = _keys(s3, out)
    assert CLAIM in keys and "commit_success.txt" not in keys, keys
    r = subprocess.run(_args(unroll_bin, other, dest, ["-j1"]), env=s3.env(),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 3 and f"{dest}/run/checkpoints/0/{CLAIM}" in r.stderr, r.stderr
    r = subprocess.run(args, env=s3.env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    keys = _keys(s3, out)
    assert "commit_success.txt" in keys and CLAIM not in keys, keys
    s3.download_tree(BUCKET, f"{out}/run/checkpoints", tmp_path / "down")
    reference.compare_trees(reference.restore(tmp_path / "down" / "0" / "items"), single[1],
                            "rerun after a kill")


def _gdb_kill_at_upload(gdb, args, env, tmp_path):
    """Run `args` under gdb until the final upload starts (ur_job_upload), then kill it."""
    script = tmp_path / "gdb-upload.cmds"
    script.write_text("set pagination off\nset confirm off\nbreak ur_job_upload\nrun\nkill\n")
    env = dict(env)
    env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":detect_leaks=0").lstrip(":")
    res = subprocess.run([gdb, "-q", "-batch", "-x", str(script), "--args", *args],
                         capture_output=True, text=True, timeout=600, env=env)
    assert "Breakpoint 1," in res.stdout, res.stdout + res.stderr


# ---- item 3: --resume killed between a commit's manifest and its mark ----------------------

def test_resume_killed_between_manifest_and_mark_continues_elsewhere(unroll_bin, big, single,
                                                                     s3, tmp_path):
    """--resume into s3:// (share 0 of 1), killed on its third progress save after the new
    manifest went up, before the mark: the bucket's manifest is a generation the mark does not
    describe. A rerun on another machine (empty TMPDIR) continues from the second mark and the
    output is the single-process one. Before: every such rerun failed "cannot open data file"
    (the store's newer manifest fetched beside the mark's data files)."""
    gdb = _gdb()
    out = _out()
    first, second = _machines(tmp_path)
    args = _args(unroll_bin, big, f"s3://{BUCKET}/{out}",
                 ["-j1", "--resume", "--commit-every", "128K"])
    _gdb_kill_after_saves(gdb, args, s3.env(TMPDIR=str(first)), tmp_path, 2,
                          "ur_kvstore_write if $_streq(key, \"unroll-multi/shares/0.progress\")")
    r = subprocess.run([a for a in args if a != "-q"], env=s3.env(TMPDIR=str(second)),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "fetched its progress from the store" in r.stderr, r.stderr
    keys = _keys(s3, out)
    assert "commit_success.txt" in keys, keys
    s3.download_tree(BUCKET, f"{out}/run/checkpoints", tmp_path / "down")
    reference.compare_trees(reference.restore(tmp_path / "down" / "0" / "items"), single[1],
                            "resumed elsewhere")
    assert not list(second.iterdir())


# ---- item 4: the upload order, and a kill at each upload ----------------------------------

class HoldProxy:
    """A proxy in front of a server (S3, or the GCS proxy) that logs every request, delays each
    PUT and POST by `delay` seconds, and from `hold_at` on (the k-th object written to S3: a
    PUT that is not a multipart part, or a multipart completion) answers nothing more: that
    write never reaches the server, and `held` is set."""

    def __init__(self, upstream_port, hold_at=0, delay=0.0):
        self.log = []
        self.writes = 0
        self.hold_at = hold_at
        self.held = threading.Event()
        self.release = threading.Event()
        self.lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _any(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                write = ((self.command == "PUT" and "partNumber=" not in self.path)
                         or (self.command == "POST" and "uploadId=" in self.path))
                with proxy.lock:
                    if write:
                        proxy.writes += 1
                    hold = (write and proxy.hold_at > 0 and proxy.writes >= proxy.hold_at)
                    if not hold:
                        proxy.log.append((self.command, self.path))
                if hold:
                    proxy.held.set()
                    proxy.release.wait(60)
                    self.close_connection = True
                    return
                if delay and self.command in ("PUT", "POST"):
                    time.sleep(delay)
                status, headers, data = s3_fixtures.forward(self, upstream_port, body)
                s3_fixtures.answer_head(self, status, headers, len(data))
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

        self.server = s3_fixtures.serve(Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    def written(self, prefix):
        """The keys below `prefix` written, in the order the writes reached the server."""
        keys = []
        for method, path in self.log:
            p = path.split("?")[0]
            if ((method == "PUT" and "partNumber=" not in path)
                    or (method == "POST" and "uploadId=" in path)) and p.startswith(prefix):
                keys.append(p[len(prefix):])
        return keys


def _step_objects(s3, out):
    """key -> bytes of every object of the step, the time-stamped ones as None."""
    return {k: None if k.rsplit("/", 1)[-1] in TIMED else _get(s3, out, k)
            for k in _keys(s3, out)}


def _looks_saved_only_if_whole(keys, full):
    """A step that looks saved (its _CHECKPOINT_METADATA or a commit marker there) holds every
    object of the item."""
    items = {k for k in full if k.startswith("items/") and not k.endswith("commit_success.txt")}
    if "_CHECKPOINT_METADATA" in keys or any(k.endswith("commit_success.txt") for k in keys):
        assert items <= set(keys), sorted(items - set(keys))
    if "commit_success.txt" in keys:
        assert set(full) <= set(keys), sorted(set(full) - set(keys))


def test_upload_order_and_a_kill_at_each_upload(unroll_bin, make_fixture, s3, tmp_path):
    """A conversion into s3://, its writes seen by a proxy: every items/ object goes up before
    the step's _CHECKPOINT_METADATA, the commit markers last (items', then the step's). Then
    one run per upload k, held at its k-th write and SIGKILLed there: the step never looks
    saved beside an unfinished item, and a rerun of the same command publishes the same
    objects as the complete run. Before: _CHECKPOINT_METADATA went up before items/_METADATA,
    and a rerun after a kill was refused (the destination held the killed run's objects)."""
    info = make_fixture("linen")
    local = tmp_path / "local"
    subprocess.run(_args(unroll_bin, info, local, ["-j1"]), check=True)
    expected = reference.restore(local / "run" / "checkpoints" / "0" / "items")

    out = _out()
    prefix = f"/{BUCKET}/{out}/run/checkpoints/0/"
    proxy = HoldProxy(s3.port)
    try:
        r = subprocess.run(_args(unroll_bin, info, f"s3://{BUCKET}/{out}", ["-j1"]),
                           env=s3.env(proxy.endpoint), capture_output=True, text=True,
                           timeout=600)
    finally:
        proxy.stop()
    assert r.returncode == 0, r.stderr
    order = [k for k in proxy.written(prefix) if k != CLAIM]
    n_writes = proxy.writes
    meta = order.index("_CHECKPOINT_METADATA")
    last_item = max(i for i, k in enumerate(order)
                    if k.startswith("items/") and not k.endswith("commit_success.txt"))
    assert last_item < meta, order
    assert order[-2:] == ["items/commit_success.txt", "commit_success.txt"], order
    full = _step_objects(s3, out)
    assert CLAIM not in full, sorted(full)
    s3.download_tree(BUCKET, f"{out}/run/checkpoints", tmp_path / "down")
    reference.compare_trees(reference.restore(tmp_path / "down" / "0" / "items"), expected,
                            "into S3 through the proxy")

    for k in range(1, n_writes + 1):
        out = _out()
        args = _args(unroll_bin, info, f"s3://{BUCKET}/{out}", ["-j1"])
        proxy = HoldProxy(s3.port, hold_at=k)
        try:
            p = subprocess.Popen(args, env=s3.env(proxy.endpoint), stderr=subprocess.PIPE)
            while not proxy.held.wait(0.05):
                assert p.poll() is None, f"write {k}: ended first: {p.stderr.read()!r}"
            p.send_signal(signal.SIGKILL)
            p.communicate()
        finally:
            proxy.stop()
        time.sleep(0.2)  # a request the proxy forwarded before the kill lands
        keys = _keys(s3, out)
        _looks_saved_only_if_whole(keys, full)
        r = subprocess.run(args, env=s3.env(), capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"rerun after a kill at write {k}: {r.stderr}"
        got = _step_objects(s3, out)
        assert set(got) == set(full), (k, sorted(set(got) ^ set(full)))
        assert got == full, k


def test_resume_finish_upload_order(unroll_bin, make_fixture, s3, tmp_path):
    """The finish of a --resume run into s3:// (the multi-process protocol's upload of the top
    level) in the same order: items first, _CHECKPOINT_METADATA, then the markers."""
    info = make_fixture("linen")
    out = _out()
    prefix = f"/{BUCKET}/{out}/run/checkpoints/0/"
    proxy = HoldProxy(s3.port)
    try:
        r = subprocess.run(_args(unroll_bin, info, f"s3://{BUCKET}/{out}", ["-j1", "--resume"]),
                           env=s3.env(proxy.endpoint, TMPDIR=str(tmp_path)),
                           capture_output=True, text=True, timeout=600)
    finally:
        proxy.stop()
    assert r.returncode == 0, r.stderr
    order = [k for k in proxy.written(prefix) if not k.startswith("unroll-multi/")]
    meta = order.index("_CHECKPOINT_METADATA")
    assert all(meta > i for i, k in enumerate(order)
               if k.startswith("items/") and not k.endswith("commit_success.txt")), order
    assert order[-2:] == ["items/commit_success.txt", "commit_success.txt"], order


def test_lora_upload_order(unroll_bin, make_fixture, s3, tmp_path):
    """A LoRA conversion into s3:// (base/0, loras/<id>/0, their adapter_config.json): its
    claim (base/0's) first; every item object of every unit before any step's
    _CHECKPOINT_METADATA; the markers last, base/0's at the very end; the claim gone after."""
    from test_s3 import run_unroll as run_s3
    base, lora = make_fixture("linen"), make_fixture("lora")
    out = _out()
    prefix = f"/{BUCKET}/{out}/run/checkpoints/"
    proxy = HoldProxy(s3.port)
    try:
        r = run_s3(unroll_bin, base, base.items, f"s3://{BUCKET}/{out}", s3.env(proxy.endpoint),
                   extra=[f"lora_input_adapters_path={lora.root}", "pure_nnx=false"])
    finally:
        proxy.stop()
    assert r.returncode == 0, r.stderr
    written = proxy.written(prefix)
    order = [k for k in written if not k.endswith(CLAIM)]
    metas = [i for i, k in enumerate(order) if k.endswith("/_CHECKPOINT_METADATA")]
    markers = [i for i, k in enumerate(order) if k.endswith("commit_success.txt")]
    items = [i for i, k in enumerate(order) if "/items/" in k and i not in markers]
    assert len(metas) == 1 + len(lora.adapters), order
    assert max(items) < min(metas) and max(metas) < min(markers), order
    assert order[-1] == "base/0/commit_success.txt" and len(order) - len(markers) == markers[0]
    assert written[0] == f"base/0/{CLAIM}", written
    assert not [k for k in s3.list(BUCKET, f"{out}/run/checkpoints") if k.endswith(CLAIM)]
