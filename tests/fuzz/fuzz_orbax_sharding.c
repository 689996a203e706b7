/* Fuzz target: Orbax `_sharding` (ur_orbax_sharding_parse: JSON object of base64url names to
 * JSON-text values). Every parsed sharding is emitted and parsed back; the whole file is
 * emitted and parsed back with the same names. */
#include "fuzz_common.h"

#include "orbax/orbax_impl.h"

static void check_map(const ur_orbax_sharding_map *m)
{
    ur_buf a;
    ur_err err;
    ur_orbax_sharding_map *m2 = NULL;

    for (size_t i = 0; i < m->n; i++) {
        fz_check(m->names[i] != NULL);
        fz_check(ur_orbax_sharding_find(m, m->names[i]) != NULL);
        if (m->shardings[i].kind == UR_ORBAX_SHARDING_ABSENT) {
            continue;
        }
        ur_buf_init(&a, 0);
        if (ur_orbax_sharding_value_emit(&a, &m->shardings[i], &err) == UR_OK) {
            ur_orbax_arena arena;
            ur_orbax_sharding s;
            char *text = fz_text(a.data, a.len);
            fz_check(text != NULL);
            ur_orbax__arena_init(&arena);
            memset(&s, 0, sizeof s);
            fz_check(ur_orbax_sharding_value_parse(&s, &arena, text, &err) == UR_OK);
            fz_check(s.kind == m->shardings[i].kind);
            ur_orbax__arena_dispose(&arena);
            free(text);
        } else {
            fz_check_err(err.code, &err);
        }
        ur_buf_dispose(&a);
    }
    ur_buf_init(&a, 0);
    if (ur_orbax_sharding_emit(&a, m->names, m->shardings, m->n, &err) == UR_OK) {
        fz_check(ur_orbax_sharding_parse(&m2, (const char *)a.data, a.len, &err) == UR_OK);
        fz_check(m2->n == m->n);
        for (size_t i = 0; i < m->n; i++) {
            fz_check(strcmp(m2->names[i], m->names[i]) == 0);
        }
        ur_orbax_sharding_map_free(m2);
    } else {
        fz_check_err(err.code, &err);
    }
    ur_buf_dispose(&a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ur_orbax_sharding_map *m = NULL;
    ur_err err;
    char *text = fz_text(data, size);
    int rc;

    if (text == NULL) {
        return 0;
    }
    ur_err_clear(&err);
    rc = ur_orbax_sharding_parse(&m, text, size, &err);
    fz_check_err(rc, &err);
    if (rc == UR_OK) {
        check_map(m);
        ur_orbax_sharding_map_free(m);
    }
    free(text);
    return 0;
}
