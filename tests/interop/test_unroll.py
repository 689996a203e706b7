"""`unroll` end to end against the oracle: real Orbax checkpoints of every MaxText layout in
every storage layout are unrolled by the C tool, restored with stock Orbax, and compared bit
for bit with the Python reference unroll (jnp.take per layer + astype(bfloat16))."""
import pathlib
import subprocess

import pytest

import maxtext_fixtures
import reference

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONFIG = ROOT / "tests" / "data" / "example" / "unroll.yml"
LAYOUTS = tuple(maxtext_fixtures.LAYOUTS)
STORAGE = {name: flags for name, flags in maxtext_fixtures.LAYOUTS.items()}


def run_unroll(unroll_bin, info, out_dir, *, pure_nnx=None, layout=None, extra=()):
    """Run unroll on a fixture with the config keys the fixture says a MaxText run needs."""
    args = unroll_args(unroll_bin, info, out_dir, pure_nnx=pure_nnx, layout=layout, extra=extra)
    return subprocess.run(args, capture_output=True, text=True, timeout=300)


def unroll_args(unroll_bin, info, out_dir, *, pure_nnx=None, layout=None, extra=()):
    """The command line run_unroll runs."""
    cfg = info.config
    use_ocdbt, use_zarr3 = STORAGE[layout or info.layout]
    args = [str(unroll_bin), str(CONFIG), "-q",
            f"{info.input_key}={cfg[info.input_key]}",
            f"base_output_directory={out_dir}", "run_name=run",
            f"base_num_decoder_layers={cfg['num_decoder_layers']}",
            f"first_num_dense_layers={cfg.get('first_num_dense_layers', 0)}",
            f"param_scan_axis={cfg['param_scan_axis']}",
            "scan_layers=true", "force_unroll=true",
            f"pure_nnx={str(cfg['pure_nnx'] if pure_nnx is None else pure_nnx).lower()}",
            f"decoder_block={cfg['decoder_block']}",
            f"checkpoint_storage_use_ocdbt={str(use_ocdbt).lower()}",
            f"checkpoint_storage_use_zarr3={str(use_zarr3).lower()}", *extra]
    return args


def checkpoint_dir(out_dir):
    return pathlib.Path(out_dir) / "run" / "checkpoints"


@pytest.mark.parametrize("dtype", maxtext_fixtures.DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", ["linen", "nnx", "nnx_legacy", "params", "deepseek"])
def test_unroll_matches_reference(unroll_bin, make_fixture, tmp_path, kind, layout, dtype):
    info = make_fixture(kind, layout, dtype)
    res = run_unroll(unroll_bin, info, tmp_path)
    assert res.returncode == 0, res.stderr
    expected = reference.reference_for(info)
    reference.check_unrolled(checkpoint_dir(tmp_path) / "0" / "items", expected)


@pytest.mark.parametrize("pure_nnx", [True, False])
@pytest.mark.parametrize("kind", ["linen", "nnx"])
def test_unroll_both_output_layouts(unroll_bin, make_fixture, tmp_path, kind, pure_nnx):
    """The NNX decode layout ({value} leaves) and the Linen one (step, params/params, opt_state)."""
    info = make_fixture(kind, "ocdbt-zarr3", "float32")
    res = run_unroll(unroll_bin, info, tmp_path, pure_nnx=pure_nnx)
    assert res.returncode == 0, res.stderr
    expected = reference.reference_for(info, pure_nnx=pure_nnx)
    reference.check_unrolled(checkpoint_dir(tmp_path) / "0" / "items", expected)


@pytest.mark.parametrize("out_layout", LAYOUTS)
def test_unroll_writes_every_storage_layout(unroll_bin, make_fixture, tmp_path, out_layout):
    info = make_fixture("linen", "ocdbt-zarr3", "bfloat16")
    res = run_unroll(unroll_bin, info, tmp_path, layout=out_layout)
    assert res.returncode == 0, res.stderr
    items = checkpoint_dir(tmp_path) / "0" / "items"
    assert (items / "manifest.ocdbt").exists() == STORAGE[out_layout][0]
    reference.check_unrolled(items, reference.reference_for(info))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_unroll_lora_adapters(unroll_bin, make_fixture, tmp_path, layout):
    """With lora_input_adapters_path the base goes to checkpoints/base/0/items and each
    adapter, unrolled by the same resolver, to checkpoints/loras/<id>/0/items."""
    base = make_fixture("linen", layout, "float32")
    lora = make_fixture("lora", layout, "float32")
    res = run_unroll(unroll_bin, base, tmp_path, pure_nnx=False,
                     extra=[f"lora_input_adapters_path={lora.root}"])
    assert res.returncode == 0, res.stderr
    ckpt = checkpoint_dir(tmp_path)
    reference.check_unrolled(ckpt / "base" / "0" / "items",
                             reference.reference_for(base, pure_nnx=False), via_manager=True)
    reference.check_unrolled_lora(ckpt, reference.reference_for(lora, pure_nnx=False))
    assert not (ckpt / "0").exists()


def test_unroll_replaces_earlier_output_only_when_complete(unroll_bin, make_fixture, tmp_path):
    info = make_fixture("linen", "ocdbt-zarr3", "float32")
    ckpt = checkpoint_dir(tmp_path)
    (ckpt / "0").mkdir(parents=True)
    (ckpt / "0" / "old-marker").write_text("earlier output")
    (ckpt / "sibling").write_text("not ours")
    # A failing run (wrong layer count) leaves the earlier output as it was.
    bad = run_unroll(unroll_bin, info, tmp_path, extra=["base_num_decoder_layers=5"])
    assert bad.returncode == 2, bad.stderr
    assert (ckpt / "0" / "old-marker").read_text() == "earlier output"
    assert not list(tmp_path.joinpath("run").glob("*.unroll-tmp"))
    # A good run replaces checkpoints/0, and only it.
    res = run_unroll(unroll_bin, info, tmp_path)
    assert res.returncode == 0, res.stderr
    assert not (ckpt / "0" / "old-marker").exists()
    assert (ckpt / "sibling").read_text() == "not ours"
    reference.check_unrolled(ckpt / "0" / "items", reference.reference_for(info))


def test_layer_count_mismatch_names_leaf_shape_axis(unroll_bin, make_fixture, tmp_path):
    info = make_fixture("linen", "ocdbt-zarr3", "float32")
    res = run_unroll(unroll_bin, info, tmp_path, extra=["base_num_decoder_layers=4"])
    assert res.returncode == 2
    line = res.stderr.strip()
    assert "\n" not in line
    assert "layers" in line and "axis 1" in line and "4" in line, line
    assert not checkpoint_dir(tmp_path).exists()


def test_dry_run_prints_plan_and_writes_nothing(unroll_bin, make_fixture, tmp_path):
    info = make_fixture("nnx", "ocdbt-zarr3", "float32")
    res = run_unroll(unroll_bin, info, tmp_path, extra=["--dry-run"])
    assert res.returncode == 0, res.stderr
    assert "split" in res.stdout and "drop" in res.stdout
    assert "nnx_aux" in res.stdout
    assert not (tmp_path / "run").exists()


def test_input_is_never_modified(unroll_bin, make_fixture, tmp_path):
    import hashlib
    info = make_fixture("nnx", "plain-zarr2", "float32")

    def tree_hash(root):
        h = hashlib.sha256()
        for p in sorted(pathlib.Path(root).rglob("*")):
            h.update(str(p.relative_to(root)).encode())
            if p.is_file():
                h.update(p.read_bytes())
        return h.hexdigest()

    before = tree_hash(info.root)
    assert run_unroll(unroll_bin, info, tmp_path).returncode == 0
    assert run_unroll(unroll_bin, info, tmp_path, extra=["base_num_decoder_layers=9"]).returncode != 0
    assert tree_hash(info.root) == before


def _tree_bytes(items):
    """Every file of an item directory but the ones that record the time or the path
    (commit_success.txt, _CHECKPOINT_METADATA, and manifest.ocdbt, whose version records
    its commit time; the B+tree it points to lives in the data files, compared here)."""
    out = {}
    skip = ("commit_success.txt", "_CHECKPOINT_METADATA", "manifest.ocdbt")
    for p in sorted(pathlib.Path(items).rglob("*")):
        if p.is_file() and p.name not in skip:
            out[str(p.relative_to(items))] = p.read_bytes()
    return out


@pytest.mark.parametrize("layout", ["ocdbt-zarr3", "plain-zarr2"])
def test_output_bytes_do_not_depend_on_thread_count(unroll_bin, make_fixture, tmp_path, layout):
    info = make_fixture("deepseek", layout, "float32")
    trees = []
    for threads in ("1", "2", "5"):
        out = tmp_path / f"j{threads}"
        res = run_unroll(unroll_bin, info, out, extra=["--threads", threads])
        assert res.returncode == 0, res.stderr
        trees.append(_tree_bytes(checkpoint_dir(out) / "0" / "items"))
    assert trees[0] == trees[1] == trees[2]
    assert len(trees[0]) > 3


def test_maxtext_base_yml_and_model_file_unchanged(unroll_bin, make_fixture, fixture_cache,
                                                   tmp_path):
    """MaxText's own configs (from the maxtext package) drive a real run: base.yml plus a
    model file via model_name=, with key=value overrides as MaxText's command line takes."""
    from test_config import _configs_dir
    configs = _configs_dir(fixture_cache)
    info = make_fixture("linen", "ocdbt-zarr3", "float32")
    # llama2-7b sets base_num_decoder_layers=32; the tiny fixture has 3 layers, so the model
    # file's value must be overridden, which MaxText allows with override_model_config=true.
    args = [str(unroll_bin), str(configs / "base.yml"), "-q", "model_name=llama2-7b",
            "override_model_config=true", f"load_full_state_path={info.items}",
            f"base_output_directory={tmp_path}", "run_name=run", "force_unroll=true",
            "base_num_decoder_layers=3", "pure_nnx=false"]
    res = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    reference.check_unrolled(checkpoint_dir(tmp_path) / "0" / "items",
                             reference.reference_for(info, pure_nnx=False))
    # Without override_model_config the conflicting key is an error naming it.
    args.remove("override_model_config=true")
    res = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert res.returncode == 2 and "base_num_decoder_layers" in res.stderr


@pytest.mark.parametrize("limit", ["64", "300", "2K"])
@pytest.mark.parametrize("kind,layout,dtype", [("linen", "ocdbt-zarr3", "float32"),
                                               ("nnx", "plain-zarr2", "bfloat16"),
                                               ("deepseek", "ocdbt-zarr2", "float32")])
def test_memory_limit_streams_chunks_in_slabs(unroll_bin, make_fixture, tmp_path, kind, layout,
                                              dtype, limit):
    """A memory limit smaller than the input chunks makes unroll stream each chunk in slabs
    (and write smaller output chunks); the result is still exactly the reference."""
    info = make_fixture(kind, layout, dtype)
    res = run_unroll(unroll_bin, info, tmp_path, extra=["--memory-limit", limit, "-j", "2"])
    assert res.returncode == 0, res.stderr
    reference.check_unrolled(checkpoint_dir(tmp_path) / "0" / "items",
                             reference.reference_for(info))


@pytest.mark.parametrize("layout", ["plain-zarr3", "plain-zarr2"])
def test_dropped_leaves_are_never_read(unroll_bin, make_fixture, tmp_path, layout):
    """opt_state's chunk data is never read: with every opt_state chunk file deleted from a
    copy of the checkpoint (its metadata kept), the run still succeeds and is exact."""
    import shutil
    info = make_fixture("linen", layout, "float32")
    copy = tmp_path / "in"
    shutil.copytree(info.root, copy)
    items = copy / info.items.relative_to(info.root)
    removed = 0
    for leaf_dir in items.iterdir():
        if leaf_dir.is_dir() and leaf_dir.name.startswith("opt_state."):
            for f in leaf_dir.rglob("*"):
                if f.is_file() and f.name not in ("zarr.json", ".zarray"):
                    f.unlink()
                    removed += 1
    assert removed > 10
    cfg = dict(info.config)
    cfg[info.input_key] = str(items)
    moved = type(info)(**{**info.__dict__, "config": cfg})
    res = run_unroll(unroll_bin, moved, tmp_path / "out")
    assert res.returncode == 0, res.stderr
    reference.check_unrolled(checkpoint_dir(tmp_path / "out") / "0" / "items",
                             reference.reference_for(info))
