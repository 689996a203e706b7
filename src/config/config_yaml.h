/* A small typed value tree for YAML configs (internal to the config room).
 *
 * Scalars are typed the way MaxText reads its configs: OmegaConf.load = PyYAML's SafeLoader
 * (YAML 1.1 implicit resolvers: yes/no/on/off booleans, 0x/0o/0b and sexagesimal ints, ~ and
 * null) with OmegaConf's extra float resolver (1e-3 and 1.0e5 are floats) and without the
 * timestamp resolver (dates stay strings). Quoted scalars are strings. Aliases, more than one
 * document and duplicate keys are refused, as OmegaConf refuses duplicates. */
#ifndef UNROLL_CONFIG_YAML_H
#define UNROLL_CONFIG_YAML_H

#include "unroll/buf.h"
#include "unroll/err.h"

#include <stddef.h>
#include <stdint.h>

typedef enum {
    UR_Y_NULL,
    UR_Y_BOOL,
    UR_Y_INT,
    UR_Y_FLOAT,
    UR_Y_STR,
    UR_Y_LIST,
    UR_Y_MAP
} ur_ykind;

typedef struct ur_yval ur_yval;
struct ur_yval {
    ur_ykind kind;
    int b;          /* UR_Y_BOOL */
    int64_t i;      /* UR_Y_INT */
    double f;       /* UR_Y_FLOAT */
    char *s;        /* UR_Y_STR */
    size_t n;       /* UR_Y_LIST / UR_Y_MAP: entries */
    size_t cap;
    char **keys;    /* UR_Y_MAP: n keys, in document order */
    ur_yval **vals; /* UR_Y_LIST items / UR_Y_MAP values */
};

/* Parse one YAML document. An empty document gives a UR_Y_NULL value. `name` (a file path
 * or "override") only labels error messages. UR_EINVAL with line and column on bad YAML. */
int ur_config_yaml_parse(ur_yval **out, const char *text, size_t len, const char *name,
                         ur_err *err);

/* Type a plain (unquoted) scalar as the resolver above does. UR_EINVAL: an int out of the
 * int64 range, or a number Python would not accept. */
int ur_config_yaml_resolve(ur_yval **out, const char *s, size_t len, ur_err *err);

int ur_config_yaml_new(ur_yval **out, ur_ykind kind, ur_err *err);
int ur_config_yaml_new_str(ur_yval **out, const char *s, ur_err *err);
void ur_config_yaml_free(ur_yval *v);
int ur_config_yaml_clone(ur_yval **out, const ur_yval *v, ur_err *err);

/* Borrowed value of `key` in a map, or NULL. */
ur_yval *ur_config_yaml_get(const ur_yval *map, const char *key);
/* Set key (replacing an old value, keeping its position). Takes ownership of val, which is
 * freed on failure too. */
int ur_config_yaml_set(ur_yval *map, const char *key, ur_yval *val, ur_err *err);
/* Append a list item; takes ownership of val (freed on failure). */
int ur_config_yaml_push(ur_yval *list, ur_yval *val, ur_err *err);
/* Remove key if present. */
void ur_config_yaml_del(ur_yval *map, const char *key);

/* OmegaConf.merge(dst, src) into dst: maps merge key by key, recursively; anything else is
 * replaced by a copy of the src value. */
int ur_config_yaml_merge(ur_yval *dst, const ur_yval *src, ur_err *err);

/* Python `==` on the values: numbers compare by value across bool/int/float, lists item by
 * item, maps key by key regardless of order. */
int ur_config_yaml_equal(const ur_yval *a, const ur_yval *b);

/* Append v as JSON (floats with 17 significant digits; inf/nan as Infinity/NaN). */
int ur_config_yaml_emit_json(ur_buf *b, const ur_yval *v, ur_err *err);

/* "int", "str", ... for messages. */
const char *ur_config_yaml_kind_name(ur_ykind k);

#endif
