/* Threads of the C kernels: one persistent pool of pthreads whose caller never waits for a worker that has
 * not started. A job is `count` indices fn(ctx, i, count); the caller and the workers claim indices one at a
 * time (a compare-and-swap on the pool's (generation, count, next index) word) and the caller claims every
 * index no worker took, then waits only for the indices workers are running. The tasks take their work in
 * dynamic chunks (a shared counter), so a thread that runs two indices does both shares and the job is done
 * whoever ran it: on an oversubscribed machine (other processes on the cores, a worker descheduled) the step
 * costs what one thread takes instead of an OS scheduling delay at a join barrier (measured: a 2-thread thin
 * decode step under load 67-318 ms at OpenMP's join, against 50 ms for onnxruntime). Workers spin
 * MNB_SPIN_NS after their last job (yielding the core meanwhile), then sleep on a condition variable: an idle
 * pool costs no CPU. While a run holds the pool (mnb_pool_hold: a thread scope of more than one thread is open, as
 * each run opens one) they spin up to MNB_HOLD_SPIN_NS instead, and the hold wakes sleeping workers as the run
 * starts: a worker that fell asleep between two parallel kernels of one run came back after the caller had claimed
 * every index. A woken worker that finds itself on the caller's CPU moves off it (mnb_leave_caller_cpu): Linux
 * places a wakee near its waker, and after an idle pause the caller and its worker shared one core, so a 2-thread
 * run went at 1-thread speed (magika, a 50 ms pause before each run: 10.2-11.5 ms against 5.5-8.7 back to back;
 * moved off, 6.9-8.7). onnxruntime's workers never sleep there: they spin through idle time. A second caller while
 * the pool is busy (concurrent runs) runs its job alone. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* sched_getcpu, pthread_{get,set}affinity_np */
#endif
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <time.h>

#include "mnb.h"

#define MNB_MAX_WORKERS 63
#define MNB_SPIN_NS 200000 /* a worker spins this long after a job before it sleeps */
#define MNB_HOLD_SPIN_NS 5000000 /* ... and this long while a run holds the pool */

typedef struct MnbPool {
  pthread_mutex_t lock;
  pthread_cond_t wake;
  uint64_t state;    /* generation << 32 | count << 16 | next index (atomic) */
  int finished;      /* indices finished in this generation (atomic) */
  int sleepers;      /* workers waiting on `wake` (atomic) */
  int busy;          /* a caller holds the pool (atomic) */
  int hold;          /* runs holding the pool awake (atomic, mnb_pool_hold) */
  unsigned kicks;    /* wake-ups without a job (under `lock`): a run began */
  int caller_cpu;    /* the CPU the caller last started a job or a run on (atomic; -1 unknown) */
  int workers;       /* started workers (only the caller holding the pool changes it) */
  MnbTask fn;
  void* ctx;
} MnbPool;

static MnbPool g_pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, 0, 0, 0, 0, 0, -1};

static inline void mnb_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

static int64_t mnb_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* claim and run the indices of generation `gen` left in the pool; returns how many this thread ran */
static int mnb_claim(MnbPool* p, uint64_t gen) {
  int ran = 0;
  for (;;) {
    uint64_t s = __atomic_load_n(&p->state, __ATOMIC_ACQUIRE);
    uint64_t count = (s >> 16) & 0xffff, next = s & 0xffff;
    if ((s >> 32) != gen || next >= count) return ran;
    if (!__atomic_compare_exchange_n(&p->state, &s, s + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) continue;
    p->fn(p->ctx, (int)next, (int)count); /* the job stays until its last index is finished */
    __atomic_fetch_add(&p->finished, 1, __ATOMIC_RELEASE);
    ++ran;
  }
}

/* A worker woken on the caller's CPU (Linux places a wakee near its waker: after an idle pause the caller and the
 * worker it woke shared one core, and a 2-thread run went at 1-thread speed) moves off it: its affinity without that
 * CPU (the kernel migrates it at once), then its affinity as it was (it stays where it went). */
static void mnb_leave_caller_cpu(MnbPool* p) {
#if defined(__linux__)
  const int cpu = sched_getcpu();
  cpu_set_t mask, others;
  if (cpu < 0 || cpu >= CPU_SETSIZE || cpu != __atomic_load_n(&p->caller_cpu, __ATOMIC_RELAXED)) return;
  if (pthread_getaffinity_np(pthread_self(), sizeof mask, &mask) != 0) return;
  others = mask;
  CPU_CLR(cpu, &others);
  if (CPU_COUNT(&others) == 0) return; /* the caller's CPU is all this thread may use */
  if (pthread_setaffinity_np(pthread_self(), sizeof others, &others) == 0)
    pthread_setaffinity_np(pthread_self(), sizeof mask, &mask);
#else
  (void)p;
#endif
}

static void mnb_note_caller_cpu(MnbPool* p) {
#if defined(__linux__)
  __atomic_store_n(&p->caller_cpu, sched_getcpu(), __ATOMIC_RELAXED);
#else
  (void)p;
#endif
}

static void* mnb_worker(void* arg) {
  MnbPool* p = (MnbPool*)arg;
  uint64_t seen = __atomic_load_n(&p->state, __ATOMIC_ACQUIRE) >> 32;
  for (;;) {
    uint64_t gen = __atomic_load_n(&p->state, __ATOMIC_ACQUIRE) >> 32;
    if (gen == seen) { /* spin a while (yielding the core every few rounds), then sleep */
      const int64_t since = mnb_now_ns();
      int i = 0;
      while ((gen = __atomic_load_n(&p->state, __ATOMIC_ACQUIRE) >> 32) == seen) {
        mnb_pause();
        if ((++i & 255) == 0) {
          const int64_t spin = __atomic_load_n(&p->hold, __ATOMIC_RELAXED) > 0 ? MNB_HOLD_SPIN_NS : MNB_SPIN_NS;
          if (mnb_now_ns() - since > spin) break;
          sched_yield();
        }
      }
      if (gen == seen) {
        unsigned kicks;
        pthread_mutex_lock(&p->lock);
        __atomic_fetch_add(&p->sleepers, 1, __ATOMIC_SEQ_CST);
        kicks = p->kicks;
        while ((gen = __atomic_load_n(&p->state, __ATOMIC_SEQ_CST) >> 32) == seen && p->kicks == kicks)
          pthread_cond_wait(&p->wake, &p->lock);
        __atomic_fetch_sub(&p->sleepers, 1, __ATOMIC_SEQ_CST);
        pthread_mutex_unlock(&p->lock);
        mnb_leave_caller_cpu(p);
        if (gen == seen) continue; /* woken by a run that began: spin for its first job */
      }
    }
    seen = gen;
    mnb_claim(p, gen);
  }
  return NULL;
}

/* a forked child has none of the parent's workers: it starts its own, with a fresh lock */
static void mnb_after_fork_child(void) {
  MnbPool* p = &g_pool;
  pthread_mutex_init(&p->lock, NULL);
  pthread_cond_init(&p->wake, NULL);
  p->sleepers = p->busy = p->workers = p->hold = 0;
  p->caller_cpu = -1;
  p->finished = 0;
}

static pthread_once_t g_fork_once = PTHREAD_ONCE_INIT;
static void mnb_register_fork(void) { pthread_atfork(NULL, NULL, mnb_after_fork_child); }

void mnb_pool_hold(int on) {
  MnbPool* p = &g_pool;
  if (!on) {
    __atomic_fetch_sub(&p->hold, 1, __ATOMIC_SEQ_CST);
    return;
  }
  __atomic_fetch_add(&p->hold, 1, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&p->sleepers, __ATOMIC_SEQ_CST) > 0) { /* wake them while the run's first nodes run */
    mnb_note_caller_cpu(p);
    pthread_mutex_lock(&p->lock);
    ++p->kicks;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
  }
}

int mnb_pool_holds(void) { return __atomic_load_n(&g_pool.hold, __ATOMIC_SEQ_CST); }

static void mnb_serial(int count, MnbTask fn, void* ctx) {
  int i;
  for (i = 0; i < count; ++i) fn(ctx, i, count);
}

void mnb_parallel(int count, MnbTask fn, void* ctx) {
  MnbPool* p = &g_pool;
  uint64_t gen;
  int ran, spins = 0;
  if (count <= 1) {
    fn(ctx, 0, 1);
    return;
  }
  if (count > MNB_MAX_WORKERS + 1) count = MNB_MAX_WORKERS + 1;
  if (__atomic_exchange_n(&p->busy, 1, __ATOMIC_ACQUIRE)) { /* another caller's job: this one alone */
    mnb_serial(count, fn, ctx);
    return;
  }
  pthread_once(&g_fork_once, mnb_register_fork);
  while (p->workers < count - 1) {
    pthread_t id;
    if (pthread_create(&id, NULL, mnb_worker, p) != 0) break; /* fewer workers: the caller runs the rest */
    pthread_detach(id);
    ++p->workers;
  }
  p->fn = fn;
  p->ctx = ctx;
  if (__atomic_load_n(&p->sleepers, __ATOMIC_RELAXED) > 0) mnb_note_caller_cpu(p); /* a worker is to be woken */
  __atomic_store_n(&p->finished, 0, __ATOMIC_RELAXED);
  gen = (__atomic_load_n(&p->state, __ATOMIC_RELAXED) >> 32) + 1;
  __atomic_store_n(&p->state, (gen << 32) | ((uint64_t)count << 16), __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&p->sleepers, __ATOMIC_SEQ_CST) > 0) {
    pthread_mutex_lock(&p->lock);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
  }
  ran = mnb_claim(p, gen);
  (void)ran;
  while (__atomic_load_n(&p->finished, __ATOMIC_ACQUIRE) < count) { /* indices workers run */
    mnb_pause();
    if ((++spins & 1023) == 0) sched_yield();
  }
  __atomic_store_n(&p->busy, 0, __ATOMIC_RELEASE);
}
