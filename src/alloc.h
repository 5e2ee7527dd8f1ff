/* The caching allocator's shared state, private to alloc.c and pool.c.
 *
 * One process-wide lock (cgc__alloc_lock) guards every device's allocator state, every private
 * pool and the pointer map: cgc_free gets only a pointer, so finding its block must not need
 * to know the device first, and one short lock is all the hot path (a cache hit) takes.
 * Lock order: cgc__alloc_lock, then the capture registry's lock, never the reverse. */
#ifndef CGC_ALLOC_H_
#define CGC_ALLOC_H_

#include "src/blocks.h"
#include "src/internal.h"

struct cgc__allocator {
  struct cgc__device* dev;
  cgc__pool_state_t cache; /* the default pool: blocks for allocations outside captures */
  cgc__stats_t total;      /* the whole device: cache + every private pool */
  cgc__block_t* pending;   /* freed with recorded uses; waiting on events */
  cgc__block_t* deferred;  /* freed during a capture with uses outside it; events not yet recorded */
  CUevent* spare_events;
  size_t n_spare_events, cap_spare_events;
  cgc_pool_t recording; /* pools a capture is recording into, linked through next_recording */
};

struct cgc_pool_s {
  uint32_t magic;
  struct cgc__device* dev;
  long user_refs;      /* cgc_pool_create / cgc_pool_retain, less cgc_pool_release */
  long internal_refs;  /* each graph captured into it, and a running capture */
  bool recording;      /* a capture allocates into it now */
  uint64_t capture_id; /* that capture */
  CUstream capture_origin;
  cgc__pool_state_t state;
  cgc__block_t* deferred; /* freed during its capture with uses on side streams: waiting for joins */
  cgc_pool_t next_recording;
};

/* The allocator lock: a test-and-set spinlock, because its critical sections are a few dozen
 * instructions on the hot path, where a pthread mutex's lock and unlock cost more than the work
 * (measured: bench scenario 4). Waiters spin briefly, then yield: the rare long holder (a
 * cuMemAlloc for a new segment) does not get a core burnt beside it for long. */
extern atomic_int cgc__alloc_lock_word;
void cgc__alloc_lock_slow(void);
static inline void cgc__alloc_lock(void) {
  if (atomic_exchange_explicit(&cgc__alloc_lock_word, 1, memory_order_acquire) != 0) cgc__alloc_lock_slow();
}
static inline void cgc__alloc_unlock(void) { atomic_store_explicit(&cgc__alloc_lock_word, 0, memory_order_release); }

/* The device's allocator, created on first use (lock held). NULL when out of host memory. */
struct cgc__allocator* cgc__allocator_of(struct cgc__device* dev);
/* A block back to its owner's free set; dissolves an orphaned pool whose last block it was. */
void cgc__alloc_release_block(cgc__block_t* b);
/* Handles a block freed (by the user or at capture end) that other streams used: records events
 * on those streams, or parks the block while a capture is under way. */
void cgc__alloc_retire_used_block(struct cgc__allocator* a, cgc__block_t* b);
/* The pool capture `capture_id` records into on this device, or NULL (lock held). */
cgc_pool_t cgc__pool_recording(struct cgc__allocator* a, uint64_t capture_id);
/* Dissolves `pool` into its device's cache if nothing holds it any more. */
void cgc__pool_dissolve_if_unused(cgc_pool_t pool);

#endif /* CGC_ALLOC_H_ */
