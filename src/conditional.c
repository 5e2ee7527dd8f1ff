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

enum { kMaxDevices = 64 };
/* The condition kernel per device, loaded once under condition_lock (taken alone; the load
 * waits for nothing on the GPU). */
static pthread_mutex_t condition_lock = PTHREAD_MUTEX_INITIALIZER;
static CUfunction condition_kernels[kMaxDevices];

struct cgc__body {
  cgc_conditional_kind_t kind;
  CUgraphConditionalHandle handle;
  const uint32_t* condition;
  uint64_t body_id; /* the driver's id of the body capture */
};

static cgc_status_t condition_kernel(struct cgc__device* dev, CUfunction* out, const char* func) {
  cgc_status_t st = CGC_SUCCESS;
  pthread_mutex_lock(&condition_lock);
  if (condition_kernels[dev->ordinal] == NULL) {
    CUmodule module = NULL;
    CUstreamCaptureMode previous = cgc__relaxed_begin(); /* loading allocates: never break a capture */
    st = cgc__cu_fail(cgc__drv.cuModuleLoadData(&module, cgc__conditional_fatbin), func, "cuModuleLoadData");
    if (st == CGC_SUCCESS)
      st = cgc__cu_fail(cgc__drv.cuModuleGetFunction(&condition_kernels[dev->ordinal], module, "cgc_set_condition"),
                        func, "cuModuleGetFunction");
    cgc__relaxed_end(previous);
  }
  *out = condition_kernels[dev->ordinal];
  pthread_mutex_unlock(&condition_lock);
  return st;
}

/* Adds the condition kernel after `deps` to `graph`; *node is it. */
static cgc_status_t add_condition_node(CUfunction kernel, CUgraph graph, const CUgraphNode* deps, size_t n_deps,
                                       struct cgc__body* b, CUgraphNode* node, const char* func) {
  void* args[] = {&b->handle, (void*)&b->condition};
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
  uint64_t parent = 0;
  st = cgc__enqueue_capture(&ref, "a conditional node", &parent, __func__);
  if (st != CGC_SUCCESS) return st;

  struct cgc__body* b = calloc(1, sizeof *b);
  if (b == NULL) return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, __func__, "out of host memory");
  b->kind = kind;
  b->condition = condition;
  cgc_stream_t lent = NULL;
  bool body_begun = false, opened = false;
  cgc__ctx_scope_t scope = {false};
  st = cgc__ctx_enter(stream->dev, &scope, __func__);
  CUfunction kernel = NULL;
  if (st == CGC_SUCCESS) st = condition_kernel(stream->dev, &kernel, __func__);
  /* Where the capture stands: its graph and the nodes the next work depends on. */
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  CUgraph graph = NULL;
  const CUgraphNode* deps = NULL;
  size_t n_deps = 0;
  if (st == CGC_SUCCESS) st = CGC_CU(cuStreamGetCaptureInfo(ref.cu, &status, &id, &graph, &deps, &n_deps));
  if (st == CGC_SUCCESS)
    st = CGC_CU(cuGraphConditionalHandleCreate(&b->handle, graph, stream->dev->cu, 0, 0));
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
  /* The body is captured on a stream of cgc's; Relaxed, as the body's capture checks nothing the
   * parent capture would not. */
  if (st == CGC_SUCCESS) st = cgc__stream_create(stream->dev, CGC_STREAM_NON_BLOCKING, 0, &lent, __func__);
  if (st == CGC_SUCCESS) {
    st = CGC_CU(cuStreamBeginCaptureToGraph(lent->cu, body_graph, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_RELAXED));
    body_begun = st == CGC_SUCCESS;
  }
  if (st == CGC_SUCCESS) {
    cuuint64_t body_id = 0;
    st = CGC_CU(cuStreamGetCaptureInfo(lent->cu, &status, &body_id, NULL, NULL, NULL));
    b->body_id = body_id;
  }
  if (st == CGC_SUCCESS) {
    st = cgc__registry_open_body(parent, b->body_id, __func__);
    opened = st == CGC_SUCCESS;
  }
  cgc__ctx_leave(&scope);
  if (st != CGC_SUCCESS) {
    /* Nothing is left capturing; the parent capture already has the node (an empty body). */
    if (body_begun) {
      CUgraph discarded = NULL;
      cgc__drv.cuStreamEndCapture(lent->cu, &discarded);
    }
    if (opened) cgc__registry_close_body(b->body_id);
    if (lent != NULL) cgc_stream_destroy(lent);
    free(b);
    return st;
  }
  lent->body = b;
  *body = lent;
  return CGC_SUCCESS;
}

cgc_status_t cgc_capture_conditional_end(cgc_stream_t body) {
  CGC_CHECK_HANDLE(body, CGC_MAGIC_STREAM);
  struct cgc__body* b = body->body;
  if (b == NULL)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, __func__,
                     "stream %p is not the body of a conditional node (cgc_capture_conditional_begin lends those)",
                     (void*)body->cu);
  cgc__ctx_scope_t scope;
  cgc_status_t st = cgc__ctx_enter(body->dev, &scope, __func__);
  if (st != CGC_SUCCESS) return st;
  /* WHILE: the last work of each iteration reads the condition for the next. */
  if (b->kind == CGC_CONDITIONAL_WHILE) {
    CUfunction kernel = NULL;
    st = condition_kernel(body->dev, &kernel, __func__);
    void* args[] = {&b->handle, (void*)&b->condition};
    if (st == CGC_SUCCESS) st = CGC_CU(cuLaunchKernel(kernel, 1, 1, 1, 1, 1, 1, 0, body->cu, args, NULL));
  }
  CUgraph ended = NULL;
  cgc_status_t end_st = CGC_CU(cuStreamEndCapture(body->cu, &ended)); /* the body graph: the node owns it */
  if (st == CGC_SUCCESS) st = end_st;
  cgc__ctx_leave(&scope);
  cgc__registry_close_body(b->body_id);
  body->body = NULL;
  free(b);
  cgc_status_t destroyed = cgc_stream_destroy(body);
  if (st == CGC_SUCCESS) st = destroyed;
  return st;
}
