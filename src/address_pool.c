/* Pools at fixed addresses (1.6, cgc_pool_create_at): a virtual range reserved with the driver at
 * exactly the caller's base, backed with physical memory 2 MiB granules at a time as the pool
 * grows (cuMemCreate, cuMemMap, cuMemSetAccess), never moved and never given to the device
 * cache. Its allocations are made by the arena rules (cache.c's take_from_arena and grow_arena):
 * the same requests in the same order, in any process that reserves the same base, get the same
 * addresses, which is what a graph saved in one process and rebuilt in another needs. Where the
 * driver cannot give that base (another reservation or allocation of the process holds part of
 * it), creation fails and says so; nothing is moved. */
#include <stdio.h>
#include <stdlib.h>

#include "src/allocator.h"

/* One physical allocation backing a piece of the range. */
struct piece {
  CUmemGenericAllocationHandle handle;
  size_t offset, size;
};

typedef struct address_arena {
  cgc__arena_t base;
  struct cgc__device* dev;
  size_t reserved;      /* the reservation: the pool's range, or more (cgc_pool_create_at) */
  struct piece* pieces; /* in range order; touched only by the thread that claimed `growing`, and by drop */
  size_t n_pieces, cap_pieces;
} address_arena_t;

static CUmemAllocationProp device_memory(const struct cgc__device* dev) {
  CUmemAllocationProp prop = {0};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev->ordinal;
  return prop;
}

/* Unmaps and releases every piece, then frees the range and the struct (no lock; the device's
 * context current; the device synchronised or the memory never used). */
static cgc_status_t drop_address_arena(cgc__arena_t* base, const char* func) {
  address_arena_t* arena = (address_arena_t*)base;
  cgc_status_t st = CGC_SUCCESS;
  for (size_t i = arena->n_pieces; i-- > 0;) {
    struct piece* p = &arena->pieces[i];
    cgc_status_t unmapped;
    CGC_RELAXED(unmapped = CGC_CU(func, cuMemUnmap(arena->base.base + p->offset, p->size)));
    cgc_status_t released;
    CGC_RELAXED(released = CGC_CU(func, cuMemRelease(p->handle)));
    if (st == CGC_SUCCESS) st = unmapped != CGC_SUCCESS ? unmapped : released;
  }
  cgc_status_t freed;
  CGC_RELAXED(freed = CGC_CU(func, cuMemAddressFree(arena->base.base, arena->reserved)));
  if (st == CGC_SUCCESS) st = freed;
  free(arena->pieces);
  free(arena);
  return st;
}

static cgc_status_t agree_alone(cgc__arena_t* arena, cgc_status_t local, const char* step, const char* func) {
  (void)arena, (void)step, (void)func;
  return local;
}

/* Backs the next `bytes` of the range (no lock; the caller claimed `growing`). */
static cgc_status_t grow_address_arena(cgc__arena_t* base, size_t bytes, const char* func) {
  address_arena_t* arena = (address_arena_t*)base;
  if (arena->n_pieces == arena->cap_pieces) {
    size_t cap = arena->cap_pieces ? 2 * arena->cap_pieces : 8;
    struct piece* grown = realloc(arena->pieces, cap * sizeof *grown);
    if (grown == NULL) return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
    arena->pieces = grown;
    arena->cap_pieces = cap;
  }
  cgc__ctx_scope_t scope;
  CGC_TRY(cgc__ctx_enter(arena->dev, &scope, func));
  CUdeviceptr at = base->base + base->mapped;
  CUmemAllocationProp prop = device_memory(arena->dev);
  CUmemAccessDesc access = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  CUmemGenericAllocationHandle handle = 0;
  bool created = false, mapped = false;
  cgc_status_t st;
  /* In Relaxed mode, like cgc's other allocations: none of this is stream work. */
  CGC_RELAXED(st = CGC_CU(func, cuMemCreate(&handle, bytes, &prop, 0)));
  if (st == CGC_SUCCESS) created = true;
  if (st == CGC_SUCCESS) CGC_RELAXED(st = CGC_CU(func, cuMemMap(at, bytes, 0, handle, 0)));
  if (st == CGC_SUCCESS) mapped = true;
  if (st == CGC_SUCCESS) CGC_RELAXED(st = CGC_CU(func, cuMemSetAccess(at, bytes, &access, 1)));
  if (st == CGC_SUCCESS) {
    arena->pieces[arena->n_pieces++] = (struct piece){handle, base->mapped, bytes};
  } else { /* nothing of the piece is left: its first error is reported */
    if (mapped) CGC_RELAXED(CGC_DRV(cuMemUnmap)(at, bytes));
    if (created) CGC_RELAXED(CGC_DRV(cuMemRelease)(handle));
  }
  cgc__ctx_leave(&scope);
  return st;
}

cgc_status_t cgc_pool_create_at(cgc_context_t ctx, void* base, size_t capacity, cgc_pool_t* out) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  CGC_CHECK_ARG(out != NULL, "out is NULL");
  *out = NULL;
  CGC_CHECK_HANDLE(ctx, CGC_MAGIC_CONTEXT);
  CGC_CHECK_ARG(base != NULL, "base is NULL");
  CGC_CHECK_ARG(capacity > 0, "capacity is 0");
  struct cgc__device* dev = ctx->dev;
  CUmemAllocationProp prop = device_memory(dev);
  size_t granule = 0;
  CGC_TRY(CGC_CU(__func__, cuMemGetAllocationGranularity(&granule, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM)));
  /* grow_arena backs the range in 2 MiB steps: both must divide the base and the capacity. */
  if (granule < CGC_LARGE_ROUND) granule = CGC_LARGE_ROUND;
  if ((uintptr_t)base % granule != 0 || capacity % granule != 0)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, __func__,
                     "base %p and capacity %zu must be multiples of %zu bytes (device %d's granularity)", base,
                     capacity, granule, dev->ordinal);
  cgc__ctx_scope_t scope;
  CGC_TRY(cgc__ctx_enter(dev, &scope, __func__));
  CUdeviceptr wanted = (CUdeviceptr)(uintptr_t)base, got = 0;
  address_arena_t* arena = NULL;
  cgc_status_t st;
  /* The base is a hint to the driver: where the range is taken it offers another, or fails. On
   * driver 580 it also offered another for small ranges where larger ones at the same base were
   * given (measured: up to 4 MiB in a fresh process, up to 64 MiB in one that had worked before;
   * 256 MiB and more given in both), so a refused range is asked again as a larger reservation, of
   * which the pool uses its capacity. */
  static const size_t kReservations[] = {0, (size_t)256 << 20, (size_t)1 << 30, (size_t)4 << 30};
  size_t reserved = 0;
  CUresult r = CUDA_SUCCESS;
  char said[64] = "";
  for (size_t i = 0; i < sizeof kReservations / sizeof kReservations[0] && reserved == 0; i++) {
    size_t size = capacity > kReservations[i] ? capacity : kReservations[i];
    if (i > 0 && size == capacity) continue; /* asked already */
    CGC_RELAXED(r = CGC_DRV(cuMemAddressReserve)(&got, size, 0, wanted, 0));
    if (r == CUDA_SUCCESS && got == wanted) {
      reserved = size;
    } else if (r == CUDA_SUCCESS) {
      snprintf(said, sizeof said, "offered %#llx", (unsigned long long)got);
      CGC_RELAXED(CGC_DRV(cuMemAddressFree)(got, size));
    } else {
      const char* name = NULL;
      snprintf(said, sizeof said, "failed: %s",
               CGC_DRV(cuGetErrorName)(r, &name) == CUDA_SUCCESS && name != NULL ? name : "?");
    }
  }
  if (reserved == 0) {
    st = cgc__fail(CGC_ERROR_INVALID_STATE, __func__,
                   "the driver cannot reserve [%p, +%zu) in this process (cuMemAddressReserve %s, also for up to 4 "
                   "GiB there): part of that range is in use here, or beyond what the driver can reserve; choose "
                   "another base",
                   base, capacity, said);
    goto out;
  }
  arena = calloc(1, sizeof *arena);
  if (arena == NULL) {
    CGC_RELAXED(CGC_DRV(cuMemAddressFree)(got, reserved));
    st = cgc__fail(CGC_ERROR_OUT_OF_MEMORY, __func__, "out of host memory");
    goto out;
  }
  arena->base = (cgc__arena_t){.base = got,
                               .size = capacity,
                               .granule = granule,
                               .what = "pool at fixed addresses",
                               .drop = drop_address_arena,
                               .agree = agree_alone,
                               .grow = grow_address_arena};
  arena->dev = dev;
  arena->reserved = reserved;
  st = cgc__pool_create_arena(dev, &arena->base, out, __func__); /* drops the arena if it fails */
out:
  cgc__ctx_leave(&scope);
  return st;
}
