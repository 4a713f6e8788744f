/* Fault injection for tests (LD_PRELOAD): reads or writes of files under a directory fail on
 * one rank, as a broken disk, a full file system or a dying network mount would make them fail.
 *
 *   KKTRAIN_FAIL_IO_UNDER=/path     files whose path starts with this (required; else no effect)
 *   KKTRAIN_FAIL_IO_RANK=1          only in the process of that rank (OMPI_COMM_WORLD_RANK or
 *                                   PMIX_RANK; 0 without a launcher; unset: every process)
 *   KKTRAIN_FAIL_IO_OPS=write       write (default), read, or both
 *   KKTRAIN_FAIL_IO_ERRNO=5         the errno the failing call sets (5 EIO, 28 ENOSPC)
 *   KKTRAIN_FAIL_IO_AFTER_BYTES=0   let this many bytes through first (a disk that fills up)
 *   KKTRAIN_FAIL_IO_DELAY_MS=0      instead of failing, sleep this long in each matching call
 *
 * It wraps the calls programs make through the C library's exported symbols (write, pwrite,
 * writev, pwritev, read, pread, readv, preadv): kktrain's own file I/O and HDF5's. (The C
 * library's stdio calls its internal write, which this does not see; stdio files are tested on
 * a full tmpfs instead.) */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static long long passed_bytes = 0;

static int env_int(const char* name, int def) {
  const char* v = getenv(name);
  return v && *v ? atoi(v) : def;
}

/* 1: fail this call; 0: let it through (after any delay). */
static int intercept(int fd, int is_write, size_t bytes) {
  const char* under = getenv("KKTRAIN_FAIL_IO_UNDER");
  if (!under || !*under) return 0;
  const char* want = getenv("KKTRAIN_FAIL_IO_RANK");
  if (want && *want) {
    const char* r = getenv("OMPI_COMM_WORLD_RANK");
    if (!r) r = getenv("PMIX_RANK");
    if (!r) r = "0"; /* not launched by mpirun: the only rank */
    if (strcmp(r, want) != 0) return 0;
  }
  const char* ops = getenv("KKTRAIN_FAIL_IO_OPS");
  if (!ops || !*ops) ops = "write";
  if (strcmp(ops, "both") != 0 && strcmp(ops, is_write ? "write" : "read") != 0) return 0;
  char link[64], path[4096];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, path, sizeof path - 1);
  if (n <= 0) return 0;
  path[n] = 0;
  if (strncmp(path, under, strlen(under)) != 0) return 0;
  const int delay = env_int("KKTRAIN_FAIL_IO_DELAY_MS", 0);
  if (delay > 0) {
    struct timespec ts = {delay / 1000, (long)(delay % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    return 0;
  }
  const long long after = env_int("KKTRAIN_FAIL_IO_AFTER_BYTES", 0);
  if (passed_bytes + (long long)bytes <= after) {
    passed_bytes += (long long)bytes;
    return 0;
  }
  errno = env_int("KKTRAIN_FAIL_IO_ERRNO", EIO);
  return 1;
}

static size_t iov_bytes(const struct iovec* v, int c) {
  size_t n = 0;
  for (int i = 0; i < c; ++i) n += v[i].iov_len;
  return n;
}

typedef ssize_t (*write_fn)(int, const void*, size_t);
typedef ssize_t (*pwrite_fn)(int, const void*, size_t, off_t);
typedef ssize_t (*writev_fn)(int, const struct iovec*, int);
typedef ssize_t (*pwritev_fn)(int, const struct iovec*, int, off_t);
typedef ssize_t (*read_fn)(int, void*, size_t);
typedef ssize_t (*pread_fn)(int, void*, size_t, off_t);
typedef ssize_t (*readv_fn)(int, const struct iovec*, int);
typedef ssize_t (*preadv_fn)(int, const struct iovec*, int, off_t);

/* The C library's function of that name (looked up once). */
#define NEXT(name, type)                    \
  static type next_fn = NULL;               \
  if (!next_fn) next_fn = (type)dlsym(RTLD_NEXT, name)

ssize_t write(int fd, const void* b, size_t n) {
  NEXT("write", write_fn);
  return intercept(fd, 1, n) ? -1 : next_fn(fd, b, n);
}
ssize_t pwrite(int fd, const void* b, size_t n, off_t o) {
  NEXT("pwrite", pwrite_fn);
  return intercept(fd, 1, n) ? -1 : next_fn(fd, b, n, o);
}
ssize_t pwrite64(int fd, const void* b, size_t n, off_t o) {
  NEXT("pwrite64", pwrite_fn);
  return intercept(fd, 1, n) ? -1 : next_fn(fd, b, n, o);
}
ssize_t writev(int fd, const struct iovec* v, int c) {
  NEXT("writev", writev_fn);
  return intercept(fd, 1, iov_bytes(v, c)) ? -1 : next_fn(fd, v, c);
}
ssize_t pwritev(int fd, const struct iovec* v, int c, off_t o) {
  NEXT("pwritev", pwritev_fn);
  return intercept(fd, 1, iov_bytes(v, c)) ? -1 : next_fn(fd, v, c, o);
}
ssize_t read(int fd, void* b, size_t n) {
  NEXT("read", read_fn);
  return intercept(fd, 0, n) ? -1 : next_fn(fd, b, n);
}
ssize_t pread(int fd, void* b, size_t n, off_t o) {
  NEXT("pread", pread_fn);
  return intercept(fd, 0, n) ? -1 : next_fn(fd, b, n, o);
}
ssize_t pread64(int fd, void* b, size_t n, off_t o) {
  NEXT("pread64", pread_fn);
  return intercept(fd, 0, n) ? -1 : next_fn(fd, b, n, o);
}
ssize_t readv(int fd, const struct iovec* v, int c) {
  NEXT("readv", readv_fn);
  return intercept(fd, 0, iov_bytes(v, c)) ? -1 : next_fn(fd, v, c);
}
ssize_t preadv(int fd, const struct iovec* v, int c, off_t o) {
  NEXT("preadv", preadv_fn);
  return intercept(fd, 0, iov_bytes(v, c)) ? -1 : next_fn(fd, v, c, o);
}
