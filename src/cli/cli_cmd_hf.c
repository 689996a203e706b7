/* `unroll to_huggingface path/to/base.yml key=value ...`: a MaxText checkpoint to a Hugging
 * Face folder, taking the arguments MaxText's exporter takes
 * (`python -m maxtext.checkpoint_conversion.to_huggingface`): the config and its overrides,
 * --override_model_architecture, --hf_model_path. Parses, calls ur_job_hf_run (unroll/job.h),
 * prints the dry run's tensors, the progress and the summary. */
#define _POSIX_C_SOURCE 200809L
#define _GNU_SOURCE /* environ */
#include "cli.h"

#include "unroll/alloc.h"
#include "unroll/clock.h"
#include "unroll/job.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    cli_run_args run;
    int override_architecture;
    uint64_t max_shard_size;
    const char *hf_model_path;
} hf_args;

static void usage(FILE *f)
{
    fputs("usage: unroll to_huggingface [options] path/to/base.yml [key=value ...]\n"
          "\n"
          "Export a MaxText checkpoint as a Hugging Face folder (safetensors shards, their\n"
          "index, config.json, the tokenizer of --hf_model_path), as MaxText's exporter\n"
          "(maxtext.checkpoint_conversion.to_huggingface) does, streaming, in bounded memory.\n"
          "Keys as MaxText's exporter reads them: model_name, load_parameters_path (or\n"
          "load_full_state_path: a training state), weight_dtype (float32, bfloat16),\n"
          "base_output_directory (the folder; tmp/<run_name> when unset), scan_layers (the\n"
          "input's layout is read from the input). The folder appears whole or not at all.\n"
          "Paths may be local, s3://bucket/prefix or gs://bucket/prefix.\n"
          "\n"
          "options (a value may also be attached: --hf_model_path=DIR):\n"
          "      --override_model_architecture  export an architecture that differs from\n"
          "                                     model_name's Hugging Face checkpoint as it is\n"
          "      --hf_model_path DIR    a local folder whose tokenizer files are copied\n"
          "      --max_shard_size S     bytes per shard, e.g. 5G (default 3G, as MaxText)\n"
          "  -n, --dry-run              print the tensors and stop\n"
          "  -q, --quiet                no progress and no summary\n"
          "  -j, --threads N            worker threads (default: one per core)\n"
          "      --memory-limit S       bytes of chunk buffers in flight, e.g. 512M, 4G\n"
          "      --replace              on an object store, delete what the folder holds\n"
          "  -h, --help                 this text\n"
          "\n"
          "Families: llama2/llama3/llama3.1/llama3.3 (LlamaForCausalLM), mistral\n"
          "(MistralForCausalLM), qwen3 (Qwen3ForCausalLM), qwen2.5 (Qwen2ForCausalLM), olmo3\n"
          "(Olmo3ForCausalLM); exit 5 names what a model lacks. Exit statuses: see unroll\n"
          "--help.\n",
          f);
}

/* Returns -1 to go on, else an exit status. */
static int parse_args(hf_args *a, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i], *v;
        int st = -1;
        if (strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0) {
            usage(stdout);
            return CLI_EXIT_OK;
        } else if (strcmp(s, "--override_model_architecture") == 0) {
            a->override_architecture = 1;
        } else if (cli_opt_value(argc, argv, &i, NULL, "--hf_model_path", &v)) {
            if (v == NULL || v[0] == '\0') {
                return cli_usage_error("--hf_model_path needs a folder");
            }
            a->hf_model_path = v;
        } else if (cli_opt_value(argc, argv, &i, NULL, "--max_shard_size", &v)) {
            if (v == NULL || cli_parse_size(v, &a->max_shard_size) < 0) {
                return cli_usage_error("--max_shard_size needs a size such as 3G or 500M");
            }
        } else if (cli_run_arg(&a->run, argc, argv, &i, &st) == 0) {
            return cli_usage_error("unknown option '%s' (see unroll to_huggingface --help)", s);
        } else if (st >= 0) {
            return st;
        }
    }
    if (a->run.config == NULL) {
        usage(stderr);
        return CLI_EXIT_USAGE;
    }
    return -1;
}

static void print_tensor(void *ctx, const ur_hf_tensor_info *t)
{
    (void)ctx;
    printf("  %s %s[", t->name, ur_dtype_name(t->dtype));
    for (int d = 0; d < t->rank; d++) {
        printf("%s%llu", d ? ", " : "", (unsigned long long)t->shape[d]);
    }
    printf("] <- %s  %s%s%s  (%s)\n", t->source, t->pattern, t->op[0] ? ", " : "", t->op,
           t->shard);
}

static int run(const hf_args *args, ur_err *err)
{
    ur_hf_run_opts o;
    ur_hf_run_report rep;
    cli_progress prog;
    double t0 = ur_clock_mono_s();
    int rc;

    memset(&o, 0, sizeof o);
    memset(&prog, 0, sizeof prog);
    o.run.config.config_path = args->run.config;
    o.run.config.overrides = args->run.overrides;
    o.run.config.n_overrides = args->run.n_overrides;
    o.run.config.envp = (const char *const *)environ;
    o.run.dry_run = args->run.dry_run;
    o.run.replace = args->run.replace;
    o.run.threads = args->run.threads;
    o.run.memory_limit = args->run.memory_limit;
    o.run.cancel = &cli_interrupted;
    o.run.ctx = &prog;
    o.hf_model_path = args->hf_model_path;
    o.override_architecture = args->override_architecture;
    o.max_shard_size = args->max_shard_size;
    o.on_tensor = print_tensor;
    if (!args->run.quiet && isatty(STDERR_FILENO)) {
        o.run.on_begin = cli_progress_begin;
        o.run.progress = cli_progress_show;
    }
    rc = ur_job_hf_run(&rep, &o, err);
    if (rc == UR_OK && args->run.dry_run) {
        printf("%s (%s): %zu tensors, %.3f GiB, %zu shard%s\n", rep.hf.architecture, rep.hf.family,
               rep.hf.n_tensors, (double)rep.hf.bytes / 1073741824.0, rep.hf.n_shards,
               rep.hf.n_shards == 1 ? "" : "s");
    } else if (rc == UR_OK && !args->run.quiet) {
        fprintf(stderr,
                "unroll: wrote %s/: %s, %zu tensors in %zu shard%s, %.3f GiB read, %.3f GiB "
                "written, %.2f s, %d threads\n",
                rep.dest, rep.hf.architecture, rep.hf.n_tensors, rep.hf.n_shards,
                rep.hf.n_shards == 1 ? "" : "s", (double)rep.total.bytes_in / 1073741824.0,
                (double)rep.hf.bytes / 1073741824.0, ur_clock_mono_s() - t0, rep.total.threads);
    }
    if (rc == UR_OK) {
        cli_print_phases();
    }
    ur_job_hf_report_dispose(&rep);
    return rc;
}

int cli_cmd_hf(int argc, char **argv)
{
    hf_args args;
    ur_err err;
    int status;

    memset(&args, 0, sizeof args);
    ur_err_clear(&err);
    status = parse_args(&args, argc, argv);
    if (status < 0) {
        cli_catch_signals();
        ur_alloc_one_heap(); /* before the run starts its threads */
        status = cli_run_status(run(&args, &err), &err);
    }
    cli_run_args_dispose(&args.run);
    return status;
}
