/* Conditional nodes: IF, IF/ELSE, WHILE and SWITCH inside a capture (CUDA 12.4 and newer drivers;
 * IF/ELSE and SWITCH 12.8).
 *
 * cgc_capture_conditional_begin_bodies adds, at the current point of the capture, a kernel of
 * cgc's that reads the caller's condition (device memory) into a conditional handle, then the
 * conditional node after it with its bodies, and makes the node the stream's capture dependency,
 * so the capture goes on after it. Each body graph is captured on a stream cgc lends
 * (cuStreamBeginCaptureToGraph); the registry counts those body captures as part of the cgc
 * capture (modules' code is held, nested conditionals and allocations find their capture), and
 * the capture cannot end while a body is open. For WHILE, the condition kernel also ends the
 * body (unless the caller's kernels set the condition themselves), so each iteration decides
 * whether another follows.
 *
 * Memory allocated in a body comes from the capture's pool under the body stream's key, so only
 * the body reuses it while the body is open; at the body's end it passes to the stream the node
 * was added on, which the whole node precedes (pool.c's cgc__alloc_body_ended). Generator draws in a WHILE body read
 * per-loop offsets that cgc's kernels advance on the device at each iteration (rng.c); their
 * device memory is allocated here on a loop's first draw.
 *
 * The condition kernel lives in a fatbin of its own (kernels/conditional.cu), loaded on a device's
 * first conditional node and kept with the device's primary context for the process. */
#include <stdlib.h>

#include "src/internal.h"

extern const unsigned char cgc__conditional_fatbin[];

/* The condition kernel is loaded once per device under condition_lock (taken alone; loading
 * waits for nothing on the GPU) and kept in the device's state. */
static pthread_mutex_t condition_lock = PTHREAD_MUTEX_INITIALIZER;

/* Guards every body's loop_states (its allocation and the set node's new parameters). */
static pthread_mutex_t loop_states_lock = PTHREAD_MUTEX_INITIALIZER;

/* The most bodies one SWITCH node may have here: each is a lent stream while it is captured. */
enum { kMaxBodies = CGC_CONDITIONAL_MAX_BODIES };
/* What the kernel before a WHILE node zeroes: CGC__LOOP_GENERATORS states of four 64-bit words. */
enum { kLoopStateWords = CGC__LOOP_GENERATORS * 4 };

static cgc_status_t condition_kernel(struct cgc__device* dev, CUfunction* out, const char* func) {
  *out = atomic_load(&dev->condition_kernel);
  if (*out != NULL) return CGC_SUCCESS;
  cgc_status_t st = CGC_SUCCESS;
  cgc__mutex_lock(&condition_lock, CGC__LOCK_CONDITION);
  *out = atomic_load(&dev->condition_kernel);
  if (*out == NULL) {
    CUmodule module = NULL;
    CUfunction kernel = NULL;
    /* Loading allocates: never break a capture. */
    CGC_RELAXED({
      st = CGC_CU(func, cuModuleLoadData(&module, cgc__conditional_fatbin));
      if (st == CGC_SUCCESS) {
        st = CGC_CU(func, cuModuleGetFunction(&kernel, module, "cgc_set_condition"));
        if (st != CGC_SUCCESS) CGC_DRV(cuModuleUnload)(module);
      }
    });
    if (st == CGC_SUCCESS) atomic_store(&dev->condition_kernel, kernel);
    *out = kernel;
  }
  cgc__mutex_unlock(&condition_lock, CGC__LOCK_CONDITION);
  return st;
}

/* The condition kernel's parameters (kernels/conditional.cu), and the node that runs it. */
typedef struct set_args {
  CUgraphConditionalHandle handle;
  const uint32_t* condition;
  unsigned as_index;        /* SWITCH: the value itself; otherwise nonzero -> 1 */
  unsigned long long* zero; /* words zeroed before the node runs (a loop's generator states) */
  unsigned n_zero;
} set_args_t;

static CUDA_KERNEL_NODE_PARAMS set_params(CUfunction kernel, set_args_t* a, void** args) {
  args[0] = &a->handle;
  args[1] = (void*)&a->condition;
  args[2] = &a->as_index;
  args[3] = (void*)&a->zero;
  args[4] = &a->n_zero;
  CUDA_KERNEL_NODE_PARAMS p = {0};
  p.func = kernel;
  p.gridDimX = p.gridDimY = p.gridDimZ = 1;
  p.blockDimX = p.blockDimY = p.blockDimZ = 1;
  p.kernelParams = args; /* the driver copies the values when the node is added or set */
  return p;
}

static set_args_t set_args_of(const struct cgc__body* b, CUdeviceptr zero, unsigned n_zero) {
  return (set_args_t){b->handle, b->condition, b->kind == CGC_CONDITIONAL_SWITCH,
                      (unsigned long long*)(uintptr_t)zero, n_zero};
}

/* ---- a loop's generator states ---- */

struct loop_states {
  struct cgc__device* dev;
  CUdeviceptr ptr;
  atomic_int refs;
};

static void loop_states_retain(void* object) { atomic_fetch_add(&((struct loop_states*)object)->refs, 1); }

static void loop_states_release(void* object) {
  struct loop_states* s = object;
  if (atomic_fetch_sub(&s->refs, 1) != 1) return;
  cgc__ctx_scope_t scope;
  if (cgc__ctx_enter(s->dev, &scope, "cgc_graph_reset") == CGC_SUCCESS) {
    cgc__relaxed_mem_free(s->ptr);
    cgc__ctx_leave(&scope);
  }
  free(s);
}

static uint64_t loop_states_capture_done(void* object, bool kept) {
  (void)object;
  (void)kept;
  return 0;
}

static const cgc__use_ops_t loop_states_use_ops = {
    .kind = "loop's generator states",
    .retain = loop_states_retain,
    .release = loop_states_release,
    .capture_done = loop_states_capture_done,
    .before_launch = NULL,
    .release_after_replays = true, /* a replay still running reads and writes them */
};

cgc_status_t cgc__body_loop_states(struct cgc__body* loop, CUdeviceptr* out, const char* func) {
  cgc__mutex_lock(&loop_states_lock, CGC__LOCK_LOOP_STATES);
  *out = loop->loop_states;
  cgc__mutex_unlock(&loop_states_lock, CGC__LOCK_LOOP_STATES);
  if (*out != 0) return CGC_SUCCESS;
  /* Allocated without the lock (cuMemAlloc may wait), installed under it. */
  struct loop_states* s = calloc(1, sizeof *s);
  if (s == NULL) return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
  cgc__ctx_scope_t scope;
  bool installed = false;
  cgc_status_t st;
  CGC_TRY_GOTO(st, cgc__ctx_enter(loop->dev, &scope, func), out);
  s->dev = loop->dev;
  CGC_TRY_GOTO(
      st, cgc__cu_fail(cgc__relaxed_mem_alloc(&s->ptr, kLoopStateWords * sizeof(uint64_t)), func, "cuMemAlloc"), out);
  /* Installed under the lock (nothing jumps out from under it). */
  cgc__mutex_lock(&loop_states_lock, CGC__LOCK_LOOP_STATES);
  if (loop->loop_states != 0) {
    *out = loop->loop_states; /* another thread's draw got there first */
  } else {
    /* Held by the capture first (then its graph frees it after the last replay), so that no
     * node can point at memory already freed. Then the kernel before the node is told to zero
     * the states before every run of the node; if that fails the loop would start from stale
     * states, so the capture is marked broken. */
    st = cgc__registry_add_new_use(loop->capture_id, &loop_states_use_ops, s, func);
    if (st == CGC_SUCCESS) {
      installed = true;
      set_args_t a = set_args_of(loop, s->ptr, kLoopStateWords);
      void* args[5];
      CUDA_KERNEL_NODE_PARAMS p = set_params(loop->set_kernel, &a, args);
      st = CGC_CU(func, cuGraphKernelNodeSetParams(loop->set_node, &p));
      if (st == CGC_SUCCESS) {
        loop->loop_states = *out = s->ptr;
      } else {
        cgc__registry_mark_broken(loop->capture_id);
        cgc__append("; the capture can no longer be kept: cgc_capture_end will discard it");
      }
    }
  }
  cgc__mutex_unlock(&loop_states_lock, CGC__LOCK_LOOP_STATES);
out: /* a scope never entered is left alone */
  if (!installed && s->ptr != 0) cgc__relaxed_mem_free(s->ptr);
  cgc__ctx_leave(&scope);
  if (!installed) free(s); /* installed: the capture's use frees it */
  return st;
}

/* ---- begin ---- */

static cgc_status_t check_kind(cgc_conditional_kind_t kind, unsigned flags, size_t n_bodies, const char* func) {
  bool newer = false; /* needs CUDA 12.8: IF/ELSE, SWITCH */
  switch (kind) {
    case CGC_CONDITIONAL_IF:
      if (n_bodies != 1 && n_bodies != 2)
        return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, "n_bodies is %zu: an IF node has 1 body, or 2 (IF/ELSE)",
                         n_bodies);
      newer = n_bodies == 2;
      break;
    case CGC_CONDITIONAL_WHILE:
      if (n_bodies != 1)
        return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, "n_bodies is %zu: a WHILE node has 1 body", n_bodies);
      break;
    case CGC_CONDITIONAL_SWITCH:
      if (n_bodies < 1 || n_bodies > kMaxBodies)
        return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func,
                         "n_bodies is %zu: a SWITCH node has 1 to %d bodies (CGC_CONDITIONAL_MAX_BODIES)", n_bodies,
                         kMaxBodies);
      newer = true;
      break;
    default:
      return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func,
                       "kind %d is not CGC_CONDITIONAL_IF, CGC_CONDITIONAL_WHILE or CGC_CONDITIONAL_SWITCH", (int)kind);
  }
  if ((flags & ~(unsigned)CGC_CONDITIONAL_BODY_SETS_CONDITION) != 0)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, "flags 0x%x has unknown bits", flags);
  if ((flags & CGC_CONDITIONAL_BODY_SETS_CONDITION) && kind != CGC_CONDITIONAL_WHILE)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func,
                     "CGC_CONDITIONAL_BODY_SETS_CONDITION is for WHILE nodes: an IF or SWITCH body runs once");
  if (cgc__drv.cuGraphConditionalHandleCreate == NULL || cgc__drv.cuGraphAddNode == NULL ||
      cgc__drv.cuStreamBeginCaptureToGraph == NULL || cgc__drv.version < 12040)
    return cgc__fail(CGC_ERROR_NOT_SUPPORTED, func,
                     "conditional nodes need a driver for CUDA 12.4 or newer (this one is %d.%d)",
                     cgc__drv.version / 1000, (cgc__drv.version % 1000) / 10);
  if (newer && cgc__drv.version < 12080)
    return cgc__fail(CGC_ERROR_NOT_SUPPORTED, func, "%s needs a driver for CUDA 12.8 or newer (this one is %d.%d)",
                     kind == CGC_CONDITIONAL_SWITCH ? "a SWITCH node" : "an IF node with an else body",
                     cgc__drv.version / 1000, (cgc__drv.version % 1000) / 10);
  return CGC_SUCCESS;
}

static CUgraphConditionalNodeType driver_kind(cgc_conditional_kind_t kind) {
  _Static_assert((int)CGC_CONDITIONAL_IF == (int)CU_GRAPH_COND_TYPE_IF &&
                     (int)CGC_CONDITIONAL_WHILE == (int)CU_GRAPH_COND_TYPE_WHILE &&
                     (int)CGC_CONDITIONAL_SWITCH == (int)CU_GRAPH_COND_TYPE_SWITCH,
                 "cgc_conditional_kind_t takes the driver's values");
  return (CUgraphConditionalNodeType)kind;
}

/* What a begin made before it could fail: undone in reverse. */
typedef struct begin_state {
  size_t n, reserved, begun;
  struct cgc__body** records;
  cgc_stream_t* lent;
} begin_state_t;

static void undo_begin(begin_state_t* s, uint64_t capture) {
  for (size_t i = 0; i < s->begun; i++) {
    CUgraph discarded = NULL;
    CGC_DRV(cuStreamEndCapture)(s->lent[i]->cu, &discarded); /* the node owns the body graph */
  }
  for (size_t i = 0; i < s->reserved; i++) cgc__registry_unreserve_body(capture);
  for (size_t i = 0; i < s->n; i++) {
    if (s->lent != NULL && s->lent[i] != NULL) cgc_stream_destroy(s->lent[i]);
    if (s->records != NULL) free(s->records[i]);
  }
}

static cgc_status_t begin(cgc_stream_t stream, cgc_conditional_kind_t kind, const uint32_t* condition, unsigned flags,
                          size_t n_bodies, cgc_stream_t* bodies, uint64_t* handle, const char* func) {
  if (handle != NULL) *handle = 0;
  if (bodies == NULL)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, n_bodies == 1 ? "body is NULL" : "bodies is NULL");
  for (size_t i = 0; i < n_bodies && i < kMaxBodies; i++) bodies[i] = NULL;
  CGC_TRY(cgc__check_handle(stream, CGC_MAGIC_STREAM, func, "stream"));
  CGC_TRY(check_kind(kind, flags, n_bodies, func));
  if (condition == NULL) return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, "condition is NULL");
  cgc__stream_ref_t ref;
  if (stream->kind != CGC__STREAM_LEGACY) CGC_TRY(cgc__stream_resolve(stream, true, &ref, func));
  if (stream->kind == CGC__STREAM_LEGACY || !ref.capturing)
    return cgc__fail(CGC_ERROR_INVALID_STATE, func,
                     "stream %p is not capturing: a conditional node goes into a capture (cgc_capture_begin first)",
                     (void*)stream->cu);
  uint64_t capture = 0, root = 0;
  CGC_TRY(cgc__enqueue_capture(&ref, "a conditional node", &capture, func));
  CGC_TRY(cgc__registry_capture_of(&ref, &root, func));

  /* What `fail` undoes: the reservations, the records and lent streams, the body captures begun,
   * the parent's count, and (once the graph was touched) the capture, marked broken. */
  struct cgc__body* records[kMaxBodies] = {0};
  cgc_stream_t lent[kMaxBodies] = {0};
  begin_state_t undo = {n_bodies, 0, 0, records, lent};
  bool touched = false;
  cgc__ctx_scope_t scope = {false};
  struct cgc__body* parent = NULL; /* set once it counts these bodies */
  cgc_status_t st = CGC_SUCCESS;
  /* Reserved first: no end of the capture can start while the node is being added. */
  for (; undo.reserved < n_bodies; undo.reserved++) CGC_TRY_GOTO(st, cgc__registry_reserve_body(capture, func), fail);
  /* What can fail without touching the graph comes first: the kernel, the records, the streams. */
  CUfunction kernel = NULL;
  CGC_TRY_GOTO(st, cgc__ctx_enter(stream->dev, &scope, func), fail);
  CGC_TRY_GOTO(st, condition_kernel(stream->dev, &kernel, func), fail);
  /* The enclosing body (if `stream` is one) counts these as open from now on, so that it cannot
   * end while the node is being built in it. */
  parent = atomic_load(&stream->body);
  if (parent != NULL) atomic_fetch_add(&parent->open_children, (int)n_bodies);
  for (size_t i = 0; i < n_bodies; i++) {
    records[i] = calloc(1, sizeof *records[i]);
    if (records[i] == NULL) {
      st = cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
      goto fail;
    }
    CGC_TRY_GOTO(st, cgc__stream_create(stream->dev, CGC_STREAM_NON_BLOCKING, 0, &lent[i], func), fail);
  }
  /* Where the capture stands: its graph and the nodes the next work depends on. */
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  CUgraph graph = NULL;
  const CUgraphNode* deps = NULL;
  size_t n_deps = 0;
  CGC_TRY_GOTO(st, CGC_CU(func, cuStreamGetCaptureInfo(ref.cu, &status, &id, &graph, &deps, &n_deps)), fail);
  if (status != CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    st = cgc__fail(CGC_ERROR_CAPTURE_INVALIDATED, func,
                   "the capture of stream %p was invalidated by an earlier call: end it (cgc_capture_end says why)",
                   (void*)ref.cu);
    goto fail;
  }
  struct cgc__body shared = {.dev = stream->dev,
                             .kind = kind,
                             .flags = flags,
                             .condition = condition,
                             .capture_id = root,
                             .outer_key = ref.key,
                             .parent = parent,
                             .set_kernel = kernel};
  /* From here the graph changes: a failure leaves a node that must not run, so the capture is
   * marked broken and its end discards the graph. The handle's default (0, applied at every
   * launch) keeps a node whose condition kernel never ran from looping. */
  touched = true;
  CGC_TRY_GOTO(st,
               CGC_CU(func, cuGraphConditionalHandleCreate(&shared.handle, graph, stream->dev->cu, 0,
                                                           CU_GRAPH_COND_ASSIGN_DEFAULT)),
               fail);
  set_args_t a = set_args_of(&shared, 0, 0);
  void* args[5];
  CUDA_KERNEL_NODE_PARAMS p = set_params(kernel, &a, args);
  CGC_TRY_GOTO(st, CGC_CU(func, cuGraphAddKernelNode(&shared.set_node, graph, deps, n_deps, &p)), fail);
  CUgraphNode node = NULL;
  CUgraphNodeParams params = {0};
  params.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  params.conditional.handle = shared.handle;
  params.conditional.type = driver_kind(kind);
  params.conditional.size = (unsigned)n_bodies;
  params.conditional.ctx = stream->dev->cu;
  CGC_TRY_GOTO(st, CGC_CU(func, cuGraphAddNode(&node, graph, &shared.set_node, NULL, 1, &params)), fail);
  /* phGraph_out: the driver's own array of the `size` body graphs, valid while the node lives. */
  CUgraph body_graphs[kMaxBodies] = {0};
  for (size_t i = 0; i < n_bodies; i++) body_graphs[i] = params.conditional.phGraph_out[i];
  /* The capture goes on after the conditional node. */
  CGC_TRY_GOTO(
      st, CGC_CU(func, cuStreamUpdateCaptureDependencies(ref.cu, &node, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES)), fail);
  /* Each body is captured on its lent stream; Relaxed, as a body's capture checks nothing the
   * capture it belongs to would not. */
  for (size_t i = 0; i < n_bodies; i++) {
    CGC_TRY_GOTO(st,
                 CGC_CU(func, cuStreamBeginCaptureToGraph(lent[i]->cu, body_graphs[i], NULL, NULL, 0,
                                                          CU_STREAM_CAPTURE_MODE_RELAXED)),
                 fail);
    undo.begun++;
    cuuint64_t body_id = 0;
    CGC_TRY_GOTO(st, CGC_CU(func, cuStreamGetCaptureInfo(lent[i]->cu, &status, &body_id, NULL, NULL, NULL)), fail);
    *records[i] = shared;
    records[i]->body_id = body_id;
  }
  cgc__ctx_leave(&scope);
  for (size_t i = 0; i < n_bodies; i++) {
    atomic_store(&lent[i]->body, records[i]);
    cgc__registry_open_body(capture, records[i]->body_id, lent[i]);
    bodies[i] = lent[i];
  }
  if (handle != NULL) *handle = (uint64_t)shared.handle;
  return CGC_SUCCESS;

fail:
  cgc__ctx_leave(&scope);
  if (touched) {
    cgc__registry_mark_broken(capture);
    cgc__append("; the capture can no longer be kept: cgc_capture_end will discard it");
  }
  undo_begin(&undo, capture);
  if (parent != NULL) atomic_fetch_sub(&parent->open_children, (int)n_bodies);
  return st;
}

cgc_status_t cgc_capture_conditional_begin(cgc_stream_t stream, cgc_conditional_kind_t kind, const uint32_t* condition,
                                           cgc_stream_t* body) {
  if (body != NULL) *body = NULL;
  if (kind == CGC_CONDITIONAL_SWITCH)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, __func__,
                     "a SWITCH node's bodies are begun with cgc_capture_conditional_begin_bodies");
  return begin(stream, kind, condition, 0, 1, body, NULL, __func__);
}

cgc_status_t cgc_capture_conditional_begin_bodies(cgc_stream_t stream, cgc_conditional_kind_t kind,
                                                  const uint32_t* condition, unsigned flags, size_t n_bodies,
                                                  cgc_stream_t* bodies, uint64_t* handle) {
  return begin(stream, kind, condition, flags, n_bodies, bodies, handle, __func__);
}

/* ---- end ---- */

/* WHILE: the last work of each iteration (the loop's generator states advance, then the
 * condition for the next iteration is read, unless the body's own kernels set it). */
static cgc_status_t end_iteration(struct cgc__body* b, cgc_stream_t body, const char* func) {
  cgc_status_t st = CGC_SUCCESS;
  if (b->end_iteration != NULL) st = b->end_iteration(b, body->cu, func);
  if (st != CGC_SUCCESS || (b->flags & CGC_CONDITIONAL_BODY_SETS_CONDITION)) return st;
  set_args_t a = set_args_of(b, 0, 0);
  void* args[5];
  CUDA_KERNEL_NODE_PARAMS p = set_params(b->set_kernel, &a, args);
  return CGC_CU(func, cuLaunchKernel(p.func, 1, 1, 1, 1, 1, 1, 0, body->cu, args, NULL));
}

cgc_status_t cgc_capture_conditional_end(cgc_stream_t body) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  CGC_CHECK_HANDLE(body, CGC_MAGIC_STREAM);
  /* One end per body: whoever takes the record ends it. */
  struct cgc__body* b = atomic_exchange(&body->body, NULL);
  if (b == NULL)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, __func__,
                     "stream %p is not the body of a conditional node (cgc_capture_conditional_begin lends those), or "
                     "another call ended it",
                     (void*)body->cu);
  int children = atomic_load(&b->open_children);
  if (children > 0) {
    atomic_store(&body->body, b); /* still open: the caller ends the nested bodies first */
    return cgc__fail(CGC_ERROR_INVALID_STATE, __func__,
                     "%d conditional bodies begun inside the body on stream %p are still open: end them first",
                     children, (void*)body->cu);
  }
  cgc__ctx_scope_t scope;
  bool invalidated = false;
  cgc_status_t st;
  CGC_TRY_GOTO(st, cgc__ctx_enter(body->dev, &scope, __func__), out);
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  CGC_TRY_GOTO(st, CGC_CU(__func__, cuStreamGetCaptureInfo(body->cu, &status, &id, NULL, NULL, NULL)), out);
  if (status == CU_STREAM_CAPTURE_STATUS_INVALIDATED) {
    /* Measured on driver 580 (IF bodies of a kernel or a memset, invalidated by a stream query;
     * conditional_test, and the same with the driver alone): the capture it belongs to still
     * ends with a graph, and destroying that graph crashed (SIGSEGV) whether the body's capture
     * was ended first or left alone, as did destroying the still-capturing body stream. Ending
     * the body's capture and keeping the graph did not, and left the body's stream usable. So
     * the body's capture is ended and its stream destroyed as usual, and the capture's end
     * leaves its discarded graph allocated (graph_unsafe). */
    invalidated = true;
    st = cgc__fail(CGC_ERROR_CAPTURE_INVALIDATED, __func__,
                   "the body's capture was invalidated by an earlier call; the capture it belongs to will be "
                   "discarded at its end");
    goto out;
  }
  if (b->kind == CGC_CONDITIONAL_WHILE) st = end_iteration(b, body, __func__);
out: /* the body ends whatever happened: a failure marks the capture */
  if (invalidated) {
    cgc__registry_mark_body_invalidated(b->body_id);
  } else if (st != CGC_SUCCESS) {
    cgc__registry_mark_broken(b->body_id);
  }
  /* The body graph: its node owns it. An invalidated body's end says INVALIDATED, as expected. */
  CUgraph ended = NULL;
  CUresult end_r = CGC_DRV(cuStreamEndCapture)(body->cu, &ended);
  if (st == CGC_SUCCESS) st = cgc__cu_fail(end_r, __func__, "cuStreamEndCapture");
  cgc__ctx_leave(&scope);
  /* What the body allocated now belongs to the stream the node was added on. */
  cgc__alloc_body_ended(body->dev, b->capture_id, atomic_load(&body->id), b->outer_key);
  if (b->parent != NULL) atomic_fetch_sub(&b->parent->open_children, 1);
  cgc__registry_close_body(b->body_id, b);
  cgc_status_t destroyed = cgc_stream_destroy(body);
  if (destroyed != CGC_SUCCESS) cgc__retire(body); /* the handle goes all the same, as promised */
  return st;
}
