/* nccl_bench's buffers: one send and one recv buffer per side and rank of each kind (plain,
 * registered, symmetric), cgc's from cgc_malloc or an NCCL pool, the raw side's from cuMemAlloc
 * or ncclMemAlloc with NCCL's registration; whether this NCCL has the raw side's calls for a
 * kind; and their release, collective where the pool's and the window's are. */
#include <stdio.h>

#include "bench/nccl_bench.h"

static const size_t kBufBytes = (size_t)64 << 20; /* one send and one recv buffer per side and kind */
/* Both buffers and slack; the same on every rank, as the collective pool creation wants. */
static const size_t kPoolBytes = ((size_t)2 * 64 + 4) << 20;
static const unsigned kOneFloat = 0x3f800000u; /* 1.0f */

/* Whether this NCCL has the raw side's calls for `kind`; if not, `note` says what it lacks. */
static bool raw_kind_available(int kind, char* note, size_t note_size) {
  const char* missing = NULL;
  if (kind == CGC_NCCL_MEMORY_PLAIN) return true;
  if (raw_nccl.ncclMemAlloc == NULL) missing = "ncclMemAlloc";
  else if (raw_nccl.ncclMemFree == NULL) missing = "ncclMemFree";
  else if (kind == CGC_NCCL_MEMORY_REGISTERED && raw_nccl.ncclCommRegister == NULL) missing = "ncclCommRegister";
  else if (kind == CGC_NCCL_MEMORY_REGISTERED && raw_nccl.ncclCommDeregister == NULL) missing = "ncclCommDeregister";
  else if (kind == CGC_NCCL_MEMORY_SYMMETRIC && raw_nccl.ncclCommWindowRegister == NULL)
    missing = "ncclCommWindowRegister";
  else if (kind == CGC_NCCL_MEMORY_SYMMETRIC && raw_nccl.ncclCommWindowDeregister == NULL)
    missing = "ncclCommWindowDeregister";
  if (missing != NULL)
    snprintf(note, note_size, "this NCCL has no %s (registration needs NCCL >= 2.19, symmetric windows >= 2.27): "
             "no raw %s side", missing, kKindName[kind]);
  return missing == NULL;
}

/* Both sides' buffers of `kind`, send filled with 1.0f. */
void setup_kind(rank_t* r, int kind) {
  cgc_nccl_memory_t got = CGC_NCCL_MEMORY_PLAIN;
  if (kind == CGC_NCCL_MEMORY_PLAIN) {
    CGC(cgc_malloc(r->ctx, kBufBytes, r->stream, &r->send));
    CGC(cgc_malloc(r->ctx, kBufBytes, r->stream, &r->recv));
  } else {
    /* Collective, with the same capacity and kind on every rank; both blocks are then at the same
     * offsets everywhere, as symmetric kernels need. */
    CGC(cgc_nccl_pool_create(r->comm, kPoolBytes, (cgc_nccl_memory_t)kind, &r->pool, &got));
    CGC(cgc_pool_malloc(r->pool, kBufBytes, r->stream, &r->send));
    CGC(cgc_pool_malloc(r->pool, kBufBytes, r->stream, &r->recv));
  }
  CU(cuMemsetD32Async((CUdeviceptr)(uintptr_t)r->send, kOneFloat, kBufBytes / 4, r->stream_native));
  CGC(cgc_stream_synchronize(r->stream));

  char note[sizeof sh->kind[0].raw_note] = "";
  r->raw_on = raw_kind_available(kind, note, sizeof note);
  if (kind == CGC_NCCL_MEMORY_PLAIN) {
    CU(cuMemAlloc(&r->raw_plain[0], kBufBytes));
    CU(cuMemAlloc(&r->raw_plain[1], kBufBytes));
    r->raw_send = (void*)(uintptr_t)r->raw_plain[0];
    r->raw_recv = (void*)(uintptr_t)r->raw_plain[1];
  } else if (r->raw_on) {
    /* One allocation and one registration for both buffers, as cgc's pool has. */
    NCCL(ncclMemAlloc(&r->raw_base, 2 * kBufBytes));
    if (kind == CGC_NCCL_MEMORY_REGISTERED)
      NCCL(ncclCommRegister(r->raw_comm, r->raw_base, 2 * kBufBytes, &r->raw_handle));
    else
      NCCL(ncclCommWindowRegister(r->raw_comm, r->raw_base, 2 * kBufBytes, &r->raw_window, kNcclWinCollSymmetric));
    r->raw_send = r->raw_base;
    r->raw_recv = (char*)r->raw_base + kBufBytes;
  }
  if (r->raw_on) {
    CU(cuMemsetD32Async((CUdeviceptr)(uintptr_t)r->raw_send, kOneFloat, kBufBytes / 4, r->raw_stream));
    CU(cuStreamSynchronize(r->raw_stream));
  }
  if (r->rank == 0) {
    kind_result_t* kr = &sh->kind[kind];
    kr->measured = true;
    kr->raw = r->raw_on;
    kr->cgc_got = got;
    snprintf(kr->raw_note, sizeof kr->raw_note, "%s", note);
  }
}

/* Frees what setup_kind made, blocks before their pool (whose release is collective, as is the
 * raw window's deregistration: every rank gets here in the same order). */
void teardown_kind(rank_t* r, int kind) {
  CU(cuStreamSynchronize(r->raw_stream));
  CGC(cgc_free(r->send));
  CGC(cgc_free(r->recv));
  CGC(cgc_stream_synchronize(r->stream));
  if (r->pool != NULL) CGC(cgc_pool_release(r->pool));
  r->pool = NULL;
  r->send = r->recv = NULL;
  if (kind == CGC_NCCL_MEMORY_PLAIN) {
    CU(cuMemFree(r->raw_plain[0]));
    CU(cuMemFree(r->raw_plain[1]));
  } else if (r->raw_on) {
    if (kind == CGC_NCCL_MEMORY_REGISTERED) NCCL(ncclCommDeregister(r->raw_comm, r->raw_handle));
    else NCCL(ncclCommWindowDeregister(r->raw_comm, r->raw_window));
    NCCL(ncclMemFree(r->raw_base));
  }
  r->raw_send = r->raw_recv = r->raw_base = NULL;
  barrier();
}
