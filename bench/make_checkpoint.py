"""Generate a MaxText-shaped, scanned Linen full-state training checkpoint for the benchmark.

What it writes (real Orbax, the way MaxText's checkpointing.save_checkpoint does):

  <out>/checkpoints/<step>/items        the Orbax item (OCDBT + zarr3, Orbax defaults)
  <out>/bench_checkpoint.json           the dimensions, layer count, sizes (read by the
                                        reference pipeline, run.sh and report.py)

Tree: `step`, `params/params/{token_embedder/embedding, decoder/{decoder_norm/scale,
logits_dense/kernel, layers/{pre,post}_self_attention_layer_norm/scale,
layers/self_attention/{query,key,value,out}/kernel, layers/mlp/{wi_0,wi_1,wo}/kernel}}}` with the
layer axis at 1 (docs/maxtext-checkpoints.md section 1.2), fp32, plus the optax adamw
state `opt_state = (ScaleByAdamState(count, mu, nu), EmptyState(), ScaleByScheduleState(count))`
with mu and nu mirroring params (full state = 3x params on disk).

The arrays are jax.Arrays sharded over 8 CPU devices, mesh data=1 x stage=1 x fsdp=4 x
fsdp_transpose=1 x tensor=2 x expert=1, with the NamedSharding specs flax's logical_to_mesh_axes
gives under MaxText's logical_axis_rules (the layer axis on `stage`). Saved through
ocp.CheckpointManager (item `items`) with SaveArgs(chunk_byte_size=2 GiB) on every leaf and
ocdbt_target_data_file_size=2 GiB, so a zarr chunk is one device shard.

Written leaf by leaf, slice by slice: a leaf is a LazyLeaf (shape, sharding, seed), and its
type handler (LazyArrayHandler, an orbax ArrayHandler) asks Orbax's own functions for what a
jax.Array of that shape and sharding gets (replica slices, TensorStore write spec, sharding
file entry, array metadata), then makes each replica slice's values (numpy PCG64 seeded by
seed, leaf and slice origin) just before TensorStore writes it and drops them after, with at
most BENCH_WINDOW_MIB (default 512) MiB of slices in flight. So the generator's memory depends
on the largest device shard, not on the model (3.0 GiB peak RSS for the 10 GiB / 30 GiB-state
checkpoint), and the bytes on disk are those Orbax writes for the same values as jax.Arrays
(--eager does that; tests/interop/test_bench_checkpoint.py compares the two key by key). mu
and nu hold the same values as params (same seed and leaf; Orbax still writes three copies);
--distinct-opt-state gives them their own.

Subcommands:
  make_checkpoint.py make --params-gib G --out DIR [--seed S] [--distinct-opt-state]
                          [--layers L]   (small dimensions, L layers: many small arrays)
                          [--shape deepseek]  (DeepSeek-V3's layout: latent attention, a
                                         dense layer, MoE layers whose experts are on their own
                                         axis; unroll.yml beside it has the model's keys)
                          [--shape qwen3.5]  (Qwen3.5's: blocks of 3 linear-attention layers
                                         and a full-attention one, the fused projections the
                                         export cuts into pieces, stacked experts)
                          [--eager]      (whole jax.Arrays through Orbax's own handler)
  make_checkpoint.py chunks --items ITEMS --out LIST.tsv [--prefix params.params.]
      the chunk list for bench/floor.c, from tensorstore.ocdbt.dump (see README.md)
"""
from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import shutil
import sys
import time

_DEVICES_FLAG = "--xla_force_host_platform_device_count=8"
if _DEVICES_FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _DEVICES_FLAG).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

GiB = 1024**3
# MaxText: checkpointing.save_checkpoint with config=None / default config.
MAXTEXT_CHUNK_BYTES = 2 * GiB
SAVE_CONCURRENT_GB = int(os.environ.get("BENCH_SAVE_CONCURRENT_GB", "1"))
STEP = 1000  # step directory; the `step` leaf holds the same number

MESH_AXES = ("data", "stage", "fsdp", "fsdp_transpose", "tensor", "expert")
MESH_SHAPE = (1, 1, 4, 1, 2, 1)

# Subset of MaxText's base.yml logical_axis_rules, in order (first usable rule wins, as in flax).
LOGICAL_RULES = (
    ("vocab", ("tensor",)),
    ("embed_vocab", ("fsdp", "fsdp_transpose", "expert")),
    ("embed", ("fsdp", "fsdp_transpose", "expert")),
    ("embed", ("fsdp", "expert")),
    ("mlp", ("fsdp_transpose", "tensor")),
    ("heads", ("tensor",)),
    ("q_heads", ("tensor",)),
    ("kv_heads", ("tensor",)),
    ("kv", ()),
    ("kv_head_dim", ()),
    ("norm", ("tensor",)),
    ("layers", ("stage",)),
    ("q_lora", ()),
    ("kv_lora", ()),
    ("exp", ("expert",)),
    ("gdn_head", ("tensor",)),
)

# Model dimension presets: (emb E, q heads H, kv heads K, head dim D, mlp M, vocab V).
# The large one is a ~1B-class llama2-style model; the layer count is chosen to reach the size.
PRESET_LARGE = dict(emb=2048, heads=16, kv_heads=8, head_dim=128, mlp=5632, vocab=32000)
# From 8 GiB on: Llama 3.2 3B's widths (emb 3072, 24/8 heads x 128, mlp 8192, vocab 128256);
# at 10 GiB, 19 of its 28 layers: a 2.7B-parameter llama-shaped model.
PRESET_XL = dict(emb=3072, heads=24, kv_heads=8, head_dim=128, mlp=8192, vocab=128256)
PRESET_SMALL = dict(emb=256, heads=4, kv_heads=2, head_dim=64, mlp=704, vocab=4096)
# --shape deepseek: DeepSeek-V3's layout at about 1/4 of its widths (multi-head latent
# attention, 1 dense layer, then MoE layers of 32 routed experts and a shared one); the MoE
# layer count is chosen to reach the size. The experts are stacked [experts, layers, in, out]
# (the layer axis after the experts', at param_scan_axis 1), as MaxText stores them.
PRESET_DEEPSEEK = dict(shape="deepseek", emb=2048, heads=16, q_lora=768, kv_lora=256,
                       nope=64, rope=32, v=64, mlp=5632, moe_mlp=704, experts=32, vocab=32000,
                       dense_layers=1)


def _deepseek_table(d: dict) -> list:
    """[(path, logical axes, shape)] for a DeepSeek-V3 decoder (dense_layers, moe_layers)."""
    E, H, V = d["emb"], d["heads"], d["vocab"]
    QL, KL, QK, R, VD = d["q_lora"], d["kv_lora"], d["nope"] + d["rope"], d["rope"], d["v"]
    M, MM, X = d["mlp"], d["moe_mlp"], d["experts"]
    out = [
        (("token_embedder", "embedding"), ("vocab", "embed_vocab"), (V, E)),
        (("decoder", "decoder_norm", "scale"), ("norm",), (E,)),
        (("decoder", "logits_dense", "kernel"), ("embed_vocab", "vocab"), (E, V)),
    ]
    for group, L in (("dense_layers", d["dense_layers"]), ("moe_layers", d["layers"])):
        lay = ("decoder", group)
        att = lay + ("self_attention",)
        out += [
            (lay + ("pre_self_attention_layer_norm", "scale"), ("norm", "layers"), (E, L)),
            (lay + ("post_self_attention_layer_norm", "scale"), ("norm", "layers"), (E, L)),
            (att + ("wq_a", "kernel"), ("embed", "layers", "q_lora"), (E, L, QL)),
            (att + ("q_norm", "scale"), ("norm", "layers"), (QL, L)),
            (att + ("wq_b", "kernel"), ("q_lora", "layers", "q_heads", "kv"), (QL, L, H, QK)),
            (att + ("wkv_a", "kernel"), ("embed", "layers", "kv_lora"), (E, L, KL + R)),
            (att + ("kv_norm", "scale"), ("norm", "layers"), (KL, L)),
            (att + ("wkv_b", "kernel"), ("kv_lora", "layers", "kv_heads", "kv_head_dim"),
             (KL, L, H, QK - R + VD)),
            (att + ("out", "kernel"), ("heads", "layers", "kv", "embed"), (H, L, VD, E)),
        ]
        if group == "dense_layers":
            mlp = lay + ("mlp",)
            out += [(mlp + ("wi_0", "kernel"), ("embed", "layers", "mlp"), (E, L, M)),
                    (mlp + ("wi_1", "kernel"), ("embed", "layers", "mlp"), (E, L, M)),
                    (mlp + ("wo", "kernel"), ("mlp", "layers", "embed"), (M, L, E))]
        else:
            sh = lay + ("DeepSeekMoeBlock_0", "shared_experts")
            moe = lay + ("DeepSeekMoeBlock_0", "MoeBlock_0")
            out += [(sh + ("wi_0", "kernel"), ("embed", "layers", "mlp"), (E, L, MM)),
                    (sh + ("wi_1", "kernel"), ("embed", "layers", "mlp"), (E, L, MM)),
                    (sh + ("wo", "kernel"), ("mlp", "layers", "embed"), (MM, L, E)),
                    (moe + ("gate", "kernel"), ("embed", "layers", "exp"), (E, L, X)),
                    (moe + ("wi_0",), ("exp", "layers", "embed", "mlp"), (X, L, E, MM)),
                    (moe + ("wi_1",), ("exp", "layers", "embed", "mlp"), (X, L, E, MM)),
                    (moe + ("wo",), ("exp", "layers", "mlp", "embed"), (X, L, MM, E))]
    return out


# --shape qwen3.5: Qwen3.5-35B-A3B's layout at its widths but for fewer experts (32 of 512, not
# 256 of 512) and vocabulary: blocks of inhomogeneous_layer_cycle_interval 4 layers, 3 Gated
# DeltaNet ones (the fused in_proj_qkvz [emb, 16 * 768] and in_proj_ba the export cuts into 6
# tensors, a depthwise convolution, the gated norm) then a full-attention one (the query
# [emb, heads, 2 * head_dim] with its output gate); every layer's routed experts stacked
# [experts, blocks, in, out] and a gated shared expert. The block count is chosen to reach the
# size, scanned as MaxText's decoder/layers/layer_<k> with the block axis at param_scan_axis 1.
PRESET_QWEN35 = dict(shape="qwen3.5", emb=2048, heads=16, kv_heads=2, head_dim=256, kh=16,
                     vh=32, dk=128, dv=128, conv=4, moe_mlp=512, experts=32, vocab=32000)


def _qwen35_table(d: dict) -> list:
    """[(path, logical axes, shape)] for a Qwen3.5 decoder (decoder/layers/layer_<k>)."""
    E, H, K, D, V = d["emb"], d["heads"], d["kv_heads"], d["head_dim"], d["vocab"]
    KH, VH, DK, DV, MM, X, L = (d["kh"], d["vh"], d["dk"], d["dv"], d["moe_mlp"], d["experts"],
                                d["layers"])
    conv_dim = 2 * KH * DK + VH * DV
    out = [
        (("token_embedder", "embedding"), ("vocab", "embed_vocab"), (V, E)),
        (("decoder", "decoder_norm", "scale"), ("norm",), (E,)),
        (("decoder", "logits_dense", "kernel"), ("embed_vocab", "vocab"), (E, V)),
    ]
    for k in range(4):
        lay = ("decoder", "layers", f"layer_{k}")
        att, moe, sh = lay + ("attention",), lay + ("mlp", "routed_experts"), lay + ("mlp",)
        out += [(lay + ("input_layernorm", "scale"), ("norm", "layers"), (E, L)),
                (lay + ("post_attention_layernorm", "scale"), ("norm", "layers"), (E, L))]
        if k < 3:
            out += [
                (att + ("in_proj_qkvz", "kernel"), ("embed", "layers", "gdn_head"),
                 (E, L, 2 * KH * DK + 2 * VH * DV)),
                (att + ("in_proj_ba", "kernel"), ("embed", "layers", "gdn_head"), (E, L, 2 * VH)),
                (att + ("conv1d", "kernel"), ("kv", "layers", "kv", "gdn_head"),
                 (d["conv"], L, 1, conv_dim)),
                (att + ("A_log",), ("gdn_head", "layers"), (VH, L)),
                (att + ("dt_bias",), ("gdn_head", "layers"), (VH, L)),
                (att + ("norm", "rms_norm", "scale"), ("norm", "layers"), (DV, L)),
                (att + ("out_proj", "kernel"), ("gdn_head", "layers", "embed"), (VH * DV, L, E)),
            ]
        else:
            a = att + ("attention",)
            out += [
                (a + ("query", "kernel"), ("embed", "layers", "q_heads", "kv"), (E, L, H, 2 * D)),
                (a + ("key", "kernel"), ("embed", "layers", "kv_heads", "kv_head_dim"),
                 (E, L, K, D)),
                (a + ("value", "kernel"), ("embed", "layers", "kv_heads", "kv_head_dim"),
                 (E, L, K, D)),
                (a + ("out", "kernel"), ("heads", "layers", "embed"), (H * D, L, E)),
                (a + ("query_norm", "scale"), ("norm", "layers"), (D, L)),
                (a + ("key_norm", "scale"), ("norm", "layers"), (D, L)),
            ]
        out += [(moe + ("gate", "kernel"), ("embed", "layers", "exp"), (E, L, X)),
                (moe + ("wi_0",), ("exp", "layers", "embed", "mlp"), (X, L, E, MM)),
                (moe + ("wi_1",), ("exp", "layers", "embed", "mlp"), (X, L, E, MM)),
                (moe + ("wo",), ("exp", "layers", "mlp", "embed"), (X, L, MM, E)),
                (sh + ("shared_expert", "wi_0", "kernel"), ("embed", "layers", "mlp"), (E, L, MM)),
                (sh + ("shared_expert", "wi_1", "kernel"), ("embed", "layers", "mlp"), (E, L, MM)),
                (sh + ("shared_expert", "wo", "kernel"), ("mlp", "layers", "embed"), (MM, L, E)),
                (sh + ("shared_expert_gate", "kernel"), ("embed", "layers", "kv"), (E, L, 1))]
    return out


def model_args(d: dict) -> list:
    """The unroll keys (key=value) that describe the checkpoint's model, beyond the example
    config's llama2 defaults."""
    if d.get("shape") == "qwen3.5":
        return ["decoder_block=qwen3_5", "inhomogeneous_layer_cycle_interval=4",
                f"base_num_decoder_layers={4 * d['layers']}"]
    if d.get("shape") != "deepseek":
        return []
    return ["decoder_block=deepseek", f"first_num_dense_layers={d['dense_layers']}",
            f"base_num_decoder_layers={d['dense_layers'] + d['layers']}"]


def qwen35_yml(d: dict) -> str:
    """The keys a Qwen3.5 export reads that the example config has not."""
    return "\n".join([
        f"num_experts: {d['experts']}", "num_experts_per_tok: 8", "shared_experts: 1",
        "norm_topk_prob: true", "logits_via_embedding: false", "partial_rotary_factor: 0.25",
        "rope_max_timescale: 10000000", "normalization_layer_epsilon: 1.0e-6",
        f"gdn_num_key_heads: {d['kh']}", f"gdn_num_value_heads: {d['vh']}",
        f"gdn_key_head_dim: {d['dk']}", f"gdn_value_head_dim: {d['dv']}",
        f"gdn_conv_kernel_dim: {d['conv']}", f"head_dim: {d['head_dim']}", ""])


# The keys a DeepSeek-V3 export reads that the example config has not (unroll.yml beside the
# checkpoint: the example's, then these).
def deepseek_yml(d: dict) -> str:
    return "\n".join([
        "routed_score_func: sigmoid", "routed_bias: false", "routed_scaling_factor: 2.5",
        f"q_lora_rank: {d['q_lora']}", f"kv_lora_rank: {d['kv_lora']}",
        f"qk_nope_head_dim: {d['nope']}", f"qk_rope_head_dim: {d['rope']}",
        f"v_head_dim: {d['v']}", f"num_experts: {d['experts']}", "num_experts_per_tok: 8",
        "shared_experts: 1", "logits_via_embedding: false", "rope_type: yarn",
        "normalization_layer_epsilon: 1.0e-6", ""])


def leaf_table(d: dict) -> list:
    """[(path under params/params, logical axes, shape)] for a llama2 decoder, scan axis 1
    (or a DeepSeek-V3 one: --shape deepseek)."""
    if d.get("shape") == "deepseek":
        return _deepseek_table(d)
    if d.get("shape") == "qwen3.5":
        return _qwen35_table(d)
    E, H, K, D, M, V, L = (d["emb"], d["heads"], d["kv_heads"], d["head_dim"], d["mlp"],
                           d["vocab"], d["layers"])
    lay = ("decoder", "layers")
    return [
        (("token_embedder", "embedding"), ("vocab", "embed_vocab"), (V, E)),
        (("decoder", "decoder_norm", "scale"), ("norm",), (E,)),
        (("decoder", "logits_dense", "kernel"), ("embed_vocab", "vocab"), (E, V)),
        (lay + ("pre_self_attention_layer_norm", "scale"), ("norm", "layers"), (E, L)),
        (lay + ("post_self_attention_layer_norm", "scale"), ("norm", "layers"), (E, L)),
        (lay + ("self_attention", "query", "kernel"), ("embed", "layers", "q_heads", "kv"),
         (E, L, H, D)),
        (lay + ("self_attention", "key", "kernel"),
         ("embed", "layers", "kv_heads", "kv_head_dim"), (E, L, K, D)),
        (lay + ("self_attention", "value", "kernel"),
         ("embed", "layers", "kv_heads", "kv_head_dim"), (E, L, K, D)),
        (lay + ("self_attention", "out", "kernel"), ("heads", "layers", "kv", "embed"),
         (H, L, D, E)),
        (lay + ("mlp", "wi_0", "kernel"), ("embed", "layers", "mlp"), (E, L, M)),
        (lay + ("mlp", "wi_1", "kernel"), ("embed", "layers", "mlp"), (E, L, M)),
        (lay + ("mlp", "wo", "kernel"), ("mlp", "layers", "embed"), (M, L, E)),
    ]


def dims_for(params_gib: float, layers: int = 0, shape: str = "llama") -> dict:
    """Dimensions whose fp32 parameters come closest to `params_gib` (at least 2 layers); with
    `layers`, the small preset with that many layers (many small arrays). DeepSeek's `layers`
    are its MoE layers."""
    if layers > 0:
        return dict(PRESET_SMALL, layers=layers)
    preset = (PRESET_DEEPSEEK if shape == "deepseek" else PRESET_QWEN35 if shape == "qwen3.5"
              else PRESET_XL if params_gib >= 8.0
              else PRESET_LARGE if params_gib >= 1.0 else PRESET_SMALL)
    d = dict(preset, layers=0)
    fixed = sum(math.prod(s) for _, _, s in leaf_table(d))
    d1 = dict(preset, layers=1)
    per_layer = sum(math.prod(s) for _, _, s in leaf_table(d1)) - fixed
    target = params_gib * GiB / 4
    d["layers"] = max(2, round((target - fixed) / per_layer))
    return d


def num_params(d: dict) -> int:
    return sum(math.prod(s) for _, _, s in leaf_table(d))


def logical_to_spec(logical: tuple):
    from jax.sharding import PartitionSpec as P

    used: set = set()
    out = []
    for name in logical:
        entry = None
        for rule, axes in LOGICAL_RULES:
            if rule == name and not used.intersection(axes):
                used.update(axes)
                entry = None if not axes else axes[0] if len(axes) == 1 else tuple(axes)
                break
        out.append(entry)
    return P(*out)


def make_mesh():
    import jax
    import numpy as np
    from jax.sharding import Mesh

    devices = jax.devices()
    if len(devices) != math.prod(MESH_SHAPE):
        raise SystemExit(f"need {math.prod(MESH_SHAPE)} devices, jax sees {len(devices)} "
                         f"(XLA_FLAGS={os.environ.get('XLA_FLAGS')})")
    return Mesh(np.array(devices).reshape(MESH_SHAPE), MESH_AXES)


def _set(tree: dict, path: tuple, value) -> None:
    for k in path[:-1]:
        tree = tree.setdefault(k, {})
    tree[path[-1]] = value


def state_tree(d: dict, mesh, leaf_fn, scalar_fn):
    """The TrainState pytree (as MaxText saves it) with leaves from leaf_fn(path, logical, shape,
    sharding) and scalar_fn(path, sharding); mu and nu call leaf_fn with their own paths."""
    import optax
    from jax.sharding import NamedSharding, PartitionSpec as P

    def build(prefix):
        tree: dict = {}
        for path, logical, shape in leaf_table(d):
            sh = NamedSharding(mesh, logical_to_spec(logical))
            _set(tree, path, leaf_fn(prefix + path, logical, shape, sh))
        return {"params": tree}

    rep = NamedSharding(mesh, P())
    params = build(("params", "params"))
    mu = build(("opt_state", "0", "mu", "params"))
    nu = build(("opt_state", "0", "nu", "params"))
    adam = optax.ScaleByAdamState(count=scalar_fn(("opt_state", "0", "count"), rep), mu=mu, nu=nu)
    sched = optax.ScaleByScheduleState(count=scalar_fn(("opt_state", "2", "count"), rep))
    return {"step": scalar_fn(("step",), rep), "params": params,
            "opt_state": (adam, optax.EmptyState(), sched)}


def abstract_state(d: dict, mesh):
    """ShapeDtypeStruct tree (with shardings) of the saved state: the restore target."""
    import jax
    import numpy as np

    return state_tree(
        d, mesh,
        lambda path, logical, shape, sh: jax.ShapeDtypeStruct(shape, np.float32, sharding=sh),
        lambda path, sh: jax.ShapeDtypeStruct((), np.int32, sharding=sh))


class LazyLeaf:
    """A float32 leaf not yet in memory: its values are made shard by shard while it is saved
    (LazyArrayHandler), so the generator never holds a whole leaf, let alone the model."""

    def __init__(self, leaf_no: int, logical: tuple, shape: tuple, sharding, seed: int):
        import numpy as np

        self.leaf_no, self.logical, self.shape, self.sharding = leaf_no, logical, shape, sharding
        self.seed = seed
        self.dtype = np.dtype(np.float32)
        self.ndim = len(shape)
        self.size = math.prod(shape)
        self.itemsize = 4
        self.nbytes = 4 * self.size

    def block(self, index: tuple):
        """The values of block `index` (a tuple of slices), a function of (seed, leaf, block
        origin) only: asked for device shards (the blocks of the leaf's sharding), it gives the
        same values however they are written; mu and nu (same leaf_no) hold params' values."""
        import numpy as np

        bounds = [s.indices(n) for s, n in zip(index, self.shape)]
        shape = tuple(hi - lo for lo, hi, _ in bounds)
        rng = np.random.default_rng([self.seed, self.leaf_no] + [lo for lo, _, _ in bounds])
        x = rng.standard_normal(shape, dtype=np.float32)
        if self.logical in (("norm",), ("norm", "layers")):
            x *= np.float32(0.05)
            x += np.float32(1.0)
        else:
            x *= np.float32(0.02)
        return x


class _NoData:
    """A shard's data as get_replica_slices looks at it: shape and size, no values."""

    def __init__(self, shape):
        self.shape, self.size = shape, math.prod(shape)


class _FakeShard:
    def __init__(self, device, index, replica_id, shape):
        self.device, self.index, self.replica_id = device, index, replica_id
        self.data = _NoData(shape)


class _FakeArray:
    """What orbax's replica_slices.get_replica_slices reads of a jax.Array (shape, sharding,
    addressable shards with index, replica id and data shape), without the data."""

    def __init__(self, leaf: LazyLeaf):
        from jax._src.sharding_impls import device_replica_id_map

        self.shape, self.sharding, self.dtype = leaf.shape, leaf.sharding, leaf.dtype
        self.ndim, self.size, self.itemsize = leaf.ndim, leaf.size, leaf.itemsize
        indices = leaf.sharding.devices_indices_map(leaf.shape)
        replicas = device_replica_id_map(leaf.sharding, leaf.shape)
        self.addressable_shards = []
        for dev in leaf.sharding._addressable_device_assignment:
            idx = indices[dev]
            shape = tuple(len(range(*s.indices(n))) for s, n in zip(idx, leaf.shape))
            self.addressable_shards.append(_FakeShard(dev, idx, replicas[dev], shape))


def _slice_values(leaf: LazyLeaf, sl):
    """A replica slice's values: its device shard's block (LazyLeaf.block), cut to the part
    this replica writes when Orbax shares a replicated shard among replicas (slice_args)."""
    if sl.slice_args is None:
        return leaf.block(sl.index)
    a, lo, hi = sl.slice_args.axis, sl.slice_args.start_index, sl.slice_args.limit_index
    start = (sl.index[a].start or 0) - lo
    shard = sl.index[:a] + (slice(start, start + sl.unsliced_data.shape[a]),) + sl.index[a + 1:]
    cut = [slice(None)] * leaf.ndim
    cut[a] = slice(lo, hi)
    return leaf.block(shard)[tuple(cut)].copy()


def lazy_array_handler_class():
    """An orbax ArrayHandler for LazyLeaf values: the same type string ('jax.Array'), write
    specs, replica slices, sharding file and array metadata as Orbax's own handler gives a
    jax.Array of that shape and sharding (Orbax's functions compute them), but each replica
    slice's values are made just before TensorStore writes them and dropped after, with at
    most BENCH_WINDOW_MIB (default 512) of slices in flight."""
    import asyncio

    import numpy as np
    from orbax.checkpoint._src.futures import future
    from orbax.checkpoint._src.multihost import multihost
    from orbax.checkpoint._src.serialization import jax_array_handlers as jah
    from orbax.checkpoint._src.serialization import ocdbt_utils, replica_slices, serialization
    from orbax.checkpoint._src.serialization import tensorstore_utils as ts_utils

    window = int(os.environ.get("BENCH_WINDOW_MIB", "512")) << 20

    class LazyArrayHandler(jah.ArrayHandler):
        async def serialize(self, values, infos, args=None):
            args = args or [None] * len(values)
            if self._enable_write_sharding_file:
                await jah._async_serialize_shardings(
                    shardings=[v.sharding for v in values], infos=infos,
                    primary_host=self._primary_host)
            metadatas = []
            pending: list = []
            in_flight = 0
            for leaf, info, arg in zip(values, infos, args):
                rs = replica_slices.get_replica_slices(
                    _FakeArray(leaf), self._replica_id, self._use_replica_parallel,
                    self._min_slice_bytes_for_replica_parallel,
                    self._max_replicas_for_replica_parallel)
                await info.await_path_creation()
                spec = ts_utils.build_array_write_spec(
                    info=info, arg=arg, global_shape=rs.global_shape,
                    local_shape=rs.local_shape, dtype=rs.dtype,
                    use_ocdbt=info.is_ocdbt_checkpoint,
                    process_index=ocdbt_utils.get_process_index_for_subdir(
                        info.is_ocdbt_checkpoint),
                    replica_separate_folder=False, metadata_key=self._metadata_key,
                    ext_metadata=None)
                metadatas.append(spec.metadata)
                for sl in rs.replica_slices:
                    data = _slice_values(leaf, sl)
                    one = replica_slices.ReplicaSlices(
                        global_shape=rs.global_shape, local_shape=rs.local_shape,
                        sharding=rs.sharding, dtype=rs.dtype, is_on_host=True,
                        replica_slices=[replica_slices.ReplicaSlice(sl.index, data, None)])
                    task = asyncio.ensure_future(serialization.async_serialize_from_host(
                        one, spec.json, primary_host=self._primary_host,
                        context=info.ts_context, transaction=None,
                        byte_limiter=info.byte_limiter))
                    pending.append((task, data.nbytes))
                    in_flight += data.nbytes
                    del data, one
                    while in_flight > window:
                        t, n = pending.pop(0)
                        await t
                        in_flight -= n
            for t, _ in pending:
                await t
            if self._array_metadata_store is not None:
                await self._array_metadata_store.write(
                    checkpoint_dir=infos[0].parent_dir, array_metadatas=metadatas,
                    process_index=multihost.process_index())
            return [future.NoopFuture()]

    return LazyArrayHandler


def generate(params_gib: float, out: pathlib.Path, seed: int, distinct: bool,
             layers: int = 0, eager: bool = False, shape: str = "llama") -> dict:
    """Write the checkpoint leaf by leaf, slice by slice (LazyLeaf): the generator's memory
    is bounded by the write window, not the model. --distinct-opt-state gives mu and nu their
    own values (other seeds). With `eager` (--eager), the same values as whole jax.Arrays
    saved by Orbax's own ArrayHandler (the model in memory: small sizes only), which is what
    tests/interop/test_bench_checkpoint.py checks the streamed checkpoint against."""
    import jax
    import numpy as np
    import orbax.checkpoint as ocp
    from orbax.checkpoint._src.metadata import array_metadata_store as ams
    from orbax.checkpoint._src.serialization import type_handler_registry as thr

    d = dims_for(params_gib, layers, shape)
    mesh = make_mesh()
    leaf_no = {path: i for i, (path, _, _) in enumerate(leaf_table(d))}

    def leaf(path, logical, shape, sh):
        key = path[2:] if path[0] == "params" else path[4:]  # path under params/params
        s = seed
        if distinct and path[0] == "opt_state":
            s = seed + (1 if path[2] == "mu" else 2)
        lazy = LazyLeaf(leaf_no[key], logical, shape, sh, s)
        if not eager:
            return lazy
        return jax.make_array_from_callback(shape, sh, lazy.block)

    def scalar(path, sh):
        return jax.device_put(np.int32(STEP), sh)

    t0 = time.monotonic()
    state = state_tree(d, mesh, leaf, scalar)
    t_gen = time.monotonic() - t0

    root = out / "checkpoints"
    save_args = jax.tree.map(lambda _: ocp.SaveArgs(chunk_byte_size=MAXTEXT_CHUNK_BYTES), state)
    # the default handlers (jax.Array: Orbax's ArrayHandler with its array metadata store)
    # plus LazyLeaf's, configured like the default jax.Array handler
    registry = thr.create_type_handler_registry(
        *thr._DEFAULT_TYPE_HANDLERS,
        (LazyLeaf, lazy_array_handler_class()(array_metadata_store=ams.Store())))
    # MaxText passes 96 GB; the in-flight limit also bounds the generator's memory
    handler = ocp.PyTreeCheckpointHandler(use_ocdbt=True, use_zarr3=True,
                                          save_concurrent_gb=SAVE_CONCURRENT_GB,
                                          restore_concurrent_gb=96,
                                          type_handler_registry=registry)
    options = ocp.CheckpointManagerOptions(create=True, enable_async_checkpointing=False)
    t0 = time.monotonic()
    with ocp.CheckpointManager(root, item_names=("items",), item_handlers={"items": handler},
                               options=options) as mngr:
        mngr.save(STEP, args=ocp.args.Composite(items=ocp.args.PyTreeSave(
            item=state, save_args=save_args, ocdbt_target_data_file_size=MAXTEXT_CHUNK_BYTES)))
        mngr.wait_until_finished()
    t_save = time.monotonic() - t0
    items = root / str(STEP) / "items"
    if not (items / "_METADATA").is_file():
        raise SystemExit(f"Orbax did not write {items}")
    n = num_params(d)
    info = {
        "params_gib_requested": params_gib,
        "dims": d,
        "layers": d["layers"],
        "model_args": model_args(d),
        "num_params": n,
        "params_bytes": 4 * n,
        "full_state_bytes": 12 * n,
        "output_bytes": 2 * n,
        "step": STEP,
        "items": str(items.resolve()),
        "mesh_axes": list(MESH_AXES),
        "mesh_shape": list(MESH_SHAPE),
        "distinct_opt_state": distinct,
        "eager": eager,
        "seed": seed,
        "generate_s": round(t_gen, 2),
        "save_s": round(t_save, 2),
        "disk_bytes": sum(p.stat().st_size for p in items.rglob("*") if p.is_file()),
    }
    (out / "bench_checkpoint.json").write_text(json.dumps(info, indent=2) + "\n")
    if d.get("shape") in ("deepseek", "qwen3.5"):
        example = pathlib.Path(__file__).resolve().parents[1] / "tests/data/example/unroll.yml"
        keys = deepseek_yml(d) if d["shape"] == "deepseek" else qwen35_yml(d)
        (out / "unroll.yml").write_text(example.read_text() + "\n" + keys)
    return info


def cmd_make(args) -> None:
    out = pathlib.Path(args.out)
    if (out / "bench_checkpoint.json").is_file():
        info = json.loads((out / "bench_checkpoint.json").read_text())
        print(f"reusing {out}", file=sys.stderr)
    else:
        tmp = out.with_name(out.name + ".partial")
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        info = generate(args.params_gib, tmp, args.seed, args.distinct_opt_state, args.layers,
                        args.eager, args.shape)
        tmp.rename(out)
        info["items"] = str((out / "checkpoints" / str(STEP) / "items").resolve())
        (out / "bench_checkpoint.json").write_text(json.dumps(info, indent=2) + "\n")
    print(f"items {info['items']}")
    print(f"layers {info['layers']}")
    print(f"params {info['num_params']} ({info['params_bytes'] / GiB:.3f} GiB fp32), "
          f"on disk {info['disk_bytes'] / GiB:.3f} GiB", file=sys.stderr)


# ------------------------------------------------------------------------------------------
# Chunk list for the floor (bench/floor.c)


def _parse_location(loc: str):
    """'<type>:<base_path>:<file_id>:<offset>:<length>' (tensorstore.ocdbt.dump) -> parts."""
    kind, rest = loc.split(":", 1)
    rest, offset, length = rest.rsplit(":", 2)
    base_path, file_id = rest.split(":", 1) if ":" in rest else ("", rest)
    return kind, base_path, file_id, int(offset), int(length)


def _db_entries(kv_base, location: str):
    """Yield (key bytes, value) for every leaf entry under the B+tree node at `location`;
    value is ('inline', bytes) or ('ref', location string)."""
    import tensorstore as ts

    node = ts.ocdbt.dump(kv_base, location).result()
    for e in node["entries"]:
        key = e["key"]
        if isinstance(key, str):
            key = key.encode()
        if node.get("height", 0) > 0:
            # interior node: a child reference
            child = e.get("location") or e.get("node")
            if child is None:
                raise SystemExit(f"unexpected interior entry {sorted(e)}")
            yield from _db_entries(kv_base, child)
        elif "indirect_value" in e:
            yield key, ("ref", e["indirect_value"])
        elif "inline_value" in e:
            yield key, ("inline", e["inline_value"])
        else:
            raise SystemExit(f"unexpected leaf entry {sorted(e)}")


def chunk_list(items: pathlib.Path, prefix: str) -> tuple:
    """Every stored zarr3 shard (one OCDBT value) of the float32 arrays whose storage name
    starts with `prefix`, as (data file path, offset, length, decoded bytes per inner chunk,
    inner chunks, output bytes), the zstd level of their inner codec, and the (key, size) of
    the values stored inline in B+tree nodes (left out)."""
    import tensorstore as ts

    items = items.resolve()
    base = ts.KvStore.open(f"file://{items}/").result()
    manifest = ts.ocdbt.dump(base).result()
    if not manifest.get("versions"):
        raise SystemExit("manifest has no inline version list (version tree nodes unsupported)")
    root = manifest["versions"][-1]["root"]["location"]
    entries = dict(_db_entries(base, root))
    arrays = {}
    for key, val in entries.items():
        k = key.decode()
        if k.startswith(prefix) and k.endswith("/zarr.json"):
            kind, data = val
            if kind != "inline":
                data = ts.ocdbt.dump(base, data).result()
            arrays[k[: -len("/zarr.json")]] = json.loads(data)
    out = []
    skipped = []
    levels = set()
    for name, meta in sorted(arrays.items()):
        # float32 (a training state: each becomes bf16 output) or bfloat16 (an output, for the
        # codec floor's encoding side: floor.c -c)
        itemsize = {"float32": 4, "bfloat16": 2}.get(meta.get("data_type"))
        if itemsize is None:
            raise SystemExit(f"{name}: data_type {meta.get('data_type')}, expected float32 "
                             "or bfloat16")
        chunk = meta["chunk_grid"]["configuration"]["chunk_shape"]
        codecs = meta["codecs"]
        if len(codecs) != 1 or codecs[0]["name"] != "sharding_indexed":
            raise SystemExit(f"{name}: codecs {[c['name'] for c in codecs]}, "
                             "expected Orbax's sharding_indexed")
        sc = codecs[0]["configuration"]
        inner_codecs = [c["name"] for c in sc["codecs"]]
        if inner_codecs != ["bytes", "zstd"] or sc.get("index_location", "end") != "end":
            raise SystemExit(f"{name}: inner codecs {inner_codecs}, floor handles bytes+zstd "
                             "with the index at the end")
        levels.add(sc["codecs"][1].get("configuration", {}).get("level", 0))
        inner = sc["chunk_shape"]
        n_inner = math.prod(-(-c // i) for c, i in zip(chunk, inner))
        decoded = itemsize * math.prod(inner)  # bytes per inner chunk
        if meta["chunk_key_encoding"]["name"] != "default":
            raise SystemExit(f"{name}: chunk key encoding {meta['chunk_key_encoding']}")
        for key, (kind, val) in sorted(entries.items()):
            k = key.decode()
            if k != f"{name}/c" and not k.startswith(f"{name}/c/"):
                continue
            if kind == "inline":
                # stored inside a B+tree node (<= max_inline_value_bytes, 1 KiB for Orbax):
                # negligible, left out of the floor and counted
                skipped.append((k, len(val)))
                continue
            _, base_path, file_id, off, length = _parse_location(val)
            path = items / base_path / file_id
            out.append((str(path), off, length, decoded, n_inner,
                        n_inner * decoded * 2 // itemsize))
    if len(levels) != 1:
        raise SystemExit(f"zstd levels {levels}: expected one")
    return out, levels.pop(), skipped


def cmd_chunks(args) -> None:
    rows, level, skipped = chunk_list(pathlib.Path(args.items), args.prefix)
    with open(args.out, "w") as f:
        f.write(f"# zstd_level {level}\n")
        f.write("# path\toffset\tlength\tinner_chunk_decoded_bytes\tinner_chunks"
                "\toutput_bytes\n")
        for r in rows:
            f.write("\t".join(str(x) for x in r) + "\n")
    total_in = sum(r[2] for r in rows)
    total_dec = sum(r[3] * r[4] for r in rows)
    print(f"{len(rows)} chunks, {total_in} stored bytes, {total_dec} decoded bytes, "
          f"zstd level {level}; {len(skipped)} inline values left out "
          f"({sum(n for _, n in skipped)} bytes)", file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make", help="generate (or reuse) the checkpoint")
    m.add_argument("--params-gib", type=float, default=2.0)
    m.add_argument("--out", required=True)
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--distinct-opt-state", action="store_true")
    m.add_argument("--layers", type=int, default=0,
                   help="small dimensions with this many layers (overrides --params-gib)")
    m.add_argument("--shape", choices=("llama", "deepseek", "qwen3.5"), default="llama",
                   help="the model's layout (deepseek: DeepSeek-V3's, experts on their own "
                        "axis; qwen3.5: Qwen3.5's, fused projections and stacked experts)")
    m.add_argument("--eager", action="store_true",
                   help="whole jax.Arrays saved by Orbax's own handler (for the test; small)")
    m.set_defaults(fn=cmd_make)
    c = sub.add_parser("chunks", help="list the stored chunks of the params for floor.c")
    c.add_argument("--items", required=True)
    c.add_argument("--out", required=True)
    c.add_argument("--prefix", default="params.params.")
    c.set_defaults(fn=cmd_chunks)
    args = ap.parse_args()
    args.fn(args)


if __name__ == "__main__":
    main()
