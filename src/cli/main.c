/* unroll: entry point. `unroll <subcommand> ...` for the tools (ls, inspect), otherwise the
 * MaxText-style `unroll path/to/base.yml key=value ...` conversion. */
#include "cli.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} subcommand;

static const subcommand subcommands[] = {
    {"ls", cli_cmd_ls, "list the keys of an OCDBT database or checkpoint directory"},
    {"inspect", cli_cmd_inspect, "show a checkpoint's tree, dtypes, shapes and chunking"},
    {"verify", cli_cmd_verify, "check an unrolled checkpoint against the scanned one"},
    {NULL, NULL, NULL},
};

int main(int argc, char **argv)
{
#ifdef __GLIBC__
    /* Chunk buffers of tens of MiB are allocated and freed per chunk by the codecs. Served by
     * mmap, each one is faulted in page by page and unmapped again; kept in the heap they
     * are reused. The memory limit still bounds how many are live at once. */
    mallopt(M_MMAP_THRESHOLD, 512 * 1024 * 1024);
    mallopt(M_TRIM_THRESHOLD, 1024 * 1024 * 1024);
#endif
    /* Past a file-size limit (ulimit -f) a write should fail with EFBIG and be reported,
     * naming the file, not kill the process with a core dump. */
    signal(SIGXFSZ, SIG_IGN);
    if (argc >= 2) {
        for (const subcommand *s = subcommands; s->name != NULL; s++) {
            if (strcmp(argv[1], s->name) == 0) {
                return s->fn(argc - 1, argv + 1);
            }
        }
    }
    return cli_cmd_unroll(argc, argv);
}
