/* What every call that enqueues work on a stream (a copy, a set, a host function, a memory
 * operation, a kernel) does before its driver call, so that each of them refuses the same
 * things with the same words. The common case (no cgc capture under way) costs two loads and
 * cuCtxGetCurrent: no lock, no capture query. Inside captures each call asks only what it needs
 * (a set or a memory operation nothing; a copy whether its host memory is page-locked; a host
 * function or a kernel which capture holds its data or code): a capture through cgc costs
 * about what it costs through the driver (cgc_bench scenario 7). */
#include "src/internal.h"

cgc_status_t cgc__enqueue_begin(cgc_stream_t s, cgc__ask_t ask, cgc__stream_ref_t* ref, cgc__ctx_scope_t* scope,
                                const char* func) {
  scope->pushed = false;
  bool asked = ask == CGC__ASK_ALWAYS || (ask == CGC__ASK_WHILE_CAPTURES && cgc__captures_underway() > 0);
  if (asked && s->kind != CGC__STREAM_LEGACY) {
    /* Whether this stream takes part in a capture decides what the call may do (a pageable
     * copy, a host node, which capture holds a kernel's code). */
    CGC_TRY(cgc__stream_resolve(s, true, ref, func));
  } else {
    *ref = (cgc__stream_ref_t){.cu = s->cu, .special = s->special}; /* (cgc__ctx_enter refuses host functions) */
  }
  /* Modules, and the special streams, belong to the device's context: make it current. */
  return cgc__ctx_enter(s->dev, scope, func);
}

cgc_status_t cgc__enqueue_capture(const cgc__stream_ref_t* ref, const char* what, uint64_t* id, const char* func) {
  *id = 0;
  if (!ref->capturing) return CGC_SUCCESS;
  if (ref->invalidated) return cgc__refuse_invalidated(ref, what, func);
  if (!cgc__registry_is_cgc_capture(ref->capture_id))
    return cgc__fail(CGC_ERROR_CAPTURE_UNSUPPORTED, func,
                     "stream %p captures (capture id %llu) under a capture cgc did not begin: %s needs a capture "
                     "begun with cgc_capture_begin, whose graph holds it",
                     (void*)ref->cu, (unsigned long long)ref->capture_id, what);
  *id = ref->capture_id;
  return CGC_SUCCESS;
}

cgc_status_t cgc__refuse_in_body(cgc_stream_t s, const char* what, const char* func) {
  return cgc__fail(CGC_ERROR_CAPTURE_UNSUPPORTED, func,
                   "stream %p is the body of a conditional node, which holds kernels, copies, sets, nested "
                   "conditionals, allocations and generator draws only (SEMANTICS 29): %s goes before or after "
                   "the conditional node",
                   (void*)s->cu, what);
}
