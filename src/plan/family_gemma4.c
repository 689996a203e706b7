/* Gemma 4 (decoder_block gemma4; gemma4.py Gemma4ScannableBlock, nnx_decoders.py
 * _init_scanned_gemma4, GEMMA4_ATTENTION_PATTERN 5 local + 1 global): N / 6 blocks in
 * decoder/scanned_blocks, each a nested scan of 5 local layers (local_layers) and a global
 * layer (global_layer), then N % 6 local layers in decoder/layers_remainder/local_layers. The
 * mapping and layer-index formula are the nested-block shape's (plan_nested.c). The local and
 * global layers may differ in shape (global_head_dim). */
#include "family.h"

#include <string.h>

static int applies(const ur_settings *s)
{
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

const ur_plan_family ur_family_gemma4 = {
    .name = "gemma4",
    .applies = applies,
    .setup = setup,
    .leaf = leaf,
    .nested = 1,
    .finish = ur_plan_nested__finish,
};
