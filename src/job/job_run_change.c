/* What differs between two run texts (unroll/job_share.h, ur_job_run_change): the first
 * change of the input's or the config's identity, named for the message that refuses a rerun
 * over a changed input. A pure comparison of two texts; the lines are job_ident.c's. */
#include "unroll/job_share.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *p;
    size_t len;
} line;

/* The line starting at p (without its '\n'); the next one starts at p + len + 1 unless p[len]
 * is the end. */
static line line_at(const char *p)
{
    const char *nl = strchr(p, '\n');
    line l = {p, nl != NULL ? (size_t)(nl - p) : strlen(p)};
    return l;
}

static const char *next_line(line l)
{
    return l.p[l.len] == '\n' ? l.p + l.len + 1 : NULL;
}

/* 1 for the identity lines: "file ...", "files ...", "content ...". */
static int is_ident(line l)
{
    static const char *const kinds[3] = {"file ", "files ", "content "};
    for (size_t i = 0; i < 3; i++) {
        size_t k = strlen(kinds[i]);
        if (l.len > k && strncmp(l.p, kinds[i], k) == 0) {
            return 1;
        }
    }
    return 0;
}

/* The next line of text from p on that is (ident 1) or is not (ident 0) an identity line;
 * .p NULL at the end. */
static line next_of(const char *p, int ident)
{
    while (p != NULL && *p != '\0') {
        line l = line_at(p);
        if (is_ident(l) == ident) {
            return l;
        }
        p = next_line(l);
    }
    return (line){NULL, 0};
}

/* The other lines than the identity's are the same, in the same order. */
static int same_arguments(const char *have, const char *want)
{
    line a = next_of(have, 0), b = next_of(want, 0);
    while (a.p != NULL && b.p != NULL) {
        if (a.len != b.len || memcmp(a.p, b.p, a.len) != 0) {
            return 0;
        }
        a = next_of(next_line(a), 0);
        b = next_of(next_line(b), 0);
    }
    return a.p == NULL && b.p == NULL;
}

/* The identity line of text equal to l (same: 1), or else the one of the same kind and key
 * (*match, same 0); .p NULL when neither. */
static line find(const char *text, line l, int *same)
{
    const char *sp1 = memchr(l.p, ' ', l.len);
    const char *sp2 = memchr(sp1 + 1, ' ', l.len - (size_t)(sp1 + 1 - l.p));
    size_t head = sp2 != NULL ? (size_t)(sp2 - l.p) + 1 : l.len; /* "<kind> <key> " */
    line keyed = {NULL, 0};
    for (line c = next_of(text, 1); c.p != NULL; c = next_of(next_line(c), 1)) {
        if (c.len == l.len && memcmp(c.p, l.p, l.len) == 0) {
            *same = 1;
            return c;
        }
        if (keyed.p == NULL && c.len >= head && memcmp(c.p, l.p, head) == 0) {
            keyed = c;
        }
    }
    *same = 0;
    return keyed;
}

/* The value of "<name>=" in the line, up to the next space, into v. */
static void field(line l, const char *name, char *v, size_t n)
{
    size_t k = strlen(name);
    v[0] = '\0';
    for (const char *p = l.p + 1; p + k < l.p + l.len; p++) {
        if (p[-1] == ' ' && strncmp(p, name, k) == 0 && p[k] == '=') {
            const char *e = memchr(p, ' ', (size_t)(l.p + l.len - p));
            size_t len = (size_t)((e != NULL ? e : l.p + l.len) - (p + k + 1));
            snprintf(v, n, "%.*s", (int)len, p + k + 1);
            return;
        }
    }
}

/* what: "<key> (<how>)", the key of line l (of kind "file", "files" or "content"). */
static void describe(line l, const char *how, char *what, size_t n)
{
    const char *key = (const char *)memchr(l.p, ' ', l.len) + 1;
    const char *e = memchr(key, ' ', (size_t)(l.p + l.len - key));
    int klen = (int)((e != NULL ? e : l.p + l.len) - key);
    if (klen > 7 && strncmp(key, "config:", 7) == 0) {
        snprintf(what, n, "the config file %.*s (%s)", klen - 7, key + 7, how);
    } else {
        snprintf(what, n, "%.*s (%s)", klen, key, how);
    }
}

/* what for the line `now` of the new text against `was`, the old one of the same key. */
static void describe_change(line was, line now, char *what, size_t n)
{
    char a[64], b[64], va[96], vb[96], how[400];
    if (strncmp(now.p, "content ", 8) == 0) {
        describe(now, "content", what, n);
        return;
    }
    field(was, strncmp(now.p, "files ", 6) == 0 ? "n" : "size", a, sizeof a);
    field(now, strncmp(now.p, "files ", 6) == 0 ? "n" : "size", b, sizeof b);
    if (strncmp(now.p, "files ", 6) == 0) {
        snprintf(how, sizeof how, "values changed: %s -> %s values", a, b);
    } else if (strcmp(a, b) != 0) {
        snprintf(how, sizeof how, "size %s -> %s", a, b);
    } else {
        field(was, "v", va, sizeof va);
        field(now, "v", vb, sizeof vb);
        snprintf(how, sizeof how, "rewritten, same size: version %s -> %s", va, vb);
    }
    describe(now, how, what, n);
}

/* 1 when the line `now` and `was` (the same key's) differ only in the version: the value was
 * written again, maybe with the same bytes. */
static int version_only(line was, line now)
{
    char a[64], b[64];
    if (strncmp(now.p, "file ", 5) != 0) {
        return 0;
    }
    field(was, "size", a, sizeof a);
    field(now, "size", b, sizeof b);
    return strcmp(a, b) == 0;
}

/* The changes from have to want, the first one named in what: one that shows in the sizes,
 * the contents or the keys first, else a value only written again (its version); the count of
 * changes into *n. */
static void first_change(const char *have, const char *want, char *what, size_t what_size,
                         size_t *n)
{
    line rewritten = {NULL, 0}, rewritten_was = {NULL, 0};
    int named = 0, same;
    *n = 0;
    for (line l = next_of(want, 1); l.p != NULL; l = next_of(next_line(l), 1)) {
        line old = find(have, l, &same);
        if (same) {
            continue;
        }
        ++*n;
        if (old.p != NULL && version_only(old, l)) {
            if (rewritten.p == NULL) {
                rewritten = l;
                rewritten_was = old;
            }
        } else if (!named) {
            named = 1;
            if (old.p != NULL) {
                describe_change(old, l, what, what_size);
            } else {
                describe(l, strncmp(l.p, "files ", 6) == 0 ? "values changed" : "new", what,
                         what_size);
            }
        }
    }
    for (line l = next_of(have, 1); l.p != NULL; l = next_of(next_line(l), 1)) {
        line now = find(want, l, &same);
        if (same || now.p != NULL) {
            continue; /* counted above */
        }
        ++*n;
        if (!named) {
            named = 1;
            describe(l, strncmp(l.p, "files ", 6) == 0 ? "values changed" : "removed", what,
                     what_size);
        }
    }
    if (!named && rewritten.p != NULL) {
        describe_change(rewritten_was, rewritten, what, what_size);
    }
}

int ur_job_run_change(const char *have, const char *want, char *what, size_t what_size)
{
    size_t n = 0;
    if (!same_arguments(have, want)) {
        return 0;
    }
    first_change(have, want, what, what_size, &n);
    if (n > 1) {
        size_t len = strlen(what);
        snprintf(what + len, what_size - len, " and %zu other change%s", n - 1, n == 2 ? "" : "s");
    }
    return n > 0;
}
