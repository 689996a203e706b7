/* `unroll --version`: the version, then each library as it reports itself at run time (the
 * shared object actually loaded, which is what a bug report needs, not the headers'). */
#include "cli.h"

#include "unroll/http.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <yaml.h>
#include <zlib.h>
#include <zstd.h>

void cli_print_version(void)
{
    printf("unroll %s\n", UR_VERSION);
    printf("zstd %s\ncJSON %s\nlibyaml %s\nzlib %s\n", ZSTD_versionString(), cJSON_Version(),
           yaml_get_version_string(), zlibVersion());
    printf("libcurl %s (%s)\n", ur_http_curl_version(), ur_http_tls_version());
}
