"""One family of the MaxText suite, end to end, in the .venv-maxtext (Python 3.12) venv.

    python driver.py <family> <workdir>      writes <workdir>/facts.json

1. trains a tiny model 2 steps with the released maxtext package (synthetic data, scanned layers),
   cached under $UNROLL_MAXTEXT_CACHE keyed by the maxtext version and a hash of the overrides;
2. converts its step-1 training state with unroll ($UNROLL_BIN), unscanned (force_unroll=true) and
   scanned param-only (the reference for inference: the same bf16 values, only the layout differs);
3. compares the unscanned output's tree (paths, shapes) with the `scan_layers=false` model of the
   same package (`nnx.eval_shape` of what MaxText's inference builds);
4. reads what scan_layers each output records as MaxText reads it back (load_checkpoint_metadata),
   and decodes fixed token ids with MaxText's inference engine (MaxEngine: load_params, prefill,
   insert, generate) from both outputs, the unscanned one with no scan_layers flag, and reports
   tokens and logits;
5. runs MaxText's own generate_param_only_checkpoint on the same state (families of
   MAXTEXT_OUTCOME; cached like the training) and reports what its output is: equal to unroll's
   bit for bit, or how it differs, its NaN-filled groups, and whether MaxEngine loads it.

The test (test_maxtext.py) asserts on the JSON; this script only gathers facts, so that a failure
names what differs. Runs with DECOUPLE_GCLOUD=TRUE JAX_PLATFORMS=cpu (set here).
"""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

os.environ.setdefault("DECOUPLE_GCLOUD", "TRUE")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# MaxText's training sets it; its checkpoints restore only with it (rng key shapes).
os.environ.setdefault("JAX_DEFAULT_PRNG_IMPL", "unsafe_rbg")

import maxtext  # noqa: E402

PKG = pathlib.Path(maxtext.__file__).parent
BASE_YML = str(PKG / "configs" / "base.yml")

# Shared by every run: tiny, CPU, synchronous checkpoints, synthetic data.
COMMON = [
    "dataset_type=synthetic", "steps=2", "per_device_batch_size=1", "max_target_length=16",
    "max_prefill_predict_length=8", "async_checkpointing=false", "hardware=cpu",
    "attention=dot_product", "skip_jax_distributed_system=true", "vocab_size=128",
    "enable_checkpointing=true", "checkpoint_period=1",
]
TINY = ["base_emb_dim=32", "base_num_query_heads=4", "base_num_kv_heads=2", "base_mlp_dim=64",
        "head_dim=8"]

def _cache_root() -> pathlib.Path:
    root = os.environ.get("UNROLL_MAXTEXT_CACHE") or os.path.join(
        os.environ.get("UNROLL_FIXTURE_CACHE", "/tmp/unroll-fixtures"), "maxtext")
    return pathlib.Path(root)


# family -> model overrides (used for training, conversion and inference alike).
FAMILIES = {
    "llama2": TINY + ["base_num_decoder_layers=2"],
    "gemma3": TINY + ["model_name=gemma3-4b", "base_num_decoder_layers=7", "override_model_config=true",
                      "sliding_window_size=4"],
    # 7 layers: one block (5 local layers, nested scan, + 1 global) and a remainder of 1; the
    # global layer's head dim differs from the local ones' (global_head_dim).
    "gemma4": TINY + ["model_name=gemma4-26b", "override_model_config=true",
                      "base_num_decoder_layers=7", "global_head_dim=16", "global_num_kv_heads=1",
                      "num_experts=4", "num_experts_per_tok=2", "base_moe_mlp_dim=16",
                      "sliding_window_size=4"],
    # 6 layers: one block of 3 linear-attention + 1 full-attention layer, and a remainder of 2.
    "qwen3-next": TINY + ["model_name=qwen3-next-80b-a3b", "override_model_config=true",
                          "base_num_decoder_layers=6", "num_experts=4", "num_experts_per_tok=2",
                          "base_moe_mlp_dim=16", "gdn_num_value_heads=2", "gdn_num_key_heads=2",
                          "gdn_key_head_dim=8", "gdn_value_head_dim=8", "gdn_chunk_size=8"],
}

# DeepSeek: MLA + MoE, 1 dense layer then 2 MoE layers. MaxText's MLA decode cache (the default
# mla_naive_kvcache=true) is the plain attention cache, sized by `head_dim` for keys and values
# alike, while MLA's prefill writes keys of qk_nope_head_dim + qk_rope_head_dim and values of
# v_head_dim: MaxEngine.insert fails ("update shape ... (8, 4, 1, 16) for operand shape
# (8, 4, 1, 8)") unless head_dim == qk_nope_head_dim + qk_rope_head_dim == v_head_dim.
DEEPSEEK = [a for a in TINY if not a.startswith("head_dim=")] + [
    "model_name=deepseek3-tiny", "override_model_config=true", "head_dim=16",
    "base_num_decoder_layers=3", "first_num_dense_layers=1", "num_experts=4",
    "num_experts_per_tok=2", "base_moe_mlp_dim=16", "q_lora_rank=8", "kv_lora_rank=8",
    "qk_nope_head_dim=8", "qk_rope_head_dim=8", "v_head_dim=16", "base_num_kv_heads=4"]
FAMILIES["deepseek"] = DEEPSEEK + ["routed_bias=false"]
# The aux-loss-free router bias (a MoEBiasVar, not an nnx.Param): stored under nnx_aux in the
# training state, stacked on axis 0 (nnx.StateAxes {Param: param_scan_axis, ...: 0}). The update
# rate (base.yml: 0, the bias then stays zero) makes the trained bias non-zero and large enough
# to change which experts are picked.
FAMILIES["deepseek-routed-bias"] = DEEPSEEK + ["routed_bias=true", "routed_bias_update_rate=0.5"]

# Multi-token prediction (mtp_num_layers=1; models.py builds the MTP layer from
# get_decoder_layers()[-1]). DeepSeek: the MoE layer class whether scanned or not, so the
# scanned and unscanned MTP subtrees are the same. gemma4 (one block of 6, no remainder): the
# scanned model's MTP layer is a whole Gemma4ScannableBlock (5 scanned local layers + 1 global),
# the unscanned model's a single local Gemma4DecoderLayer.
FAMILIES["deepseek-mtp"] = DEEPSEEK + ["routed_bias=false", "mtp_num_layers=1"]
FAMILIES["gemma4-mtp"] = [a for a in FAMILIES["gemma4"] if not a.startswith("base_num_decoder_layers=")] + [
    "base_num_decoder_layers=6", "mtp_num_layers=1"]
# MaxText 0.2.5 cannot decode a model with an MTP block: Transformer.__call__ runs the block in
# every mode (models.py), but MultiTokenPredictionLayer builds its transformer layer with
# MODEL_MODE_TRAIN (multi_token_prediction.py), so that layer's attention has no KV cache and
# MaxEngine's prefill fails in it (attentions.py update_kv_caches: self.KVCache_0 is None), from
# the scanned param-only output as from the unscanned one. The block only sows training losses
# (it never changes the logits), so the families are decoded with mtp_num_layers=0 (the main
# model; the checkpoint's mtp_block is then not loaded) and the failure is recorded.
MTP = {"deepseek-mtp", "gemma4-mtp"}
MTP_DECODE_ERROR = "TypeError: 'NoneType' object is not callable"

# DeepSeek Engram (engram_layers): 6 layers, 3 dense, Engram on layers 1 (dense) and 3 (MoE).
# The scanned model (nnx_decoders.py _init_scanned_deepseek_engram) holds scanned chunks
# decoder/dense_layers_0_0, dense_layers_2_2, moe_layers_4_5 (named by absolute layer index,
# stacked on param_scan_axis) around unscanned decoder/dense_layers_engram_1 and
# moe_layers_engram_3, the only layers built with a layer_idx and so the only ones with Engram
# (engram/, engram_layer_norm/). The scan_layers=false model (_init_sequential_deepseek) is
# decoder/dense_layers_<i>, moe_layers_<i - 3>, and builds no layer with a layer_idx: it has
# no Engram at all. Engram needs a Hugging Face tokenizer (deepseek.py: AutoTokenizer
# .from_pretrained(tokenizer_path)); hf_tokenizer() builds a 128-word one with `tokenizers`.
ENGRAM_TOKENIZER_WORDS = 128


def _tokenizer_dir() -> pathlib.Path:
    return _cache_root() / f"hf-tokenizer-wordlevel-{ENGRAM_TOKENIZER_WORDS}"


FAMILIES["deepseek-engram"] = [a for a in DEEPSEEK if not a.startswith(
    ("base_num_decoder_layers=", "first_num_dense_layers="))] + [
    "routed_bias=false", "base_num_decoder_layers=6", "first_num_dense_layers=3",
    "mhc_expansion_rate=2",
    "engram_layers=[1,3]", "engram_num_heads=2", "engram_head_dim=8",
    "engram_vocab_bases=[31,37]", "tokenizer_type=huggingface", "hf_access_token=unused",
    f"tokenizer_path={_tokenizer_dir()}"]
# MaxText 0.2.5 cannot train it on CPU: CompressedTokenizer (engram.py) builds its lookup table
# with jnp.array while the model is initialised inside a jit, and the training step then meets
# the leaked tracer (UNTRAINABLE, asserted from the training log). The state converted is
# therefore what MaxText's own code writes from its own modules (engram_state): the
# scan_layers=true model initialised eagerly (outside any jit), saved as a param-only decode
# checkpoint by generate_param_only_checkpoint's own _save_decode_checkpoint_nnx, and
# converted from load_parameters_path. There the Engram layers' value projections are zeroed:
# Engram's output is gate * value + conv(gate * value) (engram.py), exactly 0 with value = 0,
# so the scanned model with Engram and the unscanned one without compute the same function and
# their decodes compare every other weight.
UNTRAINABLE = {"deepseek-engram": "jax.errors.UnexpectedTracerError: Encountered an unexpected "
                                  "tracer."}
# MaxEngine on the scanned model (decode(): the first line of what it raises)
UNTRAINABLE_DECODE_ERROR = "UnexpectedTracerError: Encountered an unexpected tracer."
ENGRAM_VALUE_PROJ = [f"decoder/{layer}/engram/value_proj/{p}"
                     for layer in ("dense_layers_engram_1", "moe_layers_engram_3")
                     for p in ("kernel", "bias")]


def hf_tokenizer() -> pathlib.Path:
    """A word-level Hugging Face tokenizer of ENGRAM_TOKENIZER_WORDS tokens (<pad>, <unk>, w2,
    ...), built with the `tokenizers` package and saved as transformers' AutoTokenizer reads it,
    once per cache (the training cache key names its path)."""
    out = _tokenizer_dir()
    if (out / "tokenizer.json").is_file():
        return out
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {"<pad>": 0, "<unk>": 1,
             **{f"w{i}": i for i in range(2, ENGRAM_TOKENIZER_WORDS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tmp = pathlib.Path(str(out) + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>"
                            ).save_pretrained(str(tmp))
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(tmp, out)
    except OSError:  # another driver built it first
        shutil.rmtree(tmp, ignore_errors=True)
    return out


# llama4: blocks of 4 (inhomogeneous_layer_cycle_interval; every 4th layer without RoPE), MoE.
FAMILIES["llama4"] = TINY + ["model_name=llama4-17b-16e", "override_model_config=true",
                             "base_num_decoder_layers=4", "num_experts=4", "num_experts_per_tok=1",
                             "base_moe_mlp_dim=16", "chunk_attn_window_size=8"]
# Multimodal (use_multimodal=true): the model gains vision_encoder/ beside the decoder. Both
# vision encoders (gemma3's Gemma3VisionEncoderLayer, llama4's Llama4VisionModel) build their
# num_hidden_layers_for_vit layers as separate submodules (encoderblock_<i>, layers_<i>) whether
# or not scan_layers is set (0.2.5 has no scanned vision encoder), so only the decoder is
# scanned. train.py compiles its step ahead with get_shaped_batch's dummy image, but the
# synthetic batches are text only (no "images"; the step passes images only when the batch has
# them): the vision encoder is saved, not run. Tiny vision towers: 2 layers of width 16.
VIT = ["use_multimodal=true", "hidden_size_for_vit=16", "num_hidden_layers_for_vit=2",
       "num_attention_heads_for_vit=2"]
# gemma3: that dummy image is 896 x 896 whatever image_size_for_vit says
# (processor_gemma3.get_dummy_image_shape_for_init_gemma3), so the model keeps its 896: with
# 224 the ahead compile fails (TypeError: add got incompatible shapes for broadcasting:
# (1, 256, 16), (1, 4096, 16), the position embedding against the patches).
FAMILIES["gemma3-multimodal"] = FAMILIES["gemma3"] + VIT + ["intermediate_size_for_vit=32"]
# llama4: pixel shuffle (ratio 0.5) turns hidden x 4 channels into the projector's input.
FAMILIES["llama4-multimodal"] = FAMILIES["llama4"] + VIT + [
    "intermediate_size_for_vit=64", "projector_input_dim_for_vit=16",
    "projector_output_dim_for_vit=16", "vision_output_dim_for_vit=16"]

MULTIMODAL = {"gemma3-multimodal", "llama4-multimodal"}

# gpt-oss: blocks of 2 (sliding, full attention), MoE with biases, attention sinks.
FAMILIES["gpt-oss"] = TINY + ["model_name=gpt-oss-20b", "override_model_config=true",
                              "base_num_decoder_layers=4", "num_experts=4", "num_experts_per_tok=2",
                              "base_moe_mlp_dim=16", "sliding_window_size=4"]

# olmo3: blocks of 4 (3 sliding-window layers, then 1 full-attention layer).
FAMILIES["olmo3"] = TINY + ["model_name=olmo3-7b", "override_model_config=true",
                            "base_num_decoder_layers=4", "sliding_window_size=4"]

# Pipeline parallelism: trained on 2 (forced host) devices with 2 stages of 1 layer, repeated
# twice; the decode model is the plain one (llama2, 4 layers).
FAMILIES["pipeline"] = TINY + ["base_num_decoder_layers=4"]
FAMILIES["pipeline-remainder"] = TINY + ["base_num_decoder_layers=6"]
FAMILIES["deepseek-pipeline"] = [a for a in DEEPSEEK if not a.startswith("base_num_decoder_layers=")] + [
    "base_num_decoder_layers=5", "routed_bias=false"]
PIPELINE = {"pipeline", "pipeline-remainder", "deepseek-pipeline"}
# family -> (keys for training and conversion only, devices): how the state was trained. The
# decode model runs unpipelined on one device.
PIPE2 = ["ici_pipeline_parallelism=2", "ici_fsdp_parallelism=1", "num_layers_per_pipeline_stage=1",
         "num_pipeline_microbatches=2"]
PARALLEL = {"pipeline": (PIPE2, 2),
            # 6 layers, the first 4 pipelined (2 stages, repeated twice), then a scanned group of
            # 2 run after the pipeline (decoder/layers_outside_pipeline)
            "pipeline-remainder": (PIPE2 + ["pipeline_parallel_layers=4"], 2),
            # DeepSeek, 1 dense layer and 4 MoE layers: the dense layers and the first 2 MoE
            # layers (decoder/moe_layers_outside_pipeline) run before the pipeline, which holds
            # the last 2 MoE layers (2 stages of 1)
            "deepseek-pipeline": (PIPE2 + ["pipeline_parallel_layers=2"], 2),
            "fsdp-tensor": (["ici_fsdp_parallelism=2", "ici_tensor_parallelism=2"], 4)}
# 4-device fsdp x tensor sharding: every array saved in shards over a 2 x 2 mesh.
FAMILIES["fsdp-tensor"] = TINY + ["base_num_decoder_layers=2"]

PENDING: dict = {}
# deepseek4: 2 unscanned hash-routed layers (Tid2EidVar) before one scanned block of 2. The
# scanned block builds its layers with compress ratios 128 then 4 whatever compress_ratios says
# (deepseek4.py), the unscanned model from compress_ratios: they agree only when the list
# follows that pattern.
FAMILIES["deepseek4"] = [
    "model_name=deepseek4-tiny", "override_model_config=true", "base_emb_dim=32",
    "base_num_decoder_layers=4", "first_num_hash_layers=2", "compress_ratios=[0,0,128,4]",
    "num_experts=4", "num_experts_per_tok=2", "base_moe_mlp_dim=16", "base_mlp_dim=16",
    "indexer_topk=4", "sliding_window_size=4", "head_dim=16", "qk_rope_head_dim=16",
    "indexer_head_dim=16", "q_lora_rank=8", "o_lora_rank=8"]

# Non-parameter variables written into the trained state before conversion, so that a loaded
# value cannot be mistaken for an initialised one: maxtext 0.2.5's scanned CPU training leaves the
# DeepSeek router bias (MoEBiasVar) at zero even with routed_bias_update_rate > 0, and deepseek4's
# Tid2EidVar is a frozen all-zero table. Bias values are exact in bfloat16 (the decode
# weight_dtype); tid2eid rows are valid, distinct expert ids.
EDITS = {
    "deepseek-routed-bias": ["nnx_aux/model/decoder/moe_layers/DeepSeekMoeBlock_0/MoeBlock_0/gate/bias"],
    "deepseek4": ["nnx_aux/model/decoder/layers_0/mlp/MoeBlock_0/tid2eid",
                  "nnx_aux/model/decoder/layers_1/mlp/MoeBlock_0/tid2eid",
                  "nnx_aux/model/decoder/scanned_blocks/layers_0/mlp/MoeBlock_0/gate/bias",
                  "nnx_aux/model/decoder/scanned_blocks/layers_1/mlp/MoeBlock_0/gate/bias"],
}
N_EXPERTS = 4
TRAIN_FORMAT = None  # part of the training cache key: change it when the recipe changes


def _edited_values(key: str, shape: tuple):
    import numpy as np
    n = int(np.prod(shape))
    if key.endswith("/tid2eid"):
        return (np.arange(n) % N_EXPERTS).reshape(shape)
    return (np.arange(n)[::-1] * 0.375 - 1.0).reshape(shape)


def edited(family: str, items: pathlib.Path) -> pathlib.Path:
    """A copy of the training state at `items` with EDITS[family] set (Orbax restore and save,
    sharding kept), cached beside it."""
    keys = EDITS.get(family)
    if not keys:
        return items
    tag = hashlib.sha256(json.dumps(keys).encode()).hexdigest()[:8]
    done = items.parent.parent.parent.with_name(items.parent.parent.parent.name + f"-edit-{tag}")
    out = done / "items"
    if out.is_dir():
        _step_metadata(items, done)
        return out
    import jax
    import jax.numpy as jnp
    import orbax.checkpoint as ocp
    ck = ocp.PyTreeCheckpointer()
    tree = ck.restore(str(items))
    for key in keys:
        node = tree
        *parents, leaf = key.split("/")
        for k in parents:
            node = node[k]
        b = node[leaf]
        node[leaf] = jax.device_put(jnp.asarray(_edited_values(key, b.shape), b.dtype), b.sharding)
    tmp = pathlib.Path(str(done) + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    ck.save(str(tmp / "items"), tree, force=True)
    os.replace(tmp, done)
    _step_metadata(items, done)
    return out


def _step_metadata(items: pathlib.Path, step: pathlib.Path) -> None:
    """The edited copy's step directory gets the original's _CHECKPOINT_METADATA and
    commit_success.txt: MaxText's converter (Orbax's CheckpointManager) refuses a step
    directory without them ("Could not recognize the checkpoint ... as a valid Orbax
    checkpoint"); unroll reads the items alone."""
    for name in ("_CHECKPOINT_METADATA", "commit_success.txt"):
        if not (step / name).exists() and (items.parent / name).exists():
            tmp = step / f"{name}.tmp{os.getpid()}"
            shutil.copyfile(items.parent / name, tmp)
            os.replace(tmp, step / name)


# LoRA through MaxText (README, "LoRA through MaxText"): pre-training with LoRA enabled, which
# 0.2.5 accepts but never applies. Trained and cached like the families; not a family of the
# suite (lora_blockers() reports on it).
LORA_PRETRAIN = TINY + ["base_num_decoder_layers=2", "lora.enable_lora=true", "lora.lora_rank=4",
                        "lora.lora_alpha=8.0", "lora.lora_module_path=decoder/layers/.*self_attention/query"]

ALL = {**FAMILIES, **PENDING, "lora-pretrain": LORA_PRETRAIN}


def train(family: str) -> pathlib.Path:
    """The family's scanned training state at step 1 (trained once, then cached)."""
    par, devices = PARALLEL.get(family, ([], 1))
    args = ALL[family] + par + COMMON
    if f"tokenizer_path={_tokenizer_dir()}" in args:
        hf_tokenizer()
    key = hashlib.sha256(json.dumps([maxtext.__version__, args, TRAIN_FORMAT]).encode()
                         ).hexdigest()[:16]
    done = _cache_root() / f"{family}-{maxtext.__version__}-{key}"
    items = done / "checkpoints" / "1" / "items"
    if items.is_dir():
        return items
    tmp = pathlib.Path(str(done) + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "maxtext.trainers.pre_train.train", BASE_YML,
           f"run_name={tmp.name}", f"base_output_directory={tmp.parent}", *args]
    log = tmp.parent / f"{tmp.name}.log"
    env = dict(os.environ)
    if devices > 1:
        env["XLA_FLAGS"] = host_devices_flags(devices)
    with open(log, "w") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env).returncode
    if rc != 0 or not (tmp / "checkpoints" / "1" / "items").is_dir():
        raise SystemExit(f"training {family} failed (rc {rc}), see {log}")
    os.replace(tmp, done)
    log.unlink()
    return items


def host_devices_flags(devices: int) -> str:
    """XLA_FLAGS for `devices` forced host devices. Their collectives are threads that meet in
    a rendezvous, which XLA aborts the process for after 40 s by default
    (xla_cpu_collective_call_terminate_timeout_seconds); on a loaded machine (load 7 on 2
    cores) one program's threads can take longer than that to arrive."""
    return (f"--xla_force_host_platform_device_count={devices} "
            "--xla_cpu_collective_call_warn_stuck_timeout_seconds=300 "
            "--xla_cpu_collective_call_terminate_timeout_seconds=1200")


def train_attempt(family: str) -> dict:
    """What MaxText's training of an UNTRAINABLE family does: {rc, error: the last exception
    line of its log}, run once per package version and overrides, then cached."""
    par, devices = PARALLEL.get(family, ([], 1))
    args = ALL[family] + par + COMMON
    key = hashlib.sha256(json.dumps([maxtext.__version__, args, TRAIN_FORMAT]).encode()
                         ).hexdigest()[:16]
    result = _cache_root() / "train-attempts" / f"{family}-{maxtext.__version__}-{key}.json"
    if result.is_file():
        return json.loads(result.read_text())
    hf_tokenizer()
    tmp = _cache_root() / "train-attempts" / f"{family}-{key}.tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    cmd = [sys.executable, "-m", "maxtext.trainers.pre_train.train", BASE_YML,
           f"run_name={tmp.name}", f"base_output_directory={tmp}", *args]
    p = subprocess.run(cmd, capture_output=True, text=True)
    errors = [ln for ln in p.stderr.splitlines() if re.match(r"^[\w.]+(Error|Exception): ", ln)]
    out = {"rc": p.returncode, "error": errors[-1][:500] if errors else "",
           "checkpoints": sorted(str(q.relative_to(tmp)) for q in tmp.rglob("items"))}
    result.write_text(json.dumps(out))
    shutil.rmtree(tmp, ignore_errors=True)
    return out


def engram_state(family: str, zero: bool = True) -> pathlib.Path:
    """The scanned param-only checkpoint of an UNTRAINABLE family (its items directory), as
    MaxText writes one: the scan_layers=true model initialised eagerly by MaxText's own
    get_nnx_create_model_fn, ENGRAM_VALUE_PROJ set to zero, saved by
    generate_param_only_checkpoint._save_decode_checkpoint_nnx (bf16, {value} leaves, step 0)
    through MaxText's checkpoint manager (zero=False: as initialised). Cached like the
    training."""
    zeroed = ENGRAM_VALUE_PROJ if zero else []
    key = hashlib.sha256(json.dumps([maxtext.__version__, ALL[family], COMMON, zeroed]
                                    ).encode()).hexdigest()[:16]
    done = _cache_root() / f"{family}-state-{maxtext.__version__}-{key}"
    items = done / "0" / "items"
    if items.is_dir():
        return items
    hf_tokenizer()
    import types
    import jax.numpy as jnp
    from flax import nnx
    from maxtext.common import checkpointing
    from maxtext.utils import generate_param_only_checkpoint as gpoc
    from maxtext.utils import model_creation_utils
    cfg = _config(family, "scan_layers=true")
    model = model_creation_utils.get_nnx_create_model_fn(cfg)()
    params = nnx.state(model, nnx.Param)
    for key_path in zeroed:
        node = params
        for k in key_path.split("/"):
            node = node[k]
        node.set_value(jnp.zeros_like(node.get_value()))
    nnx.update(model, params)
    tmp = pathlib.Path(str(done) + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    manager = checkpointing.create_orbax_checkpoint_manager(
        str(tmp) + "/", True, False, 1, use_ocdbt=cfg.checkpoint_storage_use_ocdbt,
        use_zarr3=cfg.checkpoint_storage_use_zarr3)
    gpoc._save_decode_checkpoint_nnx(cfg, types.SimpleNamespace(model=model), manager)
    if not (tmp / "0" / "items").is_dir():
        raise SystemExit(f"saving the {family} state wrote no {tmp}/0/items")
    os.replace(tmp, done)
    return items


def run_unroll(family: str, items: pathlib.Path, out: pathlib.Path, name: str, *extra: str) -> dict:
    source = "load_parameters_path" if family in UNTRAINABLE else "load_full_state_path"
    cmd = [os.environ["UNROLL_BIN"], BASE_YML, f"{source}={items}",
           f"base_output_directory={out}", f"run_name={name}", *ALL[family],
           *PARALLEL.get(family, ([], 1))[0], *extra]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    return {"rc": p.returncode, "stderr": p.stderr.strip()[-2000:], "seconds": time.monotonic() - t0,
            "path": str(out / name / "checkpoints" / "0" / "items")}


# What MaxText's own generate_param_only_checkpoint (force_unroll=true) makes of each family, as
# observed with maxtext 0.2.5 (the README's claims, issue 13). test_maxtext_converter asserts
# exactly this, so that it fails, and the README must change, when MaxText changes:
#   valid               its output loads, and unroll's equals it leaf for leaf, bit for bit;
#   structure-mismatch  it exits 0, but MaxEngine refuses its output ("Checkpoint structure
#                       mismatch"): it slices the stacked axis num_decoder_layers times although
#                       it holds blocks (decoder/layers_<b> keeps the block's layers nested), and
#                       jnp.take past the end fills the extra "layers" with NaN (MAXTEXT_NAN);
#   fails               it exits non-zero (MAXTEXT_ERRORS: the last exception line);
#   drops-aux           its output equals unroll's but for the trained non-parameter variables
#                       (DeepSeek's router bias, a MoEBiasVar), which it leaves out.
#   untrainable         MaxText cannot train the family (UNTRAINABLE), so there is no training
#                       state for its converter, which reads only load_full_state_path.
MAXTEXT_OUTCOME = {
    "llama2": "valid", "deepseek": "valid", "fsdp-tensor": "valid",
    "gemma3": "structure-mismatch", "llama4": "structure-mismatch",
    "gpt-oss": "structure-mismatch", "qwen3-next": "structure-mismatch",
    "olmo3": "structure-mismatch",
    "pipeline": "fails", "pipeline-remainder": "fails", "deepseek-pipeline": "fails",
    "gemma4": "fails", "deepseek4": "fails",
    "deepseek-routed-bias": "drops-aux",
    "deepseek-engram": "untrainable",
}


# Output variants converted and decoded besides the default (OCDBT + zarr3): family -> name ->
# extra keys for unroll and for MaxText's loader.
VARIANTS = {"llama2": {"zarr2-no-ocdbt": ["checkpoint_storage_use_ocdbt=false",
                                          "checkpoint_storage_use_zarr3=false"]}}


def storage_kind(path: str) -> dict:
    """What the output directory holds: an OCDBT manifest, zarr2 (.zarray) or zarr3 arrays."""
    files = [f for _, _, fs in os.walk(path) for f in fs]
    return {"ocdbt": "manifest.ocdbt" in files, "zarr2": ".zarray" in files,
            "zarr3": "zarr.json" in files}


def restack_pipeline(family: str, items: pathlib.Path, out: pathlib.Path) -> dict:
    """The reference for a pipeline-trained state, written here independently of unroll: the
    scanned param-only checkpoint of the plain model with the same values. A pipeline leaf
    decoder/pipeline_module/layers/R is [repeats, stages, ...] (no repeats axis when there is
    one repeat) and holds layer r * stages + s of the stack (MaxText's pipeline runs stages
    0..S-1 of repeat 0, then of repeat 1); the plain scanned model holds decoder/layers/R (or
    DeepSeek's decoder/moe_layers/R) with the layer axis at param_scan_axis (1). The layers
    outside the pipeline are scanned groups with that axis already: decoder/
    layers_outside_pipeline runs after the stack, DeepSeek's decoder/moe_layers_outside_pipeline
    before it (nnx_decoders.py). Cast to bfloat16."""
    import jax.numpy as jnp
    import numpy as np
    import orbax.checkpoint as ocp
    ck = ocp.PyTreeCheckpointer()
    flat = _flat(ck.restore(str(items))["params"]["params"])
    keys = dict(a.split("=", 1) for a in ALL[family] + PARALLEL[family][0])
    deepseek = family.startswith("deepseek")
    n_pipe = int(keys.get("pipeline_parallel_layers", -1))
    if n_pipe == -1:  # types.py: every layer, DeepSeek's MoE layers
        n_pipe = int(keys["base_num_decoder_layers"]) - int(keys.get("first_num_dense_layers", 0))
    repeats = n_pipe // (int(keys["ici_pipeline_parallelism"]) *
                         int(keys["num_layers_per_pipeline_stage"])) > 1
    group = "moe_layers" if deepseek else "layers"
    outside = "moe_layers_outside_pipeline" if deepseek else "layers_outside_pipeline"
    parts: dict = {}  # R -> {"pipe": stack, "outside": group}
    tree: dict = {}
    for k, x in flat.items():
        x = np.asarray(x)
        p = k.split("/")
        if p[:3] == ["decoder", "pipeline_module", "layers"]:
            lead = 2 if repeats else 1
            x = np.moveaxis(x.reshape((int(np.prod(x.shape[:lead])),) + x.shape[lead:]), 0, 1)
            parts.setdefault("/".join(p[3:]), {})["pipe"] = x
            continue
        if p[:2] == ["decoder", outside]:
            parts.setdefault("/".join(p[2:]), {})["outside"] = x
            continue
        _put(tree, p, jnp.asarray(x, jnp.bfloat16))
    for rest, d in parts.items():
        order = [d.get("outside"), d["pipe"]] if deepseek else [d["pipe"], d.get("outside")]
        x = np.concatenate([a for a in order if a is not None], axis=1)
        _put(tree, ["decoder", group, *rest.split("/")], jnp.asarray(x, jnp.bfloat16))
    path = out / "restacked" / "items"
    ck.save(str(path), tree, force=True)
    return {"rc": 0, "stderr": "", "path": str(path)}


def pipelined_params(items: pathlib.Path, out: pathlib.Path) -> str:
    """The training state's parameters as they are (pipeline stack and all), cast to bfloat16
    and written by Orbax as a param-only checkpoint: what the pipelined model loads."""
    import jax.numpy as jnp
    import orbax.checkpoint as ocp
    ck = ocp.PyTreeCheckpointer()
    tree: dict = {}
    for k, x in _flat(ck.restore(str(items))["params"]["params"]).items():
        _put(tree, k.split("/"), jnp.asarray(x, jnp.bfloat16))
    path = out / "pipelined" / "items"
    ck.save(str(path), tree, force=True)
    return str(path)


# Two rows (the pipelined model's global batch: 1 per device, 2 devices) of fixed token ids.
FORWARD_TOKENS = [[1, 17, 42, 99, 5, 63, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16],
                  [3, 4, 5, 6, 70, 71, 72, 73, 100, 101, 102, 103, 2, 1, 0, 127]]


def forward_pretrained(family: str, path: str, *extra: str) -> list:
    """MaxText's own forward pass (Transformer.__call__, training mode, no dropout, no KV
    cache) of FORWARD_TOKENS through the model from_pretrained builds from the param-only
    checkpoint at `path` with the family's keys and `extra`: its logits."""
    import jax.numpy as jnp
    import numpy as np
    from flax import linen as nn
    from flax import nnx
    from maxtext.utils import model_creation_utils
    cfg = _config(family, f"load_parameters_path={path}", "weight_dtype=bfloat16", "dtype=float32",
                  *extra)
    cfg = model_creation_utils.verify_and_sync_scan_layers(cfg)
    model, mesh = model_creation_utils.from_pretrained(cfg)
    tokens = jnp.array(FORWARD_TOKENS, jnp.int32)
    positions = jnp.broadcast_to(jnp.arange(tokens.shape[1], dtype=jnp.int32), tokens.shape)
    # one jitted program: run eagerly, each op is a program of its own, and the 2 host
    # devices' threads can meet different programs' collectives (XLA's cross_module
    # rendezvous), which hung or aborted ("only 1 of them arrived") now and then
    call = nnx.jit(lambda m, t, p, s: m(t, p, decoder_segment_ids=s, enable_dropout=False))
    with mesh, nn.partitioning.axis_rules(cfg.logical_axis_rules):
        out = call(model, tokens, positions, jnp.ones_like(tokens))
    return np.asarray(out[0] if isinstance(out, tuple) else out, np.float32).tolist()


def pipeline_forward(family: str, items: pathlib.Path, work: pathlib.Path, unrolled: str) -> dict:
    """The pipelined model itself as the oracle of the layer order: MaxText's forward pass
    through the pipelined model (pipeline.py runs the stack, nnx_decoders.py the groups outside
    it, on the 2 devices it was trained on) from the trained parameters as they are, and
    through the unpipelined, unscanned model from unroll's output; and, as the control that
    the comparison can fail, from a copy of unroll's output with the first and last layers of
    the pipelined group swapped."""
    import orbax.checkpoint as ocp
    facts = {"pipelined": forward_pretrained(family, pipelined_params(items, work),
                                          *PARALLEL[family][0]),
             "unrolled": forward_pretrained(family, unrolled)}
    ck = ocp.PyTreeCheckpointer()
    tree = ck.restore(unrolled)
    x = "moe_layers" if family.startswith("deepseek") else "layers"
    d = tree["decoder"]
    last = max(int(k.rsplit("_", 1)[1]) for k in d if re.fullmatch(x + r"_\d+", k))
    d[f"{x}_0"], d[f"{x}_{last}"] = d[f"{x}_{last}"], d[f"{x}_0"]
    step = work / "swapped" / "checkpoints" / "0"
    ck.save(str(step / "items"), tree, force=True)
    shutil.copyfile(pathlib.Path(unrolled).parent / "_CHECKPOINT_METADATA",
                    step / "_CHECKPOINT_METADATA")
    facts["swapped"] = forward_pretrained(family, str(step / "items"))
    facts["swapped_layers"] = [f"{x}_0", f"{x}_{last}"]
    facts["verify_swapped"] = run_verify(family, items, str(step / "items"))
    # and one without the last layer (the others back in place)
    d[f"{x}_0"] = d.pop(f"{x}_{last}")
    ck.save(str(work / "missing" / "items"), tree, force=True)
    facts["verify_missing"] = run_verify(family, items, str(work / "missing" / "items"))
    return facts


def run_verify(family: str, items: pathlib.Path, out: str) -> dict:
    p = subprocess.run([os.environ["UNROLL_BIN"], "verify", str(items), out, BASE_YML,
                        *ALL[family], *PARALLEL.get(family, ([], 1))[0]],
                       capture_output=True, text=True)
    # the report's first issues (in output-leaf order) and its summary line
    return {"rc": p.returncode, "stdout": p.stdout[:3000] + p.stdout[-300:],
            "stderr": p.stderr[-2000:]}


def _put(tree: dict, p: list, value) -> None:
    node = tree
    for c in p:
        node = node.setdefault(c, {})
    node["value"] = value


def mesh_axes_used(items: pathlib.Path) -> dict:
    """{mesh axis: number of the training state's arrays sharded over it} (Orbax _sharding)."""
    used: dict = {}
    if not (items / "_sharding").is_file():
        return used
    for v in json.loads((items / "_sharding").read_text()).values():
        v = json.loads(v) if isinstance(v, str) else v
        names = set()
        for entry in v.get("partition_spec", []):
            names.update(entry if isinstance(entry, list) else [entry])
        for name in names - {None}:
            used[name] = used.get(name, 0) + 1
    return used


def run_maxtext(family: str, items: pathlib.Path, *extra: str) -> dict:
    """MaxText's own generate_param_only_checkpoint (force_unroll=true) on the same state: run
    once per package version, state and keys, then cached beside the training state (its output
    and {rc, error, stderr, seconds} in result.json), like the training itself."""
    args = ["force_unroll=true", *ALL[family], *PARALLEL.get(family, ([], 1))[0], *COMMON, *extra]
    key = hashlib.sha256(json.dumps([maxtext.__version__, str(items), args]).encode()
                         ).hexdigest()[:16]
    done = _cache_root() / "maxtext-converter" / f"{family}-{maxtext.__version__}-{key}"
    if (done / "result.json").is_file():
        return json.loads((done / "result.json").read_text())
    tmp = pathlib.Path(str(done) + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    cmd = [sys.executable, "-m", "maxtext.utils.generate_param_only_checkpoint", BASE_YML,
           f"load_full_state_path={items}", f"base_output_directory={tmp}", "run_name=maxtext",
           *args]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    errors = [ln for ln in p.stderr.splitlines() if re.match(r"^[\w.]+(Error|Exception): ", ln)]
    result = {"rc": p.returncode, "error": errors[-1][:500] if errors else "",
              "stderr": p.stderr.strip()[-2000:], "seconds": time.monotonic() - t0,
              "path": str(done / "maxtext" / "checkpoints" / "0" / "items")}
    (tmp / "result.json").write_text(json.dumps(result))
    shutil.rmtree(done, ignore_errors=True)
    os.replace(tmp, done)
    return result


def non_finite(path: str) -> dict:
    """Where a checkpoint holds NaN or infinity: {"nan_groups": the top two path components
    (decoder/layers_<i>) under which every leaf is all NaN, "other": other leaves with any}."""
    import numpy as np
    import orbax.checkpoint as ocp
    flat = _flat(ocp.PyTreeCheckpointer().restore(path))
    groups: dict = {}
    other = []
    for k, v in flat.items():
        x = np.asarray(v, np.float32)
        g = "/".join(k.split("/")[:2])
        groups.setdefault(g, []).append(bool(np.all(np.isnan(x))))
        if not np.all(np.isfinite(x)) and not np.all(np.isnan(x)):
            other.append(k)
    nan_groups = sorted(g for g, all_nan in groups.items() if all(all_nan))
    other += [k for k in flat if "/".join(k.split("/")[:2]) not in nan_groups
              and np.all(np.isnan(np.asarray(flat[k], np.float32)))]
    return {"nan_groups": nan_groups, "other": sorted(other)}


def try_decode(family: str, path: str, *extra: str) -> dict:
    """decode() of an unscanned checkpoint, or the exception MaxText raised (first line)."""
    try:  # MaxText's converter records no scan_layers (custom_metadata {}): the flag it needs
        return {"ok": True, **decode(family, path, False, "scan_layers=false", *extra)}
    except Exception as e:  # noqa: BLE001 - what MaxText raises is the fact gathered
        return {"ok": False, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:500]}"}


def maxtext_facts(family: str, items: pathlib.Path, unrolled: str, *extra: str) -> dict:
    """MaxText's converter on the state, and what its output is: compared with unroll's leaf
    for leaf; where they differ, its non-finite leaves and whether MaxEngine loads and decodes
    it (where they are equal, unroll's decode is its decode)."""
    m = run_maxtext(family, items, *extra)
    if m["rc"] != 0:
        return m
    m["storage"] = storage_kind(m["path"])
    m.update(bit_differences(unrolled, m["path"]))
    if m["differences"]:
        m["n_differences"] = len(m["differences"])
        m["differences"] = {k: m["differences"][k] for k in sorted(m["differences"])[:20]}
        m["tree"] = checkpoint_tree(m["path"])
        m["non_finite"] = non_finite(m["path"])
        m["decode"] = try_decode(family, m["path"], *extra)
    return m


def bit_differences(a_path: str, b_path: str) -> dict:
    """Leaves of two checkpoints that differ: by presence, dtype, shape, or any bit."""
    import numpy as np
    import orbax.checkpoint as ocp
    ck = ocp.PyTreeCheckpointer()
    a, b = _flat(ck.restore(a_path)), _flat(ck.restore(b_path))
    diff = {k: "only in unroll's" for k in set(a) - set(b)}
    diff.update({k: "only in MaxText's" for k in set(b) - set(a)})
    for k in set(a) & set(b):
        x, y = np.asarray(a[k]), np.asarray(b[k])
        if x.dtype != y.dtype or x.shape != y.shape:
            diff[k] = f"{x.dtype}{list(x.shape)} vs {y.dtype}{list(y.shape)}"
        elif x.tobytes() != y.tobytes():
            diff[k] = "values differ"
    return {"differences": diff, "leaves_compared": len(set(a) & set(b))}


def _config(family: str, *extra: str):
    from maxtext.configs import pyconfig
    return pyconfig.initialize([None, BASE_YML, *ALL[family], *COMMON, "run_name=infer",
                                "base_output_directory=/tmp/unroll-maxtext-unused",
                                "enable_checkpointing=false", *extra])


def _flat(tree, prefix=()):
    out = {}
    if isinstance(tree, dict):
        for k, v in tree.items():
            out.update(_flat(v, prefix + (str(k),)))
    else:
        out["/".join(prefix)] = tree
    return out


def model_tree(family: str, scanned: bool = False) -> dict:
    """{path: shape} of the scan_layers=false (or true) model's persisted variables (what
    from_pretrained restores: everything but rng, cache, intermediates, batch stats)."""
    import jax
    from flax import nnx
    from maxtext.utils import model_creation_utils
    cfg = _config(family, f"scan_layers={str(scanned).lower()}")
    _, model = model_creation_utils.create_nnx_abstract_model(cfg)
    state = nnx.state(model).filter(
        lambda path, var: not isinstance(var, (nnx.RngState, nnx.Cache, nnx.Intermediate, nnx.BatchStat)))
    flat = {}
    for path, var in jax.tree_util.tree_flatten_with_path(
            state, is_leaf=lambda n: isinstance(n, nnx.Variable))[0]:
        key = "/".join(str(getattr(p, "key", getattr(p, "name", p))) for p in path) + "/value"
        flat[key] = list(var.get_value().shape)
    return flat


def vision_facts(family: str, items: pathlib.Path, unrolled: str) -> dict:
    """The vision encoder through the conversion: its {path: shape} in the scan_layers=true
    model (the scan_layers=false one is model_tree's) and in the training state, and which of the
    unscanned output's vision leaves differ from the trained values cast to bfloat16 (what
    generate_param_only_checkpoint writes), bit for bit."""
    import jax.numpy as jnp
    import numpy as np
    import orbax.checkpoint as ocp
    ck = ocp.PyTreeCheckpointer()
    trained = _flat(ck.restore(str(items))["params"]["params"]["vision_encoder"])
    out = {k[:-len("/value")]: v for k, v in
           _flat(ck.restore(unrolled)["vision_encoder"]).items()}
    differ = sorted(k for k in set(trained) | set(out)
                    if k not in trained or k not in out or
                    np.asarray(out[k]).dtype != jnp.bfloat16 or
                    np.asarray(out[k]).tobytes() != np.asarray(trained[k]).astype(jnp.bfloat16).tobytes())
    scanned = {k: v for k, v in model_tree(family, True).items() if k.startswith("vision_encoder/")}
    return {"scanned_model": scanned, "trained": {k: list(np.shape(v)) for k, v in trained.items()},
            "trained_dtypes": sorted({str(np.asarray(v).dtype) for v in trained.values()}),
            "compared": len(set(trained) & set(out)), "differ": differ}


def image_decodes(family: str, unrolled: str, scanned: str) -> dict:
    """MaxEngine decodes with an image, on CPU: a prompt with 3 image placeholder tokens, whose
    places the first 3 of the image's soft tokens take (multimodal utils merge_mm_embeddings),
    and a fixed random image (gemma3: one 896 x 896 image; llama4: 2 tiles of 336 x 336, both
    valid), from both outputs; and, from the unscanned one, the prefill with another image, which
    must change the logits (the vision encoder's weights reach them)."""
    import numpy as np
    if family.startswith("gemma3"):
        from maxtext.multimodal.processor_gemma3 import GEMMA_TOKEN_PLACEHOLDER as placeholder
        shape, masks = (896, 896, 3), None
    else:
        from maxtext.multimodal.processor_llama4 import LLAMA4_PATCH_TOKEN as placeholder
        shape, masks = (2, 3, 336, 336), np.ones((2,), np.int32)
    image = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    other = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    prompt = [1, 17, placeholder, placeholder, placeholder, 42]
    return {"unrolled": decode(family, unrolled, False, prompt=prompt, images=image, image_masks=masks),
            "scanned": decode(family, scanned, True, prompt=prompt, images=image, image_masks=masks),
            "other_image": decode(family, unrolled, False, prompt=prompt, images=other,
                                  image_masks=masks, n_steps=0)}


def trained_aux(items: pathlib.Path) -> dict:
    """{model path: values} of the training state's non-parameter variables (nnx_aux/model/P,
    RNG state left out)."""
    import numpy as np
    import orbax.checkpoint as ocp
    tree = ocp.PyTreeCheckpointer().restore(str(items))
    flat = _flat(tree.get("nnx_aux", {}).get("model", {}))
    return {k: np.asarray(v, np.float32).tolist() for k, v in flat.items()
            if "rngs" not in k.split("/")}


def checkpoint_tree(path: str) -> dict:
    import orbax.checkpoint as ocp
    meta = ocp.PyTreeCheckpointer().metadata(path).item_metadata.tree
    return {k: list(v.shape) for k, v in _flat(meta).items()}


def checkpoint_metadata(path: str) -> dict:
    """The custom_metadata MaxText reads back from a checkpoint it loads (load_parameters_path:
    the items directory; its step's _CHECKPOINT_METADATA)."""
    from maxtext.common import checkpointing
    return checkpointing.load_checkpoint_metadata(path)


def _register_result_tokens(maxengine) -> None:
    """Without JetStream (it needs TensorFlow) MaxText substitutes a plain ResultTokens class that
    its jitted prefill/generate cannot return; make it a pytree (arrays as leaves, index tuples as
    static data), which is what JetStream's own class is."""
    import jax
    cls = maxengine.engine_api.ResultTokens
    if getattr(cls, "_unroll_pytree", False):
        return
    aux_keys = ("tokens_idx", "valid_idx", "length_idx", "samples_per_slot")
    jax.tree_util.register_pytree_node(
        cls,
        lambda r: ((r.data, r.log_prob), tuple(getattr(r, k) for k in aux_keys)),
        lambda aux, ch: cls(data=ch[0], log_prob=ch[1], **dict(zip(aux_keys, aux))))
    cls._unroll_pytree = True


def _token(result) -> int:
    return int(result.data[0, result.tokens_idx[0]])


def decode(family: str, path: str, scanned: bool, *extra: str, n_steps: int = 4,
           prompt: list | None = None, images=None, image_masks=None) -> dict:
    """Greedy decode of fixed token ids (and images, for a multimodal model) from a param-only
    checkpoint through MaxEngine."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx
    from maxtext.inference.maxengine import maxengine
    from maxtext.utils import model_creation_utils
    # An unscanned output is loaded with no scan_layers flag at all: MaxText takes it from the
    # custom_metadata unroll records in the step's _CHECKPOINT_METADATA, and refuses a flag
    # that contradicts it. 0.2.5's from_pretrained does so itself, but MaxEngine builds its
    # model from the config before it loads, so the config is synced first, as MaxText's
    # training engine does (maxtext_engine_compile.py).
    cfg = _config(family, f"load_parameters_path={path}",
                  *(["scan_layers=true"] if scanned else []),
                  "decode_sampling_strategy=greedy", "weight_dtype=bfloat16", "dtype=float32",
                  *extra)
    cfg = model_creation_utils.verify_and_sync_scan_layers(cfg)
    _register_result_tokens(maxengine)
    engine = maxengine.MaxEngine(cfg)
    params = engine.load_params(rng=jax.random.PRNGKey(0))
    # the non-parameter variables the engine runs with (MoEBiasVar, Tid2EidVar), as loaded
    aux = {k: np.asarray(v, np.float32).tolist()
           for k, v in _flat(nnx.to_pure_dict(engine._nnx_rest_state)).items()
           if "rngs" not in k.split("/")}
    prompt = prompt or [1, 17, 42, 99, 5, 63]
    image_args = {} if images is None else {"images": jnp.asarray(images)}
    if image_masks is not None:
        image_args["image_masks"] = jnp.asarray(image_masks)
    padded = jnp.array(prompt + [0] * (cfg.max_prefill_predict_length - len(prompt)), dtype=jnp.int32)
    prefix, first = engine.prefill(params=params, padded_tokens=padded, true_length=len(prompt),
                                   rng=jax.random.PRNGKey(1), **image_args)
    logits = [np.asarray(prefix["logits"], np.float32).reshape(-1).tolist()]
    state = engine.init_decode_state(jax.random.PRNGKey(2))
    state = engine.insert(prefix, state, slot=0)
    tokens = [_token(first)]
    for i in range(n_steps):
        state, res = engine.generate(params, state, rng=jax.random.PRNGKey(3 + i))
        tokens.append(_token(res))
        logits.append(np.asarray(state["logits"][0], np.float32).reshape(-1).tolist())
    return {"tokens": tokens, "logits": logits, "aux": aux, "scan_layers": cfg.scan_layers}


def forward(family: str, path: str, scanned: bool) -> dict:
    """Logits of MaxText's own model (train mode, no cache, no jit around it: what MaxEngine
    cannot run for UNTRAINABLE, see there) on fixed token ids, its parameters restored from a
    param-only checkpoint ({value} leaves) by real Orbax. The model is built eagerly by
    get_nnx_create_model_fn, every nnx.Param then set from the checkpoint leaf of its path, so
    that a leaf missing from the checkpoint fails here."""
    import jax.numpy as jnp
    import numpy as np
    import orbax.checkpoint as ocp
    from flax import nnx
    from maxtext.utils import model_creation_utils
    cfg = _config(family, f"scan_layers={str(scanned).lower()}", "dtype=float32")
    model = model_creation_utils.get_nnx_create_model_fn(cfg)()
    stored = _flat(ocp.PyTreeCheckpointer().restore(path))
    params = nnx.state(model, nnx.Param)
    n = 0
    for key_path, var in nnx.to_flat_state(params):
        key = "/".join(str(k) for k in key_path) + "/value"
        var.set_value(jnp.asarray(stored[key], var.get_value().dtype))
        n += 1
    nnx.update(model, params)
    tokens = jnp.array([[1, 17, 42, 99, 5, 63, 7, 11, 2, 30, 64, 90, 3, 8, 120, 77]], jnp.int32)
    logits = model(decoder_input_tokens=tokens,
                   decoder_positions=jnp.arange(tokens.shape[1], dtype=jnp.int32)[None],
                   decoder_segment_ids=jnp.ones_like(tokens), enable_dropout=False)
    logits = np.asarray(logits[0] if isinstance(logits, tuple) else logits, np.float32)
    return {"logits": logits.reshape(-1).tolist(), "argmax": logits.argmax(-1).reshape(-1).tolist(),
            "params_set": n, "params_stored": len(stored)}


def _attempt(fn, *args, **kwargs) -> dict:
    """fn's result, or the exception MaxText raised (first line)."""
    try:
        return {"ok": True, **fn(*args, **kwargs)}
    except Exception as e:  # noqa: BLE001 - what MaxText raises is the fact gathered
        return {"ok": False, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:500]}"}


def mtp_subtree(tree: dict) -> dict:
    """The MTP block's leaves of a {path: shape} tree, by their path from mtp_block on (a
    training state's params/params/ and an output's /value dropped)."""
    out = {}
    for k, v in tree.items():
        p = k.split("/")
        if "mtp_block" in p:
            p = p[p.index("mtp_block"):]
            out["/".join(p[:-1] if p[-1] == "value" else p)] = v
    return out


def trained_params(items: pathlib.Path) -> dict:
    """{path: shape} of the training state's parameters (params/params)."""
    import orbax.checkpoint as ocp
    meta = ocp.PyTreeCheckpointer().metadata(str(items)).item_metadata.tree
    return {k: list(v.shape) for k, v in _flat(meta["params"]["params"]).items()}


def trained_mtp(items: pathlib.Path) -> dict:
    """{path: shape} of the training state's MTP block (params/params/mtp_block)."""
    import orbax.checkpoint as ocp
    meta = ocp.PyTreeCheckpointer().metadata(str(items)).item_metadata.tree
    return {"mtp_block/" + k: list(v.shape)
            for k, v in _flat(meta["params"]["params"].get("mtp_block", {})).items()}


# Block families whose unscanned MTP layer MaxText 0.2.5 cannot build (unroll refuses them):
# the layer class needs an argument MultiTokenPredictionLayer does not pass.
MTP_BLOCKED = {"gpt-oss": "TypeError: GptOssDecoderLayer.__init__() missing 1 required positional "
                          "argument: 'attention_type'",
               "qwen3-next": "TypeError: Qwen3NextDecoderLayer.__init__() missing 1 required "
                             "positional argument: 'layer_idx'"}


def mtp_blockers() -> dict:
    """What MaxText builds for MTP_BLOCKED's families with mtp_num_layers=1 (no training): the
    scanned model's MTP layer (a whole scannable block), and the exception building the
    unscanned model raises."""
    out = {}
    for fam in MTP_BLOCKED:
        ALL[fam + "+mtp"] = ALL[fam] + ["mtp_num_layers=1"]
        scanned = _attempt(lambda: {"tree": mtp_subtree(model_tree(fam + "+mtp", True))})
        out[fam] = {"scanned": scanned,
                    "unscanned": _attempt(lambda: {"tree": model_tree(fam + "+mtp")})}
    return out


def lora_blockers(work: pathlib.Path) -> dict:
    """Why LoRA cannot go through MaxText 0.2.5 (README): what its pre-training with LoRA enabled
    saves, and what MaxEngine.load_single_adapter does, after load_params of unroll's llama2
    output, with an adapter directory (adapter_config.json, 0/items/commit_success.txt) whose
    weights it never gets to read."""
    saved = checkpoint_tree(str(train("lora-pretrain")))
    lora_config = _config("lora-pretrain").lora.model_dump()
    base = run_unroll("llama2", train("llama2"), work, "unrolled", "force_unroll=true")
    if base["rc"] != 0:
        return {"lora_pretrain_tree": saved, "lora_config": lora_config, "unroll": base}
    import jax
    from maxtext.inference.maxengine import maxengine
    adapter = work / "adapter"
    (adapter / "0" / "items").mkdir(parents=True)
    (adapter / "0" / "items" / "commit_success.txt").write_text("")
    (adapter / "adapter_config.json").write_text(json.dumps(
        {"r": 2, "lora_alpha": 4, "target_modules": ["q_proj", "v_proj"], "peft_type": "LORA"}))
    engine = maxengine.MaxEngine(_config("llama2", f"load_parameters_path={base['path']}",
                                         "scan_layers=false", "weight_dtype=bfloat16",
                                         "dtype=float32"))
    engine.load_params(rng=jax.random.PRNGKey(0))
    try:
        engine.load_single_adapter(str(adapter))
        load = {"ok": True}
    except Exception as e:  # noqa: BLE001 - what MaxText raises is the fact gathered
        load = {"ok": False, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:500]}"}
    return {"lora_pretrain_tree": saved, "lora_config": lora_config, "unroll": base,
            "load_single_adapter": load}


def main() -> None:
    family, work = sys.argv[1], pathlib.Path(sys.argv[2])
    if family == "lora-blockers":
        (work / "facts.json").write_text(json.dumps(lora_blockers(work)))
        return
    if family == "mtp-blockers":
        (work / "facts.json").write_text(json.dumps(mtp_blockers()))
        return
    devices = PARALLEL.get(family, ([], 1))[1]
    if devices > 1:
        # read when JAX first starts its backend (nothing has yet): restoring the training state
        # needs the devices it was saved from; the decodes then run fsdp over them alike
        os.environ["XLA_FLAGS"] = host_devices_flags(devices)
    facts: dict = {"family": family, "maxtext": maxtext.__version__}
    if family in UNTRAINABLE:
        facts["train_attempt"] = train_attempt(family)
        items = engram_state(family)
        facts["scanned_tree"] = checkpoint_tree(str(items))
        # the same checkpoint under a config without engram_layers: refused (exit 2)
        facts["refused"] = run_unroll(family, items, work, "refused", "force_unroll=true",
                                      "engram_layers=[]")
    else:
        items = edited(family, train(family))
    facts["train"] = str(items)
    facts["trained_aux"] = trained_aux(items)
    facts["mesh_axes_used"] = mesh_axes_used(items)
    if family in PIPELINE:
        facts["trained_tree"] = trained_params(items)
    facts["unrolled"] = run_unroll(family, items, work, "unrolled", "force_unroll=true")
    if family in PIPELINE:
        facts["scanned"] = restack_pipeline(family, items, work)
    else:
        facts["scanned"] = run_unroll(family, items, work, "scanned", "force_unroll=false")
    if facts["unrolled"]["rc"] == 0:
        facts["verify"] = run_verify(family, items, facts["unrolled"]["path"])
    if facts["unrolled"]["rc"] == 0 and family in MAXTEXT_OUTCOME and family not in UNTRAINABLE:
        facts["maxtext"] = maxtext_facts(family, items, facts["unrolled"]["path"])
    facts["model_tree"] = model_tree(family)
    if family in MULTIMODAL and facts["unrolled"]["rc"] == 0:
        facts["vision"] = vision_facts(family, items, facts["unrolled"]["path"])
    # the main model alone where MaxText cannot decode with the MTP block (MTP above)
    main_only = ("mtp_num_layers=0",) if family in MTP else ()
    if family in MTP:
        facts["trained_mtp"] = trained_mtp(items)
        facts["decode_mtp"] = {}
    if facts["unrolled"]["rc"] == 0:
        facts["unrolled_tree"] = checkpoint_tree(facts["unrolled"]["path"])
        facts["unrolled_metadata"] = checkpoint_metadata(facts["unrolled"]["path"])
        if family in MTP:
            facts["decode_mtp"]["unrolled"] = _attempt(
                decode, family, facts["unrolled"]["path"], False, n_steps=1)
        facts["decode_unrolled"] = decode(family, facts["unrolled"]["path"], False, *main_only)
        if family in UNTRAINABLE:
            facts["forward_unrolled"] = forward(family, facts["unrolled"]["path"], False)
    if facts["scanned"]["rc"] == 0:
        facts["scanned_metadata"] = checkpoint_metadata(facts["scanned"]["path"])
        if family in MTP:
            facts["decode_mtp"]["scanned"] = _attempt(
                decode, family, facts["scanned"]["path"], True, n_steps=1)
        if family in UNTRAINABLE:
            # MaxEngine meets the same leaked tracer; the reference is the forward pass of the
            # scanned model on the state MaxText wrote (UNTRAINABLE)
            facts["decode_scanned"] = _attempt(decode, family, facts["scanned"]["path"], True)
            facts["forward_scanned"] = forward(family, str(items), True)
            # what the Engram computes, which the unscanned model cannot: the same model with
            # its value projections as initialised
            facts["forward_scanned_engram"] = forward(family, str(engram_state(family, False)),
                                                      True)
        else:
            facts["decode_scanned"] = decode(family, facts["scanned"]["path"], True, *main_only)
    if family in MULTIMODAL and facts["unrolled"]["rc"] == 0 and facts["scanned"]["rc"] == 0:
        facts["decode_image"] = image_decodes(family, facts["unrolled"]["path"], facts["scanned"]["path"])
    if family in PIPELINE and facts["unrolled"]["rc"] == 0:
        facts["pipeline_forward"] = pipeline_forward(family, items, work, facts["unrolled"]["path"])
    facts["variants"] = {}
    for name, keys in VARIANTS.get(family, {}).items():
        v = run_unroll(family, items, work, name, "force_unroll=true", *keys)
        if v["rc"] == 0:
            v["storage"] = storage_kind(v["path"])
            v["tree"] = checkpoint_tree(v["path"])
            v["decode"] = decode(family, v["path"], False, *keys)
            v["maxtext"] = maxtext_facts(family, items, v["path"], *keys)
        facts["variants"][name] = v
    (work / "facts.json").write_text(json.dumps(facts))


if __name__ == "__main__":
    main()
