/* Introsort (see unroll/sort.h): quicksort with a median-of-three pivot down to small
 * ranges, heapsort for a range that has been split more than 2 log2 n times (so that no input
 * makes it quadratic), insertion sort to finish the small ones. */
#include "unroll/sort.h"

#include <string.h>

typedef int (*cmp_fn)(const void *, const void *);

#define SMALL 16

static void swap(char *a, char *b, size_t size)
{
    char tmp[64];
    if (a == b) {
        return; /* memcpy onto itself is undefined */
    }
    while (size > 0) {
        size_t k = size < sizeof tmp ? size : sizeof tmp;
        memcpy(tmp, a, k);
        memcpy(a, b, k);
        memcpy(b, tmp, k);
        a += k;
        b += k;
        size -= k;
    }
}

static void insertion(char *b, size_t n, size_t size, cmp_fn cmp)
{
    for (size_t i = 1; i < n; i++) {
        for (size_t j = i; j > 0 && cmp(b + (j - 1) * size, b + j * size) > 0; j--) {
            swap(b + (j - 1) * size, b + j * size, size);
        }
    }
}

static void sift_down(char *b, size_t root, size_t n, size_t size, cmp_fn cmp)
{
    for (;;) {
        size_t child = 2 * root + 1;
        if (child >= n) {
            return;
        }
        if (child + 1 < n && cmp(b + child * size, b + (child + 1) * size) < 0) {
            child++;
        }
        if (cmp(b + root * size, b + child * size) >= 0) {
            return;
        }
        swap(b + root * size, b + child * size, size);
        root = child;
    }
}

static void heap_sort(char *b, size_t n, size_t size, cmp_fn cmp)
{
    for (size_t i = n / 2; i > 0; i--) {
        sift_down(b, i - 1, n, size, cmp);
    }
    for (size_t end = n; end > 1; end--) {
        swap(b, b + (end - 1) * size, size);
        sift_down(b, 0, end - 1, size, cmp);
    }
}

/* The pivot, the median of the first, middle and last elements, moved to b[0]; then Hoare's
 * partition around it: returns its final place j, with b[<j] <= pivot <= b[>j]. */
static size_t partition(char *b, size_t n, size_t size, cmp_fn cmp)
{
    char *lo = b, *mid = b + (n / 2) * size, *hi = b + (n - 1) * size;
    size_t i = 0, j = n;
    if (cmp(mid, lo) < 0) {
        swap(mid, lo, size);
    }
    if (cmp(hi, mid) < 0) {
        swap(hi, mid, size);
        if (cmp(mid, lo) < 0) {
            swap(mid, lo, size);
        }
    }
    swap(lo, mid, size);
    for (;;) {
        do {
            i++;
        } while (i < n && cmp(b + i * size, b) < 0);
        do {
            j--;
        } while (cmp(b + j * size, b) > 0); /* stops at b[0] at the latest */
        if (i >= j) {
            break;
        }
        swap(b + i * size, b + j * size, size);
    }
    swap(b, b + j * size, size);
    return j;
}

static void intro(char *b, size_t n, size_t size, cmp_fn cmp, unsigned depth)
{
    while (n > SMALL) {
        size_t j;
        if (depth-- == 0) {
            heap_sort(b, n, size, cmp);
            return;
        }
        j = partition(b, n, size, cmp);
        /* the smaller side by recursion (at most log2 n deep), the larger by the loop */
        if (j < n - j - 1) {
            intro(b, j, size, cmp, depth);
            b += (j + 1) * size;
            n -= j + 1;
        } else {
            intro(b + (j + 1) * size, n - j - 1, size, cmp, depth);
            n = j;
        }
    }
    insertion(b, n, size, cmp);
}

void ur_sort_in_place(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *))
{
    unsigned depth = 0;
    for (size_t m = n; m > 1; m >>= 1) {
        depth += 2;
    }
    if (n > 1 && size > 0) {
        intro(base, n, size, cmp, depth);
    }
}
