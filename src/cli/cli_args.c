/* Options that take a value, in every form users type: `-j 2`, `-j2` (as `make -j2`),
 * `--threads 2` and `--threads=2`. One matcher for every subcommand, so that the forms
 * cannot differ from one command to the next. */
#include "cli.h"

#include <stddef.h>
#include <string.h>

int cli_opt_value(int argc, char **argv, int *i, const char *short_opt, const char *long_opt,
                  const char **value)
{
    const char *s = argv[*i];
    size_t n;

    if ((short_opt != NULL && strcmp(s, short_opt) == 0) ||
        (long_opt != NULL && strcmp(s, long_opt) == 0)) {
        *value = *i + 1 < argc ? argv[++*i] : NULL;
        return 1;
    }
    /* `-j2`: a short option is two characters, the value follows at once. */
    if (short_opt != NULL && strncmp(s, short_opt, 2) == 0 && s[2] != '\0') {
        *value = s + 2;
        return 1;
    }
    if (long_opt != NULL) {
        n = strlen(long_opt);
        if (strncmp(s, long_opt, n) == 0 && s[n] == '=') {
            *value = s + n + 1;
            return 1;
        }
    }
    return 0;
}
