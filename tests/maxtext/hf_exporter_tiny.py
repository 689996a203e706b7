"""MaxText 0.2.5's own Hugging Face exporter (python -m maxtext.checkpoint_conversion.to_huggingface)
for a tiny model whose model_name its tables know only at full size (or not at all), run in this
process after two additions, so that its mapping and hooks (the oracle) run unchanged on the
test's model:

- its config tables (HF_MODEL_CONFIGS, HF_IDS, PARAM_MAPPING, HF_SHAPE) give the model_name the
  tiny model's Hugging Face configuration, read from --tiny_config=DIR (DIR/config.json: the
  one unroll wrote for the same model, which transformers has loaded and whose logits the test
  holds to MaxText's own; only its sizes reach the exporter, whose hooks and names stay its
  own), where its table has the full-size model's (its hooks then reshape by the full-size
  heads: "cannot reshape array of shape (32, 4, 8)"); a model_name its PARAM_MAPPING lacks
  (deepseek4-tiny: hooks but no mapping) takes its full-size sibling's mapping (FULL); its
  Qwen3-Next and Qwen3.5 entries have full_attention_interval, which transformers 5's config
  classes no longer keep (so that the exporter fails on them at any size: "KeyError:
  'full_attention_interval'"), set back from layer_types (one full-attention layer a cycle);
- DeepSeek-V4's router variables, which its table names by their type (Tid2EidVar-decoder-...,
  MoEBiasVar-decoder-...), are renamed so from the params-... keys it reads a parameter-only
  checkpoint's nnx_aux leaves as (no checkpoint MaxText 0.2.5 writes has keys of that form:
  its training state keeps them under nnx_aux/, and its own param-only converter fails on
  deepseek4).

Arguments: --tiny_config=DIR, then those of MaxText's exporter."""
import sys

from transformers import AutoConfig
from maxtext.checkpoint_conversion import to_huggingface as th
from maxtext.checkpoint_conversion.utils import hf_model_configs, hf_shape, param_mapping

FULL = {"deepseek4-tiny": "deepseek4-284b"}


def _install(name: str, folder: str) -> None:
    cfg = AutoConfig.from_pretrained(folder)
    for c in (cfg, getattr(cfg, "text_config", None)):
        types = getattr(c, "layer_types", None) or []
        if "linear_attention" in types:
            c.full_attention_interval = types.index("full_attention") + 1
    hf_model_configs.HF_MODEL_CONFIGS[name] = th.HF_MODEL_CONFIGS[name] = cfg
    th.HF_IDS.setdefault(name, "local")
    full = FULL.get(name, name)
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


if __name__ == "__main__":
    import jax
    from absl import app
    tiny = next(a for a in sys.argv if a.startswith("--tiny_config="))
    sys.argv.remove(tiny)
    name = next(a for a in sys.argv if a.startswith("model_name=")).split("=", 1)[1]
    _install(name, tiny.split("=", 1)[1])
    if name.startswith("deepseek4"):
        th.detect_and_extract_checkpoint = _renamed
    jax.config.update("jax_platforms", "cpu")
    app.run(th.main)
