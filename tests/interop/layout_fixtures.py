"""Scanned MaxText layouts beyond `decoder/layers` (docs/maxtext-checkpoints.md §5),
written by the real Orbax stack with the helpers of maxtext_fixtures (which stays unchanged, so
its cache keys do not move), plus an independent reference unroll of each and the tree a
`scan_layers=false` MaxText model has.

Families (tiny dims, param-only checkpoints {step: 0, params: {params: ...}, opt_state: {}}):

  llama4, gpt_oss, olmo3   decoder/layers/layers_<j>/...  (K sub-layers per scanned block)
  qwen3_next               decoder/layers/layer_<j>/...   (singular sub-layer names)
  gemma3                   decoder/layers/layers_<j>/... (blocks of 6) + decoder/layers_remainder/
                           layers_<j>/... (the last N % 6 layers, unscanned)
  deepseek4                decoder/layers_<i> (first_num_hash_layers, unscanned) +
                           decoder/scanned_blocks/layers_<j>/... (blocks of 2)
  gemma4 (+ MTP)           decoder/scanned_blocks/{local_layers,global_layer}/... +
                           layers_remainder; with mtp=True also mtp_block/mtp_layer_1/..., its
                           transformer layer a whole scanned block (see MTP below)

The layouts follow MaxText e591f30cbbf2: nnx_decoders.py `_init_scanned_generic` (scan length
int(N / K), module `layers`), the ScannableBlocks of llama4.py / gpt_oss.py / olmo3.py
(`layers_{layer_id}`), qwen3.py / qwen3_5.py (`layer_{i}`), `_init_scanned_gemma3`
(`layers` of N // 6 blocks, `layers_remainder` with N % 6 layers, GEMMA3_ATTENTION_PATTERN of
length 6), `_init_scanned_deepseek4` (`layers_<i>` hash layers, `scanned_blocks` of
(N - H) // 2 DeepSeek4ScannableBlock with `layers_0`, `layers_1`). The unscanned model
(`_init_sequential_generic`) registers one `layers_<lyr>` per layer of the same layer class, so
its leaf names inside a layer are those of the scanned sub-layer. The maxtext package needs
Python >= 3.12 and could not be imported here, so `unscanned_tree` derives the
`scan_layers=false` tree from that code instead of running `jax.eval_shape` on the model.

Sub-layers differ as in the real models (llama4 alternates dense and MoE layers): in the cycle
families sub-layer j has an MLP when j is even and a MoE gate + experts when it is odd.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import pathlib
import shutil
import tempfile

import numpy as np

import maxtext_fixtures as mf
import reference

E, H, D, M, V, X = 8, 4, 3, 6, 10, 3


@dataclasses.dataclass(frozen=True)
class Family:
    name: str
    decoder_block: str
    cycle: int  # sub-layers per scanned block (K)
    num_layers: int  # num_decoder_layers (N)
    sub_name: str = "layers"  # "layers" or "layer" (qwen3-next)
    group: str = "layers"  # the scanned node under decoder
    hash_layers: int = 0  # deepseek4 first_num_hash_layers
    remainder: bool = False  # gemma3: layers_remainder holds N % K layers

    @property
    def blocks(self) -> int:
        return (self.num_layers - self.hash_layers) // self.cycle

    @property
    def n_remainder(self) -> int:
        return (self.num_layers - self.hash_layers) % self.cycle if self.remainder else 0

    @property
    def interval(self) -> int:
        """inhomogeneous_layer_cycle_interval of the model's yml."""
        return self.cycle if self.decoder_block not in ("gemma3", "deepseek4") else 1


FAMILIES = {
    f.name: f
    for f in (
        Family("llama4", "llama4", 4, 8),
        Family("gpt_oss", "gpt_oss", 2, 6),
        Family("olmo3", "olmo3", 4, 4),
        Family("qwen3_next", "qwen3_next", 4, 8, sub_name="layer"),
        Family("gemma3", "gemma3", 6, 14, remainder=True),
        Family("deepseek4", "deepseek4", 2, 5, group="scanned_blocks", hash_layers=1),
    )
}


def _layer_leaves(kind: str) -> list:
    """(path in a layer, logical axes, unscanned shape) of one decoder layer."""
    out = [
        (("pre_self_attention_layer_norm", "scale"), ("norm",), (E,)),
        (("self_attention", "query", "kernel"), ("embed", "q_heads", "kv"), (E, H, D)),
        (("self_attention", "out", "kernel"), ("heads", "kv", "embed"), (H, D, E)),
    ]
    if kind == "moe":
        out += [
            (("moe", "gate", "kernel"), ("embed", "exp"), (E, X)),
            (("moe", "wi_0"), ("exp", "embed", "mlp"), (X, E, M)),
        ]
    else:
        out += [
            (("mlp", "wi_0", "kernel"), ("embed", "mlp"), (E, M)),
            (("mlp", "wo", "kernel"), ("mlp", "embed"), (M, E)),
        ]
    return out


def layer_kind(fam: Family, g: int) -> str:
    """The kind of global layer g (what the unscanned model builds at index g)."""
    if fam.decoder_block == "gemma3" or g < fam.hash_layers:
        return "dense"
    return "moe" if (g - fam.hash_layers) % fam.cycle % 2 else "dense"


def unscanned_tree(fam: Family) -> dict:
    """{model path: shape} of the scan_layers=false model's params (no wrapper)."""
    out = {("token_embedder", "embedding"): (V, E), ("decoder", "decoder_norm", "scale"): (E,)}
    for g in range(fam.num_layers):
        for path, _, shape in _layer_leaves(layer_kind(fam, g)):
            out[("decoder", f"layers_{g}") + path] = shape
    return out


def _scanned(logical: tuple, shape: tuple, n: int):
    """Insert the block axis at param_scan_axis = 1 (clamped for rank-1 leaves)."""
    return logical[:1] + ("layers",) + logical[1:], shape[:1] + (n,) + shape[1:]


def _state(fam: Family, dtype: str):
    b = mf._Builder("layout-" + fam.name, dtype, mf.DEFAULT_MESH)
    pp = ("params", "params")
    params: dict = {}

    def add(path, logical, shape, axis):
        mf._set(params, path, b.array(pp + path, logical, shape, axis))

    add(("token_embedder", "embedding"), ("vocab", "embed_vocab"), (V, E), None)
    add(("decoder", "decoder_norm", "scale"), ("norm",), (E,), None)
    for i in range(fam.hash_layers):
        for path, logical, shape in _layer_leaves("dense"):
            add(("decoder", f"layers_{i}") + path, logical, shape, None)
    if fam.blocks > 0:
        for j in range(fam.cycle):
            kind = "dense" if fam.decoder_block == "gemma3" else ("moe" if j % 2 else "dense")
            for path, logical, shape in _layer_leaves(kind):
                lg, sh = _scanned(logical, shape, fam.blocks)
                add(("decoder", fam.group, f"{fam.sub_name}_{j}") + path, lg, sh, 1)
    for j in range(fam.n_remainder):
        for path, logical, shape in _layer_leaves("dense"):
            add(("decoder", "layers_remainder", f"layers_{j}") + path, logical, shape, None)
    return {"step": 0, "params": {"params": params}, "opt_state": {}}, b


@dataclasses.dataclass
class LayoutInfo:
    family: Family
    layout: str
    dtype: str
    items: pathlib.Path

    def overrides(self) -> list:
        f = self.family
        return [f"load_parameters_path={self.items}", f"base_num_decoder_layers={f.num_layers}",
                f"decoder_block={f.decoder_block}",
                f"inhomogeneous_layer_cycle_interval={f.interval}",
                f"first_num_hash_layers={f.hash_layers}", "param_scan_axis=1"]


def _source_hash() -> str:
    h = hashlib.sha256(pathlib.Path(__file__).read_bytes())
    h.update(pathlib.Path(mf.__file__).read_bytes())
    return h.hexdigest()[:12]


def make_layout_checkpoint(family: str, layout: str, dtype: str, cache_dir) -> LayoutInfo:
    """Write (or reuse) the fixture of `family` under cache_dir; returns where it is."""
    fam = FAMILIES[family]
    use_ocdbt, use_zarr3 = mf.LAYOUTS[layout]
    cache_dir = pathlib.Path(cache_dir)
    final = cache_dir / f"layout-{family}-{layout}-{dtype}-{_source_hash()}"
    items = final / "checkpoints" / "0" / "items"
    if not (items / "_METADATA").is_file():
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=cache_dir))
        try:
            state, b = _state(fam, dtype)
            mf._save(tmp / "x" / "checkpoints", 0, state, b.specs, mf.DEFAULT_MESH, use_ocdbt,
                     use_zarr3, mf.MAXTEXT_CHUNK_BYTES)
            try:
                os.rename(tmp / "x", final)
            except OSError:
                if not (items / "_METADATA").is_file():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return LayoutInfo(fam, layout, dtype, items)


# ------------------------------------------------------------------------------------------
# Reference unroll: numpy slicing of the restored input, independent of the C code.


def _take(tree, b: int, path: tuple):
    if isinstance(tree, dict):
        return {k: _take(v, b, path + (k,)) for k, v in tree.items()}
    x = np.asarray(tree)
    return reference._bf16(np.take(x, b, axis=1))


def _cast(tree):
    if isinstance(tree, dict):
        return {k: _cast(v) for k, v in tree.items()}
    return reference._bf16(np.asarray(tree))


def _index(name: str, prefix: str) -> int | None:
    if name.startswith(prefix + "_") and name[len(prefix) + 1:].isdigit():
        return int(name[len(prefix) + 1:])
    return None


def reference_unroll(info: LayoutInfo, pure_nnx: bool) -> dict:
    """Expected output tree: block b of sub-layer j -> layers_<H + b*K + j>; the remainder's
    layers_<j> -> layers_<H + blocks*K + j>; hash layers kept; everything cast to bf16."""
    fam = info.family
    params = reference.restore(info.items)["params"]["params"]
    dec = params["decoder"]
    out_dec: dict = {}
    hash_n = sum(1 for k in dec if _index(k, "layers") is not None)
    stacked = dec.get(fam.group, {})
    subs = {}
    for k, v in stacked.items():
        j = _index(k, fam.sub_name)
        if j is None:
            raise reference.ReferenceError(f"decoder/{fam.group}/{k}: not a sub-layer")
        subs[j] = v
    k_cycle = len(subs)
    lengths = {np.shape(x)[1] for x in mf.flatten(stacked).values()}
    if len(lengths) > 1:
        raise reference.ReferenceError(f"block axis lengths differ: {lengths}")
    blocks = lengths.pop() if lengths else 0
    for k, v in dec.items():
        if k in (fam.group, "layers_remainder"):
            continue
        out_dec[k] = _cast(v)  # non-layer leaves and deepseek4 hash layers
    for j, sub in subs.items():
        for b in range(blocks):
            out_dec[f"layers_{hash_n + b * k_cycle + j}"] = _take(sub, b, ())
    for k, v in dec.get("layers_remainder", {}).items():
        out_dec[f"layers_{hash_n + blocks * k_cycle + _index(k, 'layers')}"] = _cast(v)
    out = {k: _cast(v) for k, v in params.items() if k != "decoder"}
    out["decoder"] = out_dec
    return reference.decode_layout(out, pure_nnx)


__all__ = ["FAMILIES", "Family", "LayoutInfo", "make_layout_checkpoint", "reference_unroll",
           "unscanned_tree", "layer_kind"]


# ------------------------------------------------------------------------------------------
# Pipeline stacks (MaxText e591f30cbbf2: pipeline.py PipelineBase.__init__ vmaps the stage
# module over stages (out axis 0, PARTITION_NAME "layers") and, when num_pipeline_repeats > 1,
# over repeats (out axis 0, "circular_repeats"), stored as `self.layers`; nnx_decoders.py
# _init_pipeline_layers attaches it as `pipeline_module` and _init_pipeline_generic scans the
# remaining num_decoder_layers - pipeline_parallel_layers layers as `layers_outside_pipeline`
# (run after the pipeline). The stage (_get_pipeline_stage_module): the layer itself
# (num_layers_per_pipeline_stage 1), NNXScannedPipelineStage `scanned_layers` (layers_per_stage
# axis at param_scan_axis) or NNXSequentialPipelineStage `layers_<i>`.)


@dataclasses.dataclass(frozen=True)
class PipeCase:
    name: str
    stages: int  # ici_pipeline_parallelism
    repeats: int  # num_pipeline_repeats (derived by MaxText from the others)
    lps: int  # num_layers_per_pipeline_stage
    scanned: bool  # scan_layers_per_stage
    outside: int  # layers in layers_outside_pipeline

    @property
    def pipelined(self) -> int:
        return self.repeats * self.stages * self.lps

    @property
    def num_layers(self) -> int:
        return self.pipelined + self.outside


PIPE_CASES = {
    c.name: c
    for c in (
        PipeCase("pipe_scanned_repeats", 2, 2, 3, True, 2),
        PipeCase("pipe_sequential", 2, 1, 2, False, 0),
        PipeCase("pipe_single_repeats", 4, 2, 1, False, 2),
    )
}


def pipe_global_layer(c: PipeCase, r: int, s: int, j: int) -> int:
    """MaxText's execution order: a microbatch runs stages 0..S-1 of repeat 0, then of
    repeat 1, ...; inside a stage its layers in order."""
    return (r * c.stages + s) * c.lps + j


def _pipe_state(c: PipeCase, dtype: str):
    b = mf._Builder("layout-" + c.name, dtype, mf.STAGED_MESH)
    pp = ("params", "params")
    params: dict = {}

    def add(path, logical, shape):
        mf._set(params, path, b.array(pp + path, logical, shape, None))

    add(("token_embedder", "embedding"), ("vocab", "embed_vocab"), (V, E))
    add(("decoder", "decoder_norm", "scale"), ("norm",), (E,))
    lead_l = (("circular_repeats",) if c.repeats > 1 else ()) + ("layers",)
    lead_s = ((c.repeats,) if c.repeats > 1 else ()) + (c.stages,)
    base = ("decoder", "pipeline_module", "layers")
    for path, logical, shape in _layer_leaves("dense"):
        if c.lps > 1 and c.scanned:
            lg = logical[:1] + ("layers_per_stage",) + logical[1:]
            sh = shape[:1] + (c.lps,) + shape[1:]
            add(base + ("scanned_layers",) + path, lead_l + lg, lead_s + sh)
        elif c.lps > 1:
            for j in range(c.lps):
                add(base + (f"layers_{j}",) + path, lead_l + logical, lead_s + shape)
        else:
            add(base + path, lead_l + logical, lead_s + shape)
        if c.outside:
            lg, sh = _scanned(logical, shape, c.outside)
            add(("decoder", "layers_outside_pipeline") + path, lg, sh)
    return {"step": 0, "params": {"params": params}, "opt_state": {}}, b


@dataclasses.dataclass
class PipeInfo:
    case: PipeCase
    layout: str
    dtype: str
    items: pathlib.Path

    def overrides(self) -> list:
        c = self.case
        return [f"load_parameters_path={self.items}", f"base_num_decoder_layers={c.num_layers}",
                "decoder_block=llama2", f"ici_pipeline_parallelism={c.stages}",
                f"num_layers_per_pipeline_stage={c.lps}",
                f"pipeline_parallel_layers={c.pipelined}",
                f"scan_layers_per_stage={str(c.scanned).lower()}", "param_scan_axis=1"]


def make_pipe_checkpoint(name: str, layout: str, dtype: str, cache_dir) -> PipeInfo:
    c = PIPE_CASES[name]
    use_ocdbt, use_zarr3 = mf.LAYOUTS[layout]
    cache_dir = pathlib.Path(cache_dir)
    final = cache_dir / f"layout-{name}-{layout}-{dtype}-{_source_hash()}"
    items = final / "checkpoints" / "0" / "items"
    if not (items / "_METADATA").is_file():
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=cache_dir))
        try:
            state, b = _pipe_state(c, dtype)
            mf._save(tmp / "x" / "checkpoints", 0, state, b.specs, mf.STAGED_MESH, use_ocdbt,
                     use_zarr3, mf.SMALL_CHUNK_BYTES)
            try:
                os.rename(tmp / "x", final)
            except OSError:
                if not (items / "_METADATA").is_file():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return PipeInfo(c, layout, dtype, items)


def pipe_unscanned_tree(c: PipeCase) -> dict:
    out = {("token_embedder", "embedding"): (V, E), ("decoder", "decoder_norm", "scale"): (E,)}
    for g in range(c.num_layers):
        for path, _, shape in _layer_leaves("dense"):
            out[("decoder", f"layers_{g}") + path] = shape
    return out


def pipe_reference_unroll(info: PipeInfo, pure_nnx: bool) -> dict:
    """Expected output: numpy indexing of the restored input in MaxText's layer order."""
    c = info.case
    params = reference.restore(info.items)["params"]["params"]
    dec = params["decoder"]
    stage = dec["pipeline_module"]["layers"]
    out_dec = {k: _cast(v) for k, v in dec.items()
               if k not in ("pipeline_module", "layers_outside_pipeline")}
    for r in range(c.repeats):
        for s in range(c.stages):
            for j in range(c.lps):
                if c.lps > 1 and not c.scanned:
                    src, take = stage[f"layers_{j}"], None
                elif c.lps > 1:
                    src, take = stage["scanned_layers"], j
                else:
                    src, take = stage, None
                flat = {}
                for p, x in mf.flatten(src).items():
                    x = np.asarray(x)
                    x = x[r, s] if c.repeats > 1 else x[s]
                    if take is not None:
                        x = np.take(x, take, axis=1)
                    flat[p] = reference._bf16(x)
                out_dec[f"layers_{pipe_global_layer(c, r, s, j)}"] = mf.unflatten(flat)
    for i in range(c.outside):
        out_dec[f"layers_{c.pipelined + i}"] = _take(dec["layers_outside_pipeline"], i, ())
    out = {k: _cast(v) for k, v in params.items() if k != "decoder"}
    out["decoder"] = out_dec
    return reference.decode_layout(out, pure_nnx)


__all__ += ["PIPE_CASES", "PipeCase", "PipeInfo", "make_pipe_checkpoint", "pipe_unscanned_tree",
            "pipe_reference_unroll", "pipe_global_layer"]


# ------------------------------------------------------------------------------------------
# gemma4 (MaxText e591f30cbbf2: nnx_decoders.py _init_scanned_gemma4 builds `scanned_blocks`
# = N // 6 Gemma4ScannableBlock (scan axis at param_scan_axis) and `layers_remainder` = one
# block of N % 6 layers; gemma4.py Gemma4ScannableBlock holds `local_layers` (a nested scan of
# its 5 LOCAL_SLIDING layers, axis at param_scan_axis of the layer) and `global_layer`, and
# runs the local layers first, then the global one. The unscanned model
# (_init_sequential_generic) has layers_<lyr> with GEMMA4_ATTENTION_PATTERN[lyr % 6].)

GEMMA4_LAYERS = 14  # 2 blocks + 2 remainder layers


def _gemma4_global_shape(logical, shape) -> tuple:
    """The global layer's attention has its own head dim (gemma4's global_head_dim, here 2 * D),
    so its attention tensors differ in shape from the local layers' (as in MaxText 0.2.5)."""
    return tuple(2 * d if a == "kv" else d for a, d in zip(logical, shape))


@dataclasses.dataclass
class Gemma4Info:
    num_layers: int
    layout: str
    dtype: str
    items: pathlib.Path
    mtp: bool = False

    def overrides(self) -> list:
        return [f"load_parameters_path={self.items}", f"base_num_decoder_layers={self.num_layers}",
                "decoder_block=gemma4", "param_scan_axis=1"]


# Multi-token prediction (mtp_num_layers=1; maxtext 0.2.5 models.py builds the MTP layer from
# get_decoder_layers()[-1]): with scan_layers=true its transformer layer is a whole
# Gemma4ScannableBlock (local_layers: 5 local layers stacked at param_scan_axis, metadata axis
# "local_layers"; global_layer), with scan_layers=false one Gemma4DecoderLayer with its default
# arguments (a local layer). The MTP layer's own norms and projection are the same in both.
MTP = ("mtp_block", "mtp_layer_1")
MTP_LAYER = MTP + ("mtp_1_transformer_layer",)


def _mtp_leaves() -> list:
    return [(MTP + ("mtp_1_embedding_norm", "scale"), ("norm",), (E,)),
            (MTP + ("mtp_1_hidden_state_norm", "scale"), ("norm",), (E,)),
            (MTP + ("mtp_1_projection", "kernel"), ("mlp", "embed"), (2 * E, E)),
            (MTP + ("mtp_1_final_norm", "scale"), ("norm",), (E,))]


def _gemma4_state(n: int, dtype: str, mtp: bool = False):
    b = mf._Builder("layout-gemma4", dtype, mf.DEFAULT_MESH)
    pp = ("params", "params")
    params: dict = {}
    blocks, rem = n // 6, n % 6

    def add(path, logical, shape):
        mf._set(params, path, b.array(pp + path, logical, shape, None))

    add(("token_embedder", "embedding"), ("vocab", "embed_vocab"), (V, E))
    add(("decoder", "decoder_norm", "scale"), ("norm",), (E,))
    for path, logical, shape in _layer_leaves("dense"):
        lg = logical[:1] + ("layers", "local_layers") + logical[1:]
        add(("decoder", "scanned_blocks", "local_layers") + path, lg,
            shape[:1] + (blocks, 5) + shape[1:])
        gshape = _gemma4_global_shape(logical, shape)
        add(("decoder", "scanned_blocks", "global_layer") + path,
            logical[:1] + ("layers",) + logical[1:], gshape[:1] + (blocks,) + gshape[1:])
        if rem:
            add(("decoder", "layers_remainder", "local_layers") + path,
                logical[:1] + ("local_layers",) + logical[1:], shape[:1] + (rem,) + shape[1:])
        if mtp:
            add(MTP_LAYER + ("local_layers",) + path,
                logical[:1] + ("local_layers",) + logical[1:], shape[:1] + (5,) + shape[1:])
            add(MTP_LAYER + ("global_layer",) + path, logical, gshape)
    for path, logical, shape in _mtp_leaves() if mtp else ():
        add(path, logical, shape)
    return {"step": 0, "params": {"params": params}, "opt_state": {}}, b


def make_gemma4_checkpoint(layout: str, dtype: str, cache_dir, n: int = GEMMA4_LAYERS,
                           mtp: bool = False):
    use_ocdbt, use_zarr3 = mf.LAYOUTS[layout]
    cache_dir = pathlib.Path(cache_dir)
    tag = "-mtp" if mtp else ""
    final = cache_dir / f"layout-gemma4-{n}{tag}-{layout}-{dtype}-{_source_hash()}"
    items = final / "checkpoints" / "0" / "items"
    if not (items / "_METADATA").is_file():
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=cache_dir))
        try:
            state, b = _gemma4_state(n, dtype, mtp)
            mf._save(tmp / "x" / "checkpoints", 0, state, b.specs, mf.DEFAULT_MESH, use_ocdbt,
                     use_zarr3, mf.SMALL_CHUNK_BYTES)
            try:
                os.rename(tmp / "x", final)
            except OSError:
                if not (items / "_METADATA").is_file():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return Gemma4Info(n, layout, dtype, items, mtp)


def gemma4_unscanned_tree(n: int, mtp: bool = False) -> dict:
    out = {("token_embedder", "embedding"): (V, E), ("decoder", "decoder_norm", "scale"): (E,)}
    for g in range(n):
        for path, logical, shape in _layer_leaves("dense"):
            glob = g % 6 == 5 and g < n // 6 * 6
            out[("decoder", f"layers_{g}") + path] = \
                _gemma4_global_shape(logical, shape) if glob else shape
    if mtp:  # the unscanned MTP layer: one local layer
        for path, _, shape in _layer_leaves("dense"):
            out[MTP_LAYER + path] = shape
        out.update({path: shape for path, _, shape in _mtp_leaves()})
    return out


def gemma4_reference_unroll(info: Gemma4Info, pure_nnx: bool) -> dict:
    """Block b: local layer i -> layers_<6b + i>, the global layer -> layers_<6b + 5>;
    remainder local layer i -> layers_<6 * blocks + i>."""
    params = reference.restore(info.items)["params"]["params"]
    dec = params["decoder"]
    out_dec = {k: _cast(v) for k, v in dec.items()
               if k not in ("scanned_blocks", "layers_remainder")}
    local = mf.flatten(dec["scanned_blocks"]["local_layers"])
    glob = mf.flatten(dec["scanned_blocks"]["global_layer"])
    blocks = info.num_layers // 6
    for bi in range(blocks):
        for i in range(5):
            out_dec[f"layers_{6 * bi + i}"] = mf.unflatten(
                {p: reference._bf16(np.asarray(x)[:, bi, i]) for p, x in local.items()})
        out_dec[f"layers_{6 * bi + 5}"] = mf.unflatten(
            {p: reference._bf16(np.asarray(x)[:, bi]) for p, x in glob.items()})
    rem = mf.flatten(dec.get("layers_remainder", {}).get("local_layers", {}))
    for i in range(info.num_layers % 6):
        out_dec[f"layers_{6 * blocks + i}"] = mf.unflatten(
            {p: reference._bf16(np.asarray(x)[:, i]) for p, x in rem.items()})
    out = {k: _cast(v) for k, v in params.items() if k not in ("decoder", "mtp_block")}
    out["decoder"] = out_dec
    if info.mtp:  # the MTP block's local layer 0; its other local layers and global layer go
        mtp = mf.flatten(params["mtp_block"])
        flat = {}
        for p, x in mtp.items():
            if p[:3] == MTP_LAYER[1:] + ("local_layers",):
                flat[p[:2] + p[3:]] = reference._bf16(np.asarray(x)[:, 0])
            elif p[:3] != MTP_LAYER[1:] + ("global_layer",):
                flat[p] = reference._bf16(np.asarray(x))
        out["mtp_block"] = mf.unflatten(flat)
    return reference.decode_layout(out, pure_nnx)


__all__ += ["MTP_LAYER", "GEMMA4_LAYERS", "Gemma4Info", "make_gemma4_checkpoint", "gemma4_unscanned_tree",
            "gemma4_reference_unroll"]
