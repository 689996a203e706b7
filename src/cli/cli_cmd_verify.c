/* `unroll verify <scanned> <unrolled> [config.yml] [key=value ...]`: check an unrolled
 * checkpoint against the scanned one it was made from (include/unroll/verify.h).
 * Exit 0 when every leaf matches, CLI_EXIT_VERIFY when something differs, is missing or is
 * extra; the other statuses as for any command. */
#include "cli.h"

#include "unroll/alloc.h"
#include "unroll/job.h"
#include "unroll/num.h"
#include "unroll/orbax.h"
#include "unroll/verify.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

static void usage(FILE *f)
{
    fputs("usage: unroll verify [options] <scanned checkpoint> <unrolled checkpoint>\n"
          "                     [config.yml] [key=value ...]\n"
          "\n"
          "Check that every leaf of the unrolled checkpoint equals the matching slice of the\n"
          "scanned one after the cast to bfloat16, and that no leaf is missing or extra.\n"
          "A Hugging Face folder (to_huggingface's output, with the config it was given) is\n"
          "checked tensor by tensor: each its parameter's slice, rearranged, cast and with the\n"
          "family's arithmetic, and no tensor missing or extra.\n"
          "The correspondence is worked out from the output's names and shapes. A config\n"
          "(MaxText's base.yml with key=value overrides) supplies param_scan_axis and\n"
          "num_decoder_layers; without one, param_scan_axis=N and num_decoder_layers=N may be\n"
          "given alone.\n"
          "\n"
          "options:\n"
          "  -m, --max-issues N   issues to print (default 20; also -mN, --max-issues=N)\n"
          "  -q, --quiet          print only the issues\n"
          "  -h, --help           this help\n"
          "\n"
          "exit status: 0 all leaves match, 6 a mismatch, missing or extra leaf, 2 usage,\n"
          "3 I/O, 4 corrupt input, 5 unsupported, 1 internal error\n",
          f);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

typedef struct {
    const char *in, *out, *config;
    const char **overrides;
    size_t n_overrides;
    int quiet;
    size_t max_issues;
} verify_args;

static int parse_args(verify_args *a, int argc, char **argv)
{
    a->overrides = ur_calloc((size_t)argc + 1, sizeof *a->overrides);
    if (a->overrides == NULL) {
        return cli_usage_error("out of memory");
    }
    a->max_issues = 20;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i], *val;
        if (strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0) {
            usage(stdout);
            return CLI_EXIT_OK;
        } else if (strcmp(s, "-q") == 0 || strcmp(s, "--quiet") == 0) {
            a->quiet = 1;
        } else if (cli_opt_value(argc, argv, &i, "-m", "--max-issues", &val)) {
            int64_t v;
            if (val == NULL || ur_num_parse_i64(val, strlen(val), &v) < 0 || v < 1 || v > 100000) {
                return cli_usage_error("%s needs a count (1-100000)", s);
            }
            a->max_issues = (size_t)v;
        } else if (s[0] == '-') {
            return cli_usage_error("unknown option '%s' (see unroll verify --help)", s);
        } else if (a->in == NULL) {
            a->in = s;
        } else if (a->out == NULL) {
            a->out = s;
        } else if (strchr(s, '=') != NULL) {
            a->overrides[a->n_overrides++] = s;
        } else if (a->config == NULL && (ends_with(s, ".yml") || ends_with(s, ".yaml"))) {
            a->config = s;
        } else {
            return cli_usage_error("argument '%s' is neither a config .yml nor key=value", s);
        }
    }
    if (a->in == NULL || a->out == NULL) {
        usage(stderr);
        return CLI_EXIT_USAGE;
    }
    return -1;
}

/* The two checkpoints, one after the other: each open already spreads its parses over the
 * cores, and opened at once their _METADATA texts and parses were held together. The output
 * first: its open (200,000 leaves for 100,000 input leaves: a 76 MB _METADATA) was verify's
 * peak of memory on top of the open input, and the input's is half of it. Each reads its side
 * files after _METADATA's text is freed. Errors are the input's first whatever the order:
 * when both fail, the input's is the one reported. */
static int open_both(ur_orbax_ckpt **in, ur_orbax_ckpt **out, const verify_args *a, ur_err *err)
{
    ur_err in_err;
    int rc = ur_orbax_ckpt_open(out, a->out, UR_ORBAX_OPEN_SIDE_AFTER, err);
    int rc_in;
    ur_err_clear(&in_err);
    rc_in = ur_orbax_ckpt_open(in, a->in, UR_ORBAX_OPEN_SIDE_AFTER, &in_err);
    if (rc_in < 0) {
        *err = in_err;
        return rc_in;
    }
    return rc;
}

int cli_cmd_verify(int argc, char **argv)
{
    verify_args a;
    ur_verify_opts vo;
    ur_verify_report rep;
    ur_orbax_ckpt *in = NULL, *out = NULL;
    ur_err err;
    int status, rc;

    memset(&a, 0, sizeof a);
    memset(&rep, 0, sizeof rep);
    ur_err_clear(&err);
    status = parse_args(&a, argc, argv);
    if (status >= 0) {
        ur_free(a.overrides);
        return status;
    }
    ur_verify_opts_init(&vo);
    vo.max_issues = a.max_issues;
    {
        /* the tests' knob: small pieces, so that every array is compared in several */
        const char *pb = getenv("UNROLL_VERIFY_PIECE_BYTES");
        uint64_t v = 0;
        if (pb != NULL && ur_num_parse_u64(pb, strlen(pb), &v) == 0 && v > 0) {
            vo.piece_bytes = v;
        }
    }
    rc = ur_verify_config_read(&vo, a.config, a.overrides, a.n_overrides,
                               (const char *const *)environ, &err);
    if (rc == UR_OK && ur_job_hf_is_folder(a.out)) {
        /* a Hugging Face folder: checked against what to_huggingface writes for the config */
        ur_config_opts co;
        memset(&co, 0, sizeof co);
        co.config_path = a.config;
        co.overrides = a.overrides;
        co.n_overrides = a.n_overrides;
        co.envp = (const char *const *)environ;
        rc = a.config != NULL
                 ? ur_job_hf_verify(&rep, a.in, a.out, &co, &vo, &err)
                 : ur_err_set(&err, UR_EINVAL,
                              "%s is a Hugging Face folder: give the model's config (base.yml "
                              "key=value ..., as to_huggingface was given)",
                              a.out);
    } else if (rc == UR_OK) {
        rc = open_both(&in, &out, &a, &err);
        if (rc == UR_OK) {
            rc = ur_verify_run(&rep, in, out, &vo, &err);
        }
    }
    if (rc < 0) {
        status = cli_fail(&err);
    } else {
        char line[2048];
        for (size_t i = 0; i < rep.n_issues; i++) {
            printf("%s\n", ur_verify_issue_format(&rep.issues[i], line, sizeof line));
        }
        if (rep.n_issues_total > rep.n_issues) {
            printf("... %zu more issues\n", rep.n_issues_total - rep.n_issues);
        }
        if (!a.quiet) {
            printf("verify: %zu output leaves, %zu input leaves, %zu arrays and %llu elements "
                   "compared, %llu elements differ: %s\n",
                   rep.leaves_out, rep.leaves_in, rep.arrays_compared,
                   (unsigned long long)rep.elements, (unsigned long long)rep.elements_bad,
                   rep.n_issues_total ? "FAILED" : "OK");
        }
        status = rep.n_issues_total ? CLI_EXIT_VERIFY : CLI_EXIT_OK;
        if (rep.n_issues_total) {
            fprintf(stderr, "unroll: verify: %zu issue%s (first: %s)\n", rep.n_issues_total,
                    rep.n_issues_total == 1 ? "" : "s",
                    rep.n_issues ? ur_verify_issue_format(&rep.issues[0], line, sizeof line)
                                 : "?");
        }
    }
    ur_verify_report_dispose(&rep);
    ur_orbax_ckpt_close(out);
    ur_orbax_ckpt_close(in);
    ur_free(a.overrides);
    return status;
}
