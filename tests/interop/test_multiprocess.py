"""One conversion shared by several processes (unroll/job_share.h, docs/multi-process.md).

The oracle for the layout is Orbax itself: per-process OCDBT databases written by TensorStore
with Orbax's own specs (`ocdbt.process_<i>/`), merged by Orbax's
`merge_ocdbt_per_process_files`, compared with `unroll merge --ocdbt` on copies of the same
databases. The conversions are checked as everywhere else: the output, restored by stock
Orbax, equals the single-process output (and MaxText's reference) bit for bit.

Launchers: plain background processes with --process-count/--process-index, `mpirun` from
Debian's openmpi-bin (OMPI_COMM_WORLD_RANK/SIZE), and a Slurm-style array through
SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT (no Slurm is installed: the variables are what an
array job gives each task).
"""
import asyncio
import fcntl
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorstore as ts

import reference
from test_kill import BIG, CONFIG, _cached_fixture
from test_kill import _args as _kill_args

from orbax.checkpoint._src.serialization import ocdbt_utils
from orbax.checkpoint._src.serialization import tensorstore_utils as ts_utils

N = 4


def _args(unroll_bin, info, out, extra=()):
    return _kill_args(unroll_bin, info, out, [str(x) for x in extra])


def _ts_context():
    # the context Orbax opens OCDBT stores with (its cache pool is named in their specs)
    return ts.Context(ts_utils._DEFAULT_OCDBT_TS_CONTEXT)


# ------------------------------------------------------------------------------------------
# The layout: unroll's merge against Orbax's


async def _write_children(directory: pathlib.Path, contents):
    """contents[i]: {key: bytes} written by TensorStore as Orbax's process i would."""
    for i, kv in enumerate(contents):
        spec = ts_utils.build_kvstore_tspec(str(directory), use_ocdbt=True, process_id=i)
        ts_utils.add_ocdbt_write_options(spec)
        store = await ts_utils.open_kv_store(spec, _ts_context())
        txn = ts.Transaction()
        for k, v in kv.items():
            await store.with_transaction(txn).write(k, v)
        await txn.commit_async()


async def _read_all(directory: pathlib.Path):
    spec = ts_utils.build_kvstore_tspec(str(directory), use_ocdbt=True)
    store = await ts_utils.open_kv_store(spec, _ts_context())
    keys = await store.list()
    return {k: (await store.read(k)).value for k in keys}


def _value_locations(unroll_bin, directory):
    """key -> how its value is stored in the top-level tree ('inline N' or the value's file,
    offset and length), from `unroll ls --tree`."""
    out = subprocess.run([str(unroll_bin), "ls", "--tree", str(directory)], check=True,
                         capture_output=True, text=True).stdout
    locs = {}
    for line in out.splitlines():
        m = re.match(r'\s+"(.*)" (inline \d+ bytes|indirect \d+ bytes value:\S+)$', line)
        if m:
            locs[m.group(1)] = m.group(2)
    return locs


def _manifest_config(unroll_bin, directory):
    out = subprocess.run([str(unroll_bin), "ls", "--manifest", str(directory)], check=True,
                         capture_output=True, text=True).stdout
    config = next(line for line in out.splitlines() if line.startswith("config "))
    return re.sub(r"uuid=\w+ ", "", config)


def test_merge_matches_orbax(unroll_bin, tmp_path):
    rng = np.random.default_rng(7)
    contents = []
    for i in range(3):
        kv = {f"p.w{i}/zarr.json": b'{"zarr_format": 3}',  # inline, as Orbax keeps metadata
              f"p.w{i}/c/0": rng.bytes(5000),               # out of line
              f"p.w{i}/c/1": rng.bytes(300)}
        kv["shared/zarr.json"] = b'{"same": 1}'              # written by every process
        contents.append(kv)
    orbax_dir, ours = tmp_path / "orbax", tmp_path / "unroll"
    orbax_dir.mkdir()
    asyncio.run(_write_children(orbax_dir, contents))
    shutil.copytree(orbax_dir, ours)
    asyncio.run(ocdbt_utils.merge_ocdbt_per_process_files(
        orbax_dir, _ts_context(), use_zarr3=True, enable_validation=False))

    r = subprocess.run([str(unroll_bin), "merge", "--ocdbt", str(ours)], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr

    # what TensorStore reads from the top-level database
    expected = asyncio.run(_read_all(orbax_dir))
    assert asyncio.run(_read_all(ours)) == expected
    assert len(expected) == 10
    # the same tree entries: inline values inline, out-of-line ones referred to in the same
    # place of the same process's data file ("ocdbt.process_<i>/" base path)
    theirs = _value_locations(unroll_bin, orbax_dir)
    assert _value_locations(unroll_bin, ours) == theirs
    assert any(":ocdbt.process_2/:d/" in v for v in theirs.values()), theirs
    assert _manifest_config(unroll_bin, ours) == _manifest_config(unroll_bin, orbax_dir)


def test_merge_refuses_missing_process(unroll_bin, tmp_path):
    asyncio.run(_write_children(tmp_path, [{"a": b"1"}, {"b": b"2"}, {"c": b"3"}]))
    shutil.rmtree(tmp_path / "ocdbt.process_1")
    r = subprocess.run([str(unroll_bin), "merge", "--ocdbt", str(tmp_path)], capture_output=True,
                       text=True)
    assert r.returncode == 3, r.stderr
    assert "ocdbt.process_0 .. ocdbt.process_2 are not all there" in r.stderr
    assert not (tmp_path / "manifest.ocdbt").exists()


def test_merge_refuses_conflicting_values(unroll_bin, tmp_path):
    asyncio.run(_write_children(tmp_path, [{"k": b"1"}, {"k": b"2"}]))
    r = subprocess.run([str(unroll_bin), "merge", "--ocdbt", str(tmp_path)], capture_output=True,
                       text=True)
    assert r.returncode == 2, r.stderr
    assert "key 'k' has different values in ocdbt.process_0 and ocdbt.process_1" in r.stderr
    assert not (tmp_path / "manifest.ocdbt").exists()


# ------------------------------------------------------------------------------------------
# Conversions


@pytest.fixture(scope="module")
def big(fixture_cache):
    return _cached_fixture(fixture_cache, BIG, "kill")


@pytest.fixture(scope="module")
def single(unroll_bin, big, tmp_path_factory):
    """The single-process output and the values stock Orbax restores from it."""
    out = tmp_path_factory.mktemp("single")
    subprocess.run(_args(unroll_bin, big, out, ["-j2"]), check=True)
    items = out / "run" / "checkpoints" / "0" / "items"
    return items, reference.restore(items)


def _items(out):
    return out / "run" / "checkpoints" / "0" / "items"


def _check_same(out, single):
    items = _items(out)
    # the multi-process layout: one database per process, the top level refers into them
    for i in range(N):
        assert (items / f"ocdbt.process_{i}" / "manifest.ocdbt").is_file()
    assert (items / "manifest.ocdbt").is_file()
    assert not out.joinpath("run", "checkpoints.unroll-multi").exists()
    reference.compare_trees(reference.restore(items), single[1], "multi-process output")


def _env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "OMPI_", "PMI_", "JOB_COMPLETION"))}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _wait_all(procs):
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err.decode()


def test_background_processes(unroll_bin, big, single, tmp_path):
    procs = [subprocess.Popen(_args(unroll_bin, big, tmp_path, ["-j1", "--process-count", N,
                                                               "--process-index", i]),
                              stderr=subprocess.PIPE, env=_env())
             for i in range(N)]
    _wait_all(procs)
    _check_same(tmp_path, single)


def test_slurm_array_environment(unroll_bin, big, single, tmp_path):
    # --array=1-4: task ids start at SLURM_ARRAY_TASK_MIN
    procs = [subprocess.Popen(_args(unroll_bin, big, tmp_path, ["-j1"]), stderr=subprocess.PIPE,
                              env=_env(SLURM_ARRAY_TASK_ID=i + 1, SLURM_ARRAY_TASK_MIN=1,
                                       SLURM_ARRAY_TASK_COUNT=N, SLURM_JOB_ID=1))
             for i in range(N)]
    _wait_all(procs)
    _check_same(tmp_path, single)


def test_kubernetes_index_needs_count(unroll_bin, big, tmp_path):
    r = subprocess.run(_args(unroll_bin, big, tmp_path), capture_output=True, text=True,
                       env=_env(JOB_COMPLETION_INDEX=0))
    assert r.returncode == 2
    assert "JOB_COMPLETION_INDEX is set: give the process count with --process-count" in r.stderr


def test_mpirun(unroll_bin, big, single, tmp_path):
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.fail("mpirun not found: scripts/setup.sh --tests installs openmpi-bin")
    cmd = [mpirun, "-n", str(N), "--oversubscribe"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    r = subprocess.run(cmd + _args(unroll_bin, big, tmp_path, ["-j1"]), capture_output=True,
                       text=True, env=_env(), timeout=600)
    assert r.returncode == 0, r.stderr
    _check_same(tmp_path, single)  # ocdbt.process_0..3: each rank wrote its own share


def _status(unroll_bin, out):
    r = subprocess.run([str(unroll_bin), "ls", str(out / "run" / "checkpoints.unroll-multi")],
                       capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def test_missing_share_is_refused_then_rerun(unroll_bin, big, single, tmp_path):
    # shares 0, 1, 3 only: nothing is published, nothing looks like a checkpoint
    for i in (0, 1, 3):
        subprocess.run(_args(unroll_bin, big, tmp_path, ["--process-count", N,
                                                        "--process-index", i]),
                       check=True, env=_env())
    assert not (tmp_path / "run" / "checkpoints").exists()
    staging = tmp_path / "run" / "checkpoints.unroll-multi"
    assert not (staging / "step" / "items" / "manifest.ocdbt").exists()
    assert not (staging / "step" / "items" / "_METADATA").exists()
    r = subprocess.run([str(unroll_bin), "inspect", str(staging / "step" / "items")],
                       capture_output=True, text=True)
    assert r.returncode != 0  # not a checkpoint
    rc, text = _status(unroll_bin, tmp_path)
    assert rc == 0, text
    assert "share 2: not complete" in text and "share 3: complete" in text, text
    assert "3 of 4 shares complete" in text
    r = subprocess.run([str(unroll_bin), "inspect", str(tmp_path / "run" / "checkpoints")],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "share 2: not complete" in r.stdout, r.stdout + r.stderr

    r = subprocess.run([str(unroll_bin), "merge", str(tmp_path / "run" / "checkpoints")],
                       capture_output=True, text=True)
    assert r.returncode == 3, r.stderr
    assert "1 of 4 shares are not complete (process index 2)" in r.stderr
    assert not (tmp_path / "run" / "checkpoints").exists()

    # a rerun with other arguments is refused; the missing share then finishes the run
    r = subprocess.run(_args(unroll_bin, big, tmp_path, ["--process-count", N,
                                                        "--process-index", 2,
                                                        "checkpoint_storage_use_zarr3=false"]),
                       capture_output=True, text=True, env=_env())
    assert r.returncode == 2 and "other arguments or another input" in r.stderr, r.stderr
    subprocess.run(_args(unroll_bin, big, tmp_path, ["--process-count", N, "--process-index", 2]),
                   check=True, env=_env())
    _check_same(tmp_path, single)


def test_merge_command_finishes(unroll_bin, big, single, tmp_path):
    """Shares that all completed while none could finish (its finish killed): unroll merge."""
    for i in range(N):
        subprocess.run(_args(unroll_bin, big, tmp_path, ["--process-count", N,
                                                        "--process-index", i]),
                       check=True, env=_env())
    _check_same(tmp_path, single)
    # again, leaving the last finish undone by taking its done marker away, then merging
    out2 = tmp_path / "again"
    for i in range(N - 1):
        subprocess.run(_args(unroll_bin, big, out2, ["--process-count", N,
                                                    "--process-index", i]),
                       check=True, env=_env())
    # the last share completes while another process is finishing (it holds finish.lock, so
    # it is alive), which then goes away without finishing
    staging = out2 / "run" / "checkpoints.unroll-multi"
    with open(staging / "finish.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        subprocess.run(_args(unroll_bin, big, out2, ["--process-count", N,
                                                    "--process-index", N - 1]),
                       check=True, env=_env())
        assert not (out2 / "run" / "checkpoints").exists()  # the claim was not its to take
    r = subprocess.run([str(unroll_bin), "merge", str(staging)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    _check_same(out2, single)


@pytest.mark.parametrize("victim", [0, 2, 3])
def test_sigkill_one_share_and_rerun(unroll_bin, big, single, tmp_path, victim):
    """Kill one process at several points of its share; rerun only that index."""
    rounds = [0.0, 0.05, 0.15, 0.3, 0.6, 1.0]
    killed = 0
    for k, delay in enumerate(rounds):
        out = tmp_path / f"k{k}"
        others = [subprocess.Popen(_args(unroll_bin, big, out, ["-j1", "--process-count", N,
                                                               "--process-index", i]),
                                   stderr=subprocess.PIPE, env=_env())
                  for i in range(N) if i != victim]
        # small commits: some kills land after one, and the rerun continues from it
        v = subprocess.Popen(_args(unroll_bin, big, out, ["-j1", "--commit-every", "256K",
                                                         "--process-count", N,
                                                         "--process-index", victim]),
                             stderr=subprocess.PIPE, env=_env())
        time.sleep(delay)
        v.send_signal(signal.SIGKILL)
        v.communicate()
        _wait_all(others)
        if v.returncode == 0:   # finished before the kill: nothing to recover
            _check_same(out, single)
            continue
        killed += 1
        if (out / "run" / "checkpoints").exists():
            # killed after it published, as the finisher: complete all the same; a rerun
            # only removes what is left of the staging directory
            assert not (out / "run" / "checkpoints.unroll-multi" / "step").exists()
            if not (out / "run" / "checkpoints.unroll-multi").exists():
                _check_same(out, single)
                continue
        subprocess.run(_args(unroll_bin, big, out, ["-j1", "--commit-every", "256K",
                                                   "--process-count", N,
                                                   "--process-index", victim]),
                       check=True, env=_env())
        _check_same(out, single)
    assert killed > 0  # the kills did land inside the run


def test_finisher_killed_is_taken_over(unroll_bin, big, single, tmp_path):
    """The process that finishes dies mid-merge (its claim is left, unlocked, with partial
    top-level files): the next process to find every share done takes the finish over."""
    for i in range(N - 1):
        subprocess.run(_args(unroll_bin, big, tmp_path, ["--process-count", N,
                                                        "--process-index", i]),
                       check=True, env=_env())
    staging = tmp_path / "run" / "checkpoints.unroll-multi"
    (staging / "finish.claim").write_text("pid 999999 on elsewhere\n")
    items = staging / "step" / "items"
    (items / "d").mkdir()
    (items / "d" / "0123").write_bytes(b"partial node")
    (items / "_METADATA").write_text("{")
    subprocess.run(_args(unroll_bin, big, tmp_path, ["--process-count", N,
                                                    "--process-index", N - 1]),
                   check=True, env=_env())
    _check_same(tmp_path, single)
    assert not (_items(tmp_path) / "d" / "0123").exists()


def test_finisher_killed_right_after_claiming_is_taken_over(unroll_bin, big, single, tmp_path):
    """The finisher dies with an empty finish.claim (a file system without hard links creates
    it, then writes its name; finish.lock free): the next process to find every share done
    takes the finish over. (It used to leave it to "another process", exit 0,
    and nothing was ever published: what the SIGKILL test hit now and then.)"""
    for i in range(N - 1):
        subprocess.run(_args(unroll_bin, big, tmp_path, ["--process-count", N,
                                                        "--process-index", i]),
                       check=True, env=_env())
    staging = tmp_path / "run" / "checkpoints.unroll-multi"
    (staging / "finish.claim").write_bytes(b"")
    subprocess.run(_args(unroll_bin, big, tmp_path, ["--process-count", N,
                                                    "--process-index", N - 1]),
                   check=True, env=_env())
    _check_same(tmp_path, single)


def test_finisher_killed_while_publishing_is_recovered(unroll_bin, big, single, tmp_path):
    """The finisher dies after it moved the finished step into its publication staging
    directory and before the commit (stopped there with gdb, then killed): the rerun moves the
    step back and publishes it, instead of re-creating an empty step that lacks the other
    shares' databases ("share 0 has no database", seen once in CI under load)."""
    gdb = shutil.which("gdb")
    assert gdb is not None, "gdb is not installed (scripts/setup.sh --tests installs it)"
    for i in range(N - 1):
        subprocess.run(_args(unroll_bin, big, tmp_path, ["--process-count", N,
                                                        "--process-index", i]),
                       check=True, env=_env())
    last = _args(unroll_bin, big, tmp_path, ["--process-count", N, "--process-index", N - 1])
    script = tmp_path / "gdb.cmds"
    script.write_text("set pagination off\nset confirm off\n"
                      "break ur_job_publish_commit\nrun\nkill\n")
    env = _env()
    env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":detect_leaks=0").lstrip(":")
    res = subprocess.run([gdb, "-q", "-batch", "-x", str(script), "--args",
                          *[str(a) for a in last]], capture_output=True, text=True,
                         timeout=300, env=env)
    assert "Breakpoint 1," in res.stdout, res.stdout + res.stderr
    run_dir = tmp_path / "run"
    staging = run_dir / "checkpoints.unroll-multi"
    assert not (run_dir / "checkpoints").exists()
    assert not (staging / "step").exists()          # moved out for the commit
    assert list(run_dir.glob("checkpoints.*.unroll-tmp"))
    res = subprocess.run(last, capture_output=True, text=True, env=_env())
    assert res.returncode == 0, res.stderr
    _check_same(tmp_path, single)


def test_killed_share_continues_from_its_last_commit(unroll_bin, big, single, tmp_path):
    """A share commits its database every --commit-every bytes; killed, its rerun keeps what
    was committed (the same data files) and does only the rest."""
    staging = tmp_path / "run" / "checkpoints.unroll-multi"
    db = staging / "step" / "items" / "ocdbt.process_0"
    args = _args(unroll_bin, big, tmp_path, ["-j1", "--commit-every", "256K",
                                            "--process-count", 2, "--process-index", 0])
    v = subprocess.Popen(args, stderr=subprocess.PIPE, env=_env())
    progress = staging / "shares" / "0.progress"
    deadline = time.time() + 60
    while not progress.exists() and v.poll() is None and time.time() < deadline:
        time.sleep(0.002)
    v.send_signal(signal.SIGKILL)
    v.communicate()
    assert v.returncode == -signal.SIGKILL, "the share ended before its first commit"
    committed = int(progress.read_text().split()[1])
    assert committed > 0
    kept = {p.name for p in (db / "d").iterdir()}
    # the rerun continues (a fresh start would remove ocdbt.process_0 and redo it)
    r = subprocess.run([a for a in args if a != "-q"], capture_output=True, text=True,
                       env=_env())
    assert r.returncode == 0, r.stderr
    assert f"continuing a killed run of it (from work item {committed})" in r.stderr
    subprocess.run(_args(unroll_bin, big, tmp_path, ["--process-count", 2, "--process-index", 1]),
                   check=True, env=_env())
    items = _items(tmp_path)
    still = {p.name for p in (items / "ocdbt.process_0" / "d").iterdir()}
    assert kept & still, (kept, still)
    reference.compare_trees(reference.restore(items), single[1], "resumed multi-process output")


def test_single_process_resume(unroll_bin, big, single, tmp_path):
    """--resume: one process, resumable; a rerun continues by default once a run is staged,
    and one with other arguments is refused."""
    args = _args(unroll_bin, big, tmp_path, ["-j1", "--resume", "--commit-every", "256K"])
    staging = tmp_path / "run" / "checkpoints.unroll-multi"
    v = subprocess.Popen(args, stderr=subprocess.PIPE, env=_env())
    deadline = time.time() + 60
    while not (staging / "shares" / "0.progress").exists() and v.poll() is None \
            and time.time() < deadline:
        time.sleep(0.002)
    v.send_signal(signal.SIGKILL)
    v.communicate()
    assert v.returncode == -signal.SIGKILL
    assert not (tmp_path / "run" / "checkpoints").exists()
    r = subprocess.run(_args(unroll_bin, big, tmp_path, ["pure_nnx=true"]), capture_output=True,
                       text=True, env=_env())
    assert r.returncode == 2 and "other arguments or another input" in r.stderr, r.stderr
    # without --resume: continued all the same, since the run is staged
    r = subprocess.run([a for a in args if a not in ("-q", "--resume")], capture_output=True,
                       text=True, env=_env())
    assert r.returncode == 0, r.stderr
    assert "continuing a killed run of it" in r.stderr, r.stderr
    items = _items(tmp_path)
    assert (items / "ocdbt.process_0" / "manifest.ocdbt").is_file()
    assert not staging.exists()
    reference.compare_trees(reference.restore(items), single[1], "resumed single-process output")


def _ts_generation(db, generation=None):
    """The OCDBT database in db opened by TensorStore, at one generation (None: the latest)."""
    spec = {"driver": "ocdbt", "base": f"file://{db}/"}
    if generation is not None:
        spec["version"] = generation
    return ts.KvStore.open(spec).result()


def _latest_generation(db):
    """The latest generation of the database in db, from TensorStore's dump of its manifest."""
    manifest = ts.ocdbt.dump(ts.KvStore.open(f"file://{db}/").result()).result()
    return manifest["versions"][-1]["generation_number"]


def _check_generations(db, final):
    """Every generation of db read by TensorStore holds the keys of the one before it and
    more, each new key with its final value (final: key -> value of the finished run); returns
    the latest generation and its keys."""
    latest = _latest_generation(db)
    seen = set()
    for g in range(1, latest + 1):
        kv = _ts_generation(db, g)
        keys = set(kv.list().result())
        assert seen <= keys, f"generation {g} lost {sorted(seen - keys)[:3]}"
        for k in keys - seen:
            assert kv.read(k).result().value == final[k], (g, k)
        seen = keys
    return latest, seen


def _kill_after_commits(args, progress, commits):
    """Run args, SIGKILL it once its progress mark changed `commits` times."""
    v = subprocess.Popen(args, stderr=subprocess.PIPE, env=_env())
    marks = set()
    first = progress.read_text() if progress.exists() else None
    deadline = time.time() + 60
    while len(marks - {first}) < commits and v.poll() is None and time.time() < deadline:
        try:
            marks.add(progress.read_text())
        except FileNotFoundError:
            pass
        time.sleep(0.001)
    v.send_signal(signal.SIGKILL)
    v.communicate()
    assert v.returncode == -signal.SIGKILL, f"the run ended before {commits} more commits"


def test_share_database_keeps_every_generation(unroll_bin, big, single, tmp_path):
    """Issue 16: each piece commit of a share is a new generation of its OCDBT database (the
    version tree as TensorStore writes it); older generations stay readable. A run killed
    after a few commits, rerun and killed again past 16 (its generations then partly in
    version-tree nodes), then finished: TensorStore opens every generation each time, the
    killed runs' generations unchanged by the reruns, each a prefix of the work and the last
    one complete."""
    args = _args(unroll_bin, big, tmp_path, ["-j1", "--resume", "--commit-every", "256K"])
    staging = tmp_path / "run" / "checkpoints.unroll-multi"
    db = staging / "step" / "items" / "ocdbt.process_0"
    progress = staging / "shares" / "0.progress"
    killed = {}
    for commits, at_least in ((4, 3), (18, 20)):
        _kill_after_commits(args, progress, commits)
        latest = _latest_generation(db)
        assert latest >= at_least, latest
        for g in range(1, latest + 1):
            keys = set(_ts_generation(db, g).list().result())
            assert killed.setdefault(g, keys) == keys, g

    r = subprocess.run(args, capture_output=True, text=True, env=_env())
    assert r.returncode == 0, r.stderr
    items = _items(tmp_path)
    final = asyncio.run(_read_all(items))   # the merged top-level database, as Orbax reads it
    share = items / "ocdbt.process_0"
    latest, keys = _check_generations(share, final)
    assert latest > max(killed), latest
    assert keys == set(final)
    for g, before in killed.items():
        assert set(_ts_generation(share, g).list().result()) == before, g
    reference.compare_trees(reference.restore(items), single[1], "resumed single-process output")


@pytest.mark.parametrize("launcher", ["slurm-tasks", "pmi", "kubernetes"])
def test_other_launcher_variables(unroll_bin, make_fixture, launcher, tmp_path):
    """srun (SLURM_PROCID/SLURM_NTASKS), PMI launchers (PMI_RANK/PMI_SIZE) and Kubernetes
    Indexed Jobs (JOB_COMPLETION_INDEX + --process-count): 2 processes, on a small input,
    against `unroll verify`."""
    info = make_fixture("linen")
    procs = []
    for i in range(2):
        env, extra = {"slurm-tasks": ({"SLURM_PROCID": i, "SLURM_NTASKS": 2}, []),
                      "pmi": ({"PMI_RANK": i, "PMI_SIZE": 2}, []),
                      "kubernetes": ({"JOB_COMPLETION_INDEX": i}, ["--process-count", 2])}[launcher]
        procs.append(subprocess.Popen(_args(unroll_bin, info, tmp_path, extra),
                                      stderr=subprocess.PIPE, env=_env(**env)))
    _wait_all(procs)
    items = _items(tmp_path)
    assert (items / "ocdbt.process_1" / "manifest.ocdbt").is_file()
    cfg = info.config
    r = subprocess.run([str(unroll_bin), "verify", "-q", str(info.items), str(items),
                        str(CONFIG), f"base_num_decoder_layers={cfg['num_decoder_layers']}",
                        f"param_scan_axis={cfg['param_scan_axis']}", "pure_nnx=false",
                        f"decoder_block={cfg['decoder_block']}"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_same_index_twice_is_refused(unroll_bin, make_fixture, tmp_path):
    """Two processes given the same index (a launcher misconfigured): the second is refused
    rather than writing the same database."""
    import fcntl
    info = make_fixture("linen")
    subprocess.run(_args(unroll_bin, info, tmp_path, ["--process-count", 2, "--process-index", 1]),
                   check=True, env=_env())
    lock = tmp_path / "run" / "checkpoints.unroll-multi" / "shares" / "0.lock"
    with open(lock, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)   # as a running share 0 holds it
        r = subprocess.run(_args(unroll_bin, info, tmp_path, ["--process-count", 2,
                                                             "--process-index", 0]),
                           capture_output=True, text=True, env=_env())
    assert r.returncode == 3, r.stderr
    assert "share 0 is being run by another process" in r.stderr
    assert not (tmp_path / "run" / "checkpoints").exists()
