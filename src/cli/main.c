/* unroll: entry point. `unroll <subcommand> ...` for the tools (ls, inspect), otherwise the
 * MaxText-style `unroll path/to/base.yml key=value ...` conversion. */
#include "cli.h"

#include "unroll/fs.h"
#include "unroll/json.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

/* Input is read through read-only mappings of its files (src/util/ur_fs.c): a file that
 * shrinks while mapped, or a disk error on a mapped page, raises SIGBUS (so does an output
 * page stored through a mapping that cannot be written, though its blocks are reserved up
 * front). Say so in one line,
 * naming the file, and exit as for any I/O error; partial output stays in the staging
 * directory, never where a checkpoint is expected (as after a kill). */
/* write(2) all of s to stderr, as far as it goes (async-signal-safe: write, strlen). */
static void say(const char *s)
{
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t w = write(2, s, n);
        if (w <= 0) {
            return;
        }
        s += w;
        n -= (size_t)w;
    }
}

static void on_sigbus(int sig)
{
    /* ur_fs_mapped_path only reads a thread-local pointer set before the mapping is touched:
     * safe in a handler, which clang-tidy cannot see across the library boundary. */
    const char *path = ur_fs_mapped_path(); /* NOLINT(bugprone-signal-handler) */
    (void)sig;
    say("unroll: ");
    say(path);
    /* NOLINTNEXTLINE(bugprone-signal-handler): a thread-local flag, as for the path */
    say(ur_fs_mapped_for_write()
            ? ": file could not be written through its mapping (SIGBUS)\n"
            : ": input file changed or unreadable while being read (SIGBUS)\n");
    _exit(CLI_EXIT_IO);
}

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} subcommand;

static const subcommand subcommands[] = {
    {"ls", cli_cmd_ls, "list the keys of an OCDBT database or checkpoint directory"},
    {"inspect", cli_cmd_inspect, "show a checkpoint's tree, dtypes, shapes and chunking"},
    {"verify", cli_cmd_verify, "check an unrolled checkpoint against the scanned one"},
    {"merge", cli_cmd_merge, "finish a multi-process conversion (or merge ocdbt.process_<i>/)"},
    {"to_huggingface", cli_cmd_hf, "export a MaxText checkpoint as a Hugging Face folder"},
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
    signal(SIGBUS, on_sigbus);
    ur_json_init(); /* cJSON allocates through ur_malloc: out of memory is reported as such */
    if (argc >= 2) {
        for (const subcommand *s = subcommands; s->name != NULL; s++) {
            if (strcmp(argv[1], s->name) == 0) {
                return s->fn(argc - 1, argv + 1);
            }
        }
    }
    return cli_cmd_unroll(argc, argv);
}
