"""List containers inside params (issue 12, item 9).

A param tree may hold Python lists (Orbax key type 1, SEQUENCE), e.g. a MoE block's experts
kept as `experts: [w0, w1]`. Orbax restores such a node as a list; a converter that writes
its indices as dict keys makes it come back as `{'0': ..., '1': ...}`, which a model
expecting the list cannot load. The checkpoint here is saved by real Orbax with lists both
inside the scanned layer group (so every unscanned `layers_<i>` copy must keep them) and
outside it (copied as they are); the output is restored with stock Orbax and compared with
an independent numpy unroll, structure (list vs dict) and values.
"""
import pathlib
import subprocess

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

import reference

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONFIG = ROOT / "tests" / "data" / "example" / "unroll.yml"
LAYERS = 3


def _arr(seed, shape):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _params():
    """{decoder: {layers: ... (stacked on axis 1), norm}, token_embedder, heads: [..]}."""
    return {
        "decoder": {
            "layers": {
                "mlp": {
                    # a list of arrays, and a list of dicts of arrays
                    "experts": [_arr(1, (4, LAYERS, 2)), _arr(2, (4, LAYERS, 2))],
                    "gates": [{"kernel": _arr(3, (2, LAYERS))}, {"kernel": _arr(4, (2, LAYERS))}],
                },
                "pre_norm": {"scale": _arr(5, (4, LAYERS))},
            },
            "decoder_norm": {"scale": _arr(6, (4,))},
        },
        "token_embedder": {"embedding": _arr(7, (5, 4))},
        "heads": [_arr(8, (4, 2)), _arr(9, (4, 3)), _arr(10, (4, 1))],
    }


def _save(root, params, use_ocdbt, use_zarr3):
    state = {"step": 0, "params": {"params": params}, "opt_state": {}}
    dev = jax.devices()[0]
    state = jax.tree.map(lambda x: jax.device_put(x, dev) if isinstance(x, np.ndarray) else x,
                         state)
    handler = ocp.PyTreeCheckpointHandler(use_ocdbt=use_ocdbt, use_zarr3=use_zarr3)
    options = ocp.CheckpointManagerOptions(create=True, enable_async_checkpointing=False)
    with ocp.CheckpointManager(root, item_names=("items",), item_handlers={"items": handler},
                               options=options) as mngr:
        mngr.save(0, args=ocp.args.Composite(items=ocp.args.PyTreeSave(item=state)))
        mngr.wait_until_finished()
    return root / "0" / "items"


def _unroll_ref(params):
    """Independent numpy unroll: layers -> layers_<i> (take on axis 1), every leaf bf16."""
    cast = lambda x: reference.numpy_bf16(x)  # noqa: E731
    out = jax.tree.map(cast, {k: v for k, v in params.items() if k != "decoder"})
    dec = {k: jax.tree.map(cast, v) for k, v in params["decoder"].items() if k != "layers"}
    for i in range(LAYERS):
        dec[f"layers_{i}"] = jax.tree.map(lambda x: cast(np.take(x, i, axis=1)),
                                          params["decoder"]["layers"])
    out["decoder"] = dec
    return out


def _structure(tree, path="<root>"):
    """Every container's type by path: list and dict must match, not only the leaves."""
    out = {}
    if isinstance(tree, dict):
        out[path] = "dict"
        for k, v in tree.items():
            out.update(_structure(v, f"{path}/{k}"))
    elif isinstance(tree, (list, tuple)):
        out[path] = "list"
        for i, v in enumerate(tree):
            out.update(_structure(v, f"{path}/{i}"))
    return out


def _run(unroll_bin, items, out, pure_nnx, use_ocdbt, use_zarr3):
    return subprocess.run([str(unroll_bin), str(CONFIG), "-q", f"load_parameters_path={items}",
                           f"base_output_directory={out}", "run_name=run",
                           f"base_num_decoder_layers={LAYERS}", "force_unroll=true",
                           f"pure_nnx={str(pure_nnx).lower()}",
                           f"checkpoint_storage_use_ocdbt={str(use_ocdbt).lower()}",
                           f"checkpoint_storage_use_zarr3={str(use_zarr3).lower()}"],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("use_ocdbt,use_zarr3", [(True, True), (False, False)],
                         ids=["ocdbt-zarr3", "plain-zarr2"])
@pytest.mark.parametrize("pure_nnx", [False, True], ids=["linen", "nnx"])
def test_lists_restore_as_lists(unroll_bin, tmp_path, pure_nnx, use_ocdbt, use_zarr3):
    params = _params()
    items = _save(tmp_path / "in" / "checkpoints", params, use_ocdbt, use_zarr3)
    restored_in = reference.restore(items)
    assert isinstance(restored_in["params"]["params"]["heads"], list)  # Orbax keeps lists

    res = _run(unroll_bin, items, tmp_path / "out", pure_nnx, use_ocdbt, use_zarr3)
    assert res.returncode == 0, res.stderr
    out_items = tmp_path / "out" / "run" / "checkpoints" / "0" / "items"
    # NNX wraps every leaf in {"value": leaf}, inside lists too
    expected = (_wrap_value(_unroll_ref(params)) if pure_nnx
                else reference.decode_layout(_unroll_ref(params), False))
    got = reference.restore(out_items)
    assert _structure(got) == _structure(expected)
    dec = got["decoder"] if pure_nnx else got["params"]["params"]["decoder"]
    for i in range(LAYERS):
        assert isinstance(dec[f"layers_{i}"]["mlp"]["experts"], list)
        assert isinstance(dec[f"layers_{i}"]["mlp"]["gates"], list)
    reference.compare_trees(got, expected, "unrolled (no target)")
    reference.compare_trees(reference.restore(out_items, reference.target_of(expected)),
                            expected, "unrolled (target)")

    v = subprocess.run([str(unroll_bin), "verify", str(items), str(out_items)],
                       capture_output=True, text=True, timeout=300)
    assert v.returncode == 0, v.stdout + v.stderr


def _wrap_value(tree):
    if isinstance(tree, dict):
        return {k: _wrap_value(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_wrap_value(v) for v in tree]
    return {"value": tree}


def _as_dicts(tree):
    if isinstance(tree, dict):
        return {k: _as_dicts(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return {str(i): _as_dicts(v) for i, v in enumerate(tree)}
    return tree


def test_verify_rejects_lists_turned_into_dicts(unroll_bin, tmp_path):
    """An output whose lists were saved as dicts {'0': ..} has the right values under the
    right names but does not restore to the same structure: `unroll verify` reports it."""
    params = _params()
    items = _save(tmp_path / "in" / "checkpoints", params, True, True)
    bad = _unroll_ref(params)
    bad["decoder"]["layers_1"]["mlp"] = _as_dicts(bad["decoder"]["layers_1"]["mlp"])
    state = {"step": 0, "params": {"params": bad}, "opt_state": {}}
    with ocp.CheckpointManager(tmp_path / "bad", item_names=("items",), options=(
            ocp.CheckpointManagerOptions(create=True, enable_async_checkpointing=False))) as m:
        m.save(0, args=ocp.args.Composite(items=ocp.args.PyTreeSave(item=state)))
        m.wait_until_finished()
    v = subprocess.run([str(unroll_bin), "verify", str(items), str(tmp_path / "bad" / "0" /
                                                                   "items")],
                       capture_output=True, text=True, timeout=300)
    assert v.returncode == 6, v.stdout + v.stderr
    assert "layers_1/mlp/experts/0" in v.stdout + v.stderr, v.stdout + v.stderr
