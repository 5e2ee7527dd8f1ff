/* What a stream handle means on the calling thread: the CUstream to pass, its key, and whether
 * it is capturing.
 *
 * The allocator keys cached blocks by the driver's stream id (cuStreamGetId), not by the
 * CUstream's address: a destroyed stream's address comes back for the next stream created,
 * which must not inherit blocks that the old stream's work may still use; an id is never
 * reused. The per-thread default stream is a different stream on every thread, with its own
 * id. Asking the driver for the id of a capturing stream invalidates the capture (measured on
 * driver 580), so an id is asked only after the stream was seen not capturing, and remembered:
 * in the handle for ordinary streams, per thread and device for the per-thread stream, per
 * device for the legacy stream. */
#include "src/internal.h"

enum { kMaxDevices = 64 };
/* This thread's per-thread default stream id on each device (0: not asked yet). */
static _Thread_local uint64_t per_thread_ids[kMaxDevices];

static bool is_legacy(CUstream cu) { return cu == NULL || cu == CU_STREAM_LEGACY; }

cgc_status_t cgc__stream_enter(cgc_stream_t s, cgc__ctx_scope_t* scope, const char* func) {
  scope->pushed = false;
  return s->special ? cgc__ctx_enter(s->dev, scope, func) : CGC_SUCCESS;
}

/* The legacy stream's id (context current). It never captures, so it may always be asked. */
static cgc_status_t legacy_key(struct cgc__device* dev, uint64_t* key, const char* func) {
  uint64_t id = atomic_load_explicit(&dev->legacy_stream_id, memory_order_relaxed);
  if (id == 0) {
    unsigned long long got = 0;
    CGC_TRY(CGC_CU(func, cuStreamGetId(CU_STREAM_LEGACY, &got)));
    id = got;
    atomic_store_explicit(&dev->legacy_stream_id, id, memory_order_relaxed);
  }
  *key = id;
  return CGC_SUCCESS;
}

/* Capture state of `cu` into `out`, then its key: `*cached` when known, else the driver's id
 * when it is not capturing (remembered in *cached), else its address. Context current. */
static cgc_status_t resolve_ordinary(CUstream cu, bool ask_capture, atomic_uint_fast64_t* cached,
                                     uint64_t* per_thread_cache, cgc__stream_ref_t* out, const char* func) {
  out->cu = cu;
  uint64_t key = cached ? atomic_load_explicit(cached, memory_order_relaxed) : *per_thread_cache;
  if (ask_capture || key == 0) {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t id = 0;
    CGC_TRY(CGC_CU(func, cuStreamGetCaptureInfo(cu, &status, &id, NULL, NULL, NULL)));
    out->capturing = status != CU_STREAM_CAPTURE_STATUS_NONE;
    out->invalidated = status == CU_STREAM_CAPTURE_STATUS_INVALIDATED;
    out->capture_id = out->capturing ? id : 0;
  }
  if (key == 0 && !out->capturing) {
    unsigned long long got = 0;
    CGC_TRY(CGC_CU(func, cuStreamGetId(cu, &got)));
    key = got;
    if (cached != NULL)
      atomic_store_explicit(cached, key, memory_order_relaxed);
    else
      *per_thread_cache = key;
  }
  out->key = key != 0 ? key : CGC__KEY_OF_ADDRESS(cu);
  return CGC_SUCCESS;
}

static cgc_status_t resolve(struct cgc__device* dev, CUstream cu, cgc__stream_kind_t kind, atomic_uint_fast64_t* cached,
                            bool ask_capture, cgc__stream_ref_t* out, const char* func) {
  *out = (cgc__stream_ref_t){0};
  if (__builtin_expect(cgc__host_function_depth > 0, 0)) return cgc__refuse_in_host_function(func);
  if (kind == CGC__STREAM_OWNED || kind == CGC__STREAM_BORROWED)
    return resolve_ordinary(cu, ask_capture, cached, NULL, out, func);
  /* The legacy and per-thread streams resolve through the current context. */
  out->special = true;
  cgc__ctx_scope_t scope;
  CGC_TRY(cgc__ctx_enter(dev, &scope, func));
  cgc_status_t st;
  if (kind == CGC__STREAM_LEGACY) {
    out->cu = NULL;
    st = legacy_key(dev, &out->key, func);
  } else {
    st = resolve_ordinary(CU_STREAM_PER_THREAD, ask_capture, NULL, &per_thread_ids[dev->ordinal], out, func);
  }
  cgc__ctx_leave(&scope);
  return st;
}

cgc_status_t cgc__stream_resolve(cgc_stream_t s, bool ask_capture, cgc__stream_ref_t* out, const char* func) {
  return resolve(s->dev, s->cu, s->kind, &s->id, ask_capture, out, func);
}

cgc_status_t cgc__stream_resolve_native(struct cgc__device* dev, CUstream cu, cgc__stream_ref_t* out,
                                        const char* func) {
  if (is_legacy(cu)) return resolve(dev, NULL, CGC__STREAM_LEGACY, NULL, true, out, func);
  if (cu == CU_STREAM_PER_THREAD) return resolve(dev, cu, CGC__STREAM_PER_THREAD, NULL, true, out, func);
  /* A native stream has no handle to remember its id in: ask every time (after the capture
   * check, so that a capturing stream is never asked). */
  atomic_uint_fast64_t none = 0;
  return resolve(dev, cu, CGC__STREAM_BORROWED, &none, true, out, func);
}
