/* Llama and Mistral: MaxText's llama2 and mistral decoder blocks (llama2, llama3, llama3.1,
 * llama3.3, mistral models) as transformers' LlamaForCausalLM and MistralForCausalLM.
 *
 * The query and key kernels [emb, heads, head_dim] become [heads * head_dim, emb]; where
 * MaxText rotates interleaved pairs (LLaMARotaryEmbedding: llama3.1 models, rope_type
 * llama3.1) each head's dimensions are reordered evens then odds, since Hugging Face rotates
 * the two halves; where MaxText rotates halves (RotaryEmbedding: the others) they stay. MaxText
 * folds 1/sqrt(head_dim) into the query kernel (attention scores unscaled), Hugging Face
 * scales the scores: the query is multiplied back. MaxText's exporter does the same for
 * llama3.1 (LLAMA31_MAXTEXT_TO_HF_PARAM_HOOK_FN: scale, then adjust_rope, then reshape). */
#include "hf_impl.h"

#include <string.h>

#define Q_INTERLEAVED "e h (k 2) -> (h 2 k) e"
#define Q_HALVES "e h d -> (h d) e"

static const hf_rule rules[] = {
    {"decoder/layers_{i}/self_attention/query/kernel", "model.layers.{i}.self_attn.q_proj.weight",
     Q_INTERLEAVED, HF_OP_MUL_SQRT_HEAD_DIM, HF_IF_ROPE_INTERLEAVED | HF_IF_QUERY_SCALED},
    {"decoder/layers_{i}/self_attention/query/kernel", "model.layers.{i}.self_attn.q_proj.weight",
     Q_INTERLEAVED, HF_OP_NONE, HF_IF_ROPE_INTERLEAVED | HF_IF_QUERY_UNSCALED},
    {"decoder/layers_{i}/self_attention/query/kernel", "model.layers.{i}.self_attn.q_proj.weight",
     Q_HALVES, HF_OP_MUL_SQRT_HEAD_DIM, HF_IF_ROPE_HALVES | HF_IF_QUERY_SCALED},
    {"decoder/layers_{i}/self_attention/query/kernel", "model.layers.{i}.self_attn.q_proj.weight",
     Q_HALVES, HF_OP_NONE, HF_IF_ROPE_HALVES | HF_IF_QUERY_UNSCALED},
    {"decoder/layers_{i}/self_attention/key/kernel", "model.layers.{i}.self_attn.k_proj.weight",
     Q_INTERLEAVED, HF_OP_NONE, HF_IF_ROPE_INTERLEAVED},
    {"decoder/layers_{i}/self_attention/key/kernel", "model.layers.{i}.self_attn.k_proj.weight",
     Q_HALVES, HF_OP_NONE, HF_IF_ROPE_HALVES},
    {"decoder/layers_{i}/self_attention/value/kernel", "model.layers.{i}.self_attn.v_proj.weight",
     "e h d -> (h d) e", HF_OP_NONE, 0},
    {"decoder/layers_{i}/self_attention/out/kernel", "model.layers.{i}.self_attn.o_proj.weight",
     "h d e -> e (h d)", HF_OP_NONE, 0},
};

static int applies_llama(const ur_settings *s)
{
    return strcmp(s->decoder_block, "llama2") == 0;
}

static int applies_mistral(const ur_settings *s)
{
    return strcmp(s->decoder_block, "mistral") == 0;
}

/* 1 when MaxText rotates interleaved pairs for these settings (attentions.py: model_name
 * llama3.1*, or rope_type llama3.1*: LLaMARotaryEmbedding). */
static int rope_interleaved(const ur_settings *s)
{
    return hf_starts(s->model_name, "llama3.1") ||
           hf_starts(hf_cfg_str(s, "rope_type", "default"), "llama3.1");
}

static int setup(hf_model *m, ur_err *err)
{
    const ur_settings *s = m->s;
    const char *rope = hf_cfg_str(s, "rope_type", "default");
    if (!rope_interleaved(s) && strcmp(rope, "default") != 0) {
        return ur_err_set(err, UR_EUNSUPPORTED,
                          "Hugging Face export: rope_type %s of decoder_block %s has no "
                          "Hugging Face mapping here",
                          rope, s->decoder_block);
    }
    if (hf_cfg_bool(s, "use_qk_norm", 0) || hf_cfg_bool(s, "attention_bias", 0)) {
        return ur_err_set(err, UR_EUNSUPPORTED,
                          "Hugging Face export: decoder_block %s with use_qk_norm or "
                          "attention_bias has no place in %s",
                          s->decoder_block,
                          applies_llama(s) ? "LlamaForCausalLM" : "MistralForCausalLM");
    }
    m->flags |= rope_interleaved(s) ? HF_IF_ROPE_INTERLEAVED : HF_IF_ROPE_HALVES;
    m->flags |= HF_IF_QUERY_SCALED;
    m->flags |= hf_cfg_bool(s, "logits_via_embedding", 0) ? 0 : HF_IF_UNTIED;
    return UR_OK;
}

static int config(const hf_model *m, hf_json *j, int mistral, ur_err *err)
{
    const ur_settings *s = m->s;
    int scaled = rope_interleaved(s) && hf_cfg_bool(s, "rope_use_scale", 1);
    /* the llama3 scaling's 8192 original positions need a longer context (Llama 3.1's) */
    int rc = hf_config_decoder(m, j, mistral ? "MistralForCausalLM" : "LlamaForCausalLM",
                               mistral ? "mistral" : "llama", scaled ? 131072 : 0, err);
    if (mistral) {
        if (rc == UR_OK) {
            rc = hf_json_null(j, NULL, "sliding_window", err);
        }
    } else {
        if (rc == UR_OK) {
            rc = hf_json_bool(j, NULL, "attention_bias", 0, err);
        }
        if (rc == UR_OK) {
            rc = hf_json_bool(j, NULL, "mlp_bias", 0, err);
        }
        if (rc == UR_OK) {
            rc = hf_json_int(j, NULL, "pretraining_tp", 1, err);
        }
    }
    /* transformers 5's rope_parameters (as MaxText's exporter writes them): the theta, and
     * LLaMARotaryEmbedding's scaling (factor 8, frequency factors 1 and 4, 8192 positions) */
    if (rc == UR_OK) {
        rc = hf_config_rope(m, j, scaled ? "llama3" : "default", err);
    }
    if (rc == UR_OK && scaled) {
        rc = hf_json_float(j, "rope_parameters", "factor", 8.0, err);
        if (rc == UR_OK) {
            rc = hf_json_float(j, "rope_parameters", "low_freq_factor", 1.0, err);
        }
        if (rc == UR_OK) {
            rc = hf_json_float(j, "rope_parameters", "high_freq_factor", 4.0, err);
        }
        if (rc == UR_OK) {
            rc = hf_json_int(j, "rope_parameters", "original_max_position_embeddings", 8192, err);
        }
    }
    return rc;
}

static int config_llama(const hf_model *m, hf_json *j, ur_err *err)
{
    return config(m, j, 0, err);
}

static int config_mistral(const hf_model *m, hf_json *j, ur_err *err)
{
    return config(m, j, 1, err);
}

const hf_family hf_family_llama = {.name = "llama",
                                   .architecture = "LlamaForCausalLM",
                                   .applies = applies_llama,
                                   .setup = setup,
                                   .shared = hf_rules_llama_like,
                                   .n_shared = HF_N_RULES_LLAMA_LIKE,
                                   .rules = rules,
                                   .n_rules = sizeof rules / sizeof rules[0],
                                   .config = config_llama};
const hf_family hf_family_mistral = {.name = "mistral",
                                     .architecture = "MistralForCausalLM",
                                     .applies = applies_mistral,
                                     .setup = setup,
                                     .shared = hf_rules_llama_like,
                                     .n_shared = HF_N_RULES_LLAMA_LIKE,
                                     .rules = rules,
                                     .n_rules = sizeof rules / sizeof rules[0],
                                     .config = config_mistral};
