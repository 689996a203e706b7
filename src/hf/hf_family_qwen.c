/* Qwen3 and Qwen2.5: MaxText's qwen3 and qwen2 decoder blocks (qwen3-*, qwen2.5-* models,
 * dense) as transformers' Qwen3ForCausalLM and Qwen2ForCausalLM, as MaxText's exporter maps
 * them (QWEN_MAXTEXT_TO_HF_PARAM_MAPPING and its hooks).
 *
 * Kernels are transposed to [out, in], the attention kernels flattened over their heads; no
 * RoPE reordering (MaxText rotates halves here, as Hugging Face does) and no query scale
 * (these blocks scale the query in the forward pass, query_pre_attn_scalar, not in the kernel).
 * Qwen3 adds per-head query and key norms, Qwen2.5 biases on the query, key and value. */
#include "hf_impl.h"

#include "unroll/alloc.h"

#include <string.h>

static const hf_rule rules[] = {
    {"decoder/layers_{i}/self_attention/query/kernel", "model.layers.{i}.self_attn.q_proj.weight",
     "e h d -> (h d) e", HF_OP_NONE, 0},
    {"decoder/layers_{i}/self_attention/key/kernel", "model.layers.{i}.self_attn.k_proj.weight",
     "e h d -> (h d) e", HF_OP_NONE, 0},
    {"decoder/layers_{i}/self_attention/value/kernel", "model.layers.{i}.self_attn.v_proj.weight",
     "e h d -> (h d) e", HF_OP_NONE, 0},
    {"decoder/layers_{i}/self_attention/out/kernel", "model.layers.{i}.self_attn.o_proj.weight",
     "h d e -> e (h d)", HF_OP_NONE, 0},
    {"decoder/layers_{i}/self_attention/query/bias", "model.layers.{i}.self_attn.q_proj.bias",
     "h d -> (h d)", HF_OP_NONE, HF_IF_ATTENTION_BIAS},
    {"decoder/layers_{i}/self_attention/key/bias", "model.layers.{i}.self_attn.k_proj.bias",
     "h d -> (h d)", HF_OP_NONE, HF_IF_ATTENTION_BIAS},
    {"decoder/layers_{i}/self_attention/value/bias", "model.layers.{i}.self_attn.v_proj.bias",
     "h d -> (h d)", HF_OP_NONE, HF_IF_ATTENTION_BIAS},
    {"decoder/layers_{i}/self_attention/query_norm/scale",
     "model.layers.{i}.self_attn.q_norm.weight", "d -> d", HF_OP_NONE, HF_IF_QK_NORM},
    {"decoder/layers_{i}/self_attention/key_norm/scale",
     "model.layers.{i}.self_attn.k_norm.weight", "d -> d", HF_OP_NONE, HF_IF_QK_NORM},
};

static int applies_qwen3(const ur_settings *s)
{
    return strcmp(s->decoder_block, "qwen3") == 0;
}

static int applies_qwen2(const ur_settings *s)
{
    return strcmp(s->decoder_block, "qwen2") == 0;
}

/* What these Hugging Face classes cannot hold: another RoPE, experts (their own family), the
 * query and key norms in Qwen2 or the biases in Qwen3. */
static int setup(hf_model *m, ur_err *err)
{
    const ur_settings *s = m->s;
    int qwen3 = applies_qwen3(s);
    const char *rope = hf_cfg_str(s, "rope_type", "default");
    const char *why = strcmp(rope, "default") != 0                   ? "rope_type"
                      : hf_cfg_int(s, "num_experts", 1) > 1          ? "num_experts > 1"
                      : qwen3 && hf_cfg_bool(s, "attention_bias", 0) ? "attention_bias"
                      : !qwen3 && hf_cfg_bool(s, "use_qk_norm", 0)   ? "use_qk_norm"
                                                                     : NULL;
    if (why != NULL) {
        return ur_err_set(err, UR_EUNSUPPORTED,
                          "Hugging Face export: decoder_block %s with %s has no Hugging Face "
                          "mapping here",
                          s->decoder_block, why);
    }
    m->flags |= hf_cfg_bool(s, "logits_via_embedding", 0) ? 0 : HF_IF_UNTIED;
    m->flags |= hf_cfg_bool(s, "use_qk_norm", 0) ? HF_IF_QK_NORM : 0;
    m->flags |= hf_cfg_bool(s, "attention_bias", 0) ? HF_IF_ATTENTION_BIAS : 0;
    return UR_OK;
}

/* Qwen's attention-window entries: full attention in every layer. */
static int windows(const hf_model *m, hf_json *j, ur_err *err)
{
    int rc = hf_json_bool(j, NULL, "use_sliding_window", 0, err);
    if (rc == UR_OK) {
        rc = hf_json_null(j, NULL, "sliding_window", err);
    }
    if (rc == UR_OK) {
        rc = hf_json_int(j, NULL, "max_window_layers", m->n_layers, err);
    }
    if (rc == UR_OK) {
        const char **types = ur_calloc((size_t)m->n_layers + 1, sizeof *types);
        if (types == NULL) {
            return ur_err_oom(err);
        }
        for (int64_t i = 0; i < m->n_layers; i++) {
            types[i] = "full_attention";
        }
        rc = hf_json_strs(j, NULL, "layer_types", types, (size_t)m->n_layers, err);
        ur_free(types);
    }
    return rc;
}

static int config_qwen3(const hf_model *m, hf_json *j, ur_err *err)
{
    int rc = hf_config_decoder(m, j, "Qwen3ForCausalLM", "qwen3", 0, err);
    if (rc == UR_OK) {
        rc = hf_json_bool(j, NULL, "attention_bias", 0, err);
    }
    if (rc == UR_OK) {
        rc = windows(m, j, err);
    }
    return rc == UR_OK ? hf_config_rope(m, j, "default", err) : rc;
}

static int config_qwen2(const hf_model *m, hf_json *j, ur_err *err)
{
    int rc = hf_config_decoder(m, j, "Qwen2ForCausalLM", "qwen2", 0, err);
    if (rc == UR_OK) {
        rc = windows(m, j, err);
    }
    return rc == UR_OK ? hf_config_rope(m, j, "default", err) : rc;
}

const hf_family hf_family_qwen3 = {.name = "qwen3",
                                   .architecture = "Qwen3ForCausalLM",
                                   .applies = applies_qwen3,
                                   .setup = setup,
                                   .shared = hf_rules_llama_like,
                                   .n_shared = HF_N_RULES_LLAMA_LIKE,
                                   .rules = rules,
                                   .n_rules = sizeof rules / sizeof rules[0],
                                   .config = config_qwen3};
const hf_family hf_family_qwen2 = {.name = "qwen2",
                                   .architecture = "Qwen2ForCausalLM",
                                   .applies = applies_qwen2,
                                   .setup = setup,
                                   .shared = hf_rules_llama_like,
                                   .n_shared = HF_N_RULES_LLAMA_LIKE,
                                   .rules = rules,
                                   .n_rules = sizeof rules / sizeof rules[0],
                                   .config = config_qwen2};
