/* DeepSeek (decoder_block deepseek; nnx_decoders.py _init_scanned_deepseek): two scanned
 * groups, decoder/dense_layers (the first first_num_dense_layers layers) and
 * decoder/moe_layers (the rest); each keeps its own name and restarts its indices at 0:
 * decoder/dense_layers_<i>/R, decoder/moe_layers_<i>/R. */
#include "family.h"

#include <string.h>

static int applies(const ur_settings *s)
{
    return strcmp(s->decoder_block, "deepseek") == 0;
}

static int setup(ur_plan_walk *w, ur_err *err)
{
    const ur_settings *s = w->s;
    (void)err;
    w->plan->n_groups = 2;
    ur_plan__group_set(&w->plan->groups[0], "dense_layers", s->first_num_dense_layers, 1, 0, NULL);
    ur_plan__group_set(&w->plan->groups[1], "moe_layers",
                       s->num_decoder_layers - s->first_num_dense_layers, 1, 0, NULL);
    return UR_OK;
}

const ur_plan_family ur_family_deepseek = {
    .name = "deepseek",
    .applies = applies,
    .setup = setup,
    .pipelinable = 1, /* its MoE layers (family_pipeline.c) */
};
