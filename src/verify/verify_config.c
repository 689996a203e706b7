/* `unroll verify`'s two settings, param_scan_axis and num_decoder_layers, from a config read
 * as `unroll` reads it or from bare key=value overrides (include/unroll/verify.h). */
#include "unroll/verify.h"

#include "unroll/num.h"

#include <stdlib.h>
#include <string.h>

/* Whether the key of "key=value" `s` (the '=' at `eq`) is `key`. */
static int key_is(const char *s, const char *eq, const char *key)
{
    size_t n = strlen(key);
    return (size_t)(eq - s) == n && strncmp(s, key, n) == 0;
}

int ur_verify_config_read(ur_verify_opts *vo, const char *config, const char *const *overrides,
                          size_t n_overrides, const char *const *envp, ur_err *err)
{
    if (config != NULL) {
        ur_config *cfg = NULL;
        ur_config_opts co;
        const ur_settings *s;
        int rc;
        memset(&co, 0, sizeof co);
        co.config_path = config;
        co.overrides = overrides;
        co.n_overrides = n_overrides;
        co.envp = envp;
        rc = ur_config_load(&cfg, &co, err);
        if (rc < 0) {
            return rc;
        }
        s = ur_config_settings(cfg);
        vo->param_scan_axis = s->param_scan_axis;
        vo->num_decoder_layers = s->num_decoder_layers;
        ur_config_free(cfg);
        return UR_OK;
    }
    for (size_t i = 0; i < n_overrides; i++) {
        const char *s = overrides[i];
        const char *eq = strchr(s, '=');
        int64_t v;
        if (eq == NULL) {
            return ur_err_set(err, UR_EINVAL, "'%s' is not key=value", s);
        }
        if (ur_num_parse_i64(eq + 1, strlen(eq + 1), &v) < 0) {
            return ur_err_set(err, UR_EINVAL, "'%s': not an integer", s);
        }
        if (key_is(s, eq, "param_scan_axis")) {
            vo->param_scan_axis = v;
        } else if (key_is(s, eq, "num_decoder_layers") ||
                   key_is(s, eq, "base_num_decoder_layers")) {
            vo->num_decoder_layers = v;
        } else {
            return ur_err_set(err, UR_EINVAL,
                              "'%s': without a config only param_scan_axis and "
                              "num_decoder_layers are read",
                              s);
        }
    }
    return UR_OK;
}
