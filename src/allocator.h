/* The caching allocator: its state, and what its layers call. The layers, lowest first; each
 * calls only the ones before it (and blocks.c, and the layers of internal.h below the allocator):
 *   allocator.c   the state: each device's allocator, block structs, accounting, events, fences,
 *                 drains, the list of pools
 *   reclaim.c     where freed memory goes: owners' free sets, dissolved pools, dying segments
 *   joins.c       reuse after the join in adopted captures: free markers, the graph walked back
 *   fences.c      uses and fences: deferred blocks, sweeps, a stream handle going away
 *   segments.c    driver memory: new segments, whole free segments given back
 *   cache.c       allocations: cached blocks by stream key, else a new segment; frees
 *   pool.c, alloc.c   the public entry points (private pools and captures; malloc, free, ...)
 *   snapshot.c        cgc_memory_snapshot: every segment and block, walked under the lock
 *
 * One allocator per device, with its own lock: devices never wait for each other. cgc_free
 * gets only a pointer, so it asks each device's pointer map in turn (the calling thread's last
 * device first); a process usually drives one device per thread.
 *
 * The allocator's one lock (a spinlock; CGC__LOCK_ALLOC in lockcheck.h) guards every field
 * below not marked otherwise, the pools' fields, and the fences' counts. It is held for
 * bookkeeping only and no driver call is made under it (the check enforces the weaker rule: none
 * that can wait). Whatever waits (cuEventRecord of a fence, cuMemAlloc, cuMemFree) runs with it
 * dropped; what must not change meanwhile is claimed first:
 * - a block being fenced is in no list (ours alone), and the free counts itself in `fencing`,
 *   which a stream's end (cgc__alloc_stream_ending) and a capture's begin
 *   (cgc__alloc_wait_fencing) wait to drop to 0, after stopping new fences (`ending_streams`,
 *   a registered capture): no use stream dies, and no stream starts capturing, while an event is
 *   recorded on it, and no block with an unfenced use of a dead stream is left out of a list;
 * - a segment being given back is in no set (state WAITING) until cuMemFree returns. */
#ifndef CGC_ALLOCATOR_H_
#define CGC_ALLOCATOR_H_

#include "src/blocks.h"
#include "src/internal.h"

/* An event some blocks wait for, counted: several blocks (a stream's last work, a graph's last
 * replay) can wait for one record. Counts and `done` under the allocator lock. */
typedef struct cgc__fence {
  CUevent ev;
  int refs;
  bool done;   /* seen complete: never queried again */
  bool queued; /* in a sweep's list of fences to query */
} cgc__fence_t;

/* A stream other than the allocation stream that used a block (cgc_record_stream), and, once
 * the block is freed, the fence recorded on it: the block is reused after every fence. */
struct cgc__block_use {
  uint64_t key;   /* the stream's key (stream_ref.c) */
  CUstream cu;    /* what to record on; NULL for the legacy stream */
  cgc__fence_t* fence; /* NULL until recorded ("settled") */
};

/* Whole segments that go to any stream once every fence has completed: a dissolved pool whose
 * graphs' last replays may still run, or a dead stream's cached segments. */
typedef struct cgc__drain {
  cgc__fence_t** fences;
  size_t n_fences;
  cgc__block_t* segments; /* linked through next_waiting; owned by the cache, state WAITING */
  bool keep_keys;         /* then reusable on their own stream, else by any stream */
  struct cgc__drain* next;
} cgc__drain_t;

struct cgc__allocator {
  atomic_int lock_word;
  struct cgc__device* dev;
  int fencing;        /* frees recording fences with the lock dropped (fence_and_park) */
  int ending_streams; /* stream handles settling their uses (stream_ending): fences wait */
  int adopting_pools; /* pools adopting a capture cgc did not begin (pool.c): fences wait */
  cgc__pool_state_t cache; /* the default pool: blocks for allocations outside captures */
  cgc__stats_t total;      /* the whole device: cache + every private pool */
  cgc__ptr_map_t live;     /* allocated blocks by address */
  size_t blocks_with_uses; /* allocated blocks with recorded uses (stream-ending scans skip at 0) */
  cgc__block_t* spare_blocks; /* recycled block structs, linked through next_waiting */
  /* Pending blocks plus drains, also readable without the lock: while it is non-zero each
   * malloc first settles what has finished (outside the lock), so that memory is reused as
   * soon as its last user is done, as PyTorch's allocator does. */
  atomic_int waiting;
  cgc__block_t* pending;      /* freed with uses, every use settled: waiting for their fences */
  cgc__block_t* deferred;     /* freed with uses on streams that were capturing: fences still to record */
  cgc__drain_t* drains;
  CUevent* spare_events;
  size_t n_spare_events, cap_spare_events;
  cgc_pool_t recording; /* pools a capture is recording into, linked through next_recording */
  cgc_pool_t pools;     /* every pool not yet dissolved (a dead stream's segments are found in them) */
};

struct cgc_pool_s {
  uint32_t magic;
  struct cgc__device* dev;
  long user_refs;      /* cgc_pool_create / cgc_pool_retain, less cgc_pool_release */
  long internal_refs;  /* each graph captured into it, a running capture, an allocation growing it */
  bool recording;      /* a capture allocates into it now */
  uint64_t capture_id; /* that capture (0 until the driver began it) */
  CUstream capture_origin;
  uint64_t capture_origin_key;
  cgc__pool_state_t state;
  cgc__block_t* deferred; /* freed during its capture with uses on other streams: waiting for joins */
  /* A block of it was freed outside the capture that allocated it (a graph's output, used by
   * eager work): then its memory, dissolved, is reused as eagerly freed memory is, on the stream
   * it was allocated on (its key), not by any stream. */
  bool escaped;
  /* 1.4: `adopting`: the capture it records is one cgc did not begin (cgc_pool_adopt_capture),
   * until cgc_pool_end_adopted_capture. `adopted`: it ever recorded one, so graphs cgc does not
   * see (nor their replays) may use its memory: dissolved, its segments go back to the driver at
   * cgc_empty_cache only, never to other streams (reclaim.c's dissolve). */
  bool adopting;
  bool adopted;
  /* While adopting: the thread that adopted the capture (joins.c's cgc__adopter_token()), the
   * only one that asks the driver about the capture's streams and graph for reuse after joins
   * (it is the thread that ends the capture, so no other thread is ending it meanwhile), and
   * that thread's walks of the capture graph, one per stream, kept between its allocations (a
   * walk is out of the list while it runs with the lock dropped). */
  const void* adopter;
  struct cgc__join_walk* join_walk;
  /* 1.5: its fixed memory (an NCCL pool), or NULL: a pool that grows by segments from the driver.
   * Set at creation, never changed. */
  cgc__arena_t* arena;
  cgc__fence_t** fences;  /* last replays of its destroyed graphs that may still run */
  size_t n_fences, cap_fences;
  cgc_pool_t next_recording;
  cgc_pool_t prev_pool, next_pool; /* the allocator's list of every pool not yet dissolved */
};

/* The allocator lock: a test-and-set spinlock, because its critical sections are a few dozen
 * instructions on the hot path, where a pthread mutex's lock and unlock cost more than the work
 * (measured: bench scenario 4). Waiters spin briefly, then yield. */
void cgc__alloc_lock_slow(atomic_int* word);
static inline void cgc__alloc_lock(struct cgc__allocator* a) {
  cgc__lock_note_acquired(CGC__LOCK_ALLOC);
  if (atomic_exchange_explicit(&a->lock_word, 1, memory_order_acquire) != 0) cgc__alloc_lock_slow(&a->lock_word);
}
static inline void cgc__alloc_unlock(struct cgc__allocator* a) {
  atomic_store_explicit(&a->lock_word, 0, memory_order_release);
  cgc__lock_note_released(CGC__LOCK_ALLOC);
}

/* A key no stream has, for the blocks of a segment whose stream was destroyed while it was in
 * use ("dying"): it names the fence recorded on the dead stream's last work and holds one
 * reference of it. Once the segment is whole and free it waits for that fence, then serves any
 * stream (reclaim.c). Bit 62 without bit 63 (an address key has bit 63, CGC__KEY_NO_STREAM
 * both); a pool's eager segment (cgc_pool_malloc's) keeps CGC__KEY_POOL_EAGER_BIT, so that eager
 * and captured memory of a pool stay apart when dying too (SEMANTICS 32). */
#define CGC__DYING_BIT ((uint64_t)1 << 62)
static inline uint64_t cgc__dying_key(cgc__fence_t* f) { return CGC__DYING_BIT | (uint64_t)(uintptr_t)f; }
static inline bool cgc__is_dying(uint64_t key) { return (key >> 62) == 1; }
static inline cgc__fence_t* cgc__dying_fence(uint64_t key) {
  return (cgc__fence_t*)(uintptr_t)(key & ~(CGC__DYING_BIT | CGC__KEY_POOL_EAGER_BIT));
}
/* The first block of the segment `b` is part of. */
static inline cgc__block_t* cgc__segment_head(cgc__block_t* b) {
  while (b->prev != NULL) b = b->prev;
  return b;
}

/* ---- allocator.c ---- */

/* The device's allocator, created on first use. NULL when out of host memory. */
struct cgc__allocator* cgc__allocator_of(struct cgc__device* dev);
/* Every allocator made so far, for cgc_free's search: how many, and the i-th (maybe NULL while
 * being published). */
int cgc__allocator_count(void);
struct cgc__allocator* cgc__allocator_at(int i);
/* (lock held) A block struct: a recycled one (its uses array kept) or a new, zeroed one; NULL
 * when out of host memory. `allocator` is the struct cgc__allocator. */
cgc__block_t* cgc__alloc_new_block_struct(void* allocator);
/* (lock held) Gives a block struct back for reuse (a merge's absorbed neighbour, a freed
 * segment). */
void cgc__alloc_recycle_block(cgc__block_t* b, void* allocator);
/* (lock held) Allocated bytes of the block's owner and of the device change by `delta`. */
void cgc__alloc_account(struct cgc__allocator* a, cgc__block_t* b, long long delta);
/* (lock held) A new fence of one reference on `ev`; NULL when out of host memory. */
cgc__fence_t* cgc__fence_new(CUevent ev);
/* (lock held) Drops one reference of a fence; its event is kept for reuse at the last. */
void cgc__fence_put(struct cgc__allocator* a, cgc__fence_t* f);
/* A fence recorded now on `cu` (lock not held, context current, `cu` not capturing; the record
 * may wait behind other threads' driver calls); NULL on failure. */
cgc__fence_t* cgc__alloc_record_fence(struct cgc__allocator* a, CUstream cu);
/* A new drain of one fence (its reference passes to the drain); NULL when out of host memory. */
cgc__drain_t* cgc__alloc_new_drain(cgc__fence_t* f);
/* (lock held) Parks a drain; its segments serve any stream once its fences have completed. */
void cgc__alloc_add_drain(struct cgc__allocator* a, cgc__drain_t* d);
/* (lock held) A freed block whose every use has its fence waits on the pending list. */
void cgc__alloc_add_pending(struct cgc__allocator* a, cgc__block_t* b);
/* (lock held) A pool joins / leaves the allocator's list of pools. */
void cgc__alloc_pool_link(struct cgc__allocator* a, cgc_pool_t pool);
void cgc__alloc_pool_unlink(struct cgc__allocator* a, cgc_pool_t pool);

/* ---- reclaim.c (lock held) ---- */

/* A block back to its owner's free set; dissolves an orphaned pool whose last block it was. */
void cgc__alloc_release_block(struct cgc__allocator* a, cgc__block_t* b);
/* Gives every block of the segment starting at `head` the dying key of `f` (one reference). */
void cgc__alloc_mark_dying(cgc__block_t* head, cgc__fence_t* f);
/* A whole free segment that moved into the cache (in its set) from a dissolved pool or a drain:
 * a dying one waits for its stream's last work, then serves any stream (`adopted`: never). */
void cgc__alloc_settle_moved_segment(struct cgc__allocator* a, cgc__block_t* s, bool adopted);
/* Dissolves `pool` into its device's cache if nothing holds it any more. */
void cgc__pool_dissolve_if_unused(cgc_pool_t pool);
/* The pool capture-routing sends `ref`'s allocations to, or NULL. */
cgc_pool_t cgc__pool_recording(struct cgc__allocator* a, const cgc__stream_ref_t* ref);
/* Notes a pool block's free: outside the capture that allocated it, the pool's memory has been
 * in eager use. */
void cgc__pool_note_free(cgc__block_t* b);
/* Blocks of `pool` freed during its capture with uses on side streams become reusable once
 * every such stream has joined the origin after the free (SEMANTICS 12). */
void cgc__pool_reclaim_joined(cgc_pool_t pool);

/* ---- joins.c: reuse after the join in captures a pool adopted ---- */

/* This thread's token (an address no other thread has). */
const void* cgc__adopter_token(void);
/* (lock held) Whether a free of a block of `pool` during its adopted capture should record free
 * markers: the pool adopts a capture on this thread and the driver can report graph edges. */
bool cgc__joins_mark_here(cgc_pool_t pool);
/* (lock not held; `b` is the caller's alone) Records on `b` the nodes its use streams ended at in
 * capture `capture`; leaves it without markers when one of them is not in that capture. */
void cgc__joins_mark(cgc__block_t* b, uint64_t capture);
/* (lock held on entry and return, dropped meanwhile; the caller holds `pool`, or dissolves it
 * if unused after) Before an allocation of `ref`'s stream in `pool`'s adopted capture: its
 * blocks freed on that stream whose markers are all ancestors of the stream's next work go back
 * to the pool. True when one did. */
bool cgc__joins_reclaim(struct cgc__allocator* a, cgc_pool_t pool, const cgc__stream_ref_t* ref);
/* (lock held) The adoption ended: its walk is dropped. */
void cgc__joins_forget(cgc_pool_t pool);

/* ---- fences.c ---- */

/* (lock held, and the caller counted in a->fencing) Records fences for the uses of freed block
 * `b` that have none, unless a capture of the device is under way, then parks it: pending when
 * every use is settled, else deferred until no capture is. Drops the lock while it records. */
void cgc__alloc_fence_and_park(struct cgc__allocator* a, cgc__block_t* b);
/* Fences deferred blocks once no capture of the device is under way (lock not held). */
void cgc__alloc_settle_deferred(struct cgc__allocator* a);
/* Settles what waits for finished work: fences are queried (and, with `fence_deferred`, deferred
 * blocks fenced first), and blocks and drains whose fences have completed are released. True
 * when something was released (lock not held). */
bool cgc__alloc_sweep(struct cgc__allocator* a, bool fence_deferred);
/* Sweeps until nothing more is released (lock not held). */
void cgc__alloc_settle(struct cgc__allocator* a);
/* The same, waiting for every fence (in Relaxed mode, no lock held) instead of querying it: the
 * last context's teardown, where waiting for the device's work is expected. */
void cgc__alloc_settle_waiting(struct cgc__allocator* a);

/* ---- segments.c (lock not held) ---- */

/* Gives every whole free segment of the device cache back to the driver; returns the bytes. */
size_t cgc__alloc_release_cached_segments(struct cgc__allocator* a);
/* A new segment from the driver for `rounded` bytes of `key`, owned by the pool or the cache; on
 * success returns with the lock held and *out cut to size. */
cgc_status_t cgc__alloc_new_segment(struct cgc__allocator* a, cgc_pool_t pool, uint64_t key, size_t rounded,
                                    cgc__block_t** out, const char* func);
/* Settles what has finished, then gives every whole free cached segment back to the driver. */
void cgc__alloc_give_back(struct cgc__allocator* a);

/* ---- cache.c ---- */

/* The allocator whose map holds `ptr`, returned with its lock held, and the block (left in the
 * map); NULL (no lock held) when no allocator has it. */
struct cgc__allocator* cgc__alloc_find(void* ptr, cgc__block_t** out);
/* cgc_free's hot path, whole under one hold of the lock (one probe of the calling thread's last
 * allocator first): frees the block at `ptr` unless it has recorded uses. Returns the allocator
 * that holds it (NULL: none), lock not held; *has_uses: nothing was done, because its uses need
 * fences (alloc.c's free_used). */
struct cgc__allocator* cgc__alloc_free_plain(void* ptr, bool* has_uses);

/* ---- pool.c ---- */

/* A pool of `dev` whose adoption of a capture cgc did not begin is open (and its stream in
 * *origin), or NULL: from cgc's records alone. Whether that capture is still under way only the
 * driver knows, and cgc never asks it about a stream whose capture another thread may be ending
 * at that instant (driver 580 crashes there): an adoption lasts until its adopter ends it
 * (cgc_pool_end_adopted_capture). */
cgc_pool_t cgc__pool_adoption_open(struct cgc__device* dev, CUstream* origin);

#endif /* CGC_ALLOCATOR_H_ */
