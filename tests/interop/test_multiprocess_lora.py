"""A LoRA run (lora_input_adapters_path) shared by several processes into a local directory
(docs/multi-process.md, LoRA): one cut over the base's and the adapters' input bytes, every
step unit (base/0, loras/<id>/0) in Orbax's multi-process layout, all units published together
by the finisher. The oracle: every unit restored by stock Orbax equals the single-process
LoRA run's unit bit for bit, and the Python reference."""
import json
import shutil
import subprocess

import pytest

import reference
from test_multiprocess import _env
from test_unroll import run_unroll, unroll_args

LAYOUT = "ocdbt-zarr3"


@pytest.fixture(scope="module")
def fixtures(make_fixture):
    return make_fixture("linen", LAYOUT, "float32"), make_fixture("lora", LAYOUT, "float32")


def _run(unroll_bin, fixtures, out, extra=(), check=True):
    base, lora = fixtures
    res = run_unroll(unroll_bin, base, out, pure_nnx=False,
                     extra=[f"lora_input_adapters_path={lora.root}", *[str(x) for x in extra]])
    if check:
        assert res.returncode == 0, res.stderr
    return res


def _share(unroll_bin, fixtures, out, n, i, extra=(), check=True):
    return _run(unroll_bin, fixtures, out, ["--process-count", n, "--process-index", i, *extra],
                check=check)


def step_units(lora):
    return ["base/0"] + [f"loras/{i}/0" for i in sorted(lora.adapters)]


@pytest.fixture(scope="module")
def single(unroll_bin, fixtures, tmp_path_factory):
    """The single-process LoRA output: unit -> the values stock Orbax restores from it."""
    out = tmp_path_factory.mktemp("single")
    _run(unroll_bin, fixtures, out)
    ckpt = out / "run" / "checkpoints"
    return {u: reference.restore(ckpt / u / "items") for u in step_units(fixtures[1])}


def _check_same(out, fixtures, single, n, ref=False):
    base, lora = fixtures
    ckpt = out / "run" / "checkpoints"
    assert not (out / "run" / "checkpoints.unroll-multi").exists()
    assert not (ckpt / "0").exists()
    for unit in step_units(lora):
        items = ckpt / unit / "items"
        # Orbax's multi-process layout: one database per process, the top level over them
        for i in range(n):
            assert (items / f"ocdbt.process_{i}" / "manifest.ocdbt").is_file(), (unit, i)
        assert (items / "manifest.ocdbt").is_file()
        assert (ckpt / unit / "commit_success.txt").is_file()
        # the finisher records what every share's writer was given: unrolled layers
        meta = json.loads((ckpt / unit / "_CHECKPOINT_METADATA").read_text())
        assert meta["custom_metadata"]["scan_layers"] is False, unit
        reference.compare_trees(reference.restore(items), single[unit], f"{unit} (multi)")
    if not ref:
        return
    # and the reference, as test_unroll's LoRA test checks it
    reference.check_unrolled(ckpt / "base" / "0" / "items",
                             reference.reference_for(base, pure_nnx=False))
    reference.check_unrolled_lora(ckpt, reference.reference_for(lora, pure_nnx=False))


def _chunks(unroll_bin, ckpt, unit, i):
    """How many array chunks process i's database of `unit` holds (`unroll ls`)."""
    out = subprocess.run([str(unroll_bin), "ls", str(ckpt / unit / "items" / f"ocdbt.process_{i}")],
                         check=True, capture_output=True, text=True).stdout
    return sum("/c/" in line for line in out.splitlines())


def test_three_processes(unroll_bin, fixtures, single, tmp_path):
    """Three background processes: every unit equals the single-process run's, and the cut is
    over all units (the adapters' chunks go to the processes whose byte range holds them, not
    all to one)."""
    base, lora = fixtures
    procs = [subprocess.Popen(unroll_args(unroll_bin, base, tmp_path, pure_nnx=False, extra=[
        f"lora_input_adapters_path={lora.root}", "-j1", "--process-count", "3",
        "--process-index", str(i)]), stderr=subprocess.PIPE, env=_env()) for i in range(3)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode()
    _check_same(tmp_path, fixtures, single, 3, ref=True)
    ckpt = tmp_path / "run" / "checkpoints"
    got = {u: [_chunks(unroll_bin, ckpt, u, i) for i in range(3)] for u in step_units(lora)}
    # the cut runs over the base, then each adapter: the base's chunks go to the first
    # processes, the last adapter's to the last one
    assert got["base/0"][0] > 0 and got["base/0"][2] == 0, got
    last = step_units(lora)[-1]
    assert got[last][2] > 0 and got[last][0] == 0, got


def test_resume_single_process(unroll_bin, fixtures, single, tmp_path):
    """--resume with adapters: share 0 of 1, the same units."""
    _run(unroll_bin, fixtures, tmp_path, ["--resume"])
    _check_same(tmp_path, fixtures, single, 1)


def gdb_kill_at(args, breakpoint, tmp_path, env=None, hit=1):
    """Run `args` under gdb, SIGKILL it at hit number `hit` of `breakpoint`."""
    gdb = shutil.which("gdb")
    assert gdb is not None, "gdb is not installed (scripts/setup.sh --tests installs it)"
    script = tmp_path / "gdb.cmds"
    script.write_text("set pagination off\nset confirm off\n"
                      f"break {breakpoint}\nrun\n" + "continue\n" * (hit - 1) + "kill\n")
    env = dict(env or _env())
    env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":detect_leaks=0").lstrip(":")
    res = subprocess.run([gdb, "-q", "-batch", "-x", str(script), "--args",
                          *[str(a) for a in args]], capture_output=True, text=True,
                         timeout=300, env=env)
    assert "Breakpoint 1," in res.stdout, res.stdout + res.stderr


def _share_args(unroll_bin, fixtures, out, n, i):
    base, lora = fixtures
    return unroll_args(unroll_bin, base, out, pure_nnx=False,
                       extra=[f"lora_input_adapters_path={lora.root}", "--process-count", str(n),
                              "--process-index", str(i)])


def test_killed_process_rerun_only_its_index(unroll_bin, fixtures, single, tmp_path):
    """Process 1 of 2 is killed (SIGKILL) after its part of the base and of the first adapter,
    before it marks the adapter done; process 0 completed and published nothing; rerunning
    only index 1 (which keeps its base part and redoes the adapter) gives the exact output."""
    _share(unroll_bin, fixtures, tmp_path, 2, 0)
    ckpt = tmp_path / "run" / "checkpoints"
    args = _share_args(unroll_bin, fixtures, tmp_path, 2, 1)
    gdb_kill_at(args, "ur_job_share_unit_mark_done", tmp_path, hit=2)
    shares = tmp_path / "run" / "checkpoints.unroll-multi" / "shares"
    assert (shares / "1.unit-done").exists() and not (shares / "1.u1.unit-done").exists()
    assert not ckpt.exists()
    base_db = shares.parent / "units" / "base" / "0" / "items" / "ocdbt.process_1"
    kept = sorted((p.name, p.stat().st_ino, p.stat().st_mtime_ns) for p in (base_db / "d").iterdir())
    _share(unroll_bin, fixtures, tmp_path, 2, 1)
    _check_same(tmp_path, fixtures, single, 2)


def test_unfinished_share_publishes_nothing_then_merge(unroll_bin, fixtures, single, tmp_path):
    """A share that never finishes: no unit is published and `unroll merge` is refused; the
    last share killed after marking itself done (before its finish): `unroll merge` publishes
    every unit."""
    base, lora = fixtures
    ckpt = tmp_path / "run" / "checkpoints"
    for i in (0, 2):
        _share(unroll_bin, fixtures, tmp_path, 3, i)
    assert not ckpt.exists()
    staging = tmp_path / "run" / "checkpoints.unroll-multi"
    for unit in step_units(lora):
        assert not (staging / "units" / unit / "items" / "manifest.ocdbt").exists()
        assert not (staging / "units" / unit / "items" / "_METADATA").exists()
    r = subprocess.run([str(unroll_bin), "merge", str(ckpt)], capture_output=True, text=True)
    assert r.returncode == 3, r.stderr
    assert "process index 1" in r.stderr
    assert not ckpt.exists()
    gdb_kill_at(_share_args(unroll_bin, fixtures, tmp_path, 3, 1), "ur_job_share_finish",
                 tmp_path)
    assert not ckpt.exists()
    r = subprocess.run([str(unroll_bin), "merge", str(ckpt)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    _check_same(tmp_path, fixtures, single, 3)


def test_finisher_killed_mid_publication_rerun_finishes(unroll_bin, fixtures, single, tmp_path):
    """The finisher is killed (SIGKILL) in the middle of the publication: base/0 is in place,
    the adapters are not. A rerun of its index publishes the rest: the whole new set."""
    base, lora = fixtures
    ckpt = tmp_path / "run" / "checkpoints"
    _share(unroll_bin, fixtures, tmp_path, 2, 0)
    args = _share_args(unroll_bin, fixtures, tmp_path, 2, 1)
    # the second unit's move into place (the first, base/0, is done)
    gdb = shutil.which("gdb")
    assert gdb is not None
    script = tmp_path / "gdb.cmds"
    script.write_text("set pagination off\nset confirm off\nbreak ur_job_publish_commit\n"
                      "run\nbreak renameat2\ncontinue\ncontinue\nkill\n")
    env = _env()
    res = subprocess.run([gdb, "-q", "-batch", "-x", str(script), "--args",
                          *[str(a) for a in args]], capture_output=True, text=True,
                         timeout=300, env=env)
    assert "Breakpoint 2," in res.stdout, res.stdout + res.stderr
    assert (ckpt / "base" / "0" / "items").is_dir()
    # half published: base/0 moved into place, no adapter yet
    assert not any((ckpt / u).exists() for u in step_units(lora)[1:])
    r = _share(unroll_bin, fixtures, tmp_path, 2, 1)
    _check_same(tmp_path, fixtures, single, 2)


def test_rerun_over_changed_adapters_is_refused(unroll_bin, fixtures, tmp_path):
    """run.txt holds each adapter's identity: a process of the run that finds an adapter
    changed since the run started is refused (exit 2) instead of mixing two adapters."""
    base, lora = fixtures
    adapters = tmp_path / "adapters"
    shutil.copytree(lora.root, adapters)
    extra = [f"lora_input_adapters_path={adapters}", "--process-count", "2"]
    out = tmp_path / "out"
    r = subprocess.run(unroll_args(unroll_bin, base, out, pure_nnx=False,
                                   extra=[*extra, "--process-index", "0"]),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    meta = adapters / sorted(lora.adapters)[0] / "0" / "items" / "_METADATA"
    meta.write_bytes(meta.read_bytes() + b" ")
    r = subprocess.run(unroll_args(unroll_bin, base, out, pure_nnx=False,
                                   extra=[*extra, "--process-index", "1"]),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr
    changed = f"loras/{sorted(lora.adapters)[0]}/_METADATA (size"
    assert "input changed since the run started" in r.stderr and changed in r.stderr, r.stderr
    assert not (out / "run" / "checkpoints").exists()
