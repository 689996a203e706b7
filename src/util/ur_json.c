/* cJSON allocates through ur_malloc. A thread-local flag records whether an allocation failed
 * during the current parse, the one way to tell out-of-memory from a syntax error: cJSON
 * returns NULL for both, and "invalid JSON" for a valid file on a full machine would send the
 * user looking for damage that is not there. */
#include "unroll/json.h"

#include "unroll/alloc.h"

#include <cjson/cJSON.h>
#include <pthread.h>

static _Thread_local int alloc_failed;
static pthread_once_t hooks_once = PTHREAD_ONCE_INIT;

static void *hook_malloc(size_t n)
{
    void *p = ur_malloc(n);
    if (p == NULL) {
        alloc_failed = 1;
    }
    return p;
}

static void hook_free(void *p)
{
    ur_free(p);
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
