"""`unroll to_huggingface` end to end, one family per run, in the .venv-maxtext (Python 3.12) venv.

    python hf_driver.py <family> <workdir>      writes <workdir>/facts.json

1. trains a tiny model 2 steps with the released maxtext package (driver.train: cached);
2. exports its training state with unroll to_huggingface (weight_dtype float32), and has the
   real client load the folder: transformers in the Python 3.11 venv $UNROLL_HF_PYTHON
   (tests/hf/hf_client.py) computes logits on fixed token ids;
3. computes MaxText's own logits on the same ids: the scanned model built by MaxText
   (get_nnx_create_model_fn, dtype and weight_dtype float32), every parameter set from the
   training state as stored (no unroll on the way);
4. where MaxText's exporter maps the family (EXPORTER), runs it (`python -m
   maxtext.checkpoint_conversion.to_huggingface`, its param-only input written by unroll, both
   layouts, both dtypes) and unroll to_huggingface on the same input, and records whether every
   tensor is the same, byte for byte; where it does not, records what it says.

The test (test_hf.py) asserts on the JSON. Runs with DECOUPLE_GCLOUD=TRUE JAX_PLATFORMS=cpu."""
from __future__ import annotations

import json
import os
import pathlib
import struct
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE))
import driver  # noqa: E402

TOKENS = [1, 17, 42, 99, 5, 63, 7, 11, 2, 30, 64, 90, 3, 8, 120, 77]
HF_CLIENT = HERE.parent / "hf" / "hf_client.py"

# family -> the model's keys (training, conversion and export alike); Llama's and Mistral's
# Hugging Face architectures, MaxText's llama2 and mistral decoder blocks.
FAMILIES = {
    # llama2's decoder block, model_name "default": MaxText's RotaryEmbedding (halves)
    "llama2": driver.FAMILIES["llama2"],
    # LLaMARotaryEmbedding (interleaved pairs) with Llama 3.1's frequency scaling
    "llama3.1": driver.TINY + ["model_name=llama3.1-8b", "override_model_config=true",
                               "base_num_decoder_layers=2"],
    "mistral": driver.TINY + ["model_name=mistral-7b", "override_model_config=true",
                              "base_num_decoder_layers=2"],
    # Qwen3 (query and key norms) and Qwen2.5 (query, key and value biases), untied
    "qwen3": driver.TINY + ["model_name=qwen3-0.6b", "override_model_config=true",
                            "base_num_decoder_layers=2", "logits_via_embedding=false"],
    "qwen2.5": driver.TINY + ["model_name=qwen2.5-1.5b", "override_model_config=true",
                              "base_num_decoder_layers=2"],
    # OLMo 3: post-norm, global query and key norms, 3 sliding-window layers then a global
    # one, YaRN (the suite's olmo3 training state, shared with test_maxtext.py)
    "olmo3": driver.FAMILIES["olmo3"],
    # Gemma 3: norms stored plus one, the embedding stored scaled, post-norms, five
    # sliding-window layers then a global one (the suite's gemma3 training state: 7 layers,
    # a window of 4 positions, so that the 16 tokens cross it)
    "gemma3": driver.FAMILIES["gemma3"],
    # Gemma 2: a MaxText layer is a pair (sliding-window, then global), soft-capped attention
    # and logits; 2 MaxText layers, 4 Hugging Face ones
    "gemma2": driver.TINY + ["model_name=gemma2-2b", "override_model_config=true",
                             "base_num_decoder_layers=2", "sliding_window_size=4"],
    # Gemma 4, dense (gemma4-31b's shape): one block of 5 sliding-window layers and a global
    # one whose key is also its value (share_kv_projections), of its own head dim and key
    # heads, partial RoPE; 6 layers, as transformers makes the last layer a global one
    "gemma4-31b": driver.TINY + ["model_name=gemma4-31b", "override_model_config=true",
                                 "base_num_decoder_layers=6", "global_head_dim=16",
                                 "global_num_kv_heads=1", "sliding_window_size=4"],
    # Qwen3-MoE (qwen3-30b-a3b's shape): 4 routed experts, 2 a token, top-k renormalized;
    # each expert's kernels a tensor of their own
    "qwen3-moe": driver.TINY + ["model_name=qwen3-30b-a3b", "override_model_config=true",
                                "base_num_decoder_layers=2", "num_experts=4",
                                "num_experts_per_tok=2", "base_moe_mlp_dim=16"],
    # Mixtral (mixtral-8x7b's shape): Mistral's attention, 4 routed experts, 2 a token (a
    # model all of experts: MaxText wants its mlp and expert sizes equal)
    "mixtral": driver.TINY + ["model_name=mixtral-8x7b", "override_model_config=true",
                              "base_num_decoder_layers=2", "num_experts=4",
                              "num_experts_per_tok=2", "base_moe_mlp_dim=64"],
    # DeepSeek-V3 (deepseek3-671b's settings, the suite's tiny DeepSeek widths): multi-head
    # latent attention with YaRN, 3 dense layers then 2 MoE layers of 4 routed experts and a
    # shared one, the sigmoid router and its score-correction bias (trained at a rate that
    # makes it change which experts are picked: driver's deepseek-routed-bias). The dense
    # layer count and the query and key head dims
    # are deepseek3-671b's: MaxText's exporter takes the first from its table whatever the
    # model's, and its query shape from the table's head dims (transformers derives
    # qk_head_dim once, before the exporter's override)
    "deepseek3": [a for a in driver.DEEPSEEK if not a.startswith(
        ("model_name=", "base_num_decoder_layers=", "first_num_dense_layers=",
         "qk_nope_head_dim=", "qk_rope_head_dim=", "v_head_dim="))] + [
        "model_name=deepseek3-671b", "base_num_decoder_layers=5", "first_num_dense_layers=3",
        "qk_nope_head_dim=128", "qk_rope_head_dim=64", "v_head_dim=128", "routed_bias=true",
        "routed_bias_update_rate=0.5"],
    # DeepSeek-V2 (deepseek2-16b's settings: the softmax router, a full-rank query, 2 shared
    # experts), the same tiny widths; 1 dense layer, then 2 MoE layers
    "deepseek2": [a for a in driver.DEEPSEEK if not a.startswith(
        ("model_name=", "qk_nope_head_dim=", "qk_rope_head_dim=", "v_head_dim=",
         "q_lora_rank="))] + [
        "model_name=deepseek2-16b", "qk_nope_head_dim=128", "qk_rope_head_dim=64",
        "v_head_dim=128"],
    # gpt-oss (gpt-oss-20b's settings, the suite's tiny gpt-oss training state): blocks of a
    # sliding-window layer and a full one, attention biases and sinks, YaRN, 4 routed experts
    # with biases, the gate and up kernels interleaved into one tensor
    "gpt-oss": driver.FAMILIES["gpt-oss"],
    # Gemma 4 with experts (gemma4-26b's settings, the suite's tiny widths): 4 routed experts,
    # 2 a token, beside the shared one; 6 layers (the suite's 7 end on a sliding layer that
    # transformers would make global)
    "gemma4-26b": [a for a in driver.FAMILIES["gemma4"]
                   if not a.startswith("base_num_decoder_layers=")] + ["base_num_decoder_layers=6"],
    # DeepSeek-V3.2 (deepseek3.2-671b's settings, as deepseek3 above but no router bias): the
    # sparse-attention indexer in every layer, keeping 4 of the 16 tokens (so that it decides);
    # its heads and head dim are the model's, as MaxText's exporter takes them from its table
    "deepseek3.2": [a for a in driver.DEEPSEEK if not a.startswith(
        ("model_name=", "base_num_decoder_layers=", "first_num_dense_layers=",
         "qk_nope_head_dim=", "qk_rope_head_dim=", "v_head_dim="))] + [
        "model_name=deepseek3.2-671b", "base_num_decoder_layers=5", "first_num_dense_layers=3",
        "qk_nope_head_dim=128", "qk_rope_head_dim=64", "v_head_dim=128", "routed_bias=false",
        "indexer_topk=4"],
    # Llama 4 (llama4-17b-16e's settings, the suite's tiny llama4 training state): every 4th
    # layer without RoPE (temperature-tuned), the others' attention chunked by 8 positions (so
    # that the 16 tokens cross a chunk), a routed expert a token beside the shared one
    "llama4": driver.FAMILIES["llama4"],
    # Gemma 3 with its vision tower (use_multimodal, the suite's tiny gemma3-multimodal
    # training state: 2 SigLIP layers 16 wide, 896 x 896 images): the tower and projector are
    # held to MaxText's by the soft tokens both compute from one image
    "gemma3-multimodal": driver.FAMILIES["gemma3-multimodal"],
    # Qwen3-Next (qwen3-next-80b-a3b's settings, the suite's tiny qwen3-next training state):
    # a block of 3 linear-attention (Gated DeltaNet) layers and a full-attention one with an
    # output gate, then 2 remainder layers; routed experts and a gated shared expert
    "qwen3-next": driver.FAMILIES["qwen3-next"],
    # Qwen3.5 (qwen3.5-35b-a3b's settings, tiny): two blocks of 3 linear-attention layers and
    # a full-attention one; 2 key heads of 4 value heads each, keys wider than values, so that
    # the fused in_proj_qkvz and in_proj_ba are cut into pieces of unequal sizes; the experts
    # stacked. head_dim 16: a quarter of it rotates, in MRoPE sections that make its 2 pairs.
    # DeepSeek-V4 (deepseek4-tiny's settings): 3 hash-routed layers (the token's id picks its
    # experts: tid2eid, set to a pattern of the 4 experts), then a block of a heavily
    # compressed layer (128) and a compressed sparse one (4) with its indexer, as
    # deepseek4-284b's compress_ratios run (the suite's deepseek4 has 2 hash layers, whose
    # next layer MaxText's exporter's shape table would take for a compressed sparse one);
    # hyper-connections of 4 streams, attention sinks, the grouped low-rank output
    "deepseek4-hash3": [a for a in driver.FAMILIES["deepseek4"] if not a.startswith(
        ("base_num_decoder_layers=", "first_num_hash_layers=", "compress_ratios="))] + [
        "base_num_decoder_layers=5", "first_num_hash_layers=3", "compress_ratios=[0,0,4,128,4]"],
    "qwen3.5": [a for a in driver.TINY if not a.startswith(("head_dim=", "base_mlp_dim="))] + [
        "head_dim=16", "base_mlp_dim=16", "model_name=qwen3.5-35b-a3b",
        "override_model_config=true", "base_num_decoder_layers=8", "num_experts=4",
        "num_experts_per_tok=2", "base_moe_mlp_dim=16", "gdn_num_value_heads=4",
        "gdn_num_key_heads=2", "gdn_key_head_dim=8", "gdn_value_head_dim=4", "gdn_chunk_size=8",
        "mrope_section=[1,1,0]"],
}
for _f, _keys in FAMILIES.items():
    driver.ALL.setdefault(_f, _keys)
# the hash layers' token-to-expert tables and the router biases set (driver.edited), so that a
# table or bias lost or misplaced changes the logits
driver.EDITS["deepseek4-hash3"] = [
    *(f"nnx_aux/model/decoder/layers_{i}/mlp/MoeBlock_0/tid2eid" for i in range(3)),
    *(f"nnx_aux/model/decoder/scanned_blocks/layers_{i}/mlp/MoeBlock_0/gate/bias"
      for i in range(2))]

# The families MaxText 0.2.5's exporter maps (its PARAM_MAPPING); the others it refuses
# (olmo3 too: its PARAM_MAPPING and HOOK_FNS name olmo3-7b, its HF_SHAPE does not, "Mappings
# not found for model: olmo3-7b").
EXPORTER = {"llama3.1", "qwen3", "qwen2.5", "gemma3", "gemma2", "qwen3-moe", "mixtral",
            "deepseek3", "deepseek2", "gpt-oss", "deepseek3.2", "deepseek4-hash3", "gemma4-31b",
            "gemma4-26b", "qwen3.5", "gemma3-multimodal"}
# Families whose model_name MaxText's exporter's tables know only at full size (or not at
# all), exported by its own code with the tiny model's config (the config.json of unroll's
# float32 export, which the client has loaded) in them (hf_exporter_tiny.py).
EXPORTER_TINY = {"deepseek4-hash3", "gemma4-31b", "gemma4-26b", "qwen3.5", "gemma3-multimodal"}
# Families MaxText's exporter maps but cannot export here, and what it says: its Qwen3-Next
# config table reads a key transformers 5's Qwen3NextConfig no longer keeps (given it back, as
# hf_exporter_tiny.py does, its shape table still lacks names: "argument of type 'NoneType' is
# not iterable").
EXPORTER_FAILS = {"qwen3-next": "KeyError: 'full_attention_interval'"}
# Layouts of a family MaxText's exporter maps but fails on, and what it says: a scanned
# DeepSeek's router bias is stacked on axis 0 (a non-parameter variable: nnx.StateAxes puts
# them there), which the exporter slices on param_scan_axis like a parameter.
EXPORTER_LAYOUT_FAILS = {("deepseek3", "scanned"): "cannot reshape array of size 2 into shape (4,)",
                         # its scanned DeepSeek-V4 table: a kernel [groups, in, rank] unstacked
                         # into a shape it does not have
                         ("deepseek4-hash3", "scanned"):
                             "cannot reshape array of shape (4, 16) (size 64) into shape [32 16]"}


def unroll(*args: str) -> dict:
    t0 = time.monotonic()
    p = subprocess.run([os.environ["UNROLL_BIN"], *args], capture_output=True, text=True)
    return {"rc": p.returncode, "stderr": p.stderr.strip()[-2000:],
            "seconds": time.monotonic() - t0}


def export(family: str, source: str, items: str, out: pathlib.Path, dtype: str) -> dict:
    res = unroll("to_huggingface", driver.BASE_YML, f"{source}={items}",
                 f"base_output_directory={out}", f"weight_dtype={dtype}", *FAMILIES[family],
                 "--override_model_architecture", f"--hf_model_path={driver.hf_tokenizer()}",
                 "-q")
    res["folder"] = str(out)
    res["files"] = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    return res


def verify(family: str, source: str, items: str, folder: str, dtype: str) -> dict:
    """unroll verify of a folder against the checkpoint it came from (the export's config)."""
    res = unroll("verify", items, folder, driver.BASE_YML, f"{source}={items}",
                 f"weight_dtype={dtype}", *FAMILIES[family])
    return res


def image(family: str, work: pathlib.Path) -> pathlib.Path | None:
    """A multimodal family's test image: fixed pseudo-random pixel values in [-1, 1] (as the
    models take them, after preprocessing), [height, width, channels], saved as .npy."""
    if "use_multimodal=true" not in FAMILIES[family]:
        return None
    import numpy as np
    side = int(driver._config(family).image_size_for_vit)
    path = work / "image.npy"
    np.save(path, np.random.RandomState(0).uniform(-1, 1, (side, side, 3)).astype(np.float32))
    return path


def hf_logits(folder: str, work: pathlib.Path, img: pathlib.Path | None = None) -> dict:
    """What transformers computes from the folder (tests/hf/hf_client.py)."""
    out = work / "hf_logits.json"
    p = subprocess.run([os.environ["UNROLL_HF_PYTHON"], str(HF_CLIENT), folder,
                        json.dumps(TOKENS), str(out), *([str(img)] if img else [])],
                       capture_output=True, text=True)
    if p.returncode != 0 or not out.is_file():
        return {"error": f"client rc {p.returncode}: {p.stderr[-2000:]}"}
    return json.loads(out.read_text())


def maxtext_logits(family: str, items: pathlib.Path, img: pathlib.Path | None = None) -> dict:
    """MaxText's own forward pass of the scanned model, float32, its parameters set from the
    training state as stored (read with TensorStore); with an image, also its soft tokens as
    MaxText's vision encoder and projector compute them."""
    import jax.numpy as jnp
    import numpy as np
    import tensorstore as ts
    from flax import nnx
    from maxtext.utils import model_creation_utils
    from maxtext.layers.moe import MoEBiasVar, Tid2EidVar
    cfg = driver._config(family, "scan_layers=true", "dtype=float32", "weight_dtype=float32")
    model = model_creation_utils.get_nnx_create_model_fn(cfg)()
    n = 0
    # the parameters (params/params/P), and the router's bias and DeepSeek-V4's token-to-expert
    # tables (nnx_aux/model/P: not nnx.Params, kept apart in the training state); zarr3 as
    # MaxText saves, zarr (v2) where driver.edited saved them again
    for kind, prefix in ((nnx.Param, "params.params."), (MoEBiasVar, "nnx_aux.model."),
                         (Tid2EidVar, "nnx_aux.model.")):
        state = nnx.state(model, kind)
        for key_path, var in nnx.to_flat_state(state):
            name = prefix + ".".join(str(k) for k in key_path)
            for fmt in ("zarr3", "zarr"):
                try:
                    arr = ts.open({"driver": fmt, "kvstore": {"driver": "ocdbt",
                                                              "base": f"file://{items}/"},
                                   "path": name + "/"}).result().read().result()
                    break
                except ValueError:
                    if fmt == "zarr":
                        raise
            var.set_value(jnp.asarray(arr, var.get_value().dtype))
            n += 1
        nnx.update(model, state)
    t = jnp.array([TOKENS], jnp.int32)
    logits = model(decoder_input_tokens=t,
                   decoder_positions=jnp.arange(t.shape[1], dtype=jnp.int32)[None],
                   decoder_segment_ids=jnp.ones_like(t), enable_dropout=False)
    logits = np.asarray(logits[0] if isinstance(logits, tuple) else logits, np.float32)
    out = {"logits": logits.reshape(-1).tolist(), "shape": list(logits.shape[-2:]),
           "params_set": n}
    if img is not None:
        feats = model.vision_encoder(jnp.asarray(np.load(img))[None], deterministic=True)[0]
        feats = np.asarray(feats, np.float32)
        feats = feats.reshape(-1, feats.shape[-1])
        out["image_features"] = feats.reshape(-1).tolist()
        out["image_features_shape"] = list(feats.shape)
    return out


def maxtext_exporter(family: str, params: str, scanned: bool, out: pathlib.Path,
                     dtype: str, tiny_config: pathlib.Path) -> dict:
    module = ([str(HERE / "hf_exporter_tiny.py"), f"--tiny_config={tiny_config}"]
              if family in EXPORTER_TINY
              else ["-m", "maxtext.checkpoint_conversion.to_huggingface"])
    cmd = [sys.executable, *module, driver.BASE_YML,
           *FAMILIES[family], *driver.COMMON, f"load_parameters_path={params}",
           f"base_output_directory={out}", f"scan_layers={str(scanned).lower()}",
           f"weight_dtype={dtype}", "--override_model_architecture",
           f"--hf_model_path={driver.hf_tokenizer()}"]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=out.parent)
    err = [line for line in p.stderr.splitlines() if "Error" in line or "error" in line]
    return {"rc": p.returncode, "seconds": time.monotonic() - t0, "folder": str(out),
            "error": (err[-1] if err else p.stderr.strip()[-300:]) if p.returncode else ""}


def tensors(folder: str) -> dict:
    """name -> (dtype, shape, bytes) of every tensor of a folder's shards."""
    out = {}
    for f in sorted(pathlib.Path(folder).glob("*.safetensors")):
        b = f.read_bytes()
        n = struct.unpack("<Q", b[:8])[0]
        header = json.loads(b[8:8 + n])
        for k, v in header.items():
            if k != "__metadata__":
                s, e = v["data_offsets"]
                out[k] = (v["dtype"], v["shape"], b[8 + n + s:8 + n + e])
    return out


def compare(a: str, b: str) -> dict:
    ta, tb = tensors(a), tensors(b)
    return {"names_equal": sorted(ta) == sorted(tb), "n": len(ta),
            "differ": sorted(k for k in ta if k in tb and ta[k] != tb[k])}


def main() -> None:
    family, work = sys.argv[1], pathlib.Path(sys.argv[2])
    items = driver.edited(family, driver.train(family))
    facts: dict = {"family": family, "train": str(items)}
    # the training state, exported in float32: the client against MaxText's forward pass
    facts["export"] = export(family, "load_full_state_path", str(items), work / "hf-f32",
                             "float32")
    if facts["export"]["rc"] == 0:
        facts["verify"] = verify(family, "load_full_state_path", str(items),
                                 facts["export"]["folder"], "float32")
        facts["hf"] = hf_logits(facts["export"]["folder"], work, image(family, work))
        facts["config"] = json.loads((work / "hf-f32" / "config.json").read_text())
    facts["maxtext"] = maxtext_logits(family, items, image(family, work))
    # MaxText's exporter on param-only input (it reads no training state), both layouts
    facts["exporter"] = {}
    for layout, unrolled in (("scanned", "false"), ("unscanned", "true")):
        p = driver.run_unroll(family, items, work, f"params-{layout}", f"force_unroll={unrolled}")
        if p["rc"] != 0:
            facts["exporter"][layout] = {"params": p}
            continue
        for dtype in ("bfloat16", "float32") if family in EXPORTER else ("bfloat16",):
            key = f"{layout}-{dtype}"
            ours = export(family, "load_parameters_path", p["path"], work / f"unroll-{key}",
                          dtype)
            # where MaxText's exporter refuses or fails the family, once is enough to say so
            theirs = (maxtext_exporter(family, p["path"], layout == "scanned",
                                       work / f"maxtext-{key}", dtype, work / "hf-f32")
                      if family in EXPORTER or layout == "scanned" else None)
            v = {"unroll": ours, "maxtext": theirs}
            if ours["rc"] == 0:
                v["verify"] = verify(family, "load_parameters_path", p["path"], ours["folder"],
                                     dtype)
            if ours["rc"] == 0 and theirs is not None and theirs["rc"] == 0:
                v["compare"] = compare(ours["folder"], theirs["folder"])
                v["verify_maxtext"] = verify(family, "load_parameters_path", p["path"],
                                             theirs["folder"], dtype)
            facts["exporter"][key] = v
    (work / "facts.json").write_text(json.dumps(facts))


if __name__ == "__main__":
    main()
