/* NCCL pools (1.5): a pool whose memory is registered with a communicator, made and released
 * collectively (SEMANTICS 31). */
#include <stdlib.h>
#include <string.h>

#include "src/nccl.h"

/* ---- NCCL pools (1.5): a pool whose memory is registered with a communicator ---- */

static const char* const kMemoryNames[] = {"plain", "registered", "symmetric"};

/* The arena of an NCCL pool: its memory, where it came from and its registration. */
typedef struct nccl_arena {
  cgc__arena_t base;
  cgc_comm_t comm;       /* held (graph_refs) until the arena is dropped */
  bool from_nccl;        /* ncclMemAlloc'ed (else cuMemAlloc'ed) */
  void* registration;    /* ncclCommRegister's handle, or NULL */
  ncclWindow_t window;   /* ncclCommWindowRegister's window, or NULL */
  cgc_nccl_memory_t kind;
} nccl_arena_t;

/* Drops the registration (collective for a window: every rank releases its pool alike), frees the
 * memory, lets go of the communicator. After an abort NCCL has freed the communicator and what
 * was registered with it: only the memory is left to free. */
static cgc_status_t drop_arena(cgc__arena_t* base, const char* func) {
  nccl_arena_t* arena = (nccl_arena_t*)base;
  cgc_comm_t comm = arena->comm;
  cgc_status_t st = CGC_SUCCESS;
  ncclResult_t r = 0;
  bool comm_alive = comm != NULL && !atomic_load(&comm->aborted);
  if (comm_alive && arena->window != NULL) {
    NCCL_RELAXED(r, cgc__nccl.ncclCommWindowDeregister(comm->nccl, arena->window));
    if (r != 0) st = cgc__nccl_fail(r, comm->nccl, func, "ncclCommWindowDeregister");
  }
  if (comm_alive && arena->registration != NULL) {
    NCCL_RELAXED(r, cgc__nccl.ncclCommDeregister(comm->nccl, arena->registration));
    if (r != 0 && st == CGC_SUCCESS) st = cgc__nccl_fail(r, comm->nccl, func, "ncclCommDeregister");
  }
  if (arena->base.base != 0) {
    if (arena->from_nccl) {
      NCCL_RELAXED(r, cgc__nccl.ncclMemFree((void*)(uintptr_t)arena->base.base));
      if (r != 0 && st == CGC_SUCCESS) st = cgc__nccl_fail(r, NULL, func, "ncclMemFree");
    } else {
      CUresult cr = cgc__relaxed_mem_free(arena->base.base);
      if (st == CGC_SUCCESS) st = cgc__cu_fail(cr, func, "cuMemFree");
    }
  }
  if (comm != NULL) cgc__comm_release(comm);
  free(arena);
  return st;
}

/* The best kind this NCCL offers up to `wanted`. */
static cgc_nccl_memory_t available_kind(cgc_nccl_memory_t wanted) {
  if (wanted == CGC_NCCL_MEMORY_SYMMETRIC && (cgc__nccl.ncclCommWindowRegister == NULL || cgc__nccl.ncclCommWindowDeregister == NULL))
    wanted = CGC_NCCL_MEMORY_REGISTERED;
  if (wanted == CGC_NCCL_MEMORY_REGISTERED &&
      (cgc__nccl.ncclMemAlloc == NULL || cgc__nccl.ncclMemFree == NULL || cgc__nccl.ncclCommRegister == NULL ||
       cgc__nccl.ncclCommDeregister == NULL))
    wanted = CGC_NCCL_MEMORY_PLAIN;
  return wanted;
}

/* Allocates the arena's memory: ncclMemAlloc for a kind NCCL registers, else cuMemAlloc. */
static cgc_status_t allocate_arena(nccl_arena_t* arena, cgc_nccl_memory_t kind, const char* func) {
  if (kind == CGC_NCCL_MEMORY_PLAIN)
    return cgc__cu_fail(cgc__relaxed_mem_alloc(&arena->base.base, arena->base.size), func, "cuMemAlloc");
  void* p = NULL;
  ncclResult_t r;
  NCCL_RELAXED(r, cgc__nccl.ncclMemAlloc(&p, arena->base.size));
  if (r != 0) return cgc__nccl_fail(r, arena->comm->nccl, func, "ncclMemAlloc");
  arena->base.base = (CUdeviceptr)(uintptr_t)p;
  arena->from_nccl = true;
  return CGC_SUCCESS;
}

/* Registers it with the communicator as `kind` (a symmetric window is collective). */
static cgc_status_t register_arena(nccl_arena_t* arena, cgc_nccl_memory_t kind, const char* func) {
  ncclComm_t c = arena->comm->nccl;
  void* p = (void*)(uintptr_t)arena->base.base;
  ncclResult_t r = 0;
  if (kind == CGC_NCCL_MEMORY_SYMMETRIC) {
    NCCL_RELAXED(r, cgc__nccl.ncclCommWindowRegister(c, p, arena->base.size, &arena->window, kNcclWinCollSymmetric));
    return r == 0 ? CGC_SUCCESS : cgc__nccl_fail(r, c, func, "ncclCommWindowRegister (symmetric)");
  }
  if (kind == CGC_NCCL_MEMORY_REGISTERED) {
    NCCL_RELAXED(r, cgc__nccl.ncclCommRegister(c, p, arena->base.size, &arena->registration));
    return r == 0 ? CGC_SUCCESS : cgc__nccl_fail(r, c, func, "ncclCommRegister");
  }
  return CGC_SUCCESS;
}

/* Every rank learns the lowest and highest of the ranks' `mine` (an eager all-reduce with max of
 * (mine, -mine) through the 8-byte device buffer `scratch`, waited for). A rank whose own step
 * failed passes -1, so that the others fail with it instead of waiting for it in a later
 * collective step. */
static cgc_status_t agree(cgc_comm_t comm, int mine, int* lowest, int* highest, const char* func) {
  CUstream s = NULL;
  CUdeviceptr scratch = comm->scratch;
  int32_t values[2] = {mine, -mine};
  cgc_status_t st;
  CGC_TRY_GOTO(st, CGC_CU(func, cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, 0)), out);
  /* With mixing off this collective too waits for the communicator's last work (a graph may
   * still run); its stream's key is one no other stream has. */
  uint64_t key = (uint64_t)(uintptr_t)s | ((uint64_t)1 << 62) | ((uint64_t)1 << 61);
  if (comm->order_event != NULL) {
    CUresult waited = cgc__comm_order_before(comm, s, key);
    CGC_TRY_GOTO(st, cgc__cu_fail(waited, func, "cuStreamWaitEvent (after the communicator's last work)"), out);
  }
  CGC_TRY_GOTO(st, CGC_CU(func, cuMemcpyHtoDAsync(scratch, values, sizeof values, s)), out);
  void* buf = (void*)(uintptr_t)scratch;
  ncclResult_t r = cgc__nccl.ncclAllReduce(buf, buf, 2, kNcclInt32, kNcclMax, comm->nccl, s);
  if (r != 0) {
    st = cgc__nccl_fail(r, comm->nccl, func, "ncclAllReduce (the ranks' agreement on the pool)");
    goto out;
  }
  if (comm->order_event != NULL) {
    CUresult recorded = cgc__comm_order_after(comm, s, key);
    CGC_TRY_GOTO(st, cgc__cu_fail(recorded, func, "cuEventRecord (the communicator's order)"), out);
  }
  CGC_TRY_GOTO(st, CGC_CU(func, cuMemcpyDtoHAsync(values, scratch, sizeof values, s)), out);
  CUresult cr;
  NCCL_RELAXED(cr, CGC_DRV(cuStreamSynchronize)(s));
  st = cgc__cu_fail(cr, func, "cuStreamSynchronize");
out: /* success and failure release the same things */
  if (s != NULL) CGC_DRV(cuStreamDestroy)(s);
  *highest = values[0];
  *lowest = -values[1];
  return st;
}

static const char* memory_name(int kind) { return kind >= 0 && kind <= 2 ? kMemoryNames[kind] : "none (failed)"; }

/* One step every rank takes (allocating, registering): `local` is this rank's result. Each rank
 * then knows whether all succeeded with the same kind; if not, all fail alike, this rank with its
 * own error when it had one. */
static cgc_status_t step_together(cgc_comm_t comm, cgc_status_t local, cgc_nccl_memory_t kind, const char* step,
                                  const char* func) {
  int lowest = 0, highest = 0;
  CGC_TRY(agree(comm, local == CGC_SUCCESS ? (int)kind : -1, &lowest, &highest, func));
  if (local != CGC_SUCCESS) {
    cgc__append(" (no rank of communicator %p does it)", (void*)comm);
    return local;
  }
  if (lowest < 0)
    return cgc__fail(CGC_ERROR_INVALID_STATE, func,
                     "another rank of communicator %p failed %s its part of the pool (its cgc_last_error says "
                     "why): no rank does it",
                     (void*)comm, step);
  if (lowest != highest)
    return cgc__fail(CGC_ERROR_INVALID_STATE, func,
                     "the ranks of communicator %p got different kinds of memory (from %s to %s; this rank: %s): "
                     "NCCL leaves collectives on registered and unregistered buffers undefined, so no rank gets "
                     "the pool; ask every rank for the same kind, with the same NCCL",
                     (void*)comm, memory_name(lowest), memory_name(highest), memory_name(kind));
  return CGC_SUCCESS;
}

/* The ranks' agreement on a step of the pool's life (its release): every rank learns whether all
 * can take it. Inside a group the all-reduce would only be queued, so that is refused (every rank
 * of an SPMD program is inside its group alike). After an abort no collective can run: each rank
 * decides alone (NCCL freed the registration with the communicator). */
static cgc_status_t agree_on_arena(cgc__arena_t* base, cgc_status_t local, const char* step, const char* func) {
  nccl_arena_t* arena = (nccl_arena_t*)base;
  if (atomic_load(&arena->comm->aborted)) return local;
  if (cgc__nccl_group_depth() > 0)
    return cgc__fail(CGC_ERROR_INVALID_STATE, func,
                     "inside cgc_group_start/cgc_group_end: the ranks' agreement on %s the NCCL pool would only be "
                     "queued; call it outside the group",
                     step);
  return step_together(arena->comm, local, arena->kind, step, func);
}

static cgc_status_t create_gated(cgc_comm_t comm, size_t capacity, cgc_nccl_memory_t wanted, cgc_pool_t* out,
                                 cgc_nccl_memory_t* got);

cgc_status_t cgc_nccl_pool_create(cgc_comm_t comm, size_t capacity, cgc_nccl_memory_t wanted, cgc_pool_t* out,
                                  cgc_nccl_memory_t* got) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  CGC_CHECK_ARG(out != NULL, "out is NULL");
  *out = NULL;
  CGC_TRY(cgc__comm_check(comm, __func__));
  CGC_CHECK_ARG((unsigned)wanted <= CGC_NCCL_MEMORY_SYMMETRIC, "wanted %d is not a cgc_nccl_memory_t", (int)wanted);
  CGC_CHECK_ARG(capacity > 0 && capacity <= ((size_t)1 << 48), "capacity %zu is outside (0, 2^48]", capacity);
  /* Refusals before the ranks' first step: as with any collective call, the other ranks then wait
   * for this one (the same program on every rank is refused alike). */
  if (cgc__nccl_group_depth() > 0)
    return cgc__fail(CGC_ERROR_INVALID_STATE, __func__,
                     "inside cgc_group_start/cgc_group_end: the ranks' steps would only be queued; create the pool "
                     "outside the group");
  /* NCCL allocates, maps and synchronises for milliseconds, also on its own threads: a Global
   * capture begun meanwhile on another thread is refused while the gate is closed. */
  cgc__gate_t gate;
  CGC_TRY(cgc__capture_gate_close(&gate, comm->dev, CGC__GUARD_AS_GLOBAL,
                                  "registering memory with NCCL (it allocates, maps and synchronises)", __func__));
  cgc_status_t st = create_gated(comm, capacity, wanted, out, got);
  cgc__capture_gate_open(&gate);
  return st;
}

/* cgc_nccl_pool_create's steps, its gate closed. */
static cgc_status_t create_gated(cgc_comm_t comm, size_t capacity, cgc_nccl_memory_t wanted, cgc_pool_t* out,
                                 cgc_nccl_memory_t* got) {
  static const char* const func = "cgc_nccl_pool_create";
  cgc__ctx_scope_t scope;
  CGC_TRY(cgc__ctx_enter(comm->dev, &scope, func));

  /* Every rank steps together from here: a rank that fails alone must not leave the others waiting
   * in the next collective step (the window's registration, the first collective on the pool). */
  cgc_nccl_memory_t kind = available_kind(wanted);
  nccl_arena_t* arena = calloc(1, sizeof *arena);
  cgc_status_t local = arena != NULL ? CGC_SUCCESS : cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
  if (arena != NULL) {
    /* Whole 2 MiB pages: ncclMemAlloc's granularity on these GPUs, and 4 KiB-aligned as windows must be. */
    const size_t page = (size_t)2 << 20;
    arena->base.size = (capacity + page - 1) / page * page;
    arena->base.mapped = arena->base.size; /* made all at once: it never grows */
    arena->base.pieces = 1;
    arena->base.what = "NCCL pool";
    arena->base.drop = drop_arena;
    arena->base.agree = agree_on_arena;
    arena->comm = comm;
    arena->kind = kind;
    cgc__comm_retain(comm);
    local = allocate_arena(arena, kind, func);
  }
  cgc_pool_t pool = NULL;
  cgc_status_t st;
  CGC_TRY_GOTO(st, step_together(comm, local, kind, "allocating", func), fail);
  local = register_arena(arena, kind, func);
  /* The pool (host memory only) is made before the last step, so that no rank can fail after it. */
  if (local == CGC_SUCCESS) {
    local = cgc__pool_create_arena(comm->dev, &arena->base, &pool, func); /* drops the arena on failure */
    if (local != CGC_SUCCESS) arena = NULL;
  }
  CGC_TRY_GOTO(st, step_together(comm, local, kind, "registering", func), fail);
  cgc__ctx_leave(&scope);
  *out = pool;
  if (got != NULL) *got = kind;
  if (kind != wanted)
    cgc__warn(func,
              "NCCL %d gives %s memory, not %s (registered needs NCCL >= 2.19, symmetric >= 2.27): pool %p is %s",
              cgc__nccl.version, kMemoryNames[kind], kMemoryNames[wanted], (void*)pool, kMemoryNames[kind]);
  return CGC_SUCCESS;

fail:
  if (pool != NULL) {
    cgc__pool_discard_arena(pool); /* nothing was allocated from it */
  } else if (arena != NULL) {
    drop_arena(&arena->base, func);
  }
  cgc__ctx_leave(&scope);
  return st;
}
