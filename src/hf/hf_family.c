/* The families a model can be exported as (one file each, src/hf/hf_family_<name>.c, listed
 * here) and what their tables share: name patterns with a layer index. */
#include "hf_impl.h"

#include "unroll/alloc.h"

#include <stdio.h>
#include <string.h>

static const hf_family *const families[] = {
    &hf_family_llama,     &hf_family_mistral,    &hf_family_mixtral,     &hf_family_qwen3,
    &hf_family_qwen3_moe, &hf_family_qwen2,      &hf_family_olmo3,       &hf_family_gemma2,
    &hf_family_gemma3,    &hf_family_gemma4,     &hf_family_deepseek_v2, &hf_family_deepseek,
    &hf_family_gpt_oss,   &hf_family_qwen3_next, &hf_family_qwen3_5,     &hf_family_deepseek_v32,
    &hf_family_deepseek4, &hf_family_llama4,
};

const hf_rule hf_rules_llama_like[HF_N_RULES_LLAMA_LIKE] = {
    /* every decoder's (HF_N_RULES_DECODER_BASE) */
    {"token_embedder/embedding", "model.embed_tokens.weight", "v e -> v e", HF_OP_NONE, 0},
    {"decoder/decoder_norm/scale", "model.norm.weight", "e -> e", HF_OP_NONE, 0},
    {"decoder/logits_dense/kernel", "lm_head.weight", "e v -> v e", HF_OP_NONE, HF_IF_UNTIED},
    {"decoder/layers_{i}/mlp/wi_0/kernel", "model.layers.{i}.mlp.gate_proj.weight", "e m -> m e",
     HF_OP_NONE, HF_IF_DENSE_MLP},
    {"decoder/layers_{i}/mlp/wi_1/kernel", "model.layers.{i}.mlp.up_proj.weight", "e m -> m e",
     HF_OP_NONE, HF_IF_DENSE_MLP},
    {"decoder/layers_{i}/mlp/wo/kernel", "model.layers.{i}.mlp.down_proj.weight", "m e -> e m",
     HF_OP_NONE, HF_IF_DENSE_MLP},
    /* a pre-norm layer's two norms */
    {"decoder/layers_{i}/pre_self_attention_layer_norm/scale",
     "model.layers.{i}.input_layernorm.weight", "e -> e", HF_OP_NONE, 0},
    {"decoder/layers_{i}/post_self_attention_layer_norm/scale",
     "model.layers.{i}.post_attention_layernorm.weight", "e -> e", HF_OP_NONE, 0},
};

const hf_rule *hf_family_rule(const hf_family *f, size_t k)
{
    return k < f->n_shared ? &f->shared[k] : &f->rules[k - f->n_shared];
}

const hf_family *hf_family_for(const ur_settings *s)
{
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) {
        if (families[i]->applies(s)) {
            return families[i];
        }
    }
    return NULL;
}

int hf_match(const char *pat, const char *path, int64_t *layer)
{
    *layer = -1;
    while (*pat != '\0') {
        if (strncmp(pat, "{i}", 3) == 0) {
            int64_t v = 0;
            const char *start = path;
            while (*path >= '0' && *path <= '9' && path - start < 9) {
                v = v * 10 + (*path++ - '0');
            }
            /* one or more digits, no leading zero but for 0 itself */
            if (path == start || (start[0] == '0' && path - start > 1)) {
                return 0;
            }
            *layer = v;
            pat += 3;
            continue;
        }
        if (*pat++ != *path++) {
            return 0;
        }
    }
    return *path == '\0';
}

int hf_expand(const char *pat, int64_t layer, int64_t expert, char *out, size_t n)
{
    static const struct {
        const char *token;
        int64_t mul, add;
        int expert;
    } tokens[] = {{"{i}", 1, 0, 0}, {"{2i}", 2, 0, 0}, {"{2i+1}", 2, 1, 0}, {"{e}", 1, 0, 1}};
    size_t k = 0;
    while (*pat != '\0') {
        size_t t = 0;
        while (t < 4 && strncmp(pat, tokens[t].token, strlen(tokens[t].token)) != 0) {
            t++;
        }
        if (t < 4) {
            int64_t v = tokens[t].expert ? expert : layer;
            int w = snprintf(out + k, n - k, "%lld", (long long)v * tokens[t].mul + tokens[t].add);
            if (w < 0 || (size_t)w >= n - k) {
                return 0;
            }
            k += (size_t)w;
            pat += strlen(tokens[t].token);
            continue;
        }
        if (k + 1 >= n) {
            return 0;
        }
        out[k++] = *pat++;
    }
    out[k] = '\0';
    return 1;
}

const uint64_t *hf_model_shape(const hf_model *m, const char *path, int *rank)
{
    size_t at;
    if (ur_strmap_get(&m->by_path, path, strlen(path), &at) != 1) {
        return NULL;
    }
    *rank = m->ranks[at];
    return m->shapes[at];
}

const uint64_t *hf_model_layer_shape(const hf_model *m, int64_t i, const char *what, int *rank)
{
    char path[160];
    snprintf(path, sizeof path, "decoder/layers_%lld/%s", (long long)i, what);
    return hf_model_shape(m, path, rank);
}

int64_t hf_model_layers(const hf_model *m)
{
    return m->n_layers * (m->per_layer > 1 ? m->per_layer : 1);
}

int hf_starts(const char *s, const char *prefix)
{
    return s != NULL && strncmp(s, prefix, strlen(prefix)) == 0;
}

int hf_cfg_bool(const ur_settings *s, const char *key, int dflt)
{
    int v = dflt;
    if (s->config != NULL && ur_config_get_bool(s->config, key, &v, NULL) < 0) {
        v = dflt;
    }
    return v;
}

int64_t hf_cfg_int(const ur_settings *s, const char *key, int64_t dflt)
{
    int64_t v = dflt;
    if (s->config == NULL || ur_config_get_int(s->config, key, &v, NULL) < 0) {
        v = dflt;
    }
    return v;
}

const char *hf_cfg_str(const ur_settings *s, const char *key, const char *dflt)
{
    const char *v = dflt;
    if (s->config == NULL || ur_config_get_str(s->config, key, &v, NULL) < 0 || v == NULL) {
        v = dflt;
    }
    return v;
}

double hf_cfg_float(const ur_settings *s, const char *key, double dflt)
{
    double v = dflt;
    if (s->config == NULL || ur_config_get_float(s->config, key, &v, NULL) < 0) {
        v = dflt;
    }
    return v;
}

/* The shapes that give the architecture. */
static int dims(const hf_model *m, uint64_t d[6], ur_err *err)
{
    int re = 0, rq = 0, rk = 0, rm = 0;
    const uint64_t *e = hf_model_shape(m, "token_embedder/embedding", &re);
    /* the attention is "attention" in olmo3's layer, "self_attention" in the others */
    const uint64_t *q = hf_model_shape(m, "decoder/layers_0/self_attention/query/kernel", &rq);
    const uint64_t *k = hf_model_shape(m, "decoder/layers_0/self_attention/key/kernel", &rk);
    if (q == NULL && k == NULL) {
        q = hf_model_shape(m, "decoder/layers_0/attention/query/kernel", &rq);
        k = hf_model_shape(m, "decoder/layers_0/attention/key/kernel", &rk);
    }
    if (q == NULL && k == NULL) {
        q = hf_model_shape(m, "decoder/layers_0/GptOssAttention/query/kernel", &rq);
        k = hf_model_shape(m, "decoder/layers_0/GptOssAttention/key/kernel", &rk);
    }
    if (q == NULL && k == NULL) { /* gemma2's pair: its local layer's */
        q = hf_model_shape(m, "decoder/layers_0/self_attention_local/query/kernel", &rq);
        k = hf_model_shape(m, "decoder/layers_0/self_attention_local/key/kernel", &rk);
    }
    const uint64_t *w = hf_model_shape(m, "decoder/layers_0/mlp/wi_0/kernel", &rm);
    if (w == NULL) {
        w = hf_model_shape(m, "decoder/layers_0/mlp_local/wi_0/kernel", &rm);
    }
    /* a model of routed experts has no dense MLP: its family says what the size is */
    uint64_t mlp[2] = {0, m->intermediate_size};
    if (w == NULL && m->intermediate_size > 0) {
        w = mlp;
        rm = 2;
    }
    if (e == NULL || q == NULL || k == NULL || w == NULL || re != 2 || rq != 3 || rk != 3 ||
        rm != 2) {
        return ur_err_set(err, UR_EINVAL,
                          "Hugging Face export: the checkpoint lacks the embedding, or layer 0's "
                          "query, key or wi_0 kernel, of a %s model",
                          m->s->decoder_block);
    }
    d[0] = m->vocab_rows > 0 ? m->vocab_rows : e[0]; /* vocab */
    d[1] = e[1]; /* emb */
    d[2] = q[1]; /* heads */
    d[3] = k[1]; /* kv heads */
    d[4] = q[2]; /* head_dim */
    d[5] = w[1]; /* mlp */
    return UR_OK;
}

int hf_config_text(const hf_model *m, hf_json *j, const char *in, int64_t max_positions,
                   ur_err *err)
{
    const ur_settings *s = m->s;
    uint64_t d[6] = {0};
    int64_t max_len = 0;
    int rc = dims(m, d, err);

    if (rc == UR_OK && max_positions <= 0 && s->config != NULL) {
        (void)ur_config_get_int(s->config, "max_target_length", &max_len, NULL);
        max_positions = max_len > 0 ? max_len : 2048;
    }
    static const char *const sizes[] = {
        "vocab_size",          "hidden_size", "num_attention_heads",
        "num_key_value_heads", "head_dim",    "intermediate_size"};
    for (size_t i = 0; i < 6 && rc == UR_OK; i++) {
        rc = hf_json_int(j, in, sizes[i], (int64_t)d[i], err);
    }
    if (rc == UR_OK) {
        rc = hf_json_int(j, in, "num_hidden_layers", hf_model_layers(m), err);
    }
    if (rc == UR_OK) {
        rc = hf_json_float(j, in, "rms_norm_eps",
                           hf_cfg_float(s, "normalization_layer_epsilon", 1e-5), err);
    }
    if (rc == UR_OK) {
        rc = hf_json_int(j, in, "max_position_embeddings", max_positions, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_bool(j, in, "tie_word_embeddings", !(m->flags & HF_IF_UNTIED), err);
    }
    if (rc == UR_OK) {
        rc = hf_json_float(j, in, "attention_dropout", 0.0, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_float(j, in, "initializer_range", 0.02, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_bool(j, in, "use_cache", 1, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_str(j, in, "dtype", ur_dtype_name(m->weight_dtype), err);
    }
    return rc;
}

int hf_config_decoder(const hf_model *m, hf_json *j, const char *architecture,
                      const char *model_type, int64_t max_positions, ur_err *err)
{
    int rc = hf_json_strs(j, NULL, "architectures", &architecture, 1, err);
    if (rc == UR_OK) {
        rc = hf_json_str(j, NULL, "model_type", model_type, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_str(j, NULL, "hidden_act", "silu", err);
    }
    return rc == UR_OK ? hf_config_text(m, j, NULL, max_positions, err) : rc;
}

int hf_config_yarn(const hf_model *m, hf_json *j, const char *in, double factor, int truncate,
                   ur_err *err)
{
    const ur_settings *s = m->s;
    int rc = hf_json_float(j, in, "factor", hf_cfg_float(s, "rope_factor", factor), err);
    if (rc == UR_OK) {
        rc = hf_json_int(j, in, "original_max_position_embeddings",
                         hf_cfg_int(s, "original_max_position_embeddings", 4096), err);
    }
    if (rc == UR_OK) {
        rc = hf_json_float(j, in, "beta_fast", hf_cfg_float(s, "beta_fast", 32), err);
    }
    if (rc == UR_OK) {
        rc = hf_json_float(j, in, "beta_slow", hf_cfg_float(s, "beta_slow", 1), err);
    }
    if (rc == UR_OK) {
        rc = hf_json_bool(j, in, "truncate", hf_cfg_bool(s, "rope_truncate", truncate), err);
    }
    /* without MaxText's attention scaling the rotation is not scaled (Hugging Face's default
     * is YaRN's 0.1 ln(factor) + 1, MaxText's when rope_attention_scaling) */
    if (rc == UR_OK && !hf_cfg_bool(s, "rope_attention_scaling", 0)) {
        rc = hf_json_float(j, in, "attention_factor", 1.0, err);
    }
    return rc;
}

int hf_config_llama3_scaling(hf_json *j, ur_err *err)
{
    int rc = hf_json_float(j, "rope_parameters", "factor", 8.0, err);
    if (rc == UR_OK) {
        rc = hf_json_float(j, "rope_parameters", "low_freq_factor", 1.0, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_float(j, "rope_parameters", "high_freq_factor", 4.0, err);
    }
    return rc == UR_OK
               ? hf_json_int(j, "rope_parameters", "original_max_position_embeddings", 8192, err)
               : rc;
}

int hf_config_basics(const hf_model *m, hf_json *j, const char *in, double eps, ur_err *err)
{
    int rc = hf_json_str(j, in, "hidden_act", "silu", err);
    if (rc == UR_OK) {
        rc = hf_json_float(j, in, "rms_norm_eps",
                           hf_cfg_float(m->s, "normalization_layer_epsilon", eps), err);
    }
    if (rc == UR_OK) {
        rc = hf_json_bool(j, in, "tie_word_embeddings", !(m->flags & HF_IF_UNTIED), err);
    }
    if (rc == UR_OK) {
        rc = hf_json_bool(j, in, "attention_bias", 0, err);
    }
    return rc == UR_OK ? hf_json_str(j, in, "dtype", ur_dtype_name(m->weight_dtype), err) : rc;
}

void hf_rope_object(const char *in, char *out, size_t n)
{
    snprintf(out, n, "%s%srope_parameters", in != NULL ? in : "", in != NULL ? "/" : "");
}

int hf_config_rope(const hf_model *m, hf_json *j, const char *in, const char *rope_type,
                   ur_err *err)
{
    char obj[96];
    hf_rope_object(in, obj, sizeof obj);
    int rc = hf_json_float(j, obj, "rope_theta", hf_cfg_float(m->s, "rope_max_timescale", 10000),
                           err);
    return rc == UR_OK ? hf_json_str(j, obj, "rope_type", rope_type, err) : rc;
}

int hf_config_layer_types(const hf_model *m, hf_json *j, const char *in, int cycle, ur_err *err)
{
    int64_t n = hf_model_layers(m);
    const char **types = ur_calloc((size_t)n + 1, sizeof *types);
    int rc;
    if (types == NULL) {
        return ur_err_oom(err);
    }
    for (int64_t i = 0; i < n; i++) {
        types[i] = i % cycle == cycle - 1 ? "full_attention" : "sliding_attention";
    }
    rc = hf_json_strs(j, in, "layer_types", types, (size_t)n, err);
    ur_free(types);
    return rc;
}

int hf_config_gemma(const hf_model *m, hf_json *j, const char *in, int64_t query_pre_attn_scalar,
                    ur_err *err)
{
    const ur_settings *s = m->s;
    double attn_cap = hf_cfg_float(s, "attn_logits_soft_cap", 0);
    double final_cap = hf_cfg_float(s, "final_logits_soft_cap", 0);
    int rc = hf_json_str(j, in, "hidden_activation", "gelu_pytorch_tanh", err);
    if (rc == UR_OK) {
        rc = hf_json_int(j, in, "query_pre_attn_scalar", query_pre_attn_scalar, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_bool(j, in, "attention_bias", 0, err);
    }
    if (rc == UR_OK) {
        rc = attn_cap > 0 ? hf_json_float(j, in, "attn_logit_softcapping", attn_cap, err)
                          : hf_json_null(j, in, "attn_logit_softcapping", err);
    }
    if (rc == UR_OK) {
        rc = final_cap > 0 ? hf_json_float(j, in, "final_logit_softcapping", final_cap, err)
                           : hf_json_null(j, in, "final_logit_softcapping", err);
    }
    if (rc == UR_OK) {
        rc = hf_json_int(j, in, "sliding_window", hf_cfg_int(s, "sliding_window_size", 4096), err);
    }
    return rc;
}

int hf_config_vision(const hf_model *m, hf_json *j, const char *model_type, const hf_vit_key *keys,
                     size_t n, ur_err *err)
{
    int rc = hf_json_str(j, "vision_config", "model_type", model_type, err);
    for (size_t i = 0; i < n && rc == UR_OK; i++) {
        rc = hf_json_int(j, "vision_config", keys[i].hf,
                         hf_cfg_int(m->s, keys[i].mt, keys[i].dflt), err);
    }
    return rc;
}

int hf_config_multimodal(const hf_model *m, hf_json *j, const char *architecture,
                         const char *model_type, ur_err *err)
{
    int rc = hf_json_strs(j, NULL, "architectures", &architecture, 1, err);
    if (rc == UR_OK) {
        rc = hf_json_str(j, NULL, "model_type", model_type, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_bool(j, NULL, "tie_word_embeddings", !(m->flags & HF_IF_UNTIED), err);
    }
    return rc == UR_OK ? hf_json_str(j, NULL, "dtype", ur_dtype_name(m->weight_dtype), err) : rc;
}
