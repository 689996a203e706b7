/* The families a model can be exported as (one file each, src/hf/hf_family_<name>.c, listed
 * here) and what their tables share: name patterns with a layer index. */
#include "hf_impl.h"

#include <stdio.h>
#include <string.h>

static const hf_family *const families[] = {
    &hf_family_llama,
    &hf_family_mistral,
};

const hf_family *hf_family_for(const ur_settings *s)
{
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) {
        if (families[i]->applies(s)) {
            return families[i];
        }
    }
    return NULL;
}

int hf_match(const char *pat, const char *path, int64_t *layer)
{
    *layer = -1;
    while (*pat != '\0') {
        if (strncmp(pat, "{i}", 3) == 0) {
            int64_t v = 0;
            const char *start = path;
            while (*path >= '0' && *path <= '9' && path - start < 9) {
                v = v * 10 + (*path++ - '0');
            }
            /* one or more digits, no leading zero but for 0 itself */
            if (path == start || (start[0] == '0' && path - start > 1)) {
                return 0;
            }
            *layer = v;
            pat += 3;
            continue;
        }
        if (*pat++ != *path++) {
            return 0;
        }
    }
    return *path == '\0';
}

int hf_expand(const char *pat, int64_t layer, char *out, size_t n)
{
    size_t k = 0;
    while (*pat != '\0') {
        if (strncmp(pat, "{i}", 3) == 0) {
            int w = snprintf(out + k, n - k, "%lld", (long long)layer);
            if (w < 0 || (size_t)w >= n - k) {
                return 0;
            }
            k += (size_t)w;
            pat += 3;
            continue;
        }
        if (k + 1 >= n) {
            return 0;
        }
        out[k++] = *pat++;
    }
    out[k] = '\0';
    return 1;
}

const uint64_t *hf_model_shape(const hf_model *m, const char *path, int *rank)
{
    size_t at;
    if (ur_strmap_get(&m->by_path, path, strlen(path), &at) != 1) {
        return NULL;
    }
    *rank = m->ranks[at];
    return m->shapes[at];
}
