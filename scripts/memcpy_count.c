/* Bytes a process copies with memcpy and memmove, for scripts/tls_copies.sh.
 *
 *   gcc -shared -fPIC -O2 -fno-builtin -fno-tree-loop-distribute-patterns \
 *       -o memcpy_count.so scripts/memcpy_count.c -ldl
 *   LD_PRELOAD=./memcpy_count.so MEMCPY_COUNT_MIN=512 PROGRAM ...
 *
 * Preloaded, its memcpy and memmove take the calls a program makes through the dynamic linker (a
 * Rust program's `copy_from_slice`, `Vec` growth, `extend_from_slice` of any size the compiler
 * does not inline) and count those of at least MEMCPY_COUNT_MIN bytes (default 512: smaller
 * copies are headers and moves of values, not payload). Calls inside the C library itself are not
 * seen. The totals go to standard error when the program exits or gets SIGTERM (which then ends
 * it): `memcpy_count: BYTES bytes in CALLS calls of >= MIN bytes`.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef void *(*copy_fn)(void *, const void *, size_t);

static copy_fn real_memcpy;
static copy_fn real_memmove;
static size_t min_len = 512;
static atomic_ullong bytes;
static atomic_ullong calls;

/* Until the real functions are known (dlsym itself may copy): a byte loop, forward or backward. */
static void *slow_move(void *dst, const void *src, size_t n) {
    volatile unsigned char *d = dst;
    const volatile unsigned char *s = src;
    if (d < s) {
        for (size_t i = 0; i < n; i++) d[i] = s[i];
    } else {
        for (size_t i = n; i > 0; i--) d[i - 1] = s[i - 1];
    }
    return dst;
}

static void report(void) {
    char line[160];
    int len = snprintf(line, sizeof line, "memcpy_count: %llu bytes in %llu calls of >= %zu bytes\n",
                       (unsigned long long)atomic_load(&bytes),
                       (unsigned long long)atomic_load(&calls), min_len);
    if (len > 0) (void)!write(2, line, (size_t)len);
}

static void on_term(int signal) {
    (void)signal;
    report();
    _exit(0);
}

__attribute__((constructor)) static void init(void) {
    real_memcpy = (copy_fn)dlsym(RTLD_NEXT, "memcpy");
    real_memmove = (copy_fn)dlsym(RTLD_NEXT, "memmove");
    const char *min = getenv("MEMCPY_COUNT_MIN");
    if (min) min_len = (size_t)strtoull(min, NULL, 10);
    signal(SIGTERM, on_term);
    atexit(report);
}

static void count(size_t n) {
    if (n >= min_len) {
        atomic_fetch_add_explicit(&bytes, n, memory_order_relaxed);
        atomic_fetch_add_explicit(&calls, 1, memory_order_relaxed);
    }
}

void *memcpy(void *dst, const void *src, size_t n) {
    count(n);
    return real_memcpy ? real_memcpy(dst, src, n) : slow_move(dst, src, n);
}

void *memmove(void *dst, const void *src, size_t n) {
    count(n);
    return real_memmove ? real_memmove(dst, src, n) : slow_move(dst, src, n);
}
