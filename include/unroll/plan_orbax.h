/* The planner's side of an Orbax checkpoint (src/maxtext/): each leaf as ur_plan_build takes
 * it, the custom_metadata the output records, and the units a run publishes for a LoRA
 * adapters directory. */
#ifndef UNROLL_PLAN_ORBAX_H
#define UNROLL_PLAN_ORBAX_H

#include "unroll/err.h"
#include "unroll/orbax.h"
#include "unroll/plan.h"

#include <stddef.h>

/* ---- the Orbax checkpoint as the plan sees it (src/maxtext/plan_orbax.c) -------------------- */

typedef struct ur_plan_leaves {
    ur_plan_leaf *leaves; /* one per checkpoint leaf, index for index */
    size_t n;
    const char **comps_; /* every leaf's key components, back to back (borrowed strings) */
    unsigned char *seqs_; /* ... and which of them are list indices */
    const char **specs_; /* the partition specs, rank entries per leaf that has one */
} ur_plan_leaves;

/* The leaves of `ck` (paths, dtypes, shapes, placeholders, partition specs). The strings are
 * borrowed from `ck`, which must outlive `out`. Errors: UR_ENOMEM. */
int ur_plan_orbax_leaves(ur_plan_leaves *out, const ur_orbax_ckpt *ck, ur_err *err);
void ur_plan_orbax_leaves_dispose(ur_plan_leaves *l);

/* The custom_metadata the output's `_CHECKPOINT_METADATA` records, where MaxText reads it back
 * (0.2.5: checkpointing.load_checkpoint_metadata on load_parameters_path's step directory;
 * model_creation_utils.verify_and_sync_scan_layers then takes scan_layers from it, or refuses
 * a contradicting flag): `{"scan_layers": <scanned>}`, then every other member of `ck`'s own
 * custom_metadata (MaxText's "lora", ...), each value's text as the input wrote it. *out:
 * free with ur_free. UR_ECORRUPT (the input's is not a JSON object), UR_ENOMEM. */
int ur_plan_orbax_custom_metadata(char **out, const ur_orbax_ckpt *ck, int scanned, ur_err *err);

/* ---- the LoRA adapters directory (src/maxtext/plan_lora.c) ---------------------------------- */

/* What a run writes, relative to the checkpoint directory: without adapters the step "0";
 * with them "base/0", then per adapter (sorted by id) "loras/<id>/0" and
 * "loras/<id>/adapter_config.json", so adapter i is unit 1 + 2i and its config 2 + 2i. */
typedef struct ur_plan_units {
    char **ids; /* the adapter ids, sorted */
    size_t n_ids;
    const char **units;
    size_t n_units;
    char **owned_; /* the formatted unit names */
} ur_plan_units;

/* The units for the adapters directory `adapters` ("" for none): its adapters are the
 * subdirectories <id>/ holding adapter_config.json (names starting with '.' are skipped).
 * Dispose `out` whatever the result. Errors: UR_ENOTFOUND (no such directory, or no adapter
 * in it), UR_EIO, UR_ENOMEM. */
int ur_plan_lora_units(ur_plan_units *out, const char *adapters, ur_err *err);
void ur_plan_lora_units_dispose(ur_plan_units *u);

#endif
