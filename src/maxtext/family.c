/* The table of MaxText layout families (family.h): the first row that applies to the config
 * is its family. A new family is a file family_<name>.c with its descriptor
 * `const ur_plan_family ur_family_<name>`, and a row here (before any row that would also
 * apply to it: the plain family applies to everything). Nothing else names it. */
#include "family.h"

/* The rows, in the order they are tried: ROW(x) is the descriptor ur_family_x of
 * family_x.c. */
#define UR_FAMILY_ROWS(ROW)                                                                       \
    ROW(deepseek_engram) /* decoder_block deepseek, engram_layers */                              \
    ROW(deepseek)   /* decoder_block deepseek */                                                    \
    ROW(gemma3)     /* decoder_block gemma3 */                                                        \
    ROW(gemma4)     /* decoder_block gemma4 */                                                        \
    ROW(deepseek4)  /* decoder_block deepseek4 */                                                  \
    ROW(qwen3_next) /* decoder_block qwen3_next, inhomogeneous_layer_cycle_interval > 1 */        \
    ROW(cycle)      /* inhomogeneous_layer_cycle_interval > 1 */                                       \
    ROW(plain)      /* everything else */

#define DECLARE(x) extern const ur_plan_family ur_family_##x;
#define ENTRY(x) &ur_family_##x,
UR_FAMILY_ROWS(DECLARE)

static const ur_plan_family *const k_families[] = {UR_FAMILY_ROWS(ENTRY)};

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
