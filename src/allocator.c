/* The allocator's state, the lowest of its layers (allocator.h lists them): each device's
 * allocator and the list cgc_free searches, the spinlock's slow path, block structs, accounting,
 * spare events, fences and drains, the list of pools. Nothing here makes a driver call under the
 * lock; cgc__alloc_record_fence records with it dropped. */
#include <sched.h>
#include <stdlib.h>

#include "src/allocator.h"
enum { kMaxAllocators = 64 };

void cgc__alloc_lock_slow(atomic_int* word) {
  for (;;) {
    for (int i = 0; i < 200; i++) {
      if (atomic_load_explicit(word, memory_order_relaxed) == 0 &&
          atomic_exchange_explicit(word, 1, memory_order_acquire) == 0)
        return;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#elif defined(__aarch64__)
      __asm__ __volatile__("yield");
#endif
    }
    sched_yield();
  }
}

/* Every device's allocator, published once (for cgc_free, which has only a pointer). */
static _Atomic(struct cgc__allocator*) allocators[kMaxAllocators];
static atomic_int n_allocators;

struct cgc__allocator* cgc__allocator_of(struct cgc__device* dev) {
  struct cgc__allocator* a = atomic_load_explicit(&dev->alloc, memory_order_acquire);
  if (a != NULL) return a;
  struct cgc__allocator* fresh = calloc(1, sizeof *fresh);
  if (fresh == NULL) return NULL;
  fresh->dev = dev;
  fresh->cache.allocator = fresh;
  struct cgc__allocator* expected = NULL;
  if (!atomic_compare_exchange_strong(&dev->alloc, &expected, fresh)) {
    free(fresh);
    return expected;
  }
  int slot = atomic_fetch_add(&n_allocators, 1);
  if (slot < kMaxAllocators) atomic_store_explicit(&allocators[slot], fresh, memory_order_release);
  return fresh;
}

/* ---- small helpers (lock held) ---- */

/* A block struct: a recycled one (its uses array kept) or a new, zeroed one. */
cgc__block_t* cgc__alloc_new_block_struct(void* allocator) {
  struct cgc__allocator* a = allocator;
  cgc__block_t* b = a->spare_blocks;
  if (b != NULL) {
    a->spare_blocks = b->next_waiting;
    return b;
  }
  return calloc(1, sizeof *b);
}

void cgc__alloc_recycle_block(cgc__block_t* b, void* allocator) {
  struct cgc__allocator* a = allocator;
  b->n_uses = 0;
  b->next_waiting = a->spare_blocks;
  a->spare_blocks = b;
}

/* Allocated bytes count for the block's owner (the cache or a pool) and for the device total. */
void cgc__alloc_account(struct cgc__allocator* a, cgc__block_t* b, long long delta) {
  cgc__stats_add_allocated(&b->owner->stats, delta);
  cgc__stats_add_allocated(&a->total, delta);
}

static void give_event(struct cgc__allocator* a, CUevent ev) {
  if (a->n_spare_events == a->cap_spare_events) {
    size_t cap = a->cap_spare_events ? a->cap_spare_events * 2 : 16;
    CUevent* grown = realloc(a->spare_events, cap * sizeof *grown);
    if (grown == NULL) return; /* the event leaks rather than a driver call under the lock */
    a->spare_events = grown;
    a->cap_spare_events = cap;
  }
  a->spare_events[a->n_spare_events++] = ev;
}

cgc__fence_t* cgc__fence_new(CUevent ev) {
  cgc__fence_t* f = calloc(1, sizeof *f);
  if (f != NULL) {
    f->ev = ev;
    f->refs = 1;
  }
  return f;
}

void cgc__fence_put(struct cgc__allocator* a, cgc__fence_t* f) {
  if (--f->refs > 0) return;
  /* An event whose record is complete (or that waits for nothing any more) is as good as new. */
  give_event(a, f->ev);
  free(f);
}

void cgc__alloc_add_drain(struct cgc__allocator* a, cgc__drain_t* d) {
  d->next = a->drains;
  a->drains = d;
  atomic_fetch_add_explicit(&a->waiting, 1, memory_order_relaxed);
}

void cgc__alloc_add_pending(struct cgc__allocator* a, cgc__block_t* b) {
  b->next_waiting = a->pending;
  a->pending = b;
  atomic_fetch_add_explicit(&a->waiting, 1, memory_order_relaxed);
}
/* A new drain of one fence (its reference passes to the drain); NULL when out of host memory. */
cgc__drain_t* cgc__alloc_new_drain(cgc__fence_t* f) {
  cgc__drain_t* d = calloc(1, sizeof *d);
  if (d != NULL && (d->fences = malloc(sizeof *d->fences)) == NULL) {
    free(d);
    d = NULL;
  }
  if (d != NULL) d->fences[d->n_fences++] = f;
  return d;
}

/* ---- fences: recorded outside the lock ---- */

/* An event for a new fence: a spare one, else a new one (context current). */
static CUevent take_event(struct cgc__allocator* a) {
  CUevent ev = NULL;
  cgc__alloc_lock(a);
  if (a->n_spare_events > 0) ev = a->spare_events[--a->n_spare_events];
  cgc__alloc_unlock(a);
  if (ev == NULL && CGC_DRV(cuEventCreate)(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) ev = NULL;
  return ev;
}

static void return_event(struct cgc__allocator* a, CUevent ev) {
  cgc__alloc_lock(a);
  give_event(a, ev);
  cgc__alloc_unlock(a);
}

/* A fence recorded now on `cu` (context current, `cu` not capturing); NULL on failure. */
cgc__fence_t* cgc__alloc_record_fence(struct cgc__allocator* a, CUstream cu) {
  CUevent ev = take_event(a);
  if (ev == NULL) return NULL;
  if (CGC_DRV(cuEventRecord)(ev, cu) != CUDA_SUCCESS) {
    return_event(a, ev);
    return NULL;
  }
  cgc__fence_t* f = cgc__fence_new(ev);
  if (f == NULL) return_event(a, ev);
  return f;
}

/* ---- pool state (lock held) ---- */

void cgc__alloc_pool_link(struct cgc__allocator* a, cgc_pool_t pool) {
  pool->prev_pool = NULL;
  pool->next_pool = a->pools;
  if (a->pools != NULL) a->pools->prev_pool = pool;
  a->pools = pool;
}

void cgc__alloc_pool_unlink(struct cgc__allocator* a, cgc_pool_t pool) {
  if (pool->prev_pool != NULL)
    pool->prev_pool->next_pool = pool->next_pool;
  else if (a->pools == pool)
    a->pools = pool->next_pool;
  if (pool->next_pool != NULL) pool->next_pool->prev_pool = pool->prev_pool;
  pool->prev_pool = pool->next_pool = NULL;
}
int cgc__allocator_count(void) {
  int n = atomic_load_explicit(&n_allocators, memory_order_acquire);
  return n < kMaxAllocators ? n : kMaxAllocators;
}

struct cgc__allocator* cgc__allocator_at(int i) { return atomic_load_explicit(&allocators[i], memory_order_acquire); }
