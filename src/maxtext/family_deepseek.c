/* DeepSeek (decoder_block deepseek; nnx_decoders.py _init_scanned_deepseek): two scanned
 * groups, decoder/dense_layers (the first first_num_dense_layers layers) and
 * decoder/moe_layers (the rest); each keeps its own name and restarts its indices at 0:
 * decoder/dense_layers_<i>/R, decoder/moe_layers_<i>/R. */
#include "family.h"

#include <string.h>

/* Read by the Engram and pipeline families too (family.h). */
const ur_family_key ur_key_first_num_dense_layers = {"first_num_dense_layers", UR_FAMILY_KEY_INT,
                                                     0, 0};

static const ur_family_key *const k_keys[] = {&ur_key_first_num_dense_layers, NULL};

static int applies(const ur_settings *s, const ur_family_keys *k)
{
    (void)k;
    return strcmp(s->decoder_block, "deepseek") == 0;
}

static int setup(ur_plan_walk *w, ur_err *err)
{
    int64_t d = ur_family_int(w->k, &ur_key_first_num_dense_layers);
    (void)err;
    w->plan->n_groups = 2;
    ur_plan__group_set(&w->plan->groups[0], "dense_layers", d, 1, 0, NULL);
    ur_plan__group_set(&w->plan->groups[1], "moe_layers", w->s->num_decoder_layers - d, 1, 0,
                       NULL);
    return UR_OK;
}

const ur_plan_family ur_family_deepseek = {
    .name = "deepseek",
    .keys = k_keys,
    .applies = applies,
    .setup = setup,
    .pipelinable = 1, /* its MoE layers (family_pipeline.c) */
    .aux_leaf = ur_plan__router_bias,
};
