/* Host functions on a stream, eager or captured as host nodes.
 *
 * Each call wraps the caller's function in a small record that also carries the release
 * callback for its user data. Eagerly the record goes to cuStreamAddCallback, whose callback the
 * driver runs once even when the context has failed (it then skips the caller's function but
 * still releases: cuLaunchHostFunc would run nothing then, and the data would leak), and which
 * the driver refuses inside a capture (so an eager record can never become a node that frees
 * itself at its first replay). Captured, cuLaunchHostFunc makes a host node that calls the
 * record at every replay, so the record belongs to the capture and then the graph, through the
 * same use table as generators and communicators: the graph releases it at reset, after its
 * last replay is over (release_after_replays), and a failed capture releases it when it ends.
 * Whether the stream captures is always asked (a capture of the driver's alone included). While
 * the caller's function (or an eager release) runs, cgc__host_function_depth makes every cgc call
 * on that thread refuse instead of reaching a driver that forbids it there. */
#include <stdlib.h>

#include "src/internal.h"

struct host_call {
  cgc_host_fn fn;
  void* user;
  cgc_host_fn release; /* may be NULL */
  atomic_int refs;     /* of the captures and graphs holding a host node of it */
  /* Calls made so far, counted by the driver thread after each call (release) and read by the
   * thread that releases the record (acquire): the C11 edge from the last call to the free. The
   * driver orders them too (reset waits for the graph's completion event, recorded after the
   * host node), but in its own code, where the language's memory model and ThreadSanitizer do
   * not see it. */
  atomic_uint_fast64_t calls;
};

static void call_release(struct host_call* call) {
  (void)atomic_load_explicit(&call->calls, memory_order_acquire); /* after every call's end */
  if (call->release != NULL) call->release(call->user);
  free(call);
}

/* The eager call: once (not when earlier work failed), then nothing can call fn again. */
static void CUDA_CB run_once(CUstream stream, CUresult status, void* data) {
  (void)stream;
  struct host_call* call = data;
  (void)atomic_load_explicit(&call->refs, memory_order_acquire); /* sees the record as made */
  cgc__host_function_depth++;
  if (status == CUDA_SUCCESS) call->fn(call->user);
  if (call->release != NULL) call->release(call->user);
  cgc__host_function_depth--;
  free(call);
}

/* A host node's call, at every replay. */
static void CUDA_CB run_node(void* data) {
  struct host_call* call = data;
  (void)atomic_load_explicit(&call->refs, memory_order_acquire); /* sees the record as made */
  cgc__host_function_depth++;
  call->fn(call->user);
  cgc__host_function_depth--;
  atomic_fetch_add_explicit(&call->calls, 1, memory_order_release);
}

static void call_retain(void* object) {
  atomic_fetch_add_explicit(&((struct host_call*)object)->refs, 1, memory_order_relaxed);
}

static void call_drop(void* object) {
  struct host_call* call = object;
  if (atomic_fetch_sub_explicit(&call->refs, 1, memory_order_acq_rel) == 1) call_release(call);
}

static uint64_t call_capture_done(void* object, bool kept) {
  (void)object;
  (void)kept;
  return 0;
}

static const cgc__use_ops_t host_call_use_ops = {
    .kind = "host function",
    .retain = call_retain,
    .release = call_drop,
    .capture_done = call_capture_done,
    .before_launch = NULL,
    .release_after_replays = true, /* a replay still running may call it */
};

cgc_status_t cgc_launch_host_func(cgc_stream_t stream, cgc_host_fn fn, void* user, cgc_host_fn release) {
  struct host_call* call = NULL;
  cgc__ctx_scope_t scope = {false};
  cgc_status_t st;
  CGC_TRY_GOTO(st, cgc__check_handle(stream, CGC_MAGIC_STREAM, __func__, "stream"), fail);
  if (fn == NULL) {
    st = cgc__fail(CGC_ERROR_INVALID_ARGUMENT, __func__, "fn is NULL");
    goto fail;
  }
  if (stream->body != NULL) {
    st = cgc__refuse_in_body(stream, "a host function", __func__);
    goto fail;
  }
  call = calloc(1, sizeof *call);
  if (call == NULL) {
    st = cgc__fail(CGC_ERROR_OUT_OF_MEMORY, __func__, "out of host memory");
    goto fail;
  }
  *call = (struct host_call){.fn = fn, .user = user, .release = release};
  atomic_init(&call->calls, 0);
  atomic_store_explicit(&call->refs, 1, memory_order_release); /* publishes the record to the driver thread */
  cgc__stream_ref_t ref;
  uint64_t capture = 0;
  CGC_TRY_GOTO(st, cgc__enqueue_begin(stream, CGC__ASK_ALWAYS, &ref, &scope, __func__), fail);
  CGC_TRY_GOTO(st, cgc__enqueue_capture(&ref, "a host node", &capture, __func__), fail);
  if (capture != 0) {
    /* The capture holds the record before the node exists; our reference goes at the end. */
    CGC_TRY_GOTO(st, cgc__registry_add_new_use(capture, &host_call_use_ops, call, __func__), fail);
    cgc_status_t launched = CGC_CU(__func__, cuLaunchHostFunc(ref.cu, run_node, call));
    call_drop(call); /* the capture's reference remains: released when it ends or its graph goes */
    cgc__ctx_leave(&scope);
    return launched;
  }
  CGC_TRY_GOTO(st, CGC_CU(__func__, cuStreamAddCallback(ref.cu, run_once, call, 0)), fail);
  cgc__ctx_leave(&scope);
  return CGC_SUCCESS; /* run_once frees it */

fail:
  cgc__ctx_leave(&scope); /* a scope never entered is left alone */
  /* The contract: release runs exactly once, also when the call fails (not inside a host
   * function, where it would be another forbidden call's victim: nothing was queued). With the
   * record made, dropping it releases. */
  if (call != NULL)
    call_drop(call);
  else if (release != NULL)
    release(user);
  return st;
}
