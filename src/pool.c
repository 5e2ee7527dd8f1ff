/* Private memory pools: cgc_pool_create/retain/release and what captures and graphs do to them.
 *
 * A pool lives while the user holds a reference, a graph captured into it exists, a capture is
 * recording into it, or any block of it is allocated or waiting (SEMANTICS 11, 14). When the
 * user and the graphs are gone the handle is dead to callers; once its last block comes back,
 * its segments move to the device cache (SEMANTICS 15), where any stream may take them, but
 * only after the last replay of every graph that used them has finished: each graph hands the
 * pool a fence (an event its last node records at every replay) when it is destroyed. User
 * references are counted apart from internal ones, so that releasing a pool obtained from
 * cgc_graph_pool without retaining it is refused instead of dropping a graph's reference.
 *
 * Every field of a pool is guarded by its device's allocator lock (allocator.h). What the
 * allocator itself does to pools (routing allocations to them, dissolving them) is reclaim.c's. */
#include <stdlib.h>
#include <string.h>

#include "src/allocator.h"

static cgc_pool_t new_pool(struct cgc__allocator* a) {
  cgc_pool_t pool = calloc(1, sizeof *pool);
  if (pool == NULL) return NULL;
  pool->magic = CGC_MAGIC_POOL;
  pool->dev = a->dev;
  pool->state.pool = pool;
  pool->state.allocator = a;
  return pool; /* on the allocator's list of pools once its creator has set it up (under the lock) */
}

cgc_status_t cgc_pool_create(cgc_context_t ctx, cgc_pool_t* out) {
  CGC_CHECK_ARG(out != NULL, "out is NULL");
  *out = NULL;
  CGC_CHECK_HANDLE(ctx, CGC_MAGIC_CONTEXT);
  struct cgc__allocator* a = cgc__allocator_of(ctx->dev);
  cgc_pool_t pool = a ? new_pool(a) : NULL;
  if (pool == NULL) return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, __func__, "out of host memory");
  pool->user_refs = 1;
  cgc__alloc_lock(a);
  cgc__alloc_pool_link(a, pool);
  cgc__alloc_unlock(a);
  *out = pool;
  return CGC_SUCCESS;
}

/* The handle is checked before the lock (a garbage pointer must not fault with the lock held)
 * and again under it (another thread may have released the last reference meanwhile; the
 * memory stays readable in the handle quarantine). */
cgc_status_t cgc_pool_retain(cgc_pool_t pool) {
  CGC_CHECK_HANDLE(pool, CGC_MAGIC_POOL);
  struct cgc__allocator* a = pool->state.allocator;
  cgc__alloc_lock(a);
  cgc_status_t st = cgc__check_handle(pool, CGC_MAGIC_POOL, __func__, "pool");
  if (st == CGC_SUCCESS) pool->user_refs++;
  cgc__alloc_unlock(a);
  return st;
}

/* ---- arena pools (1.5: an NCCL pool's registered memory, nccl_pool.c; 1.6: a pool at fixed
 * addresses, address_pool.c) ---- */

cgc_status_t cgc__pool_create_arena(struct cgc__device* dev, cgc__arena_t* arena, cgc_pool_t* out, const char* func) {
  *out = NULL;
  struct cgc__allocator* a = cgc__allocator_of(dev);
  cgc_pool_t pool = a ? new_pool(a) : NULL;
  cgc__block_t* whole = pool ? calloc(1, sizeof *whole) : NULL;
  if (whole == NULL) goto fail;
  pool->arena = arena;
  pool->user_refs = 1;
  cgc__alloc_lock(a);
  /* One free block spanning what is backed, owned by no stream yet (cache.c's take_from_arena
   * cuts it); an arena that grows may start with nothing backed. */
  bool inserted = true;
  if (arena->mapped > 0) {
    cgc__block_init(whole, arena->base, arena->mapped, CGC_ANY_STREAM, &pool->state, false);
    inserted = cgc__set_insert(&pool->state.large, whole);
  } else {
    free(whole);
  }
  if (inserted) {
    cgc__alloc_pool_link(a, pool);
    cgc__stats_add_reserved(&pool->state.stats, (long long)arena->mapped);
    cgc__stats_add_reserved(&a->total, (long long)arena->mapped);
    pool->state.stats.driver_allocs += arena->pieces;
    a->total.driver_allocs += arena->pieces;
  }
  cgc__alloc_unlock(a);
  if (!inserted) goto fail;
  *out = pool;
  return CGC_SUCCESS;

fail: /* out of host memory: nothing of the allocator refers to the pool or its block */
  if (arena->mapped > 0) free(whole);
  if (pool != NULL) {
    cgc__alloc_lock(a);
    cgc__alloc_pool_unlink(a, pool);
    cgc__alloc_unlock(a);
  }
  free(pool);
  arena->drop(arena, func);
  return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
}

/* Takes an arena pool's memory out of the allocator (lock held; every block free): its blocks
 * are dropped and the device's totals lose the arena. Returns the fences its destroyed graphs
 * left (their last replays), for the caller to put once the memory is gone. */
static cgc__fence_t** detach_arena(struct cgc__allocator* a, cgc_pool_t pool, size_t* n_fences) {
  pool->user_refs = 0;
  pool->magic = CGC_MAGIC_DEAD; /* no caller reaches it any more */
  cgc__alloc_pool_unlink(a, pool);
  cgc__state_coalesce(&pool->state, cgc__alloc_recycle_block, a);
  cgc__block_set_t* sets[2] = {&pool->state.small, &pool->state.large};
  for (int i = 0; i < 2; i++) {
    for (size_t j = 0; j < sets[i]->n; j++) cgc__alloc_recycle_block(sets[i]->items[j], a);
    cgc__set_free(sets[i]);
  }
  cgc__stats_add_reserved(&a->total, -(long long)pool->arena->mapped);
  a->total.driver_frees += pool->arena->pieces;
  cgc__fence_t** fences = pool->fences;
  *n_fences = pool->n_fences;
  pool->fences = NULL;
  pool->n_fences = 0;
  return fences;
}

/* Drops the detached arena and frees the pool (lock not held; the device's context current and
 * the device synchronised, or nothing ever used the memory). */
static cgc_status_t finish_arena(struct cgc__allocator* a, cgc_pool_t pool, cgc__fence_t** fences, size_t n_fences,
                                 const char* func) {
  cgc_status_t st = pool->arena->drop(pool->arena, func);
  pool->arena = NULL;
  cgc__alloc_lock(a);
  for (size_t i = 0; i < n_fences; i++) cgc__fence_put(a, fences[i]);
  cgc__alloc_unlock(a);
  free(fences);
  cgc__retire(pool);
  return st;
}

void cgc__pool_discard_arena(cgc_pool_t pool) {
  struct cgc__allocator* a = pool->state.allocator;
  size_t n_fences = 0;
  cgc__alloc_lock(a);
  cgc__fence_t** fences = detach_arena(a, pool, &n_fences);
  cgc__alloc_unlock(a);
  finish_arena(a, pool, fences, n_fences, "cgc_nccl_pool_create");
}

/* The collective end of an arena pool, at its last user reference (lock not held). The device is
 * synchronised first (the last replays of its graphs and the eager work on its blocks are then
 * over: an eagerly freed block is reused without a fence, so nothing else says when that work
 * ends) and finished frees settled. Then each rank says whether it can release (nothing holds
 * the pool) and the ranks agree: only if all can does any drop its registration, so that no rank
 * keeps a window its peers dropped. Refused, changing nothing, otherwise. */
static cgc_status_t release_arena_gated(struct cgc__allocator* a, cgc_pool_t pool, const char* func);

/* The release synchronises the device, then NCCL frees and unmaps, also on its own threads: a
 * capture begun meanwhile on the device (any mode), or in Global mode anywhere, is refused meanwhile. */
static cgc_status_t release_arena(struct cgc__allocator* a, cgc_pool_t pool, const char* func) {
  cgc__gate_t gate;
  CGC_TRY(cgc__capture_gate_close(&gate, pool->dev, CGC__GUARD_DEVICE,
                                  pool->arena->grow != NULL ? "releasing a pool at fixed addresses (it synchronises the device)"
                                                            : "releasing an NCCL pool (it synchronises the device)",
                                  func));
  cgc_status_t st = release_arena_gated(a, pool, func);
  cgc__capture_gate_open(&gate);
  return st;
}

static cgc_status_t release_arena_gated(struct cgc__allocator* a, cgc_pool_t pool, const char* func) {
  cgc__ctx_scope_t scope;
  CGC_TRY(cgc__ctx_enter(pool->dev, &scope, func));
  cgc_status_t local;
  CGC_RELAXED(local = CGC_CU(func, cuCtxSynchronize()));
  cgc__alloc_settle(a);
  cgc__alloc_lock(a);
  bool claimed = false;
  if (local == CGC_SUCCESS) local = cgc__check_handle(pool, CGC_MAGIC_POOL, func, "pool");
  if (local == CGC_SUCCESS && pool->user_refs != 1)
    local = cgc__fail(CGC_ERROR_INVALID_STATE, func, "pool %p was retained or released meanwhile by another thread",
                      (void*)pool);
  if (local == CGC_SUCCESS && (pool->internal_refs > 0 || pool->state.outstanding > 0 || pool->recording))
    local = cgc__fail(CGC_ERROR_INVALID_STATE, func,
                      "%s %p still has %zu block(s) allocated (or waiting for their streams) and %ld graph(s) "
                      "or capture(s) holding it: free the blocks and destroy the graphs first%s",
                      pool->arena->what, (void*)pool, pool->state.outstanding, pool->internal_refs,
                      pool->arena->grow != NULL ? " (its memory never goes to the device's cache: it leaves with "
                                                  "the pool)"
                                                : ", on every rank (its release is collective: it drops the "
                                                  "communicator's registration)");
  if (local == CGC_SUCCESS) {
    pool->magic = CGC_MAGIC_DEAD; /* claimed: other threads' calls are refused while the ranks agree */
    claimed = true;
  }
  cgc__alloc_unlock(a);
  cgc_status_t st = pool->arena->agree(pool->arena, local, "releasing", func);
  if (st != CGC_SUCCESS) {
    if (claimed) {
      cgc__alloc_lock(a);
      pool->magic = CGC_MAGIC_POOL; /* still the user's */
      cgc__alloc_unlock(a);
    }
    goto out;
  }
  size_t n_fences = 0;
  cgc__alloc_lock(a);
  cgc__fence_t** fences = detach_arena(a, pool, &n_fences);
  cgc__alloc_unlock(a);
  st = finish_arena(a, pool, fences, n_fences, func);
out:
  cgc__ctx_leave(&scope);
  return st;
}

cgc_status_t cgc_pool_release(cgc_pool_t pool) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  CGC_CHECK_HANDLE(pool, CGC_MAGIC_POOL);
  struct cgc__allocator* a = pool->state.allocator;
  cgc__alloc_lock(a);
  cgc_status_t st = cgc__check_handle(pool, CGC_MAGIC_POOL, __func__, "pool");
  if (st == CGC_SUCCESS && pool->user_refs == 0)
    st = cgc__fail(CGC_ERROR_INVALID_STATE, __func__,
                   "pool %p holds no reference of yours (cgc_graph_pool lends one: cgc_pool_retain it first)",
                   (void*)pool);
  if (st == CGC_SUCCESS && pool->arena != NULL && pool->user_refs == 1) {
    cgc__alloc_unlock(a);
    return release_arena(a, pool, __func__); /* the last reference: collective */
  }
  if (st == CGC_SUCCESS) {
    pool->user_refs--;
    cgc__pool_dissolve_if_unused(pool);
  }
  cgc__alloc_unlock(a);
  return st;
}

cgc_status_t cgc_pool_claim(cgc_pool_t pool, void* ptr, size_t size) {
  CGC_CHECK_HANDLE(pool, CGC_MAGIC_POOL);
  CGC_CHECK_ARG(ptr != NULL, "ptr is NULL");
  CGC_CHECK_ARG(size > 0, "size is 0");
  CGC_CHECK_ARG(size <= ((size_t)1 << 62), "size is beyond any device's memory");
  if ((uintptr_t)ptr % CGC_BLOCK_ALIGN != 0)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, __func__, "ptr %p is not a multiple of %d bytes, as every block is",
                     ptr, CGC_BLOCK_ALIGN);
  return cgc__pool_claim(pool, (uint64_t)(uintptr_t)ptr, size, __func__);
}

cgc_status_t cgc_pool_malloc(cgc_pool_t pool, size_t size, cgc_stream_t stream, void** out) {
  CGC_CHECK_ARG(out != NULL, "out is NULL");
  *out = NULL;
  CGC_CHECK_HANDLE(pool, CGC_MAGIC_POOL);
  CGC_CHECK_HANDLE(stream, CGC_MAGIC_STREAM);
  if (stream->dev != pool->dev)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, __func__, "stream %p is on device %d, pool %p on device %d",
                     (void*)stream->cu, stream->dev->ordinal, (void*)pool, pool->dev->ordinal);
  if (stream->body != NULL)
    return cgc__fail(CGC_ERROR_CAPTURE_UNSUPPORTED, __func__,
                     "stream %p is a conditional body's: inside a capture, cgc_malloc allocates from the capture's pool",
                     (void*)stream->cu);
  if (size == 0) return CGC_SUCCESS;
  bool ask = cgc__captures_underway() > 0 || atomic_load_explicit(&cgc__adopted_captures, memory_order_relaxed) > 0;
  cgc__stream_ref_t ref;
  CGC_TRY(cgc__stream_resolve(stream, ask, &ref, __func__));
  if (ref.capturing)
    return cgc__fail(CGC_ERROR_CAPTURE_UNSUPPORTED, __func__,
                     "stream %p is capturing (capture id %llu): cgc_pool_malloc is for eager memory; inside a capture "
                     "cgc_malloc allocates from the capture's pool (options->pool)",
                     (void*)stream->cu, (unsigned long long)ref.capture_id);
  return cgc__pool_malloc(pool, size, &ref, out, __func__);
}

/* (lock held) Routes the allocations of capture `capture_id` (0: its driver capture not begun yet,
 * matched by its origin stream meanwhile) to `pool`, which holds a reference for the capture. */
static void start_recording(struct cgc__allocator* a, cgc_pool_t pool, uint64_t capture_id, CUstream origin,
                            uint64_t origin_key) {
  pool->internal_refs++;
  pool->recording = true;
  pool->capture_id = capture_id;
  pool->capture_origin = origin;
  pool->capture_origin_key = origin_key;
  pool->next_recording = a->recording;
  a->recording = pool;
}

cgc_status_t cgc__pool_begin_capture(struct cgc__device* dev, cgc_pool_t requested, CUstream origin,
                                     uint64_t origin_key, cgc_pool_t* out, const char* func) {
  *out = NULL;
  struct cgc__allocator* a = cgc__allocator_of(dev);
  if (a == NULL) return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
  cgc_pool_t pool = requested;
  if (requested != NULL) {
    CGC_TRY(cgc__check_handle(requested, CGC_MAGIC_POOL, func, "options->pool"));
    if (requested->dev != dev)
      return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, "options->pool belongs to device %d, the stream to device %d",
                       requested->dev->ordinal, dev->ordinal);
  } else if ((pool = new_pool(a)) == NULL) {
    return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
  }
  cgc__alloc_lock(a);
  cgc_status_t st = cgc__check_handle(pool, CGC_MAGIC_POOL, func, "options->pool");
  if (st == CGC_SUCCESS && pool->recording)
    st = cgc__fail(CGC_ERROR_INVALID_STATE, func,
                   "pool %p is being recorded into by another capture (on stream %p): a pool records one "
                   "capture at a time",
                   (void*)pool, (void*)pool->capture_origin);
  if (st == CGC_SUCCESS) {
    if (requested == NULL) cgc__alloc_pool_link(a, pool);
    start_recording(a, pool, 0, origin, origin_key); /* routing starts before the driver begins */
    *out = pool;
  }
  cgc__alloc_unlock(a);
  if (st != CGC_SUCCESS && requested == NULL) {
    cgc__alloc_lock(a);
    cgc__alloc_pool_unlink(a, pool);
    cgc__alloc_unlock(a);
    free(pool);
  }
  return st;
}

void cgc__pool_capture_started(cgc_pool_t pool, uint64_t capture_id) {
  struct cgc__allocator* a = pool->state.allocator;
  cgc__alloc_lock(a);
  pool->capture_id = capture_id;
  cgc__alloc_unlock(a);
}

static bool is_member(uint64_t key, const uint64_t* members, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (members[i] == key) return true;
  return false;
}

void cgc__pool_end_capture(cgc_pool_t pool, bool graph_keeps_ref, const uint64_t* members, size_t n_members) {
  struct cgc__allocator* a = pool->state.allocator;
  cgc__alloc_lock(a);
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
   * same way); uses on streams outside the capture still need fences. */
  cgc__block_t* deferred = pool->deferred;
  pool->deferred = NULL;
  cgc__block_t* outside = NULL;
  while (deferred != NULL) {
    cgc__block_t* b = deferred;
    deferred = b->next_waiting;
    if (b->has_markers) cgc__block_drop_markers(b); /* the capture's graph is done with */
    size_t kept = 0;
    for (size_t i = 0; i < b->n_uses; i++) {
      if (is_member(b->uses[i].key, members, n_members)) {
        if (b->uses[i].fence != NULL) cgc__fence_put(a, b->uses[i].fence);
      } else {
        b->uses[kept++] = b->uses[i];
      }
    }
    b->n_uses = kept;
    if (kept == 0) {
      cgc__alloc_release_block(a, b);
    } else {
      b->next_waiting = outside;
      outside = b;
    }
  }
  /* Counted in `fencing` from here (the lock held since the blocks left the pool's list): their
   * use streams live until they are parked. */
  a->fencing++;
  while (outside != NULL) {
    cgc__block_t* b = outside;
    outside = b->next_waiting;
    cgc__alloc_fence_and_park(a, b);
  }
  a->fencing--;
  if (!graph_keeps_ref) pool->internal_refs--;
  cgc__pool_dissolve_if_unused(pool);
  bool any_deferred = a->deferred != NULL;
  cgc__alloc_unlock(a);
  if (any_deferred) cgc__alloc_settle_deferred(a); /* blocks that waited for captures to end */
}

/* ---- captures cgc did not begin (1.4) ---- */

/* (lock held) Claims `pool`'s adoption for its end: of several racing ends, one gets it. */
static bool claim_adoption(cgc_pool_t pool) {
  if (!(pool->recording && pool->adopting)) return false;
  pool->adopting = false;
  pool->adopter = NULL;
  cgc__joins_forget(pool);
  ((struct cgc__allocator*)pool->state.allocator)->adopting_pools--;
  return true;
}

/* Ends a claimed adoption (lock not held; the adoption's pool reference keeps the pool alive).
 * Only the stream the capture was adopted through is known to be in it (with PyTorch, whichever
 * of its streams allocated first): uses on other streams are settled with fences, as uses
 * outside a capture are. */
static void finish_adoption(cgc_pool_t pool) {
  struct cgc__allocator* a = pool->state.allocator;
  cgc__alloc_lock(a);
  uint64_t origin_key = pool->capture_origin_key;
  cgc__alloc_unlock(a);
  cgc__pool_end_capture(pool, false, &origin_key, 1);
  atomic_fetch_sub_explicit(&pool->dev->adopted_captures, 1, memory_order_release);
  atomic_fetch_sub_explicit(&cgc__adopted_captures, 1, memory_order_release);
}

cgc_pool_t cgc__pool_adoption_open(struct cgc__device* dev, CUstream* origin) {
  struct cgc__allocator* a = atomic_load_explicit(&dev->alloc, memory_order_acquire);
  if (a == NULL || atomic_load_explicit(&cgc__adopted_captures, memory_order_acquire) == 0) return NULL;
  cgc_pool_t found = NULL;
  cgc__alloc_lock(a);
  for (cgc_pool_t p = a->recording; p != NULL && found == NULL; p = p->next_recording)
    if (p->adopting) found = p;
  if (found != NULL) *origin = found->capture_origin;
  cgc__alloc_unlock(a);
  return found;
}

cgc_status_t cgc_pool_adopt_capture(cgc_pool_t pool, void* native_stream) {
  CGC_CHECK_HANDLE(pool, CGC_MAGIC_POOL);
  /* What the driver says of the stream, asked before any lock: the capture must be active, not
   * one of cgc's (whose pool is routed already), and of the pool's device. */
  CUstream cu = (CUstream)native_stream;
  cgc__stream_ref_t ref;
  CGC_TRY(cgc__stream_resolve_native(pool->dev, cu, &ref, __func__));
  if (ref.invalidated)
    return cgc__fail(CGC_ERROR_CAPTURE_INVALIDATED, __func__,
                     "native_stream %p is in a capture that an earlier call invalidated", native_stream);
  if (!ref.capturing)
    return cgc__fail(CGC_ERROR_INVALID_STATE, __func__, "native_stream %p is not capturing: there is no capture to adopt",
                     native_stream);
  if (cu != NULL && cu != CU_STREAM_LEGACY && cu != CU_STREAM_PER_THREAD) {
    CUcontext owner = NULL;
    CGC_TRY(CGC_CU(__func__, cuStreamGetCtx(cu, &owner)));
    if (owner != pool->dev->cu)
      return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, __func__,
                       "native_stream %p is not a stream of device %d's primary context, whose pool %p is",
                       native_stream, pool->dev->ordinal, (void*)pool);
  }
  if (cgc__registry_is_cgc_capture(ref.capture_id))
    return cgc__fail(CGC_ERROR_INVALID_STATE, __func__,
                     "native_stream %p is in capture %llu, which cgc began: it allocates from its own pool already",
                     native_stream, (unsigned long long)ref.capture_id);
  struct cgc__allocator* a = pool->state.allocator;
  cgc__alloc_lock(a);
  cgc_status_t st = cgc__check_handle(pool, CGC_MAGIC_POOL, __func__, "pool");
  cgc_pool_t other = NULL;
  for (cgc_pool_t p = a->recording; st == CGC_SUCCESS && p != NULL; p = p->next_recording)
    /* The same capture, or (id not yet known) a cgc capture being begun on this very stream. */
    if (p->capture_id == ref.capture_id || (p->capture_id == 0 && p->capture_origin == ref.cu)) other = p;
  if (st == CGC_SUCCESS && pool->recording)
    st = cgc__fail(CGC_ERROR_INVALID_STATE, __func__,
                   "pool %p is being recorded into by another capture (on stream %p): a pool records one capture at a "
                   "time (an adoption lasts until its adopter calls cgc_pool_end_adopted_capture, also when its "
                   "capture failed)",
                   (void*)pool, (void*)pool->capture_origin);
  else if (st == CGC_SUCCESS && other != NULL)
    st = cgc__fail(CGC_ERROR_INVALID_STATE, __func__, "capture %llu allocates from pool %p already",
                   (unsigned long long)ref.capture_id, (void*)other);
  if (st == CGC_SUCCESS) {
    start_recording(a, pool, ref.capture_id, ref.cu, ref.key);
    pool->adopted = pool->adopting = true;
    pool->adopter = cgc__adopter_token();
    a->adopting_pools++;
    atomic_fetch_add_explicit(&pool->dev->adopted_captures, 1, memory_order_release);
    atomic_fetch_add_explicit(&cgc__adopted_captures, 1, memory_order_release);
  }
  cgc__alloc_unlock(a);
  /* Frees that were recording fences before the adoption counted may be on the capture's
   * streams: they finish before the adopter goes on (and may end the capture). */
  if (st == CGC_SUCCESS) cgc__alloc_wait_fencing(pool->dev);
  return st;
}

cgc_status_t cgc_pool_end_adopted_capture(cgc_pool_t pool) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  CGC_CHECK_HANDLE(pool, CGC_MAGIC_POOL);
  struct cgc__allocator* a = pool->state.allocator;
  cgc__alloc_lock(a);
  bool mine = claim_adoption(pool);
  cgc__alloc_unlock(a);
  if (!mine)
    return cgc__fail(CGC_ERROR_INVALID_STATE, __func__,
                     "pool %p adopts no capture (cgc_pool_adopt_capture)",
                     (void*)pool);
  finish_adoption(pool);
  return CGC_SUCCESS;
}

/* Blocks until `fence` completes (Relaxed: never breaks a capture) and destroys it. */
static void wait_fence(CUevent fence) {
  CGC_RELAXED(CGC_DRV(cuEventSynchronize)(fence));
  CGC_DRV(cuEventDestroy)(fence);
}

/* (lock held) Appends `f` to the pool's fences; false when out of host memory. */
static bool add_fence(cgc_pool_t pool, cgc__fence_t* f) {
  if (pool->n_fences == pool->cap_fences) {
    size_t cap = pool->cap_fences ? pool->cap_fences * 2 : 4;
    cgc__fence_t** grown = realloc(pool->fences, cap * sizeof *grown);
    if (grown == NULL) return false;
    pool->fences = grown;
    pool->cap_fences = cap;
  }
  pool->fences[pool->n_fences++] = f;
  return true;
}

/* Drops the fences of a pool that have completed, so that a long-lived pool whose graphs are
 * destroyed while replaying does not collect them without bound. Queries run without the lock
 * (Relaxed: they never break a capture). */
static void prune_fences(cgc_pool_t pool) {
  struct cgc__allocator* a = pool->state.allocator;
  enum { kMax = 64 };
  cgc__fence_t* list[kMax];
  bool done[kMax];
  size_t n = 0;
  cgc__alloc_lock(a);
  for (size_t i = 0; i < pool->n_fences && n < kMax; i++) {
    list[n] = pool->fences[i];
    list[n++]->refs++;
  }
  cgc__alloc_unlock(a);
  CGC_RELAXED(for (size_t i = 0; i < n; i++) done[i] = CGC_DRV(cuEventQuery)(list[i]->ev) != CUDA_ERROR_NOT_READY);
  cgc__alloc_lock(a);
  for (size_t i = 0; i < n; i++) {
    if (done[i]) list[i]->done = true;
    cgc__fence_put(a, list[i]);
  }
  size_t kept = 0;
  for (size_t i = 0; i < pool->n_fences; i++) {
    if (pool->fences[i]->done)
      cgc__fence_put(a, pool->fences[i]);
    else
      pool->fences[kept++] = pool->fences[i];
  }
  pool->n_fences = kept;
  cgc__alloc_unlock(a);
}

void cgc__pool_unref(cgc_pool_t pool, CUevent fence) {
  if (pool == NULL) {
    if (fence != NULL) CGC_DRV(cuEventDestroy)(fence);
    return;
  }
  struct cgc__allocator* a = pool->state.allocator;
  cgc__alloc_lock(a);
  bool crowded = fence != NULL && pool->n_fences >= 8 && pool->user_refs + pool->internal_refs > 1;
  cgc__alloc_unlock(a);
  if (crowded) prune_fences(pool); /* the pool lives on: its graph references hold it */
  cgc__fence_t* f = fence != NULL ? cgc__fence_new(fence) : NULL;
  bool kept = f != NULL;
  cgc__alloc_lock(a);
  if (f != NULL) kept = add_fence(pool, f);
  if (fence != NULL && !kept) {
    /* No memory to remember the fence: wait for it here rather than hand memory out early. */
    cgc__alloc_unlock(a);
    free(f);
    wait_fence(fence);
    cgc__alloc_lock(a);
  }
  pool->internal_refs--;
  cgc__pool_dissolve_if_unused(pool);
  cgc__alloc_unlock(a);
}

size_t cgc__pool_reserved(cgc_pool_t pool) {
  if (pool == NULL) return 0;
  struct cgc__allocator* a = pool->state.allocator;
  cgc__alloc_lock(a);
  size_t r = pool->state.stats.reserved;
  cgc__alloc_unlock(a);
  return r;
}

/* ---- a conditional body ending ---- */

/* A block of `key` owned by `state`: free, allocated or waiting in `pool`'s deferred list (lock
 * held); NULL when none is left. */
static cgc__block_t* block_of_key(struct cgc__allocator* a, cgc_pool_t pool, uint64_t key) {
  for (int small = 0; small < 2; small++) {
    cgc__block_t* b = cgc__set_best_fit(cgc__state_set(&pool->state, small), key, 0);
    if (b != NULL) return b;
  }
  for (size_t i = 0; i < a->live.cap; i++) {
    cgc__block_t* b = a->live.slots[i];
    if (b != NULL && b->owner == &pool->state && b->stream == key) return b;
  }
  for (cgc__block_t* b = pool->deferred; b != NULL; b = b->next_waiting)
    if (b->stream == key) return b;
  return NULL;
}

void cgc__alloc_body_ended(struct cgc__device* dev, uint64_t capture_id, uint64_t body_key, uint64_t outer_key) {
  struct cgc__allocator* a = atomic_load_explicit(&dev->alloc, memory_order_acquire);
  if (a == NULL || body_key == 0 || body_key == outer_key) return;
  cgc__alloc_lock(a);
  cgc_pool_t pool = NULL;
  for (cgc_pool_t p = a->recording; p != NULL && pool == NULL; p = p->next_recording)
    if (p->capture_id == capture_id) pool = p;
  /* Every block of a segment carries the segment's key: whole segments pass to the outer stream,
   * free blocks moving to their new place in the sorted sets. */
  for (cgc__block_t* b; pool != NULL && (b = block_of_key(a, pool, body_key)) != NULL;) {
    while (b->prev != NULL) b = b->prev;
    for (; b != NULL; b = b->next) {
      if (b->stream != body_key) continue; /* an arena's other streams' blocks (a segment's: none) */
      bool in_set = b->state == CGC_BLOCK_FREE;
      cgc__block_set_t* set = cgc__state_set(b->owner, b->small);
      if (in_set) cgc__set_erase(set, b);
      b->stream = outer_key;
      if (in_set && !cgc__set_insert(set, b)) cgc__log("out of host memory: a free block of a pool is lost");
    }
  }
  cgc__alloc_unlock(a);
}

/* ---- saved graphs (1.6): a pool at fixed addresses as a saved file describes it ---- */

struct cgc__device* cgc__pool_device(cgc_pool_t pool) { return pool->dev; }

bool cgc__pool_is_fixed(cgc_pool_t pool) { return pool != NULL && pool->arena != NULL && pool->arena->grow != NULL; }

void cgc__pool_hold(cgc_pool_t pool) {
  struct cgc__allocator* a = pool->state.allocator;
  cgc__alloc_lock(a);
  pool->internal_refs++;
  cgc__alloc_unlock(a);
}

static int by_address(const void* x, const void* y) {
  uint64_t a = ((const cgc__saved_block_t*)x)->offset, b = ((const cgc__saved_block_t*)y)->offset;
  return a < b ? -1 : a > b;
}

cgc_status_t cgc__pool_layout(cgc_pool_t pool, cgc__pool_layout_t* out, const char* func) {
  memset(out, 0, sizeof *out);
  struct cgc__allocator* a = pool->state.allocator;
  cgc_status_t st = CGC_SUCCESS;
  size_t cap = 0;
  for (;;) { /* counted under the lock, the array allocated without it, filled under it again */
    cgc__alloc_lock(a);
    size_t n = 0;
    for (size_t i = 0; i < a->live.cap; i++)
      if (a->live.slots[i] != NULL && a->live.slots[i]->owner == &pool->state) n++;
    if (pool->recording) {
      cgc__alloc_unlock(a);
      free(out->blocks);
      out->blocks = NULL;
      return cgc__fail(CGC_ERROR_INVALID_STATE, func, "pool %p is recording a capture: save after its end",
                       (void*)pool);
    }
    if (n <= cap) {
      const cgc__arena_t* arena = pool->arena;
      out->base = arena->base;
      out->capacity = arena->size;
      out->backed = arena->mapped;
      for (size_t i = 0; i < a->live.cap; i++) {
        const cgc__block_t* b = a->live.slots[i];
        if (b != NULL && b->owner == &pool->state)
          out->blocks[out->n_blocks++] = (cgc__saved_block_t){b->ptr - arena->base, b->size};
      }
      cgc__alloc_unlock(a);
      break;
    }
    cgc__alloc_unlock(a);
    cap = n + 16;
    cgc__saved_block_t* grown = realloc(out->blocks, cap * sizeof *grown);
    if (grown == NULL) {
      free(out->blocks);
      out->blocks = NULL;
      return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
    }
    out->blocks = grown;
  }
  if (out->n_blocks > 1) qsort(out->blocks, out->n_blocks, sizeof *out->blocks, by_address);
  return st;
}

bool cgc__pool_discard_unused(cgc_pool_t pool, const char* func) {
  struct cgc__allocator* a = pool->state.allocator;
  size_t n_fences = 0;
  cgc__alloc_lock(a);
  if (pool->arena == NULL || pool->user_refs != 1 || pool->internal_refs > 0 || pool->state.outstanding > 0 ||
      pool->recording || pool->deferred != NULL) {
    cgc__alloc_unlock(a);
    return false;
  }
  cgc__fence_t** fences = detach_arena(a, pool, &n_fences);
  cgc__alloc_unlock(a);
  finish_arena(a, pool, fences, n_fences, func);
  return true;
}
