/* File-system fault injection for tests (fs_faults.c; the test is linked with the
 * -Wl,--wrap options of FS_FAULTS_WRAP in CMakeLists.txt). */
#ifndef UNROLL_TEST_FS_FAULTS_H
#define UNROLL_TEST_FS_FAULTS_H

/* Count the calls that change the file system or open a file from now on; with at > 0, call
 * `at` (1-based) fails with EIO, and every later one unless `once`. */
void fs_faults_arm(unsigned at, int once);
/* Stop counting and failing; the number of calls counted since fs_faults_arm. */
unsigned fs_faults_disarm(void);

#endif
