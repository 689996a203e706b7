/* Fuzz target: Orbax `_METADATA` (ur_orbax_meta_parse), emit, and the param-name / key-path
 * builders over every parsed leaf. An emitted `_METADATA` parses again to the same leaves. */
#include "fuzz_common.h"

#include "orbax/orbax_impl.h"

static void check_leaves(const ur_orbax_meta *m)
{
    ur_buf a, b;
    ur_orbax_meta *m2 = NULL;
    ur_err err;

    for (size_t i = 0; i < m->n_leaves; i++) {
        const ur_orbax_leaf *l = &m->leaves[i];
        fz_check(l->name != NULL && (l->depth == 0 || l->path != NULL));
        fz_check(l->write_shape_rank >= -1 && l->write_shape_rank <= UR_MAX_RANK);
        ur_buf_init(&a, 0);
        if (ur_orbax_tree_name(&a, l->path, l->depth, &err) < 0) {
            fz_check_err(err.code, &err);
        }
        ur_buf_dispose(&a);
    }
    ur_buf_init(&a, 0);
    ur_buf_init(&b, 0);
    if (ur_orbax_meta_emit(&a, m, &err) == UR_OK) {
        fz_check(ur_orbax_meta_parse(&m2, (const char *)a.data, a.len, &err) == UR_OK);
        fz_check(m2->n_leaves == m->n_leaves);
        for (size_t i = 0; i < m->n_leaves; i++) {
            fz_check(strcmp(m2->leaves[i].name, m->leaves[i].name) == 0);
            fz_check(m2->leaves[i].value_type == m->leaves[i].value_type);
        }
        fz_check(ur_orbax_meta_emit(&b, m2, &err) == UR_OK);
        fz_check(a.len == b.len && memcmp(a.data, b.data, a.len) == 0);
        ur_orbax_meta_free(m2);
    } else {
        fz_check_err(err.code, &err);
    }
    ur_buf_dispose(&a);
    ur_buf_dispose(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ur_orbax_meta *m = NULL;
    ur_err err;
    char *text = fz_text(data, size);
    int rc;

    if (text == NULL) {
        return 0;
    }
    ur_err_clear(&err);
    rc = ur_orbax_meta_parse(&m, text, size, &err);
    fz_check_err(rc, &err);
    if (rc == UR_OK) {
        check_leaves(m);
        ur_orbax_meta_free(m);
    }
    free(text);
    return 0;
}
