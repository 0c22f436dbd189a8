/* slowsync: an LD_PRELOAD shim that makes fsync and fdatasync slower.
 *
 * This VM's virtual disk completes a flush in about 130 us; a consumer NVMe
 * drive without power-loss protection takes 1-5 ms, a hard disk 5-10 ms.
 * bench/storage.py --fsync-delay-us N runs the agent and sqlite under this
 * shim, so group commit and sqlite's one flush per commit are compared on
 * the kind of disk where the flush, not the CPU, is the cost.
 *
 * Each call does the real flush, then sleeps SHOAL_FSYNC_DELAY_US.
 * Build: cc -shared -fPIC -O2 -o slowsync.so slowsync.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>

static void slow_down(void) {
    const char *text = getenv("SHOAL_FSYNC_DELAY_US");
    long us = text ? atol(text) : 0;
    if (us > 0) {
        struct timespec t = {us / 1000000, (us % 1000000) * 1000};
        nanosleep(&t, NULL);
    }
}

int fsync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    int rc = real(fd);
    slow_down();
    return rc;
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    int rc = real(fd);
    slow_down();
    return rc;
}
