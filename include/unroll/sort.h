/* Sorting in place, with no memory beside the array: qsort may allocate a buffer as large as
 * the array (glibc sorts by merging), and the OCDBT writer sorts its 400,000 entries at the
 * run's peak of memory. Not stable: for orders with no ties (a sequence number breaks them). */
#ifndef UNROLL_SORT_H
#define UNROLL_SORT_H

#include <stddef.h>

/* Sort the n elements of `size` bytes at base by cmp, as qsort does. */
void ur_sort_in_place(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *));

#endif
