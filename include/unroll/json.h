/* cJSON through unroll's allocator, with parse failures that tell out-of-memory from bad
 * JSON (cJSON itself returns NULL for both). */
#ifndef UNROLL_JSON_H
#define UNROLL_JSON_H

#include "unroll/buf.h"
#include "unroll/err.h"

#include <stddef.h>

struct cJSON;

/* Make cJSON allocate through ur_malloc/ur_free (so the fail-after hook reaches it). Done once
 * per process (thread-safe); main calls it at start-up and ur_json_parse makes sure of it. */
void ur_json_init(void);

/* Parse `len` bytes of JSON into *out (free with cJSON_Delete). `*end` (when end is not NULL)
 * receives where the value ended; only whitespace may follow it. UR_ENOMEM "out of memory"
 * when an allocation failed during the parse; else UR_ECORRUPT "invalid JSON near byte N"
 * (or "trailing bytes after JSON at N"), the offset recorded. */
int ur_json_parse(struct cJSON **out, const char *text, size_t len, ur_err *err);

/* A region cJSON allocates from on this thread while it is in use: many small documents
 * parsed and dropped one after another (the entries of a 100,000-leaf _METADATA, a few dozen
 * nodes each) cost a pointer bump per node instead of a malloc and a free under the process's
 * one heap lock, which the parsing threads fought over. What does not fit goes to ur_malloc;
 * cJSON_Delete of the region's nodes is a no-op. Reset it only once no tree parsed since the
 * last reset is alive. Stands aside while a test fails allocations in turn. */
typedef struct {
    unsigned char *base;
    size_t used, cap;
} ur_json_scratch;

/* A region of about `cap` bytes (none when memory is short: cJSON then uses ur_malloc). */
void ur_json_scratch_init(ur_json_scratch *s, size_t cap);
/* Use s for this thread's cJSON allocations from now on (NULL: stop). */
void ur_json_scratch_use(ur_json_scratch *s);
/* Everything allocated from s is gone. */
void ur_json_scratch_reset(ur_json_scratch *s);
void ur_json_scratch_dispose(ur_json_scratch *s);

/* Called with each member of an object: its key, and its value's text, unparsed (the callee
 * parses it, which checks it). A negative return stops the walk with that status. */
typedef int (*ur_json_member_fn)(void *ctx, const char *key, const char *value, size_t len,
                                 ur_err *err);

/* Walk the members of the JSON object `text` in order without building its tree: a large
 * document costs its own size plus one member's tree, where cJSON's tree of it is about ten
 * times its size. UR_ECORRUPT when the object's own syntax is wrong (the values are left to
 * `fn`), offsets relative to `text`. */
int ur_json_each_member(const char *text, size_t len, ur_json_member_fn fn, void *ctx,
                        ur_err *err);

/* Called with each element of an array: its index and its text, unparsed. */
typedef int (*ur_json_element_fn)(void *ctx, size_t index, const char *value, size_t len,
                                  ur_err *err);

/* Walk the elements of the JSON array `text` in order without building its tree, as
 * ur_json_each_member does for an object. */
int ur_json_each_element(const char *text, size_t len, ur_json_element_fn fn, void *ctx,
                         ur_err *err);

/* Append `s` to b as a JSON string: its bytes as they are (UTF-8 passes through), but the
 * quote, the backslash and control characters (as \u00XX). For text unroll writes itself;
 * Orbax's files, which Python writes ASCII-only, have their own writer (orbax_json.c). */
int ur_json_put_string(ur_buf *b, const char *s, ur_err *err);

#endif
