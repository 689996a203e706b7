/* Rearrangements (unroll/tensor.h): an einops-style pattern read once per tensor, then boxes of
 * the input mapped to where they land in the output, as strided views. */
#include "unroll/tensor.h"

#include "unroll/ckd.h"
#include "unroll/num.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME_MAX_LEN 15

typedef struct {
    char name[NAME_MAX_LEN + 1];
    uint64_t size; /* 0: unknown yet */
    int axis;      /* the input axis it is part of */
    int used;      /* named on the output side */
    uint64_t lo, len; /* the range the output keeps ("[lo:hi]"); len 0: all of it */
} part;

typedef struct {
    const char *s;
    size_t at;
} cursor;

static void skip_space(cursor *c)
{
    while (c->s[c->at] == ' ') {
        c->at++;
    }
}

/* A name ([a-z_][a-z0-9_]*) or a number, into out; 0 when there is none here. */
static int word(cursor *c, char *out)
{
    size_t n = 0;
    skip_space(c);
    while (isalnum((unsigned char)c->s[c->at]) || c->s[c->at] == '_') {
        if (n == NAME_MAX_LEN) {
            return 0;
        }
        out[n++] = c->s[c->at++];
    }
    out[n] = '\0';
    return n > 0;
}

static int find(const part *p, int n, const char *name)
{
    for (int i = 0; i < n; i++) {
        if (strcmp(p[i].name, name) == 0) {
            return i;
        }
    }
    return -1;
}

static int bad(ur_err *err, const char *pattern, const char *why)
{
    return ur_err_set(err, UR_EINVAL, "rearrangement '%s': %s", pattern, why);
}

/* The input side: axes, a parenthesized group splitting one axis into parts. */
static int parse_input(ur_rearrange *r, part *p, cursor *c, int rank, const uint64_t *shape,
                       ur_err *err)
{
    int axis = 0;
    for (;;) {
        int group = 0, first = r->n_parts, unknown = -1;
        uint64_t known = 1;
        char w[NAME_MAX_LEN + 1];
        skip_space(c);
        if (c->s[c->at] == '-') {
            break;
        }
        if (axis == rank) {
            return bad(err, c->s, "more input axes than the tensor has");
        }
        if (c->s[c->at] == '(') {
            group = 1;
            c->at++;
        }
        do {
            if (!word(c, w) || r->n_parts == UR_MAX_RANK) {
                return bad(err, c->s, "an axis name expected");
            }
            part *q = &p[r->n_parts];
            memset(q, 0, sizeof *q);
            q->axis = axis;
            if (isdigit((unsigned char)w[0])) {
                if (ur_num_parse_u64(w, strlen(w), &q->size) < 0) {
                    return bad(err, c->s, "a part size expected");
                }
                snprintf(q->name, sizeof q->name, "#%d", r->n_parts);
                if (q->size == 0) {
                    return bad(err, c->s, "a part of size 0");
                }
            } else if (find(p, r->n_parts, w) >= 0) {
                return bad(err, c->s, "an axis named twice");
            } else {
                memcpy(q->name, w, sizeof q->name);
            }
            if (q->size == 0 && group) {
                if (unknown >= 0) {
                    return bad(err, c->s, "two parts of unknown size in one group");
                }
                unknown = r->n_parts;
            } else if (q->size != 0) {
                known *= q->size;
            }
            r->n_parts++;
            skip_space(c);
        } while (group && c->s[c->at] != ')' && c->s[c->at] != '\0');
        if (group) {
            if (c->s[c->at] != ')') {
                return bad(err, c->s, "an unclosed group");
            }
            c->at++;
            if (unknown >= 0) {
                if (known == 0 || shape[axis] % known != 0) {
                    return bad(err, c->s, "a group that does not divide its axis");
                }
                p[unknown].size = shape[axis] / known;
            } else if (known != shape[axis]) {
                return bad(err, c->s, "a group whose sizes do not make its axis");
            }
        } else if (p[first].size == 0) {
            p[first].size = shape[axis];
        } else if (p[first].size != shape[axis]) {
            return bad(err, c->s, "a number that is not the axis' size");
        }
        axis++;
    }
    if (axis != rank) {
        return bad(err, c->s, "fewer input axes than the tensor has");
    }
    return UR_OK;
}

/* A number at the cursor, into *v (digits, then a character in `end`); 0 when there is none
 * or it overflows. */
static int number(cursor *c, uint64_t *v, const char *end)
{
    size_t n = 0;
    while (isdigit((unsigned char)c->s[c->at + n])) {
        n++;
    }
    if (n == 0 || strchr(end, c->s[c->at + n]) == NULL || c->s[c->at + n] == '\0' ||
        ur_num_parse_u64(c->s + c->at, n, v) < 0) {
        return 0;
    }
    c->at += n;
    return 1;
}

/* A kept range after an output part, "[lo:hi]" or "[lo:]" (hi: the part's size), into
 * q->lo, q->len; none: the whole part. */
static int kept_range(part *q, cursor *c, ur_err *err)
{
    uint64_t lo = 0, hi = q->size;
    if (c->s[c->at] != '[') {
        return UR_OK;
    }
    c->at++;
    if (!number(c, &lo, ":") || c->s[c->at++] != ':' ||
        (c->s[c->at] != ']' && !number(c, &hi, "]")) || c->s[c->at++] != ']') {
        return bad(err, c->s, "a range [lo:hi] expected");
    }
    if (lo >= hi || hi > q->size) {
        return bad(err, c->s, "a range outside its part, or empty");
    }
    q->lo = lo;
    q->len = hi - lo;
    return UR_OK;
}

/* The output side: axes, a parenthesized group merging parts into one axis. */
static int parse_output(ur_rearrange *r, part *p, cursor *c, ur_err *err)
{
    int k = 0;
    for (;;) {
        int group = 0;
        char w[NAME_MAX_LEN + 1];
        uint64_t size = 1;
        skip_space(c);
        if (c->s[c->at] == '\0') {
            break;
        }
        if (r->out_rank == UR_MAX_RANK) {
            return bad(err, c->s, "too many output axes");
        }
        if (c->s[c->at] == '(') {
            group = 1;
            c->at++;
        }
        do {
            int i;
            if (!word(c, w)) {
                return bad(err, c->s, "an axis name expected");
            }
            if (isdigit((unsigned char)w[0])) {
                /* a literal on the output side names the input part of that size */
                uint64_t literal = 0;
                if (ur_num_parse_u64(w, strlen(w), &literal) < 0) {
                    return bad(err, c->s, "a part size expected");
                }
                i = -1;
                for (int j = 0; j < r->n_parts && i < 0; j++) {
                    if (p[j].name[0] == '#' && !p[j].used && p[j].size == literal) {
                        i = j;
                    }
                }
            } else {
                i = find(p, r->n_parts, w);
            }
            if (i < 0 || p[i].used) {
                return bad(err, c->s, "an output axis not on the input side, or named twice");
            }
            p[i].used = 1;
            r->perm[k++] = i;
            if (kept_range(&p[i], c, err) < 0) {
                return UR_EINVAL;
            }
            if (ur_ckd_mul64(&size, size, p[i].len > 0 ? p[i].len : p[i].size)) {
                return bad(err, c->s, "sizes overflow");
            }
            skip_space(c);
        } while (group && c->s[c->at] != ')' && c->s[c->at] != '\0');
        if (group) {
            if (c->s[c->at] != ')') {
                return bad(err, c->s, "an unclosed group");
            }
            c->at++;
        }
        r->out_shape[r->out_rank] = size;
        r->out_group_end[r->out_rank++] = k;
    }
    if (k != r->n_parts) {
        return bad(err, c->s, "an input axis left out of the output");
    }
    return UR_OK;
}

int ur_rearrange_parse(ur_rearrange *r, const char *pattern, int rank, const uint64_t *shape,
                       ur_err *err)
{
    part p[UR_MAX_RANK];
    cursor c = {pattern, 0};
    int rc;

    memset(r, 0, sizeof *r);
    if (rank < 0 || rank > UR_MAX_RANK) {
        return bad(err, pattern, "a bad rank");
    }
    r->in_rank = rank;
    rc = parse_input(r, p, &c, rank, shape, err);
    if (rc == UR_OK && (c.s[c.at] != '-' || c.s[c.at + 1] != '>')) {
        rc = bad(err, pattern, "'->' expected");
    }
    if (rc < 0) {
        return rc;
    }
    c.at += 2;
    rc = parse_output(r, p, &c, err);
    for (int i = 0; i < r->n_parts; i++) {
        r->part_size[i] = p[i].size;
        r->part_axis[i] = p[i].axis;
        r->cut_lo[i] = p[i].lo;
        r->cut_len[i] = p[i].len > 0 ? p[i].len : p[i].size;
    }
    return rc;
}

/* The parts' strides in a dense C-order buffer of buf_shape (per input axis) holding the box:
 * within an axis, the first part is the outermost. */
static void part_strides(const ur_rearrange *r, const uint64_t *buf_shape, int64_t *stride)
{
    int64_t s = 1;
    for (int i = r->n_parts - 1; i >= 0; i--) {
        stride[i] = s;
        /* the part's extent in the box: the whole part, except the first part of its axis,
         * which holds the box's count divided by the inner parts */
        uint64_t inner = 1;
        for (int j = i + 1; j < r->n_parts && r->part_axis[j] == r->part_axis[i]; j++) {
            inner *= r->part_size[j];
        }
        int first_of_axis = i == 0 || r->part_axis[i - 1] != r->part_axis[i];
        s *= (int64_t)(first_of_axis ? buf_shape[r->part_axis[i]] / inner : r->part_size[i]);
    }
}

int ur_rearrange_box(const ur_rearrange *r, const uint64_t *start, const uint64_t *count,
                     const uint64_t *buf_shape, ur_rearrange_box_map *m, ur_err *err)
{
    int64_t src_stride[UR_MAX_RANK];
    uint64_t pstart[UR_MAX_RANK], pcount[UR_MAX_RANK];

    memset(m, 0, sizeof *m);
    /* each input axis' box as a box of its parts: only the first (outermost) part may be cut */
    for (int i = 0; i < r->n_parts; i++) {
        int a = r->part_axis[i];
        int first_of_axis = i == 0 || r->part_axis[i - 1] != a;
        uint64_t inner = 1;
        for (int j = i + 1; j < r->n_parts && r->part_axis[j] == a; j++) {
            inner *= r->part_size[j];
        }
        if (first_of_axis) {
            if (start[a] % inner != 0 || count[a] % inner != 0 || buf_shape[a] % inner != 0) {
                return ur_err_set(err, UR_EUNSUPPORTED,
                                  "a chunk that cuts axis %d inside a part of the rearrangement "
                                  "(box [%llu, +%llu), parts of %llu)",
                                  a, (unsigned long long)start[a], (unsigned long long)count[a],
                                  (unsigned long long)inner);
            }
            pstart[i] = start[a] / inner;
            pcount[i] = count[a] / inner;
        } else {
            pstart[i] = 0;
            pcount[i] = r->part_size[i];
        }
    }
    part_strides(r, buf_shape, src_stride);
    /* the output's parts in its order: C-order strides of the whole output (of the kept
     * ranges) */
    int64_t out_stride[UR_MAX_RANK];
    int64_t s = 1;
    for (int k = r->n_parts - 1; k >= 0; k--) {
        out_stride[k] = s;
        s *= (int64_t)r->cut_len[r->perm[k]];
    }
    m->rank = r->n_parts;
    for (int k = 0; k < r->n_parts; k++) {
        int i = r->perm[k];
        /* the box's part of the kept range [lo, lo + len) */
        uint64_t lo = r->cut_lo[i], hi = lo + r->cut_len[i];
        uint64_t from = pstart[i] > lo ? pstart[i] : lo,
                 to = pstart[i] + pcount[i] < hi ? pstart[i] + pcount[i] : hi;
        m->shape[k] = to > from ? to - from : 0;
        m->src_stride[k] = src_stride[i];
        m->dst_stride[k] = out_stride[k];
        if (m->shape[k] > 0) {
            m->src_offset += (from - pstart[i]) * (uint64_t)src_stride[i];
            m->offset += (from - lo) * (uint64_t)out_stride[k];
        }
    }
    return UR_OK;
}

int ur_rearrange_box_join(ur_rearrange_box_map *m, uint64_t inner, uint64_t run, uint64_t at,
                          ur_err *err)
{
    /* x = q * inner + r (r < inner) -> q * run + at + r: linear in q and in r, so the strides
     * that step q scale by run / inner and those that step r stay */
    uint64_t last = m->offset;
    if (inner == 0 || at > run || run - at < inner) {
        return ur_err_set(err, UR_EINVAL, "join: runs of %llu at %llu of %llu",
                          (unsigned long long)inner, (unsigned long long)at,
                          (unsigned long long)run);
    }
    for (int d = 0; d < m->rank; d++) {
        uint64_t s = (uint64_t)m->dst_stride[d];
        if (m->dst_stride[d] < 0 || (s >= inner && s % inner != 0)) {
            return ur_err_set(err, UR_EINVAL, "join: a stride of %lld across runs of %llu",
                              (long long)m->dst_stride[d], (unsigned long long)inner);
        }
        if (m->shape[d] > 0) {
            last += (m->shape[d] - 1) * s;
        }
        if (s / inner + 1 > (uint64_t)INT64_MAX / run) {
            last = UINT64_MAX; /* the stride itself would overflow */
        }
    }
    if (last == UINT64_MAX || last / inner + 1 > (uint64_t)INT64_MAX / run) {
        return ur_err_set(err, UR_EINVAL, "join: the tensor's elements overflow");
    }
    for (int d = 0; d < m->rank; d++) {
        if ((uint64_t)m->dst_stride[d] >= inner) {
            m->dst_stride[d] = (int64_t)((uint64_t)m->dst_stride[d] / inner * run);
        }
    }
    m->offset = m->offset / inner * run + at + m->offset % inner;
    return UR_OK;
}
