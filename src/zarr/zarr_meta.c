/* Zarr array metadata: parse a zarr3 `zarr.json` or a zarr2 `.zarray` into ur_zarr_meta,
 * and emit it back as TensorStore writes it (compact JSON, keys sorted). Pure: no I/O.
 *
 * zarr3 (https://zarr-specs.readthedocs.io/en/latest/v3/core/v3.0.html), as TensorStore
 * writes it for Orbax:
 *   {"chunk_grid":{"configuration":{"chunk_shape":[8]},"name":"regular"},
 *    "chunk_key_encoding":{"name":"default"},
 *    "codecs":[{"configuration":{"chunk_shape":[8],"codecs":[<bytes>,<zstd>],
 *               "index_codecs":[<bytes>,{"name":"crc32c"}]},"name":"sharding_indexed"}],
 *    "data_type":"int32","fill_value":0,"node_type":"array","shape":[8],"zarr_format":3}
 * zarr2 (https://zarr-specs.readthedocs.io/en/latest/v2/v2.0.html):
 *   {"chunks":[8],"compressor":{"id":"zstd","level":1},"dimension_separator":".",
 *    "dtype":"<i4","fill_value":null,"filters":null,"order":"C","shape":[8],"zarr_format":2}
 *
 * Integer fill values are read from the JSON text itself, since cJSON keeps numbers only
 * as doubles (int64 values past 2^53 would lose bits). */
#include "zarr_impl.h"

#include "unroll/alloc.h"
#include "unroll/b64.h"

#include "unroll/ckd.h"
#include "unroll/json.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- small JSON helpers ------------------------------------------------------------ */

static const cJSON *member(const cJSON *obj, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(obj, key);
}

/* A JSON number that is an integer in [lo, hi]. */
static int get_int(const cJSON *v, double lo, double hi, int64_t *out)
{
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) ||
        floor(v->valuedouble) != v->valuedouble || v->valuedouble < lo || v->valuedouble > hi) {
        return -1;
    }
    *out = (int64_t)v->valuedouble;
    return 0;
}

/* An array of at most UR_MAX_RANK non-negative integers (<= 2^53: a JSON double is exact
 * there; the caller checks tighter limits). Returns the count or -1. */
static int get_dims(const cJSON *v, uint64_t *out, const char *what, ur_err *err)
{
    int n = 0;
    const cJSON *e;

    if (!cJSON_IsArray(v)) {
        return ur_err_set(err, UR_ECORRUPT, "\"%s\" is not an array of integers", what);
    }
    if (cJSON_GetArraySize(v) > UR_MAX_RANK) {
        return ur_err_set(err, UR_EUNSUPPORTED, "\"%s\" has %d dimensions, more than %d", what,
                          cJSON_GetArraySize(v), UR_MAX_RANK);
    }
    cJSON_ArrayForEach(e, v)
    {
        int64_t x;
        if (get_int(e, 0, 9007199254740992.0, &x) < 0) {
            return ur_err_set(err, UR_ECORRUPT, "\"%s\"[%d] is not an integer in [0, 2^53]", what,
                              n);
        }
        out[n++] = (uint64_t)x;
    }
    return n;
}

/* Find the raw text of top-level member `key` of a JSON object text. The text has already
 * parsed as valid JSON, so this scanner only needs to skip strings and nesting. */
static int raw_member(const char *s, size_t len, const char *key, const char **vs, size_t *vn)
{
    size_t i = 0, klen = strlen(key);
    int depth = 0;

    while (i < len) {
        char c = s[i];
        if (c == '"') {
            size_t start = ++i;
            while (i < len && s[i] != '"') {
                i += s[i] == '\\' ? 2 : 1;
            }
            size_t end = i++;
            if (depth == 1 && end - start == klen && memcmp(s + start, key, klen) == 0) {
                while (i < len && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) {
                    i++;
                }
                if (i < len && s[i] == ':') {
                    i++;
                    while (i < len &&
                           (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) {
                        i++;
                    }
                    size_t b = i;
                    while (i < len && s[i] != ',' && s[i] != '}' && s[i] != ']' && s[i] != ' ' &&
                           s[i] != '\n' && s[i] != '\r' && s[i] != '\t') {
                        i++;
                    }
                    *vs = s + b;
                    *vn = i - b;
                    return 0;
                }
            }
            continue;
        }
        if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            depth--;
        }
        i++;
    }
    return -1;
}

/* ---- fill values -------------------------------------------------------------------- */

static int is_int_dtype(ur_dtype dt)
{
    return dt == UR_DT_INT4 || dt == UR_DT_INT8 || dt == UR_DT_INT16 || dt == UR_DT_INT32 ||
           dt == UR_DT_INT64 || dt == UR_DT_UINT4 || dt == UR_DT_UINT8 || dt == UR_DT_UINT16 ||
           dt == UR_DT_UINT32 || dt == UR_DT_UINT64;
}

static int is_signed_dtype(ur_dtype dt)
{
    return dt == UR_DT_INT4 || dt == UR_DT_INT8 || dt == UR_DT_INT16 || dt == UR_DT_INT32 ||
           dt == UR_DT_INT64;
}

static void put_le(uint8_t *out, uint64_t v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        out[i] = (uint8_t)(v >> (8 * i));
    }
}

static int parse_int_fill(ur_zarr_meta *m, const char *json, size_t len, ur_err *err)
{
    const char *vs;
    size_t vn;
    char tmp[64];
    char *end;
    size_t size = m->itemsize;
    int bits = (m->dtype == UR_DT_INT4 || m->dtype == UR_DT_UINT4) ? 4 : (int)(8 * size);

    if (raw_member(json, len, "fill_value", &vs, &vn) < 0 || vn == 0 || vn >= sizeof(tmp)) {
        return ur_err_set(err, UR_ECORRUPT, "\"fill_value\" is not an integer");
    }
    memcpy(tmp, vs, vn);
    tmp[vn] = '\0';
    errno = 0;
    if (is_signed_dtype(m->dtype)) {
        long long v = strtoll(tmp, &end, 10);
        long long lo = bits == 64 ? INT64_MIN : -(1LL << (bits - 1));
        long long hi = bits == 64 ? INT64_MAX : (1LL << (bits - 1)) - 1;
        if (errno != 0 || *end != '\0' || v < lo || v > hi) {
            return ur_err_set(err, UR_ECORRUPT, "\"fill_value\" %s is not a valid %s", tmp,
                              ur_dtype_name(m->dtype));
        }
        /* int4: TensorStore holds the fill value sign-extended to a byte (-3 is 0xfd). */
        put_le(m->fill, (uint64_t)v, size);
    } else {
        unsigned long long v = strtoull(tmp, &end, 10);
        unsigned long long hi = bits == 64 ? UINT64_MAX : (1ULL << bits) - 1;
        if (errno != 0 || *end != '\0' || tmp[0] == '-' || v > hi) {
            return ur_err_set(err, UR_ECORRUPT, "\"fill_value\" %s is not a valid %s", tmp,
                              ur_dtype_name(m->dtype));
        }
        put_le(m->fill, (uint64_t)v, size);
    }
    return UR_OK;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

/* One float element (dt a real float type) from a JSON number or string. */
static int parse_float_elem(ur_dtype dt, const cJSON *v, uint8_t *out, ur_err *err)
{
    size_t size = ur_dtype_size(dt);

    if (cJSON_IsNumber(v)) {
        return ur_zarr_dtype__from_double(dt, v->valuedouble, out, err);
    }
    if (cJSON_IsString(v)) {
        const char *s = v->valuestring;
        if (strcmp(s, "NaN") == 0) {
            return ur_zarr_dtype__nan(dt, out, err);
        }
        if (strcmp(s, "Infinity") == 0) {
            return ur_zarr_dtype__from_double(dt, (double)INFINITY, out, err);
        }
        if (strcmp(s, "-Infinity") == 0) {
            return ur_zarr_dtype__from_double(dt, -(double)INFINITY, out, err);
        }
        if (s[0] == '0' && s[1] == 'x' && strlen(s + 2) == 2 * size) {
            uint64_t bits = 0;
            for (size_t i = 0; i < 2 * size; i++) {
                int h = hexval(s[2 + i]);
                if (h < 0) {
                    goto bad;
                }
                bits = (bits << 4) | (uint64_t)h;
            }
            put_le(out, bits, size);
            return UR_OK;
        }
    }
bad:
    return ur_err_set(err, UR_ECORRUPT, "\"fill_value\" is not a valid %s", ur_dtype_name(dt));
}

/* zarr2 writes fill values of types without a JSON form (complex in TensorStore) as
 * base64 of the element's bytes. */
static int parse_b64_fill(ur_zarr_meta *m, const char *s, ur_err *err)
{
    ur_buf b;
    int rc;

    ur_buf_init(&b, sizeof(m->fill));
    rc = ur_b64_decode(&b, s, strlen(s), UR_B64_STD, NULL);
    if (rc == UR_OK && b.len == m->itemsize) {
        memcpy(m->fill, b.data, b.len);
    } else {
        rc = ur_err_set(err, UR_ECORRUPT, "\"fill_value\" is not a valid %s",
                        ur_dtype_name(m->dtype));
    }
    ur_buf_dispose(&b);
    return rc;
}

static int parse_fill(ur_zarr_meta *m, const cJSON *v, const char *json, size_t len, ur_err *err)
{
    memset(m->fill, 0, sizeof(m->fill));
    m->fill_null = 0;
    if (cJSON_IsNull(v)) {
        if (m->zarr_format == 3) {
            return ur_err_set(err, UR_ECORRUPT, "\"fill_value\" is null");
        }
        m->fill_null = 1;
        return UR_OK;
    }
    if (m->dtype == UR_DT_BOOL) {
        if (cJSON_IsBool(v)) {
            m->fill[0] = cJSON_IsTrue(v) ? 1 : 0;
            return UR_OK;
        }
        int64_t x;
        if (m->zarr_format == 2 && get_int(v, 0, 1, &x) == 0) {
            m->fill[0] = (uint8_t)x;
            return UR_OK;
        }
        return ur_err_set(err, UR_ECORRUPT, "\"fill_value\" is not a bool");
    }
    if (is_int_dtype(m->dtype)) {
        if (!cJSON_IsNumber(v)) {
            return ur_err_set(err, UR_ECORRUPT, "\"fill_value\" is not an integer");
        }
        return parse_int_fill(m, json, len, err);
    }
    if (m->zarr_format == 2 && cJSON_IsString(v) && strcmp(v->valuestring, "NaN") != 0 &&
        strcmp(v->valuestring, "Infinity") != 0 && strcmp(v->valuestring, "-Infinity") != 0) {
        return parse_b64_fill(m, v->valuestring, err);
    }
    if (m->dtype == UR_DT_COMPLEX64 || m->dtype == UR_DT_COMPLEX128) {
        ur_dtype part = m->dtype == UR_DT_COMPLEX64 ? UR_DT_FLOAT32 : UR_DT_FLOAT64;
        size_t half = m->itemsize / 2;
        if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 2) {
            int rc = parse_float_elem(part, cJSON_GetArrayItem(v, 0), m->fill, err);
            if (rc == UR_OK) {
                rc = parse_float_elem(part, cJSON_GetArrayItem(v, 1), m->fill + half, err);
            }
            return rc;
        }
        if (m->zarr_format == 2) {
            return parse_float_elem(part, v, m->fill, err);
        }
        return ur_err_set(err, UR_ECORRUPT, "\"fill_value\" is not a [real, imag] pair");
    }
    return parse_float_elem(m->dtype, v, m->fill, err);
}

/* ---- validation ----------------------------------------------------------------------- */

int ur_zarr_meta__validate(ur_zarr_meta *m, ur_err *err)
{
    uint64_t elems = 1, chunk_elems = 1, inner_elems = 1, tmp;

    if (m->rank < 0 || m->rank > UR_MAX_RANK) {
        return ur_err_set(err, UR_EUNSUPPORTED, "rank %d is more than %d", m->rank, UR_MAX_RANK);
    }
    m->itemsize = ur_dtype_size(m->dtype);
    m->codecs.is_complex = m->dtype == UR_DT_COMPLEX64 || m->dtype == UR_DT_COMPLEX128;
    m->index.is_complex = 0;
    if (m->itemsize == 0) {
        return ur_err_set(err, UR_EUNSUPPORTED, "invalid data type");
    }
    for (int d = 0; d < m->rank; d++) {
        if (m->shape[d] > UR_ZARR_MAX_DIM) {
            return ur_err_set(err, UR_ECORRUPT, "shape[%d] = %llu is too large", d,
                              (unsigned long long)m->shape[d]);
        }
        if (m->chunk_shape[d] == 0 || m->chunk_shape[d] > UR_ZARR_MAX_DIM) {
            return ur_err_set(err, UR_ECORRUPT, "chunk shape[%d] = %llu is invalid", d,
                              (unsigned long long)m->chunk_shape[d]);
        }
        if (ur_ckd_mul64(&elems, elems, m->shape[d])) {
            return ur_err_set(err, UR_ECORRUPT, "shape overflows 64 bits");
        }
        if (ur_ckd_mul64(&chunk_elems, chunk_elems, m->chunk_shape[d])) {
            return ur_err_set(err, UR_ECORRUPT, "chunk shape overflows 64 bits");
        }
        if (m->sharded) {
            if (m->inner_shape[d] == 0 || m->chunk_shape[d] % m->inner_shape[d] != 0) {
                return ur_err_set(err, UR_ECORRUPT,
                                  "sharding chunk_shape[%d] = %llu does not divide the shard "
                                  "shape %llu",
                                  d, (unsigned long long)m->inner_shape[d],
                                  (unsigned long long)m->chunk_shape[d]);
            }
            inner_elems *= m->inner_shape[d]; /* <= chunk_elems: cannot overflow */
        }
    }
    if (ur_ckd_mul64(&tmp, elems, m->itemsize)) {
        return ur_err_set(err, UR_ECORRUPT, "shape x itemsize overflows 64 bits");
    }
    if (ur_ckd_mul64(&tmp, chunk_elems, m->itemsize) || tmp > UR_ZARR_MAX_CHUNK_BYTES) {
        return ur_err_set(err, UR_ECORRUPT, "chunk of %llu elements is too large",
                          (unsigned long long)chunk_elems);
    }
    (void)inner_elems;
    for (const ur_zarr_chain *c = &m->codecs; c != NULL;
         c = (c == &m->codecs && m->sharded) ? &m->index : NULL) {
        int r = c == &m->index ? m->rank + 1 : m->rank;
        unsigned seen = 0;
        uint64_t seen_hi = 0;
        if (!c->has_transpose) {
            continue;
        }
        for (int d = 0; d < r; d++) {
            int p = c->perm[d];
            if (p < 0 || p >= r || (p < 32 ? (seen >> p) & 1u : (seen_hi >> (p - 32)) & 1u)) {
                return ur_err_set(err, UR_ECORRUPT, "transpose order is not a permutation");
            }
            if (p < 32) {
                seen |= 1u << p;
            } else {
                seen_hi |= 1ull << (p - 32);
            }
        }
    }
    return UR_OK;
}

/* ---- codec chains (zarr3) ---------------------------------------------------------------- */

static int codec_name(const cJSON *c, const char **name, const cJSON **conf, ur_err *err)
{
    /* Defined on every path, errors included: callers need not trust the error code alone. */
    *name = "";
    *conf = NULL;
    if (cJSON_IsString(c)) {
        *name = c->valuestring;
        *conf = NULL;
        return UR_OK;
    }
    const cJSON *n = member(c, "name");
    if (!cJSON_IsObject(c) || !cJSON_IsString(n)) {
        return ur_err_set(err, UR_ECORRUPT, "codec without a \"name\"");
    }
    *name = n->valuestring;
    *conf = member(c, "configuration");
    if (*conf != NULL && !cJSON_IsObject(*conf)) {
        return ur_err_set(err, UR_ECORRUPT, "codec \"%.64s\": configuration is not an object",
                          *name);
    }
    return UR_OK;
}

static int parse_perm(ur_zarr_chain *ch, const cJSON *order, int rank, ur_err *err)
{
    int perm[UR_MAX_RANK + 1];
    /* NULL unless order is a string (cJSON_GetStringValue checks the type and NULL itself) */
    const char *name = cJSON_GetStringValue(order);

    if (name != NULL && strcmp(name, "C") == 0) {
        for (int d = 0; d < rank; d++) {
            perm[d] = d;
        }
    } else if (name != NULL && strcmp(name, "F") == 0) {
        for (int d = 0; d < rank; d++) {
            perm[d] = rank - 1 - d;
        }
    } else if (cJSON_IsArray(order) && cJSON_GetArraySize(order) == rank) {
        for (int d = 0; d < rank; d++) {
            int64_t x;
            if (get_int(cJSON_GetArrayItem(order, d), 0, rank - 1, &x) < 0) {
                return ur_err_set(err, UR_ECORRUPT, "transpose order[%d] is invalid", d);
            }
            perm[d] = (int)x;
        }
    } else {
        return ur_err_set(err, UR_ECORRUPT, "transpose \"order\" is invalid for rank %d", rank);
    }
    /* Compose with an earlier transpose: encoded axis k = previous axis perm[k]. */
    if (ch->has_transpose) {
        int prev[UR_MAX_RANK + 1];
        memcpy(prev, ch->perm, sizeof(prev));
        for (int d = 0; d < rank; d++) {
            ch->perm[d] = prev[perm[d]];
        }
    } else {
        memcpy(ch->perm, perm, sizeof(int) * (size_t)rank);
    }
    ch->has_transpose = 1;
    return UR_OK;
}

static int parse_chain(ur_zarr_meta *m, ur_zarr_chain *ch, const cJSON *codecs, int rank,
                       size_t itemsize, int top, ur_err *err);

static int parse_sharding(ur_zarr_meta *m, const cJSON *conf, ur_err *err)
{
    uint64_t dims[UR_MAX_RANK];
    const cJSON *loc;
    int n, rc;

    if (conf == NULL) {
        return ur_err_set(err, UR_ECORRUPT, "sharding_indexed without configuration");
    }
    n = get_dims(member(conf, "chunk_shape"), dims, "sharding_indexed chunk_shape", err);
    if (n < 0) {
        return n;
    }
    if (n != m->rank) {
        return ur_err_set(err, UR_ECORRUPT, "sharding_indexed chunk_shape has rank %d, not %d", n,
                          m->rank);
    }
    memcpy(m->inner_shape, dims, sizeof(uint64_t) * (size_t)n);
    m->sharded = 1;
    rc = parse_chain(m, &m->codecs, member(conf, "codecs"), m->rank, m->itemsize, 0, err);
    if (rc < 0) {
        return ur_err_wrap(err, "sharding_indexed codecs");
    }
    rc = parse_chain(m, &m->index, member(conf, "index_codecs"), m->rank + 1, 8, 0, err);
    if (rc < 0) {
        return ur_err_wrap(err, "sharding_indexed index_codecs");
    }
    size_t fixed;
    rc = ur_zarr_codec__fixed_size(&m->index, 16, &fixed, err);
    if (rc < 0) {
        return rc;
    }
    loc = member(conf, "index_location");
    m->index_at_start = 0;
    if (loc != NULL) {
        if (cJSON_IsString(loc) && strcmp(loc->valuestring, "start") == 0) {
            m->index_at_start = 1;
        } else if (!cJSON_IsString(loc) || strcmp(loc->valuestring, "end") != 0) {
            return ur_err_set(err, UR_ECORRUPT, "invalid sharding index_location");
        }
    }
    return UR_OK;
}

static int parse_chain(ur_zarr_meta *m, ur_zarr_chain *ch, const cJSON *codecs, int rank,
                       size_t itemsize, int top, ur_err *err)
{
    const cJSON *c;
    int phase = 0; /* 0: array->array, 1: bytes->bytes (after the array->bytes codec) */
    int rc;

    memset(ch, 0, sizeof(*ch));
    if (!cJSON_IsArray(codecs) || cJSON_GetArraySize(codecs) == 0) {
        return ur_err_set(err, UR_ECORRUPT, "\"codecs\" is not a non-empty array");
    }
    cJSON_ArrayForEach(c, codecs)
    {
        const char *name = NULL;
        const cJSON *conf = NULL;
        const ur_zarr_b2b_codec *k;
        rc = codec_name(c, &name, &conf, err);
        if (rc < 0) {
            return rc;
        }
        if (strcmp(name, "transpose") == 0) {
            if (phase != 0) {
                return ur_err_set(err, UR_ECORRUPT, "transpose after the bytes codec");
            }
            rc = parse_perm(ch, conf ? member(conf, "order") : NULL, rank, err);
            if (rc < 0) {
                return rc;
            }
        } else if (strcmp(name, "bytes") == 0 || strcmp(name, "sharding_indexed") == 0) {
            if (phase != 0) {
                return ur_err_set(err, UR_ECORRUPT, "more than one array->bytes codec");
            }
            phase = 1;
            if (name[0] == 's') {
                if (!top) {
                    return ur_err_set(err, UR_EUNSUPPORTED, "nested sharding_indexed codec");
                }
                if (ch->has_transpose || cJSON_GetArraySize(codecs) != 1) {
                    return ur_err_set(err, UR_EUNSUPPORTED,
                                      "sharding_indexed combined with other codecs");
                }
                return parse_sharding(m, conf, err);
            }
            const cJSON *e = conf ? member(conf, "endian") : NULL;
            ch->bytes_has_endian = e != NULL;
            if (e != NULL && cJSON_IsString(e) && strcmp(e->valuestring, "big") == 0) {
                ch->big_endian = itemsize > 1;
            } else if (e != NULL &&
                       !(cJSON_IsString(e) && strcmp(e->valuestring, "little") == 0)) {
                return ur_err_set(err, UR_ECORRUPT, "bytes codec: invalid \"endian\"");
            } else if (e == NULL && itemsize > 1) {
                return ur_err_set(err, UR_ECORRUPT,
                                  "bytes codec: \"endian\" is required for %zu-byte elements",
                                  itemsize);
            }
        } else if ((k = ur_zarr_codec__b2b_v3(name)) != NULL) {
            ur_zarr_b2b *b;
            if (phase != 1) {
                return ur_err_set(err, UR_ECORRUPT, "codec \"%s\" before the bytes codec", name);
            }
            if (ch->n_b2b == UR_ZARR_MAX_B2B) {
                return ur_err_set(err, UR_EUNSUPPORTED, "more than %d bytes->bytes codecs",
                                  UR_ZARR_MAX_B2B);
            }
            b = &ch->b2b[ch->n_b2b++];
            b->kind = k->kind;
            b->level = 0;
            b->checksum = 0;
            if (!k->has_level) {
                continue;
            }
            b->level = k->level_v3;
            const cJSON *lv = conf ? member(conf, "level") : NULL;
            const cJSON *ck = conf ? member(conf, "checksum") : NULL;
            int64_t x;
            if (lv != NULL) {
                if (get_int(lv, k->level_min, k->level_max, &x) < 0) {
                    return ur_err_set(err, UR_ECORRUPT, "%s codec: invalid \"level\"", name);
                }
                b->level = (int)x;
            }
            if (ck != NULL) {
                if (!cJSON_IsBool(ck)) {
                    return ur_err_set(err, UR_ECORRUPT, "%s codec: invalid \"checksum\"", name);
                }
                b->checksum = cJSON_IsTrue(ck);
            }
        } else {
            return ur_err_set(err, UR_EUNSUPPORTED, "unsupported codec \"%.64s\"", name);
        }
    }
    if (phase != 1) {
        return ur_err_set(err, UR_ECORRUPT, "no array->bytes codec (bytes or sharding_indexed)");
    }
    return UR_OK;
}

/* ---- zarr3 --------------------------------------------------------------------------- */

static int parse_v3(ur_zarr_meta *m, const cJSON *root, const char *json, size_t len, ur_err *err)
{
    const cJSON *v, *conf, *sep;
    int64_t fmt;
    int n, rc;

    if (!cJSON_IsObject(root)) {
        return ur_err_set(err, UR_ECORRUPT, "metadata is not a JSON object");
    }
    if (get_int(member(root, "zarr_format"), 0, 1e9, &fmt) < 0 || fmt != 3) {
        return ur_err_set(err, UR_ECORRUPT, "\"zarr_format\" is not 3");
    }
    v = member(root, "node_type");
    if (!cJSON_IsString(v) || strcmp(v->valuestring, "array") != 0) {
        return ur_err_set(err, UR_ECORRUPT, "\"node_type\" is not \"array\"");
    }
    m->zarr_format = 3;
    n = get_dims(member(root, "shape"), m->shape, "shape", err);
    if (n < 0) {
        return n;
    }
    m->rank = n;
    v = member(root, "data_type");
    if (!cJSON_IsString(v)) {
        return ur_err_set(err, UR_ECORRUPT, "\"data_type\" is not a string");
    }
    m->dtype = ur_zarr_dtype__parse_v3(v->valuestring);
    if (m->dtype == UR_DT_INVALID) {
        return ur_err_set(err, UR_EUNSUPPORTED, "unsupported data_type \"%.64s\"", v->valuestring);
    }
    m->itemsize = ur_dtype_size(m->dtype);

    v = member(root, "chunk_grid");
    conf = member(v, "configuration");
    if (!cJSON_IsObject(v) || !cJSON_IsString(member(v, "name")) ||
        strcmp(member(v, "name")->valuestring, "regular") != 0 || !cJSON_IsObject(conf)) {
        if (cJSON_IsObject(v) && cJSON_IsString(member(v, "name"))) {
            return ur_err_set(err, UR_EUNSUPPORTED, "unsupported chunk_grid \"%.64s\"",
                              member(v, "name")->valuestring);
        }
        return ur_err_set(err, UR_ECORRUPT, "\"chunk_grid\" is not a regular chunk grid");
    }
    n = get_dims(member(conf, "chunk_shape"), m->chunk_shape, "chunk_shape", err);
    if (n < 0) {
        return n;
    }
    if (n != m->rank) {
        return ur_err_set(err, UR_ECORRUPT, "chunk_shape has rank %d but shape has rank %d", n,
                          m->rank);
    }

    v = member(root, "chunk_key_encoding");
    if (!cJSON_IsObject(v) || !cJSON_IsString(member(v, "name"))) {
        return ur_err_set(err, UR_ECORRUPT, "\"chunk_key_encoding\" is invalid");
    }
    if (strcmp(member(v, "name")->valuestring, "default") == 0) {
        m->v2_keys = 0;
        m->sep = '/';
    } else if (strcmp(member(v, "name")->valuestring, "v2") == 0) {
        m->v2_keys = 1;
        m->sep = '.';
    } else {
        return ur_err_set(err, UR_EUNSUPPORTED, "unsupported chunk_key_encoding \"%.64s\"",
                          member(v, "name")->valuestring);
    }
    conf = member(v, "configuration");
    sep = conf ? member(conf, "separator") : NULL;
    if (sep != NULL) {
        if (!cJSON_IsString(sep) ||
            (strcmp(sep->valuestring, "/") != 0 && strcmp(sep->valuestring, ".") != 0)) {
            return ur_err_set(err, UR_ECORRUPT, "chunk_key_encoding separator is invalid");
        }
        m->sep = sep->valuestring[0];
    }

    v = member(root, "storage_transformers");
    if (v != NULL && !(cJSON_IsArray(v) && cJSON_GetArraySize(v) == 0)) {
        return ur_err_set(err, UR_EUNSUPPORTED, "storage_transformers are not supported");
    }
    rc = parse_chain(m, &m->codecs, member(root, "codecs"), m->rank, m->itemsize, 1, err);
    if (rc < 0) {
        return rc;
    }
    v = member(root, "fill_value");
    if (v == NULL) {
        return ur_err_set(err, UR_ECORRUPT, "\"fill_value\" is missing");
    }
    rc = parse_fill(m, v, json, len, err);
    if (rc < 0) {
        return rc;
    }
    return ur_zarr_meta__validate(m, err);
}

/* ---- zarr2 --------------------------------------------------------------------------- */

static int parse_v2(ur_zarr_meta *m, const cJSON *root, const char *json, size_t len, ur_err *err)
{
    const cJSON *v;
    int64_t fmt;
    int n, rc, big = 0;

    if (!cJSON_IsObject(root)) {
        return ur_err_set(err, UR_ECORRUPT, "metadata is not a JSON object");
    }
    if (get_int(member(root, "zarr_format"), 0, 1e9, &fmt) < 0 || fmt != 2) {
        return ur_err_set(err, UR_ECORRUPT, "\"zarr_format\" is not 2");
    }
    m->zarr_format = 2;
    n = get_dims(member(root, "shape"), m->shape, "shape", err);
    if (n < 0) {
        return n;
    }
    m->rank = n;
    n = get_dims(member(root, "chunks"), m->chunk_shape, "chunks", err);
    if (n < 0) {
        return n;
    }
    if (n != m->rank) {
        return ur_err_set(err, UR_ECORRUPT, "\"chunks\" has rank %d but shape has rank %d", n,
                          m->rank);
    }
    v = member(root, "dtype");
    if (!cJSON_IsString(v)) {
        return ur_err_set(err, cJSON_IsArray(v) ? UR_EUNSUPPORTED : UR_ECORRUPT,
                          "\"dtype\" is not a string (structured dtypes are not supported)");
    }
    rc = ur_zarr_dtype__parse_v2(v->valuestring, &m->dtype, &big, err);
    if (rc < 0) {
        return rc;
    }
    m->itemsize = ur_dtype_size(m->dtype);
    m->codecs.big_endian = big;

    v = member(root, "order");
    if (!cJSON_IsString(v) ||
        (strcmp(v->valuestring, "C") != 0 && strcmp(v->valuestring, "F") != 0)) {
        return ur_err_set(err, UR_ECORRUPT, "\"order\" is not \"C\" or \"F\"");
    }
    if (v->valuestring[0] == 'F' && m->rank > 1) {
        m->codecs.has_transpose = 1;
        for (int d = 0; d < m->rank; d++) {
            m->codecs.perm[d] = m->rank - 1 - d;
        }
    }
    v = member(root, "filters");
    if (v == NULL) {
        return ur_err_set(err, UR_ECORRUPT, "\"filters\" is missing");
    }
    if (!cJSON_IsNull(v) && !(cJSON_IsArray(v) && cJSON_GetArraySize(v) == 0)) {
        return ur_err_set(err, UR_EUNSUPPORTED, "zarr2 filters are not supported");
    }
    v = member(root, "compressor");
    if (v == NULL) {
        return ur_err_set(err, UR_ECORRUPT, "\"compressor\" is missing");
    }
    if (!cJSON_IsNull(v)) {
        const cJSON *id = member(v, "id"), *lv = member(v, "level");
        ur_zarr_b2b *b = &m->codecs.b2b[0];
        const ur_zarr_b2b_codec *k;
        int64_t x;
        if (!cJSON_IsObject(v) || !cJSON_IsString(id)) {
            return ur_err_set(err, UR_ECORRUPT, "\"compressor\" has no \"id\"");
        }
        k = ur_zarr_codec__b2b_v2(id->valuestring);
        if (k == NULL) {
            return ur_err_set(err, UR_EUNSUPPORTED, "unsupported codec \"%.64s\"",
                              id->valuestring);
        }
        b->kind = k->kind;
        b->level = k->level_v2;
        if (lv != NULL && !cJSON_IsNull(lv)) {
            if (get_int(lv, -131072, 22, &x) < 0) {
                return ur_err_set(err, UR_ECORRUPT, "compressor \"level\" is invalid");
            }
            b->level = (int)x;
        }
        m->codecs.n_b2b = 1;
    }
    v = member(root, "dimension_separator");
    m->v2_keys = 1;
    m->sep = '.';
    if (v != NULL && !cJSON_IsNull(v)) {
        if (!cJSON_IsString(v) ||
            (strcmp(v->valuestring, ".") != 0 && strcmp(v->valuestring, "/") != 0)) {
            return ur_err_set(err, UR_ECORRUPT, "\"dimension_separator\" is invalid");
        }
        m->sep = v->valuestring[0];
    }
    v = member(root, "fill_value");
    if (v == NULL) {
        return ur_err_set(err, UR_ECORRUPT, "\"fill_value\" is missing");
    }
    rc = parse_fill(m, v, json, len, err);
    if (rc < 0) {
        return rc;
    }
    return ur_zarr_meta__validate(m, err);
}

/* The last few metadata texts parsed on this thread, with their parse. Orbax writes the same
 * zarr.json for every array of one shape and dtype (a parameter and its two optimizer
 * moments; every leaf of a many-leaf tree), and an input array's metadata is parsed twice
 * (when the checkpoint is opened, and when a worker opens the array): a text seen before
 * costs a memcmp instead of a JSON parse of a few dozen allocations. A parse depends on the
 * text and the format alone; only successful ones are kept, so an error is made again, with
 * the caller's name. Per thread, so that no lock is taken; off while a test fails
 * allocations in turn (ur_alloc_failures_armed). */
#define MEMO_SLOTS 4
#define MEMO_TEXT 1024
typedef struct {
    size_t len; /* 0: empty (metadata is never empty) */
    int format;
    ur_zarr_meta m;
    char text[MEMO_TEXT];
} memo_slot;
static _Thread_local memo_slot memo[MEMO_SLOTS];
static _Thread_local unsigned memo_next;

static const ur_zarr_meta *memo_find(const char *json, size_t len, int format)
{
    if (ur_alloc_failures_armed()) {
        return NULL;
    }
    for (int i = 0; i < MEMO_SLOTS; i++) {
        const memo_slot *s = &memo[i];
        if (len != 0 && s->len == len && s->format == format && memcmp(s->text, json, len) == 0) {
            return &s->m;
        }
    }
    return NULL;
}

static void memo_keep(const char *json, size_t len, int format, const ur_zarr_meta *m)
{
    memo_slot *s;
    if (len == 0 || len > MEMO_TEXT || ur_alloc_failures_armed()) {
        return;
    }
    s = &memo[memo_next++ % MEMO_SLOTS];
    s->len = len;
    s->format = format;
    s->m = *m;
    memcpy(s->text, json, len);
}

static int parse_any(ur_zarr_meta *out, const char *json, size_t len, const char *name, int format,
                     ur_err *err)
{
    const ur_zarr_meta *seen = memo_find(json, len, format);
    ur_zarr_meta m;
    cJSON *root;
    int rc;

    if (seen != NULL) {
        *out = *seen;
        return UR_OK;
    }
    memset(&m, 0, sizeof(m));
    root = NULL;
    rc = ur_json_parse(&root, json, len, err);
    if (rc == UR_OK) {
        rc = format == 3 ? parse_v3(&m, root, json, len, err) : parse_v2(&m, root, json, len, err);
    }
    cJSON_Delete(root);
    if (rc < 0) {
        if (err != NULL) { /* ur_err_wrap(NULL) would turn the code into UR_EINTERNAL */
            ur_err_wrap(err, "zarr array '%s' (%s)", name, format == 3 ? "zarr.json" : ".zarray");
        }
        return rc;
    }
    memo_keep(json, len, format, &m);
    *out = m;
    return UR_OK;
}

int ur_zarr_meta__parse_v3(ur_zarr_meta *out, const char *json, size_t len, const char *name,
                           ur_err *err)
{
    return parse_any(out, json, len, name, 3, err);
}

int ur_zarr_meta__parse_v2(ur_zarr_meta *out, const char *json, size_t len, const char *name,
                           ur_err *err)
{
    return parse_any(out, json, len, name, 2, err);
}

/* ---- emit ------------------------------------------------------------------------------ */

static int emit_dims(ur_buf *b, const uint64_t *d, int n, ur_err *err)
{
    int rc = ur_buf_append_byte(b, '[', err);
    for (int i = 0; rc == UR_OK && i < n; i++) {
        rc = i ? ur_buf_append_byte(b, ',', err) : UR_OK;
        if (rc == UR_OK) {
            rc = ur_buf_put_dec(b, d[i], err);
        }
    }
    return rc == UR_OK ? ur_buf_append_byte(b, ']', err) : rc;
}

static int emit_float(ur_buf *b, ur_dtype dt, const uint8_t *p, ur_err *err)
{
    uint8_t nan[8];
    size_t size = ur_dtype_size(dt);
    double v = ur_zarr_dtype__to_double(dt, p);
    char tmp[40];

    if (isnan(v)) {
        ur_zarr_dtype__nan(dt, nan, NULL);
        if (memcmp(nan, p, size) == 0) {
            return ur_buf_append_str(b, "\"NaN\"", err);
        }
        int rc = ur_buf_append_str(b, "\"0x", err);
        for (size_t i = size; rc == UR_OK && i > 0; i--) {
            rc = ur_buf_printf(b, err, "%02x", p[i - 1]);
        }
        return rc == UR_OK ? ur_buf_append_byte(b, '"', err) : rc;
    }
    if (isinf(v)) {
        return ur_buf_append_str(b, v > 0 ? "\"Infinity\"" : "\"-Infinity\"", err);
    }
    snprintf(tmp, sizeof(tmp), "%.17g", v);
    if (strpbrk(tmp, ".eE") == NULL) {
        size_t n = strlen(tmp);
        memcpy(tmp + n, ".0", 3);
    }
    return ur_buf_append_str(b, tmp, err);
}

static int emit_fill(ur_buf *b, const ur_zarr_meta *m, ur_err *err)
{
    uint64_t u = 0;

    if (m->fill_null) {
        return ur_buf_append_str(b, "null", err);
    }
    if (m->dtype == UR_DT_BOOL) {
        return ur_buf_append_str(b, m->fill[0] ? "true" : "false", err);
    }
    if (m->dtype == UR_DT_COMPLEX64 || m->dtype == UR_DT_COMPLEX128) {
        ur_dtype part = m->dtype == UR_DT_COMPLEX64 ? UR_DT_FLOAT32 : UR_DT_FLOAT64;
        int rc = ur_buf_append_byte(b, '[', err);
        rc = rc ? rc : emit_float(b, part, m->fill, err);
        rc = rc ? rc : ur_buf_append_byte(b, ',', err);
        rc = rc ? rc : emit_float(b, part, m->fill + m->itemsize / 2, err);
        return rc ? rc : ur_buf_append_byte(b, ']', err);
    }
    if (ur_dtype_is_float(m->dtype)) {
        return emit_float(b, m->dtype, m->fill, err);
    }
    for (size_t i = m->itemsize; i > 0; i--) {
        u = (u << 8) | m->fill[i - 1];
    }
    if (m->dtype == UR_DT_INT4) {
        return ur_buf_printf(b, err, "%d", (u & 8u) ? (int)(u & 0xfu) - 16 : (int)(u & 0xfu));
    }
    if (is_signed_dtype(m->dtype)) {
        int64_t s;
        unsigned bits = (unsigned)(8 * m->itemsize);
        if (bits > 0 && bits < 64 && (u >> (bits - 1)) & 1u) {
            u |= ~0ull << bits;
        }
        memcpy(&s, &u, 8);
        return ur_buf_printf(b, err, "%lld", (long long)s);
    }
    return ur_buf_put_dec(b, u, err);
}

static int emit_chain(ur_buf *b, const ur_zarr_chain *c, int rank, size_t itemsize, ur_err *err)
{
    int rc = UR_OK;

    if (c->has_transpose) {
        rc = ur_buf_append_str(b, "{\"configuration\":{\"order\":[", err);
        for (int d = 0; rc == UR_OK && d < rank; d++) {
            rc = ur_buf_printf(b, err, "%s%d", d ? "," : "", c->perm[d]);
        }
        rc = rc ? rc : ur_buf_append_str(b, "]},\"name\":\"transpose\"},", err);
    }
    if (rc == UR_OK) {
        if (itemsize == 1 && !c->bytes_has_endian) {
            rc = ur_buf_append_str(b, "{\"name\":\"bytes\"}", err);
        } else {
            rc = ur_buf_printf(b, err,
                               "{\"configuration\":{\"endian\":\"%s\"},\"name\":\"bytes\"}",
                               c->big_endian ? "big" : "little");
        }
    }
    for (int i = 0; rc == UR_OK && i < c->n_b2b; i++) {
        const ur_zarr_b2b *x = &c->b2b[i];
        const ur_zarr_b2b_codec *k = ur_zarr_codec__b2b(x->kind);
        if (k == NULL || k->v3_name == NULL) {
            rc = ur_err_set(err, UR_EUNSUPPORTED, "codec %s has no zarr3 form",
                            k != NULL ? k->name : "(unknown)");
        } else if (k->has_checksum) {
            rc = ur_buf_printf(
                b, err, ",{\"configuration\":{\"checksum\":%s,\"level\":%d},\"name\":\"%s\"}",
                x->checksum ? "true" : "false", x->level, k->v3_name);
        } else if (k->has_level) {
            rc = ur_buf_printf(b, err, ",{\"configuration\":{\"level\":%d},\"name\":\"%s\"}",
                               x->level, k->v3_name);
        } else {
            rc = ur_buf_printf(b, err, ",{\"name\":\"%s\"}", k->v3_name);
        }
    }
    return rc;
}

static int emit_v3(const ur_zarr_meta *m, ur_buf *b, ur_err *err)
{
    int rc = ur_buf_append_str(b, "{\"chunk_grid\":{\"configuration\":{\"chunk_shape\":", err);
    rc = rc ? rc : emit_dims(b, m->chunk_shape, m->rank, err);
    rc = rc ? rc : ur_buf_append_str(b, "},\"name\":\"regular\"},\"chunk_key_encoding\":{", err);
    if (rc == UR_OK) {
        if (m->v2_keys) {
            rc = ur_buf_printf(b, err, "\"configuration\":{\"separator\":\"%c\"},\"name\":\"v2\"}",
                               m->sep);
        } else if (m->sep != '/') {
            rc = ur_buf_printf(
                b, err, "\"configuration\":{\"separator\":\"%c\"},\"name\":\"default\"}", m->sep);
        } else {
            rc = ur_buf_append_str(b, "\"name\":\"default\"}", err);
        }
    }
    rc = rc ? rc : ur_buf_append_str(b, ",\"codecs\":[", err);
    if (rc == UR_OK && m->sharded) {
        rc = ur_buf_append_str(b, "{\"configuration\":{\"chunk_shape\":", err);
        rc = rc ? rc : emit_dims(b, m->inner_shape, m->rank, err);
        rc = rc ? rc : ur_buf_append_str(b, ",\"codecs\":[", err);
        rc = rc ? rc : emit_chain(b, &m->codecs, m->rank, m->itemsize, err);
        rc = rc ? rc : ur_buf_append_str(b, "],\"index_codecs\":[", err);
        rc = rc ? rc : emit_chain(b, &m->index, m->rank + 1, 8, err);
        rc = rc ? rc : ur_buf_append_str(b, "]", err);
        if (rc == UR_OK && m->index_at_start) {
            rc = ur_buf_append_str(b, ",\"index_location\":\"start\"", err);
        }
        rc = rc ? rc : ur_buf_append_str(b, "},\"name\":\"sharding_indexed\"}", err);
    } else if (rc == UR_OK) {
        rc = emit_chain(b, &m->codecs, m->rank, m->itemsize, err);
    }
    rc = rc ? rc
            : ur_buf_printf(b, err,
                            "],\"data_type\":\"%s\",\"fill_value\":", ur_dtype_name(m->dtype));
    rc = rc ? rc : emit_fill(b, m, err);
    rc = rc ? rc : ur_buf_append_str(b, ",\"node_type\":\"array\",\"shape\":", err);
    rc = rc ? rc : emit_dims(b, m->shape, m->rank, err);
    return rc ? rc : ur_buf_append_str(b, ",\"zarr_format\":3}", err);
}

static int emit_v2(const ur_zarr_meta *m, ur_buf *b, ur_err *err)
{
    const ur_zarr_chain *c = &m->codecs;
    int rc = ur_buf_append_str(b, "{\"chunks\":", err);

    rc = rc ? rc : emit_dims(b, m->chunk_shape, m->rank, err);
    rc = rc ? rc : ur_buf_append_str(b, ",\"compressor\":", err);
    if (rc == UR_OK) {
        if (c->n_b2b == 0) {
            rc = ur_buf_append_str(b, "null", err);
        } else if (c->n_b2b == 1 && ur_zarr_codec__b2b(c->b2b[0].kind) != NULL &&
                   ur_zarr_codec__b2b(c->b2b[0].kind)->v2_id != NULL) {
            rc = ur_buf_printf(b, err, "{\"id\":\"%s\",\"level\":%d}",
                               ur_zarr_codec__b2b(c->b2b[0].kind)->v2_id, c->b2b[0].level);
        } else {
            rc = ur_err_set(err, UR_EINVAL, "zarr2 holds at most one compressor");
        }
    }
    if (rc == UR_OK && (c->big_endian || m->v2_keys == 0)) {
        rc = ur_err_set(err, UR_EINVAL, "zarr2 metadata: big-endian or non-v2 keys");
    }
    rc = rc ? rc
            : ur_buf_printf(b, err, ",\"dimension_separator\":\"%c\",\"dtype\":\"%s\"", m->sep,
                            ur_zarr_dtype__v2_name(m->dtype));
    rc = rc ? rc : ur_buf_append_str(b, ",\"fill_value\":", err);
    rc = rc ? rc : emit_fill(b, m, err);
    rc = rc ? rc
            : ur_buf_printf(b, err, ",\"filters\":null,\"order\":\"%s\",\"shape\":",
                            c->has_transpose ? "F" : "C");
    rc = rc ? rc : emit_dims(b, m->shape, m->rank, err);
    return rc ? rc : ur_buf_append_str(b, ",\"zarr_format\":2}", err);
}

int ur_zarr_meta__emit(const ur_zarr_meta *m, ur_buf *out, ur_err *err)
{
    return m->zarr_format == 3 ? emit_v3(m, out, err) : emit_v2(m, out, err);
}
