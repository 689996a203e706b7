/* verify: the table of layout families (verify_family.h). An output D/X_<g>/R is offered to
 * each row in turn (a row is tried when the input has D/<under>, and for X = layers when it
 * says so); the first that finds a source wins. The blocks row, last, reads every plain group
 * and block of sub-layers. A new family that writes a new input shape is a file
 * verify_family_<shape>.c with its matcher, and a row here. */
#include "verify_family.h"

/* The rows, in the order they are tried: ROW(x) is ur_verify_family_x, defined in the
 * verify_family_<shape>.c that reads that shape. */
#define UR_VERIFY_FAMILY_ROWS(ROW)                                                                \
    ROW(pipeline)   /* D/pipeline_module (+ layers_outside_pipeline) */                             \
    ROW(gemma4)     /* D/scanned_blocks/{local_layers,global_layer} */                                \
    ROW(qwen3_next) /* D/layers/{local_layers,global_layer} */                                    \
    ROW(engram)     /* D/X_<a>_<b>, D/X_engram_<k> */                                                 \
    ROW(blocks)     /* D/X, D/X/layers_<j>, D/scanned_blocks, layers_remainder */

#define DECLARE(x) extern const ur_verify_family ur_verify_family_##x;
#define ENTRY(x) &ur_verify_family_##x,
UR_VERIFY_FAMILY_ROWS(DECLARE)

const ur_verify_family *const ur_verify_family_table[] = {UR_VERIFY_FAMILY_ROWS(ENTRY)};

const size_t ur_verify_family_count = sizeof ur_verify_family_table /
                                      sizeof ur_verify_family_table[0];
