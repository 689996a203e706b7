/* The leaf tree of an Orbax PyTree checkpoint: key path strings, param names, and the order
 * and structure checks that Orbax's restore applies (`_src/tree/utils.py:
 * from_flattened_with_keypath`, `_src/metadata/tree.py: InternalTreeMetadata.as_nested_tree`).
 *
 * Restore sorts the entries by key-path tuple (list indices as ints), drops any entry whose
 * path is a strict prefix of another, and rebuilds dicts and lists; a list index must never
 * skip ahead, so indices run 0, 1, 2, ... under each list. */
#include "orbax_impl.h"

#include "unroll/alloc.h"
#include "unroll/side.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Python's repr() of a str, in the subset that matters for key names. */
static int put_py_repr(ur_buf *b, const char *s, ur_err *err)
{
    char quote = '\'';
    if (strchr(s, '\'') != NULL && strchr(s, '"') == NULL) {
        quote = '"';
    }
    int rc = ur_buf_append_byte(b, (uint8_t)quote, err);
    const unsigned char *p = (const unsigned char *)s;
    for (; rc == UR_OK && *p != '\0'; p++) {
        unsigned c = *p;
        if (c == '\\' || c == (unsigned char)quote) {
            char esc[2] = {'\\', (char)c};
            rc = ur_buf_append(b, esc, 2, err);
        } else if (c == '\n') {
            rc = ur_buf_append_str(b, "\\n", err);
        } else if (c == '\r') {
            rc = ur_buf_append_str(b, "\\r", err);
        } else if (c == '\t') {
            rc = ur_buf_append_str(b, "\\t", err);
        } else if (c < 0x20 || c == 0x7f) {
            rc = ur_buf_printf(b, err, "\\x%02x", c);
        } else if (c == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) {
            /* U+0080..U+009F are not printable: Python writes \x80..\x9f. */
            rc = ur_buf_printf(b, err, "\\x%02x", (unsigned)p[1]);
            p++;
        } else {
            rc = ur_buf_append_byte(b, (uint8_t)c, err);
        }
    }
    if (rc == UR_OK) {
        rc = ur_buf_append_byte(b, (uint8_t)quote, err);
    }
    return rc;
}

int ur_orbax_tree_keypath(ur_buf *out, const ur_orbax_key *path, size_t depth, ur_err *err)
{
    int rc = ur_buf_append_byte(out, '(', err);
    for (size_t i = 0; rc == UR_OK && i < depth; i++) {
        if (i > 0) {
            rc = ur_buf_append_str(out, ", ", err);
        }
        if (rc == UR_OK) {
            rc = put_py_repr(out, path[i].key, err);
        }
    }
    if (rc == UR_OK && depth == 1) {
        rc = ur_buf_append_byte(out, ',', err);
    }
    if (rc == UR_OK) {
        rc = ur_buf_append_byte(out, ')', err);
    }
    return rc;
}

int ur_orbax_tree_name(ur_buf *out, const ur_orbax_key *path, size_t depth, ur_err *err)
{
    int rc = UR_OK;
    for (size_t i = 0; rc == UR_OK && i < depth; i++) {
        if (i > 0) {
            rc = ur_buf_append_byte(out, '.', err);
        }
        if (rc == UR_OK) {
            rc = ur_buf_append_str(out, path[i].key, err);
        }
    }
    /* Leave a NUL after the text without counting it, so out->data is a C string. */
    if (rc == UR_OK) {
        rc = ur_buf_reserve(out, 1, err);
    }
    if (rc == UR_OK) {
        out->data[out->len] = '\0';
    }
    return rc;
}

/* Decimal indices without leading zeros compare by length, then bytewise. */
static int cmp_index(const char *a, const char *b)
{
    size_t la = strlen(a);
    size_t lb = strlen(b);
    if (la != lb) {
        return la < lb ? -1 : 1;
    }
    int c = strcmp(a, b);
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
}

static int cmp_key(const ur_orbax_key *a, const ur_orbax_key *b)
{
    if (a->type != b->type) {
        return a->type == UR_ORBAX_KEY_SEQUENCE ? -1 : 1;
    }
    if (a->key == b->key) {
        return 0; /* key strings are kept once: leaves share their common components */
    }
    if (a->type == UR_ORBAX_KEY_SEQUENCE) {
        return cmp_index(a->key, b->key);
    }
    int c = strcmp(a->key, b->key);
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
}

static int cmp_leaf(const void *pa, const void *pb)
{
    const ur_orbax_leaf *a = pa;
    const ur_orbax_leaf *b = pb;
    size_t n = a->depth < b->depth ? a->depth : b->depth;
    for (size_t i = 0; i < n; i++) {
        int c = cmp_key(&a->path[i], &b->path[i]);
        if (c != 0) {
            return c;
        }
    }
    if (a->depth != b->depth) {
        return a->depth < b->depth ? -1 : 1;
    }
    return 0;
}

/* ---- sorting: on two threads when there are many leaves ----------------------------------
 * Opening a checkpoint and committing an output of 100,000s of leaves each sort them, and the
 * sort was the longest stretch with one core busy. Pointers to the leaves are sorted, half on
 * each thread, merged, and the leaves moved once into place: 16 bytes a leaf beside them. */

static int cmp_leaf_ptr(const void *pa, const void *pb)
{
    return cmp_leaf(*(const ur_orbax_leaf *const *)pa, *(const ur_orbax_leaf *const *)pb);
}

typedef struct {
    const ur_orbax_leaf **p;
    size_t n;
} sort_half;

static int sort_half_run(void *ctx, ur_err *err)
{
    sort_half *h = ctx;
    (void)err;
    qsort((void *)h->p, h->n, sizeof *h->p, cmp_leaf_ptr);
    return UR_OK;
}

#define SORT_SPLIT_MIN 16384

/* leaves[i] = the leaf at old position at[i], for every i (at is used up: a cycle at a time,
 * each leaf is copied once). */
static void move_into_place(ur_orbax_leaf *leaves, size_t *at, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (at[i] == i) {
            continue;
        }
        ur_orbax_leaf tmp = leaves[i];
        size_t j = i;
        while (at[j] != i) {
            size_t k = at[j];
            leaves[j] = leaves[k];
            at[j] = j;
            j = k;
        }
        leaves[j] = tmp;
        at[j] = j;
    }
}

static int sort_leaves(ur_orbax_leaf *leaves, size_t n, ur_err *err)
{
    const ur_orbax_leaf **p;
    size_t *at, mid = n / 2, i = 0, j, k = 0;
    sort_half half[2];
    ur_side side;

    if (n < SORT_SPLIT_MIN) {
        qsort(leaves, n, sizeof(*leaves), cmp_leaf);
        return UR_OK;
    }
    p = ur_malloc(n * sizeof *p);
    at = ur_malloc(n * sizeof *at);
    if (p == NULL || at == NULL) {
        ur_free((void *)p);
        ur_free(at);
        return ur_err_oom(err);
    }
    for (size_t x = 0; x < n; x++) {
        p[x] = &leaves[x];
    }
    half[0].p = p;
    half[0].n = mid;
    half[1].p = p + mid;
    half[1].n = n - mid;
    ur_side_start(&side, sort_half_run, &half[1]);
    sort_half_run(&half[0], err);
    ur_side_join(&side);
    /* merge: on a tie the first half's leaf first, as one sort of the whole would not
     * promise, but ties are duplicate paths, refused below */
    for (j = mid; i < mid || j < n;) {
        int left = j >= n || (i < mid && cmp_leaf(p[i], p[j]) <= 0);
        at[k++] = (size_t)((left ? p[i++] : p[j++]) - leaves);
    }
    ur_free((void *)p);
    move_into_place(leaves, at, n);
    ur_free(at);
    return UR_OK;
}

/* Number of leading components a and b share (same type and same key). */
static size_t common_prefix(const ur_orbax_leaf *a, const ur_orbax_leaf *b)
{
    size_t n = a->depth < b->depth ? a->depth : b->depth;
    size_t i = 0;
    while (i < n && cmp_key(&a->path[i], &b->path[i]) == 0) {
        i++;
    }
    return i;
}

/* "<what>: <leaf's key path>: <problem>" as UR_ECORRUPT (the key path is written out here:
 * leaves do not keep it, it would cost ~140 bytes each). */
static int tree_fail(ur_err *err, const char *what, const ur_orbax_leaf *l, const char *problem)
{
    ur_buf kp;
    ur_buf_init(&kp, 0);
    int rc = ur_orbax_tree_keypath(&kp, l->path, l->depth, err);
    if (rc == UR_OK) {
        rc = ur_buf_append_byte(&kp, 0, err);
    }
    if (rc == UR_OK) {
        rc = ur_err_set(err, UR_ECORRUPT, "%s: %s: %s", what, (const char *)kp.data, problem);
    }
    ur_buf_dispose(&kp);
    return rc;
}

int ur_orbax_tree_order(ur_orbax_leaf *leaves, size_t *n, const char *what, ur_err *err)
{
    size_t count = *n;
    if (count == 0) {
        return ur_err_set(err, UR_ECORRUPT, "%s: empty tree_metadata", what);
    }
    int rc = sort_leaves(leaves, count, err);
    if (rc < 0) {
        return rc;
    }

    /* Drop entries that are a strict prefix of the next one (sorting puts a prefix right
     * before the paths that extend it). */
    size_t kept = 0;
    for (size_t i = 0; i < count; i++) {
        if (i + 1 < count && leaves[i].depth < leaves[i + 1].depth &&
            common_prefix(&leaves[i], &leaves[i + 1]) == leaves[i].depth) {
            continue;
        }
        if (kept != i) {
            leaves[kept] = leaves[i];
        }
        kept++;
    }
    count = kept;

    for (size_t i = 0; i < count; i++) {
        const ur_orbax_leaf *cur = &leaves[i];
        const ur_orbax_leaf *prev = i > 0 ? &leaves[i - 1] : NULL;
        if (cur->depth == 0) {
            return tree_fail(err, what, cur, "empty key path");
        }
        size_t common = prev != NULL ? common_prefix(prev, cur) : 0;
        if (prev != NULL && common == cur->depth && common == prev->depth) {
            return tree_fail(err, what, cur, "duplicate key path");
        }
        if (prev != NULL && common < prev->depth && common < cur->depth &&
            prev->path[common].type != cur->path[common].type) {
            return tree_fail(err, what, cur, "mixes list indices and dict keys under one parent");
        }
        for (size_t k = 0; k < cur->depth; k++) {
            if (cur->path[k].type != UR_ORBAX_KEY_SEQUENCE) {
                continue;
            }
            const char *idx = cur->path[k].key;
            int ok;
            if (prev == NULL || common < k) {
                ok = strcmp(idx, "0") == 0; /* first child of a new list */
            } else if (common > k) {
                ok = 1; /* same list element as the previous leaf */
            } else {
                /* Next element of the same list: previous index + 1. */
                const char *pidx = prev->path[k].key;
                size_t lp = strlen(pidx);
                char next[24];
                ok = 0;
                if (lp < sizeof next - 1) {
                    memcpy(next, pidx, lp + 1);
                    size_t j = lp;
                    while (j > 0 && next[j - 1] == '9') {
                        next[--j] = '0';
                    }
                    if (j == 0) {
                        memmove(next + 1, next, lp + 1);
                        next[0] = '1';
                    } else {
                        next[j - 1]++;
                    }
                    ok = strcmp(next, idx) == 0;
                }
            }
            if (!ok) {
                char msg[160];
                snprintf(msg, sizeof msg,
                         "list index %.40s out of sequence (indices must run 0, 1, 2, ... with "
                         "no gaps)",
                         idx);
                return tree_fail(err, what, cur, msg);
            }
        }
    }
    *n = count;
    return UR_OK;
}
