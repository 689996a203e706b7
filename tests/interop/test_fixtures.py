"""Tests of the fixture generators and of the reference unroll / checker themselves.

Every kind x storage layout x dtype is generated with real Orbax, restored with stock Orbax and
compared with what the generator meant (tree, shapes, dtypes, bits, sharding specs, on-disk
format); the reference unroll is checked against an independent numpy unroll; the checker is
shown to accept a correct output and to reject wrong ones.
"""
import json
import pathlib

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
from jax.sharding import NamedSharding

import maxtext_fixtures as mf
import reference as ref

ALL = [(k, lay, d) for k in mf.KINDS for lay in mf.LAYOUTS for d in mf.DTYPES]


def _ids(p):
    return "-".join(p)


def _norm_spec(spec) -> tuple:
    out = [tuple(e) if isinstance(e, (list, tuple)) else e for e in spec]
    out = [e[0] if isinstance(e, tuple) and len(e) == 1 else e for e in out]
    while out and out[-1] is None:
        out.pop()
    return tuple(out)


def _item_dirs(info):
    if info.kind == "lora":
        return [(a.items, a.tree, a.specs, mf.DEFAULT_MESH) for a in info.adapters.values()]
    return [(info.items, info.tree, info.specs, info.mesh_shape)]


def _param_names(items: pathlib.Path, tree) -> list:
    return [".".join(p) for p, v in mf.flatten(tree).items() if isinstance(v, np.ndarray)]


def _check_disk(info, items: pathlib.Path, tree, mesh_shape) -> None:
    meta = json.loads((items / "_METADATA").read_text())
    assert meta["use_ocdbt"] is info.use_ocdbt
    assert meta["use_zarr3"] is info.use_zarr3
    step_meta = json.loads((items.parent / "_CHECKPOINT_METADATA").read_text())
    assert step_meta["item_handlers"]["items"].endswith("PyTreeCheckpointHandler")
    names = _param_names(items, tree)
    assert names
    for name in names:
        if info.use_ocdbt:
            assert not (items / name).exists(), name
        else:
            assert (items / name / ("zarr.json" if info.use_zarr3 else ".zarray")).is_file(), name
    if info.use_ocdbt:
        assert (items / "manifest.ocdbt").is_file()
        assert list(items.glob("ocdbt.process_*/d/*"))
    # non-trivial chunk grids: at least one leaf is written in several shards / chunks
    arrays = json.loads((items / "array_metadatas" / "process_0").read_text())["array_metadatas"]
    shapes = {tuple(np.shape(v)) for v in mf.flatten(tree).values() if isinstance(v, np.ndarray)}
    assert shapes
    split = [m["array_metadata"] for m in arrays
             if m["array_metadata"]["chunk_shape"] and
             np.prod(m["array_metadata"]["chunk_shape"]) > 0 and
             tuple(m["array_metadata"]["chunk_shape"]) not in shapes]
    assert split, "every leaf is a single chunk"


@pytest.mark.parametrize("kind,layout,dtype", ALL, ids=[_ids(p) for p in ALL])
def test_fixture_restores_as_meant(make_fixture, kind, layout, dtype):
    info = make_fixture(kind, layout, dtype)
    for items, tree, specs, mesh_shape in _item_dirs(info):
        assert items.is_dir(), items
        restored = ref.restore(items)
        ref.compare_trees(restored, tree, f"{kind}/{layout}/{dtype}")
        flat = mf.flatten(restored)
        assert specs
        for path, spec in specs.items():
            leaf = flat[path]
            assert isinstance(leaf.sharding, NamedSharding), (path, leaf.sharding)
            assert tuple(leaf.sharding.mesh.axis_names) == mf.MESH_AXES
            assert leaf.sharding.mesh.devices.shape == tuple(mesh_shape)
            assert _norm_spec(leaf.sharding.spec) == _norm_spec(spec), path
        _check_disk(info, items, tree, mesh_shape)
    # bf16 specials went through unchanged; layer axis where the description says
    flat = mf.flatten(info.tree if info.tree else info.adapters["adapter_all"].tree)
    specials = [v for p, v in flat.items() if mf.is_special_leaf(p) and v is not None]
    assert specials and all(np.isnan(v.astype(np.float32)).any() for v in specials)
    assert all(np.isinf(v.astype(np.float32)).any() for v in specials)
    for path, axis in info.scan_axes.items():
        if axis is not None:
            layers = info.first_num_dense_layers if "dense_layers" in path else (
                info.num_decoder_layers - info.first_num_dense_layers)
            leaf = mf.flatten(info.adapters[path[0]].tree)[path[1:]] if kind == "lora" \
                else flat[path]
            assert np.shape(leaf)[axis] == layers, path
    if kind == "lora":
        for a in info.adapters.values():
            assert json.loads((a.root / "adapter_config.json").read_text()) == a.config


def _groups(info) -> dict:
    if info.kind == "deepseek":
        return {"dense_layers": info.first_num_dense_layers,
                "moe_layers": info.num_decoder_layers - info.first_num_dense_layers}
    return {"layers": info.num_decoder_layers}


def _intended_params(info, tree) -> dict:
    """{path under the params root: numpy array or None} from the generator's intent."""
    if info.kind == "nnx_legacy":
        return {p[:-1]: v for p, v in mf.flatten(tree["model"]).items() if "rngs" not in p}
    return mf.flatten(tree["params"]["params"])


def _numpy_unroll(info, tree) -> dict:
    """Independent unroll: np.take + ml_dtypes round-to-nearest-even; {path: leaf}."""
    groups = _groups(info)
    out = {}
    for path, v in _intended_params(info, tree).items():
        if path[0] == "decoder" and path[1] in groups:
            for i in range(groups[path[1]]):
                out[("decoder", f"{path[1]}_{i}") + path[2:]] = (
                    None if v is None else ref.numpy_bf16(np.take(v, i, axis=1)))
        else:
            out[path] = None if v is None else ref.numpy_bf16(v)
    return out


def _expected_flat(info, tree, pure_nnx: bool, lora: bool = False) -> dict:
    params = _numpy_unroll(info, tree)
    if lora:
        prefix = ("params",) if pure_nnx else ("params", "params")
        return {**{prefix + p: v for p, v in params.items()}, ("step",): 0, ("opt_state",): {}}
    if pure_nnx:
        return {p + ("value",): v for p, v in params.items()}
    return {**{("params", "params") + p: v for p, v in params.items()}, ("step",): 0,
            ("opt_state",): {}}


@pytest.mark.parametrize("kind,layout,dtype", ALL, ids=[_ids(p) for p in ALL])
def test_reference_unroll(make_fixture, kind, layout, dtype):
    info = make_fixture(kind, layout, dtype)
    for pure_nnx in (False, True):
        if kind == "lora":
            got = ref.reference_unroll_lora(info.root, num_decoder_layers=info.num_decoder_layers,
                                            pure_nnx=pure_nnx)
            assert sorted(got) == sorted(info.adapters)
            for lora_id, (tree, cfg) in got.items():
                a = info.adapters[lora_id]
                assert cfg == a.config
                ref.compare_trees(tree, mf.unflatten(_expected_flat(info, a.tree, pure_nnx, True)),
                                  f"reference lora {lora_id} pure_nnx={pure_nnx}")
            continue
        got = ref.reference_unroll(info.items, num_decoder_layers=info.num_decoder_layers,
                                   first_num_dense_layers=info.first_num_dense_layers,
                                   param_scan_axis=info.param_scan_axis, pure_nnx=pure_nnx)
        expected = _expected_flat(info, info.tree, pure_nnx)
        assert set(mf.flatten(got)) == set(expected)
        ref.compare_trees(got, mf.unflatten(expected), f"reference pure_nnx={pure_nnx}")
        layer_keys = {p[1] for p in expected if len(p) > 3 and p[0] == "decoder"} | {
            p[3] for p in expected if len(p) > 4 and p[:2] == ("params", "params")}
        want = {f"{g}_{i}" for g, n in _groups(info).items() for i in range(n)}
        assert want <= layer_keys and not set(_groups(info)) & layer_keys


def test_reference_refuses_wrong_layer_count(make_fixture):
    info = make_fixture("linen")
    with pytest.raises(ref.ReferenceError, match="layer axis"):
        ref.reference_unroll(info.items, num_decoder_layers=info.num_decoder_layers + 1)
    with pytest.raises(ref.ReferenceError, match="Missing dense_layers"):
        ref.unroll_params({"decoder": {"moe_layers": {}}}, num_decoder_layers=2)


def _save_output(items_parent: pathlib.Path, tree, use_ocdbt=True, use_zarr3=True) -> pathlib.Path:
    """Write `tree` the way MaxText writes a decode checkpoint: <dir>/0/items."""
    handler = ocp.PyTreeCheckpointHandler(use_ocdbt=use_ocdbt, use_zarr3=use_zarr3)
    with ocp.CheckpointManager(items_parent, item_names=("items",),
                               item_handlers={"items": handler}) as mngr:
        mngr.save(0, args=ocp.args.Composite(items=ocp.args.PyTreeSave(item=tree)))
        mngr.wait_until_finished()
    return items_parent / "0" / "items"


def _flip_first_bit(tree, path):
    flat = mf.flatten(tree)
    a = np.array(flat[path])
    a.reshape(-1).view(np.uint16)[0] ^= 1
    flat[path] = a
    return mf.unflatten(flat)


@pytest.mark.parametrize("kind", ["linen", "nnx", "deepseek"])
@pytest.mark.parametrize("pure_nnx", [False, True], ids=["linen_out", "nnx_out"])
def test_checker_accepts_right_and_rejects_wrong(make_fixture, tmp_path, kind, pure_nnx):
    info = make_fixture(kind, dtype="float32")
    expected = ref.reference_for(info, pure_nnx)
    items = _save_output(tmp_path / "checkpoints", expected)
    ref.check_unrolled(items, expected)

    leaf = next(p for p in sorted(mf.flatten(expected)) if "layers_1" in p or "moe_layers_1" in p)
    with pytest.raises(AssertionError, match="/".join(leaf) + ": 1 of"):
        ref.check_unrolled(items, _flip_first_bit(expected, leaf), via_manager=False)
    flat = mf.flatten(expected)
    del flat[leaf]
    with pytest.raises(AssertionError, match="key sets differ: 0 missing.*1 unexpected"):
        ref.check_unrolled(items, mf.unflatten(flat), via_manager=False)
    # same values in float32 instead of bf16 must be rejected (dtype)
    flat = mf.flatten(expected)
    flat[leaf] = np.asarray(flat[leaf], np.float32)
    with pytest.raises(AssertionError, match="dtype"):
        ref.check_unrolled(items, mf.unflatten(flat), via_manager=False)


def test_checker_nan_bits_and_lora(make_fixture, tmp_path):
    info = make_fixture("lora", dtype="bfloat16")
    expected = ref.reference_for(info)
    out = tmp_path / "ckpt"
    for lora_id, (tree, cfg) in expected.items():
        _save_output(out / "loras" / lora_id, tree, use_zarr3=False)
        (out / "loras" / lora_id / "adapter_config.json").write_text(json.dumps(cfg, indent=4))
    ref.check_unrolled_lora(out, expected)
    # a NaN with another payload is a different leaf, bit for bit
    lora_id, (tree, cfg) = next(iter(expected.items()))
    flat = mf.flatten(tree)
    path = next(p for p, v in flat.items()
                if v is not None and not isinstance(v, (int, dict)) and np.isnan(
                    np.asarray(v, np.float32)).any())
    a = np.array(flat[path])
    bits = a.reshape(-1).view(np.uint16)
    i = int(np.flatnonzero(np.isnan(a.reshape(-1).astype(np.float32)))[0])
    bits[i] ^= 0x0001
    assert np.isnan(a.reshape(-1)[i].astype(np.float32))
    flat[path] = a
    with pytest.raises(AssertionError, match="1 of"):
        ref.check_unrolled(out / "loras" / lora_id / "0" / "items", mf.unflatten(flat),
                           via_manager=False)


def test_fixture_cache_reuses_entries(make_fixture, fixture_cache):
    info = make_fixture("linen")
    before = (info.items / "_METADATA").stat().st_mtime_ns
    again = make_fixture("linen")
    assert again.items == info.items
    assert (again.items / "_METADATA").stat().st_mtime_ns == before
    assert again.items.parents[2].name == mf.cache_key("linen", mf.DEFAULT_LAYOUT, "float32")
    assert again.items.parents[2].parent == fixture_cache


def test_jax_sees_eight_devices():
    assert len(jax.devices()) >= 8


def test_example_checkpoint_is_the_linen_fixture(example_checkpoint):
    """tests/data/example holds what make_example.py writes (rerun it if this fails)."""
    info = mf.describe("linen", "ocdbt-zarr3", "float32")
    items = example_checkpoint / "9" / "items"
    ref.compare_trees(ref.restore(items), info.tree, "tests/data/example")
    meta = json.loads((items / "_METADATA").read_text())
    assert meta["use_ocdbt"] is True and meta["use_zarr3"] is True
    got = ref.reference_unroll(items, num_decoder_layers=info.num_decoder_layers, pure_nnx=False)
    assert sorted(got["params"]["params"]["decoder"]) == [
        "decoder_norm", "layers_0", "layers_1", "layers_2", "logits_dense"]
