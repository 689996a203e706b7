/* YAML -> ur_yval with libyaml's event parser, and the value-tree operations the config
 * loader needs (merge as OmegaConf merges, equality as Python compares).
 *
 * Scalar typing follows PyYAML's YAML 1.1 resolver (pyyaml resolver.py / constructor.py)
 * plus the float pattern OmegaConf adds in omegaconf/_utils.py get_yaml_loader(), minus the
 * timestamp resolver OmegaConf removes. */
#include "config_yaml.h"

#include "unroll/alloc.h"
#include "unroll/json.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define MAX_DEPTH 64

const char *ur_config_yaml_kind_name(ur_ykind k)
{
    switch (k) {
    case UR_Y_NULL:
        return "null";
    case UR_Y_BOOL:
        return "bool";
    case UR_Y_INT:
        return "int";
    case UR_Y_FLOAT:
        return "float";
    case UR_Y_STR:
        return "str";
    case UR_Y_LIST:
        return "list";
    case UR_Y_MAP:
        return "map";
    }
    return "?";
}

static ur_yval *yv_alloc(ur_ykind kind)
{
    ur_yval *v = ur_calloc(1, sizeof *v);
    if (v) {
        v->kind = kind;
    }
    return v;
}

int ur_config_yaml_new(ur_yval **out, ur_ykind kind, ur_err *err)
{
    ur_yval *v = yv_alloc(kind);
    if (!v) {
        return ur_err_oom(err);
    }
    *out = v;
    return UR_OK;
}

int ur_config_yaml_new_str(ur_yval **out, const char *s, ur_err *err)
{
    ur_yval *v = yv_alloc(UR_Y_STR);
    if (!v) {
        return ur_err_oom(err);
    }
    v->s = ur_strdup(s);
    if (!v->s) {
        ur_free(v);
        return ur_err_oom(err);
    }
    *out = v;
    return UR_OK;
}

void ur_config_yaml_free(ur_yval *v)
{
    if (!v) {
        return;
    }
    for (size_t i = 0; i < v->n; i++) {
        if (v->keys) {
            ur_free(v->keys[i]);
        }
        ur_config_yaml_free(v->vals[i]);
    }
    ur_free(v->keys);
    ur_free(v->vals);
    ur_free(v->s);
    ur_free(v);
}

static int reserve(ur_yval *c, ur_err *err)
{
    size_t cap = c->cap, cap_keys = c->cap; /* vals and keys have the one room c->cap */
    ur_yval **vals = ur_grow(c->vals, &cap, c->n, sizeof *vals, 8);
    if (!vals) {
        return ur_err_oom(err);
    }
    c->vals = vals;
    if (c->kind == UR_Y_MAP) {
        char **keys = ur_grow(c->keys, &cap_keys, c->n, sizeof *keys, 8);
        if (!keys) {
            return ur_err_oom(err);
        }
        c->keys = keys;
    }
    c->cap = cap;
    return UR_OK;
}

int ur_config_yaml_push(ur_yval *list, ur_yval *val, ur_err *err)
{
    int rc = reserve(list, err);
    if (rc < 0) {
        ur_config_yaml_free(val);
        return rc;
    }
    list->vals[list->n++] = val;
    return UR_OK;
}

ur_yval *ur_config_yaml_get(const ur_yval *map, const char *key)
{
    if (!map || map->kind != UR_Y_MAP) {
        return NULL;
    }
    for (size_t i = 0; i < map->n; i++) {
        if (strcmp(map->keys[i], key) == 0) {
            return map->vals[i];
        }
    }
    return NULL;
}

int ur_config_yaml_set(ur_yval *map, const char *key, ur_yval *val, ur_err *err)
{
    char *k;
    int rc;
    for (size_t i = 0; i < map->n; i++) {
        if (strcmp(map->keys[i], key) == 0) {
            ur_config_yaml_free(map->vals[i]);
            map->vals[i] = val;
            return UR_OK;
        }
    }
    k = ur_strdup(key);
    if (!k) {
        ur_config_yaml_free(val);
        return ur_err_oom(err);
    }
    rc = reserve(map, err);
    if (rc < 0) {
        ur_free(k);
        ur_config_yaml_free(val);
        return rc;
    }
    map->keys[map->n] = k;
    map->vals[map->n] = val;
    map->n++;
    return UR_OK;
}

void ur_config_yaml_del(ur_yval *map, const char *key)
{
    for (size_t i = 0; i < map->n; i++) {
        if (strcmp(map->keys[i], key) == 0) {
            ur_free(map->keys[i]);
            ur_config_yaml_free(map->vals[i]);
            memmove(map->keys + i, map->keys + i + 1, (map->n - i - 1) * sizeof *map->keys);
            memmove(map->vals + i, map->vals + i + 1, (map->n - i - 1) * sizeof *map->vals);
            map->n--;
            return;
        }
    }
}

int ur_config_yaml_clone(ur_yval **out, const ur_yval *v, ur_err *err)
{
    ur_yval *c = yv_alloc(v->kind);
    int rc = UR_OK;
    if (!c) {
        return ur_err_oom(err);
    }
    c->b = v->b;
    c->i = v->i;
    c->f = v->f;
    if (v->s) {
        c->s = ur_strdup(v->s);
        if (!c->s) {
            rc = ur_err_oom(err);
            goto out;
        }
    }
    for (size_t i = 0; i < v->n; i++) {
        ur_yval *item = NULL;
        rc = ur_config_yaml_clone(&item, v->vals[i], err);
        if (rc < 0) {
            goto out;
        }
        if (v->kind == UR_Y_MAP) {
            rc = ur_config_yaml_set(c, v->keys[i], item, err);
        } else {
            rc = ur_config_yaml_push(c, item, err);
        }
        if (rc < 0) {
            goto out;
        }
    }
    *out = c;
    return UR_OK;
out:
    ur_config_yaml_free(c);
    return rc;
}

int ur_config_yaml_merge(ur_yval *dst, const ur_yval *src, ur_err *err)
{
    if (dst->kind != UR_Y_MAP || src->kind != UR_Y_MAP) {
        return ur_err_set(err, UR_EINTERNAL, "yaml merge of a non-map");
    }
    for (size_t i = 0; i < src->n; i++) {
        ur_yval *d = ur_config_yaml_get(dst, src->keys[i]);
        ur_yval *c = NULL;
        int rc;
        if (d && d->kind == UR_Y_MAP && src->vals[i]->kind == UR_Y_MAP) {
            rc = ur_config_yaml_merge(d, src->vals[i], err);
            if (rc < 0) {
                return rc;
            }
            continue;
        }
        rc = ur_config_yaml_clone(&c, src->vals[i], err);
        if (rc < 0) {
            return rc;
        }
        rc = ur_config_yaml_set(dst, src->keys[i], c, err);
        if (rc < 0) {
            return rc;
        }
    }
    return UR_OK;
}

static int is_number(const ur_yval *v)
{
    return v->kind == UR_Y_BOOL || v->kind == UR_Y_INT || v->kind == UR_Y_FLOAT;
}

static long double num_value(const ur_yval *v)
{
    if (v->kind == UR_Y_BOOL) {
        return v->b ? 1.0L : 0.0L;
    }
    if (v->kind == UR_Y_INT) {
        return (long double)v->i;
    }
    return (long double)v->f;
}

int ur_config_yaml_equal(const ur_yval *a, const ur_yval *b)
{
    if (is_number(a) && is_number(b)) {
        if (a->kind == UR_Y_INT && b->kind == UR_Y_INT) {
            return a->i == b->i;
        }
        return num_value(a) == num_value(b);
    }
    if (a->kind != b->kind) {
        return 0;
    }
    switch (a->kind) {
    case UR_Y_NULL:
        return 1;
    case UR_Y_STR:
        return strcmp(a->s, b->s) == 0;
    case UR_Y_LIST:
        if (a->n != b->n) {
            return 0;
        }
        for (size_t i = 0; i < a->n; i++) {
            if (!ur_config_yaml_equal(a->vals[i], b->vals[i])) {
                return 0;
            }
        }
        return 1;
    case UR_Y_MAP:
        if (a->n != b->n) {
            return 0;
        }
        for (size_t i = 0; i < a->n; i++) {
            const ur_yval *o = ur_config_yaml_get(b, a->keys[i]);
            if (!o || !ur_config_yaml_equal(a->vals[i], o)) {
                return 0;
            }
        }
        return 1;
    default:
        return 0;
    }
}

/* ---- scalar resolution ------------------------------------------------------------------ */

typedef struct {
    const char *p;
    const char *end;
} cur;

static int peek(const cur *c)
{
    return c->p < c->end ? (unsigned char)*c->p : -1;
}

static int eat(cur *c, int ch)
{
    if (peek(c) == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

static int eat_sign(cur *c)
{
    return eat(c, '-') || eat(c, '+');
}

static int is_in(int ch, const char *set)
{
    return ch >= 0 && ch != 0 && strchr(set, ch) != NULL;
}

/* One or more characters from set; returns how many. */
static size_t eat_run(cur *c, const char *set)
{
    size_t n = 0;
    while (is_in(peek(c), set)) {
        c->p++;
        n++;
    }
    return n;
}

#define DIG "0123456789"
#define DIG_ "0123456789_"

/* [eE][-+]?[0-9]+ (sign_required: [eE][-+][0-9]+) */
static int eat_exp(cur *c, int sign_required)
{
    cur save = *c;
    if (!eat(c, 'e') && !eat(c, 'E')) {
        return 0;
    }
    if (!eat_sign(c) && sign_required) {
        *c = save;
        return 0;
    }
    if (eat_run(c, DIG) == 0) {
        *c = save;
        return 0;
    }
    return 1;
}

/* (:[0-5]?[0-9])+ */
static int eat_sexagesimal(cur *c)
{
    int n = 0;
    for (;;) {
        cur save = *c;
        if (!eat(c, ':')) {
            break;
        }
        if (is_in(peek(c), "012345") && c->p + 1 < c->end && is_in((unsigned char)c->p[1], DIG)) {
            c->p += 2;
        } else if (is_in(peek(c), DIG)) {
            c->p++;
        } else {
            *c = save;
            break;
        }
        n++;
    }
    return n > 0;
}

static int match_float(const char *s, size_t len)
{
    const char *end = s + len;
    cur c;
    /* [-+]?[0-9][0-9_]*\.[0-9_]*([eE][-+]?[0-9]+)? | [-+]?[0-9][0-9_]*[eE][-+]?[0-9]+ */
    c = (cur){s, end};
    eat_sign(&c);
    if (is_in(peek(&c), DIG)) {
        c.p++;
        eat_run(&c, DIG_);
        if (eat(&c, '.')) {
            eat_run(&c, DIG_);
            eat_exp(&c, 0);
            if (c.p == end) {
                return 1;
            }
        } else if (eat_exp(&c, 0) && c.p == end) {
            return 1;
        }
    }
    /* \.[0-9_]+([eE][-+][0-9]+)? */
    c = (cur){s, end};
    if (eat(&c, '.') && eat_run(&c, DIG_) > 0) {
        eat_exp(&c, 1);
        if (c.p == end) {
            return 1;
        }
    }
    /* [-+]?[0-9][0-9_]*(:[0-5]?[0-9])+\.[0-9_]* */
    c = (cur){s, end};
    eat_sign(&c);
    if (is_in(peek(&c), DIG)) {
        c.p++;
        eat_run(&c, DIG_);
        if (eat_sexagesimal(&c) && eat(&c, '.')) {
            eat_run(&c, DIG_);
            if (c.p == end) {
                return 1;
            }
        }
    }
    /* [-+]?\.(inf|Inf|INF) | \.(nan|NaN|NAN) */
    c = (cur){s, end};
    eat_sign(&c);
    if ((size_t)(end - c.p) == 4 && (memcmp(c.p, ".inf", 4) == 0 || memcmp(c.p, ".Inf", 4) == 0 ||
                                     memcmp(c.p, ".INF", 4) == 0)) {
        return 1;
    }
    if (len == 4 &&
        (memcmp(s, ".nan", 4) == 0 || memcmp(s, ".NaN", 4) == 0 || memcmp(s, ".NAN", 4) == 0)) {
        return 1;
    }
    return 0;
}

static int match_int(const char *s, size_t len)
{
    const char *end = s + len;
    cur c;
    c = (cur){s, end};
    eat_sign(&c);
    if (eat(&c, '0')) {
        cur after0 = c;
        if (c.p == end) {
            return 1; /* 0 */
        }
        if (eat(&c, 'b') && eat_run(&c, "01_") > 0 && c.p == end) {
            return 1;
        }
        c = after0;
        if (eat(&c, 'x') && eat_run(&c, "0123456789abcdefABCDEF_") > 0 && c.p == end) {
            return 1;
        }
        c = after0;
        if (eat_run(&c, "01234567_") > 0 && c.p == end) {
            return 1;
        }
        return 0;
    }
    if (is_in(peek(&c), "123456789")) {
        c.p++;
        eat_run(&c, DIG_);
        if (c.p == end) {
            return 1;
        }
        if (eat_sexagesimal(&c) && c.p == end) {
            return 1;
        }
    }
    return 0;
}

static int str_in(const char *s, size_t len, const char *const *list)
{
    for (size_t i = 0; list[i]; i++) {
        if (strlen(list[i]) == len && memcmp(list[i], s, len) == 0) {
            return 1;
        }
    }
    return 0;
}

static const char *const k_true[] = {"yes",  "Yes", "YES", "true", "True",
                                     "TRUE", "on",  "On",  "ON",   NULL};
static const char *const k_false[] = {"no",    "No",  "NO",  "false", "False",
                                      "FALSE", "off", "Off", "OFF",   NULL};
static const char *const k_null[] = {"~", "null", "Null", "NULL", NULL};

/* Copy s without '_' into buf (lower-cased when lower); UR_EINVAL if too long. */
static int strip_underscores(char *buf, size_t cap, const char *s, size_t len, int lower,
                             ur_err *err)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        char ch = s[i];
        if (ch == '_') {
            continue;
        }
        if (o + 1 >= cap) {
            return ur_err_set(err, UR_EINVAL, "yaml: number too long: '%.*s'", (int)len, s);
        }
        if (lower && ch >= 'A' && ch <= 'Z') {
            ch = (char)(ch - 'A' + 'a');
        }
        buf[o++] = ch;
    }
    buf[o] = '\0';
    return UR_OK;
}

static int construct_int(int64_t *out, const char *s, size_t len, ur_err *err)
{
    char buf[128];
    const char *p = buf;
    int neg = 0;
    int base = 10;
    unsigned long long mag;
    char *endp;
    int rc = strip_underscores(buf, sizeof buf, s, len, 0, err);
    if (rc < 0) {
        return rc;
    }
    if (*p == '-' || *p == '+') {
        neg = *p == '-';
        p++;
    }
    if (strcmp(p, "0") == 0) {
        *out = 0;
        return UR_OK;
    }
    if (strchr(p, ':')) {
        /* sexagesimal: 1:30 = 90 */
        unsigned long long acc = 0;
        const char *q = p;
        while (*q) {
            unsigned long long d = strtoull(q, &endp, 10);
            if (endp == q || __builtin_mul_overflow(acc, 60ull, &acc) ||
                __builtin_add_overflow(acc, d, &acc)) {
                return ur_err_set(err, UR_EINVAL, "yaml: integer out of range: '%.*s'", (int)len,
                                  s);
            }
            q = *endp == ':' ? endp + 1 : endp;
        }
        mag = acc;
    } else {
        if (p[0] == '0' && p[1] == 'b') {
            base = 2;
            p += 2;
        } else if (p[0] == '0' && p[1] == 'x') {
            base = 16;
            p += 2;
        } else if (p[0] == '0') {
            base = 8;
        }
        if (*p == '\0') {
            return ur_err_set(err, UR_EINVAL, "yaml: bad integer '%.*s'", (int)len, s);
        }
        errno = 0;
        mag = strtoull(p, &endp, base);
        if (errno || *endp) {
            return ur_err_set(err, UR_EINVAL, "yaml: integer out of range: '%.*s'", (int)len, s);
        }
    }
    if ((!neg && mag > (unsigned long long)INT64_MAX) ||
        (neg && mag > (unsigned long long)INT64_MAX + 1ull)) {
        return ur_err_set(err, UR_EINVAL, "yaml: integer out of range: '%.*s'", (int)len, s);
    }
    *out = neg ? (int64_t)(0 - mag) : (int64_t)mag;
    return UR_OK;
}

static int construct_float(double *out, const char *s, size_t len, ur_err *err)
{
    char buf[128];
    const char *p = buf;
    double sign = 1.0;
    int rc = strip_underscores(buf, sizeof buf, s, len, 1, err);
    if (rc < 0) {
        return rc;
    }
    if (*p == '-' || *p == '+') {
        sign = *p == '-' ? -1.0 : 1.0;
        p++;
    }
    if (strcmp(p, ".inf") == 0) {
        *out = sign * (double)INFINITY;
    } else if (strcmp(p, ".nan") == 0) {
        *out = (double)NAN;
    } else if (strchr(p, ':')) {
        /* sexagesimal float: 1:30.5 = 90.5 */
        double acc = 0.0;
        const char *q = p;
        char *endp;
        while (*q) {
            double d = strtod(q, &endp);
            if (endp == q) {
                return ur_err_set(err, UR_EINVAL, "yaml: bad float '%.*s'", (int)len, s);
            }
            acc = acc * 60.0 + d;
            q = *endp == ':' ? endp + 1 : endp;
        }
        *out = sign * acc;
    } else {
        char *endp;
        double d = strtod(p, &endp);
        if (endp == p || *endp) {
            return ur_err_set(err, UR_EINVAL, "yaml: bad float '%.*s'", (int)len, s);
        }
        *out = sign * d;
    }
    return UR_OK;
}

int ur_config_yaml_resolve(ur_yval **out, const char *s, size_t len, ur_err *err)
{
    ur_yval *v = NULL;
    int rc;
    if (len == 0 || str_in(s, len, k_null)) {
        v = yv_alloc(UR_Y_NULL);
    } else if (str_in(s, len, k_true) || str_in(s, len, k_false)) {
        v = yv_alloc(UR_Y_BOOL);
        if (v) {
            v->b = str_in(s, len, k_true);
        }
    } else if (match_int(s, len)) {
        int64_t i = 0;
        rc = construct_int(&i, s, len, err);
        if (rc < 0) {
            return rc;
        }
        v = yv_alloc(UR_Y_INT);
        if (v) {
            v->i = i;
        }
    } else if (match_float(s, len)) {
        double f = 0.0;
        rc = construct_float(&f, s, len, err);
        if (rc < 0) {
            return rc;
        }
        v = yv_alloc(UR_Y_FLOAT);
        if (v) {
            v->f = f;
        }
    } else {
        v = yv_alloc(UR_Y_STR);
        if (v) {
            v->s = ur_strndup(s, len);
            if (!v->s) {
                ur_free(v);
                v = NULL;
            }
        }
    }
    if (!v) {
        return ur_err_oom(err);
    }
    *out = v;
    return UR_OK;
}

/* A scalar event -> value, honouring explicit standard tags. */
static int scalar_value(ur_yval **out, const yaml_event_t *ev, const char *name, ur_err *err)
{
    const char *text = (const char *)ev->data.scalar.value;
    size_t len = ev->data.scalar.length;
    const char *tag = (const char *)ev->data.scalar.tag;
    ur_yval *v = NULL;
    int rc;
    if (tag && strcmp(tag, "!") != 0) {
        static const char pfx[] = "tag:yaml.org,2002:";
        const char *t = tag;
        if (strncmp(tag, pfx, sizeof pfx - 1) == 0) {
            t = tag + sizeof pfx - 1;
        }
        if (strcmp(t, "str") == 0) {
            goto as_str;
        }
        if (strcmp(t, "int") == 0 || strcmp(t, "float") == 0 || strcmp(t, "bool") == 0 ||
            strcmp(t, "null") == 0) {
            rc = ur_config_yaml_resolve(&v, text, len, err);
            if (rc < 0) {
                return rc;
            }
            if (strcmp(t, "float") == 0 && v->kind == UR_Y_INT) {
                v->kind = UR_Y_FLOAT;
                v->f = (double)v->i;
            }
            if (strcmp(t, ur_config_yaml_kind_name(v->kind)) != 0) {
                ur_config_yaml_free(v);
                return ur_err_set(err, UR_EINVAL, "%s:%zu: '%.*s' is not a valid !!%s", name,
                                  ev->start_mark.line + 1, (int)len, text, t);
            }
            *out = v;
            return UR_OK;
        }
        return ur_err_set(err, UR_EINVAL, "%s:%zu: unsupported YAML tag '%s'", name,
                          ev->start_mark.line + 1, tag);
    }
    if (ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && !tag) {
        rc = ur_config_yaml_resolve(out, text, len, err);
        if (rc < 0) {
            return ur_err_wrap(err, "%s:%zu", name, ev->start_mark.line + 1);
        }
        return rc;
    }
as_str:
    rc = ur_config_yaml_new(&v, UR_Y_STR, err);
    if (rc < 0) {
        return rc;
    }
    v->s = ur_strndup(text, len);
    if (!v->s) {
        ur_free(v);
        return ur_err_oom(err);
    }
    *out = v;
    return UR_OK;
}

typedef struct {
    ur_yval *node;
    char *pending_key; /* map: a key read, its value not yet */
} frame;

/* Attach a finished value to the open container (or make it the root). Takes ownership. */
static int attach(frame *st, size_t depth, ur_yval **root, ur_yval *v, const yaml_event_t *ev,
                  const char *name, ur_err *err)
{
    frame *top;
    int rc;
    if (depth == 0) {
        *root = v;
        return UR_OK;
    }
    top = &st[depth - 1];
    if (top->node->kind == UR_Y_LIST) {
        return ur_config_yaml_push(top->node, v, err);
    }
    if (!top->pending_key) {
        /* v is a key: only scalars are allowed as keys */
        if (v->kind == UR_Y_LIST || v->kind == UR_Y_MAP) {
            ur_config_yaml_free(v);
            return ur_err_set(err, UR_EINVAL, "%s:%zu: a map key must be a scalar", name,
                              ev->start_mark.line + 1);
        }
        ur_config_yaml_free(v);
        if (ev->type != YAML_SCALAR_EVENT) {
            return ur_err_set(err, UR_EINVAL, "%s:%zu: bad map key", name,
                              ev->start_mark.line + 1);
        }
        /* Keys keep their text: config keys are identifiers. */
        top->pending_key = ur_strndup((const char *)ev->data.scalar.value, ev->data.scalar.length);
        if (!top->pending_key) {
            return ur_err_oom(err);
        }
        if (ur_config_yaml_get(top->node, top->pending_key)) {
            return ur_err_set(err, UR_EINVAL, "%s:%zu: duplicate key '%s'", name,
                              ev->start_mark.line + 1, top->pending_key);
        }
        return UR_OK;
    }
    rc = ur_config_yaml_set(top->node, top->pending_key, v, err);
    ur_free(top->pending_key);
    top->pending_key = NULL;
    return rc;
}

int ur_config_yaml_parse(ur_yval **out, const char *text, size_t len, const char *name,
                         ur_err *err)
{
    yaml_parser_t parser;
    yaml_event_t ev;
    frame st[MAX_DEPTH];
    size_t depth = 0;
    ur_yval *root = NULL;
    int docs = 0;
    int done = 0;
    int rc = UR_OK;
    if (!name) {
        name = "yaml";
    }
    if (!yaml_parser_initialize(&parser)) {
        return ur_err_oom(err);
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    while (!done) {
        ur_yval *v = NULL;
        if (!yaml_parser_parse(&parser, &ev)) {
            rc = ur_err_set(err, UR_EINVAL, "%s:%zu:%zu: YAML error: %s%s%s", name,
                            parser.problem_mark.line + 1, parser.problem_mark.column + 1,
                            parser.problem ? parser.problem : "bad YAML",
                            parser.context ? " " : "", parser.context ? parser.context : "");
            goto out;
        }
        switch (ev.type) {
        case YAML_STREAM_END_EVENT:
            done = 1;
            break;
        case YAML_DOCUMENT_START_EVENT:
            if (++docs > 1) {
                rc = ur_err_set(err, UR_EINVAL, "%s:%zu: expected a single YAML document", name,
                                ev.start_mark.line + 1);
            }
            break;
        case YAML_ALIAS_EVENT:
            rc = ur_err_set(err, UR_EINVAL, "%s:%zu: YAML aliases are not supported", name,
                            ev.start_mark.line + 1);
            break;
        case YAML_SCALAR_EVENT:
            if (depth > 0 && st[depth - 1].node->kind == UR_Y_MAP && !st[depth - 1].pending_key) {
                rc = ur_config_yaml_new(&v, UR_Y_NULL, err); /* placeholder; key is the text */
            } else {
                rc = scalar_value(&v, &ev, name, err);
            }
            if (rc == UR_OK) {
                rc = attach(st, depth, &root, v, &ev, name, err);
            }
            break;
        case YAML_SEQUENCE_START_EVENT:
        case YAML_MAPPING_START_EVENT:
            if (depth > 0 && st[depth - 1].node->kind == UR_Y_MAP && !st[depth - 1].pending_key) {
                rc = ur_err_set(err, UR_EINVAL, "%s:%zu: a map key must be a scalar", name,
                                ev.start_mark.line + 1);
                break;
            }
            if (depth == MAX_DEPTH) {
                rc = ur_err_set(err, UR_EINVAL, "%s:%zu: YAML nested deeper than %d", name,
                                ev.start_mark.line + 1, MAX_DEPTH);
                break;
            }
            rc = ur_config_yaml_new(
                &v, ev.type == YAML_SEQUENCE_START_EVENT ? UR_Y_LIST : UR_Y_MAP, err);
            if (rc == UR_OK) {
                st[depth].node = v;
                st[depth].pending_key = NULL;
                depth++;
            }
            break;
        case YAML_SEQUENCE_END_EVENT:
        case YAML_MAPPING_END_EVENT:
            depth--;
            v = st[depth].node;
            ur_free(st[depth].pending_key);
            rc = attach(st, depth, &root, v, &ev, name, err);
            break;
        default:
            break;
        }
        yaml_event_delete(&ev);
        if (rc < 0) {
            goto out;
        }
    }
    if (!root) {
        rc = ur_config_yaml_new(&root, UR_Y_NULL, err);
        if (rc < 0) {
            goto out;
        }
    }
    *out = root;
    root = NULL;
out:
    while (depth > 0) {
        depth--;
        ur_free(st[depth].pending_key);
        ur_config_yaml_free(st[depth].node);
    }
    ur_config_yaml_free(root);
    yaml_parser_delete(&parser);
    return rc;
}

/* ---- JSON ------------------------------------------------------------------------------- */

int ur_config_yaml_emit_json(ur_buf *b, const ur_yval *v, ur_err *err)
{
    int rc = UR_OK;
    switch (v->kind) {
    case UR_Y_NULL:
        return ur_buf_append_str(b, "null", err);
    case UR_Y_BOOL:
        return ur_buf_append_str(b, v->b ? "true" : "false", err);
    case UR_Y_INT:
        return ur_buf_printf(b, err, "%lld", (long long)v->i);
    case UR_Y_FLOAT:
        if (isnan(v->f)) {
            return ur_buf_append_str(b, "NaN", err);
        }
        if (isinf(v->f)) {
            return ur_buf_append_str(b, v->f > 0 ? "Infinity" : "-Infinity", err);
        } else {
            char tmp[64];
            int k = snprintf(tmp, sizeof tmp, "%.17g", v->f);
            if (k > 0 && (size_t)k + 3 <= sizeof tmp && !strpbrk(tmp, ".eE")) {
                memcpy(tmp + k, ".0", 3); /* so Python reads it back as a float */
            }
            return ur_buf_append_str(b, tmp, err);
        }
    case UR_Y_STR:
        return ur_json_put_string(b, v->s, err);
    case UR_Y_LIST:
    case UR_Y_MAP:
        rc = ur_buf_append_byte(b, v->kind == UR_Y_LIST ? '[' : '{', err);
        for (size_t i = 0; rc == UR_OK && i < v->n; i++) {
            if (i > 0) {
                rc = ur_buf_append_str(b, ", ", err);
            }
            if (rc == UR_OK && v->kind == UR_Y_MAP) {
                rc = ur_json_put_string(b, v->keys[i], err);
                if (rc == UR_OK) {
                    rc = ur_buf_append_str(b, ": ", err);
                }
            }
            if (rc == UR_OK) {
                rc = ur_config_yaml_emit_json(b, v->vals[i], err);
            }
        }
        if (rc == UR_OK) {
            rc = ur_buf_append_byte(b, v->kind == UR_Y_LIST ? ']' : '}', err);
        }
        return rc;
    }
    return ur_err_set(err, UR_EINTERNAL, "yaml: bad kind");
}
