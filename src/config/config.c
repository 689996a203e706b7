/* MaxText's configuration, read as src/maxtext/configs/pyconfig.py reads it:
 *
 *   base yml (+ base_config parents, child wins)  <  models/<model_name>.yml  <  key=value
 *   overrides  <  M_<KEY> environment variables
 *
 * with OmegaConf's merge (maps merge, lists are replaced), logical_axis_rules merged by rule
 * name, a key set differently in the model file and on the command line refused unless
 * override_model_config=true, unknown keys refused (MaxText: not a pydantic field; here: not
 * a key of the loaded config or model file), and the derived values of types.py
 * (num_decoder_layers, run_name, base_output_directory, checkpoint_dir). */
#include "config_impl.h"
#include "config_yaml.h"

#include "unroll/alloc.h"
#include "unroll/clock.h"
#include "unroll/config.h"
#include "unroll/fs.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONFIG_BYTES (64u << 20)
#define MAX_BASE_DEPTH 16

struct ur_config {
    ur_yval *root; /* the merged config, a map */
    ur_settings s;
    char *base_output_directory;
    char *run_name;
    char *checkpoint_dir;
    ur_axis_rule *rules;
    const char **mesh; /* storage for every rule's mesh names */
};

/* Keys unroll accepts although a MaxText base.yml may lack them: the NNX switches (absent
 * from NNX-only MaxText releases), and derived fields pydantic accepts and then recomputes. */
static const char *const k_extra_keys[] = {
    "pure_nnx",    "enable_nnx", "pure_nnx_decoder", "num_decoder_layers", "checkpoint_dir",
    "base_config", NULL};

/* ---- Python path helpers ------------------------------------------------------------- */

/* os.path.join(a, b) */
static char *py_join(const char *a, const char *b)
{
    size_t la = strlen(a);
    size_t lb = strlen(b);
    char *r;
    if (b[0] == '/' || la == 0) {
        return ur_strdup(b);
    }
    r = ur_malloc(la + lb + 2);
    if (!r) {
        return NULL;
    }
    memcpy(r, a, la);
    if (a[la - 1] != '/') {
        r[la++] = '/';
    }
    memcpy(r + la, b, lb + 1);
    return r;
}

/* os.path.dirname(p) */
static char *py_dirname(const char *p)
{
    const char *slash = strrchr(p, '/');
    size_t n;
    if (!slash) {
        return ur_strdup("");
    }
    n = (size_t)(slash - p) + 1;
    /* strip trailing slashes unless the head is all slashes */
    while (n > 1 && p[n - 1] == '/') {
        n--;
    }
    if (n == 1 && p[0] == '/') {
        return ur_strdup("/");
    }
    return ur_strndup(p, n);
}

/* os.path.normpath for an absolute path (used by abspath). */
static void normpath_abs(char *p)
{
    char *out = p;
    const char *in = p;
    size_t depth_starts[256];
    size_t nd = 0;
    /* p starts with '/' */
    *out++ = '/';
    in++;
    while (*in) {
        const char *seg = in;
        size_t len;
        while (*in && *in != '/') {
            in++;
        }
        len = (size_t)(in - seg);
        while (*in == '/') {
            in++;
        }
        if (len == 0 || (len == 1 && seg[0] == '.')) {
            continue;
        }
        if (len == 2 && seg[0] == '.' && seg[1] == '.') {
            if (nd > 0) {
                out = p + depth_starts[--nd];
            }
            continue;
        }
        if (nd < 256) {
            depth_starts[nd++] = (size_t)(out - p);
        }
        if (out != p + 1) {
            *out++ = '/';
        }
        memmove(out, seg, len);
        out += len;
    }
    *out = '\0';
    /* undo a leading separator for segments recorded after the root */
    if (out > p + 1 && out[-1] == '/') {
        out[-1] = '\0';
    }
}

static int is_file(const char *path)
{
    return ur_fs_exists(path) && !ur_fs_is_dir(path);
}

/* rel in dir or in one of dir's ancestors, the nearest first: MaxText looks next to the
 * config and then in its configs directory, which for a config in a subfolder of it
 * (inference/, tpu/v5e/) is an ancestor. *out is NULL when no such file exists. */
static int find_up(char **out, const char *dir, const char *rel, ur_err *err)
{
    char *d = ur_strdup(dir);
    *out = NULL;
    while (d) {
        char *up;
        char *cand = py_join(d, rel);
        if (!cand) {
            break;
        }
        if (is_file(cand)) {
            *out = cand;
            ur_free(d);
            return UR_OK;
        }
        ur_free(cand);
        if (d[0] == '\0' || strcmp(d, "/") == 0) {
            ur_free(d);
            return UR_OK;
        }
        up = py_dirname(d);
        ur_free(d);
        d = up;
    }
    ur_free(d);
    return ur_err_oom(err);
}

static const char *env_get(const char *const *envp, const char *name)
{
    size_t n = strlen(name);
    if (!envp) {
        return NULL;
    }
    for (size_t i = 0; envp[i]; i++) {
        if (strncmp(envp[i], name, n) == 0 && envp[i][n] == '=') {
            return envp[i] + n + 1;
        }
    }
    return NULL;
}

/* Python truthiness of a config value. */
static int truthy(const ur_yval *v)
{
    if (!v) {
        return 0;
    }
    switch (v->kind) {
    case UR_Y_NULL:
        return 0;
    case UR_Y_BOOL:
        return v->b;
    case UR_Y_INT:
        return v->i != 0;
    case UR_Y_FLOAT:
        return v->f != 0.0;
    case UR_Y_STR:
        return v->s[0] != '\0';
    case UR_Y_LIST:
    case UR_Y_MAP:
        return v->n > 0;
    }
    return 0;
}

/* ---- loading ------------------------------------------------------------------------- */

static int load_yaml_file(ur_yval **out, const char *path, ur_err *err)
{
    ur_buf b;
    ur_yval *v = NULL;
    int rc;
    ur_buf_init(&b, 0);
    rc = ur_fs_read_file(&b, path, MAX_CONFIG_BYTES, err);
    if (rc < 0) {
        /* A missing or unreadable config (a directory, FIFO or device: refused without
         * blocking) is the user's to fix: exit 2, as documented. */
        if (rc == UR_ENOTFOUND) {
            rc = ur_err_set(err, UR_EINVAL, "config file '%s' not found", path);
        } else if (rc != UR_ENOMEM && err != NULL) {
            ur_err_wrap(err, "config file");
            rc = err->code = UR_EINVAL;
        } else if (rc != UR_ENOMEM) {
            rc = UR_EINVAL;
        }
        goto out;
    }
    rc = ur_config_yaml_parse(&v, b.data ? (const char *)b.data : "", b.len, path, err);
    if (rc < 0) {
        goto out;
    }
    if (v->kind == UR_Y_NULL) {
        v->kind = UR_Y_MAP; /* OmegaConf.load of an empty file is {} */
    }
    if (v->kind != UR_Y_MAP) {
        rc = ur_err_set(err, UR_EINVAL, "%s: a config must be a YAML mapping, not a %s", path,
                        ur_config_yaml_kind_name(v->kind));
        goto out;
    }
    *out = v;
    v = NULL;
out:
    ur_config_yaml_free(v);
    ur_buf_dispose(&b);
    return rc;
}

/* pyconfig._load_config: the file merged over its base_config chain. */
static int load_config_chain(ur_yval **out, const char *path, int depth, ur_err *err)
{
    ur_yval *cfg = NULL;
    ur_yval *parent = NULL;
    const ur_yval *bc;
    char *dir = NULL;
    char *ppath = NULL;
    int rc;
    if (depth > MAX_BASE_DEPTH) {
        return ur_err_set(err, UR_EINVAL, "%s: base_config chain deeper than %d (a cycle?)", path,
                          MAX_BASE_DEPTH);
    }
    rc = load_yaml_file(&cfg, path, err);
    if (rc < 0) {
        return rc;
    }
    bc = ur_config_yaml_get(cfg, "base_config");
    if (bc && bc->kind != UR_Y_NULL) {
        if (bc->kind != UR_Y_STR) {
            rc = ur_err_set(err, UR_EINVAL, "%s: base_config must be a string", path);
            goto out;
        }
        dir = py_dirname(path);
        if (!dir) {
            rc = ur_err_oom(err);
            goto out;
        }
        if (bc->s[0] == '/') {
            ppath = ur_strdup(bc->s);
            rc = ppath ? UR_OK : ur_err_oom(err);
        } else {
            rc = find_up(&ppath, dir, bc->s, err);
            if (rc == UR_OK && !ppath) {
                rc = ur_err_set(err, UR_EINVAL,
                                "%s: base_config '%s' not found next to it or in a parent "
                                "directory",
                                path, bc->s);
            }
        }
        if (rc < 0) {
            goto out;
        }
        rc = load_config_chain(&parent, ppath, depth + 1, err);
        if (rc < 0) {
            ur_err_wrap(err, "base_config of '%s'", path);
            goto out;
        }
        rc = ur_config_yaml_merge(parent, cfg, err);
        if (rc < 0) {
            goto out;
        }
        ur_config_yaml_free(cfg);
        cfg = parent;
        parent = NULL;
    }
    *out = cfg;
    cfg = NULL;
out:
    ur_config_yaml_free(cfg);
    ur_config_yaml_free(parent);
    ur_free(dir);
    ur_free(ppath);
    return rc;
}

/* OmegaConf.from_cli: "a.b=v" sets cli[a][b] = yaml(v); no '=' sets None. */
static int parse_overrides(ur_yval *cli, const char *const *ov, size_t n, ur_err *err)
{
    for (size_t i = 0; i < n; i++) {
        const char *arg = ov[i];
        const char *eq = strchr(arg, '=');
        size_t klen = eq ? (size_t)(eq - arg) : strlen(arg);
        ur_yval *val = NULL;
        ur_yval *node = cli;
        char *key = ur_strndup(arg, klen);
        char *part;
        int rc;
        if (!key) {
            return ur_err_oom(err);
        }
        if (klen == 0) {
            ur_free(key);
            return ur_err_set(err, UR_EINVAL, "override '%s': empty key", arg);
        }
        if (eq) {
            rc = ur_config_yaml_parse(&val, eq + 1, strlen(eq + 1), key, err);
        } else {
            rc = ur_config_yaml_new(&val, UR_Y_NULL, err);
        }
        if (rc < 0) {
            ur_free(key);
            return rc;
        }
        /* walk the dotted key, creating maps */
        part = key;
        for (;;) {
            char *dot = strchr(part, '.');
            ur_yval *next;
            if (!dot) {
                break;
            }
            *dot = '\0';
            next = ur_config_yaml_get(node, part);
            if (!next || next->kind != UR_Y_MAP) {
                ur_yval *m = NULL;
                rc = ur_config_yaml_new(&m, UR_Y_MAP, err);
                if (rc == UR_OK) {
                    rc = ur_config_yaml_set(node, part, m, err);
                }
                if (rc < 0) {
                    ur_config_yaml_free(val);
                    ur_free(key);
                    return rc;
                }
                next = m;
            }
            node = next;
            part = dot + 1;
        }
        rc = ur_config_yaml_set(node, part, val, err);
        ur_free(key);
        if (rc < 0) {
            return rc;
        }
    }
    return UR_OK;
}

static int key_listed(const char *key, const char *const *list)
{
    for (size_t i = 0; list[i]; i++) {
        if (strcmp(list[i], key) == 0) {
            return 1;
        }
    }
    return 0;
}

/* pyconfig._merge_logical_axis_rules / _apply_rules, into a new list in *out. */
static int merge_rules(ur_yval **out, const ur_yval *base, const ur_yval *add, int replace,
                       ur_err *err)
{
    ur_yval *r = NULL;
    int rc = ur_config_yaml_new(&r, UR_Y_LIST, err);
    if (rc < 0) {
        return rc;
    }
    if (replace) {
        base = NULL;
    }
    if (replace && !add) {
        *out = r; /* override_logical_axis_rules with no rules: [] */
        return UR_OK;
    }
    for (size_t pass = 0; pass < 2; pass++) {
        const ur_yval *src = pass == 0 ? base : add;
        if (!src || src->kind != UR_Y_LIST) {
            continue;
        }
        for (size_t i = 0; i < src->n; i++) {
            const ur_yval *rule = src->vals[i];
            ur_yval *c = NULL;
            if (pass == 0 && add && add->kind == UR_Y_LIST) {
                int replaced = 0;
                for (size_t j = 0; j < add->n; j++) {
                    const ur_yval *nr = add->vals[j];
                    if (rule->kind == UR_Y_LIST && rule->n > 0 && nr->kind == UR_Y_LIST &&
                        nr->n > 0 && ur_config_yaml_equal(rule->vals[0], nr->vals[0])) {
                        replaced = 1;
                        break;
                    }
                }
                if (replaced) {
                    continue;
                }
            }
            rc = ur_config_yaml_clone(&c, rule, err);
            if (rc == UR_OK) {
                rc = ur_config_yaml_push(r, c, err);
            }
            if (rc < 0) {
                ur_config_yaml_free(r);
                return rc;
            }
        }
    }
    *out = r;
    return UR_OK;
}

/* validate_no_keys_overridden_twice */
static int check_model_conflicts(const ur_yval *model, const ur_yval *cli, ur_err *err)
{
    char list[512];
    size_t used = 0;
    int n = 0;
    list[0] = '\0';
    for (size_t i = 0; i < model->n; i++) {
        const ur_yval *o = ur_config_yaml_get(cli, model->keys[i]);
        if (o && !ur_config_yaml_equal(model->vals[i], o)) {
            int k = snprintf(list + used, sizeof list - used, "%s'%s'", n ? ", " : "",
                             model->keys[i]);
            if (k > 0 && (size_t)k < sizeof list - used) {
                used += (size_t)k;
            }
            n++;
        }
    }
    if (n) {
        return ur_err_set(err, UR_EINVAL,
                          "Keys [%s] are overridden by both model config and CLI/kwargs with "
                          "different values. This is not allowed, unless setting "
                          "`override_model_config=True`.",
                          list);
    }
    return UR_OK;
}

static int str2bool(const char *v, int *out)
{
    static const char *const t[] = {"y", "yes", "t", "true", "1", NULL};
    static const char *const f[] = {"n", "no", "f", "false", "0", NULL};
    char low[16];
    size_t n = strlen(v);
    if (n >= sizeof low) {
        return -1;
    }
    for (size_t i = 0; i <= n; i++) {
        low[i] = (char)tolower((unsigned char)v[i]);
    }
    if (key_listed(low, t)) {
        *out = 1;
        return 0;
    }
    if (key_listed(low, f)) {
        *out = 0;
        return 0;
    }
    return -1;
}

/* Environment overrides M_<KEY> (pyconfig step 6). */
static int apply_env(ur_yval *root, const ur_yval *cli, const ur_yval *model, int override_model,
                     const char *const *envp, ur_err *err)
{
    if (!envp) {
        return UR_OK;
    }
    for (size_t i = 0; i < root->n; i++) {
        char name[300];
        const char *key = root->keys[i];
        const char *val;
        ur_yval *v = root->vals[i];
        size_t kl = strlen(key);
        char *endp;
        if (kl + 3 > sizeof name) {
            continue;
        }
        name[0] = 'M';
        name[1] = '_';
        for (size_t j = 0; j <= kl; j++) {
            name[j + 2] = (char)toupper((unsigned char)key[j]);
        }
        val = env_get(envp, name);
        if (!val) {
            continue;
        }
        if (ur_config_yaml_get(cli, key)) {
            return ur_err_set(err, UR_EINVAL,
                              "Key '%s' is overridden by both CLI/kwargs and environment "
                              "variable '%s'. This is not allowed.",
                              key, name);
        }
        if (!override_model && model && ur_config_yaml_get(model, key)) {
            return ur_err_set(err, UR_EINVAL,
                              "Key '%s' is overridden by both model config and environment "
                              "variable '%s'. This is not allowed, unless setting "
                              "`override_model_config=True`.",
                              key, name);
        }
        switch (v->kind) {
        case UR_Y_BOOL:
            if (str2bool(val, &v->b) < 0) {
                goto bad;
            }
            break;
        case UR_Y_INT: {
            long long x;
            errno = 0;
            x = strtoll(val, &endp, 10);
            if (errno || endp == val || *endp) {
                goto bad;
            }
            v->i = (int64_t)x;
            break;
        }
        case UR_Y_FLOAT:
            v->f = strtod(val, &endp);
            if (endp == val || *endp) {
                goto bad;
            }
            break;
        case UR_Y_STR: {
            char *s = ur_strdup(val);
            if (!s) {
                return ur_err_oom(err);
            }
            ur_free(v->s);
            v->s = s;
            break;
        }
        default:
            return ur_err_set(err, UR_EINVAL,
                              "Type %s for key '%s' not supported for ENV override.",
                              ur_config_yaml_kind_name(v->kind), key);
        }
        continue;
bad:
        return ur_err_set(err, UR_EINVAL, "Couldn't parse value from ENV '%s' for key '%s'", val,
                          key);
    }
    return UR_OK;
}

/* _prepare_for_pydantic: a top-level string "none" (any case) is None. */
static void none_strings_to_null(ur_yval *root)
{
    for (size_t i = 0; i < root->n; i++) {
        ur_yval *v = root->vals[i];
        if (v->kind == UR_Y_STR && strlen(v->s) == 4 && tolower((unsigned char)v->s[0]) == 'n' &&
            tolower((unsigned char)v->s[1]) == 'o' && tolower((unsigned char)v->s[2]) == 'n' &&
            tolower((unsigned char)v->s[3]) == 'e') {
            ur_free(v->s);
            v->s = NULL;
            v->kind = UR_Y_NULL;
        }
    }
}

/* ---- typed getters (pydantic lax coercion) ---------------------------------------------- */

static int bad_type(const char *key, const char *want, const ur_yval *v, ur_err *err)
{
    if (v->kind == UR_Y_STR) {
        return ur_err_set(err, UR_EINVAL, "config key '%s': expected %s, got str '%s'", key, want,
                          v->s);
    }
    return ur_err_set(err, UR_EINVAL, "config key '%s': expected %s, got %s", key, want,
                      ur_config_yaml_kind_name(v->kind));
}

static int get_key(const ur_config *cfg, const char *key, const ur_yval **v, ur_err *err)
{
    *v = ur_config_yaml_get(cfg->root, key);
    if (!*v) {
        return ur_err_set(err, UR_ENOTFOUND, "config key '%s' not set", key);
    }
    return UR_OK;
}

int ur_config_get_str(const ur_config *cfg, const char *key, const char **out, ur_err *err)
{
    const ur_yval *v;
    int rc = get_key(cfg, key, &v, err);
    if (rc < 0) {
        return rc;
    }
    if (v->kind == UR_Y_NULL) {
        *out = NULL;
        return UR_OK;
    }
    if (v->kind != UR_Y_STR) {
        return bad_type(key, "a string", v, err);
    }
    *out = v->s;
    return UR_OK;
}

static int coerce_bool(const char *key, const ur_yval *v, int *out, ur_err *err)
{
    static const char *const t[] = {"1", "on", "t", "true", "y", "yes", NULL};
    static const char *const f[] = {"0", "off", "f", "false", "n", "no", NULL};
    switch (v->kind) {
    case UR_Y_BOOL:
        *out = v->b;
        return UR_OK;
    case UR_Y_INT:
        if (v->i == 0 || v->i == 1) {
            *out = v->i == 1;
            return UR_OK;
        }
        break;
    case UR_Y_FLOAT:
        if (v->f == 0.0 || v->f == 1.0) {
            *out = v->f == 1.0;
            return UR_OK;
        }
        break;
    case UR_Y_STR: {
        char low[16];
        size_t n = strlen(v->s);
        if (n < sizeof low) {
            for (size_t i = 0; i <= n; i++) {
                low[i] = (char)tolower((unsigned char)v->s[i]);
            }
            if (key_listed(low, t) || key_listed(low, f)) {
                *out = key_listed(low, t);
                return UR_OK;
            }
        }
        break;
    }
    default:
        break;
    }
    return bad_type(key, "a bool", v, err);
}

static int coerce_int(const char *key, const ur_yval *v, int64_t *out, ur_err *err)
{
    switch (v->kind) {
    case UR_Y_INT:
        *out = v->i;
        return UR_OK;
    case UR_Y_BOOL:
        *out = v->b;
        return UR_OK;
    case UR_Y_FLOAT:
        if (v->f == (double)(int64_t)v->f && v->f > -9.2e18 && v->f < 9.2e18) {
            *out = (int64_t)v->f;
            return UR_OK;
        }
        break;
    case UR_Y_STR: {
        char *endp;
        long long x;
        errno = 0;
        x = strtoll(v->s, &endp, 10);
        while (*endp == ' ') {
            endp++;
        }
        if (!errno && endp != v->s && !*endp) {
            *out = (int64_t)x;
            return UR_OK;
        }
        break;
    }
    default:
        break;
    }
    return bad_type(key, "an int", v, err);
}

static int coerce_float(const char *key, const ur_yval *v, double *out, ur_err *err)
{
    switch (v->kind) {
    case UR_Y_FLOAT:
        *out = v->f;
        return UR_OK;
    case UR_Y_INT:
        *out = (double)v->i;
        return UR_OK;
    case UR_Y_BOOL:
        *out = v->b;
        return UR_OK;
    case UR_Y_STR: {
        char *endp;
        double d = strtod(v->s, &endp);
        if (endp != v->s && !*endp) {
            *out = d;
            return UR_OK;
        }
        break;
    }
    default:
        break;
    }
    return bad_type(key, "a float", v, err);
}

int ur_config_get_bool(const ur_config *cfg, const char *key, int *out, ur_err *err)
{
    const ur_yval *v;
    int rc = get_key(cfg, key, &v, err);
    return rc < 0 ? rc : coerce_bool(key, v, out, err);
}

int ur_config_get_int(const ur_config *cfg, const char *key, int64_t *out, ur_err *err)
{
    const ur_yval *v;
    int rc = get_key(cfg, key, &v, err);
    return rc < 0 ? rc : coerce_int(key, v, out, err);
}

int ur_config_get_float(const ur_config *cfg, const char *key, double *out, ur_err *err)
{
    const ur_yval *v;
    int rc = get_key(cfg, key, &v, err);
    return rc < 0 ? rc : coerce_float(key, v, out, err);
}

/* Defaults (types.py) for keys a custom config may lack. */
static int opt_str(const ur_config *cfg, const char *key, const char **out, ur_err *err)
{
    int rc = ur_config_get_str(cfg, key, out, err);
    if (rc == UR_ENOTFOUND || (rc == UR_OK && !*out)) {
        *out = "";
        return UR_OK;
    }
    return rc;
}

static int opt_bool(const ur_config *cfg, const char *key, int dflt, int *out, ur_err *err)
{
    int rc = ur_config_get_bool(cfg, key, out, err);
    if (rc == UR_ENOTFOUND) {
        *out = dflt;
        return UR_OK;
    }
    return rc;
}

static int opt_int(const ur_config *cfg, const char *key, int64_t dflt, int64_t *out, ur_err *err)
{
    int rc = ur_config_get_int(cfg, key, out, err);
    if (rc == UR_ENOTFOUND) {
        *out = dflt;
        return UR_OK;
    }
    return rc;
}

int ur_config_get_int_list(const ur_config *cfg, const char *key, int64_t **out, size_t *n,
                           ur_err *err)
{
    const ur_yval *v;
    int64_t *a;
    int rc = get_key(cfg, key, &v, err);
    if (rc < 0) {
        return rc;
    }
    if (v->kind == UR_Y_NULL || (v->kind == UR_Y_LIST && v->n == 0)) {
        *out = NULL;
        *n = 0;
        return UR_OK;
    }
    if (v->kind != UR_Y_LIST) {
        return bad_type(key, "a list of ints", v, err);
    }
    a = ur_calloc(v->n, sizeof *a);
    if (!a) {
        return ur_err_oom(err);
    }
    for (size_t i = 0; i < v->n; i++) {
        rc = coerce_int(key, v->vals[i], &a[i], err);
        if (rc < 0) {
            ur_free(a);
            return rc;
        }
    }
    *out = a;
    *n = v->n;
    return UR_OK;
}

/* ---- settings ----------------------------------------------------------------------------- */

static int build_rules(ur_config *cfg, ur_err *err)
{
    const ur_yval *list = ur_config_yaml_get(cfg->root, "logical_axis_rules");
    size_t n_mesh = 0;
    size_t m = 0;
    if (!list || list->kind == UR_Y_NULL) {
        return UR_OK;
    }
    if (list->kind != UR_Y_LIST) {
        return ur_err_set(err, UR_EINVAL, "config key 'logical_axis_rules': expected a list");
    }
    for (size_t i = 0; i < list->n; i++) {
        const ur_yval *r = list->vals[i];
        const ur_yval *mesh;
        if (r->kind != UR_Y_LIST || r->n != 2 || r->vals[0]->kind != UR_Y_STR) {
            return ur_err_set(err, UR_EINVAL,
                              "logical_axis_rules[%zu]: expected [name, mesh axes]", i);
        }
        mesh = r->vals[1];
        if (mesh->kind == UR_Y_STR) {
            n_mesh++;
        } else if (mesh->kind == UR_Y_LIST) {
            for (size_t j = 0; j < mesh->n; j++) {
                if (mesh->vals[j]->kind != UR_Y_STR) {
                    return ur_err_set(err, UR_EINVAL,
                                      "logical_axis_rules[%zu]: mesh axes must be strings", i);
                }
            }
            n_mesh += mesh->n;
        } else if (mesh->kind != UR_Y_NULL) {
            return ur_err_set(err, UR_EINVAL,
                              "logical_axis_rules[%zu]: mesh axes must be a string or a list", i);
        }
    }
    cfg->rules = ur_calloc(list->n ? list->n : 1, sizeof *cfg->rules);
    cfg->mesh = ur_calloc(n_mesh ? n_mesh : 1, sizeof *cfg->mesh);
    if (!cfg->rules || !cfg->mesh) {
        return ur_err_oom(err);
    }
    for (size_t i = 0; i < list->n; i++) {
        const ur_yval *r = list->vals[i];
        const ur_yval *mesh = r->vals[1];
        cfg->rules[i].name = r->vals[0]->s;
        cfg->rules[i].mesh = cfg->mesh + m;
        if (mesh->kind == UR_Y_STR) {
            cfg->mesh[m++] = mesh->s;
        } else if (mesh->kind == UR_Y_LIST) {
            for (size_t j = 0; j < mesh->n; j++) {
                cfg->mesh[m++] = mesh->vals[j]->s;
            }
        }
        cfg->rules[i].n_mesh = (size_t)(cfg->mesh + m - cfg->rules[i].mesh);
    }
    cfg->s.axis_rules = cfg->rules;
    cfg->s.n_axis_rules = list->n;
    return UR_OK;
}

/* types.get_individual_scales: layer_scale = floor(log2(scale)) // 3 */
static int layer_scale(int64_t scale, int *out, ur_err *err)
{
    int lg = 0;
    if (scale == 0) {
        return ur_err_set(err, UR_EINVAL, "Global parameter scale cannot be zero.");
    }
    if (scale < 0 || (scale & (scale - 1)) != 0) {
        return ur_err_set(err, UR_EINVAL,
                          "Global parameter scale should be a power of two (got %lld).",
                          (long long)scale);
    }
    while ((scale >> lg) > 1) {
        lg++;
    }
    *out = lg / 3;
    return UR_OK;
}

static int resolve_settings(ur_config *cfg, const ur_config_opts *opts, const char *inferred_bod,
                            ur_err *err)
{
    ur_settings *s = &cfg->s;
    int rc = UR_OK;
    int ls = 0;
    int64_t mult;
    char *tmp = NULL;
    if ((rc = opt_str(cfg, "load_full_state_path", &s->load_full_state_path, err)) ||
        (rc = opt_str(cfg, "load_parameters_path", &s->load_parameters_path, err)) ||
        (rc = opt_str(cfg, "lora_input_adapters_path", &s->lora_input_adapters_path, err)) ||
        (rc = opt_str(cfg, "base_output_directory", &s->base_output_directory, err)) ||
        (rc = opt_str(cfg, "run_name", &s->run_name, err)) ||
        (rc = opt_str(cfg, "model_name", &s->model_name, err)) ||
        (rc = opt_str(cfg, "decoder_block", &s->decoder_block, err)) ||
        (rc = opt_bool(cfg, "force_unroll", 0, &s->force_unroll, err)) ||
        (rc = opt_bool(cfg, "scan_layers", 1, &s->scan_layers, err)) ||
        (rc = opt_bool(cfg, "pure_nnx", 1, &s->pure_nnx, err)) ||
        (rc = opt_bool(cfg, "enable_nnx", 1, &s->enable_nnx, err)) ||
        (rc = opt_bool(cfg, "enable_checkpointing", 1, &s->enable_checkpointing, err)) ||
        (rc = opt_bool(cfg, "checkpoint_storage_use_ocdbt", 1, &s->use_ocdbt, err)) ||
        (rc = opt_bool(cfg, "checkpoint_storage_use_zarr3", 1, &s->use_zarr3, err)) ||
        (rc = opt_int(cfg, "checkpoint_storage_target_data_file_size_bytes", 2147483648LL,
                      &s->target_data_file_size, err)) ||
        (rc = opt_int(cfg, "param_scan_axis", 1, &s->param_scan_axis, err)) ||
        (rc = opt_int(cfg, "global_parameter_scale", 1, &s->global_parameter_scale, err)) ||
        (rc = opt_int(cfg, "base_num_decoder_layers", 16, &s->base_num_decoder_layers, err))) {
        return rc;
    }
    /* keys only some layout families read are theirs to type and check (src/maxtext/) */
    s->config = cfg;
    if (s->model_name[0] == '\0') {
        s->model_name = "default";
    }
    if (s->decoder_block[0] == '\0') {
        s->decoder_block = "llama2";
    }
    if (s->load_parameters_path[0] && s->load_full_state_path[0]) {
        return ur_err_set(err, UR_EINVAL,
                          "At most one of `load_parameters_path` or `load_full_state_path` "
                          "should be set.");
    }
    if (s->load_full_state_path[0] && !s->enable_checkpointing) {
        return ur_err_set(err, UR_EINVAL,
                          "You must set enable_checkpointing=True to resume from "
                          "load_full_state_path.");
    }
    rc = layer_scale(s->global_parameter_scale, &ls, err);
    if (rc < 0) {
        return rc;
    }
    mult = (int64_t)1 << ls;
    if (__builtin_mul_overflow(mult, s->base_num_decoder_layers, &s->num_decoder_layers)) {
        return ur_err_set(err, UR_EINVAL, "num_decoder_layers overflows");
    }
    /* base_output_directory: pyconfig infers abspath("maxtext_output") when it is falsy */
    if (s->base_output_directory[0] == '\0' && inferred_bod) {
        s->base_output_directory = inferred_bod;
    }
    /* run_name: $JOBSET_NAME, else <model_name>_<YYYY-MM-DD-HH-MM> (local time) */
    if (s->run_name[0] == '\0') {
        const char *job = env_get(opts->envp, "JOBSET_NAME");
        if (job && job[0]) {
            cfg->run_name = ur_strdup(job);
        } else {
            char date[64];
            struct tm tmv;
            time_t t = opts->now ? (time_t)opts->now : ur_clock_now_s();
            size_t n;
            if (!localtime_r(&t, &tmv)) {
                return ur_err_set(err, UR_EINTERNAL, "localtime failed");
            }
            strftime(date, sizeof date, "%Y-%m-%d-%H-%M", &tmv);
            n = strlen(s->model_name) + strlen(date) + 2;
            cfg->run_name = ur_malloc(n);
            if (cfg->run_name) {
                snprintf(cfg->run_name, n, "%s_%s", s->model_name, date);
            }
        }
        if (!cfg->run_name) {
            return ur_err_oom(err);
        }
        s->run_name = cfg->run_name;
    }
    /* checkpoint_dir = os.path.join(base_output_directory, run_name, "checkpoints", "") */
    tmp = py_join(s->base_output_directory, s->run_name);
    if (tmp) {
        char *t2 = py_join(tmp, "checkpoints");
        ur_free(tmp);
        tmp = t2;
    }
    if (tmp) {
        cfg->checkpoint_dir = py_join(tmp, "");
        ur_free(tmp);
    }
    if (!cfg->checkpoint_dir) {
        return ur_err_oom(err);
    }
    s->checkpoint_dir = cfg->checkpoint_dir;
    return build_rules(cfg, err);
}

/* The model file as pyconfig finds it: <dir>/models/<m>.yml, then <dir>/../models/<m>.yml,
 * then the configs directory's models/ (here: the nearest ancestor's). */
static int find_model_file(char **out, const char *config_path, const char *model, ur_err *err)
{
    char *dir = py_dirname(config_path);
    char *rel = NULL;
    size_t n = strlen(model) + 12;
    int rc;
    rel = ur_malloc(n);
    if (!dir || !rel) {
        rc = ur_err_oom(err);
        goto out;
    }
    snprintf(rel, n, "models/%s.yml", model);
    rc = find_up(out, dir, rel, err);
    if (rc == UR_OK && !*out) {
        rc = ur_err_set(err, UR_EINVAL,
                        "model_name '%s': no models/%s.yml next to '%s' or in a parent "
                        "directory",
                        model, model, config_path);
    }
out:
    ur_free(dir);
    ur_free(rel);
    return rc;
}

void ur_config_free(ur_config *cfg)
{
    if (!cfg) {
        return;
    }
    ur_config_yaml_free(cfg->root);
    ur_free(cfg->base_output_directory);
    ur_free(cfg->run_name);
    ur_free(cfg->checkpoint_dir);
    ur_free(cfg->rules);
    ur_free(cfg->mesh);
    ur_free(cfg);
}

const ur_yval *ur_config__root(const ur_config *cfg)
{
    return cfg->root;
}

const ur_settings *ur_config_settings(const ur_config *cfg)
{
    return &cfg->s;
}

int ur_config_load(ur_config **out, const ur_config_opts *opts, ur_err *err)
{
    ur_config *cfg = NULL;
    ur_yval *base = NULL;
    ur_yval *cli = NULL;
    ur_yval *temp = NULL;
    ur_yval *model = NULL;
    ur_yval *rules = NULL;
    ur_yval *rules2 = NULL;
    char *model_path = NULL;
    char *model_name = NULL;
    char *bod = NULL;
    const ur_yval *v;
    int override_model;
    int rc;

    cfg = ur_calloc(1, sizeof *cfg);
    if (!cfg) {
        return ur_err_oom(err);
    }
    /* 1. the config file and its base_config parents */
    rc = load_config_chain(&base, opts->config_path, 0, err);
    if (rc < 0) {
        goto out;
    }
    /* 2. command-line overrides */
    rc = ur_config_yaml_new(&cli, UR_Y_MAP, err);
    if (rc < 0) {
        goto out;
    }
    rc = parse_overrides(cli, opts->overrides, opts->n_overrides, err);
    if (rc < 0) {
        goto out;
    }
    rc = ur_config_yaml_clone(&temp, base, err);
    if (rc == UR_OK) {
        rc = ur_config_yaml_merge(temp, cli, err);
    }
    if (rc < 0) {
        goto out;
    }
    /* 3.1 base_output_directory defaults to abspath("maxtext_output"), as an override */
    if (!truthy(ur_config_yaml_get(temp, "base_output_directory"))) {
        char cwdbuf[4096];
        const char *cwd = opts->cwd;
        ur_yval *bv = NULL;
        if (!cwd) {
            cwd = getcwd(cwdbuf, sizeof cwdbuf);
            if (!cwd) {
                rc = ur_err_set(err, UR_EIO, "getcwd failed");
                goto out;
            }
        }
        bod = py_join(cwd, "maxtext_output");
        if (!bod) {
            rc = ur_err_oom(err);
            goto out;
        }
        if (bod[0] == '/') {
            normpath_abs(bod);
        }
        rc = ur_config_yaml_new_str(&bv, bod, err);
        if (rc == UR_OK) {
            rc = ur_config_yaml_set(cli, "base_output_directory", bv, err);
        }
        if (rc < 0) {
            goto out;
        }
        cfg->base_output_directory = bod;
        bod = NULL;
    }
    /* 3.2 the model file */
    v = ur_config_yaml_get(temp, "model_name");
    override_model = truthy(ur_config_yaml_get(temp, "override_model_config"));
    if (v && v->kind != UR_Y_STR) {
        rc = ur_err_set(err, UR_EINVAL, "config key 'model_name': expected a string");
        goto out;
    }
    if (v && strcmp(v->s, "default") != 0) {
        /* -Instruct variants share the base model's architecture */
        const char *s = v->s;
        size_t n = strlen(s);
        size_t o = 0;
        model_name = ur_malloc(n + 1);
        if (!model_name) {
            rc = ur_err_oom(err);
            goto out;
        }
        for (size_t i = 0; i < n;) {
            if (strncmp(s + i, "-Instruct", 9) == 0) {
                i += 9;
            } else {
                model_name[o++] = s[i++];
            }
        }
        model_name[o] = '\0';
    }
    if (model_name && strcmp(model_name, "default") != 0) {
        rc = find_model_file(&model_path, opts->config_path, model_name, err);
        if (rc == UR_OK) {
            rc = load_yaml_file(&model, model_path, err);
        }
        if (rc < 0) {
            goto out;
        }
        if (override_model) {
            for (size_t i = 0; i < cli->n; i++) {
                ur_config_yaml_del(model, cli->keys[i]);
            }
        } else {
            rc = check_model_conflicts(model, cli, err);
            if (rc < 0) {
                goto out;
            }
        }
    }
    /* unknown keys: every key set on the command line must be a key of the config (pydantic
     * refuses keys that are not fields; base.yml lists them all) */
    for (size_t i = 0; i < cli->n; i++) {
        const char *k = cli->keys[i];
        if (!ur_config_yaml_get(base, k) && !(model && ur_config_yaml_get(model, k)) &&
            !key_listed(k, k_extra_keys) && strcmp(k, "base_output_directory") != 0) {
            rc = ur_err_set(err, UR_EINVAL, "unknown config key '%s' (not in %s)", k,
                            opts->config_path);
            goto out;
        }
    }
    /* 4. logical_axis_rules merged by rule name */
    rc = merge_rules(&rules, ur_config_yaml_get(base, "logical_axis_rules"),
                     model ? ur_config_yaml_get(model, "logical_axis_rules") : NULL,
                     model ? truthy(ur_config_yaml_get(model, "override_logical_axis_rules")) : 0,
                     err);
    if (rc < 0) {
        goto out;
    }
    rc = merge_rules(&rules2, rules, ur_config_yaml_get(cli, "logical_axis_rules"),
                     truthy(ur_config_yaml_get(cli, "override_logical_axis_rules")), err);
    if (rc < 0) {
        goto out;
    }
    /* 5. base < model < overrides */
    cfg->root = base;
    base = NULL;
    if (model) {
        rc = ur_config_yaml_merge(cfg->root, model, err);
        if (rc < 0) {
            goto out;
        }
    }
    rc = ur_config_yaml_merge(cfg->root, cli, err);
    if (rc < 0) {
        goto out;
    }
    rc = ur_config_yaml_set(cfg->root, "logical_axis_rules", rules2, err);
    rules2 = NULL;
    if (rc < 0) {
        goto out;
    }
    /* 6. M_<KEY> environment overrides */
    rc = apply_env(cfg->root, cli, model, override_model, opts->envp, err);
    if (rc < 0) {
        goto out;
    }
    none_strings_to_null(cfg->root);
    rc = resolve_settings(cfg, opts, cfg->base_output_directory, err);
    if (rc < 0) {
        goto out;
    }
    *out = cfg;
    cfg = NULL;
out:
    ur_config_free(cfg);
    ur_config_yaml_free(base);
    ur_config_yaml_free(cli);
    ur_config_yaml_free(temp);
    ur_config_yaml_free(model);
    ur_config_yaml_free(rules);
    ur_config_yaml_free(rules2);
    ur_free(model_path);
    ur_free(model_name);
    ur_free(bod);
    return rc;
}
