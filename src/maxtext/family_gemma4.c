/* Gemma 4 (decoder_block gemma4; gemma4.py Gemma4ScannableBlock, nnx_decoders.py
 * _init_scanned_gemma4, GEMMA4_ATTENTION_PATTERN 5 local + 1 global): N / 6 blocks in
 * decoder/scanned_blocks, each a nested scan of 5 local layers (local_layers) and a global
 * layer (global_layer), then N % 6 local layers in decoder/layers_remainder/local_layers. The
 * mapping and layer-index formula are the nested-block shape's (plan_nested.c). The local and
 * global layers may differ in shape (global_head_dim). */
#include "family.h"

#include <string.h>

static int applies(const ur_settings *s, const ur_family_keys *k)
{
    (void)k;
    return strcmp(s->decoder_block, "gemma4") == 0;
}

static int setup(ur_plan_walk *w, ur_err *err)
{
    ur_plan_nested_state *st = UR_FAMILY_STATE(ur_plan_nested_state, w);
    int64_t nl = w->s->num_decoder_layers;
    w->plan->n_groups = 1;
    ur_plan__group_set(&w->plan->groups[0], "scanned_blocks", nl / 6, 6, 0, "layers");
    st->n_remainder = nl % 6;
    st->remainder_first = nl / 6 * 6;
    if (w->plan->unrolled && w->s->param_scan_axis < 0) {
        return ur_err_set(err, UR_EUNSUPPORTED,
                          "gemma4 with a negative param_scan_axis (%lld): the nested scan's "
                          "axes are not worked out for it",
                          (long long)w->s->param_scan_axis);
    }
    return UR_OK;
}

/* every leaf of the blocks and of the remainder */
static int leaf(ur_plan_walk *w, const ur_plan_item *it, int *done, ur_err *err)
{
    if (it->g != 0 && strcmp(it->l->path[it->st + 1], "layers_remainder") != 0) {
        return UR_OK;
    }
    *done = 1;
    return ur_plan_nested__leaf(w, it, err);
}

/* The multi-token-prediction layer (maxtext 0.2.5, line numbers of its installed package).
 * models.py:145-153 (Transformer.__init__) builds it from get_decoder_layers()[-1], which for
 * gemma4 is Gemma4ScannableBlock when scan_layers is true and Gemma4DecoderLayer when false
 * (nnx_decoders.py:1220-1221 get_scannable, :1234); multi_token_prediction.py:214-220
 * (MultiTokenPredictionLayer.__init__) calls either with (config, mesh, model_mode=TRAIN, rngs)
 * only. So:
 *   scanned    mtp_<k>_transformer_layer/local_layers/R  5 local layers stacked at
 *                                                        param_scan_axis (gemma4.py:432
 *                                                        num_of_layers 6, :480-492
 *                                                        create_scanned_layers)
 *              mtp_<k>_transformer_layer/global_layer/R  the block's global layer (:499-507)
 *   unscanned  mtp_<k>_transformer_layer/R               one Gemma4DecoderLayer with its
 *                                                        defaults (gemma4.py:164-165:
 *                                                        attention_type LOCAL_SLIDING,
 *                                                        layer_idx 0)
 * The block's local layers are built with exactly those arguments (gemma4.py:487-488) and run
 * first, on the MTP projection's output (gemma4.py:695 the local layers, :697 then the global
 * one), which is what the unscanned MTP layer runs on. Local layer 0 is therefore the unscanned
 * MTP layer; local layers 1.. and the global layer have no place in the unscanned model and are
 * not written. The two models' MTP heads differ (six layers against one): the main model, and
 * its decode, are unaffected. */
static int mtp_leaf(ur_plan_walk *w, const ur_plan_item *it, size_t rest, int *done, ur_err *err)
{
    const ur_plan_leaf *l = it->l;
    size_t psa = (size_t)w->s->param_scan_axis;
    char name[512];
    char shape[256];
    *done = 1;
    ur_plan_path_format(l->path, l->path_len, name, sizeof name);
    if (it->aux) {
        return ur_err_set(err, UR_EUNSUPPORTED,
                          "leaf '%s': a non-parameter variable (nnx_aux) of gemma4's scanned "
                          "MTP block: its layer axis there is not known to unroll",
                          name);
    }
    if (rest + 1 < it->en && strcmp(l->path[rest], "global_layer") == 0) {
        ur_plan__drop(w, it,
                      "the scanned MTP block's global layer (the unscanned MTP layer is "
                      "one local layer)");
        return UR_OK;
    }
    if (rest + 1 >= it->en || strcmp(l->path[rest], "local_layers") != 0) {
        return ur_err_set(err, UR_EINVAL,
                          "leaf '%s': gemma4's scanned MTP layer holds its layers under "
                          "local_layers/ and global_layer/",
                          name);
    }
    if (l->dtype == UR_DT_INVALID || psa >= l->rank || l->shape[psa] != 5) {
        ur_plan__shape_format(l, shape, sizeof shape);
        return ur_err_set(err, UR_EINVAL,
                          "leaf '%s' shape %s: expected the MTP block's 5 local layers on axis "
                          "%zu (param_scan_axis)",
                          name, shape, psa);
    }
    return ur_plan__take(w, it, psa, 0, rest, err);
}

const ur_plan_family ur_family_gemma4 = {
    .name = "gemma4",
    .applies = applies,
    .setup = setup,
    .leaf = leaf,
    .nested = 1,
    .finish = ur_plan_nested__finish,
    .mtp_leaf = mtp_leaf,
};
