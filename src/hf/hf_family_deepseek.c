/* DeepSeek-V3, V3.2 and V2: MaxText's deepseek decoder block as transformers'
 * DeepseekV3ForCausalLM (the sigmoid router: deepseek3-671b, deepseek3-tiny, kimi-k2 shapes),
 * DeepseekV32ForCausalLM (the same with the sparse-attention indexer, use_indexer:
 * deepseek3.2-671b) or DeepseekV2ForCausalLM (the softmax router: deepseek2-16b), as MaxText's
 * exporter maps them (DEEPSEEK_MAXTEXT_TO_HF_PARAM_MAPPING and its hooks).
 *
 * MaxText keeps the first first_num_dense_layers layers apart (dense_layers_{i}, a dense MLP)
 * from the rest (moe_layers_{i}, counted from 0: Hugging Face's layer {i} + that many): both
 * have multi-head latent attention, whose low-rank projections are transposed to [out, in]
 * (the up-projections [rank, heads, dim] flattened over their heads) and whose norms are
 * copied; no RoPE reordering (MaxText rotates interleaved pairs, and so does transformers with
 * rope_interleave) and no query scale (MaxText scales the query in the forward pass). A MoE
 * layer has shared experts (a dense MLP), the router and its score-correction bias
 * (routed_bias), and the routed experts, each expert's three kernels a tensor of its own.
 * V3.2's indexer (every layer's): its query up-projection [q_lora_rank, heads, dim] flattened
 * over the heads, its key and head-weight projections transposed, its key's LayerNorm (scale
 * and bias) copied; its rotation is of halves, [rope, nope], in MaxText as in transformers. */
#include "hf_impl.h"

#include <string.h>

#define DENSE(mt, hf) "decoder/dense_layers_{i}/" mt, "model.layers.{i}." hf
#define MOE(mt, hf) "decoder/moe_layers_{i}/" mt, "model.layers.{i}." hf
#define BLOCK "DeepSeekMoeBlock_0/"

/* A layer's attention and norms, in the dense layers (D) and the MoE ones (M): the query
 * through its low-rank projection (V3) or whole (V2's q_lora_rank 0). */
#define ROW(L, mt, hf, pattern, when)                                                             \
    {                                                                                             \
        L(mt, hf), pattern, HF_OP_NONE, when                                                      \
    }
/* clang-format off */
#define ATTENTION(L, bits) \
    ROW(L, "pre_self_attention_layer_norm/scale", "input_layernorm.weight", "e -> e", bits), \
    ROW(L, "post_self_attention_layer_norm/scale", "post_attention_layernorm.weight", "e -> e", bits), \
    ROW(L, "self_attention/wq_a/kernel", "self_attn.q_a_proj.weight", "e q -> q e", (bits) | HF_IF_LOW_RANK_QUERY), \
    ROW(L, "self_attention/q_norm/scale", "self_attn.q_a_layernorm.weight", "q -> q", (bits) | HF_IF_LOW_RANK_QUERY), \
    ROW(L, "self_attention/wq_b/kernel", "self_attn.q_b_proj.weight", "q h d -> (h d) q", (bits) | HF_IF_LOW_RANK_QUERY), \
    ROW(L, "self_attention/query/kernel", "self_attn.q_proj.weight", "e h d -> (h d) e", (bits) | HF_IF_FULL_QUERY), \
    ROW(L, "self_attention/wkv_a/kernel", "self_attn.kv_a_proj_with_mqa.weight", "e k -> k e", bits), \
    ROW(L, "self_attention/kv_norm/scale", "self_attn.kv_a_layernorm.weight", "k -> k", bits), \
    ROW(L, "self_attention/wkv_b/kernel", "self_attn.kv_b_proj.weight", "k h d -> (h d) k", bits), \
    ROW(L, "self_attention/out/kernel", "self_attn.o_proj.weight", "h d e -> e (h d)", bits), \
    ROW(L, "self_attention/indexer/wq_b/kernel", "self_attn.indexer.wq_b.weight", "q h d -> (h d) q", (bits) | HF_IF_INDEXER), \
    ROW(L, "self_attention/indexer/wk/kernel", "self_attn.indexer.wk.weight", "e d -> d e", (bits) | HF_IF_INDEXER), \
    ROW(L, "self_attention/indexer/k_norm/scale", "self_attn.indexer.k_norm.weight", "d -> d", (bits) | HF_IF_INDEXER), \
    ROW(L, "self_attention/indexer/k_norm/bias", "self_attn.indexer.k_norm.bias", "d -> d", (bits) | HF_IF_INDEXER), \
    ROW(L, "self_attention/indexer/weights_proj/kernel", "self_attn.indexer.weights_proj.weight", "e h -> h e", (bits) | HF_IF_INDEXER)
/* clang-format on */

static const hf_rule rules[] = {
    ATTENTION(DENSE, HF_DENSE_LAYERS),
    {DENSE("mlp/wi_0/kernel", "mlp.gate_proj.weight"), "e m -> m e", HF_OP_NONE, HF_DENSE_LAYERS},
    {DENSE("mlp/wi_1/kernel", "mlp.up_proj.weight"), "e m -> m e", HF_OP_NONE, HF_DENSE_LAYERS},
    {DENSE("mlp/wo/kernel", "mlp.down_proj.weight"), "m e -> e m", HF_OP_NONE, HF_DENSE_LAYERS},
    ATTENTION(MOE, HF_AFTER_DENSE),
    {MOE(BLOCK "shared_experts/wi_0/kernel", "mlp.shared_experts.gate_proj.weight"), "e m -> m e",
     HF_OP_NONE, HF_AFTER_DENSE},
    {MOE(BLOCK "shared_experts/wi_1/kernel", "mlp.shared_experts.up_proj.weight"), "e m -> m e",
     HF_OP_NONE, HF_AFTER_DENSE},
    {MOE(BLOCK "shared_experts/wo/kernel", "mlp.shared_experts.down_proj.weight"), "m e -> e m",
     HF_OP_NONE, HF_AFTER_DENSE},
    {MOE(BLOCK "MoeBlock_0/gate/kernel", "mlp.gate.weight"), "e x -> x e", HF_OP_NONE,
     HF_AFTER_DENSE},
    {MOE(BLOCK "MoeBlock_0/gate/bias", "mlp.gate.e_score_correction_bias"), "x -> x", HF_OP_NONE,
     HF_AFTER_DENSE | HF_IF_ROUTED_BIAS},
    {MOE(BLOCK "MoeBlock_0/wi_0", "mlp.experts.{e}.gate_proj.weight"), "e m -> m e", HF_OP_NONE,
     HF_AFTER_DENSE},
    {MOE(BLOCK "MoeBlock_0/wi_1", "mlp.experts.{e}.up_proj.weight"), "e m -> m e", HF_OP_NONE,
     HF_AFTER_DENSE},
    {MOE(BLOCK "MoeBlock_0/wo", "mlp.experts.{e}.down_proj.weight"), "m e -> e m", HF_OP_NONE,
     HF_AFTER_DENSE},
};

static int softmax_router(const ur_settings *s)
{
    return strcmp(hf_cfg_str(s, "routed_score_func", ""), "softmax") == 0;
}

static int indexer(const ur_settings *s)
{
    return hf_cfg_bool(s, "use_indexer", 0);
}

static int applies(const ur_settings *s)
{
    return strcmp(s->decoder_block, "deepseek") == 0 && !softmax_router(s) && !indexer(s);
}

static int applies_v32(const ur_settings *s)
{
    return strcmp(s->decoder_block, "deepseek") == 0 && !softmax_router(s) && indexer(s);
}

/* The class for these settings. */
static const char *architecture(const ur_settings *s)
{
    return softmax_router(s) ? "DeepseekV2ForCausalLM"
           : indexer(s)      ? "DeepseekV32ForCausalLM"
                             : "DeepseekV3ForCausalLM";
}

static int applies_v2(const ur_settings *s)
{
    return strcmp(s->decoder_block, "deepseek") == 0 && softmax_router(s);
}

/* MaxText routes deepseek3*, deepseek4* and kimi-k2* models by DeepSeek-V3's rule (its
 * groups, the bias), the others by plain top-k (moe.py). */
static int v3_routing(const ur_settings *s)
{
    return hf_starts(s->model_name, "deepseek3") || hf_starts(s->model_name, "deepseek4") ||
           hf_starts(s->model_name, "kimi-k2");
}

#define BIAS "decoder/moe_layers_0/" BLOCK "MoeBlock_0/gate/bias"

/* What the two classes cannot hold: a router other than V3's (sigmoid scores, its groups and
 * bias only where MaxText applies them) or V2's greedy one (the top-k of the softmax: no
 * groups, no bias), rotary embeddings other than YaRN (of interleaved pairs for V2), YaRN's
 * scaled rotary output (rope_attention_scaling); and a router bias the settings have but the
 * checkpoint does not (MaxText keeps it apart from the parameters: without it the export
 * would route differently). */
static int setup(hf_model *m, ur_err *err)
{
    const ur_settings *s = m->s;
    int rank = 0, v2 = softmax_router(s);
    const char *score = hf_cfg_str(s, "routed_score_func", "");
    /* without groups or a bias, MaxText's plain top-k and V3's rule pick the same experts */
    int plain = hf_cfg_int(s, "n_routing_groups", -1) <= 0 && !hf_cfg_bool(s, "routed_bias", 0);
    const char *why = !v2 && strcmp(score, "sigmoid") != 0
                          ? "a routed_score_func other than sigmoid or softmax"
                      : !v2 && !v3_routing(s) && !plain
                          ? "routing groups or a router bias MaxText ignores for this model_name"
                      : v2 && !plain     ? "a softmax router with groups or a bias"
                      : v2 && indexer(s) ? "a softmax router with the indexer"
                      : hf_cfg_bool(s, "rope_attention_scaling", 0) ? "rope_attention_scaling"
                      : v2 && !hf_cfg_bool(s, "rope_interleave", 1) ? "rope_interleave false"
                      : strcmp(hf_cfg_str(s, "rope_type", "yarn"), "yarn") != 0
                          ? "a rope_type other than yarn"
                      : hf_cfg_bool(s, "routed_bias", 0) && hf_model_shape(m, BIAS, &rank) == NULL
                          ? "routed_bias but no router bias among the parameters"
                          : NULL;
    if (why != NULL) {
        return ur_err_set(err, UR_EUNSUPPORTED,
                          "Hugging Face export: decoder_block deepseek with %s has no place in "
                          "%s",
                          why, architecture(s));
    }
    m->flags = (m->flags & ~(unsigned)HF_IF_DENSE_MLP) | HF_IF_EXPERTS;
    m->flags |= hf_cfg_bool(s, "logits_via_embedding", 0) ? 0 : HF_IF_UNTIED;
    m->flags |= hf_cfg_bool(s, "routed_bias", 0) ? HF_IF_ROUTED_BIAS : 0;
    m->flags |= hf_cfg_int(s, "q_lora_rank", 0) > 0 ? HF_IF_LOW_RANK_QUERY : HF_IF_FULL_QUERY;
    m->flags |= indexer(s) ? HF_IF_INDEXER : 0;
    m->dense_layers = hf_cfg_int(s, "first_num_dense_layers", 0);
    return UR_OK;
}

/* A shape's dimension d, 0 when the model has no such parameter (or not of that rank). */
static int64_t dim(const hf_model *m, const char *path, int rank, int d)
{
    int r = 0;
    const uint64_t *shape = hf_model_shape(m, path, &r);
    return shape != NULL && r == rank ? (int64_t)shape[d] : 0;
}

/* YaRN as MaxText computes it: transformers' rope_parameters, the rotary output unscaled
 * (attention_factor 1, MaxText's rope_attention_scaling false) and the softmax scale's
 * mscale only where MaxText applies it (max_position_embeddings past the original ones). */
static int config_rope(const hf_model *m, hf_json *j, ur_err *err)
{
    const ur_settings *s = m->s;
    const char *in = "rope_parameters";
    int64_t max_pos = hf_cfg_int(s, "max_position_embeddings", 4096);
    int64_t orig = hf_cfg_int(s, "original_max_position_embeddings", 4096);
    double mscale = hf_cfg_float(s, "mscale", 1.0);
    int rc = hf_config_rope(m, j, NULL, "yarn", err);
    if (rc == UR_OK) {
        rc = hf_json_float(j, in, "factor", hf_cfg_float(s, "rope_factor", 40), err);
    }
    if (rc == UR_OK) {
        rc = hf_json_int(j, in, "original_max_position_embeddings", orig, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_float(j, in, "beta_fast", hf_cfg_float(s, "beta_fast", 32), err);
    }
    if (rc == UR_OK) {
        rc = hf_json_float(j, in, "beta_slow", hf_cfg_float(s, "beta_slow", 1), err);
    }
    if (rc == UR_OK) {
        rc = hf_json_float(j, in, "mscale", mscale, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_float(j, in, "mscale_all_dim", max_pos > orig ? mscale : 0.0, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_float(j, in, "attention_factor", 1.0, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_bool(j, in, "truncate", hf_cfg_bool(s, "rope_truncate", 1), err);
    }
    if (rc == UR_OK) {
        rc = hf_json_int(j, NULL, "max_position_embeddings", max_pos, err);
    }
    /* V2's rotation is always of interleaved pairs, V3.2's main attention's too; V3's says so */
    return rc == UR_OK && !softmax_router(s) && !indexer(s)
               ? hf_json_bool(j, NULL, "rope_interleave", hf_cfg_bool(s, "rope_interleave", 1),
                              err)
               : rc;
}

/* V3's router: sigmoid scores, MaxText's groups (none: one group, chosen), the top-k weights
 * normalized (MaxText normalizes a sigmoid router's); no multi-token prediction layers. */
static int config_v3_routing(const hf_model *m, hf_json *j, int64_t groups, int64_t top_groups,
                             ur_err *err)
{
    int rc = hf_json_int(j, NULL, "n_group", groups > 0 ? groups : 1, err);
    (void)m;
    if (rc == UR_OK) {
        rc = hf_json_int(j, NULL, "topk_group", top_groups > 0 ? top_groups : 1, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_bool(j, NULL, "norm_topk_prob", 1, err);
    }
    return rc == UR_OK ? hf_json_int(j, NULL, "num_mtp_layers", 0, err) : rc;
}

/* V2's router as MaxText's deepseek2 routes: the top-k of the softmax, not normalized. */
static int config_v2_routing(hf_json *j, ur_err *err)
{
    int rc = hf_json_str(j, NULL, "topk_method", "greedy", err);
    if (rc == UR_OK) {
        rc = hf_json_null(j, NULL, "n_group", err);
    }
    if (rc == UR_OK) {
        rc = hf_json_null(j, NULL, "topk_group", err);
    }
    return rc == UR_OK ? hf_json_bool(j, NULL, "norm_topk_prob", 0, err) : rc;
}

/* V3.2's indexer: its heads and head dim from the first MoE layer's query up-projection
 * [q_lora_rank, heads, dim], the tokens it keeps; the rotation's head_dim (transformers
 * sizes the rotary embedding by it) is the query's rotated part. */
static int config_indexer(const hf_model *m, hf_json *j, ur_err *err)
{
    const char *wq = "decoder/moe_layers_0/self_attention/indexer/wq_b/kernel";
    int rc = dim(m, wq, 3, 1) > 0
                 ? UR_OK
                 : ur_err_set(err, UR_EINVAL,
                              "Hugging Face export: the checkpoint lacks %s [q_lora_rank, heads, "
                              "dim] of a deepseek model with use_indexer",
                              wq);
    if (rc == UR_OK) {
        rc = hf_json_int(j, NULL, "index_n_heads", dim(m, wq, 3, 1), err);
    }
    if (rc == UR_OK) {
        rc = hf_json_int(j, NULL, "index_head_dim", dim(m, wq, 3, 2), err);
    }
    if (rc == UR_OK) {
        rc = hf_json_int(j, NULL, "index_topk", hf_cfg_int(m->s, "indexer_topk", 2048), err);
    }
    return rc == UR_OK
               ? hf_json_int(j, NULL, "head_dim", hf_cfg_int(m->s, "qk_rope_head_dim", 64), err)
               : rc;
}

static int config(const hf_model *m, hf_json *j, ur_err *err)
{
    const ur_settings *s = m->s;
    int v2 = softmax_router(s), low_rank = (m->flags & HF_IF_LOW_RANK_QUERY) != 0;
    const char *arch = architecture(s);
    /* the query's [in, heads, qk_head_dim]: the low-rank up-projection's, or the query's */
    const char *q_b = low_rank ? "decoder/moe_layers_0/self_attention/wq_b/kernel"
                               : "decoder/moe_layers_0/self_attention/query/kernel";
    const char *kv_b = "decoder/moe_layers_0/self_attention/wkv_b/kernel";
    const char *wi = "decoder/moe_layers_0/" BLOCK "MoeBlock_0/wi_0";
    int64_t groups = hf_cfg_int(s, "n_routing_groups", -1);
    int64_t top_groups = hf_cfg_int(s, "topk_routing_group", -1);
    int64_t v_head_dim = hf_cfg_int(s, "v_head_dim", 128);
    hf_json_int_entry ints[] = {
        {"vocab_size", dim(m, "token_embedder/embedding", 2, 0)},
        {"hidden_size", dim(m, "token_embedder/embedding", 2, 1)},
        {"intermediate_size", m->dense_layers > 0
                                  ? dim(m, "decoder/dense_layers_0/mlp/wi_0/kernel", 2, 1)
                                  : hf_cfg_int(s, "base_mlp_dim", 0)},
        {"moe_intermediate_size", dim(m, wi, 3, 2)},
        {"num_hidden_layers", m->n_layers},
        {"num_attention_heads", dim(m, q_b, 3, 1)},
        {"num_key_value_heads", dim(m, q_b, 3, 1)},
        {"n_shared_experts", hf_cfg_int(s, "shared_experts", 1)},
        {"n_routed_experts", dim(m, wi, 3, 0)},
        {"kv_lora_rank", dim(m, kv_b, 3, 0)},
        {"qk_rope_head_dim", hf_cfg_int(s, "qk_rope_head_dim", 64)},
        {"qk_nope_head_dim", dim(m, q_b, 3, 2) - hf_cfg_int(s, "qk_rope_head_dim", 64)},
        {"v_head_dim", v_head_dim},
        {"num_experts_per_tok", hf_cfg_int(s, "num_experts_per_tok", 1)},
        {"first_k_dense_replace", m->dense_layers},
    };
    int rc = hf_json_strs(j, NULL, "architectures", &arch, 1, err);
    if (rc == UR_OK &&
        (dim(m, q_b, 3, 1) == 0 || dim(m, kv_b, 3, 0) == 0 || dim(m, wi, 3, 0) == 0)) {
        rc = ur_err_set(err, UR_EINVAL,
                        "Hugging Face export: the checkpoint lacks the first MoE layer's query, "
                        "wkv_b or experts of a deepseek model");
    }
    if (rc == UR_OK) {
        rc = hf_json_ints(j, NULL, ints, sizeof ints / sizeof ints[0], err);
    }
    if (rc == UR_OK) {
        rc = hf_json_str(j, NULL, "model_type",
                         v2           ? "deepseek_v2"
                         : indexer(s) ? "deepseek_v32"
                                      : "deepseek_v3",
                         err);
    }
    if (rc == UR_OK && indexer(s)) {
        rc = config_indexer(m, j, err);
    }
    if (rc == UR_OK) {
        rc = low_rank ? hf_json_int(j, NULL, "q_lora_rank", dim(m, q_b, 3, 0), err)
                      : hf_json_null(j, NULL, "q_lora_rank", err);
    }
    if (rc == UR_OK) {
        rc = v2 ? config_v2_routing(j, err) : config_v3_routing(m, j, groups, top_groups, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_str(j, NULL, "hidden_act", "silu", err);
    }
    if (rc == UR_OK) {
        rc = hf_json_float(j, NULL, "routed_scaling_factor",
                           hf_cfg_float(s, "routed_scaling_factor", 1.0), err);
    }
    if (rc == UR_OK) {
        rc = hf_json_float(j, NULL, "rms_norm_eps",
                           hf_cfg_float(s, "normalization_layer_epsilon", 1e-6), err);
    }
    if (rc == UR_OK) {
        rc = hf_json_bool(j, NULL, "tie_word_embeddings", !(m->flags & HF_IF_UNTIED), err);
    }
    if (rc == UR_OK) {
        rc = hf_json_bool(j, NULL, "attention_bias", 0, err);
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
    return rc == UR_OK ? config_rope(m, j, err) : rc;
}

/* The three share the table, its setup and config.json's writer (which reads the router and
 * the indexer from the settings): only the class and when it applies differ. */
#define FAMILY(nm, arch, app)                                                                     \
    {                                                                                             \
        .name = (nm), .architecture = (arch), .applies = (app), .setup = setup,                   \
        .shared = hf_rules_llama_like, .n_shared = HF_N_RULES_TOP, .rules = rules,                \
        .n_rules = sizeof rules / sizeof rules[0], .config = config                               \
    }
const hf_family hf_family_deepseek_v2 = FAMILY("deepseek_v2", "DeepseekV2ForCausalLM", applies_v2);
const hf_family hf_family_deepseek = FAMILY("deepseek", "DeepseekV3ForCausalLM", applies);
const hf_family hf_family_deepseek_v32 = FAMILY("deepseek_v32", "DeepseekV32ForCausalLM",
                                                applies_v32);
