/* DeepSeek-V4: MaxText's deepseek4 decoder block (deepseek4-284b, deepseek4-tiny) as
 * transformers' DeepseekV4ForCausalLM, in DeepSeek's own tensor names (layers.{i}.attn.wq_a,
 * hc_head_fn, ...: what MaxText's exporter writes, and what transformers renames as it loads),
 * as MaxText's exporter maps them (DEEPSEEK_V4_MAXTEXT_TO_HF_PARAM_MAPPING and its hooks).
 *
 * Every layer has multi-head attention through a low-rank query, one shared key-value head,
 * attention sinks and a grouped low-rank output (o_a_proj [groups, in, rank] becomes wo_a
 * [groups * rank, in]); the layers after the first two compress their keys: a compressed
 * sparse layer (compress ratio 4) has a compressor and an indexer with its own compressor, a
 * heavily compressed one (128) a compressor; all kernels are transposed to [out, in]. Each
 * layer's two hyper-connections (mHC: attention and MLP) hold, per part (pre, post, res), a
 * projection alpha, a bias beta and a scale; Hugging Face joins the three parts of each:
 * hc_attn_fn [2k + k*k, k * emb] is the three alphas transposed and joined along its rows,
 * hc_attn_base the betas (res_beta [k, k] flattened) and hc_attn_scale the scales, joined end
 * to end; their input norms' scales have no Hugging Face place (the exporter drops them). The
 * first first_num_hash_layers layers route by the token's id (tid2eid, copied), the others by
 * scores with a bias (copied); routed experts are cut by expert, as DeepSeek-V3's. */
#include "hf_impl.h"

#include "unroll/alloc.h"

#include <stdio.h>
#include <string.h>

#define L(mt) "decoder/layers_{i}/" mt
#define H(hf) "layers.{i}." hf

/* A hyper-connection's three parts joined into one tensor of each kind. */
#define HC(mod, hf)                                                                               \
    {L(mod "/pre_alpha"), H(hf "_fn"), "x k -> k x", HF_OP_NONE, HF_JOIN_ROWS | HF_PIECE(0)},     \
        {L(mod "/post_alpha"), H(hf "_fn"), "x k -> k x", HF_OP_NONE,                             \
         HF_JOIN_ROWS | HF_PIECE(1)},                                                             \
        {L(mod "/res_alpha"), H(hf "_fn"), "x k -> k x", HF_OP_NONE, HF_JOIN_ROWS | HF_PIECE(2)}, \
        {L(mod "/pre_beta"), H(hf "_base"), "k -> k", HF_OP_NONE, HF_JOIN_COLS | HF_PIECE(0)},    \
        {L(mod "/post_beta"), H(hf "_base"), "k -> k", HF_OP_NONE, HF_JOIN_COLS | HF_PIECE(1)},   \
        {L(mod "/res_beta"), H(hf "_base"), "a b -> (a b)", HF_OP_NONE,                           \
         HF_JOIN_COLS | HF_PIECE(2)},                                                             \
        {L(mod "/pre_alpha_scale"), H(hf "_scale"), "k -> k", HF_OP_NONE,                         \
         HF_JOIN_COLS | HF_PIECE(0)},                                                             \
        {L(mod "/post_alpha_scale"), H(hf "_scale"), "k -> k", HF_OP_NONE,                        \
         HF_JOIN_COLS | HF_PIECE(1)},                                                             \
        {L(mod "/res_alpha_scale"), H(hf "_scale"), "k -> k", HF_OP_NONE,                         \
         HF_JOIN_COLS | HF_PIECE(2)},                                                             \
    {                                                                                             \
        L(mod "/mhc_norm/scale"), NULL, "k -> k", HF_OP_NONE, 0                                   \
    }

/* A key compressor (of some layers only). */
#define COMPRESSOR(mt, hf)                                                                        \
    {L(mt "/gate_proj/kernel"), H(hf ".wgate.weight"), "e d -> d e", HF_OP_NONE, HF_SOME_LAYERS}, \
        {L(mt "/kv_proj/kernel"), H(hf ".wkv.weight"), "e d -> d e", HF_OP_NONE, HF_SOME_LAYERS}, \
        {L(mt "/kv_norm/scale"), H(hf ".norm.weight"), "d -> d", HF_OP_NONE, HF_SOME_LAYERS},     \
    {                                                                                             \
        L(mt "/position_bias"), H(hf ".ape"), "r d -> r d", HF_OP_NONE, HF_SOME_LAYERS            \
    }

#define ATT "self_attention/"
#define CSA ATT "csa_compressor"
#define MOE "mlp/MoeBlock_0/"
#define SHARED "mlp/shared_experts/"

static const hf_rule rules[] = {
    {"token_embedder/embedding", "embed.weight", "v e -> v e", HF_OP_NONE, 0},
    {"decoder/decoder_norm/scale", "norm.weight", "e -> e", HF_OP_NONE, 0},
    {"decoder/logits_dense/kernel", "head.weight", "e v -> v e", HF_OP_NONE, HF_IF_UNTIED},
    {"decoder/hc_head/hc_fn", "hc_head_fn", "x k -> k x", HF_OP_NONE, 0},
    {"decoder/hc_head/hc_base", "hc_head_base", "k -> k", HF_OP_NONE, 0},
    {"decoder/hc_head/hc_scale", "hc_head_scale", "k -> k", HF_OP_NONE, 0},
    {L("pre_self_attention_layer_norm/scale"), H("attn_norm.weight"), "e -> e", HF_OP_NONE, 0},
    {L("post_self_attention_layer_norm/scale"), H("ffn_norm.weight"), "e -> e", HF_OP_NONE, 0},
    HC("mhc_attention", "hc_attn"),
    HC("mhc_mlp", "hc_ffn"),
    {L(ATT "q_norm/scale"), H("attn.q_norm.weight"), "q -> q", HF_OP_NONE, 0},
    {L(ATT "kv_norm/scale"), H("attn.kv_norm.weight"), "d -> d", HF_OP_NONE, 0},
    {L(ATT "wq_a/kernel"), H("attn.wq_a.weight"), "e q -> q e", HF_OP_NONE, 0},
    {L(ATT "wq_b/kernel"), H("attn.wq_b.weight"), "q h d -> (h d) q", HF_OP_NONE, 0},
    {L(ATT "wkv/kernel"), H("attn.wkv.weight"), "e k d -> (k d) e", HF_OP_NONE, 0},
    {L(ATT "sinks"), H("attn.attn_sink"), "h -> h", HF_OP_NONE, 0},
    {L(ATT "o_a_proj/kernel"), H("attn.wo_a.weight"), "g d r -> (g r) d", HF_OP_NONE, 0},
    {L(ATT "o_b_proj/kernel"), H("attn.wo_b.weight"), "x e -> e x", HF_OP_NONE, 0},
    COMPRESSOR(CSA, "attn.compressor"),
    COMPRESSOR(CSA "/indexer", "attn.indexer.compressor"),
    {L(CSA "/indexer/weights_proj/kernel"), H("attn.indexer.weights_proj.weight"), "e h -> h e",
     HF_OP_NONE, HF_SOME_LAYERS},
    {L(CSA "/indexer/q_proj/kernel"), H("attn.indexer.wq_b.weight"), "q x -> x q", HF_OP_NONE,
     HF_SOME_LAYERS},
    COMPRESSOR(ATT "hca_compressor", "attn.compressor"),
    {L(MOE "gate/kernel"), H("ffn.gate.weight"), "e x -> x e", HF_OP_NONE, 0},
    {L(MOE "tid2eid"), H("ffn.gate.tid2eid"), "v k -> v k", HF_OP_NONE, HF_SOME_LAYERS},
    {L(MOE "gate/bias"), H("ffn.gate.bias"), "x -> x", HF_OP_NONE, HF_SOME_LAYERS},
    {L(SHARED "wi_0/kernel"), H("ffn.shared_experts.w1.weight"), "e m -> m e", HF_OP_NONE, 0},
    {L(SHARED "wi_1/kernel"), H("ffn.shared_experts.w3.weight"), "e m -> m e", HF_OP_NONE, 0},
    {L(SHARED "wo/kernel"), H("ffn.shared_experts.w2.weight"), "m e -> e m", HF_OP_NONE, 0},
    {L(MOE "wi_0"), H("ffn.experts.{e}.w1.weight"), "e m -> m e", HF_OP_NONE, 0},
    {L(MOE "wi_1"), H("ffn.experts.{e}.w3.weight"), "e m -> m e", HF_OP_NONE, 0},
    {L(MOE "wo"), H("ffn.experts.{e}.w2.weight"), "m e -> e m", HF_OP_NONE, 0},
};

static int applies(const ur_settings *s)
{
    return strcmp(s->decoder_block, "deepseek4") == 0;
}

/* What DeepseekV4ForCausalLM cannot hold: another router (its scores are sqrtsoftplus's;
 * its top-k weights normalized, as MaxText normalizes them for this score whatever
 * norm_topk_prob says), another RoPE (MaxText's deepseek4 rotates without scaling). */
static int setup(hf_model *m, ur_err *err)
{
    const ur_settings *s = m->s;
    const char *why = strcmp(hf_cfg_str(s, "routed_score_func", ""), "sqrtsoftplus") != 0
                          ? "a routed_score_func other than sqrtsoftplus"
                      : strcmp(hf_cfg_str(s, "rope_type", "default"), "default") != 0
                          ? "a rope_type other than default"
                      : hf_cfg_int(s, "shared_experts", 0) != 1 ? "shared_experts other than 1"
                                                                : NULL;
    if (why != NULL) {
        return ur_err_set(err, UR_EUNSUPPORTED,
                          "Hugging Face export: decoder_block deepseek4 with %s has no place in "
                          "DeepseekV4ForCausalLM",
                          why);
    }
    m->flags = (m->flags & ~(unsigned)HF_IF_DENSE_MLP) | HF_IF_EXPERTS;
    m->flags |= hf_cfg_bool(s, "logits_via_embedding", 0) ? 0 : HF_IF_UNTIED;
    return UR_OK;
}

#define HCA ATT "hca_compressor/position_bias"
#define CSA_BIAS CSA "/position_bias"

/* layer_types from which compressor each layer has (none: a sliding-window layer), the
 * compression rates from their position biases ([rate, dim]), mlp_layer_types from which
 * layers route by token id. */
static int layer_types(const hf_model *m, hf_json *j, ur_err *err)
{
    int64_t n = hf_model_layers(m), csa = 0, hca = 0;
    const char **types = ur_calloc((size_t)n + 1, sizeof *types);
    const char **mlp = ur_calloc((size_t)n + 1, sizeof *mlp);
    int rc = types != NULL && mlp != NULL ? UR_OK : ur_err_oom(err);
    for (int64_t i = 0; i < n && rc == UR_OK; i++) {
        int rank = 0;
        const uint64_t *c = hf_model_layer_shape(m, i, CSA_BIAS, &rank);
        const uint64_t *h = c == NULL ? hf_model_layer_shape(m, i, HCA, &rank) : NULL;
        csa = c != NULL ? (int64_t)c[0] : csa;
        hca = h != NULL ? (int64_t)h[0] : hca;
        types[i] = c != NULL   ? "compressed_sparse_attention"
                   : h != NULL ? "heavily_compressed_attention"
                               : "sliding_attention";
        mlp[i] = hf_model_layer_shape(m, i, MOE "tid2eid", &rank) != NULL ? "hash_moe" : "moe";
    }
    if (rc == UR_OK) {
        rc = hf_json_strs(j, NULL, "layer_types", types, (size_t)n, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_strs(j, NULL, "mlp_layer_types", mlp, (size_t)n, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_int(j, "compress_rates", "compressed_sparse_attention", csa > 0 ? csa : 4,
                         err);
    }
    if (rc == UR_OK) {
        rc = hf_json_int(j, "compress_rates", "heavily_compressed_attention", hca > 0 ? hca : 128,
                         err);
    }
    ur_free(types);
    ur_free(mlp);
    return rc;
}

/* RoPE: the main rotation's and the compressed keys' (compressed_rope_max_timescale), over
 * qk_rope_head_dim of head_dim. */
static int config_rope(const hf_model *m, hf_json *j, int64_t head_dim, ur_err *err)
{
    const ur_settings *s = m->s;
    double rope = (double)hf_cfg_int(s, "qk_rope_head_dim", head_dim) / (double)head_dim;
    const struct {
        const char *in;
        double theta;
    } parts[] = {
        {"rope_parameters/main", hf_cfg_float(s, "rope_max_timescale", 10000)},
        {"rope_parameters/compress", hf_cfg_float(s, "compressed_rope_max_timescale", 160000)}};
    int rc = hf_json_float(j, NULL, "partial_rotary_factor", rope, err);
    for (size_t k = 0; k < 2 && rc == UR_OK; k++) {
        rc = hf_json_str(j, parts[k].in, "rope_type", "default", err);
        if (rc == UR_OK) {
            rc = hf_json_float(j, parts[k].in, "rope_theta", parts[k].theta, err);
        }
        if (rc == UR_OK) {
            rc = hf_json_float(j, parts[k].in, "partial_rotary_factor", rope, err);
        }
    }
    if (rc == UR_OK) {
        rc = hf_json_float(j, NULL, "rope_theta", parts[0].theta, err);
    }
    return rc == UR_OK ? hf_json_float(j, NULL, "compress_rope_theta", parts[1].theta, err) : rc;
}

/* The sizes from layer 0's parameters (the query's up-projection [q_lora_rank, heads,
 * head_dim], the grouped output [groups, in, rank], the key-value kernel [emb, 1, head_dim],
 * the hyper-connection's alpha [k * emb, k], the experts' [experts, emb, mlp]) and the
 * settings. */
static int config(const hf_model *m, hf_json *j, ur_err *err)
{
    const ur_settings *s = m->s;
    const char *arch = "DeepseekV4ForCausalLM";
    int re = 0, rq = 0, ro = 0, rh = 0, rw = 0;
    const uint64_t *e = hf_model_shape(m, "token_embedder/embedding", &re);
    const uint64_t *q = hf_model_layer_shape(m, 0, ATT "wq_b/kernel", &rq);
    const uint64_t *o = hf_model_layer_shape(m, 0, ATT "o_a_proj/kernel", &ro);
    const uint64_t *hc = hf_model_layer_shape(m, 0, "mhc_attention/pre_alpha", &rh);
    const uint64_t *wi = hf_model_layer_shape(m, 0, MOE "wi_0", &rw);
    if (e == NULL || re != 2 || q == NULL || rq != 3 || o == NULL || ro != 3 || hc == NULL ||
        rh != 2 || wi == NULL || rw != 3) {
        return ur_err_set(err, UR_EINVAL,
                          "Hugging Face export (deepseek4): the checkpoint lacks the embedding or "
                          "layer 0's wq_b, o_a_proj, mhc_attention/pre_alpha or routed wi_0");
    }
    const hf_json_int_entry ints[] = {
        {"vocab_size", (int64_t)e[0]},
        {"hidden_size", (int64_t)e[1]},
        {"num_hidden_layers", hf_model_layers(m)},
        {"num_attention_heads", (int64_t)q[1]},
        {"num_key_value_heads", 1},
        {"head_dim", (int64_t)q[2]},
        {"qk_rope_head_dim", hf_cfg_int(s, "qk_rope_head_dim", (int64_t)q[2])},
        {"q_lora_rank", (int64_t)q[0]},
        {"o_groups", (int64_t)o[0]},
        {"o_lora_rank", (int64_t)o[2]},
        {"index_n_heads", hf_cfg_int(s, "indexer_n_heads", 64)},
        {"index_head_dim", hf_cfg_int(s, "indexer_head_dim", 128)},
        {"index_topk", hf_cfg_int(s, "indexer_topk", 512)},
        {"n_routed_experts", (int64_t)wi[0]},
        {"num_experts_per_tok", hf_cfg_int(s, "num_experts_per_tok", 1)},
        {"moe_intermediate_size", (int64_t)wi[2]},
        {"n_shared_experts", 1},
        {"hc_mult", (int64_t)hc[1]},
        {"hc_sinkhorn_iters", hf_cfg_int(s, "sinkhorn_iterations", 20)},
        {"sliding_window", hf_cfg_int(s, "sliding_window_size", 128)},
        {"max_position_embeddings", hf_cfg_int(s, "max_position_embeddings", 4096)},
        {"num_nextn_predict_layers", 0},
    };
    int rc = hf_json_strs(j, NULL, "architectures", &arch, 1, err);
    if (rc == UR_OK) {
        rc = hf_json_ints(j, NULL, ints, sizeof ints / sizeof ints[0], err);
    }
    if (rc == UR_OK) {
        rc = hf_json_str(j, NULL, "model_type", "deepseek_v4", err);
    }
    if (rc == UR_OK) {
        rc = hf_config_basics(m, j, NULL, 1e-6, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_bool(j, NULL, "mlp_bias", 0, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_str(j, NULL, "scoring_func", "sqrtsoftplus", err);
    }
    if (rc == UR_OK) {
        rc = hf_json_bool(j, NULL, "norm_topk_prob", 1, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_float(j, NULL, "routed_scaling_factor",
                           hf_cfg_float(s, "routed_scaling_factor", 1.0), err);
    }
    if (rc == UR_OK) {
        rc = hf_json_float(j, NULL, "swiglu_limit", hf_cfg_float(s, "mlp_activations_limit", 10),
                           err);
    }
    if (rc == UR_OK) {
        rc = hf_json_float(j, NULL, "hc_eps", 1e-6, err);
    }
    if (rc == UR_OK) {
        rc = layer_types(m, j, err);
    }
    return rc == UR_OK ? config_rope(m, j, (int64_t)q[2], err) : rc;
}

const hf_family hf_family_deepseek4 = {.name = "deepseek4",
                                       .architecture = "DeepseekV4ForCausalLM",
                                       .applies = applies,
                                       .setup = setup,
                                       .rules = rules,
                                       .n_rules = sizeof rules / sizeof rules[0],
                                       .config = config};
