/* The shared-memory transport, for ranks on one host.
 *
 * Each rank owns a segment (shm_open, unlinked once every peer mapped it)
 * holding a doorbell and one inbound channel per peer. A channel is a ring
 * of NSLOT slots of SLOT bytes with a head the sender advances and a tail
 * the receiver advances; the receiver reduces straight out of the slot.
 * Whoever makes room or data rings the other side's doorbell, a futex, so
 * a waiting rank sleeps instead of spinning. A peer's death shows through
 * its pidfd (even while it is an unreaped zombie); a peer's failure through
 * the failed flag it sets in every segment. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "giant/log.h"
#include "parallel/comm_internal.h"

#define NSLOT 4
#define SLOT (512u << 10)
#define SEG_HDR 4096
#define CHAN_HDR 4096
#define CHAN_BYTES ((size_t)CHAN_HDR + (size_t)NSLOT * SLOT)

typedef struct slot_hdr {
  uint32_t seq, step, len, pad;
} slot_hdr;

typedef struct chan {
  _Alignas(64) atomic_uint_least64_t head;
  _Alignas(64) atomic_uint_least64_t tail;
  _Alignas(64) slot_hdr hdr[NSLOT];
} chan;

typedef struct seg {
  _Alignas(64) atomic_uint doorbell;
  _Alignas(64) atomic_int failed; /* 1 + the rank that failed */
} seg;

struct shm_state {
  int n;
  char **base;
  size_t bytes;
  char name[96];
  bool unlinked;
};

_Static_assert(sizeof(chan) <= CHAN_HDR, "channel header too big");
_Static_assert(sizeof(seg) <= SEG_HDR, "segment header too big");

static seg *seg_of(shm_state *s, int r) { return (seg *)s->base[r]; }
static chan *chan_of(shm_state *s, int owner, int sender) {
  return (chan *)(s->base[owner] + SEG_HDR + (size_t)sender * CHAN_BYTES);
}
static char *slot_data(chan *ch, uint64_t i) {
  return (char *)ch + CHAN_HDR + (size_t)(i % NSLOT) * SLOT;
}

static void ring(seg *sg) {
  atomic_fetch_add(&sg->doorbell, 1);
  syscall(SYS_futex, (unsigned int *)&sg->doorbell, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void gt_comm_shm_wake(gt_comm *c) {
  if (c->shm) ring(seg_of(c->shm, c->rank));
}

void gt_comm_shm_fail(gt_comm *c) {
  shm_state *s = c->shm;
  if (!s) return;
  for (int i = 0; i < s->n; i++) {
    int zero = 0;
    atomic_compare_exchange_strong(&seg_of(s, i)->failed, &zero, c->rank + 1);
    ring(seg_of(s, i));
  }
}

static size_t allowed(const plan *p, int rx_step, size_t rx_done, int k, size_t len) {
  int d = k - p->dep;
  if (p->dep < 0 || d < 0 || rx_step > d) return len;
  return rx_step == d ? rx_done : 0;
}

static gt_status check_peer(gt_comm *c, int peer) {
  if (peer < 0 || c->pidfds[peer] < 0) return GT_OK;
  struct pollfd pf = {.fd = c->pidfds[peer], .events = POLLIN};
  if (poll(&pf, 1, 0) > 0)
    return gt_errorf(GT_ECONN, "rank %d died (its process exited)", peer);
  return GT_OK;
}

gt_status gt_comm_run_shm(gt_comm *c, const plan *p, double deadline) {
  shm_state *s = c->shm;
  seg *me = seg_of(s, c->rank);
  chan *txc = p->tx_peer >= 0 ? chan_of(s, p->tx_peer, c->rank) : NULL;
  chan *rxc = p->rx_peer >= 0 ? chan_of(s, c->rank, p->rx_peer) : NULL;
  seg *txs = p->tx_peer >= 0 ? seg_of(s, p->tx_peer) : NULL;
  seg *rxs = p->rx_peer >= 0 ? seg_of(s, p->rx_peer) : NULL;
  size_t es = gt_dtype_size(p->dtype);
  int ts = 0, rs = 0;
  size_t td = 0, rd = 0;
  while (ts < p->ntx || rs < p->nrx) {
    if (atomic_load(&c->aborted)) return gt_comm_aborted_status(c);
    int f = atomic_load(&me->failed);
    if (f) return gt_errorf(GT_ECONN, "rank %d of the group failed or aborted", f - 1);
    unsigned int seen = atomic_load(&me->doorbell);
    bool progress = false;
    while (ts < p->ntx) {
      uint64_t head = atomic_load_explicit(&txc->head, memory_order_relaxed);
      uint64_t tail = atomic_load_explicit(&txc->tail, memory_order_acquire);
      if (head - tail >= NSLOT) break;
      const plan_step *st = &p->tx[ts];
      size_t a = allowed(p, rs, rd, ts, st->len);
      size_t n = a - td < SLOT ? a - td : SLOT;
      if (n == 0 && st->len > 0) break;
      memcpy(slot_data(txc, head), st->ptr + td, n);
      txc->hdr[head % NSLOT] = (slot_hdr){p->tx_seq, (uint32_t)ts, (uint32_t)n, 0};
      atomic_store_explicit(&txc->head, head + 1, memory_order_release);
      ring(txs);
      td += n;
      if (td == st->len) ts++, td = 0;
      progress = true;
    }
    while (rs < p->nrx) {
      uint64_t tail = atomic_load_explicit(&rxc->tail, memory_order_relaxed);
      uint64_t head = atomic_load_explicit(&rxc->head, memory_order_acquire);
      if (head == tail) break;
      const plan_step *st = &p->rx[rs];
      slot_hdr h = rxc->hdr[tail % NSLOT];
      if (h.seq != p->rx_seq || h.step != (uint32_t)rs || h.len > st->len - rd ||
          (h.len == 0 && st->len != 0) || h.len % es)
        return gt_errorf(GT_EFORMAT, "unexpected piece from rank %d (seq %u step %u len %u; expected seq %u step %d, %zu bytes left): ranks issued different operations",
                         p->rx_peer, h.seq, h.step, h.len, p->rx_seq, rs, st->len - rd);
      const char *src = slot_data(rxc, tail);
      if (st->src2) gt_comm_reduce(p->dtype, st->ptr + rd, st->src2 + rd, src, h.len / es);
      else memcpy(st->ptr + rd, src, h.len);
      atomic_store_explicit(&rxc->tail, tail + 1, memory_order_release);
      ring(rxs);
      rd += h.len;
      if (rd == st->len) rs++, rd = 0;
      progress = true;
    }
    if (progress) continue;
    if (ts < p->ntx) GT_TRY(check_peer(c, p->tx_peer));
    if (rs < p->nrx) GT_TRY(check_peer(c, p->rx_peer));
    double left = deadline - gt_now();
    if (left <= 0) {
      int who = rs < p->nrx ? p->rx_peer : p->tx_peer;
      return gt_errorf(GT_ETIMEDOUT, "no progress with rank %d before the operation timeout (%.1f s): it is stopped, hung or far behind",
                       who, c->op_timeout);
    }
    /* Short sleeps: a dead peer is checked again at least this often. */
    struct timespec ts_wait = {0, left > 0.02 ? 20000000L : (long)(left * 1e9) + 1};
    syscall(SYS_futex, (unsigned int *)&me->doorbell, FUTEX_WAIT, seen, &ts_wait, NULL, 0);
  }
  return GT_OK;
}

/* ---- setup ---- */

/* Ranks share memory and pids only within one boot, ipc and pid namespace. */
static void host_id(char *out, size_t n) {
  char boot[64] = "?", pidns[64] = "?", ipcns[64] = "?", host[128] = "?";
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    if (!fgets(boot, sizeof boot, f)) boot[0] = '?';
    boot[strcspn(boot, "\n")] = 0;
    fclose(f);
  }
  ssize_t k = readlink("/proc/self/ns/pid", pidns, sizeof pidns - 1);
  pidns[k > 0 ? k : 0] = 0;
  k = readlink("/proc/self/ns/ipc", ipcns, sizeof ipcns - 1);
  ipcns[k > 0 ? k : 0] = 0;
  gethostname(host, sizeof host - 1);
  host[sizeof host - 1] = 0;
  snprintf(out, n, "%s|%s|%s|%s", boot, pidns, ipcns, host);
}

static gt_status get_all(gt_comm *c, const char *what, char **vals, double deadline) {
  for (int j = 0; j < c->size; j++) {
    char key[320];
    gt_comm_key(c, key, sizeof key, "%s/%d", what, j);
    void *v;
    size_t len;
    int ms = (int)((deadline - gt_now()) * 1000);
    gt_status st = gt_store_get(c->store, key, &v, &len, ms > 0 ? ms : 0);
    if (st != GT_OK) {
      for (int i = 0; i < j; i++) free(vals[i]);
      return st;
    }
    vals[j] = v;
  }
  return GT_OK;
}

static void free_all(char **vals, int n) {
  for (int i = 0; i < n; i++) free(vals[i]);
}

static gt_status put(gt_comm *c, const char *what, const char *val) {
  char key[320];
  gt_comm_key(c, key, sizeof key, "%s/%d", what, c->rank);
  return gt_store_set(c->store, key, val, strlen(val));
}

gt_status gt_comm_shm_setup(gt_comm *c, double deadline) {
  int n = c->size;
  char id[400], mine[480];
  host_id(id, sizeof id);
  snprintf(mine, sizeof mine, "%d %s", (int)getpid(), id);
  GT_TRY(put(c, "host", mine));
  char **vals = calloc((size_t)n, sizeof *vals);
  if (!vals) return gt_errorf(GT_ENOMEM, "out of memory");
  gt_status st = get_all(c, "host", vals, deadline);
  if (st != GT_OK) {
    free(vals);
    return st;
  }
  int *pids = calloc((size_t)n, sizeof *pids);
  bool same = pids != NULL;
  for (int j = 0; same && j < n; j++) {
    char *sp = strchr(vals[j], ' ');
    pids[j] = atoi(vals[j]);
    same = sp && strcmp(sp + 1, id) == 0 && pids[j] > 0;
  }
  free_all(vals, n);
  if (!same) {
    free(vals), free(pids);
    return gt_errorf(GT_EUNSUPPORTED, "shared memory needs every rank on one host (and namespace)");
  }

  shm_state *s = calloc(1, sizeof *s);
  char **base = calloc((size_t)n, sizeof *base);
  if (!s || !base) {
    free(s), free(base), free(vals), free(pids);
    return gt_errorf(GT_ENOMEM, "out of memory");
  }
  s->n = n, s->base = base;
  s->bytes = SEG_HDR + (size_t)n * CHAN_BYTES;
  c->shm = s;
  uint32_t rnd = 0;
  if (getrandom(&rnd, sizeof rnd, 0) != sizeof rnd) rnd = (uint32_t)gt_now();
  snprintf(s->name, sizeof s->name, "/giant-%d-%d-%08x", (int)getpid(), c->rank, rnd);
  /* Reserve the pages now: a full /dev/shm fails here, not with SIGBUS. */
  int fd = shm_open(s->name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  const char *why = NULL;
  if (fd < 0) why = "shm_open";
  else if (posix_fallocate(fd, 0, (off_t)s->bytes) != 0) why = "reserving /dev/shm space";
  else if ((base[c->rank] = mmap(NULL, s->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
    why = "mmap", base[c->rank] = NULL;
  if (fd >= 0) close(fd);
  if (why) {
    gt_warn("group '%s': no shared-memory segment (%s: %s); using TCP", c->prefix, why, strerror(errno));
    if (fd >= 0) shm_unlink(s->name);
    s->unlinked = true;
  }
  st = put(c, "shm", why ? "-" : s->name);
  if (st == GT_OK) st = get_all(c, "shm", vals, deadline);
  bool ok = st == GT_OK && !why;
  for (int j = 0; st == GT_OK && j < n; j++) {
    if (j == c->rank) continue;
    if (!strcmp(vals[j], "-")) {
      ok = false;
      continue;
    }
    if (!ok) continue;
    int pfd = shm_open(vals[j], O_RDWR | O_CLOEXEC, 0);
    if (pfd >= 0) {
      void *m = mmap(NULL, s->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, pfd, 0);
      close(pfd);
      if (m != MAP_FAILED) base[j] = m;
    }
    if (!base[j]) ok = false;
    c->pidfds[j] = (int)syscall(SYS_pidfd_open, pids[j], 0);
  }
  if (st == GT_OK) free_all(vals, n);
  /* Every rank learns whether every rank mapped every segment, so all
   * choose the same transport; then each unlinks its own name. */
  if (st == GT_OK) st = put(c, "shmok", ok ? "1" : "0");
  if (st == GT_OK) st = get_all(c, "shmok", vals, deadline);
  if (st == GT_OK) {
    for (int j = 0; j < n; j++) ok &= vals[j][0] == '1';
    free_all(vals, n);
  }
  if (!s->unlinked) shm_unlink(s->name), s->unlinked = true;
  free(vals), free(pids);
  if (st != GT_OK) return st;
  if (!ok) {
    gt_comm_shm_destroy(c);
    return gt_errorf(GT_EUNSUPPORTED, "some rank could not map the shared-memory segments");
  }
  c->transport = GT_COMM_SHM;
  return GT_OK;
}

void gt_comm_shm_destroy(gt_comm *c) {
  shm_state *s = c->shm;
  if (!s) return;
  for (int i = 0; i < s->n; i++)
    if (s->base[i]) munmap(s->base[i], s->bytes);
  if (!s->unlinked) shm_unlink(s->name);
  free(s->base);
  free(s);
  c->shm = NULL;
}
