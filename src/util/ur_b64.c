/* Base64, padded, standard or URL-safe alphabet (see include/unroll/b64.h). */
#include "unroll/b64.h"

#include <stdint.h>
#include <string.h>

static const char alphabets[2][65] = {
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_",
};

int ur_b64_encode(ur_buf *out, const void *p, size_t n, ur_b64_alphabet alphabet, ur_err *err)
{
    const char *abc = alphabets[alphabet == UR_B64_URL];
    const uint8_t *s = p;
    int rc = UR_OK;
    for (size_t i = 0; rc == UR_OK && i < n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16;
        size_t left = n - i;
        char q[4];
        if (left > 1) {
            v |= (uint32_t)s[i + 1] << 8;
        }
        if (left > 2) {
            v |= s[i + 2];
        }
        q[0] = abc[(v >> 18) & 63];
        q[1] = abc[(v >> 12) & 63];
        q[2] = left > 1 ? abc[(v >> 6) & 63] : '=';
        q[3] = left > 2 ? abc[v & 63] : '=';
        rc = ur_buf_append(out, q, 4, err);
    }
    return rc;
}

static int value_of(const char *abc, char c)
{
    const char *p = c != '\0' ? strchr(abc, c) : NULL;
    return p != NULL ? (int)(p - abc) : -1;
}

int ur_b64_decode(ur_buf *out, const char *s, size_t n, ur_b64_alphabet alphabet, ur_err *err)
{
    const char *abc = alphabets[alphabet == UR_B64_URL];
    if (n % 4 != 0) {
        return ur_err_set(err, UR_ECORRUPT, "base64: length %zu is not a multiple of 4", n);
    }
    for (size_t i = 0; i < n; i += 4) {
        int v[4];
        int pad = 0;
        uint32_t w;
        uint8_t bytes[3];
        int rc;
        for (int j = 0; j < 4; j++) {
            char c = s[i + (size_t)j];
            if (c == '=' && i + 4 == n && j >= 2) {
                v[j] = 0;
                pad++;
                continue;
            }
            if (pad > 0 || (v[j] = value_of(abc, c)) < 0) {
                return ur_err_set_at(err, UR_ECORRUPT, i + (size_t)j,
                                     "base64: invalid character at %zu", i + (size_t)j);
            }
        }
        w = ((uint32_t)v[0] << 18) | ((uint32_t)v[1] << 12) | ((uint32_t)v[2] << 6) |
            (uint32_t)v[3];
        bytes[0] = (uint8_t)(w >> 16);
        bytes[1] = (uint8_t)(w >> 8);
        bytes[2] = (uint8_t)w;
        rc = ur_buf_append(out, bytes, (size_t)(3 - pad), err);
        if (rc < 0) {
            return rc;
        }
    }
    return UR_OK;
}
