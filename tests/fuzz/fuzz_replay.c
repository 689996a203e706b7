/* Replay driver: runs every regular file of the directories (or the files) named on the
 * command line through LLVMFuzzerTestOneInput, the way libFuzzer replays a corpus. Linked with
 * one fuzz_<name>.c and built with gcc in every build; CTest runs it on
 * tests/fuzz/corpora/<name>/ (label `fuzz`). A crash, a sanitizer report or an abort from a
 * target's checks fails the test. Exit status: 0 when every input ran, 1 on an unreadable or
 * empty corpus. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    uint8_t *data = NULL;
    long n;

    if (f == NULL) {
        perror(path);
        return -1;
    }
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        perror(path);
        fclose(f);
        return -1;
    }
    /* libFuzzer hands the target an exact-size heap copy: do the same so ASan sees overreads. */
    data = malloc(n > 0 ? (size_t)n : 1);
    if (data == NULL || (n > 0 && fread(data, 1, (size_t)n, f) != (size_t)n)) {
        fprintf(stderr, "%s: read failed\n", path);
        free(data);
        fclose(f);
        return -1;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(data, (size_t)n);
    free(data);
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_dir(const char *dir, size_t *count)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;

    if (d == NULL) {
        perror(dir);
        return -1;
    }
    while ((e = readdir(d)) != NULL) {
        size_t len;
        char *path;
        struct stat st;
        if (e->d_name[0] == '.') {
            continue;
        }
        len = strlen(dir) + strlen(e->d_name) + 2;
        path = malloc(len);
        if (path == NULL) {
            rc = -1;
            break;
        }
        snprintf(path, len, "%s/%s", dir, e->d_name);
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
            free(path);
            continue;
        }
        if (n == cap) {
            char **grown;
            cap = cap ? 2 * cap : 64;
            grown = realloc(names, cap * sizeof *names);
            if (grown == NULL) {
                free(path);
                rc = -1;
                break;
            }
            names = grown;
        }
        names[n++] = path;
    }
    closedir(d);
    if (n > 0) {
        qsort(names, n, sizeof *names, cmp_str);
    }
    for (size_t i = 0; i < n; i++) {
        if (rc == 0 && run_file(names[i]) == 0) {
            (*count)++;
        } else {
            rc = -1;
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv)
{
    size_t count = 0;
    int status = 0;

    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            status = 1;
        } else if (S_ISDIR(st.st_mode)) {
            if (run_dir(argv[i], &count) != 0) {
                status = 1;
            }
        } else if (run_file(argv[i]) == 0) {
            count++;
        } else {
            status = 1;
        }
    }
    printf("replayed %zu input(s)\n", count);
    if (count == 0) {
        fprintf(stderr, "no inputs found\n");
        status = 1;
    }
    return status;
}
