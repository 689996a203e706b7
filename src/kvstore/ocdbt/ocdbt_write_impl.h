/* The OCDBT writer's private state, shared by its three files: ocdbt_write.c (the kvstore
 * driver: entries held until a commit, data files, the commit itself), ocdbt_write_tree.c
 * (the B+tree of a commit: built from sorted entries, or merged copy on write into the
 * latest generation's tree) and ocdbt_write_version.c (the version tree and the manifest). */
#ifndef UR_OCDBT_WRITE_IMPL_H
#define UR_OCDBT_WRITE_IMPL_H

#include "../kvstore_impl.h"
#include "ocdbt_internal.h"

#include "unroll/ocdbt.h"
#include "unroll/strmap.h"

#include <stddef.h>
#include <stdint.h>

/* One key written, 32 bytes: a many-leaf output holds hundreds of thousands until the commit.
 * Keys and inline values below POOL_MIN_VALUE live in the writer's byte blocks (wbytes), the
 * longer values in its pool; no entry owns memory of its own. A value's length has 40 bits
 * (wentry_len): a value of 1 TiB or more is refused. */
typedef struct {
    const uint8_t *key;
    union {
        const uint8_t *value; /* inline */
        uint64_t offset;      /* indirect */
    };
    uint32_t seq;    /* write order (the last write of a key wins) */
    uint32_t file;   /* indirect */
    uint32_t len_lo; /* the value's length, low 32 bits */
    uint16_t klen;
    uint8_t len_hi; /* and its next 8 */
    uint8_t indirect;
} wentry;

#define WENTRY_MAX_LEN (((uint64_t)1 << 40) - 1)

static inline uint64_t wentry_len(const wentry *e)
{
    return (uint64_t)e->len_lo | (uint64_t)e->len_hi << 32;
}

/* 0, or -1 when n does not fit (the caller reports it). */
static inline int wentry_set_len(wentry *e, uint64_t n)
{
    if (n > WENTRY_MAX_LEN) {
        return -1;
    }
    e->len_lo = (uint32_t)n;
    e->len_hi = (uint8_t)(n >> 32);
    return 0;
}

/* Bytes that live until the writer closes, bump-allocated in blocks (no per-key malloc
 * header or alignment: a key of 46 bytes costs 46). */
#define WBYTES_BLOCK ((size_t)1 << 20)
typedef struct wbytes {
    struct wbytes *next;
    size_t used, cap;
    uint8_t data[];
} wbytes;

/* One entry of a tree level: a node written below, seen from its parent. */
typedef struct {
    const uint8_t *key; /* full first key of the subtree (borrowed from the wentries) */
    size_t klen;
    size_t child_prefix; /* length of the child's implicit prefix (absolute) */
    ur_ocdbt_ref ref;    /* file = writer file index */
    ur_ocdbt_stats stats;
} witem;

/* A key written lately, whole, for the next keys to be packed against (ocdbt_write.c). */
#define PACK_BACK 4
typedef struct {
    uint8_t *key;
    size_t len, cap;
} wprev;

typedef struct {
    ur_kvstore base;
    ur_kvstore *store; /* the base store holding manifest.ocdbt and d/ */
    int own_store;     /* closed with the writer */
    char *dir;         /* the database's name for on_data_file and messages */
    ur_ocdbt_write_opts opts;
    ur_ocdbt_config config;
    wentry *e;
    size_t n, cap;
    char **files; /* "d/<32 hex>", or base + relative path of a file referred to */
    size_t *file_base; /* length of each file's base path (0 for the writer's own) */
    size_t n_files, cap_files; /* cap_files: the room of files and of file_base */
    ur_strmap ext_files; /* every file's path (own and referred-to) -> index in files */
    ur_kvstore_writer *cur; /* the data file being appended to, or NULL */
    size_t cur_index;   /* its index in files (files referred to may come after it) */
    int committed;
    int committing; /* data files closed from now on hold nodes: not handed to on_data_file */
    uint64_t held;     /* bytes of inline values held for e[] */
    ur_strmap values;  /* pool: an inline value's bytes -> its one copy (value = pointer) */
    wbytes *bytes;     /* keys (once unpacked) and short inline values */
    /* Keys written since the last commit, each coded against the key of one of the entries
     * before it (pack_key): an output's keys share long prefixes
     * ("params.params.decoder.layers_0.") and a many-leaf output holds 400,000 of them until the
     * commit unpacks them. */
    wbytes *packed;
    wprev prev[PACK_BACK]; /* the last n_prev entries' keys, whole; prev[prev_at] the last */
    unsigned prev_at, n_prev;
    uint64_t seed_state; /* 0: random ids; else the splitmix64 state */
    /* The versions of the last manifest written (or of the database resumed): the inline
     * ones and the version nodes, highest first; every ref's file is an index in files. The
     * latest version's tree is the base the entries e[] are merged into at the next commit
     * (e[] holds only what was written since). */
    ur_ocdbt_version *vers;
    size_t n_vers, cap_vers;
    ur_ocdbt_vnode_ref *vnodes;
    size_t n_vnodes, cap_vnodes;
    wbytes *tmp; /* bytes that live for one commit (keys read back from the base tree) */
} ocdbt_writer;

/* ocdbt_write.c */
/* Append n bytes to the data files; where they landed in *file / *offset. */
int ur_ocdbt_write__append_data(ocdbt_writer *w, const void *p, size_t n, uint32_t *file,
                                uint64_t *offset, ur_err *err);
/* n bytes from the blocks of `list` (NULL: out of memory). */
uint8_t *ur_ocdbt_write__keep_in(wbytes **list, size_t n);
/* The index in w->files of base + rel, added when new. */
int ur_ocdbt_write__ext_file(ocdbt_writer *w, const char *base, const char *rel, uint32_t *index,
                             ur_err *err);
/* The index in w->files of the file `f` names (a node read back), added when new. */
int ur_ocdbt_write__file_index(ocdbt_writer *w, const ur_ocdbt_file_id *f, uint32_t *index,
                               ur_err *err);

/* ocdbt_write_tree.c */
/* A node's data-file table from the writer files flagged in `used`; map: writer file index
 * -> table index. */
int ur_ocdbt_write__make_table(ocdbt_writer *w, const uint8_t *used, ur_ocdbt_table *t,
                               uint32_t *map, ur_err *err);
/* The root of this commit's tree in *v (r: the reader of the latest generation, or NULL). */
int ur_ocdbt_write__tree(ocdbt_writer *w, ur_ocdbt_reader *r, ur_ocdbt_version *v, ur_err *err);

/* ocdbt_write_version.c */
/* Add *v to the writer's versions, writing the version-tree nodes it needs. */
int ur_ocdbt_write__append_version(ocdbt_writer *w, ur_ocdbt_reader *r, ur_ocdbt_version *v,
                                   ur_err *err);
/* manifest.ocdbt naming the versions held, written last and whole. */
int ur_ocdbt_write__manifest(ocdbt_writer *w, ur_err *err);

#endif
