"""MaxText 0.2.5's own Hugging Face exporter (python -m maxtext.checkpoint_conversion.to_huggingface)
for a tiny model whose model_name its tables know only at full size, run in this process after
two additions, so that its mapping and hooks (the oracle) run unchanged on the test's model:

- its config tables (HF_MODEL_CONFIGS, HF_IDS, PARAM_MAPPING, HF_SHAPE) get an entry for the
  tiny model_name: the Hugging Face config of the trained tiny model (TINY below, from the
  family's overrides in hf_driver.py), where its own entry would be the full-size model's
  (deepseek4-tiny has hooks but no config, so the exporter refuses it: "Unsupported model name");
- the router's non-parameter variables, which its DeepSeek-V4 table names by their type
  (Tid2EidVar-decoder-..., MoEBiasVar-decoder-...), are renamed so from the params-... keys it
  reads a parameter-only checkpoint's nnx_aux leaves as (no checkpoint MaxText 0.2.5 writes
  has keys of that form: its training state keeps them under nnx_aux/, and its own
  param-only converter fails on deepseek4).

Arguments: those of MaxText's exporter."""
from transformers import DeepseekV4Config
from maxtext.checkpoint_conversion import to_huggingface as th
from maxtext.checkpoint_conversion.utils import hf_model_configs, hf_shape, param_mapping

# hf_driver.FAMILIES["deepseek4-hash3"] as DeepseekV4Config sees it
TINY = {"deepseek4-tiny": (DeepseekV4Config, "deepseek4-284b", dict(
    hidden_size=32, num_hidden_layers=5, num_attention_heads=4, num_key_value_heads=1,
    head_dim=16, qk_rope_head_dim=16, q_lora_rank=8, o_groups=4, o_lora_rank=8, index_n_heads=4,
    index_head_dim=16, index_topk=4, n_routed_experts=4, num_experts_per_tok=2,
    moe_intermediate_size=16, n_shared_experts=1, vocab_size=128, hc_mult=4,
    hc_sinkhorn_iters=20, hc_eps=1e-6, sliding_window=4, compress_ratios=[0, 0, 4, 128, 4],
    num_hash_layers=3, swiglu_limit=10.0, scoring_func="sqrtsoftplus",
    routed_scaling_factor=1.0, rope_theta=10000, compress_rope_theta=160000,
    max_position_embeddings=4096, rms_norm_eps=1e-6, norm_topk_prob=True,
    num_nextn_predict_layers=0, tie_word_embeddings=False))}

for name, (cls, full, kw) in TINY.items():
    hf_model_configs.HF_MODEL_CONFIGS[name] = th.HF_MODEL_CONFIGS[name] = cls(**kw)
    th.HF_IDS.setdefault(name, "local")
    param_mapping.PARAM_MAPPING[name] = th.PARAM_MAPPING[name] = param_mapping.PARAM_MAPPING[full]
    hf_shape.HF_SHAPE[name] = th.HF_SHAPE[name] = hf_shape.HF_SHAPE[full]

_extract = th.detect_and_extract_checkpoint


def _renamed(checkpoint):
    out = {}
    for k, v in _extract(checkpoint).items():
        if k.endswith("-tid2eid"):
            k = "Tid2EidVar-" + k[len("params-"):]
        elif k.endswith("-MoeBlock_0-gate-bias"):
            k = "MoEBiasVar-" + k[len("params-"):]
        out[k] = v
    return out


th.detect_and_extract_checkpoint = _renamed

if __name__ == "__main__":
    import jax
    from absl import app
    jax.config.update("jax_platforms", "cpu")
    app.run(th.main)
