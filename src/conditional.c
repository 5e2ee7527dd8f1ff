/* Conditional nodes: IF and WHILE inside a capture (CUDA 12.4 and newer drivers).
 *
 * cgc_capture_conditional_begin adds, at the current point of the capture, a kernel of cgc's that
 * reads the caller's condition (device memory) into a conditional handle, then the conditional
 * node after it, and makes the node the stream's capture dependency, so the capture goes on after
 * it. The node's body graph is captured on a stream cgc lends (cuStreamBeginCaptureToGraph); the
 * registry counts that body capture as part of the cgc capture (modules' code is held, nested
 * conditionals find their capture), and the capture cannot end while a body is open. For WHILE,
 * the condition kernel also ends the body, so each iteration decides whether another follows.
 *
 * The condition kernel lives in a fatbin of its own (kernels/conditional.cu), loaded on a device's
 * first conditional node and kept with the device's primary context for the process. */
#include <stdlib.h>

#include "src/internal.h"

extern const unsigned char cgc__conditional_fatbin[];

/* The condition kernel is loaded once per device under condition_lock (taken alone; loading
 * waits for nothing on the GPU) and kept in the device's state. */
static pthread_mutex_t condition_lock = PTHREAD_MUTEX_INITIALIZER;

struct cgc__body {
  cgc_conditional_kind_t kind;
  CUgraphConditionalHandle handle;
  const uint32_t* condition;
  uint64_t body_id;   /* the driver's id of the body capture */
};

static cgc_status_t condition_kernel(struct cgc__device* dev, CUfunction* out, const char* func) {
  *out = atomic_load(&dev->condition_kernel);
  if (*out != NULL) return CGC_SUCCESS;
  cgc_status_t st = CGC_SUCCESS;
  pthread_mutex_lock(&condition_lock);
  *out = atomic_load(&dev->condition_kernel);
  if (*out == NULL) {
    CUmodule module = NULL;
    CUfunction kernel = NULL;
    CUstreamCaptureMode previous = cgc__relaxed_begin(); /* loading allocates: never break a capture */
    st = cgc__cu_fail(cgc__drv.cuModuleLoadData(&module, cgc__conditional_fatbin), func, "cuModuleLoadData");
    if (st == CGC_SUCCESS) {
      st = cgc__cu_fail(cgc__drv.cuModuleGetFunction(&kernel, module, "cgc_set_condition"), func,
                        "cuModuleGetFunction");
      if (st != CGC_SUCCESS) cgc__drv.cuModuleUnload(module);
    }
    cgc__relaxed_end(previous);
    if (st == CGC_SUCCESS) atomic_store(&dev->condition_kernel, kernel);
    *out = kernel;
  }
  pthread_mutex_unlock(&condition_lock);
  return st;
}

/* Adds the condition kernel after `deps` to `graph`; *node is it. */
static cgc_status_t add_condition_node(CUfunction kernel, CUgraph graph, const CUgraphNode* deps, size_t n_deps,
                                       struct cgc__body* b, CUgraphNode* node, const char* func) {
  void* args[] = {&b->handle, (void*)&b->condition}; /* the driver copies the values now */
  CUDA_KERNEL_NODE_PARAMS p = {0};
  p.func = kernel;
  p.gridDimX = p.gridDimY = p.gridDimZ = 1;
  p.blockDimX = p.blockDimY = p.blockDimZ = 1;
  p.kernelParams = args;
  return cgc__cu_fail(cgc__drv.cuGraphAddKernelNode(node, graph, deps, n_deps, &p), func, "cuGraphAddKernelNode");
}

cgc_status_t cgc_capture_conditional_begin(cgc_stream_t stream, cgc_conditional_kind_t kind, const uint32_t* condition,
                                           cgc_stream_t* body) {
  CGC_CHECK_ARG(body != NULL, "body is NULL");
  *body = NULL;
  CGC_CHECK_HANDLE(stream, CGC_MAGIC_STREAM);
  CGC_CHECK_ARG(kind == CGC_CONDITIONAL_IF || kind == CGC_CONDITIONAL_WHILE,
                "kind %d is not CGC_CONDITIONAL_IF or CGC_CONDITIONAL_WHILE", (int)kind);
  CGC_CHECK_ARG(condition != NULL, "condition is NULL");
  if (cgc__drv.cuGraphConditionalHandleCreate == NULL || cgc__drv.cuGraphAddNode == NULL ||
      cgc__drv.cuStreamBeginCaptureToGraph == NULL || cgc__drv.version < 12040)
    return cgc__fail(CGC_ERROR_NOT_SUPPORTED, __func__,
                     "conditional nodes need a driver for CUDA 12.4 or newer (this one is %d.%d)", cgc__drv.version / 1000,
                     (cgc__drv.version % 1000) / 10);
  cgc__stream_ref_t ref;
  cgc_status_t st = stream->kind == CGC__STREAM_LEGACY ? CGC_SUCCESS : cgc__stream_resolve(stream, true, &ref, __func__);
  if (st != CGC_SUCCESS) return st;
  if (stream->kind == CGC__STREAM_LEGACY || !ref.capturing)
    return cgc__fail(CGC_ERROR_INVALID_STATE, __func__,
                     "stream %p is not capturing: a conditional node goes into a capture (cgc_capture_begin first)",
                     (void*)stream->cu);
  uint64_t capture = 0;
  st = cgc__enqueue_capture(&ref, "a conditional node", &capture, __func__);
  if (st != CGC_SUCCESS) return st;
  /* Reserved first: no end of the capture can start while the node is being added. */
  st = cgc__registry_reserve_body(capture, __func__);
  if (st != CGC_SUCCESS) return st;

  /* What can fail without touching the graph comes first: the kernel, the body's stream. */
  struct cgc__body* b = calloc(1, sizeof *b);
  cgc_stream_t lent = NULL;
  bool touched = false, body_begun = false;
  cgc__ctx_scope_t scope = {false};
  if (b == NULL) st = cgc__fail(CGC_ERROR_OUT_OF_MEMORY, __func__, "out of host memory");
  if (st == CGC_SUCCESS) st = cgc__ctx_enter(stream->dev, &scope, __func__);
  CUfunction kernel = NULL;
  if (st == CGC_SUCCESS) st = condition_kernel(stream->dev, &kernel, __func__);
  if (st == CGC_SUCCESS) st = cgc__stream_create(stream->dev, CGC_STREAM_NON_BLOCKING, 0, &lent, __func__);
  /* Where the capture stands: its graph and the nodes the next work depends on. */
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  CUgraph graph = NULL;
  const CUgraphNode* deps = NULL;
  size_t n_deps = 0;
  if (st == CGC_SUCCESS) st = CGC_CU(cuStreamGetCaptureInfo(ref.cu, &status, &id, &graph, &deps, &n_deps));
  if (st == CGC_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_ACTIVE)
    st = cgc__fail(CGC_ERROR_CAPTURE_INVALIDATED, __func__,
                   "the capture of stream %p was invalidated by an earlier call: end it (cgc_capture_end says why)",
                   (void*)ref.cu);
  if (st == CGC_SUCCESS) {
    b->kind = kind;
    b->condition = condition;
    /* From here the graph changes: a failure leaves a node that must not run, so the capture is
     * marked broken and its end discards the graph. The handle's default (0, applied at every
     * launch) keeps a node whose condition kernel never ran from looping. */
    touched = true;
    st = CGC_CU(cuGraphConditionalHandleCreate(&b->handle, graph, stream->dev->cu, 0, CU_GRAPH_COND_ASSIGN_DEFAULT));
  }
  CUgraphNode set = NULL, node = NULL;
  if (st == CGC_SUCCESS) st = add_condition_node(kernel, graph, deps, n_deps, b, &set, __func__);
  CUgraph body_graph = NULL;
  if (st == CGC_SUCCESS) {
    CUgraphNodeParams params = {0};
    params.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
    params.conditional.handle = b->handle;
    params.conditional.type = kind == CGC_CONDITIONAL_IF ? CU_GRAPH_COND_TYPE_IF : CU_GRAPH_COND_TYPE_WHILE;
    params.conditional.size = 1;
    params.conditional.ctx = stream->dev->cu;
    st = CGC_CU(cuGraphAddNode(&node, graph, &set, NULL, 1, &params));
    if (st == CGC_SUCCESS) body_graph = params.conditional.phGraph_out[0];
  }
  /* The capture goes on after the conditional node. */
  if (st == CGC_SUCCESS)
    st = CGC_CU(cuStreamUpdateCaptureDependencies(ref.cu, &node, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES));
  /* The body is captured on the lent stream; Relaxed, as the body's capture checks nothing the
   * capture it belongs to would not. */
  if (st == CGC_SUCCESS) {
    st = CGC_CU(cuStreamBeginCaptureToGraph(lent->cu, body_graph, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_RELAXED));
    body_begun = st == CGC_SUCCESS;
  }
  if (st == CGC_SUCCESS) {
    cuuint64_t body_id = 0;
    st = CGC_CU(cuStreamGetCaptureInfo(lent->cu, &status, &body_id, NULL, NULL, NULL));
    b->body_id = body_id;
  }
  cgc__ctx_leave(&scope);
  if (st != CGC_SUCCESS) {
    if (touched) {
      cgc__registry_mark_broken(capture);
      cgc__append("; the capture can no longer be kept: cgc_capture_end will discard it");
    }
    if (body_begun) {
      CUgraph discarded = NULL;
      cgc__drv.cuStreamEndCapture(lent->cu, &discarded); /* the node owns the body graph */
    }
    cgc__registry_unreserve_body(capture);
    if (lent != NULL) cgc_stream_destroy(lent);
    free(b);
    return st;
  }
  atomic_store(&lent->body, b);
  cgc__registry_open_body(capture, b->body_id, lent);
  *body = lent;
  return CGC_SUCCESS;
}

cgc_status_t cgc_capture_conditional_end(cgc_stream_t body) {
  CGC_CHECK_HANDLE(body, CGC_MAGIC_STREAM);
  /* One end per body: whoever takes the record ends it. */
  struct cgc__body* b = atomic_exchange(&body->body, NULL);
  if (b == NULL)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, __func__,
                     "stream %p is not the body of a conditional node (cgc_capture_conditional_begin lends those), or "
                     "another call ended it",
                     (void*)body->cu);
  cgc__ctx_scope_t scope;
  cgc_status_t st = cgc__ctx_enter(body->dev, &scope, __func__);
  bool keep_capturing = false;
  if (st == CGC_SUCCESS) {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t id = 0;
    st = CGC_CU(cuStreamGetCaptureInfo(body->cu, &status, &id, NULL, NULL, NULL));
    if (st == CGC_SUCCESS && status == CU_STREAM_CAPTURE_STATUS_INVALIDATED) {
      /* Ending an invalidated body capture is reported to free the body graph its node still owns,
       * after which ending the capture it belongs to crashes (a driver bug, not reproduced here):
       * the body's capture is left as it is, its stream with it (one stream lost), and the
       * capture it belongs to is discarded at its end. */
      keep_capturing = true;
      st = cgc__fail(CGC_ERROR_CAPTURE_INVALIDATED, __func__,
                     "the body's capture was invalidated by an earlier call; the capture it belongs to will be "
                     "discarded at its end");
    }
  }
  /* WHILE: the last work of each iteration reads the condition for the next. */
  if (st == CGC_SUCCESS && b->kind == CGC_CONDITIONAL_WHILE) {
    CUfunction kernel = NULL;
    st = condition_kernel(body->dev, &kernel, __func__);
    void* args[] = {&b->handle, (void*)&b->condition};
    if (st == CGC_SUCCESS) st = CGC_CU(cuLaunchKernel(kernel, 1, 1, 1, 1, 1, 1, 0, body->cu, args, NULL));
  }
  if (st != CGC_SUCCESS) cgc__registry_mark_broken(b->body_id);
  if (!keep_capturing) {
    CUgraph ended = NULL;
    cgc_status_t end_st = CGC_CU(cuStreamEndCapture(body->cu, &ended)); /* the body graph: its node owns it */
    if (st == CGC_SUCCESS) st = end_st;
  }
  cgc__ctx_leave(&scope);
  cgc__registry_close_body(b->body_id);
  free(b);
  if (!keep_capturing) {
    cgc_status_t destroyed = cgc_stream_destroy(body);
    if (destroyed != CGC_SUCCESS) cgc__retire(body); /* the handle goes all the same, as promised */
  } else {
    cgc__retire(body); /* its stream stays capturing, never used again */
  }
  return st;
}
