"""Reference unroll (what MaxText's generate_param_only_checkpoint does with force_unroll=true)
and a checker that restores a checkpoint written by `unroll` with stock Orbax and compares it
with the reference, bit for bit.

Reference (docs/maxtext-checkpoints.md section 3): restore the input with Orbax, keep
the params, for every scanned leaf `jnp.take(x, i, axis=param_scan_axis)` for each layer of its
group, `astype(jnp.bfloat16)`, and lay the result out as

  pure_nnx=False (Linen decode layout): {step: 0, params: {params: <tree>}, opt_state: {}}
  pure_nnx=True  (NNX decode layout):   <tree> with every leaf wrapped as {value: leaf}

where <tree> has `decoder/layers_<i>/...` (or DeepSeek `dense_layers_<i>`, `moe_layers_<i>`,
the MoE index restarting at 0) instead of the scanned group. LoRA adapters (section 4): per
adapter {step: 0, params: {params: <tree>} (Linen) or <tree> (NNX), opt_state: {}}.

Trees here are "pure": nested dicts with str keys, lists, None, {}, Python ints and numpy
arrays (bfloat16 as ml_dtypes.bfloat16). `flatten` turns them into {path tuple: leaf}.
"""
from __future__ import annotations

import functools
import json
import pathlib

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import orbax.checkpoint as ocp

from maxtext_fixtures import flatten, unflatten

GROUPS_DEEPSEEK = ("dense_layers", "moe_layers")


class ReferenceError(ValueError):
    """The input does not fit the unroll rules (missing group, wrong layer count...)."""


# ------------------------------------------------------------------------------------------
# Restore


def _to_pure(tree):
    if isinstance(tree, dict):
        return {str(k): _to_pure(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return [_to_pure(v) for v in tree]
    return tree


def restore(items_dir, target=None):
    """Restore an Orbax item dir with stock Orbax (no target: shardings from `_sharding`)."""
    ckptr = ocp.PyTreeCheckpointer()
    if target is None:
        return _to_pure(ckptr.restore(pathlib.Path(items_dir)))
    restore_args = ocp.checkpoint_utils.construct_restore_args(target)
    return _to_pure(ckptr.restore(pathlib.Path(items_dir), args=ocp.args.PyTreeRestore(
        item=target, restore_args=restore_args)))


def _drop_rngs(tree):
    if not isinstance(tree, dict):
        return tree
    out = {}
    for k, v in tree.items():
        if k == "rngs":
            continue
        v = _drop_rngs(v)
        if isinstance(v, dict) and not v:
            continue
        out[k] = v
    return out


def _unwrap_value(tree):
    if isinstance(tree, dict):
        if set(tree) == {"value"} and not isinstance(tree["value"], dict):
            return tree["value"]
        return {k: _unwrap_value(v) for k, v in tree.items()}
    return tree


def params_of(tree: dict) -> tuple[str, dict]:
    """(input layout name, params tree) of a restored checkpoint, the way MaxText finds them.

    'linen': `params/params/...` (Linen and current NNX full states, Linen param-only);
    'nnx_legacy': `model/.../value` (pre-2026-05-27 NNX; RNG variables dropped);
    'nnx': NNX decode layout (every leaf `{value}`).
    """
    if isinstance(tree.get("params"), dict) and "params" in tree["params"]:
        return "linen", tree["params"]["params"]
    if isinstance(tree.get("model"), dict):
        return "nnx_legacy", _unwrap_value(_drop_rngs(tree["model"]))
    if "decoder" in tree:
        return "nnx", _unwrap_value(_drop_rngs(tree))
    raise ReferenceError(f"no params found; top-level keys {sorted(tree)}")


# ------------------------------------------------------------------------------------------
# Unroll


def layer_groups(decoder: dict, num_decoder_layers: int,
                 first_num_dense_layers: int = 0) -> list[tuple[str, int]]:
    """[(group name, length)] as generate_param_only_checkpoint chooses them."""
    if any(g in decoder for g in GROUPS_DEEPSEEK):
        groups = [("dense_layers", first_num_dense_layers),
                  ("moe_layers", num_decoder_layers - first_num_dense_layers)]
    else:
        groups = [("layers", num_decoder_layers)]
    for name, _ in groups:
        if name not in decoder:
            raise ReferenceError(f"Missing {name} in training_state")
    return groups


def _bf16(x):
    """astype(jnp.bfloat16) (XLA convert: round to nearest even, NaN -> quiet NaN, same sign)."""
    return np.asarray(jax.device_put(np.asarray(x), jax.devices()[0]).astype(jnp.bfloat16))


def _cast(tree):
    if isinstance(tree, dict):
        return {k: _cast(v) for k, v in tree.items()}
    if tree is None:
        return None
    return _bf16(tree)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _jit_take(x, i: int, axis: int):
    return jnp.take(x, i, axis=axis)


def _take(x, i: int, axis: int):
    """jnp.take(x, i, axis), jitted like MaxText's per-group slice, on one device.

    The slice is pure data movement; two XLA:CPU artifacts are avoided on purpose:
    * eager jnp.take (default mode "fill") goes through a select that XLA:CPU computes in float32
      for bf16, turning NaN payloads into the canonical NaN;
    * a jitted take across a *sharded* layer axis (mesh `stage` > 1) is partitioned into a
      masked all-reduce sum, which flushes subnormals to zero and turns -0 into +0.
    """
    return _jit_take(jax.device_put(np.asarray(x), jax.devices()[0]), i, axis)


def _take_tree(tree, i: int, axis: int, length: int, path: tuple):
    if isinstance(tree, dict):
        return {k: _take_tree(v, i, axis, length, path + (k,)) for k, v in tree.items()}
    if tree is None:
        return None
    if tree.ndim <= axis or tree.shape[axis] != length:
        raise ReferenceError(f"{'/'.join(path)}: shape {tuple(tree.shape)} has no layer axis "
                             f"{axis} of length {length}")
    return _bf16(_take(tree, i, axis))


def unroll_params(params: dict, *, num_decoder_layers: int, first_num_dense_layers: int = 0,
                  param_scan_axis: int = 1) -> dict:
    """The params tree with each layer group unrolled into `<group>_<i>` and every leaf bf16.

    Leaves are numpy arrays (ml_dtypes.bfloat16); None leaves (LoRA non-targets) stay None.
    """
    decoder = dict(params["decoder"])
    out = {k: _cast(v) for k, v in params.items() if k != "decoder"}
    groups = layer_groups(decoder, num_decoder_layers, first_num_dense_layers)
    stacked = {name: decoder.pop(name) for name, _ in groups}
    new_decoder = {k: _cast(v) for k, v in decoder.items()}
    for name, length in groups:
        for i in range(length):
            new_decoder[f"{name}_{i}"] = _take_tree(stacked[name], i, param_scan_axis, length,
                                                    ("decoder", name))
    out["decoder"] = new_decoder
    return out


def _wrap_value(tree):
    if isinstance(tree, dict):
        return {k: _wrap_value(v) for k, v in tree.items()}
    return {"value": tree}


def decode_layout(unrolled: dict, pure_nnx: bool) -> dict:
    """The decode checkpoint tree MaxText writes for these (already unrolled, bf16) params."""
    if pure_nnx:
        return _wrap_value(unrolled)
    return {"step": 0, "params": {"params": unrolled}, "opt_state": {}}


def reference_unroll(items_dir, *, num_decoder_layers: int, first_num_dense_layers: int = 0,
                     param_scan_axis: int = 1, pure_nnx: bool = True) -> dict:
    """Expected output tree of `unroll` (force_unroll=true) for the checkpoint at `items_dir`."""
    _, params = params_of(restore(items_dir))
    return decode_layout(unroll_params(params, num_decoder_layers=num_decoder_layers,
                                       first_num_dense_layers=first_num_dense_layers,
                                       param_scan_axis=param_scan_axis), pure_nnx)


def reference_unroll_lora(adapters_dir, *, num_decoder_layers: int,
                          param_scan_axis: int = 1, pure_nnx: bool = False) -> dict:
    """{lora_id: (expected tree of loras/<id>/0/items, adapter_config dict)}."""
    out = {}
    for sub in sorted(pathlib.Path(adapters_dir).iterdir()):
        if not sub.is_dir():
            continue
        cfg = json.loads((sub / "adapter_config.json").read_text())
        tree = restore(sub / "0" / "items")
        params = tree["params"]["params"]
        unrolled = unroll_params(params, num_decoder_layers=num_decoder_layers,
                                 param_scan_axis=param_scan_axis)
        wrapped = unrolled if pure_nnx else {"params": unrolled}
        out[sub.name] = ({"step": 0, "params": wrapped, "opt_state": {}}, cfg)
    return out


def reference_for(info, pure_nnx: bool | None = None):
    """Reference output for a maxtext_fixtures.FixtureInfo (pure_nnx defaults to its config).

    Returns the expected tree of `<checkpoint_dir>/0/items`, or for kind "lora" the dict of
    reference_unroll_lora (for check_unrolled_lora).
    """
    if pure_nnx is None:
        pure_nnx = info.config["pure_nnx"]
    if info.kind == "lora":
        return reference_unroll_lora(info.root, num_decoder_layers=info.num_decoder_layers,
                                     param_scan_axis=info.param_scan_axis, pure_nnx=pure_nnx)
    return reference_unroll(info.items, num_decoder_layers=info.num_decoder_layers,
                            first_num_dense_layers=info.first_num_dense_layers,
                            param_scan_axis=info.param_scan_axis, pure_nnx=pure_nnx)


# ------------------------------------------------------------------------------------------
# Checker


def _name(path: tuple) -> str:
    return "/".join(path) if path else "<root>"


def _bits(x) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype.itemsize not in (1, 2, 4, 8):
        raise AssertionError(f"unexpected dtype {a.dtype}")
    return np.ascontiguousarray(a.reshape(-1)).view(f"u{a.dtype.itemsize}")


def _is_array(x) -> bool:
    return isinstance(x, (np.ndarray, jax.Array, np.generic))


def compare_trees(actual, expected, what: str = "checkpoint") -> None:
    """Assert same key set and every leaf equal bit for bit (arrays: dtype, shape, bits)."""
    fa, fe = flatten(actual), flatten(expected)
    missing = sorted(set(fe) - set(fa))
    extra = sorted(set(fa) - set(fe))
    if missing or extra:
        raise AssertionError(
            f"{what}: key sets differ: {len(missing)} missing (first: "
            f"{[_name(p) for p in missing[:5]]}), {len(extra)} unexpected (first: "
            f"{[_name(p) for p in extra[:5]]})")
    for path in sorted(fe):
        e, a = fe[path], fa[path]
        where = f"{what}: leaf {_name(path)}"
        if e is None or isinstance(e, (dict, list)):
            if not (a is None and e is None or type(a) is type(e) and not a):
                raise AssertionError(f"{where}: expected {e!r}, got {type(a).__name__} {a!r}")
            continue
        if isinstance(e, (int, np.integer)) and not isinstance(e, np.ndarray):
            ok = isinstance(a, (int, np.integer)) or (
                _is_array(a) and np.ndim(a) == 0 and np.asarray(a).dtype.kind in "iu")
            if not ok or isinstance(a, bool):
                raise AssertionError(f"{where}: expected integer {e}, got {type(a).__name__} {a!r}")
            if int(a) != int(e):
                raise AssertionError(f"{where}: expected {int(e)}, got {int(a)}")
            continue
        if not _is_array(a):
            raise AssertionError(f"{where}: expected an array, got {type(a).__name__} {a!r}")
        if jnp.issubdtype(getattr(a, "dtype", np.float32), jax.dtypes.prng_key):
            a = jax.random.key_data(a)
        if jnp.issubdtype(getattr(e, "dtype", np.float32), jax.dtypes.prng_key):
            e = jax.random.key_data(e)
        an, en = np.asarray(a), np.asarray(e)
        if an.dtype != en.dtype:
            raise AssertionError(f"{where}: dtype {an.dtype}, expected {en.dtype}")
        if an.shape != en.shape:
            raise AssertionError(f"{where}: shape {an.shape}, expected {en.shape}")
        ba, be = _bits(an), _bits(en)
        if not np.array_equal(ba, be):
            i = int(np.flatnonzero(ba.reshape(-1) != be.reshape(-1))[0])
            idx = np.unravel_index(i, en.shape) if en.ndim else ()
            n = int(np.count_nonzero(ba.reshape(-1) != be.reshape(-1)))
            raise AssertionError(
                f"{where}: {n} of {en.size} elements differ; first at index {tuple(idx)}: "
                f"got {an.reshape(-1)[i]!r} (0x{int(ba.reshape(-1)[i]):x}), expected "
                f"{en.reshape(-1)[i]!r} (0x{int(be.reshape(-1)[i]):x})")


def target_of(expected):
    """An Orbax restore target with the expected tree's structure, shapes and dtypes."""
    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])

    def leaf(x):
        if isinstance(x, dict):
            return {k: leaf(v) for k, v in x.items()}
        if isinstance(x, list):
            return [leaf(v) for v in x]
        if x is None or isinstance(x, int):
            return x
        x = np.asarray(x)
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)

    return leaf(expected)


def check_unrolled(items_dir, expected: dict, *, via_manager: bool = True) -> None:
    """Restore `items_dir` with stock Orbax and assert it equals `expected` bit for bit.

    Restores three ways: with no target (structure and shardings from the checkpoint's own
    metadata), with a target built from the expected shapes/dtypes, and (via_manager) through a
    CheckpointManager on `<items_dir>/../..` at step `<items_dir>/..` (the step directory must
    be a finalized step Orbax lists). Raises AssertionError naming the first mismatching leaf.
    """
    items_dir = pathlib.Path(items_dir)
    if not (items_dir / "_METADATA").is_file():
        raise AssertionError(f"{items_dir}: no _METADATA (not an Orbax item dir)")
    compare_trees(restore(items_dir), expected, f"{items_dir} (no target)")
    compare_trees(restore(items_dir, target_of(expected)), expected, f"{items_dir} (target)")
    if via_manager:
        root, step = items_dir.parent.parent, int(items_dir.parent.name)
        with ocp.CheckpointManager(root, item_names=("items",), item_handlers={
                "items": ocp.PyTreeCheckpointHandler()}) as mngr:
            steps = mngr.all_steps()
            if step not in steps:
                raise AssertionError(f"{root}: CheckpointManager lists steps {steps}, not {step}")
            got = mngr.restore(step, args=ocp.args.Composite(items=ocp.args.PyTreeRestore()))
        compare_trees(_to_pure(got["items"]), expected, f"{items_dir} (CheckpointManager)")


def check_unrolled_lora(checkpoint_dir, expected_lora: dict) -> None:
    """Check `<checkpoint_dir>/loras/<id>/{0/items, adapter_config.json}` for every adapter."""
    loras = pathlib.Path(checkpoint_dir) / "loras"
    found = sorted(p.name for p in loras.iterdir()) if loras.is_dir() else []
    if found != sorted(expected_lora):
        raise AssertionError(f"{loras}: adapters {found}, expected {sorted(expected_lora)}")
    for lora_id, (tree, cfg) in expected_lora.items():
        check_unrolled(loras / lora_id / "0" / "items", tree)
        got = json.loads((loras / lora_id / "adapter_config.json").read_text())
        if got != cfg:
            raise AssertionError(f"{lora_id}/adapter_config.json: {got}, expected {cfg}")


def numpy_bf16(x) -> np.ndarray:
    """Round-to-nearest-even float -> bfloat16 in numpy (ml_dtypes), for independent checks.

    NaN becomes the quiet NaN with the same sign (0x7fc0 / 0xffc0), as XLA's convert does;
    bfloat16 input is returned unchanged (every bit kept).
    """
    a = np.asarray(x)
    if a.dtype == ml_dtypes.bfloat16:
        return a.copy()
    with np.errstate(invalid="ignore"):
        return a.astype(ml_dtypes.bfloat16)


__all__ = [
    "ReferenceError", "restore", "params_of", "layer_groups", "unroll_params", "decode_layout",
    "reference_unroll", "reference_unroll_lora", "reference_for", "compare_trees", "target_of",
    "check_unrolled", "check_unrolled_lora", "numpy_bf16", "flatten", "unflatten",
]
