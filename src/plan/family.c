/* The table of MaxText layout families (family.h): the first row that applies to the config
 * is its family. A new family is a file family_<name>.c with its descriptor, and a row here
 * (before any row that would also apply to it: the plain family applies to everything). */
#include "family.h"

static const ur_plan_family *const k_families[] = {
    &ur_family_deepseek,   /* decoder_block deepseek */
    &ur_family_gemma3,     /* decoder_block gemma3 */
    &ur_family_gemma4,     /* decoder_block gemma4 */
    &ur_family_deepseek4,  /* decoder_block deepseek4 */
    &ur_family_qwen3_next, /* decoder_block qwen3_next, inhomogeneous_layer_cycle_interval > 1 */
    &ur_family_cycle,      /* inhomogeneous_layer_cycle_interval > 1 */
    &ur_family_plain,      /* everything else */
};

const ur_plan_family *ur_family_find_block(const ur_settings *s)
{
    size_t n = sizeof k_families / sizeof k_families[0];
    for (size_t i = 0; i + 1 < n; i++) {
        if (k_families[i]->applies(s)) {
            return k_families[i];
        }
    }
    return k_families[n - 1];
}

const ur_plan_family *ur_family_find(const ur_settings *s)
{
    if (ur_family_pipeline.applies(s)) {
        return &ur_family_pipeline;
    }
    return ur_family_find_block(s);
}
