/* Qwen3-Next (decoder_block qwen3_next with inhomogeneous_layer_cycle_interval K > 1; qwen3.py
 * Qwen3NextScannableBlock, nnx_decoders.py _init_scanned_qwen3_next, as maxtext 0.2.5 writes
 * it): N / K blocks in decoder/layers, each a nested scan of K - 1 linear-attention layers
 * (local_layers) and the full-attention layer (global_layer), then N % K layers in
 * decoder/layers_remainder/local_layers (plan_nested.c). Older checkpoints with blocks
 * decoder/layers/layers_<j>/R are read as the cycle family reads them. */
#include "family.h"

#include <string.h>

static int applies(const ur_settings *s, const ur_family_keys *k)
{
    return ur_plan__cycle(k) > 1 && strcmp(s->decoder_block, "qwen3_next") == 0;
}

static int setup(ur_plan_walk *w, ur_err *err)
{
    ur_plan_nested_state *st = UR_FAMILY_STATE(ur_plan_nested_state, w);
    int64_t nl = w->s->num_decoder_layers;
    int64_t k = ur_plan__cycle(w->k);
    w->plan->n_groups = 1;
    ur_plan__group_set(&w->plan->groups[0], "layers", nl / k, k, 0, "layers");
    st->n_remainder = nl % k;
    st->remainder_first = nl / k * k;
    if (w->plan->unrolled && w->s->param_scan_axis < 0) {
        return ur_err_set(err, UR_EUNSUPPORTED,
                          "qwen3_next with a negative param_scan_axis (%lld): the nested "
                          "scan's axes are not worked out for it",
                          (long long)w->s->param_scan_axis);
    }
    return UR_OK;
}

/* decoder/layers/{local_layers,global_layer}/R and decoder/layers_remainder/...; other leaves of
 * decoder/layers (layers_<j>) go the cycle way */
static int leaf(ur_plan_walk *w, const ur_plan_item *it, int *done, ur_err *err)
{
    const ur_plan_leaf *l = it->l;
    size_t st = it->st;
    int rem = strcmp(l->path[st + 1], "layers_remainder") == 0;
    if (!rem && !(it->g == 0 && it->en - st >= 4 &&
                  (strcmp(l->path[st + 2], "local_layers") == 0 ||
                   strcmp(l->path[st + 2], "global_layer") == 0))) {
        return UR_OK;
    }
    *done = 1;
    return ur_plan_nested__leaf(w, it, err);
}

/* The multi-token-prediction layer: MaxText builds it from the scannable block when
 * scan_layers is true (nnx_decoders.py get_decoder_layers, get_scannable). */
static int mtp_leaf(ur_plan_walk *w, const ur_plan_item *it, size_t rest, int *done, ur_err *err)
{
    (void)rest;
    (void)done;
    return ur_plan__mtp_unsupported(w, it, err);
}

const ur_plan_family ur_family_qwen3_next = {
    .name = "qwen3_next",
    .applies = applies,
    .setup = setup,
    .mtp_leaf = mtp_leaf,
    .leaf = leaf,
    .nested = 1,
    .finish = ur_plan_nested__finish,
};
