/* Fuzz target: Orbax `_CHECKPOINT_METADATA` (ur_orbax_ckpt_meta_parse) with emit round trip,
 * and, on the same bytes, `array_metadatas/process_0` (ur_orbax_array_meta_parse), the other
 * small JSON file of a step read whole. */
#include "fuzz_common.h"

#include "orbax/orbax_impl.h"

static void ckpt_meta(const char *text, size_t size)
{
    ur_orbax_step_meta_doc *d = NULL, *d2 = NULL;
    ur_buf a;
    ur_err err;
    int rc;

    ur_err_clear(&err);
    rc = ur_orbax_ckpt_meta_parse(&d, text, size, &err);
    fz_check_err(rc, &err);
    if (rc < 0) {
        return;
    }
    ur_buf_init(&a, 0);
    if (ur_orbax_ckpt_meta_emit(&a, &d->meta, &err) == UR_OK) {
        fz_check(ur_orbax_ckpt_meta_parse(&d2, (const char *)a.data, a.len, &err) == UR_OK);
        fz_check(d2->meta.n_item_handlers == d->meta.n_item_handlers);
        fz_check(d2->meta.has_commit_timestamp == d->meta.has_commit_timestamp);
        ur_orbax_ckpt_meta_free(d2);
    } else {
        fz_check_err(err.code, &err);
    }
    ur_buf_dispose(&a);
    ur_orbax_ckpt_meta_free(d);
}

static void array_meta(const char *text, size_t size)
{
    ur_orbax_array_meta_list *l = NULL;
    ur_buf a;
    ur_err err;
    int rc;

    ur_err_clear(&err);
    rc = ur_orbax_array_meta_parse(&l, text, size, &err);
    fz_check_err(rc, &err);
    if (rc < 0) {
        return;
    }
    ur_buf_init(&a, 0);
    if (ur_orbax_array_meta_emit(&a, l->items, l->n, &err) < 0) {
        fz_check_err(err.code, &err);
    }
    ur_buf_dispose(&a);
    ur_orbax_array_meta_free(l);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fz_text(data, size);
    if (text == NULL) {
        return 0;
    }
    ckpt_meta(text, size);
    array_meta(text, size);
    free(text);
    return 0;
}
