"""Checkpoints that real Orbax had not finished writing (issue 12, item 2).

Orbax's commit-file atomicity mode (`AtomicityMode.COMMIT_FILE`, what it uses on object stores)
writes a step in place under its final names; only `commit_success.txt` (into each item when it
is finalized, into the step last) says it is done. A copy taken during the save holds whatever
was written so far. Each state below is made by real Orbax: the save of a MaxText-shaped state
(maxtext_fixtures, kind "linen") is stopped by raising from the Orbax function that would write
the next file, so the directory is exactly what a copy taken at that moment holds:

  data       array data written (`ocdbt.process_0/` or the zarr arrays, `array_metadatas/`),
             no `_METADATA` yet          (stopped in `_write_metadata_file`)
  unmerged   `_METADATA` written, `ocdbt.process_0/` not yet merged into the item's
             `manifest.ocdbt`            (stopped in `merge_ocdbt_per_process_files`)
  step       item finalized (its `commit_success.txt`), the step not yet (stopped in the
             step's `CommitFileTemporaryPath.finalize`)

plus the atomic-rename mode (local disks) stopped in the same place as `data`, which leaves
`9.orbax-checkpoint-tmp/items.orbax-checkpoint-tmp/`, and a finished step renamed to a
temporary name. Each run must exit 4 with one line naming what is missing, write nothing and
leave its input untouched; `unroll verify` of a good conversion against such an input fails.

Also: a chunk deleted from a finished checkpoint whose `_METADATA` says every chunk was stored
(`store_array_data_equal_to_fill_value`) is exit 4 naming the array and the chunk.
"""
import json
import pathlib
import shutil
import subprocess

import jax
import orbax.checkpoint as ocp
import pytest
from orbax.checkpoint._src.handlers import base_pytree_checkpoint_handler as bph
from orbax.checkpoint._src.path import atomicity

import maxtext_fixtures as mf
from test_damaged import CONFIG, EXIT_CORRUPT, Case, tree_hash

STEP = 9


class _Stop(Exception):
    """Raised into Orbax to stop a save where a copy would have been taken."""


def _stop(*_a, **_k):
    raise _Stop()


def _save_stopped(root, layout, mode, stop, monkeypatch):
    """Save the linen fixture state with real Orbax under `root`, stopped at `stop`."""
    use_ocdbt, use_zarr3 = mf.LAYOUTS[layout]
    state, b, mesh_shape, _, step = mf._build("linen", "float32")
    assert step == STEP
    sharded = mf._shard(state, b.specs, mf._mesh(mesh_shape))
    save_args = jax.tree.map(lambda _: ocp.SaveArgs(chunk_byte_size=mf.MAXTEXT_CHUNK_BYTES),
                             sharded)
    if stop == "data":
        monkeypatch.setattr(bph.BasePyTreeCheckpointHandler, "_write_metadata_file",
                            lambda *a, **k: _stop())
    elif stop == "unmerged":
        monkeypatch.setattr(bph.ocdbt_utils, "merge_ocdbt_per_process_files",
                            lambda *a, **k: _stop())
    elif stop == "step":
        real = atomicity.CommitFileTemporaryPath.finalize

        async def finalize(self):
            if self.get_final().name == str(STEP):  # the step, after its items
                raise _Stop()
            return await real(self)

        monkeypatch.setattr(atomicity.CommitFileTemporaryPath, "finalize", finalize)
    handler = ocp.PyTreeCheckpointHandler(use_ocdbt=use_ocdbt, use_zarr3=use_zarr3)
    options = ocp.CheckpointManagerOptions(
        create=True, enable_async_checkpointing=False,
        atomicity_options=ocp.options.AtomicityOptions(mode=mode))
    mngr = ocp.CheckpointManager(root, item_names=("items",), item_handlers={"items": handler},
                                 options=options)
    with pytest.raises(_Stop):
        mngr.save(STEP, args=ocp.args.Composite(items=ocp.args.PyTreeSave(
            item=sharded, save_args=save_args,
            ocdbt_target_data_file_size=mf.MAXTEXT_CHUNK_BYTES)))
        mngr.wait_until_finished()
    monkeypatch.undo()


def _run(unroll_bin, items, out):
    cfg = mf.describe("linen", mf.DEFAULT_LAYOUT, "float32").config
    args = [str(unroll_bin), str(CONFIG), "-q", f"load_full_state_path={items}",
            f"base_output_directory={out}", "run_name=run",
            f"base_num_decoder_layers={cfg['num_decoder_layers']}",
            f"param_scan_axis={cfg['param_scan_axis']}", "scan_layers=true",
            "force_unroll=true", "pure_nnx=false", f"decoder_block={cfg['decoder_block']}"]
    return subprocess.run(args, capture_output=True, text=True, timeout=300)


def _refused(unroll_bin, given, out, input_root, needles):
    """One run on `given`: exit 4, one line naming a needle, nothing written, input intact."""
    before = tree_hash(input_root)
    res = _run(unroll_bin, given, out)
    line = res.stderr.strip()
    assert res.returncode == EXIT_CORRUPT, f"exit {res.returncode}, stderr: {res.stderr!r}"
    assert line and "\n" not in line, f"not one line: {res.stderr!r}"
    assert "unfinished Orbax save" in line, line
    assert all(n in line for n in needles), f"{line!r} lacks one of {needles}"
    assert not (out / "run" / "checkpoints").exists(), "checkpoint dir written"
    left = [str(p) for p in out.rglob("*.unroll-tmp")] if out.exists() else []
    assert not left, f"temporary output left behind: {left}"
    assert tree_hash(input_root) == before, "input tree modified"
    return line


@pytest.fixture(scope="module")
def good_output(unroll_bin, make_fixture, tmp_path_factory):
    """A good conversion of the finished linen fixture (for `unroll verify`)."""
    info = make_fixture("linen")
    out = tmp_path_factory.mktemp("good")
    res = _run(unroll_bin, info.items, out)
    assert res.returncode == 0, res.stderr
    return out / "run" / "checkpoints" / "0" / "items"


def _verify_fails(unroll_bin, scanned, unrolled):
    res = subprocess.run([str(unroll_bin), "verify", str(scanned), str(unrolled)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == EXIT_CORRUPT, (res.returncode, res.stdout, res.stderr)
    assert "unfinished Orbax save" in res.stderr, res.stderr


COMMIT = ocp.options.AtomicityMode.COMMIT_FILE
RENAME = ocp.options.AtomicityMode.ATOMIC_RENAME


@pytest.mark.parametrize("layout,mode,stop,needles", [
    ("ocdbt-zarr3", COMMIT, "data", ["items", "no _METADATA"]),
    ("plain-zarr2", COMMIT, "data", ["items", "no _METADATA"]),
    ("ocdbt-zarr3", COMMIT, "unmerged", ["items", "no manifest.ocdbt", "ocdbt.process_"]),
    ("ocdbt-zarr2", COMMIT, "step", [f"/{STEP}:", "no commit_success.txt"]),
    ("ocdbt-zarr3", RENAME, "data", [".orbax-checkpoint-tmp"]),
], ids=["commit-file-data", "commit-file-plain-data", "commit-file-unmerged",
        "commit-file-step", "atomic-rename-data"])
def test_unfinished_save_is_refused(unroll_bin, good_output, tmp_path, monkeypatch, layout, mode,
                                    stop, needles):
    root = tmp_path / "input" / "checkpoints"
    _save_stopped(root, layout, mode, stop, monkeypatch)
    step = root / str(STEP)
    if mode == RENAME:
        step = root / f"{STEP}{atomicity.TMP_DIR_SUFFIX}"
        items = step / f"items{atomicity.TMP_DIR_SUFFIX}"
    else:
        items = step / "items"
        # what each state has, as described above (so that the cases stay what they claim)
        assert (step / "_CHECKPOINT_METADATA").is_file()
        assert not (step / "commit_success.txt").exists()
        assert (items / "_METADATA").exists() == (stop != "data")
        assert (items / "commit_success.txt").exists() == (stop == "step")
        if layout.startswith("ocdbt"):
            assert (items / "ocdbt.process_0" / "manifest.ocdbt").is_file()
            assert (items / "manifest.ocdbt").exists() == (stop == "step")
    assert items.is_dir(), sorted(str(p) for p in tmp_path.rglob("*"))
    out = tmp_path / "out"
    for given in (items, step):  # the item or the step directory
        _refused(unroll_bin, given, out, tmp_path / "input", needles)
    _verify_fails(unroll_bin, items, good_output)


def test_temporary_named_step_is_refused(unroll_bin, make_fixture, good_output, tmp_path):
    """A finished step under a temporary name (as a copy of an atomic-rename save taken between
    the last file and the rename holds it)."""
    c = Case(make_fixture, tmp_path, "ocdbt-zarr3")
    step = c.items.parent
    tmp = step.with_name(step.name + atomicity.TMP_DIR_SUFFIX)
    step.rename(tmp)
    for given in (tmp / "items", tmp):
        _refused(unroll_bin, given, c.out, c.input_root, [".orbax-checkpoint-tmp"])
    _verify_fails(unroll_bin, tmp / "items", good_output)


def test_process_database_is_never_the_item(unroll_bin, make_fixture, tmp_path):
    """`ocdbt.process_0/` of a finished save is a database, not an item: given as the input it
    is refused (it has no _METADATA), and a step whose item is gone does not fall back to it."""
    c = Case(make_fixture, tmp_path, "ocdbt-zarr3")
    _refused(unroll_bin, c.items / "ocdbt.process_0", c.out, c.input_root, ["no _METADATA"])
    for name in ("_METADATA", "_sharding", "manifest.ocdbt", "commit_success.txt"):
        (c.items / name).unlink()
    shutil.rmtree(c.items / "d")
    _refused(unroll_bin, c.items.parent, c.out, c.input_root, ["items", "no _METADATA"])


@pytest.mark.parametrize("layout", ["plain-zarr3", "plain-zarr2"])
def test_deleted_chunk_is_exit_4(make_fixture, tmp_path, layout):
    """Orbax stored every chunk (store_array_data_equal_to_fill_value): a deleted one is damage
    naming the array and the chunk, never read as zeros."""
    c = Case(make_fixture, tmp_path, layout)
    meta = json.loads((c.items / "_METADATA").read_text())
    assert meta["store_array_data_equal_to_fill_value"] is True
    name = "params.params.decoder.layers.mlp.wo.kernel"
    chunks = sorted(p for p in (c.items / name).rglob("*")
                    if p.is_file() and p.name not in (".zarray", "zarr.json", ".zattrs"))
    victim = chunks[-1]
    victim.unlink()
    line = c.fails(EXIT_CORRUPT, [name])
    assert str(victim.relative_to(c.items)) in line, line
    assert "is missing" in line, line
