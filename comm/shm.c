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
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "giant/log.h"
#include "comm/comm_internal.h"
#include "giant/engine/comm.h"
#include "giant/engine/store.h"

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
  _Alignas(64) atomic_int sleepers; /* ranks in (or entering) a futex wait on doorbell */
  _Alignas(64) atomic_int failed;   /* 1 + the rank that failed */
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
static char *slot_data(chan *ch, uint64_t i) { return (char *)ch + CHAN_HDR + (size_t)(i % NSLOT) * SLOT; }

/* The wake-up system call is made only for a rank that sleeps: a waiter
 * counts itself in sleepers before it looks at doorbell again, and a ringer
 * bumps doorbell before it looks at sleepers, so (all seq_cst) either the
 * waiter sees the new doorbell or the ringer sees the waiter. */
static void ring(seg *sg) {
  atomic_fetch_add(&sg->doorbell, 1);
  if (atomic_load(&sg->sleepers) > 0)
    syscall(SYS_futex, (unsigned int *)&sg->doorbell, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Sleeps until the doorbell moves past seen, for at most left seconds
 * capped so that a dead peer is checked again at least every 20 ms. */
static void wait_bell(seg *me, unsigned int seen, double left) {
  atomic_fetch_add(&me->sleepers, 1);
  if (atomic_load(&me->doorbell) == seen) {
    struct timespec ts = {0, left > 0.02 ? 20000000L : (long)(left * 1e9) + 1};
    syscall(SYS_futex, (unsigned int *)&me->doorbell, FUTEX_WAIT, seen, &ts, NULL, 0);
  }
  atomic_fetch_sub(&me->sleepers, 1);
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
  if (poll(&pf, 1, 0) > 0) return gt_errorf(GT_ECONN, "rank %d died (its process exited)", peer);
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
      gt_comm_copy(slot_data(txc, head), st->ptr + td, n);
      txc->hdr[head % NSLOT] = (slot_hdr){p->tx_seq, (uint32_t)ts, (uint32_t)n, 0};
      atomic_store_explicit(&txc->head, head + 1, memory_order_release);
      ring(txs);
      td += n;
      if (td == st->len) {
        ts++;
        td = 0;
      }
      progress = true;
    }
    while (rs < p->nrx) {
      uint64_t tail = atomic_load_explicit(&rxc->tail, memory_order_relaxed);
      uint64_t head = atomic_load_explicit(&rxc->head, memory_order_acquire);
      if (head == tail) break;
      const plan_step *st = &p->rx[rs];
      slot_hdr h = rxc->hdr[tail % NSLOT];
      if (h.seq != p->rx_seq || h.step != (uint32_t)rs || h.len > st->len - rd || (h.len == 0 && st->len != 0) ||
          h.len % es)
        return gt_errorf(GT_EFORMAT,
                         "unexpected piece from rank %d (seq %u step %u len %u; expected seq %u step %d, %zu bytes "
                         "left): ranks issued different operations",
                         p->rx_peer, h.seq, h.step, h.len, p->rx_seq, rs, st->len - rd);
      const char *src = slot_data(rxc, tail);
      if (st->src2)
        gt_comm_reduce(p->dtype, st->ptr + rd, st->src2 + rd, src, h.len / es);
      else
        gt_comm_copy(st->ptr + rd, src, h.len);
      atomic_store_explicit(&rxc->tail, tail + 1, memory_order_release);
      ring(rxs);
      rd += h.len;
      if (rd == st->len) {
        rs++;
        rd = 0;
      }
      progress = true;
    }
    if (progress) continue;
    if (ts < p->ntx) GT_TRY(check_peer(c, p->tx_peer));
    if (rs < p->nrx) GT_TRY(check_peer(c, p->rx_peer));
    double left = deadline - gt_now();
    if (left <= 0) {
      int who = rs < p->nrx ? p->rx_peer : p->tx_peer;
      return gt_errorf(
          GT_ETIMEDOUT,
          "no progress with rank %d before the operation timeout (%.1f s): it is stopped, hung or far behind", who,
          c->op_timeout);
    }
    wait_bell(me, seen, left);
  }
  return GT_OK;
}

/* ---- all-reduce between two ranks ----
 *
 * Rank r owns half r of the buffer. Piece by piece, each rank sends its
 * pieces of the other half (stream A, the ordinary channel), reduces the
 * peer's pieces of its own half straight out of the slot into both its
 * buffer and a slot of stream R (the peer segment's otherwise unused
 * channel from the peer to itself), and copies the peer's reduced pieces
 * of the other half into its buffer. Pieces are small enough that the
 * slots in flight stay in cache, and both ranks copy and reduce at once.
 * Stream R never waits on anything but its reader, so A and R cannot
 * block each other. */

#define PIECE (256u << 10)
#define STREAM_MIN ((size_t)16 << 20)
#define TAG_A 0x40000000u
#define TAG_R 0x80000000u
_Static_assert(PIECE <= SLOT && PIECE % 64 == 0, "a piece fills at most one slot");

static size_t piece_len(size_t total, size_t piece, uint32_t k) {
  size_t o = (size_t)k * piece;
  return total - o < piece ? total - o : piece;
}

static gt_status bad_piece(int peer, const char *stream, slot_hdr h, uint32_t seq, uint32_t k, size_t want) {
  return gt_errorf(GT_EFORMAT,
                   "unexpected all-reduce piece from rank %d on stream %s (seq %u step %#x len %u; expected seq %u "
                   "step %#x len %zu): ranks issued different operations",
                   peer, stream, h.seq, h.step, h.len, seq, k, want);
}

gt_status gt_comm_shm_allreduce2(gt_comm *c, char *buf, size_t count, gt_dtype t, double deadline) {
  shm_state *s = c->shm;
  int r = c->rank, o = 1 - r;
  seg *me = seg_of(s, r), *ps = seg_of(s, o);
  chan *atx = chan_of(s, o, r), *rtx = chan_of(s, o, o);
  chan *arx = chan_of(s, r, o), *rrx = chan_of(s, r, r);
  uint32_t txseq = c->tx_seq[o]++, rxseq = c->rx_seq[o]++;
  size_t es = gt_dtype_size(t), piece = PIECE;
  /* The halves split as chunk_off does: the first gets the odd element. */
  size_t n0 = count - count / 2;
  char *half[2] = {buf, buf + n0 * es};
  size_t len[2] = {n0 * es, (count - n0) * es};
  uint32_t np[2] = {(uint32_t)((len[0] + piece - 1) / piece), (uint32_t)((len[1] + piece - 1) / piece)};
  uint32_t a_tx = 0, a_rx = 0, r_rx = 0;
  /* The sums received land in the buffer with streaming stores once it is
   * too big to stay in cache anyway: they skip reading each line before
   * writing it and leave the cache to the slots (measured here: faster at
   * 16 and 64 MiB, a little slower at 4 MiB). */
  bool stream = count * es >= STREAM_MIN;
  while (a_tx < np[o] || a_rx < np[r] || r_rx < np[o]) {
    if (atomic_load(&c->aborted)) return gt_comm_aborted_status(c);
    int f = atomic_load(&me->failed);
    if (f) return gt_errorf(GT_ECONN, "rank %d of the group failed or aborted", f - 1);
    unsigned int seen = atomic_load(&me->doorbell);
    bool progress = false;
    if (r_rx < np[o]) {
      uint64_t tail = atomic_load_explicit(&rrx->tail, memory_order_relaxed);
      uint64_t head = atomic_load_explicit(&rrx->head, memory_order_acquire);
      if (head != tail) {
        slot_hdr h = rrx->hdr[tail % NSLOT];
        size_t want = piece_len(len[o], piece, r_rx);
        if (h.seq != rxseq || h.step != (TAG_R | r_rx) || h.len != want)
          return bad_piece(o, "R", h, rxseq, TAG_R | r_rx, want);
        if (stream)
          gt_comm_copy_nt(half[o] + (size_t)r_rx * piece, slot_data(rrx, tail), want);
        else
          gt_comm_copy(half[o] + (size_t)r_rx * piece, slot_data(rrx, tail), want);
        atomic_store_explicit(&rrx->tail, tail + 1, memory_order_release);
        ring(ps);
        r_rx++;
        progress = true;
      }
    }
    if (a_rx < np[r]) {
      uint64_t tail = atomic_load_explicit(&arx->tail, memory_order_relaxed);
      uint64_t head = atomic_load_explicit(&arx->head, memory_order_acquire);
      uint64_t rhead = atomic_load_explicit(&rtx->head, memory_order_relaxed);
      uint64_t rtail = atomic_load_explicit(&rtx->tail, memory_order_acquire);
      if (head != tail && rhead - rtail < NSLOT) {
        slot_hdr h = arx->hdr[tail % NSLOT];
        size_t want = piece_len(len[r], piece, a_rx);
        if (h.seq != rxseq || h.step != (TAG_A | a_rx) || h.len != want)
          return bad_piece(o, "A", h, rxseq, TAG_A | a_rx, want);
        char *d = half[r] + (size_t)a_rx * piece;
        gt_comm_reduce2(t, d, slot_data(rtx, rhead), slot_data(arx, tail), want / es);
        rtx->hdr[rhead % NSLOT] = (slot_hdr){txseq, TAG_R | a_rx, (uint32_t)want, 0};
        atomic_store_explicit(&rtx->head, rhead + 1, memory_order_release);
        atomic_store_explicit(&arx->tail, tail + 1, memory_order_release);
        ring(ps);
        a_rx++;
        progress = true;
      }
    }
    if (a_tx < np[o]) {
      uint64_t head = atomic_load_explicit(&atx->head, memory_order_relaxed);
      uint64_t tail = atomic_load_explicit(&atx->tail, memory_order_acquire);
      if (head - tail < NSLOT) {
        size_t n = piece_len(len[o], piece, a_tx);
        gt_comm_copy(slot_data(atx, head), half[o] + (size_t)a_tx * piece, n);
        atx->hdr[head % NSLOT] = (slot_hdr){txseq, TAG_A | a_tx, (uint32_t)n, 0};
        atomic_store_explicit(&atx->head, head + 1, memory_order_release);
        ring(ps);
        a_tx++;
        progress = true;
      }
    }
    if (progress) continue;
    GT_TRY(check_peer(c, o));
    double left = deadline - gt_now();
    if (left <= 0)
      return gt_errorf(
          GT_ETIMEDOUT,
          "no progress with rank %d before the operation timeout (%.1f s): it is stopped, hung or far behind", o,
          c->op_timeout);
    wait_bell(me, seen, left);
  }
  return GT_OK;
}

/* ---- setup ---- */

/* Ranks share memory and pids only within one boot, ipc and pid
 * namespace. A network namespace of its own makes a node of its own too
 * (a container, or an emulated node): such a rank is on another host as
 * far as the group's transport is concerned. */
static void host_id(char *out, size_t n) {
  char boot[64] = "?", pidns[64] = "?", ipcns[64] = "?", netns[64] = "?", host[128] = "?";
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
  k = readlink("/proc/self/ns/net", netns, sizeof netns - 1);
  netns[k > 0 ? k : 0] = 0;
  gethostname(host, sizeof host - 1);
  host[sizeof host - 1] = 0;
  snprintf(out, n, "%s|%s|%s|%s|%s", boot, pidns, ipcns, netns, host);
}

/* One string from every rank, over the mesh the group has just formed
 * (its progress thread runs, on TCP): three rounds of the store would
 * cost each group's start tens of ms on an etcd store, one all-gather
 * well under one. */
#define REC 512
static gt_status exchange(gt_comm *c, const char *mine, char **vals) {
  char *all = calloc((size_t)c->size, REC), rec[REC] = {0};
  if (!all) return gt_errorf(GT_ENOMEM, "out of memory");
  snprintf(rec, sizeof rec, "%s", mine);
  gt_status st = gt_comm_allgather(c, rec, all, REC / sizeof(float), GT_F32); /* bytes, moved as 4-byte words */
  for (int j = 0; st == GT_OK && j < c->size; j++) {
    char *r = all + (size_t)j * REC;
    if (!memchr(r, 0, REC)) st = gt_errorf(GT_EFORMAT, "rank %d's shared-memory record is not a string", j);
    if (st == GT_OK && !(vals[j] = strdup(r))) st = gt_errorf(GT_ENOMEM, "out of memory");
  }
  if (st != GT_OK)
    for (int j = 0; j < c->size; j++) {
      free(vals[j]);
      vals[j] = NULL;
    }
  free(all);
  return st;
}

static void free_all(char **vals, int n) {
  for (int i = 0; i < n; i++) {
    free(vals[i]);
    vals[i] = NULL;
  }
}

bool gt_comm_shm_name_ok(const char *name, int rank, int pid) {
  int npid = -1, nrank = -1;
  unsigned rnd = 0;
  if (sscanf(name, "/giant-%d-%d-%8x", &npid, &nrank, &rnd) != 3 || npid != pid || nrank != rank) return false;
  char expect[96];
  snprintf(expect, sizeof expect, "/giant-%d-%d-%08x", pid, rank, rnd);
  return strcmp(expect, name) == 0; /* nothing before, after or in another spelling */
}

char *gt_comm_shm_map_peer(const char *group, const char *name, int rank, int pid, size_t bytes) {
  if (!gt_comm_shm_name_ok(name, rank, pid)) {
    gt_warn("group '%s': rank %d's shared-memory segment name '%.80s' is not one this group makes; using TCP", group,
            rank, name);
    return NULL;
  }
  int fd = shm_open(name, O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0);
  if (fd < 0) return NULL;
  struct stat st;
  char *m = NULL;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077) ||
      (size_t)st.st_size < bytes) {
    gt_warn(
        "group '%s': rank %d's shared-memory segment %s is not a private segment of %zu bytes of this user; "
        "using TCP",
        group, rank, name, bytes);
  } else {
    m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) m = NULL;
  }
  close(fd);
  return m;
}

static const char *transport_word(int t) { return t == GT_COMM_TCP ? "tcp" : t == GT_COMM_SHM ? "shm" : "auto"; }

gt_status gt_comm_shm_setup(gt_comm *c, gt_comm_transport tr) {
  int n = c->size;
  char id[400], mine[480];
  host_id(id, sizeof id);
  snprintf(mine, sizeof mine, "%d %d %s", (int)tr, (int)getpid(), id);
  char **vals = calloc((size_t)n, sizeof *vals);
  if (!vals) return gt_errorf(GT_ENOMEM, "out of memory");
  gt_status st = exchange(c, mine, vals);
  /* One transport for all, or none: every rank sees the same requests. */
  for (int j = 0; st == GT_OK && j < n; j++)
    if (atoi(vals[j]) != (int)tr)
      st = gt_errorf(GT_EINVAL,
                     "rank %d asked for the %s transport and this rank for %s: every rank of a group must ask for "
                     "the same (GT_COMM_TRANSPORT, or the config's transport)",
                     j, transport_word(atoi(vals[j])), transport_word((int)tr));
  if (st != GT_OK || tr == GT_COMM_TCP) { /* TCP stays */
    free_all(vals, n);
    free(vals);
    return st;
  }
  /* Past the transport: "PID HOST-ID". */
  for (int j = 0; j < n; j++) {
    char *sp = strchr(vals[j], ' ');
    if (sp) memmove(vals[j], sp + 1, strlen(sp + 1) + 1);
  }
  int *pids = calloc((size_t)n, sizeof *pids);
  bool same = pids != NULL;
  for (int j = 0; same && j < n; j++) {
    char *sp = strchr(vals[j], ' ');
    pids[j] = atoi(vals[j]);
    same = sp && strcmp(sp + 1, id) == 0 && pids[j] > 0;
  }
  if (!same && pids && (c->host_of = calloc((size_t)n, sizeof *c->host_of))) {
    /* Hosts numbered in the order of their lowest rank: the same on every rank. */
    for (int j = 0; j < n; j++) {
      const char *hj = strchr(vals[j], ' ');
      c->host_of[j] = -1;
      for (int i = 0; i < j && c->host_of[j] < 0; i++) {
        const char *hi = strchr(vals[i], ' ');
        if (hj && hi && !strcmp(hi, hj)) c->host_of[j] = c->host_of[i];
      }
      if (c->host_of[j] < 0) c->host_of[j] = c->nhosts++;
    }
  }
  free_all(vals, n);
  if (!same) {
    free(vals);
    free(pids);
    return gt_errorf(GT_EUNSUPPORTED, "shared memory needs every rank on one host (and namespace)");
  }

  shm_state *s = calloc(1, sizeof *s);
  char **base = calloc((size_t)n, sizeof *base);
  if (!s || !base) {
    free(s);
    free(base);
    free(vals);
    free(pids);
    return gt_errorf(GT_ENOMEM, "out of memory");
  }
  s->n = n;
  s->base = base;
  s->bytes = SEG_HDR + (size_t)n * CHAN_BYTES;
  c->shm = s;
  uint32_t rnd = 0;
  if (getrandom(&rnd, sizeof rnd, 0) != sizeof rnd) rnd = (uint32_t)gt_now();
  snprintf(s->name, sizeof s->name, "/giant-%d-%d-%08x", (int)getpid(), c->rank, rnd);
  /* Reserve the pages now: a full /dev/shm fails here, not with SIGBUS. */
  int fd = shm_open(s->name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  const char *why = NULL;
  if (fd < 0) {
    why = "shm_open";
  } else if (posix_fallocate(fd, 0, (off_t)s->bytes) != 0) {
    why = "reserving /dev/shm space";
  } else if ((base[c->rank] = mmap(NULL, s->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
    why = "mmap";
    base[c->rank] = NULL;
  }
  if (fd >= 0) close(fd);
  if (why) {
    gt_warn("group '%s': no shared-memory segment (%s: %s); using TCP", c->prefix, why, strerror(errno));
    if (fd >= 0) shm_unlink(s->name);
    s->unlinked = true;
  }
  st = exchange(c, why ? "-" : s->name, vals);
  bool ok = st == GT_OK && !why;
  for (int j = 0; st == GT_OK && j < n; j++) {
    if (j == c->rank) continue;
    if (!strcmp(vals[j], "-")) {
      ok = false;
      continue;
    }
    if (!ok) continue;
    base[j] = gt_comm_shm_map_peer(c->prefix, vals[j], j, pids[j], s->bytes);
    if (!base[j]) ok = false;
    c->pidfds[j] = (int)syscall(SYS_pidfd_open, pids[j], 0);
  }
  if (st == GT_OK) free_all(vals, n);
  /* Every rank learns whether every rank mapped every segment, so all
   * choose the same transport; then each unlinks its own name. */
  if (st == GT_OK) st = exchange(c, ok ? "1" : "0", vals);
  if (st == GT_OK) {
    for (int j = 0; j < n; j++) ok &= vals[j][0] == '1';
    free_all(vals, n);
  }
  if (!s->unlinked) {
    shm_unlink(s->name);
    s->unlinked = true;
  }
  free(vals);
  free(pids);
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
