"""MaxText-shaped Orbax checkpoints written by the real Orbax/TensorStore/JAX stack.

Every fixture is saved through `orbax.checkpoint.CheckpointManager` with the single item `items`
(as MaxText's `create_orbax_checkpoint_manager` does), from `jax.Array`s sharded over a CPU mesh
of 8 devices with MaxText-like `NamedSharding` specs (logical axes mapped to mesh axes the way
flax's `logical_to_mesh_axes` does with MaxText's rules), so chunk grids are non-trivial and
`_sharding` holds real specs. The tree layouts follow docs/maxtext-checkpoints.md
(sections 1 to 5) with tiny dimensions.

jax must see 8 devices: set `XLA_FLAGS=--xla_force_host_platform_device_count=8` before jax is
imported (tests/interop/conftest.py does it).

Public API:
  KINDS, LAYOUTS, DTYPES                 what can be generated
  describe(kind, layout, dtype) -> FixtureInfo         the intended checkpoint, nothing written
  make_checkpoint(kind, layout, dtype, cache_dir) -> FixtureInfo   generated (or cached) on disk
  flatten(tree) -> {path tuple: leaf}    the flattening shared with reference.py
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import shutil
import tempfile
import zlib
from typing import Any

import jax
import ml_dtypes
import numpy as np
import optax
import orbax.checkpoint as ocp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

KINDS = ("linen", "nnx", "nnx_legacy", "params", "deepseek", "lora")
# name -> (use_ocdbt, use_zarr3); the first one is MaxText's default.
LAYOUTS = {
    "ocdbt-zarr3": (True, True),
    "ocdbt-zarr2": (True, False),
    "plain-zarr3": (False, True),
    "plain-zarr2": (False, False),
}
DEFAULT_LAYOUT = "ocdbt-zarr3"
DTYPES = ("float32", "bfloat16")

# MaxText save settings (checkpointing.save_checkpoint with config=None): 2 GiB chunk target.
MAXTEXT_CHUNK_BYTES = 2 * 1024**3
# The param-only fixture is saved with a tiny chunk target so that chunks are smaller than the
# per-device shards (what Orbax does to huge leaves), including along the layer axis.
SMALL_CHUNK_BYTES = 64

MESH_AXES = ("data", "stage", "fsdp", "fsdp_transpose", "tensor", "expert")
DEFAULT_MESH = (1, 1, 4, 1, 2, 1)
STAGED_MESH = (1, 2, 2, 1, 2, 1)  # layer axis split over `stage`

# Subset of MaxText's base.yml logical_axis_rules (order matters, like flax).
LOGICAL_RULES = (
    ("vocab", ("tensor",)),
    ("embed_vocab", ("fsdp", "fsdp_transpose", "expert")),
    ("embed_vocab", ("fsdp", "expert")),
    ("embed", ("fsdp", "fsdp_transpose", "expert")),
    ("embed", ("fsdp", "expert")),
    ("mlp", ("fsdp_transpose", "tensor")),
    ("heads", ("tensor",)),
    ("q_heads", ("tensor",)),
    ("kv_heads", ("tensor",)),
    ("kv", ()),
    ("kv_head_dim", ()),
    ("q_lora", ()),
    ("kv_lora", ()),
    ("norm", ("tensor",)),
    ("layers", ("stage",)),
    ("dense_layers", ()),
    ("moe_layers", ()),
    ("exp", ("expert",)),
)

# Special values placed in some leaves (raw bit patterns), per storage dtype.
SPECIAL_BITS = {
    "float32": np.array(
        [
            0x7FC00000, 0xFFC00000,  # quiet NaN, negative quiet NaN
            0x7F800001, 0x7FC00001, 0xFF812345,  # NaNs with payloads (signalling and quiet)
            0x7F800000, 0xFF800000,  # +Inf, -Inf
            0x3F808000,  # 1 + 2^-8: halfway, rounds to even (down) in bf16
            0x3F818000,  # 1 + 3*2^-8: halfway, rounds to even (up) in bf16
            0x3F80C000,  # above halfway: rounds up
            0x00000001, 0x80000001, 0x007FFFFF, 0x00400000,  # f32 subnormals
            0x7F7FFFFF, 0x7F7F8000,  # overflow to Inf in bf16
            0x80000000,  # -0
        ],
        dtype=np.uint32,
    ),
    "bfloat16": np.array(
        [0x7FC0, 0xFFC0, 0x7F81, 0xFF85, 0x7F80, 0xFF80, 0x0001, 0x8001, 0x7F7F, 0x8000],
        dtype=np.uint16,
    ),
}
# leaf names (last two path components joined) that get the special values
SPECIAL_LEAVES = (
    "query/kernel",
    "token_embedder/embedding",
    "MoeBlock_0/wi_0",
    "query/lora_b.kernel",
)


def is_special_leaf(path: tuple) -> bool:
    """Whether the generator puts SPECIAL_BITS into the leaf at `path`."""
    if path and path[-1] == "value":
        path = path[:-1]
    return "/".join(path[-2:]) in SPECIAL_LEAVES


@dataclasses.dataclass(frozen=True)
class Dims:
    """Tiny model dimensions; unsharded ones are odd (not multiples of any chunking)."""

    vocab: int = 10  # sharded over tensor=2 -> 5 per shard
    emb: int = 8  # sharded over fsdp=4
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 3
    mlp: int = 6
    layers: int = 3
    # DeepSeek
    dense_layers: int = 1
    q_lora: int = 6  # q_norm is sharded over tensor
    kv_lora: int = 4
    rope_dim: int = 1
    nope_dim: int = 3
    v_head_dim: int = 3
    experts: int = 3
    moe_mlp: int = 6


DIMS = Dims()
PARAMS_DIMS = dataclasses.replace(DIMS, layers=4)  # staged mesh needs an even layer count
DEEPSEEK_DIMS = dataclasses.replace(DIMS, layers=4, dense_layers=1)


@dataclasses.dataclass
class AdapterInfo:
    """One LoRA adapter of the `lora` kind."""

    lora_id: str
    root: pathlib.Path  # CheckpointManager root: <adapters>/<id>
    items: pathlib.Path  # <adapters>/<id>/0/items
    config: dict  # adapter_config.json
    tree: dict  # intended tree (pure: dicts, lists, numpy arrays, None, ints)
    specs: dict  # path tuple -> PartitionSpec of every array leaf


@dataclasses.dataclass
class FixtureInfo:
    """What a fixture is meant to hold, and the MaxText config an unroll run on it needs."""

    kind: str
    layout: str
    dtype: str
    use_ocdbt: bool
    use_zarr3: bool
    root: pathlib.Path | None  # CheckpointManager root (<dir>/checkpoints); lora: adapters dir
    items: pathlib.Path | None  # item dir <root>/<step>/items; None for lora
    step: int  # step directory number
    config: dict  # MaxText config keys for an unroll run on this input
    tree: dict | None  # intended tree (pure), None for lora
    specs: dict  # path tuple -> PartitionSpec of every array leaf
    mesh_axes: tuple
    mesh_shape: tuple
    scan_axes: dict  # path tuple -> layer axis (int) or None, for every array leaf
    chunk_byte_size: int
    adapters: dict = dataclasses.field(default_factory=dict)  # lora: id -> AdapterInfo

    @property
    def num_decoder_layers(self) -> int:
        return self.config["num_decoder_layers"]

    @property
    def first_num_dense_layers(self) -> int:
        return self.config.get("first_num_dense_layers", 0)

    @property
    def param_scan_axis(self) -> int:
        return self.config["param_scan_axis"]

    @property
    def input_key(self) -> str:
        for key in ("load_full_state_path", "load_parameters_path", "lora_input_adapters_path"):
            if key in self.config:
                return key
        raise KeyError("no input key")


# ------------------------------------------------------------------------------------------
# Trees


def flatten(tree: Any, prefix: tuple = ()) -> dict:
    """{path tuple of str: leaf}. Empty containers and None are leaves; namedtuples by field."""
    out = {}
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        tree = {f: getattr(tree, f) for f in tree._fields} if tree._fields else None
    if isinstance(tree, dict):
        if not tree:
            out[prefix] = {}
        for k, v in tree.items():
            out.update(flatten(v, prefix + (str(k),)))
    elif isinstance(tree, (list, tuple)):
        if not tree:
            out[prefix] = []
        for i, v in enumerate(tree):
            out.update(flatten(v, prefix + (str(i),)))
    else:
        out[prefix] = tree
    return out


def _set(tree: dict, path: tuple, value) -> None:
    for k in path[:-1]:
        tree = tree.setdefault(k, {})
    tree[path[-1]] = value


def unflatten(flat: dict) -> dict:
    tree: dict = {}
    for path, v in flat.items():
        _set(tree, path, v)
    return tree


def logical_to_spec(logical: tuple) -> P:
    used: set = set()
    out = []
    for name in logical:
        entry = None
        for rule_name, axes in LOGICAL_RULES:
            if rule_name == name and not used.intersection(axes):
                used.update(axes)
                entry = None if not axes else axes[0] if len(axes) == 1 else tuple(axes)
                break
        out.append(entry)
    return P(*out)


def _np_dtype(dtype: str):
    return np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)


def _seed(kind: str, dtype: str, path: tuple) -> int:
    return zlib.crc32(("/".join((kind, dtype) + path)).encode())


def _values(kind: str, dtype: str, path: tuple, shape: tuple, positive: bool = False):
    rng = np.random.default_rng(_seed(kind, dtype, path))
    x = rng.standard_normal(shape).astype(np.float32) * np.float32(0.5)
    if positive:
        x = np.abs(x)
    arr = x.astype(_np_dtype(dtype))
    if is_special_leaf(path):
        bits = SPECIAL_BITS[dtype]
        flat = arr.reshape(-1).view(np.uint16 if dtype == "bfloat16" else np.uint32)
        pos = rng.choice(flat.size, size=min(flat.size, 2 * bits.size), replace=False)
        flat[pos] = np.resize(bits, pos.size)
    return arr


# Leaf tables: (path under the params root, logical axes, shape, layer axis or None).


def _llama_params(d: Dims) -> list:
    E, L, H, K, D, M, V = d.emb, d.layers, d.heads, d.kv_heads, d.head_dim, d.mlp, d.vocab
    lay = ("decoder", "layers")
    return [
        (("token_embedder", "embedding"), ("vocab", "embed_vocab"), (V, E), None),
        (("decoder", "decoder_norm", "scale"), ("norm",), (E,), None),
        (("decoder", "logits_dense", "kernel"), ("embed_vocab", "vocab"), (E, V), None),
        (lay + ("pre_self_attention_layer_norm", "scale"), ("norm", "layers"), (E, L), 1),
        (lay + ("post_self_attention_layer_norm", "scale"), ("norm", "layers"), (E, L), 1),
        (lay + ("self_attention", "query", "kernel"), ("embed", "layers", "q_heads", "kv"),
         (E, L, H, D), 1),
        (lay + ("self_attention", "key", "kernel"),
         ("embed", "layers", "kv_heads", "kv_head_dim"), (E, L, K, D), 1),
        (lay + ("self_attention", "value", "kernel"),
         ("embed", "layers", "kv_heads", "kv_head_dim"), (E, L, K, D), 1),
        (lay + ("self_attention", "out", "kernel"), ("heads", "layers", "kv", "embed"),
         (H, L, D, E), 1),
        (lay + ("mlp", "wi_0", "kernel"), ("embed", "layers", "mlp"), (E, L, M), 1),
        (lay + ("mlp", "wi_1", "kernel"), ("embed", "layers", "mlp"), (E, L, M), 1),
        (lay + ("mlp", "wo", "kernel"), ("mlp", "layers", "embed"), (M, L, E), 1),
    ]


def _deepseek_params(d: Dims) -> list:
    E, H, V = d.emb, d.heads, d.vocab
    qk = d.nope_dim + d.rope_dim
    out = _llama_params(d)[:3]
    for group, n in (("dense_layers", d.dense_layers), ("moe_layers", d.layers - d.dense_layers)):
        g = ("decoder", group)
        out += [
            (g + ("pre_self_attention_layer_norm", "scale"), ("norm", group), (E, n), 1),
            (g + ("post_self_attention_layer_norm", "scale"), ("norm", group), (E, n), 1),
            (g + ("self_attention", "wq_a", "kernel"), ("embed", group, "q_lora"),
             (E, n, d.q_lora), 1),
            (g + ("self_attention", "q_norm", "scale"), ("norm", group), (d.q_lora, n), 1),
            (g + ("self_attention", "wq_b", "kernel"), ("q_lora", group, "q_heads", "kv"),
             (d.q_lora, n, H, qk), 1),
            (g + ("self_attention", "wkv_a", "kernel"), ("embed", group, "kv_lora"),
             (E, n, d.kv_lora + d.rope_dim), 1),
            (g + ("self_attention", "kv_norm", "scale"), ("norm", group), (d.kv_lora, n), 1),
            (g + ("self_attention", "wkv_b", "kernel"), ("kv_lora", group, "q_heads", "kv"),
             (d.kv_lora, n, H, d.nope_dim + d.v_head_dim), 1),
            (g + ("self_attention", "out", "kernel"), ("heads", group, "kv", "embed"),
             (H, n, d.v_head_dim, E), 1),
        ]
        if group == "dense_layers":
            out += [
                (g + ("mlp", "wi_0", "kernel"), ("embed", group, "mlp"), (E, n, d.mlp), 1),
                (g + ("mlp", "wi_1", "kernel"), ("embed", group, "mlp"), (E, n, d.mlp), 1),
                (g + ("mlp", "wo", "kernel"), ("mlp", group, "embed"), (d.mlp, n, E), 1),
            ]
        else:
            X, Mm = d.experts, d.moe_mlp
            moe = g + ("DeepSeekMoeBlock_0", "MoeBlock_0")
            sh = g + ("DeepSeekMoeBlock_0", "shared_experts")
            out += [
                (moe + ("gate", "kernel"), ("embed", group, "exp"), (E, n, X), 1),
                (moe + ("gate", "bias"), ("exp", group), (X, n), 1),
                (moe + ("wi_0",), ("exp", group, "embed", "mlp"), (X, n, E, Mm), 1),
                (moe + ("wi_1",), ("exp", group, "embed", "mlp"), (X, n, E, Mm), 1),
                (moe + ("wo",), ("exp", group, "mlp", "embed"), (X, n, Mm, E), 1),
                (sh + ("wi_0", "kernel"), ("embed", group, "mlp"), (E, n, d.mlp), 1),
                (sh + ("wi_1", "kernel"), ("embed", group, "mlp"), (E, n, d.mlp), 1),
                (sh + ("wo", "kernel"), ("mlp", group, "embed"), (d.mlp, n, E), 1),
            ]
    return out


LORA_ADAPTERS = (
    ("adapter_qv", 2, ["q_proj", "v_proj"]),
    ("adapter_all", 3, ["q_proj", "k_proj", "v_proj", "o_proj"]),
)
_LORA_MODULES = {"q_proj": "query", "k_proj": "key", "v_proj": "value", "o_proj": "out"}


def _lora_params(d: Dims, r: int, targets: list) -> list:
    """(path, spec-axes, shape, layer axis) per leaf; non-target leaves have shape None."""
    mods = {_LORA_MODULES[t] for t in targets}
    out = []
    for path, logical, shape, axis in _llama_params(d):
        mod = path[-2]
        if path[-3:-2] == ("self_attention",) and mod in mods:
            base = path[:-1]
            if mod == "out":
                a_shape, a_log = shape[:-1] + (r,), logical[:-1] + (None,)
                b_shape, b_log = (r, shape[1], shape[-1]), (None, logical[1], logical[-1])
            else:
                a_shape, a_log = shape[:-2] + (r,), logical[:-2] + (None,)
                b_shape, b_log = (r,) + shape[1:], (None,) + logical[1:]
            out.append((base + ("lora_a.kernel",), a_log, a_shape, 1))
            out.append((base + ("lora_b.kernel",), b_log, b_shape, 1))
        else:
            out.append((path, None, None, None))
    return out


def _check_divisible(shape: tuple, spec: P, mesh_sizes: dict, path: tuple) -> None:
    for dim, entry in zip(shape, tuple(spec) + (None,) * (len(shape) - len(spec))):
        axes = () if entry is None else (entry,) if isinstance(entry, str) else entry
        n = int(np.prod([mesh_sizes[a] for a in axes])) if axes else 1
        if dim % n:
            raise ValueError(f"{'/'.join(path)}: dim {dim} not divisible by {n} ({spec})")


# ------------------------------------------------------------------------------------------
# Intended trees


def _key_array(seed: int, shape: tuple):
    keys = jax.random.split(jax.random.key(seed), int(np.prod(shape)) or 1)
    return keys.reshape(shape) if shape else keys[0]


class _Builder:
    def __init__(self, kind: str, dtype: str, mesh_shape: tuple):
        self.kind, self.dtype = kind, dtype
        self.mesh_sizes = dict(zip(MESH_AXES, mesh_shape))
        self.specs: dict = {}
        self.scan_axes: dict = {}

    def array(self, path: tuple, logical, shape, axis, *, positive=False, dtype=None,
              value_path=None, spec=None):
        spec = spec if spec is not None else logical_to_spec(logical)
        _check_divisible(shape, spec, self.mesh_sizes, path)
        self.specs[path] = spec
        self.scan_axes[path] = axis
        return _values(self.kind, dtype or self.dtype, value_path or path, shape, positive)

    def scalar(self, path: tuple, value, np_dtype):
        self.specs[path] = P()
        self.scan_axes[path] = None
        return np.asarray(value, dtype=np_dtype)

    def rng(self, path: tuple, shape: tuple, counter: bool):
        spec = P("stage") if shape else P()
        self.specs[path] = spec
        self.scan_axes[path] = 0 if shape else None
        if counter:
            return np.array(np.arange(int(np.prod(shape)), dtype=np.uint32).reshape(shape) + 7,
                            dtype=np.uint32)
        return _key_array(_seed(self.kind, self.dtype, path), shape)


def _linen_params(b: _Builder, table: list, prefix: tuple) -> dict:
    tree: dict = {}
    for path, logical, shape, axis in table:
        _set(tree, path, b.array(prefix + path, logical, shape, axis))
    return tree


def _adam_state(b: _Builder, table: list, params_prefix: tuple, count: int):
    """optax.adamw(schedule) state for params {'params': ...}: (Adam, Empty, Schedule)."""
    tx = optax.adamw(optax.linear_schedule(1e-3, 0.0, 100))
    mu: dict = {}
    nu: dict = {}
    for path, logical, shape, axis in table:
        _set(mu, path, b.array(("opt_state", "0", "mu") + params_prefix + path, logical, shape,
                               axis))
        _set(nu, path, b.array(("opt_state", "0", "nu") + params_prefix + path, logical, shape,
                               axis, positive=True))
    wrap = lambda t: unflatten({params_prefix + p: v for p, v in flatten(t).items()})  # noqa: E731
    adam = optax.ScaleByAdamState(count=b.scalar(("opt_state", "0", "count"), count, np.int32),
                                  mu=wrap(mu), nu=wrap(nu))
    sched = optax.ScaleByScheduleState(count=b.scalar(("opt_state", "2", "count"), count,
                                                      np.int32))
    state = (adam, optax.EmptyState(), sched)
    # same structure as what tx.init would give
    ref = jax.tree_util.tree_structure(tx.init(wrap(mu)))
    assert jax.tree_util.tree_structure(state) == ref, (jax.tree_util.tree_structure(state), ref)
    return state


def _nnx_aux(b: _Builder, d: Dims) -> dict:
    L = d.layers
    aux: dict = {}
    base = ("nnx_aux", "model", "decoder")
    for stream in ("params", "dropout"):
        for name, counter in (("key", False), ("count", True)):
            p = ("rngs", stream, name)
            _set(aux, ("decoder",) + p, b.rng(base + p, (), counter))
            for mod in (("layers", "self_attention"), ("layers", "mlp", "dropout")):
                q = mod + p
                _set(aux, ("decoder",) + q, b.rng(base + q, (L,), counter))
    return {"model": aux}


def _legacy_nnx(b: _Builder, d: Dims, count: int) -> dict:
    """Raw nnx.State of TrainStateNNX before 2026-05-27: model/... and optimizer/..., {value}."""
    table = _llama_params(d)
    model: dict = {}
    mu: dict = {}
    nu: dict = {}
    for path, logical, shape, axis in table:
        _set(model, path + ("value",), b.array(("model",) + path + ("value",), logical, shape,
                                               axis, value_path=("params", "params") + path))
        _set(mu, path + ("value",),
             b.array(("optimizer", "opt_state", "0", "mu") + path + ("value",), logical, shape,
                     axis))
        _set(nu, path + ("value",),
             b.array(("optimizer", "opt_state", "0", "nu") + path + ("value",), logical, shape,
                     axis, positive=True))
    L = d.layers
    for stream in ("params", "dropout"):
        for name, counter in (("key", False), ("count", True)):
            p = ("rngs", stream, name, "value")
            _set(model, ("decoder",) + p, b.rng(("model", "decoder") + p, (), counter))
            q = ("decoder", "layers", "self_attention") + p
            _set(model, q, b.rng(("model",) + q, (L,), counter))
    opt = ("optimizer",)
    optimizer = {
        "step": {"value": b.scalar(opt + ("step", "value"), count, np.uint32)},
        "opt_state": {
            "0": {
                "count": {"value": b.scalar(opt + ("opt_state", "0", "count", "value"), count,
                                            np.int32)},
                "mu": mu,
                "nu": nu,
            },
            "2": {"count": {"value": b.scalar(opt + ("opt_state", "2", "count", "value"), count,
                                              np.int32)}},
        },
    }
    return {"model": model, "optimizer": optimizer}


def _build(kind: str, dtype: str):
    """(state to save, pure intended tree, builder, dims, mesh shape, config, step dir)."""
    full_step = 9
    mesh_shape = STAGED_MESH if kind == "params" else DEFAULT_MESH
    b = _Builder(kind, dtype, mesh_shape)
    d = {"params": PARAMS_DIMS, "deepseek": DEEPSEEK_DIMS}.get(kind, DIMS)
    if kind in ("linen", "nnx", "deepseek"):
        table = _deepseek_params(d) if kind == "deepseek" else _llama_params(d)
        params = {"params": _linen_params(b, table, ("params", "params"))}
        state = {
            "step": b.scalar(("step",), full_step + 1, np.int32),
            "params": params,
            "opt_state": _adam_state(b, table, ("params",), full_step + 1),
        }
        if kind == "nnx":
            state["nnx_aux"] = _nnx_aux(b, d)
        step = full_step
    elif kind == "nnx_legacy":
        state = _legacy_nnx(b, d, full_step + 1)
        step = full_step
    elif kind == "params":
        # converter / decode-state layout: step 0 (Python int), params/params, opt_state {}
        state = {"step": 0, "params": {"params": _linen_params(b, _llama_params(d),
                                                               ("params", "params"))},
                 "opt_state": {}}
        step = 0
    else:
        raise ValueError(kind)
    config = {
        "load_parameters_path" if kind == "params" else "load_full_state_path": None,
        "num_decoder_layers": d.layers,
        "first_num_dense_layers": d.dense_layers if kind == "deepseek" else 0,
        "param_scan_axis": 1,
        "scan_layers": True,
        "force_unroll": True,
        "pure_nnx": kind in ("nnx", "nnx_legacy"),
        "decoder_block": "deepseek" if kind == "deepseek" else "llama2",
        "base_emb_dim": d.emb,
        "base_num_query_heads": d.heads,
        "base_num_kv_heads": d.kv_heads,
        "head_dim": d.head_dim,
        "base_mlp_dim": d.mlp,
        "vocab_size": d.vocab,
        "weight_dtype": dtype,
    }
    if kind == "deepseek":
        config.update(num_experts=d.experts, base_moe_mlp_dim=d.moe_mlp, q_lora_rank=d.q_lora,
                      kv_lora_rank=d.kv_lora, qk_nope_head_dim=d.nope_dim,
                      qk_rope_head_dim=d.rope_dim, v_head_dim=d.v_head_dim)
    return state, b, mesh_shape, config, step


def _pure(tree):
    """The tree as Orbax restores it without a target (namedtuples -> dicts, tuples -> lists)."""
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        return {f: _pure(getattr(tree, f)) for f in tree._fields} if tree._fields else None
    if isinstance(tree, dict):
        return {str(k): _pure(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return [_pure(v) for v in tree]
    return tree


def _lora_tree(kind: str, dtype: str, lora_id: str, r: int, targets: list):
    b = _Builder(kind + "/" + lora_id, dtype, DEFAULT_MESH)
    params: dict = {}
    for path, logical, shape, axis in _lora_params(DIMS, r, targets):
        full = ("params", "params") + path
        _set(params, path, None if shape is None else b.array(full, logical, shape, axis))
    state = {"step": 0, "params": {"params": params}, "opt_state": {}}
    config = {"r": r, "target_modules": list(targets), "lora_alpha": 2 * r, "peft_type": "LORA",
              "base_model_name_or_path": "tiny-llama2", "task_type": "CAUSAL_LM"}
    return state, b, config


# ------------------------------------------------------------------------------------------
# Public API


def _source_hash() -> str:
    return hashlib.sha256(pathlib.Path(__file__).read_bytes()).hexdigest()[:12]


def _check_args(kind: str, layout: str, dtype: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; one of {KINDS}")
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; one of {tuple(LAYOUTS)}")
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; one of {DTYPES}")


def describe(kind: str, layout: str, dtype: str, base: pathlib.Path | None = None) -> FixtureInfo:
    """The intended fixture (values, specs, config), with paths under `base` (not written)."""
    _check_args(kind, layout, dtype)
    use_ocdbt, use_zarr3 = LAYOUTS[layout]
    base = pathlib.Path(base) if base is not None else None
    if kind == "lora":
        adapters = {}
        specs: dict = {}
        for lora_id, r, targets in LORA_ADAPTERS:
            state, b, cfg = _lora_tree(kind, dtype, lora_id, r, targets)
            root = base / "adapters" / lora_id if base else None
            adapters[lora_id] = AdapterInfo(lora_id, root, root / "0" / "items" if root else None,
                                            cfg, _pure(state), b.specs)
            specs.update({(lora_id,) + p: s for p, s in b.specs.items()})
        config = {"lora_input_adapters_path": str(base / "adapters") if base else None,
                  "num_decoder_layers": DIMS.layers, "first_num_dense_layers": 0,
                  "param_scan_axis": 1, "scan_layers": True, "force_unroll": True,
                  "pure_nnx": False, "decoder_block": "llama2", "weight_dtype": dtype}
        scan = {p: (1 if "lora" in p[-1] else None) for p in specs}
        return FixtureInfo(kind, layout, dtype, use_ocdbt, use_zarr3,
                           base / "adapters" if base else None, None, 0, config, None, specs,
                           MESH_AXES, DEFAULT_MESH, scan, MAXTEXT_CHUNK_BYTES, adapters)
    state, b, mesh_shape, config, step = _build(kind, dtype)
    root = base / "checkpoints" if base else None
    items = root / str(step) / "items" if root else None
    config[next(iter(config))] = str(items) if items else None
    chunk = SMALL_CHUNK_BYTES if kind == "params" else MAXTEXT_CHUNK_BYTES
    return FixtureInfo(kind, layout, dtype, use_ocdbt, use_zarr3, root, items, step, config,
                       _pure(state), b.specs, MESH_AXES, mesh_shape, b.scan_axes, chunk)


def _mesh(shape: tuple) -> Mesh:
    devices = jax.devices()
    n = int(np.prod(shape))
    if len(devices) < n:
        raise RuntimeError(f"need {n} jax devices, have {len(devices)}: set XLA_FLAGS="
                           "--xla_force_host_platform_device_count=8 before importing jax")
    return Mesh(np.array(devices[:n]).reshape(shape), MESH_AXES)


def _shard(tree, specs: dict, mesh: Mesh, prefix: tuple = ()):
    """Put every numpy/key leaf on the mesh with its spec; keep Python scalars and None."""
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        return type(tree)(*(_shard(getattr(tree, f), specs, mesh, prefix + (f,))
                            for f in tree._fields))
    if isinstance(tree, dict):
        return {k: _shard(v, specs, mesh, prefix + (str(k),)) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_shard(v, specs, mesh, prefix + (str(i),)) for i, v in enumerate(tree))
    if isinstance(tree, (np.ndarray, jax.Array)):
        return jax.device_put(tree, NamedSharding(mesh, specs[prefix]))
    return tree


def _save(root: pathlib.Path, step: int, state, specs: dict, mesh_shape: tuple,
          use_ocdbt: bool, use_zarr3: bool, chunk_bytes: int) -> None:
    """Save like MaxText's checkpointing.save_checkpoint (PyTreeSave, SaveArgs per leaf)."""
    sharded = _shard(state, specs, _mesh(mesh_shape))
    save_args = jax.tree.map(lambda _: ocp.SaveArgs(chunk_byte_size=chunk_bytes), sharded)
    handler = ocp.PyTreeCheckpointHandler(use_ocdbt=use_ocdbt, use_zarr3=use_zarr3)
    options = ocp.CheckpointManagerOptions(create=True, enable_async_checkpointing=False)
    with ocp.CheckpointManager(root, item_names=("items",), item_handlers={"items": handler},
                               options=options) as mngr:
        mngr.save(step, args=ocp.args.Composite(items=ocp.args.PyTreeSave(
            item=sharded, save_args=save_args,
            ocdbt_target_data_file_size=MAXTEXT_CHUNK_BYTES)))
        mngr.wait_until_finished()
    if not (root / str(step) / "items" / "_METADATA").is_file():
        raise RuntimeError(f"Orbax did not write {root}/{step}/items")


def write_checkpoint(kind: str, layout: str, dtype: str, base: pathlib.Path) -> FixtureInfo:
    """Generate the fixture under `base` (no cache). `base` must not exist yet."""
    info = describe(kind, layout, dtype, base)
    base.mkdir(parents=True)
    if kind == "lora":
        for lora_id, r, targets in LORA_ADAPTERS:
            state, b, cfg = _lora_tree(kind, dtype, lora_id, r, targets)
            a = info.adapters[lora_id]
            _save(a.root, 0, state, b.specs, DEFAULT_MESH, info.use_ocdbt, info.use_zarr3,
                  MAXTEXT_CHUNK_BYTES)
            (a.root / "adapter_config.json").write_text(json.dumps(cfg, indent=4))
    else:
        state, b, mesh_shape, _, step = _build(kind, dtype)
        _save(info.root, step, state, b.specs, mesh_shape, info.use_ocdbt, info.use_zarr3,
              info.chunk_byte_size)
    (base / "fixture.json").write_text(json.dumps(
        {"kind": kind, "layout": layout, "dtype": dtype, "generator": _source_hash(),
         "config": info.config}, indent=2))
    return info


def cache_key(kind: str, layout: str, dtype: str) -> str:
    return f"{kind}-{layout}-{dtype}-{_source_hash()}"


def make_checkpoint(kind: str, layout: str, dtype: str, cache_dir) -> FixtureInfo:
    """Generate (or reuse from `cache_dir`) a fixture; returns its FixtureInfo.

    `.items` is the item dir (`<dir>/checkpoints/<step>/items`); for `lora`, `.root` is the
    adapters directory. The cache entry is keyed by kind/layout/dtype and a hash of this file,
    written into a temporary directory and renamed into place, so an interrupted run never
    leaves a broken entry.
    """
    _check_args(kind, layout, dtype)
    cache_dir = pathlib.Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    final = cache_dir / cache_key(kind, layout, dtype)
    if (final / "fixture.json").is_file():
        return describe(kind, layout, dtype, final)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=cache_dir))
    try:
        write_checkpoint(kind, layout, dtype, tmp / "x")
        try:
            os.rename(tmp / "x", final)
        except OSError:
            if not (final / "fixture.json").is_file():  # lost a race to a broken entry?
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return describe(kind, layout, dtype, final)
