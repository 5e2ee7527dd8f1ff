/* Private memory pools: cgc_pool_create/retain/release and what captures and graphs do to them.
 *
 * A pool lives while the user holds a reference, a graph captured into it exists, a capture is
 * recording into it, or any block of it is allocated or waiting (SEMANTICS 11, 14). When the
 * user and the graphs are gone the handle is dead to callers; once its last block comes back,
 * its segments move to the device cache, where cgc_empty_cache can return them (SEMANTICS 15).
 * User references are counted apart from internal ones, so that releasing a pool obtained
 * from cgc_graph_pool without retaining it is refused instead of dropping a graph's reference. */
#include <stdlib.h>
#include <string.h>

#include "src/alloc.h"

static cgc_pool_t new_pool_locked(struct cgc__device* dev) {
  struct cgc__allocator* a = cgc__allocator_of(dev);
  cgc_pool_t pool = a ? calloc(1, sizeof *pool) : NULL;
  if (pool == NULL) return NULL;
  pool->magic = CGC_MAGIC_POOL;
  pool->dev = dev;
  pool->state.pool = pool;
  pool->state.allocator = a;
  return pool;
}

/* Moves the pool's (all free, whole-segment) blocks into the device cache and frees it. */
static void dissolve(cgc_pool_t pool) {
  struct cgc__allocator* a = pool->state.allocator;
  cgc__block_set_t* sets[2] = {&pool->state.small, &pool->state.large};
  for (int s = 0; s < 2; s++) {
    for (size_t i = 0; i < sets[s]->n; i++) {
      cgc__block_t* b = sets[s]->items[i];
      b->owner = &a->cache;
      if (!cgc__set_insert(cgc__state_set(&a->cache, b->small), b)) cgc__log("out of host memory: a segment is lost");
      cgc__stats_add_reserved(&a->cache.stats, (long long)b->size);
    }
    cgc__set_free(sets[s]);
  }
  cgc__log("pool %p dissolved: %zu bytes back to device %d's cache", (void*)pool, pool->state.stats.reserved,
           pool->dev->ordinal);
  cgc__retire(pool);
}

void cgc__pool_dissolve_if_unused(cgc_pool_t pool) {
  if (pool->user_refs + pool->internal_refs > 0) return;
  pool->magic = CGC_MAGIC_DEAD; /* no caller may reach it any more */
  if (pool->state.outstanding == 0 && !pool->recording && pool->deferred == NULL) dissolve(pool);
}

cgc_status_t cgc_pool_create(cgc_context_t ctx, cgc_pool_t* out) {
  CGC_CHECK_ARG(out != NULL, "out is NULL");
  *out = NULL;
  CGC_CHECK_HANDLE(ctx, CGC_MAGIC_CONTEXT);
  cgc__alloc_lock();
  cgc_pool_t pool = new_pool_locked(ctx->dev);
  if (pool != NULL) pool->user_refs = 1;
  cgc__alloc_unlock();
  if (pool == NULL) return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, __func__, "out of host memory");
  *out = pool;
  return CGC_SUCCESS;
}

cgc_status_t cgc_pool_retain(cgc_pool_t pool) {
  cgc__alloc_lock();
  cgc_status_t st = cgc__check_handle(pool, CGC_MAGIC_POOL, __func__, "pool");
  if (st == CGC_SUCCESS) pool->user_refs++;
  cgc__alloc_unlock();
  return st;
}

cgc_status_t cgc_pool_release(cgc_pool_t pool) {
  cgc__alloc_lock();
  cgc_status_t st = cgc__check_handle(pool, CGC_MAGIC_POOL, __func__, "pool");
  if (st == CGC_SUCCESS && pool->user_refs == 0)
    st = cgc__fail(CGC_ERROR_INVALID_STATE, __func__,
                   "pool %p holds no reference of yours (cgc_graph_pool lends one: cgc_pool_retain it first)",
                   (void*)pool);
  if (st == CGC_SUCCESS) {
    pool->user_refs--;
    cgc__pool_dissolve_if_unused(pool);
  }
  cgc__alloc_unlock();
  return st;
}

cgc_status_t cgc__pool_begin_capture(struct cgc__device* dev, cgc_pool_t requested, CUstream origin, cgc_pool_t* out,
                                     const char* func) {
  *out = NULL;
  cgc__alloc_lock();
  cgc_status_t st = CGC_SUCCESS;
  cgc_pool_t pool = requested;
  if (requested != NULL) {
    st = cgc__check_handle(requested, CGC_MAGIC_POOL, func, "options->pool");
    if (st == CGC_SUCCESS && requested->dev != dev)
      st = cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, "options->pool belongs to device %d, the stream to device %d",
                     requested->dev->ordinal, dev->ordinal);
    if (st == CGC_SUCCESS && requested->recording)
      st = cgc__fail(CGC_ERROR_INVALID_STATE, func,
                     "pool %p is being recorded into by another capture (on stream %p): a pool records one "
                     "capture at a time",
                     (void*)requested, (void*)requested->capture_origin);
  } else {
    pool = new_pool_locked(dev);
    if (pool == NULL) st = cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
  }
  if (st == CGC_SUCCESS) {
    pool->internal_refs++;
    pool->recording = true;
    pool->capture_id = 0;
    pool->capture_origin = origin;
    *out = pool;
  }
  cgc__alloc_unlock();
  return st;
}

void cgc__pool_capture_started(cgc_pool_t pool, uint64_t capture_id) {
  cgc__alloc_lock();
  pool->capture_id = capture_id;
  /* From now on cgc_malloc finds the pool by capture id in this list, under the allocator lock
   * it holds anyway: no registry lock on the in-capture allocation path. */
  struct cgc__allocator* a = pool->state.allocator;
  pool->next_recording = a->recording;
  a->recording = pool;
  cgc__alloc_unlock();
}

cgc_pool_t cgc__pool_recording(struct cgc__allocator* a, uint64_t capture_id) {
  for (cgc_pool_t p = a->recording; p != NULL; p = p->next_recording)
    if (p->capture_id == capture_id) return p;
  return NULL;
}

static bool is_member(const void* stream, const CUstream* members, size_t n) {
  for (size_t i = 0; i < n; i++)
    if ((const void*)members[i] == stream) return true;
  return false;
}

void cgc__pool_end_capture(cgc_pool_t pool, bool graph_keeps_ref, const CUstream* members, size_t n_members) {
  cgc__alloc_lock();
  struct cgc__allocator* a = pool->state.allocator;
  for (cgc_pool_t* p = &a->recording; *p != NULL; p = &(*p)->next_recording) {
    if (*p == pool) {
      *p = pool->next_recording;
      break;
    }
  }
  pool->next_recording = NULL;
  pool->recording = false;
  pool->capture_id = 0;
  /* Blocks freed during the capture after use on other streams: every stream of the capture is
   * joined now, so those uses are over as far as replay order goes (PyTorch drops them the
   * same way); uses on streams outside the capture still need events. */
  cgc__block_t* deferred = pool->deferred;
  pool->deferred = NULL;
  cgc__ctx_scope_t scope = {false};
  bool in_ctx = deferred != NULL && cgc__ctx_enter(pool->dev, &scope, "cgc_capture_end") == CGC_SUCCESS;
  while (deferred != NULL) {
    cgc__block_t* b = deferred;
    deferred = b->next_waiting;
    size_t kept = 0;
    for (size_t i = 0; i < b->n_uses; i++)
      if (!is_member(b->uses[i], members, n_members)) b->uses[kept++] = b->uses[i];
    b->n_uses = kept;
    if (kept == 0) {
      cgc__alloc_release_block(b);
    } else if (in_ctx) {
      cgc__alloc_retire_used_block(a, b);
    } else {
      b->next_waiting = a->deferred;
      a->deferred = b;
    }
  }
  if (in_ctx) cgc__ctx_leave(&scope);
  if (!graph_keeps_ref) pool->internal_refs--;
  cgc__pool_dissolve_if_unused(pool);
  cgc__alloc_unlock();
}

void cgc__pool_unref(cgc_pool_t pool) {
  if (pool == NULL) return;
  cgc__alloc_lock();
  pool->internal_refs--;
  cgc__pool_dissolve_if_unused(pool);
  cgc__alloc_unlock();
}

size_t cgc__pool_reserved(cgc_pool_t pool) {
  if (pool == NULL) return 0;
  cgc__alloc_lock();
  size_t r = pool->state.stats.reserved;
  cgc__alloc_unlock();
  return r;
}
