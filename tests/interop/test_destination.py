"""Where `unroll` writes, and what it may replace (issue 12, items 1, 3 and 4).

- Only the units a run writes are replaced: `checkpoints/0`, or `checkpoints/base/0` and
  `checkpoints/loras/<id>/{0,adapter_config.json}`. Every sibling survives, the training steps
  of the very run the output is pointed at included.
- An input inside a unit that would be replaced, or an output inside the input, is refused
  before anything is written (exit 2, both paths named), however the paths are spelled.
- A run holds a lock on its destination: a second run exits 3 naming the holder; the
  published result is the first run's. A staging directory removed during a run is never
  published, and a run never re-creates it.
- SIGINT/SIGTERM: exit 130/143, no staging directory or lock left, the earlier output intact.

Runs are stopped at a chosen point with gdb (as test_kill.py does) so that each case is
deterministic; one test also sends signals at spread-out times to an unattended run.
"""
import hashlib
import os
import pathlib
import shutil
import signal
import subprocess
import time

import pytest

import reference
from test_kill import BIG, TIMED, _cached_fixture, _files

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONFIG = ROOT / "tests" / "data" / "example" / "unroll.yml"


def _args(unroll_bin, info, base_out, *, items=None, run_name="run", extra=()):
    """The command line for a fixture, with the input (`items`) and output overridable."""
    cfg = info.config
    key = info.input_key
    inp = items if items is not None else cfg[key]
    return [str(unroll_bin), str(CONFIG), "-q", f"{key}={inp}",
            f"base_output_directory={base_out}", f"run_name={run_name}",
            f"base_num_decoder_layers={cfg['num_decoder_layers']}",
            f"first_num_dense_layers={cfg.get('first_num_dense_layers', 0)}",
            f"param_scan_axis={cfg['param_scan_axis']}", "scan_layers=true",
            "force_unroll=true", "pure_nnx=false", f"decoder_block={cfg['decoder_block']}",
            f"checkpoint_storage_use_ocdbt={str(info.use_ocdbt).lower()}",
            f"checkpoint_storage_use_zarr3={str(info.use_zarr3).lower()}", *extra]


def _run(args, **kw):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=300,
                          **kw)


def _tree_hash(root):
    h = hashlib.sha256()
    root = pathlib.Path(root)
    for p in sorted(root.rglob("*")):
        h.update(str(p.relative_to(root)).encode() + b"\0")
        if p.is_file() and not p.is_symlink():
            h.update(p.read_bytes())
    return h.hexdigest()


def _leftovers(run_dir):
    """Staging directories and lock files beside the checkpoint directory."""
    run_dir = pathlib.Path(run_dir)
    if not run_dir.exists():
        return []
    return sorted(p.name for p in run_dir.iterdir()
                  if p.name.endswith(".unroll-tmp") or p.name.endswith(".unroll-lock"))


def _gdb(unroll_args, commands, tmp_path):
    """Run unroll under gdb with `commands` (after `run`); the exit status, gdb's output."""
    gdb = shutil.which("gdb")
    if gdb is None:
        pytest.skip("gdb is not installed (scripts/setup.sh --tests installs it)")
    script = tmp_path / "gdb.cmds"
    script.write_text("set pagination off\nset confirm off\n"
                      "handle SIGINT nostop noprint pass\nhandle SIGTERM nostop noprint pass\n"
                      + commands)
    # LeakSanitizer cannot run under ptrace: an ASan build checks leaks in the other tests.
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":detect_leaks=0").lstrip(":")
    res = subprocess.run([gdb, "-q", "-batch", "-x", str(script), "--args",
                          *[str(a) for a in unroll_args]],
                         capture_output=True, text=True, timeout=300, env=env)
    out = res.stdout + res.stderr
    if "exited normally" in res.stdout:
        return 0, out
    for line in res.stdout.splitlines():
        if "exited with code" in line:
            return int(line.rsplit(" ", 1)[1].rstrip("]"), 8), out
    raise AssertionError(f"unroll did not exit under gdb:\n{out}")


def _unroll_lines(text):
    return [l for l in text.splitlines() if l.startswith("unroll: ")]


@pytest.fixture(scope="module")
def linen(make_fixture):
    return make_fixture("linen", "ocdbt-zarr3", "float32")


@pytest.fixture(scope="module")
def single_run(linen, unroll_bin, tmp_path_factory):
    """The files of one plain run of the linen fixture (the time-stamped ones left out)."""
    out = tmp_path_factory.mktemp("single")
    res = _run(_args(unroll_bin, linen, out))
    assert res.returncode == 0, res.stderr
    return _files(out / "run" / "checkpoints" / "0")


def _copy_run(info, dest_run):
    """A copy of the fixture's training run (its CheckpointManager root) at dest_run."""
    shutil.copytree(info.root, dest_run / "checkpoints", symlinks=True)
    return dest_run / "checkpoints" / str(info.step) / "items"


# ---- item 1: only the units are replaced -------------------------------------------------


def test_output_over_the_training_run_keeps_every_step(linen, unroll_bin, tmp_path):
    """base_output_directory/run_name naming the training run itself: the training steps
    (input included) stay byte for byte, checkpoints/0 is added beside them."""
    base = tmp_path / "base"
    items = _copy_run(linen, base / "run")
    ckpt = base / "run" / "checkpoints"
    # a second training step and a stray file, both to be left alone
    shutil.copytree(ckpt / str(linen.step), ckpt / "5")
    (ckpt / "notes.txt").write_text("mine")
    before = {p.name: _tree_hash(p) for p in ckpt.iterdir() if p.is_dir()}
    res = _run(_args(unroll_bin, linen, base, items=items))
    assert res.returncode == 0, res.stderr
    for name, h in before.items():
        assert _tree_hash(ckpt / name) == h, f"training step {name} changed"
    assert (ckpt / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in ckpt.iterdir()) == sorted([*before, "0", "notes.txt"])
    assert not _leftovers(base / "run")
    reference.check_unrolled(ckpt / "0" / "items", reference.reference_for(linen, False))
    # again, now replacing the checkpoints/0 of the first run: the steps still survive
    res = _run(_args(unroll_bin, linen, base, items=items))
    assert res.returncode == 0, res.stderr
    for name, h in before.items():
        assert _tree_hash(ckpt / name) == h, f"training step {name} changed"


def test_siblings_of_the_destination_survive(linen, single_run, unroll_bin, tmp_path):
    """Input elsewhere; the destination already holds other steps, another adapter and files:
    all of it survives, and only checkpoints/0 (with everything in it) is replaced."""
    ckpt = tmp_path / "out" / "run" / "checkpoints"
    (ckpt / "0").mkdir(parents=True)
    (ckpt / "0" / "old-marker").write_text("earlier output")
    shutil.copytree(linen.root / str(linen.step), ckpt / "7")
    (ckpt / "loras" / "other" / "0").mkdir(parents=True)
    (ckpt / "loras" / "other" / "0" / "x").write_text("adapter")
    (ckpt / "README").write_text("keep")
    keep = {n: _tree_hash(ckpt / n) for n in ("7", "loras")}
    res = _run(_args(unroll_bin, linen, tmp_path / "out"))
    assert res.returncode == 0, res.stderr
    for n, h in keep.items():
        assert _tree_hash(ckpt / n) == h, n
    assert (ckpt / "README").read_text() == "keep"
    assert not (ckpt / "0" / "old-marker").exists()
    assert _files(ckpt / "0") == single_run
    assert not _leftovers(tmp_path / "out" / "run")


def test_lora_replaces_only_its_units(make_fixture, unroll_bin, tmp_path):
    base = make_fixture("linen", "ocdbt-zarr3", "float32")
    lora = make_fixture("lora", "ocdbt-zarr3", "float32")
    ckpt = tmp_path / "out" / "run" / "checkpoints"
    shutil.copytree(base.root / str(base.step), ckpt / "0")  # a plain output from before
    (ckpt / "loras" / "zzz" / "0").mkdir(parents=True)
    keep = {n: _tree_hash(ckpt / n) for n in ("0", "loras/zzz")}
    args = _args(unroll_bin, base, tmp_path / "out",
                 extra=[f"lora_input_adapters_path={lora.root}"])
    res = _run(args)
    assert res.returncode == 0, res.stderr
    for n, h in keep.items():
        assert _tree_hash(ckpt / n) == h, n
    reference.check_unrolled(ckpt / "base" / "0" / "items",
                             reference.reference_for(base, pure_nnx=False))
    shutil.rmtree(ckpt / "loras" / "zzz")  # the checker wants exactly the adapters
    reference.check_unrolled_lora(ckpt, reference.reference_for(lora, pure_nnx=False))
    assert not _leftovers(tmp_path / "out" / "run")


def _refused(res, *paths):
    assert res.returncode == 2, res.stderr
    line = res.stderr.strip()
    assert line and "\n" not in line, res.stderr
    for p in paths:
        assert os.path.realpath(p) in line, (p, line)
    return line


def test_input_inside_a_replaced_unit_is_refused(linen, unroll_bin, tmp_path):
    """The input is checkpoints/0/items of the destination (however spelled): refused, with
    the input and the unit named, nothing touched or created."""
    run = tmp_path / "out" / "run"
    ckpt = run / "checkpoints"
    shutil.copytree(linen.root / str(linen.step), ckpt / "0")
    (tmp_path / "link").symlink_to(run)
    spellings = [ckpt / "0" / "items",
                 f"{ckpt}/0/items/",
                 f"{run}/x/../checkpoints/./0/items",
                 tmp_path / "link" / "checkpoints" / "0" / "items"]
    before = _tree_hash(tmp_path / "out")
    for items in spellings:
        res = _run(_args(unroll_bin, linen, tmp_path / "out", items=items))
        line = _refused(res, ckpt / "0" / "items", ckpt / "0")
        assert "inside" in line
        # the dry run says the same
        res = _run(_args(unroll_bin, linen, tmp_path / "out", items=items, extra=["-n"]))
        _refused(res, ckpt / "0" / "items", ckpt / "0")
    # the output named through a symlink, the input directly
    (tmp_path / "outlink").symlink_to(tmp_path / "out")
    res = _run(_args(unroll_bin, linen, tmp_path / "outlink", items=ckpt / "0" / "items"))
    _refused(res, ckpt / "0" / "items", ckpt / "0")
    assert _tree_hash(tmp_path / "out") == before


def test_output_inside_the_input_is_refused(linen, unroll_bin, tmp_path):
    """base_output_directory inside the input's item directory: refused before anything is
    created there."""
    items = _copy_run(linen, tmp_path / "train")
    before = _tree_hash(tmp_path)
    for out in (items / "sub", f"{items}/", f"{items}/../items/sub"):
        res = _run(_args(unroll_bin, linen, out, items=items))
        line = _refused(res, items)
        assert "inside the input" in line
    assert _tree_hash(tmp_path) == before


# ---- item 3: two runs, one destination ------------------------------------------------------


def test_second_run_to_a_locked_destination(linen, single_run, fixture_cache, unroll_bin,
                                            tmp_path):
    """Run A is stopped (gdb) while it converts; run B, with another input, to the same
    destination: B exits 3 naming A's pid, and removes nothing of A's; A then publishes its
    own result, equal to a single run's."""
    other = _cached_fixture(fixture_cache, BIG, "kill")
    out = tmp_path / "out"
    b_args = _args(unroll_bin, other, out)
    b_script = tmp_path / "b.sh"
    b_script.write_text(
        "#!/bin/sh\n" + " ".join(f"'{a}'" for a in b_args)
        + f" 2>'{tmp_path}/b.err'; echo $? >'{tmp_path}/b.rc'\n"
        + f"ls -a '{out}/run' >'{tmp_path}/b.ls'\n")
    status, text = _gdb(_args(unroll_bin, linen, out),
                        "break ur_exec_run\nrun\n"
                        f"shell sh '{b_script}'\n"
                        "delete\ncontinue\n", tmp_path)
    assert status == 0, text
    assert (tmp_path / "b.rc").read_text().strip() == "3"
    b_err = (tmp_path / "b.err").read_text().strip()
    assert "\n" not in b_err and "another unroll run" in b_err, b_err
    assert ".unroll-lock" in b_err and " on " in b_err
    pid = b_err.split("pid ")[1].split()[0]
    assert pid.isdigit()
    assert f"checkpoints.{pid}.unroll-tmp" in (tmp_path / "b.ls").read_text()
    assert _files(out / "run" / "checkpoints" / "0") == single_run
    assert not _leftovers(out / "run")


def test_stale_staging_and_lock_of_a_dead_run_are_cleaned(linen, single_run, unroll_bin,
                                                          tmp_path):
    run = tmp_path / "out" / "run"
    (run / "checkpoints.999999.unroll-tmp" / "0").mkdir(parents=True)
    (run / "checkpoints.unroll-lock").write_text("pid 999999 on elsewhere\n")
    (run / "checkpoints.5.999.unroll-tmp").mkdir()  # not ours: another destination's
    res = _run(_args(unroll_bin, linen, tmp_path / "out"))
    assert res.returncode == 0, res.stderr
    assert _files(run / "checkpoints" / "0") == single_run
    assert sorted(p.name for p in run.iterdir()) == ["checkpoints", "checkpoints.5.999.unroll-tmp"]


def test_staging_removed_mid_run_is_not_published(make_fixture, unroll_bin, tmp_path):
    """LoRA run: the staging directory is removed after the base is written, as the first
    adapter's writer starts. Nothing is published, nothing re-created, exit 3."""
    base = make_fixture("linen", "plain-zarr3", "float32")
    lora = make_fixture("lora", "plain-zarr3", "float32")
    out = tmp_path / "out"
    args = _args(unroll_bin, base, out, extra=[f"lora_input_adapters_path={lora.root}"])
    status, text = _gdb(args, "break ur_orbax_writer_create\nrun\ncontinue\n"
                              f"shell rm -rf '{out}'/run/checkpoints*.unroll-tmp\n"
                              "delete\ncontinue\n", tmp_path)
    assert status == 3, text
    lines = _unroll_lines(text)
    assert len(lines) == 1 and ".unroll-tmp" in lines[0], text
    assert not (out / "run" / "checkpoints").exists()
    assert not _leftovers(out / "run")


_REMOVE = "rm -rf"
_CUT_SHORT = "truncate -s 20"  # the check reads what it needs of each file, not the whole tree


@pytest.mark.parametrize("damage,what", [
    (_REMOVE, "items/_METADATA"), (_REMOVE, "_CHECKPOINT_METADATA"), (_REMOVE, "items/d"),
    (_REMOVE, "items/manifest.ocdbt"), (_REMOVE, "items"),
    (_CUT_SHORT, "items/_METADATA"), (_CUT_SHORT, "items/_sharding"),
])
def test_incomplete_staged_tree_is_not_published(linen, single_run, unroll_bin, tmp_path,
                                                 damage, what):
    """A file of the staged step removed or cut short just before publishing: the check of the
    staged tree refuses it (exit 3, naming it); an earlier output stays."""
    out = tmp_path / "out"
    ok = _run(_args(unroll_bin, linen, out))
    assert ok.returncode == 0, ok.stderr
    ckpt = out / "run" / "checkpoints"
    before = _tree_hash(ckpt)
    status, text = _gdb(_args(unroll_bin, linen, out),
                        "break ur_job_publish_commit\nrun\n"
                        f"shell {damage} '{out}'/run/checkpoints.*.unroll-tmp/0/{what}\n"
                        "delete\ncontinue\n", tmp_path)
    assert status == 3, text
    lines = _unroll_lines(text)
    assert len(lines) == 1 and "incomplete" in lines[0] and ".unroll-tmp" in lines[0], text
    assert _tree_hash(ckpt) == before
    assert not _leftovers(out / "run")


# ---- item 4: signals -----------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_mid_run(linen, unroll_bin, tmp_path, sig):
    """The signal arrives while the workers convert (delivered by gdb at the start of the
    conversion): exit 128 + signal, one line, the earlier output intact, nothing left."""
    out = tmp_path / "out"
    ok = _run(_args(unroll_bin, linen, out))
    assert ok.returncode == 0, ok.stderr
    ckpt = out / "run" / "checkpoints"
    before = _tree_hash(ckpt)
    status, text = _gdb(_args(unroll_bin, linen, out),
                        f"break ur_exec_run\nrun\ndelete\nsignal {sig.name}\n", tmp_path)
    assert status == 128 + sig, text
    lines = _unroll_lines(text)
    assert len(lines) == 1 and sig.name in lines[0], text
    assert _tree_hash(ckpt) == before
    assert not _leftovers(out / "run")


def test_signals_at_spread_out_times(fixture_cache, unroll_bin, tmp_path):
    """SIGINT/SIGTERM at spread-out moments of an unattended run (the larger fixture of
    test_kill.py): either the run had finished (exit 0, the new output complete) or it exits
    130/143 with the earlier output as it was; never a staging directory or lock left."""
    info = _cached_fixture(fixture_cache, BIG, "kill")
    out = tmp_path / "out"
    args = [str(a) for a in _args(unroll_bin, info, out)]
    t = time.monotonic()
    ok = _run(args)
    duration = time.monotonic() - t
    assert ok.returncode == 0, ok.stderr
    ckpt = out / "run" / "checkpoints"
    good = _files(ckpt)
    outcomes = {}
    for i in range(12):
        sig = (signal.SIGINT, signal.SIGTERM)[i % 2]
        (ckpt / "0" / "marker").write_text(str(i))  # tells the earlier output from a new one
        before = _tree_hash(ckpt)
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True)
        time.sleep(duration * (0.1 + 0.8 * i / 12))
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
        outcomes[proc.returncode] = outcomes.get(proc.returncode, 0) + 1
        if proc.returncode == 0:
            assert _files(ckpt) == good
        else:
            assert proc.returncode in (128 + sig, -sig), (proc.returncode, err)
            assert _tree_hash(ckpt) == before, f"signal {i}: earlier output changed"
        assert not _leftovers(out / "run"), f"signal {i}: left {_leftovers(out / 'run')}"
    assert outcomes.get(130, 0) + outcomes.get(143, 0) > 0, outcomes
