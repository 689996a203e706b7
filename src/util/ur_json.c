/* cJSON allocates through ur_malloc. A thread-local flag records whether an allocation failed
 * during the current parse, the one way to tell out-of-memory from a syntax error: cJSON
 * returns NULL for both, and "invalid JSON" for a valid file on a full machine would send the
 * user looking for damage that is not there. */
#include "unroll/json.h"

#include "unroll/alloc.h"
#include "unroll/buf.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <string.h>

static _Thread_local int alloc_failed;
static _Thread_local ur_json_scratch *scratch; /* this thread's region in use, or NULL */
static pthread_once_t hooks_once = PTHREAD_ONCE_INIT;

#define SCRATCH_ALIGN 16

static void *hook_malloc(size_t n)
{
    ur_json_scratch *s = scratch;
    void *p;
    if (s != NULL) {
        size_t at = (s->used + SCRATCH_ALIGN - 1) & ~(size_t)(SCRATCH_ALIGN - 1);
        if (at <= s->cap && n <= s->cap - at) {
            s->used = at + n;
            return s->base + at;
        }
    }
    p = ur_malloc(n);
    if (p == NULL) {
        alloc_failed = 1;
    }
    return p;
}

static void hook_free(void *p)
{
    ur_json_scratch *s = scratch;
    if (s != NULL && (unsigned char *)p >= s->base && (unsigned char *)p < s->base + s->cap) {
        return; /* the region's: gone at its reset */
    }
    ur_free(p);
}

void ur_json_scratch_init(ur_json_scratch *s, size_t cap)
{
    s->used = 0;
    s->base = ur_alloc_failures_armed() ? NULL : ur_malloc(cap);
    s->cap = s->base != NULL ? cap : 0;
}

void ur_json_scratch_use(ur_json_scratch *s)
{
    scratch = s != NULL && s->base != NULL ? s : NULL;
}

void ur_json_scratch_reset(ur_json_scratch *s)
{
    s->used = 0;
}

void ur_json_scratch_dispose(ur_json_scratch *s)
{
    if (scratch == s) {
        scratch = NULL;
    }
    ur_free(s->base);
    s->base = NULL;
    s->used = s->cap = 0;
}

/* cJSON_InitHooks writes globals: once, before any other thread can use cJSON. */
static void install_hooks(void)
{
    cJSON_Hooks hooks = {hook_malloc, hook_free};
    cJSON_InitHooks(&hooks);
}

void ur_json_init(void)
{
    pthread_once(&hooks_once, install_hooks);
}

static int is_space(char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

int ur_json_parse(struct cJSON **out, const char *text, size_t len, ur_err *err)
{
    const char *end = NULL;
    cJSON *root;
    size_t off;

    ur_json_init();
    alloc_failed = 0;
    root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (root == NULL) {
        if (alloc_failed) {
            return ur_err_oom(err);
        }
        off = (end != NULL && end >= text) ? (size_t)(end - text) : 0;
        return ur_err_set_at(err, UR_ECORRUPT, off, "invalid JSON near byte %zu", off);
    }
    off = end != NULL ? (size_t)(end - text) : len;
    while (off < len && is_space(text[off])) {
        off++;
    }
    if (off < len) {
        cJSON_Delete(root);
        return ur_err_set_at(err, UR_ECORRUPT, off, "trailing bytes after JSON at %zu", off);
    }
    *out = root;
    return UR_OK;
}

/* ---- members of a large object, one at a time ---- */

static size_t skip_space(const char *t, size_t i, size_t len)
{
    while (i < len && is_space(t[i])) {
        i++;
    }
    return i;
}

/* The end of the string starting at t[i] == '"' (past its closing quote), or 0. */
static size_t skip_string(const char *t, size_t i, size_t len)
{
    for (i++; i < len; i++) {
        if (t[i] == '\\') {
            i++;
        } else if (t[i] == '"') {
            return i + 1;
        }
    }
    return 0;
}

/* The end of the value starting at t[i], found without checking it (the caller parses it);
 * 0 when it is cut short. */
static size_t skip_value(const char *t, size_t i, size_t len)
{
    size_t depth = 0;
    if (i >= len) {
        return 0;
    }
    if (t[i] != '"' && t[i] != '{' && t[i] != '[') {
        size_t s = i;
        while (i < len && !is_space(t[i]) && t[i] != ',' && t[i] != '}' && t[i] != ']') {
            i++;
        }
        return i > s ? i : 0;
    }
    while (i < len) {
        char c = t[i];
        if (c == '"') {
            i = skip_string(t, i, len);
            if (i == 0) {
                return 0;
            }
        } else {
            depth += (c == '{' || c == '[') ? 1 : 0;
            depth -= (c == '}' || c == ']') ? 1 : 0;
            i++;
        }
        if (depth == 0) {
            return i;
        }
    }
    return 0;
}

/* The key t[s..e) (quotes included) as a C string in *key. */
static int member_key(ur_buf *key, const char *t, size_t s, size_t e, ur_err *err)
{
    int plain = 1;
    for (size_t i = s + 1; i + 1 < e; i++) {
        plain &= t[i] != '\\' && (unsigned char)t[i] >= 0x20;
    }
    ur_buf_reset(key);
    if (plain) { /* the common case, without cJSON's allocations */
        int rc = ur_buf_append(key, t + s + 1, e - s - 2, err);
        return rc == UR_OK ? ur_buf_append_byte(key, 0, err) : rc;
    }
    cJSON *k = NULL;
    int rc = ur_json_parse(&k, t + s, e - s, err);
    if (rc == UR_OK && k != NULL && cJSON_IsString(k) && k->valuestring != NULL) {
        rc = ur_buf_append(key, k->valuestring, strlen(k->valuestring) + 1, err);
    } else if (rc == UR_OK) {
        rc = ur_err_set_at(err, UR_ECORRUPT, s, "invalid JSON near byte %zu", s);
    }
    cJSON_Delete(k);
    return rc;
}

int ur_json_each_member(const char *text, size_t len, ur_json_member_fn fn, void *ctx, ur_err *err)
{
    ur_buf key;
    size_t i = skip_space(text, 0, len);
    int rc = UR_OK, closed = 0;

    if (i >= len || text[i] != '{') {
        return ur_err_set_at(err, UR_ECORRUPT, i, "not a JSON object at byte %zu", i);
    }
    ur_buf_init(&key, 0);
    i = skip_space(text, i + 1, len);
    if (i < len && text[i] == '}') {
        i++;
        closed = 1;
    } else {
        for (;;) {
            size_t ke, vs, ve;
            if (i >= len || text[i] != '"' || (ke = skip_string(text, i, len)) == 0) {
                break;
            }
            rc = member_key(&key, text, i, ke, err);
            vs = skip_space(text, ke, len);
            if (rc < 0 || vs >= len || text[vs] != ':') {
                i = vs;
                break;
            }
            vs = skip_space(text, vs + 1, len);
            ve = skip_value(text, vs, len);
            if (ve == 0) {
                i = vs;
                break;
            }
            rc = fn(ctx, (const char *)key.data, text + vs, ve - vs, err);
            if (rc < 0) {
                break;
            }
            i = skip_space(text, ve, len);
            if (i < len && text[i] == ',') {
                i = skip_space(text, i + 1, len);
                continue;
            }
            if (i < len && text[i] == '}') {
                i++;
                closed = 1;
            }
            break;
        }
    }
    ur_buf_dispose(&key);
    if (rc < 0) {
        return rc;
    }
    if (!closed || skip_space(text, i, len) < len) {
        return ur_err_set_at(err, UR_ECORRUPT, i, "invalid JSON near byte %zu", i);
    }
    return UR_OK;
}

int ur_json_each_element(const char *text, size_t len, ur_json_element_fn fn, void *ctx,
                         ur_err *err)
{
    size_t i = skip_space(text, 0, len), index = 0;
    int closed = 0;

    if (i >= len || text[i] != '[') {
        return ur_err_set_at(err, UR_ECORRUPT, i, "not a JSON array at byte %zu", i);
    }
    i = skip_space(text, i + 1, len);
    if (i < len && text[i] == ']') {
        i++;
        closed = 1;
    } else {
        for (;;) {
            size_t ve = skip_value(text, i, len);
            if (ve == 0) {
                break;
            }
            int rc = fn(ctx, index++, text + i, ve - i, err);
            if (rc < 0) {
                return rc;
            }
            i = skip_space(text, ve, len);
            if (i < len && text[i] == ',') {
                i = skip_space(text, i + 1, len);
                continue;
            }
            if (i < len && text[i] == ']') {
                i++;
                closed = 1;
            }
            break;
        }
    }
    if (!closed || skip_space(text, i, len) < len) {
        return ur_err_set_at(err, UR_ECORRUPT, i, "invalid JSON near byte %zu", i);
    }
    return UR_OK;
}

int ur_json_put_string(ur_buf *b, const char *s, ur_err *err)
{
    int rc = ur_buf_append_byte(b, '"', err);
    for (const unsigned char *p = (const unsigned char *)s; rc == UR_OK && *p != '\0'; p++) {
        if (*p == '"' || *p == '\\') {
            rc = ur_buf_printf(b, err, "\\%c", *p);
        } else if (*p < 0x20) {
            rc = ur_buf_printf(b, err, "\\u%04x", *p);
        } else {
            rc = ur_buf_append_byte(b, *p, err);
        }
    }
    return rc == UR_OK ? ur_buf_append_byte(b, '"', err) : rc;
}
