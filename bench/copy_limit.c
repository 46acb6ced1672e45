/* The copy limit of bench_comm (copy_limit.h): one producer and one
 * consumer process around a ring of slots in a shared segment.
 *
 * The copies are glibc's memcpy in its best case: private buffers
 * page-aligned like the slots. (On AMD its rep movsb runs 10x slower when
 * the destination is a few bytes past the source modulo 4 KiB, as a
 * page-aligned slot copied into a buffer from malloc would be.) */
#include "copy_limit.h"

#include <sched.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "giant/log.h"

#define NSLOT 4
#define MAX_PIECE (1u << 20)
#define HDR 4096
/* A trial that has not ended in this long has a consumer that died or hung. */
#define TRIAL_S 120.0

typedef struct ctl {
  _Alignas(64) atomic_uint head; /* pieces written */
  _Alignas(64) atomic_int head_sleeper;
  _Alignas(64) atomic_uint tail; /* pieces read */
  _Alignas(64) atomic_int tail_sleeper;
  _Alignas(64) atomic_int arm;   /* the trial to run; -1: exit */
  _Alignas(64) atomic_int ready; /* the trial the consumer waits in */
  _Alignas(64) atomic_int done;  /* the trial the consumer finished */
  size_t piece, move, buf;
  int stream; /* the consumer copies out with streaming stores */
  double t_end;
} ctl;

_Static_assert(sizeof(ctl) <= HDR, "control block too big");

/* memcpy with streaming stores (SSE2, which every x86-64 has). */
static void copy_stream(char *d, const char *s, size_t n) {
#if defined(__SSE2__)
  size_t m = (uintptr_t)d % 16 ? 0 : n & ~(size_t)63;
  for (size_t i = 0; i < m; i += 64)
    for (size_t j = 0; j < 64; j += 16)
      _mm_stream_si128((__m128i *)(d + i + j), _mm_loadu_si128((const __m128i *)(s + i + j)));
  memcpy(d + m, s + m, n - m);
  _mm_sfence();
#else
  memcpy(d, s, n);
#endif
}

static char *slot(char *seg, unsigned i, size_t piece) { return seg + HDR + (i % NSLOT) * piece; }

/* Waits until *v moves past seen: a short spin, then a futex sleep (so a
 * loaded machine's cores go to whoever can run), as a transport would.
 * The sleeper flag is raised before *v is looked at again and the waker
 * stores *v before it looks at the flag, so (seq_cst) one sees the other. */
static void wait_moves(atomic_uint *v, atomic_int *sleeper, unsigned seen) {
  for (int i = 0; i < 2000; i++)
    if (atomic_load_explicit(v, memory_order_acquire) != seen) return;
  atomic_store(sleeper, 1);
  if (atomic_load(v) == seen) {
    struct timespec ts = {0, 20000000L};
    syscall(SYS_futex, (unsigned *)v, FUTEX_WAIT, seen, &ts, NULL, 0);
  }
  atomic_store(sleeper, 0);
}

static void advance(atomic_uint *v, atomic_int *sleeper, unsigned to) {
  atomic_store(v, to);
  if (atomic_load(sleeper)) syscall(SYS_futex, (unsigned *)v, FUTEX_WAKE, 1, NULL, NULL, 0);
}

/* Waits (yielding) until *v == want; false past the deadline. */
static bool wait_eq(atomic_int *v, int want, double deadline) {
  while (atomic_load(v) != want) {
    if (gt_now() > deadline) return false;
    sched_yield();
  }
  return true;
}

static void consumer(char *seg) {
  ctl *c = (ctl *)seg;
  /* Its spins end with the bench, whatever becomes of the bench. */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() == 1) _exit(1);
  char *dst = aligned_alloc(4096, c->buf);
  if (!dst) _exit(1);
  memset(dst, 0, c->buf);
  int last = 0;
  for (;;) {
    int a;
    while ((a = atomic_load(&c->arm)) == last) sched_yield();
    if (a < 0) break;
    last = a;
    size_t piece = c->piece, move = c->move, off = 0;
    atomic_store(&c->ready, a);
    for (unsigned t = 0; off < move; t++) {
      while (atomic_load_explicit(&c->head, memory_order_acquire) == t) wait_moves(&c->head, &c->head_sleeper, t);
      size_t n = move - off < piece ? move - off : piece;
      if (c->stream)
        copy_stream(dst + off % c->buf, slot(seg, t, piece), n);
      else
        memcpy(dst + off % c->buf, slot(seg, t, piece), n);
      advance(&c->tail, &c->tail_sleeper, t + 1);
      off += n;
    }
    c->t_end = gt_now();
    atomic_store(&c->done, a);
  }
  volatile char sink = dst[c->buf / 2];
  (void)sink;
  free(dst);
  _exit(0);
}

double bench_copy_limit(size_t move, size_t buf, int rounds, size_t *best_piece, bool *best_stream) {
  static const size_t pieces[] = {64u << 10, 256u << 10, MAX_PIECE};
  size_t np = sizeof pieces / sizeof pieces[0];
  size_t seg_bytes = HDR + (size_t)NSLOT * MAX_PIECE;
  if (buf % MAX_PIECE) return -1; /* a piece never straddles the wrap */
  char *seg = mmap(NULL, seg_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (seg == MAP_FAILED) return -1;
  memset(seg, 0, seg_bytes);
  ctl *c = (ctl *)seg;
  c->buf = buf;
  c->move = move;
  pid_t pid = fork();
  if (pid < 0) {
    munmap(seg, seg_bytes);
    return -1;
  }
  if (pid == 0) consumer(seg);
  char *src = aligned_alloc(4096, buf);
  double best = -1;
  int trial = 0;
  bool ok = src != NULL;
  if (ok) memset(src, 1, buf);
  for (int round = 0; ok && round < rounds; round++) {
    for (size_t k = 0; ok && k < 2 * np; k++) {
      size_t piece = pieces[k / 2], off = 0;
      c->stream = (int)(k % 2);
      atomic_store(&c->head, 0);
      atomic_store(&c->tail, 0);
      c->piece = piece;
      atomic_store(&c->arm, ++trial);
      double deadline = gt_now() + TRIAL_S;
      if (!(ok = wait_eq(&c->ready, trial, deadline))) break;
      double t0 = gt_now();
      for (unsigned h = 0; ok && off < move; h++) {
        unsigned t;
        while (ok && h - (t = atomic_load_explicit(&c->tail, memory_order_acquire)) >= NSLOT) {
          ok = gt_now() < deadline;
          wait_moves(&c->tail, &c->tail_sleeper, t);
        }
        size_t n = move - off < piece ? move - off : piece;
        memcpy(slot(seg, h, piece), src + off % buf, n);
        advance(&c->head, &c->head_sleeper, h + 1);
        off += n;
      }
      if (!ok || !(ok = wait_eq(&c->done, trial, deadline))) break;
      double dt = c->t_end - t0;
      if (best < 0 || dt < best) {
        best = dt;
        if (best_piece) *best_piece = piece;
        if (best_stream) *best_stream = c->stream;
      }
    }
  }
  atomic_store(&c->arm, -1);
  if (!ok) kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  free(src);
  munmap(seg, seg_bytes);
  return ok ? best : -1;
}
