/* Where freed memory goes (lock held throughout): a block back to its owner's free set, a
 * dissolved pool's segments to the device cache (after its graphs' last replays), the segments of
 * destroyed streams ("dying") once those streams' last work is done; which pool capture-routing
 * sends an allocation to, and the blocks a capture may reuse once their side streams joined. */
#include <stdlib.h>

#include "src/allocator.h"

/* The dying segment `s` is whole and free again: it waits for its fence (lock held). */
static void drain_dying_segment(struct cgc__allocator* a, cgc__block_t* s) {
  cgc__fence_t* f = cgc__dying_fence(s->stream);
  cgc__block_set_t* set = cgc__state_set(&a->cache, s->small);
  cgc__set_erase(set, s);
  if (f->done) {
    s->stream = CGC_ANY_STREAM;
    cgc__fence_put(a, f);
  } else {
    cgc__drain_t* d = cgc__alloc_new_drain(f);
    if (d != NULL) {
      /* The drain holds the fence reference the dying key held: at its end the segment serves
       * any stream. */
      s->stream = CGC_ANY_STREAM;
      s->state = CGC_BLOCK_WAITING;
      s->next_waiting = NULL;
      d->segments = s;
      cgc__alloc_add_drain(a, d);
      return;
    }
    /* No memory for a drain: a key no one asks for; cgc_empty_cache takes it back. */
    s->stream = CGC__KEY_NO_STREAM(s);
    cgc__fence_put(a, f);
  }
  if (!cgc__set_insert(set, s)) cgc__log("out of host memory: a segment is lost");
}

/* Gives every block of the segment starting at `head` the dying key of `f` (lock held); a pool's
 * eager segment keeps its eager bit. */
void cgc__alloc_mark_dying(cgc__block_t* head, cgc__fence_t* f) {
  uint64_t key = cgc__dying_key(f) | (head->stream & CGC__KEY_POOL_EAGER_BIT);
  for (cgc__block_t* x = head; x != NULL; x = x->next) {
    if (x->state == CGC_BLOCK_FREE) {
      cgc__block_set_t* set = cgc__state_set(x->owner, x->small);
      cgc__set_erase(set, x);
      x->stream = key;
      if (!cgc__set_insert(set, x)) cgc__log("out of host memory: a free block is lost");
    } else {
      x->stream = key;
    }
  }
  f->refs++;
}

/* Drops the block's uses, their fences and its free markers. */
static void drop_uses(struct cgc__allocator* a, cgc__block_t* b) {
  for (size_t i = 0; i < b->n_uses; i++)
    if (b->uses[i].fence != NULL) cgc__fence_put(a, b->uses[i].fence);
  b->n_uses = 0;
  if (b->has_markers) cgc__block_drop_markers(b);
}

void cgc__alloc_release_block(struct cgc__allocator* a, cgc__block_t* b) {
  cgc__pool_state_t* owner = b->owner;
  owner->outstanding--;
  drop_uses(a, b);
  /* Small blocks go back as they are: freed and asked for again at the same size (the common
   * case) they cost no split and no merge; neighbours are merged when a request misses. Large
   * blocks are merged at once: activations that grow from graph to graph need the contiguous
   * space, and deferring their merges let best fit pick fragments (measured: 35 graphs captured
   * smallest-first into one pool reserved 130 MiB instead of 90). */
  bool dying = owner == &a->cache && cgc__is_dying(b->stream);
  cgc__block_t* merged = NULL;
  bool kept = b->small && !dying ? cgc__block_release_unmerged(b)
                                 : (merged = cgc__block_release(b, cgc__alloc_recycle_block, a)) != NULL;
  if (!kept) cgc__log("out of host memory: a free block is lost");
  if (dying && merged != NULL && cgc__block_is_segment(merged)) drain_dying_segment(a, merged);
  if (owner->pool != NULL) cgc__pool_dissolve_if_unused((cgc_pool_t)owner->pool);
}

/* A whole free segment that moved from a dissolved pool into the cache (in its set): one whose
 * stream died meanwhile (its dying key) waits for that stream's last work, then serves any
 * stream; one of an adopted pool never serves another stream (a key none has). */
void cgc__alloc_settle_moved_segment(struct cgc__allocator* a, cgc__block_t* s, bool adopted) {
  if (!cgc__is_dying(s->stream)) return;
  if (adopted) {
    cgc__block_set_t* set = cgc__state_set(&a->cache, s->small);
    cgc__set_erase(set, s);
    cgc__fence_put(a, cgc__dying_fence(s->stream));
    s->stream = CGC__KEY_NO_STREAM(s);
    if (!cgc__set_insert(set, s)) cgc__log("out of host memory: a segment is lost");
    return;
  }
  drain_dying_segment(a, s);
}

/* Moves the pool's blocks (all free) into the device cache and frees the pool (lock held), once
 * the graphs' last replays are over (in a drain while they may run). Memory only its graphs
 * used then serves any stream. Memory eager work used too (an output freed after its capture:
 * `escaped`) serves the stream each segment was allocated on, as eagerly freed memory does:
 * that is the stream its free was ordered on. */
static void dissolve(cgc_pool_t pool) {
  struct cgc__allocator* a = pool->state.allocator;
  cgc__state_coalesce(&pool->state, cgc__alloc_recycle_block, a);
  cgc__drain_t* drain = NULL;
  bool had_fences = pool->n_fences > 0;
  if (had_fences && !pool->adopted && (drain = calloc(1, sizeof *drain)) != NULL) {
    drain->fences = pool->fences;
    drain->n_fences = pool->n_fences;
    drain->keep_keys = pool->escaped;
    pool->fences = NULL;
    pool->n_fences = 0;
  }
  cgc__block_set_t* sets[2] = {&pool->state.small, &pool->state.large};
  for (int s = 0; s < 2; s++) {
    for (size_t i = 0; i < sets[s]->n; i++) {
      cgc__block_t* b = sets[s]->items[i];
      b->owner = &a->cache;
      b->stream &= ~CGC__KEY_POOL_EAGER_BIT; /* cgc_pool_malloc's blocks: their stream's, like the rest */
      cgc__stats_add_reserved(&a->cache.stats, (long long)b->size);
      if (drain != NULL) {
        b->state = CGC_BLOCK_WAITING;
        b->next_waiting = drain->segments;
        drain->segments = b;
        continue;
      }
      /* With fences but no memory for a drain, or graphs cgc does not see (an adopted capture's):
       * a key no stream has (only cgc_empty_cache, whose cuMemFree waits for the device, takes it
       * back). A segment of a stream destroyed meanwhile keeps its dying key: settled below. */
      if (cgc__is_dying(b->stream)) {
        if (!cgc__set_insert(cgc__state_set(&a->cache, b->small), b)) cgc__log("out of host memory: a segment is lost");
        else cgc__alloc_settle_moved_segment(a, b, pool->adopted || had_fences);
        continue;
      }
      if (had_fences || pool->adopted)
        b->stream = CGC__KEY_NO_STREAM(pool);
      else if (!pool->escaped)
        b->stream = CGC_ANY_STREAM;
      if (!cgc__set_insert(cgc__state_set(&a->cache, b->small), b)) cgc__log("out of host memory: a segment is lost");
    }
    cgc__set_free(sets[s]);
  }
  if (drain != NULL) cgc__alloc_add_drain(a, drain);
  for (size_t i = 0; i < pool->n_fences; i++) cgc__fence_put(a, pool->fences[i]);
  free(pool->fences);
  cgc__log("pool %p dissolved: %zu bytes back to device %d's cache%s", (void*)pool, pool->state.stats.reserved,
           pool->dev->ordinal, drain != NULL ? " once its graphs' last replays are done" : "");
  cgc__alloc_pool_unlink(a, pool);
  cgc__retire(pool);
}

void cgc__pool_dissolve_if_unused(cgc_pool_t pool) {
  /* An arena pool ends only in its collective release (pool.c), never by itself. */
  if (pool->user_refs + pool->internal_refs > 0 || pool->arena != NULL) return;
  pool->magic = CGC_MAGIC_DEAD; /* no caller may reach it any more */
  if (pool->state.outstanding == 0 && !pool->recording && pool->deferred == NULL) dissolve(pool);
}

cgc_pool_t cgc__pool_recording(struct cgc__allocator* a, const cgc__stream_ref_t* ref) {
  for (cgc_pool_t p = a->recording; p != NULL; p = p->next_recording)
    if (p->capture_id != 0 && p->capture_id == ref->capture_id) return p;
  /* Between the driver's begin and the capture's id reaching the pool: its origin. */
  for (cgc_pool_t p = a->recording; p != NULL; p = p->next_recording)
    if (p->capture_id == 0 && p->capture_origin == ref->cu && p->capture_origin_key == ref->key) return p;
  return NULL;
}

void cgc__pool_note_free(cgc__block_t* b) {
  cgc_pool_t pool = b->owner->pool;
  if (pool == NULL) return;
  bool in_its_capture = pool->recording && b->capture_id != 0 && b->capture_id == pool->capture_id;
  if (!in_its_capture) pool->escaped = true;
}

void cgc__pool_reclaim_joined(cgc_pool_t pool) {
  struct cgc__allocator* a = pool->state.allocator;
  for (cgc__block_t** p = &pool->deferred; *p != NULL;) {
    cgc__block_t* b = *p;
    /* Only blocks of the origin stream qualify: a join orders the side stream before the
     * origin's later work, not before another side stream's. */
    bool safe = b->stream == pool->capture_origin_key;
    for (size_t i = 0; safe && i < b->n_uses; i++)
      safe = cgc__registry_side_joined(pool->capture_id, b->uses[i].key, b->free_seq);
    if (!safe) {
      p = &b->next_waiting;
      continue;
    }
    *p = b->next_waiting;
    cgc__alloc_release_block(a, b);
  }
}
