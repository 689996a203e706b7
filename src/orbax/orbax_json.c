/* Helpers for the Orbax metadata files: a string arena and the JSON conventions Orbax uses
 * (Python json.dumps: ", " and ": " separators, ensure_ascii). */
#include "orbax_impl.h"

#include "unroll/alloc.h"
#include "unroll/json.h"
#include "unroll/side.h"

#include <math.h>
#include <stdalign.h>
#include <string.h>

struct ur_orbax__arena_block {
    ur_orbax__arena_block *next;
    size_t cap;
    size_t used;
    alignas(max_align_t) unsigned char data[];
};

#define ARENA_BLOCK 4096u

void ur_orbax__arena_init(ur_orbax_arena *a)
{
    a->head = NULL;
}

void ur_orbax__arena_dispose(ur_orbax_arena *a)
{
    ur_orbax__arena_block *b = a->head;
    while (b != NULL) {
        ur_orbax__arena_block *next = b->next;
        ur_free(b);
        b = next;
    }
    a->head = NULL;
}

void ur_orbax__arena_adopt(ur_orbax_arena *into, ur_orbax_arena *from)
{
    ur_orbax__arena_block *tail = from->head;
    if (tail == NULL) {
        return;
    }
    while (tail->next != NULL) {
        tail = tail->next;
    }
    tail->next = into->head;
    into->head = from->head;
    from->head = NULL;
}

/* n bytes at an offset of the head block that is a multiple of align (a power of two). */
static void *arena_take(ur_orbax_arena *a, size_t n, size_t align)
{
    ur_orbax__arena_block *b = a->head;
    size_t at = b != NULL ? (b->used + align - 1) & ~(align - 1) : 0;
    if (b == NULL || at > b->cap || b->cap - at < n) {
        size_t cap = n > ARENA_BLOCK ? n : ARENA_BLOCK;
        if (cap > SIZE_MAX - sizeof(*b)) {
            return NULL;
        }
        b = ur_malloc(sizeof(*b) + cap);
        if (b == NULL) {
            return NULL;
        }
        b->cap = cap;
        b->used = 0;
        b->next = a->head;
        a->head = b;
        at = 0;
    }
    b->used = at + n;
    return b->data + at;
}

void *ur_orbax__arena_alloc(ur_orbax_arena *a, size_t n)
{
    void *p = arena_take(a, n ? n : 1, alignof(max_align_t));
    if (p != NULL) {
        memset(p, 0, n);
    }
    return p;
}

/* Strings are not aligned: with 100,000 leaves of a few short keys each, rounding every one
 * up to 16 bytes cost a third of the leaf records. */
char *ur_orbax__arena_strndup(ur_orbax_arena *a, const char *s, size_t n)
{
    if (n == SIZE_MAX) {
        return NULL;
    }
    char *p = arena_take(a, n + 1, 1);
    if (p != NULL) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

char *ur_orbax__arena_strdup(ur_orbax_arena *a, const char *s)
{
    return ur_orbax__arena_strndup(a, s, strlen(s));
}

int ur_orbax__json_parse(cJSON **out, const char *text, size_t len, const char *what, ur_err *err)
{
    int rc = ur_json_parse(out, text, len, err);
    if (rc < 0 && err != NULL) {
        ur_err_wrap(err, "%s", what);
    }
    return rc;
}

static int put_u_escape(ur_buf *b, unsigned v, ur_err *err)
{
    return ur_buf_printf(b, err, "\\u%04x", v);
}

int ur_orbax__json_put_str(ur_buf *b, const char *s, ur_err *err)
{
    int rc = ur_buf_append_byte(b, '"', err);
    const unsigned char *p = (const unsigned char *)s;
    while (rc == UR_OK && *p != '\0') {
        unsigned c = *p;
        size_t run = 0;
        while (p[run] >= 0x20 && p[run] < 0x7f && p[run] != '"' && p[run] != '\\') {
            run++; /* printable ASCII goes as it is, a run at a time */
        }
        if (run > 0) {
            rc = ur_buf_append(b, p, run, err);
            p += run;
        } else if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};
            rc = ur_buf_append(b, esc, 2, err);
            p++;
        } else if (c == '\n') {
            rc = ur_buf_append_str(b, "\\n", err);
            p++;
        } else if (c == '\r') {
            rc = ur_buf_append_str(b, "\\r", err);
            p++;
        } else if (c == '\t') {
            rc = ur_buf_append_str(b, "\\t", err);
            p++;
        } else if (c == '\b') {
            rc = ur_buf_append_str(b, "\\b", err);
            p++;
        } else if (c == '\f') {
            rc = ur_buf_append_str(b, "\\f", err);
            p++;
        } else if (c < 0x20 || c == 0x7f) {
            rc = put_u_escape(b, c, err);
            p++;
        } else if (c < 0x80) {
            rc = ur_buf_append_byte(b, (uint8_t)c, err);
            p++;
        } else {
            /* Decode one UTF-8 sequence and write it as \uXXXX (a surrogate pair above the
             * BMP), as json.dumps(ensure_ascii=True) does. */
            unsigned cp;
            int extra;
            if ((c & 0xe0) == 0xc0) {
                cp = c & 0x1f;
                extra = 1;
            } else if ((c & 0xf0) == 0xe0) {
                cp = c & 0x0f;
                extra = 2;
            } else if ((c & 0xf8) == 0xf0) {
                cp = c & 0x07;
                extra = 3;
            } else {
                return ur_err_set(err, UR_EINVAL, "invalid UTF-8 in string");
            }
            p++;
            for (int i = 0; i < extra; i++, p++) {
                if ((*p & 0xc0) != 0x80) {
                    return ur_err_set(err, UR_EINVAL, "invalid UTF-8 in string");
                }
                cp = (cp << 6) | (*p & 0x3fu);
            }
            if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) || (extra == 1 && cp < 0x80) ||
                (extra == 2 && cp < 0x800) || (extra == 3 && cp < 0x10000)) {
                return ur_err_set(err, UR_EINVAL, "invalid UTF-8 in string");
            }
            if (cp >= 0x10000) {
                unsigned v = cp - 0x10000;
                rc = put_u_escape(b, 0xd800 + (v >> 10), err);
                if (rc == UR_OK) {
                    rc = put_u_escape(b, 0xdc00 + (v & 0x3ff), err);
                }
            } else {
                rc = put_u_escape(b, cp, err);
            }
        }
    }
    if (rc == UR_OK) {
        rc = ur_buf_append_byte(b, '"', err);
    }
    return rc;
}

int ur_orbax__json_int(const cJSON *v, int64_t lo, int64_t hi, int64_t *out)
{
    if (!cJSON_IsNumber(v)) {
        return -1;
    }
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d) || d < -9223372036854775808.0 ||
        d >= 9223372036854775808.0) {
        return -1;
    }
    int64_t i = (int64_t)d;
    if (i < lo || i > hi) {
        return -1;
    }
    *out = i;
    return 0;
}

char *ur_orbax__json_print(ur_orbax_arena *a, const cJSON *v)
{
    ur_json_init();
    char *text = cJSON_PrintUnformatted(v);
    if (text == NULL) {
        return NULL;
    }
    char *copy = ur_orbax__arena_strdup(a, text);
    cJSON_free(text);
    return copy;
}

int ur_orbax__parse_shape(const cJSON *v, uint64_t *dims, int *rank, const char *what, ur_err *err)
{
    if (!cJSON_IsArray(v)) {
        return ur_err_set(err, UR_ECORRUPT, "%s: expected a list of integers", what);
    }
    int n = cJSON_GetArraySize(v);
    if (n > UR_MAX_RANK) {
        return ur_err_set(err, UR_ECORRUPT, "%s: rank %d exceeds %d", what, n, UR_MAX_RANK);
    }
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, v)
    {
        int64_t d;
        if (ur_orbax__json_int(e, 0, (int64_t)UR_ORBAX_MAX_DIM, &d) != 0) {
            return ur_err_set(err, UR_ECORRUPT, "%s: dimension %d is not an integer in [0, 2^62]",
                              what, i);
        }
        dims[i++] = (uint64_t)d;
    }
    *rank = n;
    return UR_OK;
}

uint64_t *ur_orbax__arena_dims(ur_orbax_arena *a, const uint64_t *dims, int n)
{
    uint64_t *p = n > 0 ? ur_orbax__arena_alloc(a, (size_t)n * sizeof(*p)) : NULL;
    if (p != NULL) {
        memcpy(p, dims, (size_t)n * sizeof(*p));
    }
    return p;
}

int ur_orbax__parse_shape_in(const cJSON *v, ur_orbax_arena *a, const uint64_t **dims, int *rank,
                             const char *what, ur_err *err)
{
    uint64_t tmp[UR_MAX_RANK];
    int n = 0;
    int rc = ur_orbax__parse_shape(v, tmp, &n, what, err);
    if (rc < 0) {
        return rc;
    }
    *dims = ur_orbax__arena_dims(a, tmp, n);
    if (n > 0 && *dims == NULL) {
        return ur_err_oom(err);
    }
    *rank = n;
    return UR_OK;
}

int ur_orbax__put_shape(ur_buf *b, const uint64_t *dims, int rank, ur_err *err)
{
    int rc = ur_buf_append_byte(b, '[', err);
    for (int i = 0; rc == UR_OK && i < rank; i++) {
        rc = i == 0 ? UR_OK : ur_buf_append(b, ", ", 2, err);
        if (rc == UR_OK) {
            rc = ur_buf_put_dec(b, dims[i], err);
        }
    }
    if (rc == UR_OK) {
        rc = ur_buf_append_byte(b, ']', err);
    }
    return rc;
}

int ur_orbax__append_sink(void *buf, const void *data, size_t n, ur_err *err)
{
    return ur_buf_append(buf, data, n, err);
}

/* A piece: large enough that the sink's per-call cost does not count, small enough that
 * two of them (one per emitting thread) are nothing beside the run's other memory. */
#define SINK_PIECE_BYTES ((size_t)1 << 20)

int ur_orbax__sink_piece(ur_buf *b, ur_orbax_sink sink, void *ctx, ur_err *err)
{
    if (b->len < SINK_PIECE_BYTES) {
        return UR_OK;
    }
    int rc = sink(ctx, b->data, b->len, err);
    ur_buf_reset(b);
    return rc;
}

/* ---- a document's entries emitted two pieces at a time ---------------------------------
 * Round k: this thread emits piece 2k while the second thread hands piece 2k - 1 (emitted in
 * the round before) to the sink and emits piece 2k + 1; then this thread hands piece 2k to the
 * sink. The pieces reach the sink in order, one thread at a time, and each thread both emits
 * and writes (the writes were a third of the commit's stretch on this thread alone). */

typedef struct {
    const void *src;
    ur_orbax_range_fn emit;
    ur_orbax_sink sink;
    void *ctx;
    size_t lo, hi;
    ur_buf out;
    int pending; /* out holds a piece not yet handed to the sink */
    int sink_failed;
} piece;

static int second_run(void *arg, ur_err *err)
{
    piece *p = arg;
    int rc = UR_OK;
    if (p->pending) {
        p->pending = 0;
        rc = p->sink(p->ctx, p->out.data, p->out.len, err);
        p->sink_failed = rc < 0;
    }
    if (rc == UR_OK && p->lo < p->hi) {
        ur_buf_reset(&p->out);
        rc = p->emit(p->src, &p->out, p->lo, p->hi, err);
        p->pending = rc == UR_OK;
    }
    return rc;
}

int ur_orbax__emit_pieces(const void *src, size_t n, size_t per, ur_orbax_range_fn emit,
                          ur_orbax_sink sink, void *ctx, ur_err *err)
{
    piece other = {src, emit, sink, ctx, 0, 0, {0}, 0, 0};
    ur_buf mine;
    int rc = UR_OK;
    ur_buf_init(&mine, 0);
    ur_buf_init(&other.out, 0);
    for (size_t lo = 0; rc == UR_OK && lo < n; lo += 2 * per) {
        size_t mid = n - lo > per ? lo + per : n;
        ur_side side;
        int side_rc;
        other.lo = mid;
        other.hi = n - mid > per ? mid + per : n;
        ur_side_start(&side, second_run, &other);
        ur_buf_reset(&mine);
        rc = emit(src, &mine, lo, mid, err);
        side_rc = ur_side_join(&side);
        /* the first failure in the document's order: the second thread's write of the piece
         * before this one's, this one's emission, the second thread's emission after it */
        if (side_rc < 0 && (other.sink_failed || rc == UR_OK)) {
            *err = side.err;
            rc = side_rc;
        }
        if (rc == UR_OK) {
            rc = sink(ctx, mine.data, mine.len, err);
        }
    }
    if (rc == UR_OK && other.pending) {
        rc = sink(ctx, other.out.data, other.out.len, err);
    }
    ur_buf_dispose(&mine);
    ur_buf_dispose(&other.out);
    return rc;
}
