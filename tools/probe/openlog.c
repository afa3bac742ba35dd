/* LD_PRELOAD diagnostic: logs every open of a path under /proc for writing (path, flags, result,
   errno) to stderr. Used to find which /proc writes CUDA's start makes under the sandbox. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void logit(const char *fn, int dirfd, const char *path, int flags, int rc, int err) {
    char full[600], link[512];
    if (!path) return;
    if (path[0] != '/' && dirfd >= 0) {
        char fdp[64];
        snprintf(fdp, sizeof fdp, "/proc/self/fd/%d", dirfd);
        ssize_t n = readlink(fdp, link, sizeof link - 1);
        if (n < 0) return;
        link[n] = 0;
        snprintf(full, sizeof full, "%s/%s", link, path);
    } else {
        snprintf(full, sizeof full, "%s", path);
    }
    if (strncmp(full, "/proc", 5) != 0 && strncmp(full, "/dev/shm", 8) != 0) return;
    if (!(flags & (O_WRONLY | O_RDWR | O_CREAT | O_TRUNC))) return;
    char buf[800];
    int n = snprintf(buf, sizeof buf, "[openlog] %s %s flags=%#x rc=%d errno=%d\n", fn, full, flags, rc, rc < 0 ? err : 0);
    (void)!write(2, buf, n);
}

#define MODE_ARG mode_t m = 0; if (f & (O_CREAT | O_TMPFILE)) { va_list a; va_start(a, f); m = va_arg(a, int); va_end(a); }

int open(const char *p, int f, ...) { MODE_ARG static int (*r)(const char *, int, ...); if (!r) r = dlsym(RTLD_NEXT, "open");
    int rc = r(p, f, m); int e = errno; logit("open", -1, p, f, rc, e); errno = e; return rc; }
int open64(const char *p, int f, ...) { MODE_ARG static int (*r)(const char *, int, ...); if (!r) r = dlsym(RTLD_NEXT, "open64");
    int rc = r(p, f, m); int e = errno; logit("open64", -1, p, f, rc, e); errno = e; return rc; }
int openat(int d, const char *p, int f, ...) { MODE_ARG static int (*r)(int, const char *, int, ...); if (!r) r = dlsym(RTLD_NEXT, "openat");
    int rc = r(d, p, f, m); int e = errno; logit("openat", d, p, f, rc, e); errno = e; return rc; }
int openat64(int d, const char *p, int f, ...) { MODE_ARG static int (*r)(int, const char *, int, ...); if (!r) r = dlsym(RTLD_NEXT, "openat64");
    int rc = r(d, p, f, m); int e = errno; logit("openat64", d, p, f, rc, e); errno = e; return rc; }
int __open_2(const char *p, int f) { static int (*r)(const char *, int); if (!r) r = dlsym(RTLD_NEXT, "__open_2");
    int rc = r(p, f); int e = errno; logit("__open_2", -1, p, f, rc, e); errno = e; return rc; }
int __open64_2(const char *p, int f) { static int (*r)(const char *, int); if (!r) r = dlsym(RTLD_NEXT, "__open64_2");
    int rc = r(p, f); int e = errno; logit("__open64_2", -1, p, f, rc, e); errno = e; return rc; }
static int mode_flags(const char *mode) {
    return (strchr(mode, 'w') || strchr(mode, 'a')) ? O_WRONLY : (strchr(mode, '+') ? O_RDWR : 0); }
FILE *fopen(const char *p, const char *mode) { static FILE *(*r)(const char *, const char *); if (!r) r = dlsym(RTLD_NEXT, "fopen");
    FILE *rc = r(p, mode); int e = errno; logit("fopen", -1, p, mode_flags(mode), rc ? 0 : -1, e); errno = e; return rc; }
FILE *fopen64(const char *p, const char *mode) { static FILE *(*r)(const char *, const char *); if (!r) r = dlsym(RTLD_NEXT, "fopen64");
    FILE *rc = r(p, mode); int e = errno; logit("fopen64", -1, p, mode_flags(mode), rc ? 0 : -1, e); errno = e; return rc; }
