/* A safetensors file's layout: the order of its tensors, their offsets and the header bytes,
 * as the `safetensors` library writes them (unroll/safetensors.h), so that the same tensors
 * give the same file. */
#include "unroll/safetensors.h"

#include "unroll/alloc.h"
#include "unroll/ckd.h"

#include <stdlib.h>
#include <string.h>

/* Each dtype's safetensors name and its place in the library's Dtype enum: files are laid out
 * by that place, the highest first, then by name. */
static const struct {
    ur_dtype dt;
    const char *name;
    int rank;
} dtypes[] = {
    {UR_DT_BOOL, "BOOL", 0},
    {UR_DT_UINT8, "U8", 4},
    {UR_DT_INT8, "I8", 5},
    {UR_DT_FLOAT8_E5M2, "F8_E5M2", 6},
    {UR_DT_FLOAT8_E4M3FN, "F8_E4M3", 7},
    {UR_DT_FLOAT8_E8M0FNU, "F8_E8M0", 8},
    {UR_DT_INT16, "I16", 11},
    {UR_DT_UINT16, "U16", 12},
    {UR_DT_FLOAT16, "F16", 13},
    {UR_DT_BFLOAT16, "BF16", 14},
    {UR_DT_INT32, "I32", 15},
    {UR_DT_UINT32, "U32", 16},
    {UR_DT_FLOAT32, "F32", 17},
    {UR_DT_COMPLEX64, "C64", 18},
    {UR_DT_FLOAT64, "F64", 19},
    {UR_DT_INT64, "I64", 20},
    {UR_DT_UINT64, "U64", 21},
};

const char *ur_st_dtype_name(ur_dtype dt)
{
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++) {
        if (dtypes[i].dt == dt) {
            return dtypes[i].name;
        }
    }
    return NULL;
}

ur_dtype ur_st_dtype_from_name(const char *name)
{
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++) {
        if (strcmp(dtypes[i].name, name) == 0) {
            return dtypes[i].dt;
        }
    }
    return UR_DT_INVALID;
}

static int dtype_rank(ur_dtype dt)
{
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++) {
        if (dtypes[i].dt == dt) {
            return dtypes[i].rank;
        }
    }
    return -1;
}

typedef struct {
    const ur_st_decl *d;
    size_t at; /* index in the caller's order */
} slot;

static int by_dtype_then_name(const void *a, const void *b)
{
    const slot *x = a, *y = b;
    int rx = dtype_rank(x->d->dtype), ry = dtype_rank(y->d->dtype);
    if (rx != ry) {
        return rx > ry ? -1 : 1;
    }
    return strcmp(x->d->name, y->d->name);
}

/* JSON string as serde_json writes it: ", \ and control characters escaped. */
static int put_string(ur_buf *b, const char *s, ur_err *err)
{
    int rc = ur_buf_append_byte(b, '"', err);
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0' && rc == UR_OK; p++) {
        static const char hex[] = "0123456789abcdef";
        if (*p == '"' || *p == '\\') {
            char e[2] = {'\\', (char)*p};
            rc = ur_buf_append(b, e, 2, err);
        } else if (*p < 0x20) {
            const char *named = *p == '\n'   ? "\\n"
                                : *p == '\t' ? "\\t"
                                : *p == '\r' ? "\\r"
                                : *p == '\b' ? "\\b"
                                : *p == '\f' ? "\\f"
                                             : NULL;
            if (named != NULL) {
                rc = ur_buf_append(b, named, 2, err);
            } else {
                char e[6] = {'\\', 'u', '0', '0', hex[*p >> 4], hex[*p & 15]};
                rc = ur_buf_append(b, e, 6, err);
            }
        } else {
            rc = ur_buf_append_byte(b, *p, err);
        }
    }
    return rc == UR_OK ? ur_buf_append_byte(b, '"', err) : rc;
}

/* The tensor's entry: "name":{"dtype":"F32","shape":[2,3],"data_offsets":[a,b]} */
static int put_entry(ur_buf *b, const ur_st_decl *d, uint64_t begin, uint64_t end, ur_err *err)
{
    int rc = ur_buf_append_byte(b, ',', err);
    if (rc == UR_OK) {
        rc = put_string(b, d->name, err);
    }
    if (rc == UR_OK) {
        rc = ur_buf_printf(b, err, ":{\"dtype\":\"%s\",\"shape\":[", ur_st_dtype_name(d->dtype));
    }
    for (int i = 0; i < d->rank && rc == UR_OK; i++) {
        rc = ur_buf_printf(b, err, "%s%llu", i ? "," : "", (unsigned long long)d->shape[i]);
    }
    if (rc == UR_OK) {
        rc = ur_buf_printf(b, err, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)begin,
                           (unsigned long long)end);
    }
    return rc;
}

static int check_decl(const ur_st_decl *d, uint64_t *nbytes, ur_err *err)
{
    uint64_t n = ur_dtype_size(d->dtype);
    if (d->name == NULL || d->name[0] == '\0') {
        return ur_err_set(err, UR_EINVAL, "safetensors: a tensor without a name");
    }
    if (ur_st_dtype_name(d->dtype) == NULL) {
        return ur_err_set(err, UR_EINVAL,
                          "safetensors: tensor '%s': dtype %s has no safetensors "
                          "name",
                          d->name, ur_dtype_name(d->dtype));
    }
    if (d->rank < 0 || d->rank > UR_MAX_RANK) {
        return ur_err_set(err, UR_EINVAL, "safetensors: tensor '%s': rank %d", d->name, d->rank);
    }
    for (int i = 0; i < d->rank; i++) {
        if (ur_ckd_mul64(&n, n, d->shape[i])) {
            return ur_err_set(err, UR_EINVAL, "safetensors: tensor '%s': size overflows", d->name);
        }
    }
    *nbytes = n;
    return UR_OK;
}

int ur_st_layout_build(ur_st_layout *out, const ur_st_decl *decls, size_t n, ur_err *err)
{
    slot *order = ur_calloc(n ? n : 1, sizeof *order);
    uint64_t data = 0, hlen;
    int rc = UR_OK;

    memset(out, 0, sizeof *out);
    ur_buf_init(&out->header, 0);
    out->offset = ur_calloc(n ? n : 1, sizeof *out->offset);
    out->nbytes = ur_calloc(n ? n : 1, sizeof *out->nbytes);
    if (order == NULL || out->offset == NULL || out->nbytes == NULL) {
        rc = ur_err_oom(err);
    }
    for (size_t i = 0; i < n && rc == UR_OK; i++) {
        order[i].d = &decls[i];
        order[i].at = i;
        rc = check_decl(&decls[i], &out->nbytes[i], err);
    }
    if (rc == UR_OK && n > 1) {
        qsort(order, n, sizeof *order, by_dtype_then_name);
        for (size_t i = 1; i < n && rc == UR_OK; i++) {
            if (strcmp(order[i - 1].d->name, order[i].d->name) == 0) {
                rc = ur_err_set(err, UR_EINVAL, "safetensors: tensor '%s' declared twice",
                                order[i].d->name);
            }
        }
    }
    /* the 8 size bytes first, filled in once the JSON's length is known */
    if (rc == UR_OK) {
        rc = ur_buf_append(&out->header, "\0\0\0\0\0\0\0\0{\"__metadata__\":{\"format\":\"pt\"}",
                           8 + 31, err);
    }
    for (size_t i = 0; i < n && rc == UR_OK; i++) {
        uint64_t end;
        if (ur_ckd_add64(&end, data, out->nbytes[order[i].at])) {
            rc = ur_err_set(err, UR_EINVAL, "safetensors: the tensors' sizes overflow");
            break;
        }
        rc = put_entry(&out->header, order[i].d, data, end, err);
        out->offset[order[i].at] = data; /* relative until the header's size is known */
        data = end;
    }
    if (rc == UR_OK) {
        rc = ur_buf_append_byte(&out->header, '}', err);
    }
    while (rc == UR_OK && (out->header.len - 8) % 8 != 0) {
        rc = ur_buf_append_byte(&out->header, ' ', err);
    }
    if (rc == UR_OK) {
        hlen = out->header.len - 8;
        for (int i = 0; i < 8; i++) {
            out->header.data[i] = (uint8_t)(hlen >> (8 * i));
        }
        for (size_t i = 0; i < n; i++) {
            out->offset[i] += out->header.len;
        }
        out->n = n;
        if (ur_ckd_add64(&out->file_size, out->header.len, data)) {
            rc = ur_err_set(err, UR_EINVAL, "safetensors: the file's size overflows");
        }
    }
    ur_free(order);
    if (rc < 0) {
        ur_st_layout_dispose(out);
    }
    return rc;
}

void ur_st_layout_dispose(ur_st_layout *l)
{
    if (l != NULL) {
        ur_buf_dispose(&l->header);
        ur_free(l->offset);
        ur_free(l->nbytes);
        memset(l, 0, sizeof *l);
    }
}
