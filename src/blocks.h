/* Block bookkeeping of the caching allocator, free of any driver call so that it can be tested
 * on machines without a GPU (tests/blocks_test.cc).
 *
 * A segment is one cuMemAlloc; it is cut into blocks kept in address order through prev/next.
 * Every block of a segment has the segment's stream and owner (the device cache or a private
 * pool). Free blocks sit in the owner's sorted sets, small and large, ordered by (stream, size,
 * address), so a best fit for one stream is one binary search. Sizes follow PyTorch's caching
 * allocator: 512-byte granularity; requests up to 1 MiB are "small" and come from 2 MiB
 * segments; larger ones come from 20 MiB segments below 10 MiB and from segments rounded up to
 * 2 MiB above. */
#ifndef CGC_BLOCKS_H_
#define CGC_BLOCKS_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
  CGC_BLOCK_ALIGN = 512,
  CGC_SMALL_LIMIT = 1 << 20,     /* requests up to this are small */
  CGC_SMALL_SEGMENT = 2 << 20,   /* segment size for small requests */
  CGC_LARGE_SEGMENT = 20 << 20,  /* segment size for large requests below CGC_LARGE_DIRECT */
  CGC_LARGE_DIRECT = 10 << 20,   /* from here on a segment is the request rounded to 2 MiB */
  CGC_LARGE_ROUND = 2 << 20,
};

typedef enum cgc__block_state {
  CGC_BLOCK_FREE = 0,      /* in its owner's free set */
  CGC_BLOCK_ALLOCATED = 1, /* handed out */
  CGC_BLOCK_WAITING = 2,   /* freed by the user, not yet reusable (recorded uses outstanding) */
} cgc__block_state_t;

struct cgc__pool_state;
struct cgc__block_use; /* allocator.h: a stream that used the block, and the event that settles it */

/* The key of free blocks that any stream may take (whole segments whose last user is done). */
#define CGC_ANY_STREAM ((uint64_t)0)

typedef struct cgc__block {
  uint64_t ptr;
  size_t size;      /* bytes this block spans (a multiple of CGC_BLOCK_ALIGN) */
  size_t requested; /* what the user asked for */
  uint64_t stream;  /* the key of the stream it was allocated on: reuse is per key */
  struct cgc__pool_state* owner;
  struct cgc__block* prev; /* neighbours within the segment, address order */
  struct cgc__block* next;
  cgc__block_state_t state;
  bool small; /* from a small segment: lives in the small set whatever its size */
  /* Streams other than `stream` that used the block (cgc_record_stream). */
  struct cgc__block_use* uses;
  size_t n_uses, cap_uses;
  uint64_t capture_id;             /* a pool block: the capture that allocated it (0: unknown) */
  uint64_t free_seq;               /* freed during its pool's capture: the bookkeeping sequence then */
  /* Freed during an adopted capture after use on other streams of it (joins.c): the capture
   * graph's nodes those streams ended at then (CUgraphNode), all of which must be ancestors of
   * its stream's next work before it is reused there. `has_markers` false: reused at the end. */
  void** markers;
  size_t n_markers;
  bool has_markers;
  struct cgc__block* next_waiting; /* link in a waiting list */
} cgc__block_t;

/* Frees the block's free markers (joins.c). */
static inline void cgc__block_drop_markers(cgc__block_t* b) {
  free(b->markers);
  b->markers = NULL;
  b->n_markers = 0;
  b->has_markers = false;
}

/* A sorted set of free blocks. */
typedef struct cgc__block_set {
  cgc__block_t** items;
  size_t n, cap;
} cgc__block_set_t;

typedef struct cgc__stats {
  size_t reserved, allocated, peak_reserved, peak_allocated;
  uint64_t driver_allocs, driver_frees;
} cgc__stats_t;

/* What an owner (device cache or private pool) keeps. */
typedef struct cgc__pool_state {
  void* pool;      /* the private pool this state belongs to; NULL for the device cache */
  void* allocator; /* the device allocator it is part of */
  cgc__block_set_t small, large;
  cgc__stats_t stats;
  size_t outstanding; /* blocks allocated or waiting: the owner cannot be dissolved while > 0 */
} cgc__pool_state_t;

/* Sizes (inline: they sit on the malloc hot path). */
static inline size_t cgc__round_size(size_t n) {
  return n < CGC_BLOCK_ALIGN ? (size_t)CGC_BLOCK_ALIGN : (n + CGC_BLOCK_ALIGN - 1) / CGC_BLOCK_ALIGN * CGC_BLOCK_ALIGN;
}
static inline bool cgc__is_small(size_t rounded) { return rounded <= CGC_SMALL_LIMIT; }
static inline size_t cgc__segment_size(size_t rounded) {
  if (cgc__is_small(rounded)) return CGC_SMALL_SEGMENT;
  if (rounded < CGC_LARGE_DIRECT) return CGC_LARGE_SEGMENT;
  return (rounded + CGC_LARGE_ROUND - 1) / CGC_LARGE_ROUND * CGC_LARGE_ROUND;
}
/* Whether a free block of `block_size` (small or large class) serving `rounded` bytes leaves a
 * remainder worth keeping. */
static inline bool cgc__should_split(bool small, size_t block_size, size_t rounded) {
  size_t remaining = block_size - rounded;
  return small ? remaining >= CGC_BLOCK_ALIGN : remaining > CGC_SMALL_LIMIT;
}

/* Sets. Insert fails only when out of host memory. */
bool cgc__set_insert(cgc__block_set_t* set, cgc__block_t* b);
void cgc__set_erase(cgc__block_set_t* set, cgc__block_t* b);
/* The smallest free block of `stream` with size >= `size`, or NULL. */
cgc__block_t* cgc__set_best_fit(const cgc__block_set_t* set, uint64_t stream, size_t size);
/* The best fit for `rounded` bytes of `stream`, taken out of the set (NULL without one). When the
 * remainder is worth keeping and `new_spare(arg)` gives a struct (new or recycled), the block is
 * cut to `rounded` bytes and the remainder takes its place in the set in the same step: one
 * search, and usually no element moved. With new_spare NULL the block is taken whole. */
cgc__block_t* cgc__set_take_best_fit(cgc__block_set_t* set, uint64_t stream, size_t rounded,
                                     cgc__block_t* (*new_spare)(void*), void* arg);
void cgc__set_free(cgc__block_set_t* set);
static inline cgc__block_set_t* cgc__state_set(cgc__pool_state_t* state, bool small) {
  return small ? &state->small : &state->large;
}

/* Makes `b` a FREE block of `size` bytes at `ptr`, outside any set and segment list. Every field
 * but the uses array (kept for reuse) is set: recycled structs need no clearing. */
void cgc__block_init(cgc__block_t* b, uint64_t ptr, size_t size, uint64_t stream, cgc__pool_state_t* owner,
                     bool small);
/* Cuts `b` (taken out of its set, about to be handed out) to `rounded` bytes; `spare` (a new or
 * recycled block struct) becomes the remainder, placed after b in the segment, FREE, and inserted into the owner's set.
 * Returns false (b unchanged) when the set cannot grow. */
bool cgc__block_split(cgc__block_t* b, size_t rounded, cgc__block_t* spare);
/* Makes `b` FREE: merges it with free neighbours (each absorbed neighbour struct is handed to
 * `recycle`) and inserts the result into its owner's set. Returns the merged block, or NULL if
 * the set could not grow (then b is left FREE outside the set: callers treat it as leaked). */
cgc__block_t* cgc__block_release(cgc__block_t* b, void (*recycle)(cgc__block_t*, void*), void* arg);
/* Makes `b` FREE without merging (the allocator's free path: a block freed and asked for again at
 * the same size, the common case, then costs no split and no merge). False if the set could not
 * grow. Neighbours are merged later by cgc__state_coalesce. */
bool cgc__block_release_unmerged(cgc__block_t* b);
/* Merges every run of adjacent free blocks in the owner's sets. Returns how many merges happened.
 * Called when a request misses (before asking the driver for memory) and before segments are
 * given back. */
size_t cgc__state_coalesce(cgc__pool_state_t* state, void (*recycle)(cgc__block_t*, void*), void* arg);
/* True when b alone spans its whole segment. */
static inline bool cgc__block_is_segment(const cgc__block_t* b) { return b->prev == NULL && b->next == NULL; }

/* Pointer -> allocated block map (open addressing, linear probing, backward-shift delete). */
typedef struct cgc__ptr_map {
  cgc__block_t** slots;
  size_t cap, n;
} cgc__ptr_map_t;
bool cgc__map_put(cgc__ptr_map_t* map, cgc__block_t* b);
cgc__block_t* cgc__map_get(const cgc__ptr_map_t* map, uint64_t ptr);
cgc__block_t* cgc__map_take(cgc__ptr_map_t* map, uint64_t ptr);
void cgc__map_free(cgc__ptr_map_t* map);

/* Stats helpers (peaks follow the current values up). */
static inline void cgc__stats_add_reserved(cgc__stats_t* s, long long delta) {
  s->reserved = (size_t)((long long)s->reserved + delta);
  if (s->reserved > s->peak_reserved) s->peak_reserved = s->reserved;
}
static inline void cgc__stats_add_allocated(cgc__stats_t* s, long long delta) {
  s->allocated = (size_t)((long long)s->allocated + delta);
  if (s->allocated > s->peak_allocated) s->peak_allocated = s->allocated;
}

#ifdef __cplusplus
}
#endif

#endif /* CGC_BLOCKS_H_ */
