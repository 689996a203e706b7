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
    {"token_embedder/embedding", "model.embed_tokens.weight", "v e -> v e", HF_OP_NONE, 0},
    {"decoder/decoder_norm/scale", "model.norm.weight", "e -> e", HF_OP_NONE, 0},
    {"decoder/logits_dense/kernel", "lm_head.weight", "e v -> v e", HF_OP_NONE, HF_IF_UNTIED},
    {"decoder/layers_{i}/pre_self_attention_layer_norm/scale",
     "model.layers.{i}.input_layernorm.weight", "e -> e", HF_OP_NONE, 0},
    {"decoder/layers_{i}/post_self_attention_layer_norm/scale",
     "model.layers.{i}.post_attention_layernorm.weight", "e -> e", HF_OP_NONE, 0},
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
    {"decoder/layers_{i}/mlp/wi_0/kernel", "model.layers.{i}.mlp.gate_proj.weight", "e m -> m e",
     HF_OP_NONE, 0},
    {"decoder/layers_{i}/mlp/wi_1/kernel", "model.layers.{i}.mlp.up_proj.weight", "e m -> m e",
     HF_OP_NONE, 0},
    {"decoder/layers_{i}/mlp/wo/kernel", "model.layers.{i}.mlp.down_proj.weight", "m e -> e m",
     HF_OP_NONE, 0},
};

static int applies_llama(const ur_settings *s)
{
    return strcmp(s->decoder_block, "llama2") == 0;
}

static int applies_mistral(const ur_settings *s)
{
    return strcmp(s->decoder_block, "mistral") == 0;
}

static int starts(const char *s, const char *prefix)
{
    return s != NULL && strncmp(s, prefix, strlen(prefix)) == 0;
}

static int get_bool(const ur_settings *s, const char *key, int dflt)
{
    int v = dflt;
    if (s->config != NULL && ur_config_get_bool(s->config, key, &v, NULL) < 0) {
        v = dflt;
    }
    return v;
}

static const char *get_str(const ur_settings *s, const char *key, const char *dflt)
{
    const char *v = dflt;
    if (s->config == NULL || ur_config_get_str(s->config, key, &v, NULL) < 0 || v == NULL) {
        v = dflt;
    }
    return v;
}

static double get_float(const ur_settings *s, const char *key, double dflt)
{
    double v = dflt;
    if (s->config == NULL || ur_config_get_float(s->config, key, &v, NULL) < 0) {
        v = dflt;
    }
    return v;
}

/* 1 when MaxText rotates interleaved pairs for these settings (attentions.py: model_name
 * llama3.1*, or rope_type llama3.1*: LLaMARotaryEmbedding). */
static int rope_interleaved(const ur_settings *s)
{
    return starts(s->model_name, "llama3.1") ||
           starts(get_str(s, "rope_type", "default"), "llama3.1");
}

static int setup(hf_model *m, ur_err *err)
{
    const ur_settings *s = m->s;
    const char *rope = get_str(s, "rope_type", "default");
    if (!rope_interleaved(s) && strcmp(rope, "default") != 0) {
        return ur_err_set(err, UR_EUNSUPPORTED,
                          "Hugging Face export: rope_type %s of decoder_block %s has no "
                          "Hugging Face mapping here",
                          rope, s->decoder_block);
    }
    if (get_bool(s, "use_qk_norm", 0) || get_bool(s, "attention_bias", 0)) {
        return ur_err_set(err, UR_EUNSUPPORTED,
                          "Hugging Face export: decoder_block %s with use_qk_norm or "
                          "attention_bias has no place in %s",
                          s->decoder_block,
                          applies_llama(s) ? "LlamaForCausalLM" : "MistralForCausalLM");
    }
    m->flags |= rope_interleaved(s) ? HF_IF_ROPE_INTERLEAVED : HF_IF_ROPE_HALVES;
    m->flags |= HF_IF_QUERY_SCALED;
    m->flags |= get_bool(s, "logits_via_embedding", 0) ? 0 : HF_IF_UNTIED;
    return UR_OK;
}

/* The shapes that give the architecture: the embedding [vocab, emb], layer 0's query [emb,
 * heads, head_dim], key [emb, kv_heads, head_dim] and wi_0 [emb, mlp]. */
static int dims(const hf_model *m, uint64_t *vocab, uint64_t *emb, uint64_t *heads,
                uint64_t *kv_heads, uint64_t *head_dim, uint64_t *mlp, ur_err *err)
{
    int re = 0, rq = 0, rk = 0, rm = 0;
    const uint64_t *e = hf_model_shape(m, "token_embedder/embedding", &re);
    const uint64_t *q = hf_model_shape(m, "decoder/layers_0/self_attention/query/kernel", &rq);
    const uint64_t *k = hf_model_shape(m, "decoder/layers_0/self_attention/key/kernel", &rk);
    const uint64_t *w = hf_model_shape(m, "decoder/layers_0/mlp/wi_0/kernel", &rm);
    if (e == NULL || q == NULL || k == NULL || w == NULL || re != 2 || rq != 3 || rk != 3 ||
        rm != 2) {
        return ur_err_set(err, UR_EINVAL,
                          "Hugging Face export: the checkpoint lacks the embedding, or layer 0's "
                          "query, key or wi_0 kernel, of a %s model",
                          m->s->decoder_block);
    }
    *vocab = e[0];
    *emb = e[1];
    *heads = q[1];
    *head_dim = q[2];
    *kv_heads = k[1];
    *mlp = w[1];
    return UR_OK;
}

static int config(const hf_model *m, hf_json *j, int mistral, ur_err *err)
{
    const ur_settings *s = m->s;
    uint64_t vocab = 0, emb = 0, heads = 0, kv = 0, hd = 0, mlp = 0;
    const char *arch = mistral ? "MistralForCausalLM" : "LlamaForCausalLM";
    int rc = dims(m, &vocab, &emb, &heads, &kv, &hd, &mlp, err);
    int scaled = rope_interleaved(s) && get_bool(s, "rope_use_scale", 1);
    int64_t max_len = 0;

    if (rc == UR_OK && s->config != NULL) {
        (void)ur_config_get_int(s->config, "max_target_length", &max_len, NULL);
    }
    if (rc == UR_OK) {
        rc = hf_json_strs(j, "architectures", &arch, 1, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_str(j, NULL, "model_type", mistral ? "mistral" : "llama", err);
    }
    if (rc == UR_OK) {
        rc = hf_json_int(j, NULL, "vocab_size", (int64_t)vocab, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_int(j, NULL, "hidden_size", (int64_t)emb, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_int(j, NULL, "intermediate_size", (int64_t)mlp, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_int(j, NULL, "num_hidden_layers", m->n_layers, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_int(j, NULL, "num_attention_heads", (int64_t)heads, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_int(j, NULL, "num_key_value_heads", (int64_t)kv, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_int(j, NULL, "head_dim", (int64_t)hd, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_str(j, NULL, "hidden_act", "silu", err);
    }
    if (rc == UR_OK) {
        rc = hf_json_float(j, NULL, "rms_norm_eps",
                           get_float(s, "normalization_layer_epsilon", 1e-5), err);
    }
    /* the llama3 scaling's 8192 original positions need a longer context (Llama 3.1's) */
    if (rc == UR_OK) {
        rc = hf_json_int(j, NULL, "max_position_embeddings",
                         scaled        ? 131072
                         : max_len > 0 ? max_len
                                       : 2048,
                         err);
    }
    if (rc == UR_OK) {
        rc = hf_json_bool(j, NULL, "tie_word_embeddings", !(m->flags & HF_IF_UNTIED), err);
    }
    if (rc == UR_OK) {
        rc = hf_json_float(j, NULL, "attention_dropout", 0.0, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_float(j, NULL, "initializer_range", 0.02, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_bool(j, NULL, "use_cache", 1, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_str(j, NULL, "dtype", ur_dtype_name(m->weight_dtype), err);
    }
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
        rc = hf_json_float(j, "rope_parameters", "rope_theta",
                           get_float(s, "rope_max_timescale", 10000), err);
    }
    if (rc == UR_OK) {
        rc = hf_json_str(j, "rope_parameters", "rope_type", scaled ? "llama3" : "default", err);
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

const hf_family hf_family_llama = {
    "llama",     "LlamaForCausalLM", applies_llama, setup, rules, sizeof rules / sizeof rules[0],
    config_llama};
const hf_family hf_family_mistral = {
    "mistral", "MistralForCausalLM",           applies_mistral, setup,
    rules,     sizeof rules / sizeof rules[0], config_mistral};
