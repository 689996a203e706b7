/* The plain family (llama2, mistral, gemma, gemma2, qwen3, ... every decoder_block without a
 * descriptor of its own): one scanned group decoder/layers of num_decoder_layers; slice i of
 * decoder/layers/R is decoder/layers_<i>/R. Pipelined with DeepSeek (family_pipeline.c). */
#include "family.h"

static int applies(const ur_settings *s, const ur_family_keys *k)
{
    (void)s;
    (void)k;
    return 1;
}

static int setup(ur_plan_walk *w, ur_err *err)
{
    (void)err;
    w->plan->n_groups = 1;
    ur_plan__group_set(&w->plan->groups[0], "layers", w->s->num_decoder_layers, 1, 0, NULL);
    return UR_OK;
}

const ur_plan_family ur_family_plain = {
    .name = "plain",
    .applies = applies,
    .setup = setup,
    .pipelinable = 1,
};
