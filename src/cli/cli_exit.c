/* Error code -> exit status, and the one-line error report. */
#include "cli.h"

#include <stdarg.h>
#include <stdio.h>

int cli_exit_status(ur_code code)
{
    switch (code) {
    case UR_OK:
        return CLI_EXIT_OK;
    case UR_EINVAL:
        return CLI_EXIT_USAGE;
    case UR_EIO:
    case UR_ENOTFOUND:
    case UR_EEXIST:
        return CLI_EXIT_IO;
    case UR_ECORRUPT:
        return CLI_EXIT_CORRUPT;
    case UR_EUNSUPPORTED:
        return CLI_EXIT_UNSUPPORTED;
    case UR_ENOMEM:
    case UR_EINTERNAL:
    case UR_ECANCELED: /* the commands report 128 + the signal instead */
        return CLI_EXIT_FAILURE;
    }
    return CLI_EXIT_FAILURE;
}

int cli_fail(const ur_err *err)
{
    char line[1200];
    fprintf(stderr, "unroll: %s\n", ur_err_format(err, line, sizeof line));
    return cli_exit_status(err->code);
}

int cli_usage_error(const char *fmt, ...)
{
    va_list ap;
    fputs("unroll: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return CLI_EXIT_USAGE;
}
