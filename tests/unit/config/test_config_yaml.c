/* plan_yaml: scalar typing as PyYAML + OmegaConf type MaxText configs, structure, refusals,
 * merge and equality, and the out-of-memory path. */
#include "ur_test.h"

#include "config/config_yaml.h"

#include "unroll/alloc.h"

#include <math.h>
#include <string.h>

static ur_yval *resolve(const char *s)
{
    ur_yval *v = NULL;
    assert_int_equal(ur_config_yaml_resolve(&v, s, strlen(s), NULL), UR_OK);
    return v;
}

static void expect_int(const char *s, int64_t want)
{
    ur_yval *v = resolve(s);
    if (v->kind != UR_Y_INT) {
        fail_msg("'%s' typed %s, want int", s, ur_config_yaml_kind_name(v->kind));
    }
    assert_true(v->i == want);
    ur_config_yaml_free(v);
}

static void expect_float(const char *s, double want)
{
    ur_yval *v = resolve(s);
    if (v->kind != UR_Y_FLOAT) {
        fail_msg("'%s' typed %s, want float", s, ur_config_yaml_kind_name(v->kind));
    }
    if (isnan(want)) {
        assert_true(isnan(v->f));
    } else {
        assert_true(v->f == want);
    }
    ur_config_yaml_free(v);
}

static void expect_kind(const char *s, ur_ykind kind)
{
    ur_yval *v = resolve(s);
    if (v->kind != kind) {
        fail_msg("'%s' typed %s, want %s", s, ur_config_yaml_kind_name(v->kind),
                 ur_config_yaml_kind_name(kind));
    }
    if (kind == UR_Y_STR) {
        assert_string_equal(v->s, s);
    }
    ur_config_yaml_free(v);
}

static void expect_bool(const char *s, int want)
{
    ur_yval *v = resolve(s);
    assert_int_equal(v->kind, UR_Y_BOOL);
    assert_int_equal(v->b, want);
    ur_config_yaml_free(v);
}

static void test_config_yaml__ints(void **state)
{
    (void)state;
    expect_int("0", 0);
    expect_int("-0", 0);
    expect_int("42", 42);
    expect_int("+7", 7);
    expect_int("-16", -16);
    expect_int("1_000", 1000);
    expect_int("2147483648", 2147483648LL);
    expect_int("0x1F", 31);
    expect_int("0b101", 5);
    expect_int("017", 15); /* YAML 1.1 octal */
    expect_int("1:30", 90); /* sexagesimal */
    expect_int("9223372036854775807", INT64_MAX);
    expect_int("-9223372036854775808", INT64_MIN);
}

static void test_config_yaml__int_out_of_range_is_refused(void **state)
{
    ur_yval *v = NULL;
    ur_err err;
    (void)state;
    assert_int_equal(ur_config_yaml_resolve(&v, "9223372036854775808", 19, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "out of range"));
    assert_null(v);
}

static void test_config_yaml__floats(void **state)
{
    (void)state;
    expect_float("1.0", 1.0);
    expect_float("3.e-5", 3e-5);
    expect_float("1.e-05", 1e-5);
    expect_float("1e-3", 1e-3);   /* OmegaConf's resolver: no dot needed */
    expect_float("1E5", 1e5);
    expect_float("1.0e5", 1e5);   /* OmegaConf: exponent sign optional */
    expect_float("-2.5", -2.5);
    expect_float("1.", 1.0);
    expect_float(".5", 0.5);
    expect_float("1_0.5", 10.5);
    expect_float(".inf", (double)INFINITY);
    expect_float("-.Inf", -(double)INFINITY);
    expect_float(".NaN", (double)NAN);
    expect_float("1:30.5", 90.5);
}

static void test_config_yaml__bools_nulls_strings(void **state)
{
    (void)state;
    expect_bool("true", 1);
    expect_bool("True", 1);
    expect_bool("TRUE", 1);
    expect_bool("yes", 1);
    expect_bool("On", 1);
    expect_bool("false", 0);
    expect_bool("no", 0);
    expect_bool("OFF", 0);
    expect_kind("", UR_Y_NULL);
    expect_kind("~", UR_Y_NULL);
    expect_kind("null", UR_Y_NULL);
    expect_kind("NULL", UR_Y_NULL);
    /* not special in YAML 1.1 / PyYAML */
    expect_kind("tRue", UR_Y_STR);
    expect_kind("y", UR_Y_STR);
    expect_kind("none", UR_Y_STR);
    expect_kind("None", UR_Y_STR);
    expect_kind("2024-01-02", UR_Y_STR); /* OmegaConf drops the timestamp resolver */
    expect_kind("09", UR_Y_STR);
    expect_kind("-.5", UR_Y_STR);
    expect_kind("1e", UR_Y_STR);
    expect_kind("0x", UR_Y_STR);
    expect_kind("1.2.3", UR_Y_STR);
    expect_kind("llama2-7b", UR_Y_STR);
    expect_kind("gs://bucket/path", UR_Y_STR);
}

static ur_yval *parse(const char *text)
{
    ur_yval *v = NULL;
    ur_err err;
    int rc = ur_config_yaml_parse(&v, text, strlen(text), "t", &err);
    if (rc != UR_OK) {
        fail_msg("parse failed: %s", err.msg);
    }
    return v;
}

static void test_config_yaml__document_structure(void **state)
{
    const char *text = "a: 1\n"
                       "b: 'true'\n"
                       "c: \"42\"\n"
                       "d: [x, 2, 3.5, [], {}]\n"
                       "e:\n  f: {g: null, h: [1, [2]]}\n"
                       "i: !!str 12\n"
                       "j: !!float 3\n"
                       "k: |\n  line\n"
                       "l:\n";
    ur_yval *v;
    const ur_yval *d;
    const ur_yval *f;
    (void)state;
    v = parse(text);
    assert_int_equal(v->kind, UR_Y_MAP);
    assert_int_equal(v->n, 9);
    assert_string_equal(v->keys[0], "a");
    assert_int_equal(ur_config_yaml_get(v, "a")->i, 1);
    assert_int_equal(ur_config_yaml_get(v, "b")->kind, UR_Y_STR);
    assert_string_equal(ur_config_yaml_get(v, "b")->s, "true");
    assert_string_equal(ur_config_yaml_get(v, "c")->s, "42");
    d = ur_config_yaml_get(v, "d");
    assert_int_equal(d->kind, UR_Y_LIST);
    assert_int_equal(d->n, 5);
    assert_string_equal(d->vals[0]->s, "x");
    assert_int_equal(d->vals[1]->kind, UR_Y_INT);
    assert_true(d->vals[2]->f == 3.5);
    assert_int_equal(d->vals[3]->kind, UR_Y_LIST);
    assert_int_equal(d->vals[3]->n, 0);
    assert_int_equal(d->vals[4]->kind, UR_Y_MAP);
    f = ur_config_yaml_get(ur_config_yaml_get(v, "e"), "f");
    assert_int_equal(ur_config_yaml_get(f, "g")->kind, UR_Y_NULL);
    assert_int_equal(ur_config_yaml_get(f, "h")->vals[1]->vals[0]->i, 2);
    assert_string_equal(ur_config_yaml_get(v, "i")->s, "12");
    assert_int_equal(ur_config_yaml_get(v, "j")->kind, UR_Y_FLOAT);
    assert_string_equal(ur_config_yaml_get(v, "k")->s, "line\n");
    assert_int_equal(ur_config_yaml_get(v, "l")->kind, UR_Y_NULL);
    assert_null(ur_config_yaml_get(v, "zz"));
    ur_config_yaml_free(v);

    /* an empty document and a bare scalar document */
    v = parse("");
    assert_int_equal(v->kind, UR_Y_NULL);
    ur_config_yaml_free(v);
    v = parse("[a, b]");
    assert_int_equal(v->kind, UR_Y_LIST);
    ur_config_yaml_free(v);
}

static void expect_parse_error(const char *text, const char *needle)
{
    ur_yval *v = NULL;
    ur_err err;
    int rc = ur_config_yaml_parse(&v, text, strlen(text), "t.yml", &err);
    assert_int_equal(rc, UR_EINVAL);
    assert_null(v);
    if (!strstr(err.msg, needle)) {
        fail_msg("error '%s' lacks '%s'", err.msg, needle);
    }
}

static void test_config_yaml__refusals(void **state)
{
    (void)state;
    expect_parse_error("a: 1\na: 2\n", "duplicate key 'a'");
    expect_parse_error("a: &x 1\nb: *x\n", "aliases");
    expect_parse_error("a: 1\n---\nb: 2\n", "single YAML document");
    expect_parse_error("a: [1, 2\n", "t.yml:");
    expect_parse_error("? [1]\n: 2\n", "scalar");
    expect_parse_error("a: !!int abc\n", "!!int");
    expect_parse_error("a: !custom x\n", "tag");
    expect_parse_error("a: 99999999999999999999\n", "out of range");
}

static void test_config_yaml__merge_and_equal(void **state)
{
    ur_yval *a = parse("x: 1\nm: {p: 1, q: [1, 2]}\nl: [1, 2, 3]\n");
    ur_yval *b = parse("m: {q: [9], r: 2}\nl: [4]\ny: null\n");
    ur_yval *want = parse("x: 1\nm: {p: 1, q: [9], r: 2}\nl: [4]\ny: null\n");
    ur_yval *n1 = parse("[1, 1.0, true]");
    ur_yval *n2 = parse("[true, 1, 1]");
    ur_yval *n3 = parse("[1, 2.0, true]");
    ur_yval *m1 = parse("{a: 1, b: 2}");
    ur_yval *m2 = parse("{b: 2, a: 1}");
    (void)state;
    assert_int_equal(ur_config_yaml_merge(a, b, NULL), UR_OK);
    assert_true(ur_config_yaml_equal(a, want));
    assert_true(ur_config_yaml_equal(n1, n2));
    assert_false(ur_config_yaml_equal(n1, n3));
    assert_true(ur_config_yaml_equal(m1, m2));
    assert_false(ur_config_yaml_equal(m1, n1));
    ur_config_yaml_del(m1, "a");
    assert_int_equal(m1->n, 1);
    assert_false(ur_config_yaml_equal(m1, m2));
    ur_config_yaml_free(a);
    ur_config_yaml_free(b);
    ur_config_yaml_free(want);
    ur_config_yaml_free(n1);
    ur_config_yaml_free(n2);
    ur_config_yaml_free(n3);
    ur_config_yaml_free(m1);
    ur_config_yaml_free(m2);
}

static void test_config_yaml__json(void **state)
{
    ur_yval *v = parse("a: [1, 2.5, 3.0, \"q\\\"x\", null, true]\nb: .inf\nc: 1e-3\n");
    ur_buf b;
    char *s;
    (void)state;
    ur_buf_init(&b, 0);
    assert_int_equal(ur_config_yaml_emit_json(&b, v, NULL), UR_OK);
    s = ur_buf_detach(&b, NULL);
    assert_string_equal(s, "{\"a\": [1, 2.5, 3.0, \"q\\\"x\", null, true], \"b\": Infinity, "
                           "\"c\": 0.001}");
    ur_free(s);
    ur_config_yaml_free(v);
}

static void test_config_yaml__oom_loop(void **state)
{
    const char *text = "a: [1, {b: [x, y]}, 'z']\nc: {d: 1.5}\ne: f\n";
    int ok = 0;
    (void)state;
    for (long n = 0; n < 10000 && !ok; n++) {
        ur_yval *v = NULL;
        ur_yval *c = NULL;
        ur_err err;
        int rc;
        ur_alloc_fail_after(n);
        rc = ur_config_yaml_parse(&v, text, strlen(text), "t", &err);
        if (rc == UR_OK) {
            rc = ur_config_yaml_clone(&c, v, &err);
        }
        if (rc == UR_OK) {
            rc = ur_config_yaml_merge(c, v, &err);
        }
        ur_alloc_fail_after(-1);
        if (rc == UR_OK) {
            assert_true(ur_config_yaml_equal(c, v));
            ok = 1;
        } else {
            assert_int_equal(rc, UR_ENOMEM);
        }
        ur_config_yaml_free(v);
        ur_config_yaml_free(c);
    }
    assert_true(ok);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_yaml__ints),
        cmocka_unit_test(test_config_yaml__int_out_of_range_is_refused),
        cmocka_unit_test(test_config_yaml__floats),
        cmocka_unit_test(test_config_yaml__bools_nulls_strings),
        cmocka_unit_test(test_config_yaml__document_structure),
        cmocka_unit_test(test_config_yaml__refusals),
        cmocka_unit_test(test_config_yaml__merge_and_equal),
        cmocka_unit_test(test_config_yaml__json),
        cmocka_unit_test(test_config_yaml__oom_loop),
    };
    return cmocka_run_group_tests_name("config_yaml", tests, NULL, NULL);
}
