/* Helpers for the Orbax metadata files: a string arena and the JSON conventions Orbax uses
 * (Python json.dumps: ", " and ": " separators, ensure_ascii). */
#include "orbax_impl.h"

#include "unroll/alloc.h"
#include "unroll/json.h"
#include "unroll/side.h"

#include <math.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdint.h>
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

/* ---- a document's entries emitted by two threads, sunk in order -------------------------
 * Each thread takes the next piece not yet taken, emits it into its own buffer, waits for its
 * turn, hands it to the sink and passes the turn on. While one thread sinks piece k, the other
 * emits piece k + 1: both cores are busy whenever emitting costs at least what sinking does
 * (a thread per pair of pieces, as before, left one idle while the other sank). A thread that
 * waits holds a later piece than the one whose turn it is, which the other thread holds:
 * nothing waits in a circle, and one thread alone (no second could start) takes every piece
 * in order and never waits.
 * A failure is ranked by its place in the document (emitting piece k: 2k, sinking it: 2k + 1):
 * nothing after the first one is started, everything before it is done, and it is the one
 * reported, as one thread would report it. */

typedef struct {
    const void *src;
    ur_orbax_range_fn emit;
    ur_orbax_sink sink;
    void *ctx;
    size_t n, per;
    pthread_mutex_t lock;
    pthread_cond_t turn_moved;
    size_t next_piece; /* the next piece to take */
    size_t turn; /* the piece the sink takes next */
    size_t fail_rank; /* SIZE_MAX: none */
    int fail_rc;
    ur_err fail_err;
} pieces;

static void pieces_fail(pieces *ps, size_t rank, int rc, const ur_err *err)
{
    pthread_mutex_lock(&ps->lock);
    if (rank < ps->fail_rank) {
        ps->fail_rank = rank;
        ps->fail_rc = rc;
        ps->fail_err = *err;
    }
    pthread_cond_broadcast(&ps->turn_moved);
    pthread_mutex_unlock(&ps->lock);
}

/* Piece k emitted into out, then sunk in its turn; 0 once nothing is left to do. */
static int pieces_one(pieces *ps, ur_buf *out)
{
    ur_err err;
    size_t k, lo, hi;
    int rc;

    pthread_mutex_lock(&ps->lock);
    k = ps->next_piece;
    lo = k * ps->per;
    if (lo >= ps->n || 2 * k >= ps->fail_rank) {
        pthread_mutex_unlock(&ps->lock);
        return 0;
    }
    ps->next_piece++;
    pthread_mutex_unlock(&ps->lock);

    hi = ps->n - lo > ps->per ? lo + ps->per : ps->n;
    ur_err_clear(&err);
    ur_buf_reset(out);
    rc = ps->emit(ps->src, out, lo, hi, &err);
    if (rc < 0) {
        pieces_fail(ps, 2 * k, rc, &err);
        return 0;
    }
    pthread_mutex_lock(&ps->lock);
    while (ps->turn != k && 2 * k + 1 < ps->fail_rank) {
        pthread_cond_wait(&ps->turn_moved, &ps->lock);
    }
    int go = 2 * k + 1 < ps->fail_rank;
    pthread_mutex_unlock(&ps->lock);
    if (!go) {
        return 0;
    }
    rc = ps->sink(ps->ctx, out->data, out->len, &err);
    if (rc < 0) {
        pieces_fail(ps, 2 * k + 1, rc, &err);
        return 0;
    }
    pthread_mutex_lock(&ps->lock);
    ps->turn = k + 1;
    pthread_cond_broadcast(&ps->turn_moved);
    pthread_mutex_unlock(&ps->lock);
    return 1;
}

static int pieces_run(void *arg, ur_err *err)
{
    pieces *ps = arg;
    ur_buf out;
    (void)err; /* failures are ranked in ps */
    ur_buf_init(&out, 0);
    while (pieces_one(ps, &out)) {
    }
    ur_buf_dispose(&out);
    return UR_OK;
}

int ur_orbax__emit_pieces(const void *src, size_t n, size_t per, ur_orbax_range_fn emit,
                          ur_orbax_sink sink, void *ctx, ur_err *err)
{
    pieces ps;
    ur_side side;

    memset(&ps, 0, sizeof ps);
    ps.src = src;
    ps.emit = emit;
    ps.sink = sink;
    ps.ctx = ctx;
    ps.n = n;
    ps.per = per > 0 ? per : 1;
    ps.fail_rank = SIZE_MAX;
    pthread_mutex_init(&ps.lock, NULL);
    pthread_cond_init(&ps.turn_moved, NULL);
    ur_side_start(&side, pieces_run, &ps);
    pieces_run(&ps, err);
    ur_side_join(&side);
    pthread_cond_destroy(&ps.turn_moved);
    pthread_mutex_destroy(&ps.lock);
    if (ps.fail_rank != SIZE_MAX) {
        *err = ps.fail_err;
        return ps.fail_rc;
    }
    return UR_OK;
}
