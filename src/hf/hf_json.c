/* config.json as transformers writes it (json.dumps(config, indent=2, sort_keys=True) and a
 * newline): the entries gathered, then printed with sorted keys; floats as Python prints them. */
#include "hf_impl.h"

#include "unroll/alloc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { J_INT, J_FLOAT, J_BOOL, J_STR, J_NULL, J_STRS, J_OBJ } jkind;

typedef struct {
    char *in; /* the object it is in ("a/b": b inside a), NULL: the top level */
    char *key;
    jkind kind;
    int64_t i;
    double f;
    char **strs; /* J_STR: one; J_STRS: n */
    size_t n;
} jentry;

struct hf_json {
    jentry *e;
    size_t n, cap;
};

int hf_json_new(hf_json **out, ur_err *err)
{
    *out = ur_calloc(1, sizeof **out);
    return *out != NULL ? UR_OK : ur_err_oom(err);
}

void hf_json_free(hf_json *j)
{
    if (j == NULL) {
        return;
    }
    for (size_t i = 0; i < j->n; i++) {
        ur_free(j->e[i].in);
        ur_free(j->e[i].key);
        for (size_t k = 0; k < j->e[i].n; k++) {
            ur_free(j->e[i].strs[k]);
        }
        ur_free(j->e[i].strs);
    }
    ur_free(j->e);
    ur_free(j);
}

static jentry *add(hf_json *j, const char *in, const char *key, jkind kind, ur_err *err)
{
    jentry *e = ur_grow(j->e, &j->cap, j->n, sizeof *j->e, 32);
    if (e == NULL) {
        ur_err_oom(err);
        return NULL;
    }
    j->e = e;
    e = &j->e[j->n];
    memset(e, 0, sizeof *e);
    e->kind = kind;
    e->key = ur_strdup(key);
    e->in = in != NULL ? ur_strdup(in) : NULL;
    if (e->key == NULL || (in != NULL && e->in == NULL)) {
        ur_free(e->key);
        ur_free(e->in);
        ur_err_oom(err);
        return NULL;
    }
    j->n++;
    return e;
}

int hf_json_int(hf_json *j, const char *in, const char *key, int64_t v, ur_err *err)
{
    jentry *e = add(j, in, key, J_INT, err);
    return e != NULL ? (e->i = v, UR_OK) : UR_ENOMEM;
}

int hf_json_float(hf_json *j, const char *in, const char *key, double v, ur_err *err)
{
    jentry *e = add(j, in, key, J_FLOAT, err);
    return e != NULL ? (e->f = v, UR_OK) : UR_ENOMEM;
}

int hf_json_bool(hf_json *j, const char *in, const char *key, int v, ur_err *err)
{
    jentry *e = add(j, in, key, J_BOOL, err);
    return e != NULL ? (e->i = v != 0, UR_OK) : UR_ENOMEM;
}

int hf_json_null(hf_json *j, const char *in, const char *key, ur_err *err)
{
    return add(j, in, key, J_NULL, err) != NULL ? UR_OK : UR_ENOMEM;
}

static int set_strs(jentry *e, const char *const *v, size_t n, ur_err *err)
{
    e->strs = ur_calloc(n ? n : 1, sizeof *e->strs);
    if (e->strs == NULL) {
        return ur_err_oom(err);
    }
    for (; e->n < n; e->n++) {
        e->strs[e->n] = ur_strdup(v[e->n]);
        if (e->strs[e->n] == NULL) {
            return ur_err_oom(err);
        }
    }
    return UR_OK;
}

int hf_json_str(hf_json *j, const char *in, const char *key, const char *v, ur_err *err)
{
    jentry *e = add(j, in, key, J_STR, err);
    return e != NULL ? set_strs(e, &v, 1, err) : UR_ENOMEM;
}

int hf_json_ints(hf_json *j, const char *in, const hf_json_int_entry *e, size_t n, ur_err *err)
{
    int rc = UR_OK;
    for (size_t i = 0; i < n && rc == UR_OK; i++) {
        rc = hf_json_int(j, in, e[i].key, e[i].v, err);
    }
    return rc;
}

int hf_json_strs(hf_json *j, const char *in, const char *key, const char *const *v, size_t n,
                 ur_err *err)
{
    jentry *e = add(j, in, key, J_STRS, err);
    return e != NULL ? set_strs(e, v, n, err) : UR_ENOMEM;
}

void hf_float_repr(double v, char *out, size_t n)
{
    char digits[40];
    int p, exp10;
    if (!isfinite(v)) {
        snprintf(out, n, "%s", isnan(v) ? "NaN" : v > 0 ? "Infinity" : "-Infinity");
        return;
    }
    /* the shortest digits that read back as v (Python's repr) */
    for (p = 1; p <= 17; p++) {
        snprintf(digits, sizeof digits, "%.*e", p - 1, v);
        if (strtod(digits, NULL) == v) {
            break;
        }
    }
    exp10 = (int)strtol(strchr(digits, 'e') + 1, NULL, 10); /* printf's own exponent */
    if (exp10 < -4 || exp10 >= 16) {
        /* 1e-05, 1.5e+16: the mantissa without a trailing ".0" */
        char *e = strchr(digits, 'e');
        *e = '\0';
        snprintf(out, n, "%se%c%02d", digits, exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
        return;
    }
    snprintf(out, n, "%.*f", p - 1 - exp10 > 0 ? p - 1 - exp10 : 0, v);
    size_t len = strlen(out);
    if (strchr(out, '.') == NULL && len + 2 < n) {
        memcpy(out + len, ".0", 3);
    }
}

static int put_str(ur_buf *b, const char *s, ur_err *err)
{
    int rc = ur_buf_append_byte(b, '"', err);
    for (const unsigned char *p = (const unsigned char *)s; *p && rc == UR_OK; p++) {
        if (*p == '"' || *p == '\\') {
            rc = ur_buf_printf(b, err, "\\%c", *p);
        } else if (*p < 0x20 || *p >= 0x7f) {
            rc = ur_buf_printf(b, err, "\\u%04x", *p); /* ensure_ascii; names are ASCII */
        } else {
            rc = ur_buf_append_byte(b, *p, err);
        }
    }
    return rc == UR_OK ? ur_buf_append_byte(b, '"', err) : rc;
}

static int put_value(ur_buf *b, const jentry *e, int depth, ur_err *err)
{
    char f[64];
    int rc = UR_OK;
    switch (e->kind) {
    case J_INT:
        return ur_buf_printf(b, err, "%lld", (long long)e->i);
    case J_FLOAT:
        hf_float_repr(e->f, f, sizeof f);
        return ur_buf_printf(b, err, "%s", f);
    case J_BOOL:
        return ur_buf_printf(b, err, "%s", e->i ? "true" : "false");
    case J_NULL:
    case J_OBJ: /* printed by put_object */
        return ur_buf_printf(b, err, "null");
    case J_STR:
        return put_str(b, e->strs[0], err);
    case J_STRS:
        if (e->n == 0) {
            return ur_buf_printf(b, err, "[]");
        }
        rc = ur_buf_printf(b, err, "[\n");
        for (size_t k = 0; k < e->n && rc == UR_OK; k++) {
            rc = ur_buf_printf(b, err, "%*s", 2 * (depth + 1), "");
            if (rc == UR_OK) {
                rc = put_str(b, e->strs[k], err);
            }
            if (rc == UR_OK) {
                rc = ur_buf_printf(b, err, "%s\n", k + 1 < e->n ? "," : "");
            }
        }
        return rc == UR_OK ? ur_buf_printf(b, err, "%*s]", 2 * depth, "") : rc;
    }
    return rc;
}

static int by_key(const void *a, const void *b)
{
    const jentry *const *x = a, *const *y = b;
    return strcmp((*x)->key, (*y)->key);
}

/* How much of `e_in` names the object directly inside `in` (NULL: the top level) that holds
 * an entry of object e_in; 0 when e_in is not below in. */
static size_t child_len(const char *in, const char *e_in)
{
    size_t p = in != NULL ? strlen(in) : 0;
    const char *slash;
    if (e_in == NULL) {
        return 0;
    }
    if (in != NULL) {
        if (strncmp(e_in, in, p) != 0 || e_in[p] != '/') {
            return 0;
        }
        p++;
    }
    slash = strchr(e_in + p, '/');
    return slash != NULL ? (size_t)(slash - e_in) : strlen(e_in);
}

static int same_object(const char *a, const char *b)
{
    return a == NULL ? b == NULL : b != NULL && strcmp(a, b) == 0;
}

/* A stand-in for the nested object e->in[0 .. len) (key: its last name), unless one is there. */
static int add_object(jentry *objs, size_t *n_objs, const jentry **k, size_t *n, const char *e_in,
                      size_t len, ur_err *err)
{
    const char *name = e_in + len;
    for (size_t o = 0; o < *n_objs; o++) {
        if (strlen(objs[o].in) == len && strncmp(objs[o].in, e_in, len) == 0) {
            return UR_OK;
        }
    }
    while (name > e_in && name[-1] != '/') {
        name--;
    }
    objs[*n_objs].kind = J_OBJ;
    objs[*n_objs].in = ur_strndup(e_in, len);
    objs[*n_objs].key = ur_strndup(name, (size_t)(e_in + len - name));
    if (objs[*n_objs].in == NULL || objs[*n_objs].key == NULL) {
        ur_free(objs[*n_objs].in);
        ur_free(objs[*n_objs].key);
        return ur_err_oom(err);
    }
    k[(*n)++] = &objs[(*n_objs)++];
    return UR_OK;
}

/* The keys of object `in` (NULL: the top level), sorted; nested objects are named by the
 * entries' `in` paths, printed where their name sorts. */
static int put_object(const hf_json *j, const char *in, int depth, ur_buf *b, ur_err *err)
{
    const jentry **k = ur_calloc(j->n + 1, sizeof *k);
    jentry *objs = ur_calloc(j->n + 1, sizeof *objs);
    size_t n = 0, n_objs = 0;
    int rc = k != NULL && objs != NULL ? UR_OK : ur_err_oom(err);

    for (size_t i = 0; i < j->n && rc == UR_OK; i++) {
        const jentry *e = &j->e[i];
        size_t len;
        if (same_object(in, e->in)) {
            k[n++] = e;
        } else if ((len = child_len(in, e->in)) > 0) {
            rc = add_object(objs, &n_objs, k, &n, e->in, len, err);
        }
    }
    if (rc == UR_OK) {
        qsort(k, n, sizeof *k, by_key);
        rc = ur_buf_append_str(b, n ? "{\n" : "{", err);
    }
    for (size_t i = 0; i < n && rc == UR_OK; i++) {
        rc = ur_buf_printf(b, err, "%*s", 2 * (depth + 1), "");
        if (rc == UR_OK) {
            rc = put_str(b, k[i]->key, err);
        }
        if (rc == UR_OK) {
            rc = ur_buf_printf(b, err, ": ");
        }
        if (rc == UR_OK) {
            rc = k[i]->kind == J_OBJ ? put_object(j, k[i]->in, depth + 1, b, err)
                                     : put_value(b, k[i], depth + 1, err);
        }
        if (rc == UR_OK) {
            rc = ur_buf_printf(b, err, "%s\n", i + 1 < n ? "," : "");
        }
    }
    if (rc == UR_OK) {
        rc = n ? ur_buf_printf(b, err, "%*s}", 2 * depth, "") : ur_buf_append_str(b, "}", err);
    }
    for (size_t o = 0; objs != NULL && o < n_objs; o++) {
        ur_free(objs[o].in);
        ur_free(objs[o].key);
    }
    ur_free(k);
    ur_free(objs);
    return rc;
}

int hf_json_print(const hf_json *j, ur_buf *out, ur_err *err)
{
    int rc = put_object(j, NULL, 0, out, err);
    return rc == UR_OK ? ur_buf_append_byte(out, '\n', err) : rc;
}
