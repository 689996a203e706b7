/* Gemma 4, dense: MaxText's gemma4 decoder block without experts (gemma4-31b) as transformers'
 * Gemma4ForConditionalGeneration, as MaxText's exporter maps it
 * (GEMMA4_MAXTEXT_TO_HF_PARAM_MAPPING and its hooks): the language model under
 * "model.language_model.", kernels transposed to [out, in] and flattened over their heads.
 *
 * Unlike Gemma 2 and 3, the norm scales are stored as Hugging Face uses them (the exporter's
 * scale_rmsnorm_layer only reshapes). The embedding is stored times sqrt(hidden_size), which
 * Hugging Face's forward pass applies itself. Five sliding-window layers, then a global one
 * with its own head dim, key heads and partial RoPE; with share_kv_projections the global
 * layer's key is its value too (attention_k_eq_v), so it has no value kernel: config.json
 * says so from the checkpoint, which must be consistent. Each layer has a learned output
 * scalar. The mixture-of-experts gemma4-26b: every layer's MLP is its shared expert, beside
 * the router (its scales and kernel), three more norms and the routed experts, stacked
 * [experts, ...] as MaxText holds them: the gate and up kernels [experts, emb, mlp] transposed
 * and concatenated along their rows into gate_up_proj [experts, 2 * mlp, emb] (the exporter's
 * moe_gate_up_hook), each written to its rows as its chunks come, the down kernel transposed
 * per expert. A text-only export (use_multimodal=false) has no vision
 * tower, as MaxText's exporter's has none: transformers loads it with a fresh one. */
#include "hf_impl.h"

#include <stdio.h>
#include <string.h>

#define LM "model.language_model."
#define LAYER(mt, hf, pattern)                                                                    \
    {                                                                                             \
        "decoder/layers_{i}/" mt, LM "layers.{i}." hf, pattern, HF_OP_NONE, 0                     \
    }
/* a parameter of some layers only: a dense MLP's, or the experts' and what goes with them */
#define LAYER_IF(mt, hf, pattern, when)                                                           \
    {                                                                                             \
        "decoder/layers_{i}/" mt, LM "layers.{i}." hf, pattern, HF_OP_NONE, (when)                \
    }
#define MOE "mlp/moe_block/MoeBlock_0/"
#define SHARED "mlp/moe_block/shared_experts/"

static const hf_rule rules[] = {
    {"token_embedder/embedding", LM "embed_tokens.weight", "v e -> v e", HF_OP_DIV_SQRT_EMB, 0},
    {"decoder/decoder_norm/scale", LM "norm.weight", "e -> e", HF_OP_NONE, 0},
    LAYER("pre_self_attention_norm/scale", "input_layernorm.weight", "e -> e"),
    LAYER("post_self_attention_norm/scale", "post_attention_layernorm.weight", "e -> e"),
    LAYER("pre_ffw_norm/scale", "pre_feedforward_layernorm.weight", "e -> e"),
    LAYER("post_ffw_norm/scale", "post_feedforward_layernorm.weight", "e -> e"),
    LAYER("self_attention/query_norm/scale", "self_attn.q_norm.weight", "d -> d"),
    LAYER("self_attention/key_norm/scale", "self_attn.k_norm.weight", "d -> d"),
    LAYER("self_attention/query/kernel", "self_attn.q_proj.weight", "e h d -> (h d) e"),
    LAYER("self_attention/key/kernel", "self_attn.k_proj.weight", "e h d -> (h d) e"),
    {"decoder/layers_{i}/self_attention/value/kernel", LM "layers.{i}.self_attn.v_proj.weight",
     "e h d -> (h d) e", HF_OP_NONE, HF_SOME_LAYERS},
    LAYER("self_attention/out/kernel", "self_attn.o_proj.weight", "h d e -> e (h d)"),
    LAYER_IF("mlp/wi_0/kernel", "mlp.gate_proj.weight", "e m -> m e", HF_IF_DENSE_MLP),
    LAYER_IF("mlp/wi_1/kernel", "mlp.up_proj.weight", "e m -> m e", HF_IF_DENSE_MLP),
    LAYER_IF("mlp/wo/kernel", "mlp.down_proj.weight", "m e -> e m", HF_IF_DENSE_MLP),
    LAYER_IF(SHARED "wi_0/kernel", "mlp.gate_proj.weight", "e m -> m e", HF_IF_EXPERTS),
    LAYER_IF(SHARED "wi_1/kernel", "mlp.up_proj.weight", "e m -> m e", HF_IF_EXPERTS),
    LAYER_IF(SHARED "wo/kernel", "mlp.down_proj.weight", "m e -> e m", HF_IF_EXPERTS),
    LAYER_IF("mlp/pre_feedforward_layernorm_2/scale", "pre_feedforward_layernorm_2.weight",
             "e -> e", HF_IF_EXPERTS),
    LAYER_IF("mlp/post_feedforward_layernorm_1/scale", "post_feedforward_layernorm_1.weight",
             "e -> e", HF_IF_EXPERTS),
    LAYER_IF("mlp/post_feedforward_layernorm_2/scale", "post_feedforward_layernorm_2.weight",
             "e -> e", HF_IF_EXPERTS),
    LAYER_IF("mlp/pre_forward_scale_2", "router.scale", "e -> e", HF_IF_EXPERTS),
    LAYER_IF(MOE "gate/kernel", "router.proj.weight", "e x -> x e", HF_IF_EXPERTS),
    LAYER_IF(MOE "per_expert_scale", "router.per_expert_scale", "x -> x", HF_IF_EXPERTS),
    LAYER_IF(MOE "wi_0", "experts.gate_up_proj", "x e m -> x m e", HF_IF_EXPERTS | HF_FIRST_ROWS),
    LAYER_IF(MOE "wi_1", "experts.gate_up_proj", "x e m -> x m e", HF_IF_EXPERTS | HF_LAST_ROWS),
    LAYER_IF(MOE "wo", "experts.down_proj", "x m e -> x e m", HF_IF_EXPERTS),
    LAYER("layer_scalar", "layer_scalar", "x -> x"),
};

#undef LAYER_IF
#undef MOE
#undef SHARED

/* gemma4.py's get_attention_type: five sliding, then one global. */
#define CYCLE 6
#define TEXT "text_config"

static int applies(const ur_settings *s)
{
    return strcmp(s->decoder_block, "gemma4") == 0;
}

#define SHARED_WI_0 "decoder/layers_0/mlp/moe_block/shared_experts/wi_0/kernel"
#define EXPERTS_WI_0 "decoder/layers_0/mlp/moe_block/MoeBlock_0/wi_0"

/* gemma4-26b's layers: Gemma4TextRouter takes the softmax's top k, renormalized, and the
 * layer always has the shared expert beside the routed ones (intermediate_size: its size). */
static int setup_experts(hf_model *m, ur_err *err)
{
    const ur_settings *s = m->s;
    const char *score = hf_cfg_str(s, "routed_score_func", "");
    int rank = 0;
    const uint64_t *shared = hf_model_shape(m, SHARED_WI_0, &rank);
    const char *why = !hf_cfg_bool(s, "norm_topk_prob", 0)                ? "norm_topk_prob false"
                      : hf_cfg_int(s, "shared_experts", 0) < 1            ? "no shared expert"
                      : hf_cfg_bool(s, "routed_bias", 0)                  ? "routed_bias"
                      : score[0] != '\0' && strcmp(score, "softmax") != 0 ? "routed_score_func"
                                                                          : NULL;
    if (why != NULL) {
        return ur_err_set(err, UR_EUNSUPPORTED,
                          "Hugging Face export: gemma4 experts with %s have no place in "
                          "Gemma4ForConditionalGeneration",
                          why);
    }
    if (shared == NULL || rank != 2) {
        return ur_err_set(err, UR_EINVAL,
                          "Hugging Face export: the checkpoint lacks layer 0's " SHARED_WI_0
                          " [emb, mlp] of a gemma4 model with experts");
    }
    m->flags = (m->flags & ~(unsigned)HF_IF_DENSE_MLP) | HF_IF_EXPERTS;
    m->intermediate_size = shared[1];
    return UR_OK;
}

static int setup(hf_model *m, ur_err *err)
{
    const ur_settings *s = m->s;
    if (!hf_cfg_bool(s, "use_post_attn_norm", 1) || !hf_cfg_bool(s, "use_post_ffw_norm", 1)) {
        return ur_err_set(err, UR_EUNSUPPORTED,
                          "Hugging Face export: decoder_block gemma4 without its post-attention "
                          "or post-MLP norm has no place in Gemma4ForConditionalGeneration");
    }
    if (hf_cfg_float(s, "local_rope_proportion", 1.0) != 1.0) {
        return ur_err_set(err, UR_EUNSUPPORTED,
                          "Hugging Face export: gemma4 with local_rope_proportion != 1 has no "
                          "place in Gemma4ForConditionalGeneration (its sliding layers rotate "
                          "every dimension)");
    }
    if (!hf_cfg_bool(s, "logits_via_embedding", 1)) {
        return ur_err_set(err, UR_EUNSUPPORTED,
                          "Hugging Face export: gemma4 with logits_via_embedding=false has no "
                          "place in Gemma4ForConditionalGeneration (its output projection is the "
                          "embedding)");
    }
    return hf_cfg_int(s, "num_experts", 1) > 1 ? setup_experts(m, err) : UR_OK;
}

/* The shape of attention parameter `name` ("key", "value") of layer i, NULL when it has
 * none. */
static const uint64_t *attention_shape(const hf_model *m, int64_t i, const char *name, int *rank)
{
    char path[128];
    snprintf(path, sizeof path, "decoder/layers_%lld/self_attention/%s/kernel", (long long)i,
             name);
    return hf_model_shape(m, path, rank);
}

/* The global layers' head dim and key heads: the first global layer's key kernel [emb, heads,
 * head_dim], else the settings (a model too short to have a global layer). */
static void global_dims(const hf_model *m, int64_t *head_dim, int64_t *kv_heads)
{
    int rank = 0;
    const uint64_t *k = attention_shape(m, CYCLE - 1, "key", &rank);
    if (k != NULL && rank == 3) {
        *kv_heads = (int64_t)k[1];
        *head_dim = (int64_t)k[2];
        return;
    }
    *head_dim = hf_cfg_int(m->s, "global_head_dim", 512);
    *kv_heads = hf_cfg_int(m->s, "global_num_kv_heads", 0);
}

/* Whether the global layers' key is their value (share_kv_projections): they have no value
 * kernel. */
static int k_eq_v(const hf_model *m)
{
    int rank = 0;
    return attention_shape(m, CYCLE - 1, "value", &rank) == NULL;
}

/* The value kernels are where transformers looks for them: every sliding layer has one, and
 * the global layers all have one or none (an absent one would be made up at load). */
static int check_values(const hf_model *m, ur_err *err)
{
    int none = k_eq_v(m);
    for (int64_t i = 0; i < hf_model_layers(m); i++) {
        int rank = 0, global = i % CYCLE == CYCLE - 1;
        if ((attention_shape(m, i, "value", &rank) == NULL) != (global && none)) {
            return ur_err_set(err, UR_EINVAL,
                              "Hugging Face export (gemma4): decoder/layers_%lld/self_attention/"
                              "value/kernel: layer %lld %s a value kernel where its other %s "
                              "layers %s",
                              (long long)i, (long long)i, global && none ? "has" : "lacks",
                              global ? "global" : "sliding", global && none ? "have none" : "do");
        }
    }
    return UR_OK;
}

/* Each attention type's RoPE, as gemma4.py picks it: the global layers' timescale
 * global_rope_max_timescale (else rope_max_timescale), a global_rope_proportion of each
 * head rotated (Hugging Face's "proportional": frequencies over the whole head dim); the
 * sliding ones' local_rope_max_timescale (else rope_max_timescale), every dimension. */
static int rope(const hf_model *m, hf_json *j, ur_err *err)
{
    const ur_settings *s = m->s;
    double theta = hf_cfg_float(s, "rope_max_timescale", 10000);
    double global = hf_cfg_float(s, "global_rope_max_timescale", 0);
    double local = hf_cfg_float(s, "local_rope_max_timescale", 0);
    int rc = hf_json_str(j, TEXT "/rope_parameters/full_attention", "rope_type", "proportional",
                         err);
    if (rc == UR_OK) {
        rc = hf_json_float(j, TEXT "/rope_parameters/full_attention", "partial_rotary_factor",
                           hf_cfg_float(s, "global_rope_proportion", 0.25), err);
    }
    if (rc == UR_OK) {
        rc = hf_json_float(j, TEXT "/rope_parameters/full_attention", "rope_theta",
                           global > 0 ? global : theta, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_str(j, TEXT "/rope_parameters/sliding_attention", "rope_type", "default",
                         err);
    }
    return rc == UR_OK ? hf_json_float(j, TEXT "/rope_parameters/sliding_attention", "rope_theta",
                                       local > 0 ? local : theta, err)
                       : rc;
}

/* The experts' entries: enable_moe_block, and the experts' count and size from layer 0's
 * wi_0 [experts, emb, mlp]. */
static int experts_config(const hf_model *m, hf_json *j, ur_err *err)
{
    int rank = 0;
    const uint64_t *wi = hf_model_shape(m, EXPERTS_WI_0, &rank);
    int rc = hf_json_bool(j, TEXT, "enable_moe_block", (m->flags & HF_IF_EXPERTS) != 0, err);
    if (!(m->flags & HF_IF_EXPERTS) || rc < 0) {
        return rc;
    }
    if (wi == NULL || rank != 3) {
        return ur_err_set(err, UR_EINVAL,
                          "Hugging Face export: the checkpoint lacks layer 0's " EXPERTS_WI_0
                          " [experts, emb, mlp] of a gemma4 model with experts");
    }
    rc = hf_json_int(j, TEXT, "num_experts", (int64_t)wi[0], err);
    if (rc == UR_OK) {
        rc = hf_json_int(j, TEXT, "top_k_experts", hf_cfg_int(m->s, "num_experts_per_tok", 1),
                         err);
    }
    return rc == UR_OK ? hf_json_int(j, TEXT, "moe_intermediate_size", (int64_t)wi[2], err) : rc;
}

/* config.json's text_config entries beyond every decoder's. */
static int text_config(const hf_model *m, hf_json *j, ur_err *err)
{
    const ur_settings *s = m->s;
    double final_cap = hf_cfg_float(s, "final_logits_soft_cap", 0);
    int64_t global_head_dim = 0, global_kv_heads = 0;
    int rc = hf_json_str(j, TEXT, "model_type", "gemma4_text", err);

    global_dims(m, &global_head_dim, &global_kv_heads);
    if (rc == UR_OK) {
        rc = hf_json_str(j, TEXT, "hidden_activation", "gelu_pytorch_tanh", err);
    }
    if (rc == UR_OK) {
        rc = hf_json_bool(j, TEXT, "attention_bias", 0, err);
    }
    if (rc == UR_OK) {
        rc = final_cap > 0 ? hf_json_float(j, TEXT, "final_logit_softcapping", final_cap, err)
                           : hf_json_null(j, TEXT, "final_logit_softcapping", err);
    }
    if (rc == UR_OK) {
        rc = hf_json_int(j, TEXT, "sliding_window", hf_cfg_int(s, "sliding_window_size", 1024),
                         err);
    }
    if (rc == UR_OK) {
        rc = hf_json_int(j, TEXT, "global_head_dim", global_head_dim, err);
    }
    if (rc == UR_OK && global_kv_heads > 0) {
        rc = hf_json_int(j, TEXT, "num_global_key_value_heads", global_kv_heads, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_bool(j, TEXT, "attention_k_eq_v", k_eq_v(m), err);
    }
    /* none of Gemma 4's per-layer inputs, shared key-value layers or double-wide MLPs (the
     * small models') */
    if (rc == UR_OK) {
        rc = hf_json_int(j, TEXT, "hidden_size_per_layer_input", 0, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_int(j, TEXT, "num_kv_shared_layers", 0, err);
    }
    if (rc == UR_OK) {
        rc = experts_config(m, j, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_bool(j, TEXT, "use_double_wide_mlp", 0, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_str(j, TEXT, "use_bidirectional_attention", "vision", err);
    }
    return rc == UR_OK ? rope(m, j, err) : rc;
}

/* The vision tower's shape from MaxText's *_for_vit keys (gemma4's by default), so that the
 * configuration is the model's even where the export has no vision weights. */
static int vision_config(const hf_model *m, hf_json *j, ur_err *err)
{
    static const hf_vit_key vit[] = {
        {"hidden_size", "hidden_size_for_vit", 1152},
        {"intermediate_size", "intermediate_size_for_vit", 4304},
        {"num_hidden_layers", "num_hidden_layers_for_vit", 27},
        {"num_attention_heads", "num_attention_heads_for_vit", 16},
        {"num_key_value_heads", "num_attention_heads_for_vit", 16},
        {"patch_size", "patch_size_for_vit", 16},
        {"position_embedding_size", "num_position_embeddings_for_vit", 10240},
        {"default_output_length", "vision_output_length", 280},
    };
    int rc = hf_config_vision(m, j, "gemma4_vision", vit, sizeof vit / sizeof vit[0], err);
    if (rc == UR_OK) {
        rc = hf_json_str(j, "vision_config", "hidden_activation", "gelu_pytorch_tanh", err);
    }
    return rc == UR_OK ? hf_json_float(j, "vision_config", "rms_norm_eps", 1e-6, err) : rc;
}

static int config(const hf_model *m, hf_json *j, ur_err *err)
{
    int rc = UR_OK;
    if (hf_model_layers(m) % CYCLE != 0) {
        /* Gemma4TextConfig turns a last sliding layer into a global one (MaxText's remainder
         * layers are sliding): the folder would compute another model */
        return ur_err_set(err, UR_EUNSUPPORTED,
                          "Hugging Face export: gemma4 with %lld layers: transformers makes the "
                          "last layer a global one where MaxText's is sliding (a multiple of %d "
                          "layers is needed)",
                          (long long)hf_model_layers(m), CYCLE);
    }
    rc = check_values(m, err);
    if (rc == UR_OK) {
        /* tied: setup refuses logits_via_embedding=false */
        rc = hf_config_multimodal(m, j, "Gemma4ForConditionalGeneration", "gemma4", err);
    }
    if (rc == UR_OK) {
        rc = hf_json_null(j, NULL, "audio_config", err);
    }
    if (rc == UR_OK) {
        /* Gemma 4's context */
        rc = hf_config_text(m, j, TEXT, 262144, err);
    }
    if (rc == UR_OK) {
        /* the embedding's rows, as vocab_size (unused without per-layer inputs) */
        int rank = 0;
        const uint64_t *e = hf_model_shape(m, "token_embedder/embedding", &rank);
        rc = hf_json_int(j, TEXT, "vocab_size_per_layer_input",
                         e != NULL && rank == 2 ? (int64_t)e[0] : 262144, err);
    }
    if (rc == UR_OK) {
        rc = text_config(m, j, err);
    }
    if (rc == UR_OK) {
        rc = hf_config_layer_types(m, j, TEXT, CYCLE, err);
    }
    return rc == UR_OK ? vision_config(m, j, err) : rc;
}

const hf_family hf_family_gemma4 = {.name = "gemma4",
                                    .architecture = "Gemma4ForConditionalGeneration",
                                    .applies = applies,
                                    .setup = setup,
                                    .rules = rules,
                                    .n_rules = sizeof rules / sizeof rules[0],
                                    .config = config};
