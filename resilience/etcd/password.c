/* Reading an etcd password from a file (gt_etcd_read_password): the file
 * must be the user's alone, as ssh asks of a private key, since whoever
 * reads it can act as the job in etcd. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "giant/engine/etcd.h"

gt_status gt_etcd_read_password(const char *path, char *out, size_t cap) {
  if (cap) out[0] = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return gt_errorf(GT_ENOTFOUND, "cannot read the etcd password file %s: %s", path, strerror(errno));
  struct stat st;
  gt_status s = GT_OK;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    s = gt_errorf(GT_EINVAL, "the etcd password file %s is not a regular file", path);
  else if (st.st_mode & 077)
    s = gt_errorf(GT_EINVAL, "the etcd password file %s may be read by others (mode %03o): chmod 600 it", path,
                  (unsigned)(st.st_mode & 0777));
  ssize_t n = 0;
  if (s == GT_OK) {
    do n = read(fd, out, cap);
    while (n < 0 && errno == EINTR);
    if (n < 0)
      s = gt_errorf(GT_EIO, "cannot read the etcd password file %s: %s", path, strerror(errno));
    else if ((size_t)n >= cap)
      s = gt_errorf(GT_EINVAL, "the etcd password file %s is longer than %zu bytes", path, cap - 1);
  }
  close(fd);
  if (s != GT_OK) {
    if (cap) memset(out, 0, cap);
    return s;
  }
  /* One line: a trailing newline (as `echo` writes) is not part of it. */
  while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == '\r')) n--;
  out[n] = 0;
  if (n == 0 || memchr(out, '\n', (size_t)n) || memchr(out, 0, (size_t)n)) {
    memset(out, 0, cap);
    return gt_errorf(GT_EINVAL, "the etcd password file %s must hold one non-empty line", path);
  }
  return GT_OK;
}
