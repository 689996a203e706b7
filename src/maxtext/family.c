/* The table of MaxText layout families (family.h): the first row that applies to the config
 * is its family. A new family is a file family_<name>.c with its descriptor
 * `const ur_plan_family ur_family_<name>` (with the config keys it declares, if any), and a row
 * here (before any row that would also apply to it: the plain family applies to everything).
 * Nothing else names it. The keys of every row are resolved here, once per plan. */
#include "family.h"

#include "unroll/alloc.h"

#include <assert.h>
#include <string.h>

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

const ur_plan_family *ur_family_find_block(const ur_settings *s, const ur_family_keys *k)
{
    size_t n = sizeof k_families / sizeof k_families[0];
    for (size_t i = 0; i + 1 < n; i++) {
        if (k_families[i]->applies(s, k)) {
            return k_families[i];
        }
    }
    return k_families[n - 1];
}

const ur_plan_family *ur_family_find(const ur_settings *s, const ur_family_keys *k)
{
    if (ur_family_pipeline.applies(s, k)) {
        return &ur_family_pipeline;
    }
    return ur_family_find_block(s, k);
}

/* ---- the families' keys ------------------------------------------------------------------ */

static int key_index(const ur_family_keys *k, const ur_family_key *key, size_t *i)
{
    for (*i = 0; *i < k->n; (*i)++) {
        if (k->e[*i].key == key) {
            return 1;
        }
    }
    return 0;
}

/* One key's value from cfg into e (its default when cfg is NULL or lacks the key). */
static int key_resolve(ur_family_keys *k, const ur_family_key *key, const ur_config *cfg,
                       ur_err *err)
{
    size_t i;
    int b = 0;
    int rc = UR_ENOTFOUND;
    for (i = 0; i < k->n; i++) {
        if (k->e[i].key == key) {
            return UR_OK; /* listed by two rows */
        }
        if (strcmp(k->e[i].key->name, key->name) == 0) {
            return ur_err_set(err, UR_EINTERNAL, "config key '%s' declared by two families",
                              key->name);
        }
    }
    if (k->n == UR_FAMILY_MAX_KEYS) {
        return ur_err_set(err, UR_EINTERNAL, "more than %d family config keys",
                          UR_FAMILY_MAX_KEYS);
    }
    k->e[i].key = key;
    k->e[i].v = key->dflt;
    k->n++;
    if (cfg != NULL) {
        switch (key->type) {
        case UR_FAMILY_KEY_INT:
            rc = ur_config_get_int(cfg, key->name, &k->e[i].v, err);
            break;
        case UR_FAMILY_KEY_BOOL:
            rc = ur_config_get_bool(cfg, key->name, &b, err);
            k->e[i].v = rc == UR_OK ? b : key->dflt;
            break;
        case UR_FAMILY_KEY_INT_LIST:
            rc = ur_config_get_int_list(cfg, key->name, &k->e[i].list, &k->e[i].n_list, err);
            break;
        }
    }
    if (rc == UR_ENOTFOUND) {
        k->e[i].v = key->dflt; /* absent: MaxText's default */
        rc = UR_OK;
    }
    if (rc == UR_OK && key->type == UR_FAMILY_KEY_INT && k->e[i].v < key->min) {
        rc = ur_err_set(err, UR_EINVAL, "config key '%s': must be >= %lld (got %lld)", key->name,
                        (long long)key->min, (long long)k->e[i].v);
    }
    return rc;
}

static int family_keys(ur_family_keys *k, const ur_plan_family *fam, const ur_config *cfg,
                       ur_err *err)
{
    for (size_t j = 0; fam->keys != NULL && fam->keys[j] != NULL; j++) {
        int rc = key_resolve(k, fam->keys[j], cfg, err);
        if (rc < 0) {
            return rc;
        }
    }
    return UR_OK;
}

int ur_family_keys_resolve(ur_family_keys *out, const ur_config *cfg, ur_err *err)
{
    int rc;
    memset(out, 0, sizeof *out);
    rc = family_keys(out, &ur_family_pipeline, cfg, err);
    for (size_t i = 0; rc == UR_OK && i < sizeof k_families / sizeof k_families[0]; i++) {
        rc = family_keys(out, k_families[i], cfg, err);
    }
    return rc;
}

void ur_family_keys_dispose(ur_family_keys *k)
{
    for (size_t i = 0; i < k->n; i++) {
        ur_free(k->e[i].list);
        k->e[i].list = NULL;
        k->e[i].n_list = 0;
    }
}

/* A key missing from k is one no row's `keys` lists: a programmer error. */
int64_t ur_family_int(const ur_family_keys *k, const ur_family_key *key)
{
    size_t i;
    int found = key_index(k, key, &i);
    assert(found);
    return found ? k->e[i].v : key->dflt;
}

const int64_t *ur_family_list(const ur_family_keys *k, const ur_family_key *key, size_t *n)
{
    size_t i;
    int found = key_index(k, key, &i);
    assert(found);
    *n = found ? k->e[i].n_list : 0;
    return found ? k->e[i].list : NULL;
}

void ur_family_keys_set(ur_family_keys *k, const ur_family_key *key, int64_t v)
{
    size_t i;
    int found = key_index(k, key, &i);
    assert(found);
    if (found) {
        k->e[i].v = v;
    }
}
