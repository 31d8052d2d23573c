/* Threads of the C kernels: OpenMP where the compiler has it (a persistent pool), else pthreads. */
#include "mnb.h"

#ifdef _OPENMP
#include <omp.h>

void mnb_parallel(int count, MnbTask fn, void* ctx) {
  if (count <= 1) {
    fn(ctx, 0, 1);
    return;
  }
#pragma omp parallel num_threads(count)
  fn(ctx, omp_get_thread_num(), omp_get_num_threads());
}

#else
#include <pthread.h>

typedef struct MnbWorker {
  MnbTask fn;
  void* ctx;
  int index, count;
} MnbWorker;

static void* mnb_worker(void* arg) {
  MnbWorker* w = (MnbWorker*)arg;
  w->fn(w->ctx, w->index, w->count);
  return NULL;
}

#define MNB_MAX_PTHREADS 256

void mnb_parallel(int count, MnbTask fn, void* ctx) {
  pthread_t ids[MNB_MAX_PTHREADS];
  MnbWorker workers[MNB_MAX_PTHREADS];
  int started = 1, i;
  if (count > MNB_MAX_PTHREADS) count = MNB_MAX_PTHREADS;
  for (i = 1; i < count; ++i) {
    workers[i].fn = fn;
    workers[i].ctx = ctx;
    workers[i].index = i;
    workers[i].count = count;
    if (pthread_create(&ids[i], NULL, mnb_worker, &workers[i]) != 0) break;
    started = i + 1;
  }
  if (started < count) { /* could not start them all: the ones started keep their share, index 0 the rest */
    for (i = started; i < count; ++i) fn(ctx, i, count);
  }
  fn(ctx, 0, count);
  for (i = 1; i < started; ++i) pthread_join(ids[i], NULL);
}
#endif
