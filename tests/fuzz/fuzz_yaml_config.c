/* Fuzz target: the YAML config parser (ur_config_yaml_parse, the MaxText/OmegaConf typing rules)
 * and what the config loader does with a parsed tree: clone (equal to the original), merge
 * into a base map, and JSON emit. */
#include "fuzz_common.h"

#include "config/config_yaml.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ur_yval *v = NULL, *copy = NULL, *base = NULL;
    ur_buf json;
    ur_err err;
    char *text = fz_text(data, size);
    int rc;

    if (text == NULL) {
        return 0;
    }
    ur_err_clear(&err);
    rc = ur_config_yaml_parse(&v, text, size, "fuzz.yml", &err);
    fz_check_err(rc, &err);
    if (rc == UR_OK) {
        int has_nan;
        fz_check(v != NULL);
        ur_buf_init(&json, 0);
        has_nan = 1;
        if (ur_config_yaml_emit_json(&json, v, &err) == UR_OK) {
            has_nan = ur_buf_append_byte(&json, 0, &err) < 0 ||
                      strstr((const char *)json.data, "NaN") != NULL;
        }
        ur_buf_dispose(&json);
        if (ur_config_yaml_clone(&copy, v, &err) == UR_OK) {
            fz_check(has_nan || ur_config_yaml_equal(copy, v));
            ur_config_yaml_free(copy);
        }
        if (v->kind == UR_Y_MAP && ur_config_yaml_new(&base, UR_Y_MAP, &err) == UR_OK) {
            ur_yval *one = NULL;
            if (ur_config_yaml_new_str(&one, "x", &err) == UR_OK) {
                (void)ur_config_yaml_set(base, "base_output_directory", one, &err);
            }
            (void)ur_config_yaml_merge(base, v, &err);
            (void)ur_config_yaml_merge(base, v, &err);
            ur_config_yaml_free(base);
        }
        ur_config_yaml_free(v);
    }
    free(text);
    return 0;
}
