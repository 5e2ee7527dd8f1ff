/* Graphs: instantiate, launch (replay), upload, info, dump, reset, destroy.
 *
 * cgc_graph_launch is the path users time against cuGraphLaunch: it validates two handles with
 * plain loads, calls the driver, and bumps a relaxed atomic counter; no lock, no allocation, no
 * other driver call. Three cases take an out-of-line path: the default streams (the context must
 * be current), graphs holding objects with something to do before each launch (a generator
 * writes its state), and launches while a cgc capture is under way (a launch into a capture is
 * refused); other launches pay one predictable branch for them.
 *
 * Knowing when replays are over costs the launch nothing: the capture's last node records the
 * graph's `done` event (capture.c), and the driver runs the launches of one executable one after
 * another, so once `done` has completed every replay launched so far has too. At reset the
 * event goes to the pool as a fence: the pool's memory serves other work only after it. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "src/internal.h"

static cgc_status_t ensure_counted(cgc_graph_t graph, const char* func);

static void drop_uses(cgc_graph_t g) {
  cgc__release_taken(g->uses, g->n_uses);
  g->uses = NULL;
  g->n_uses = g->n_prologue = 0;
  g->ordered = false;
}

/* What a failed create or update gives back, in this order: the executable it made (destroying
 * one would break a Global capture under way on another thread: Relaxed mode), the captured
 * graph, the context, the uses it took. Then `done`: with `done_to_pool` it goes to the pool as a
 * fence, else it is destroyed (never launched). Last the capture's reference to the pool. */
static void discard_new_graph(CUgraphExec exec, CUgraph graph, cgc__ctx_scope_t* scope, cgc__graph_uses_t* taken,
                              CUevent done, bool done_to_pool, cgc_pool_t pool) {
  if (exec != NULL) CGC_RELAXED(CGC_DRV(cuGraphExecDestroy)(exec));
  if (graph != NULL) CGC_DRV(cuGraphDestroy)(graph);
  cgc__ctx_leave(scope);
  cgc__release_taken(taken->uses, taken->n_uses);
  if (!done_to_pool && done != NULL) CGC_DRV(cuEventDestroy)(done);
  cgc__pool_unref(pool, done_to_pool ? done : NULL);
}

cgc_status_t cgc__graph_create(struct cgc__device* dev, CUgraph graph, CUevent done, size_t node_count, cgc_pool_t pool,
                               struct cgc__use* uses, size_t n_uses, unsigned flags, CUstream upload_stream,
                               const char* func, cgc_graph_t* out) {
  return cgc__graph_create_member(dev, graph, done, node_count, pool, uses, n_uses, flags, upload_stream, NULL, NULL,
                                  func, out);
}

cgc_status_t cgc__graph_create_member(struct cgc__device* dev, CUgraph graph, CUevent done, size_t node_count,
                                      cgc_pool_t pool, struct cgc__use* uses, size_t n_uses, unsigned flags,
                                      CUstream upload_stream, cgc_graph_t leader, cgc__deferred_t* deferred,
                                      const char* func, cgc_graph_t* out) {
  *out = NULL;
  CUgraphExec exec = NULL;
  cgc__ctx_scope_t scope = {false};
  cgc__graph_uses_t taken = {NULL, 0, 0, false};
  cgc_graph_t g = calloc(1, sizeof *g);
  if (g == NULL || !cgc__take_uses(&taken, uses, n_uses)) {
    free(g);
    if (deferred != NULL) deferred->drop(deferred);
    cgc__release_uses(uses, n_uses);
    discard_new_graph(NULL, graph, &scope, &taken, done, true, pool);
    return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
  }
  g->uses = taken.uses;
  g->n_uses = taken.n_uses;
  g->n_prologue = taken.n_prologue;
  g->ordered = taken.ordered;
  g->dev = dev;
  g->graph = graph;
  g->deferred = deferred;
  g->done = done;
  g->pool = pool;
  g->node_count = node_count;
  pthread_mutex_init(&g->inspect_lock, NULL);
  atomic_init(&g->updating, false);
  cgc_status_t st;
  CGC_TRY_GOTO(st, cgc__ctx_enter(dev, &scope, func), fail);
  /* A member of `leader`'s family takes its executable, updated to its nodes, and is instantiated
   * only if the driver refuses that (family_result then says why, and the call warns). The new
   * graph is no one else's yet; the leader is the caller's own (a restore's). */
  /* (see cgc_graph_share_executable) */
  st = leader != NULL && graph != NULL ? ensure_counted(g, func) : CGC_SUCCESS;
  if (st != CGC_SUCCESS) goto fail;
  st = leader != NULL ? cgc__family_join(g, leader, func) : CGC_ERROR_NOT_SUPPORTED;
  /* (An unbuilt graph's join has no trial: it cannot be refused.) */
  if (st != CGC_SUCCESS && (st != CGC_ERROR_NOT_SUPPORTED || graph == NULL)) goto fail;
  if (st != CGC_SUCCESS) {
    CGC_TRY_GOTO(st, cgc__cu_fail(cgc__instantiate(graph, &exec), func, "cuGraphInstantiateWithFlags"), fail);
    g->exec = exec;
    if (leader != NULL)
      cgc__warn(func, "a graph could not share graph %p's executable (update result %d): it has its own", (void*)leader,
                g->family_result);
  }
  if ((flags & CGC_CAPTURE_UPLOAD) && g->family == NULL) { /* (a family's executable is uploaded at its use) */
    CGC_TRY_GOTO(st, CGC_CU(func, cuGraphUpload(g->exec, upload_stream)), fail);
    atomic_store(&g->uploaded, 1);
  }
  cgc__ctx_leave(&scope);
  g->magic = CGC_MAGIC_GRAPH;
  *out = g;
  return CGC_SUCCESS;

fail:
  if (g->family != NULL) cgc__family_leave(g, func); /* never the last member: the leader is one */
  if (g->deferred != NULL) g->deferred->drop(g->deferred);
  pthread_mutex_destroy(&g->inspect_lock);
  free(g); /* its uses are `taken`'s */
  /* An upload may have started a replay's worth of work: the pool waits for `done` anyway. */
  discard_new_graph(exec, graph, &scope, &taken, done, true, pool);
  return st;
}

/* Out of line so that the launch path stays small: explains why a launch was refused. */
static __attribute__((noinline, cold)) cgc_status_t launch_refused(cgc_graph_t graph, cgc_stream_t stream,
                                                                  const char* func) {
  CGC_TRY(cgc__check_handle(graph, CGC_MAGIC_GRAPH, func, "graph"));
  CGC_TRY(cgc__check_handle(stream, CGC_MAGIC_STREAM, func, "stream"));
  if (graph->exec == NULL)
    return cgc__fail(CGC_ERROR_INVALID_STATE, func, "graph %p was reset: capture a new graph", (void*)graph);
  return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, "stream %p is on device %d, graph %p on device %d",
                   (void*)stream->cu, stream->dev->ordinal, (void*)graph, graph->dev->ordinal);
}

/* The slow launch: the default streams (the context must be current), graphs whose objects run
 * a prologue on the launch stream first (a generator's state, SEMANTICS 17), and any launch while
 * a cgc capture is under way, which must not go into a capture (SEMANTICS 10): the captured copy
 * of this graph would run its host functions, module code, pool memory and completion event,
 * which this graph alone owns and releases at its reset. */
static __attribute__((noinline)) cgc_status_t launch_slow(cgc_graph_t graph, cgc_stream_t stream, const char* func) {
  cgc__stream_ref_t ref = {.cu = stream->cu};
  /* Asked while a cgc capture is under way (a launch into it is refused), and for a graph whose
   * hooks order a communicator's work: they get the stream's key, or 0 in a capture cgc did not
   * begin (whose own launches cgc cannot order). */
  bool capturing_asked =
      (cgc__captures_underway() > 0 && stream->kind != CGC__STREAM_LEGACY) || graph->ordered;
  if (capturing_asked) CGC_TRY(cgc__stream_resolve(stream, true, &ref, func));
  if (capturing_asked && ref.capturing && cgc__captures_underway() > 0)
    return cgc__fail(CGC_ERROR_CAPTURE_UNSUPPORTED, func,
                     "stream %p is capturing (capture id %llu): a graph launched into a capture would become a "
                     "child graph using what graph %p owns (its pool, host functions, kernels' code), which its "
                     "reset frees; launch it after the capture ends, or capture its work again",
                     (void*)stream->cu, (unsigned long long)ref.capture_id, (void*)graph);
  cgc__ctx_scope_t scope;
  CGC_TRY(cgc__ctx_enter(graph->dev, &scope, func));
  uint64_t key = ref.capturing ? 0 : ref.key;
  /* What each use's step took, given back if the launch fails. The prologue's uses are few (a
   * graph's generators and communicators): on the stack unless a graph has many. */
  enum { kUndoOnStack = 16 };
  uint64_t undo_on_stack[kUndoOnStack];
  uint64_t* undo = graph->n_prologue <= kUndoOnStack ? undo_on_stack : malloc(graph->n_prologue * sizeof *undo);
  if (undo == NULL) {
    cgc__ctx_leave(&scope);
    return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
  }
  size_t stepped = 0; /* uses whose step ran */
  CUresult r = CUDA_SUCCESS;
  cgc_status_t st;
  for (; stepped < graph->n_prologue && r == CUDA_SUCCESS; stepped++) {
    const struct cgc__use* u = &graph->uses[stepped];
    if (u->ops->before_launch != NULL) r = u->ops->before_launch(u->object, u->amount, stream->cu, key, &undo[stepped]);
  }
  if (r != CUDA_SUCCESS) {
    stepped--; /* the failed step gave back its own */
    st = cgc__cu_fail(r, func, "the graph's objects' launch step (a generator's state, a communicator's order)");
  } else if (graph->family != NULL) { /* its family's executable, switched to it first */
    CUgraphExec exec = NULL;
    st = cgc__family_enter(graph, &exec, func);
    if (st == CGC_SUCCESS) {
      st = CGC_CU(func, cuGraphLaunch(exec, stream->cu));
      cgc__family_exit(graph);
    }
  } else {
    st = CGC_CU(func, cuGraphLaunch(graph->exec, stream->cu));
  }
  if (st != CGC_SUCCESS) {
    for (size_t i = 0; i < stepped; i++) {
      const struct cgc__use* u = &graph->uses[i];
      if (u->ops->before_launch != NULL && u->ops->launch_failed != NULL)
        u->ops->launch_failed(u->object, u->amount, undo[i]);
    }
  } else {
    atomic_fetch_add_explicit(&graph->replays, 1, memory_order_relaxed);
    /* The replay runs: a failed step after it is said, not returned (a caller that retried would
     * launch a collective twice). */
    for (size_t i = 0; i < graph->n_prologue; i++) {
      const struct cgc__use* u = &graph->uses[i];
      CUresult after = u->ops->after_launch != NULL ? u->ops->after_launch(u->object, stream->cu, key) : CUDA_SUCCESS;
      if (after != CUDA_SUCCESS)
        cgc__warn(func, "graph %p launched, but recording its %s's order failed (CUresult %d): later work of it on "
                  "other streams may not wait for this replay", (void*)graph, u->ops->kind, (int)after);
    }
  }
  if (undo != undo_on_stack) free(undo);
  cgc__ctx_leave(&scope);
  return st;
}

cgc_status_t cgc_graph_launch(cgc_graph_t graph, cgc_stream_t stream) {
  if (__builtin_expect(!cgc__is_live(graph, CGC_MAGIC_GRAPH) || !cgc__is_live(stream, CGC_MAGIC_STREAM) ||
                           graph->exec == NULL || stream->dev != graph->dev,
                       0))
    return launch_refused(graph, stream, __func__);
  CUresult r;
  if (__builtin_expect(stream->special || graph->n_prologue != 0 || graph->family != NULL || cgc__captures_underway() > 0, 0)) {
    /* A family member its executable holds already launches here too (a claim more). */
    if (graph->family == NULL || stream->special || graph->n_prologue != 0 || cgc__captures_underway() > 0 ||
        !cgc__family_launch_held(graph, stream->cu, &r))
      return launch_slow(graph, stream, __func__);
  } else {
    r = CGC_DRV(cuGraphLaunch)(graph->exec, stream->cu);
  }
  if (__builtin_expect(r != CUDA_SUCCESS, 0)) return cgc__cu_fail(r, __func__, "cuGraphLaunch");
  atomic_fetch_add_explicit(&graph->replays, 1, memory_order_relaxed);
  return CGC_SUCCESS;
}

cgc_status_t cgc_graph_upload(cgc_graph_t graph, cgc_stream_t stream) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  CGC_CHECK_HANDLE(graph, CGC_MAGIC_GRAPH);
  CGC_CHECK_HANDLE(stream, CGC_MAGIC_STREAM);
  if (graph->exec == NULL || stream->dev != graph->dev) return launch_refused(graph, stream, __func__);
  cgc__ctx_scope_t scope;
  /* A family member's upload is of its family's executable, switched to it first (the context
   * current for the switch). */
  CGC_TRY(graph->family != NULL ? cgc__ctx_enter(graph->dev, &scope, __func__)
                                : cgc__stream_enter(stream, &scope, __func__));
  CUgraphExec exec = graph->exec;
  cgc_status_t st = graph->family != NULL ? cgc__family_enter(graph, &exec, __func__) : CGC_SUCCESS;
  if (st == CGC_SUCCESS) {
    st = CGC_CU(__func__, cuGraphUpload(exec, stream->cu));
    if (graph->family != NULL) cgc__family_exit(graph);
  }
  cgc__ctx_leave(&scope);
  if (st == CGC_SUCCESS) atomic_store(&graph->uploaded, 1);
  return st;
}

/* The kinds of node cgc_graph_info counts: X(its field, the driver's CUgraphNodeType). */
#define GRAPH_NODE_KINDS(X)                                \
  X(kernel_nodes, CU_GRAPH_NODE_TYPE_KERNEL)               \
  X(memcpy_nodes, CU_GRAPH_NODE_TYPE_MEMCPY)               \
  X(memset_nodes, CU_GRAPH_NODE_TYPE_MEMSET)               \
  X(host_nodes, CU_GRAPH_NODE_TYPE_HOST)                   \
  X(child_graph_nodes, CU_GRAPH_NODE_TYPE_GRAPH)           \
  X(empty_nodes, CU_GRAPH_NODE_TYPE_EMPTY)                 \
  X(event_wait_nodes, CU_GRAPH_NODE_TYPE_WAIT_EVENT)       \
  X(event_record_nodes, CU_GRAPH_NODE_TYPE_EVENT_RECORD)   \
  X(mem_alloc_nodes, CU_GRAPH_NODE_TYPE_MEM_ALLOC)         \
  X(mem_free_nodes, CU_GRAPH_NODE_TYPE_MEM_FREE)           \
  X(mem_op_nodes, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP)         \
  X(conditional_nodes, CU_GRAPH_NODE_TYPE_CONDITIONAL)
/* capi/cgc.h's comments give each count's CUgraphNodeType value. */
_Static_assert(CU_GRAPH_NODE_TYPE_KERNEL == 0 && CU_GRAPH_NODE_TYPE_HOST == 3 && CU_GRAPH_NODE_TYPE_EVENT_RECORD == 7 &&
                   CU_GRAPH_NODE_TYPE_MEM_ALLOC == 10 && CU_GRAPH_NODE_TYPE_BATCH_MEM_OP == 12 &&
                   CU_GRAPH_NODE_TYPE_CONDITIONAL == 13,
               "capi/cgc.h's cgc_graph_info_t names the driver's CUgraphNodeType values");

/* Counts the graph's nodes by kind into `info` (cgc's completion record left out). Asked of the
 * driver at the first cgc_graph_info that wants them, so that capture pays nothing for it, and
 * kept (the graph does not change); the caller holds graph->inspect_lock. */
static cgc_status_t count_nodes(cgc_graph_t graph, cgc_graph_info_t* info, const char* func) {
  size_t n = 0;
  /* The nodes of the graph the executable was instantiated from: per-node updates must name
   * those (after an update in place the latest graph's nodes are other objects, same topology). */
  CUgraph source = graph->exec_graph != NULL ? graph->exec_graph : graph->graph;
  CGC_TRY(CGC_CU(func, cuGraphGetNodes(source, NULL, &n)));
  if (n == 0) return CGC_SUCCESS;
  CUgraphNode* nodes = malloc(n * sizeof *nodes);
  if (nodes == NULL) return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
  /* From here a failure still clears the kernel nodes: not a chain to cut short. */
  cgc_status_t st = CGC_CU(func, cuGraphGetNodes(source, nodes, &n));
  free(graph->kernel_nodes);
  graph->kernel_nodes = NULL;
  size_t n_kernels = 0;
  CUfunction condition = atomic_load(&graph->dev->condition_kernel);
  for (size_t i = 0; i < n && st == CGC_SUCCESS; i++) {
    CUgraphNodeType type;
    st = CGC_CU(func, cuGraphNodeGetType(nodes[i], &type));
    if (st != CGC_SUCCESS) break;
    if (type == CU_GRAPH_NODE_TYPE_KERNEL && condition != NULL) {
      /* cgc's own kernel before a conditional node is not the caller's to count or change */
      CUDA_KERNEL_NODE_PARAMS p;
      memset(&p, 0, sizeof p);
      if (CGC_DRV(cuGraphKernelNodeGetParams)(nodes[i], &p) == CUDA_SUCCESS && p.func == condition) continue;
    }
    if (type == CU_GRAPH_NODE_TYPE_KERNEL) nodes[n_kernels++] = nodes[i]; /* in place: i >= n_kernels */
    switch ((int)type) {
#define COUNT_NODE_KIND_(field, node_type) \
  case node_type:                         \
    info->field++;                        \
    break;
      GRAPH_NODE_KINDS(COUNT_NODE_KIND_)
#undef COUNT_NODE_KIND_
      default:
        info->other_nodes++;
    }
  }
  if (st == CGC_SUCCESS) {
    graph->kernel_nodes = nodes; /* the first n_kernels entries, in capture order */
    nodes = NULL;
  }
  free(nodes);
  if (graph->done != NULL && info->event_record_nodes > 0) info->event_record_nodes--; /* cgc's own */
  return st;
}

/* Makes sure the node counts and the kernel nodes are known (graph->inspect_lock held). */
static cgc_status_t ensure_counted(cgc_graph_t graph, const char* func) {
  if (graph->counted) return CGC_SUCCESS;
  cgc__ctx_scope_t scope;
  CGC_TRY(cgc__ctx_enter(graph->dev, &scope, func));
  graph->counts = (cgc_graph_info_t){0};
  cgc_status_t st = count_nodes(graph, &graph->counts, func);
  cgc__ctx_leave(&scope);
  graph->counted = st == CGC_SUCCESS;
  return st;
}

/* ensure_counted for any graph (inspect_lock held): a family member's nodes are counted under its
 * family's claim, so that no switch reads its graph meanwhile (the driver allows one thread in a
 * graph), after its graph is built if it joined unbuilt. */
static cgc_status_t count_any(cgc_graph_t graph, const char* func) {
  if (graph->counted || graph->exec == NULL) return CGC_SUCCESS;
  if (graph->family == NULL) return graph->graph != NULL ? ensure_counted(graph, func) : CGC_SUCCESS;
  cgc__ctx_scope_t scope;
  CGC_TRY(cgc__ctx_enter(graph->dev, &scope, func));
  cgc_status_t st = cgc__family_hold(graph, func);
  if (st == CGC_SUCCESS) {
    st = ensure_counted(graph, func);
    cgc__family_exit(graph);
  }
  cgc__ctx_leave(&scope);
  return st;
}

cgc_status_t cgc_graph_info(cgc_graph_t graph, cgc_graph_info_t* info) {
  CGC_CHECK_ARG(info != NULL, "info is NULL");
  CGC_CHECK_HANDLE(graph, CGC_MAGIC_GRAPH);
  CGC_CHECK_ARG(info->struct_size >= sizeof(size_t),
                "info->struct_size is %zu: set it to sizeof(cgc_graph_info_t)", info->struct_size);
  /* Fill only what the caller's (possibly older, shorter) struct has room for. What an update
   * swaps is read under inspect_lock; the counts are asked of the driver only for a caller whose
   * struct has room for them, once (the driver allows no two threads in one graph). */
  cgc_graph_info_t full = {0};
  full.struct_size = info->struct_size < sizeof full ? info->struct_size : sizeof full;
  full.replay_count = atomic_load_explicit(&graph->replays, memory_order_relaxed);
  full.uploaded = atomic_load(&graph->uploaded);
  cgc_status_t st = CGC_SUCCESS;
  cgc__mutex_lock(&graph->inspect_lock, CGC__LOCK_INSPECT);
  full.node_count = graph->exec ? graph->node_count : 0;
  cgc_pool_t pool = graph->pool; /* asked after the lock: inspect_lock is taken alone */
  full.update_count = graph->update_count;
  full.last_update = graph->last_update;
  full.last_update_result = graph->last_update_result;
  full.family_size = cgc__family_size(graph, &full.family_result);
  if (info->struct_size > offsetof(cgc_graph_info_t, kernel_nodes) && graph->exec != NULL) {
    st = count_any(graph, __func__);
    if (graph->counted) {
#define COPY_NODE_KIND_(field, node_type) full.field = graph->counts.field;
      GRAPH_NODE_KINDS(COPY_NODE_KIND_)
#undef COPY_NODE_KIND_
      full.other_nodes = graph->counts.other_nodes;
    }
  }
  cgc__mutex_unlock(&graph->inspect_lock, CGC__LOCK_INSPECT);
  if (st != CGC_SUCCESS) return st;
  full.pool_bytes_reserved = cgc__pool_reserved(pool);
  memcpy(info, &full, full.struct_size);
  return CGC_SUCCESS;
}

cgc_status_t cgc_graph_pool(cgc_graph_t graph, cgc_pool_t* pool) {
  CGC_CHECK_ARG(pool != NULL, "pool is NULL");
  *pool = NULL;
  CGC_CHECK_HANDLE(graph, CGC_MAGIC_GRAPH);
  if (graph->exec == NULL)
    return cgc__fail(CGC_ERROR_INVALID_STATE, __func__, "graph %p was reset: it has no pool", (void*)graph);
  *pool = graph->pool;
  return CGC_SUCCESS;
}

cgc_status_t cgc_graph_debug_dump(cgc_graph_t graph, const char* dot_path) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  CGC_CHECK_HANDLE(graph, CGC_MAGIC_GRAPH);
  CGC_CHECK_ARG(dot_path != NULL && dot_path[0] != '\0', "dot_path is NULL or empty");
  cgc__mutex_lock(&graph->inspect_lock, CGC__LOCK_INSPECT);
  /* A family member's graph is read under its family's claim (a switch may read it), built
   * first if it joined unbuilt. */
  cgc__ctx_scope_t scope = {false};
  cgc_status_t st = CGC_SUCCESS;
  bool held = false;
  if (graph->exec == NULL)
    st = cgc__fail(CGC_ERROR_INVALID_STATE, __func__, "graph %p was reset: nothing to dump", (void*)graph);
  else if (graph->family != NULL && (st = cgc__ctx_enter(graph->dev, &scope, __func__)) == CGC_SUCCESS)
    held = (st = cgc__family_hold(graph, __func__)) == CGC_SUCCESS;
  if (st == CGC_SUCCESS)
    st = CGC_CU(__func__, cuGraphDebugDotPrint(graph->graph, dot_path, CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE));
  if (held) cgc__family_exit(graph);
  cgc__ctx_leave(&scope);
  cgc__mutex_unlock(&graph->inspect_lock, CGC__LOCK_INSPECT);
  if (st != CGC_SUCCESS) cgc__append(" (writing '%s')", dot_path);
  return st;
}

/* Takes the graph for a reset or destroy as a capture takes it for an update (`updating`, by
 * compare-and-swap), so that neither can start while the other is under way. */
static cgc_status_t claim_for(cgc_graph_t graph, const char* what, const char* func) {
  bool expected = false;
  if (atomic_compare_exchange_strong(&graph->updating, &expected, true)) return CGC_SUCCESS;
  return cgc__fail(CGC_ERROR_INVALID_STATE, func,
                   "graph %p is being updated by a capture under way (cgc_capture_options_t.update), or another "
                   "thread resets or destroys it; end that first before %s it",
                   (void*)graph, what);
}

static cgc_status_t reset_claimed(cgc_graph_t graph, const char* func);

cgc_status_t cgc_graph_reset(cgc_graph_t graph) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  CGC_CHECK_HANDLE(graph, CGC_MAGIC_GRAPH);
  CGC_TRY(claim_for(graph, "resetting", __func__));
  cgc_status_t st = reset_claimed(graph, __func__);
  atomic_store(&graph->updating, false);
  return st;
}

/* The reset itself, with the graph claimed. */
static cgc_status_t reset_claimed(cgc_graph_t graph, const char* func) {
  if (graph->exec == NULL && graph->graph == NULL) return CGC_SUCCESS;
  /* All or nothing: without the context nothing is touched, and the graph stays usable. */
  cgc__ctx_scope_t scope;
  CGC_TRY(cgc__ctx_enter(graph->dev, &scope, func));
  cgc_status_t st = CGC_SUCCESS;
  /* Destroying an executable breaks a Global capture under way on another thread (measured on
   * driver 580): Relaxed mode, as PyTorch's reset() does. An executable still running is freed
   * by the driver when it completes. */
  CUstreamCaptureMode previous = cgc__relaxed_begin();
  cgc__mutex_lock(&graph->inspect_lock, CGC__LOCK_INSPECT); /* no per-node update or inspection meanwhile */
  if (graph->family != NULL) st = cgc__family_leave(graph, func); /* the last member destroys it */
  else if (graph->exec != NULL) st = CGC_CU(func, cuGraphExecDestroy(graph->exec));
  if (graph->deferred != NULL) { /* a restore's member never built: out of its family now */
    graph->deferred->drop(graph->deferred);
    graph->deferred = NULL;
  }
  /* Every step runs; the first failure is the one returned. */
  cgc_status_t st2 = graph->graph != NULL ? CGC_CU(func, cuGraphDestroy(graph->graph)) : CGC_SUCCESS;
  if (st == CGC_SUCCESS) st = st2;
  if (graph->exec_graph != NULL) CGC_DRV(cuGraphDestroy)(graph->exec_graph);
  graph->exec = NULL;
  graph->graph = NULL;
  graph->exec_graph = NULL;
  graph->counted = false;
  free(graph->kernel_nodes);
  graph->kernel_nodes = NULL;
  cgc__mutex_unlock(&graph->inspect_lock, CGC__LOCK_INSPECT);
  /* Replays that already completed need no fence. A graph holding objects that a running replay
   * may still call (a host function's data, a module's code) waits for its last replay here:
   * with no lock held, in Relaxed mode, so nothing else waits and no capture breaks. */
  CUevent fence = graph->done;
  graph->done = NULL;
  if (fence != NULL && cgc__releases_after_replays(graph->uses, graph->n_uses))
    st2 = CGC_CU(func, cuEventSynchronize(fence));
  if (st == CGC_SUCCESS) st = st2;
  cgc__order_fence_stream_after(graph->dev, fence, graph->uses, graph->n_uses, func);
  if (fence != NULL && CGC_DRV(cuEventQuery)(fence) != CUDA_ERROR_NOT_READY) {
    CGC_DRV(cuEventDestroy)(fence);
    fence = NULL;
  }
  cgc__relaxed_end(previous);
  cgc__ctx_leave(&scope);
  cgc__pool_unref(graph->pool, fence); /* the pool outlives the graph while its blocks or users do */
  graph->pool = NULL;
  drop_uses(graph);
  return st;
}

cgc_status_t cgc_graph_destroy(cgc_graph_t graph) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  CGC_CHECK_HANDLE(graph, CGC_MAGIC_GRAPH);
  CGC_TRY(claim_for(graph, "destroying", __func__));
  cgc_status_t st = reset_claimed(graph, __func__);
  if (st != CGC_SUCCESS && graph->exec != NULL) { /* nothing was released: the handle stays */
    atomic_store(&graph->updating, false);
    return st;
  }
  /* The claim is kept: no capture can take the graph for an update between here and its end. */
  pthread_mutex_destroy(&graph->inspect_lock);
  cgc__retire(graph);
  return st;
}

void* cgc_graph_native(cgc_graph_t graph) {
  if (!cgc__is_live(graph, CGC_MAGIC_GRAPH)) return NULL;
  if (graph->family == NULL) return graph->graph;
  /* A family member: built first if it joined unbuilt (NULL, the message said, if that fails). */
  cgc__mutex_lock(&graph->inspect_lock, CGC__LOCK_INSPECT);
  CUgraph built = NULL;
  cgc__ctx_scope_t scope;
  if (graph->family != NULL && cgc__ctx_enter(graph->dev, &scope, "cgc_graph_native") == CGC_SUCCESS) {
    if (cgc__family_hold(graph, "cgc_graph_native") == CGC_SUCCESS) {
      built = graph->graph;
      cgc__family_exit(graph);
    }
    cgc__ctx_leave(&scope);
  } else if (graph->family == NULL) {
    built = graph->graph;
  }
  cgc__mutex_unlock(&graph->inspect_lock, CGC__LOCK_INSPECT);
  return built;
}

void* cgc_graph_native_exec(cgc_graph_t graph) {
  if (!cgc__is_live(graph, CGC_MAGIC_GRAPH)) return NULL;
  if (graph->family == NULL) return graph->exec;
  /* A family member launches its family's executable, or its own (family.c). */
  cgc__mutex_lock(&graph->inspect_lock, CGC__LOCK_INSPECT);
  void* exec = graph->family != NULL ? cgc__family_exec(graph) : graph->exec;
  cgc__mutex_unlock(&graph->inspect_lock, CGC__LOCK_INSPECT);
  return exec;
}

/* ---- graphs that change without recapture (1.2) ---- */

static const char* update_result_name(CUgraphExecUpdateResult result) {
  switch (result) {
    case CU_GRAPH_EXEC_UPDATE_SUCCESS: return "CU_GRAPH_EXEC_UPDATE_SUCCESS";
    case CU_GRAPH_EXEC_UPDATE_ERROR: return "CU_GRAPH_EXEC_UPDATE_ERROR";
    case CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED: return "CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED";
    case CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED: return "CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED";
    case CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED: return "CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED";
    case CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED: return "CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED";
    case CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED: return "CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED";
    case CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE:
      return "CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE";
    case CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED: return "CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED";
  }
  return "an update result this build does not name";
}

cgc_status_t cgc__graph_update(cgc_graph_t g, CUgraph graph, CUevent done, size_t node_count, cgc_pool_t pool,
                               struct cgc__use* uses, size_t n_uses, unsigned flags, CUstream upload_stream,
                               const char* func) {
  cgc__ctx_scope_t scope = {false};
  CUgraphExec fresh = NULL;
  cgc__graph_uses_t taken = {NULL, 0, 0};
  bool locked = false;
  cgc_status_t st = CGC_SUCCESS;
  if (!cgc__take_uses(&taken, uses, n_uses)) {
    cgc__release_uses(uses, n_uses);
    st = cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
    goto fail;
  }
  CGC_TRY_GOTO(st, cgc__ctx_enter(g->dev, &scope, func), fail);
  /* The executable is changed and the parts swapped under inspect_lock: no per-node update or
   * inspection reaches the driver's graph objects meanwhile (the driver allows one thread in a
   * graph). No wait for the GPU happens under it. */
  cgc__mutex_lock(&g->inspect_lock, CGC__LOCK_INSPECT);
  locked = true;
  if (g->exec == NULL) {
    st = cgc__fail(CGC_ERROR_INVALID_STATE, func, "graph %p was reset during the capture that was to update it",
                   (void*)g);
    goto fail;
  }
  /* The driver updates the executable in place when the new graph has the same topology; launches
   * already enqueued keep the parameters they were launched with. Otherwise a new executable. */
  CUgraphExecUpdateResultInfo result = {CU_GRAPH_EXEC_UPDATE_SUCCESS, NULL, NULL};
  CUresult r = CUDA_SUCCESS;
  CGC_RELAXED(r = CGC_DRV(cuGraphExecUpdate)(g->exec, graph, &result));
  cgc_graph_update_t how = CGC_GRAPH_UPDATE_IN_PLACE;
  if (r == CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE) {
    how = CGC_GRAPH_UPDATE_REINSTANTIATED;
    CGC_TRY_GOTO(st, cgc__cu_fail(cgc__instantiate(graph, &fresh), func, "cuGraphInstantiateWithFlags"), fail);
  } else {
    CGC_TRY_GOTO(st, cgc__cu_fail(r, func, "cuGraphExecUpdate"), fail);
  }
  CUevent old_done = g->done;
  bool wait_for_old = false; /* the new event could not be made to cover the old replays */
  if (how == CGC_GRAPH_UPDATE_IN_PLACE) {
    /* Replays launched before the update record the old event, later ones the new: the new event
     * must also cover the earlier replays (the pool waits for it at reset). A record on the
     * device's fence stream after a wait on the old one does that without waiting here. */
    /* In Relaxed mode: an event query from a thread in Global mode is an unsafe call while any
     * thread captures, and on driver 580 it crashed inside the driver while another thread's
     * capture ended (the stress test's illegal mix). */
    bool pending = false;
    CGC_RELAXED(pending = old_done != NULL && CGC_DRV(cuEventQuery)(old_done) == CUDA_ERROR_NOT_READY);
    if (pending) {
      CUstream fence = NULL;
      st = cgc__device_fence_stream(g->dev, &fence, func);
      if (st == CGC_SUCCESS) st = CGC_CU(func, cuStreamWaitEvent(fence, old_done, 0));
      if (st == CGC_SUCCESS) st = CGC_CU(func, cuEventRecord(done, fence));
      if (st != CGC_SUCCESS) {
        /* The executable runs the new graph already: keep it consistent by waiting for the old
         * replays instead, below, once inspect_lock is released (the claim keeps any reset out
         * meanwhile, and only launches after the swap record the new event). */
        wait_for_old = true;
        st = CGC_SUCCESS;
      }
    }
    /* A whole-graph update leaves nodes disabled by cgc_graph_kernel_node_set_enabled as they
     * were; SEMANTICS 28 says an update restores what was captured. */
    if (g->any_disabled && g->counted) {
      for (size_t i = 0; i < g->counts.kernel_nodes; i++)
        CGC_DRV(cuGraphNodeSetEnabled)(g->exec, g->kernel_nodes[i], 1);
    }
  }
  CUgraphExec exec = fresh != NULL ? fresh : g->exec;
  if (flags & CGC_CAPTURE_UPLOAD) {
    CUresult up = CGC_DRV(cuGraphUpload)(exec, upload_stream);
    if (up == CUDA_SUCCESS) atomic_store(&g->uploaded, 1);
    else if (fresh != NULL) {
      st = cgc__cu_fail(up, func, "cuGraphUpload");
      goto fail;
    } /* updated in place: an upload is only a head start, the executable stays usable */
  } else if (fresh != NULL) {
    atomic_store(&g->uploaded, 0);
  }
  /* The swap. In place, the executable keeps the nodes of the graph it was instantiated from:
   * that graph stays (exec_graph) for per-node updates; the latest graph is the one to show. */
  CUgraph old_graph = g->graph, old_exec_graph = g->exec_graph;
  CUgraphExec old_exec = fresh != NULL ? g->exec : NULL;
  struct cgc__use* old_uses = g->uses;
  size_t n_old = g->n_uses;
  bool wait = how == CGC_GRAPH_UPDATE_REINSTANTIATED || cgc__releases_after_replays(old_uses, n_old) || wait_for_old;
  if (how == CGC_GRAPH_UPDATE_IN_PLACE) {
    if (old_exec_graph == NULL) { /* the executable's source is the graph being replaced: it stays */
      old_exec_graph = old_graph;
      old_graph = NULL;
    }
    g->exec_graph = old_exec_graph;
    old_exec_graph = NULL;
  } else {
    g->exec_graph = NULL;
  }
  g->any_disabled = false; /* re-enabled above, or a new executable */
  g->args_changed = false;
  g->graph = graph;
  g->exec = exec;
  g->done = done;
  g->uses = taken.uses;
  g->n_uses = taken.n_uses;
  g->n_prologue = taken.n_prologue;
  g->ordered = taken.ordered;
  g->node_count = node_count;
  if (how == CGC_GRAPH_UPDATE_REINSTANTIATED) { /* new nodes: counted again when asked */
    g->counted = false;
    free(g->kernel_nodes);
    g->kernel_nodes = NULL;
  }
  g->update_count++;
  g->last_update = how;
  g->last_update_result = (int)result.result;
  cgc__mutex_unlock(&g->inspect_lock, CGC__LOCK_INSPECT);
  locked = false;
  /* Replays launched so far still run the old parts. A new executable could otherwise start
   * beside the old one's last replay on the same pool's memory, and an old host function or
   * module's code must not be released under a running replay: wait for them first. */
  if (old_done != NULL && wait) {
    CUresult waited = CUDA_SUCCESS;
    CGC_RELAXED(waited = CGC_DRV(cuEventSynchronize)(old_done));
    if (waited != CUDA_SUCCESS)
      cgc__warn(func, "waiting for graph %p's replays before the update failed (CUresult %d): its old parts go now",
                (void*)g, (int)waited);
  }
  /* Destroying an executable breaks a Global capture under way on another thread: Relaxed. An
   * old event with a record still pending is freed by the driver when it completes. */
  CGC_RELAXED({
    if (old_exec != NULL) CGC_DRV(cuGraphExecDestroy)(old_exec);
    if (old_graph != NULL) CGC_DRV(cuGraphDestroy)(old_graph);
    if (old_exec_graph != NULL) CGC_DRV(cuGraphDestroy)(old_exec_graph);
    if (old_done != NULL) CGC_DRV(cuEventDestroy)(old_done);
  });
  cgc__ctx_leave(&scope);
  cgc__release_taken(old_uses, n_old);
  cgc__pool_unref(pool, NULL); /* the capture's reference: the graph holds its own */
  if (how == CGC_GRAPH_UPDATE_REINSTANTIATED)
    cgc__warn(func,
              "graph %p was instantiated anew: the driver could not update its executable in place (%s); capture "
              "the same topology (the same kernels, copies and sets in the same order) for an update in place",
              (void*)g, update_result_name(result.result));
  return CGC_SUCCESS;

fail:
  if (locked) cgc__mutex_unlock(&g->inspect_lock, CGC__LOCK_INSPECT);
  discard_new_graph(fresh, graph, &scope, &taken, done, false, pool); /* `done` was never launched */
  return st;
}

/* The kernel node `kernel_index` of `graph` for a per-node update (inspect_lock held). */
static cgc_status_t kernel_node(cgc_graph_t graph, size_t kernel_index, CUgraphNode* node, const char* func) {
  if (atomic_load(&graph->updating))
    return cgc__fail(CGC_ERROR_INVALID_STATE, func,
                     "graph %p is being updated by a capture under way (cgc_capture_options_t.update), or another "
                     "thread resets or destroys it",
                     (void*)graph);
  if (graph->exec == NULL)
    return cgc__fail(CGC_ERROR_INVALID_STATE, func, "graph %p was reset: nothing to update", (void*)graph);
  if (graph->family != NULL)
    return cgc__fail(CGC_ERROR_INVALID_STATE, func,
                     "graph %p shares its family's executable: per-node updates would change the other members' too",
                     (void*)graph);
  CGC_TRY(ensure_counted(graph, func));
  if (kernel_index >= graph->counts.kernel_nodes)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, "kernel_index %zu: graph %p has %zu kernel node%s", kernel_index,
                     (void*)graph, graph->counts.kernel_nodes, graph->counts.kernel_nodes == 1 ? "" : "s");
  *node = graph->kernel_nodes[kernel_index];
  return CGC_SUCCESS;
}

cgc_status_t cgc_graph_kernel_node_set_enabled(cgc_graph_t graph, size_t kernel_index, int enabled) {
  CGC_CHECK_HANDLE(graph, CGC_MAGIC_GRAPH);
  cgc__mutex_lock(&graph->inspect_lock, CGC__LOCK_INSPECT);
  CUgraphNode node = NULL;
  cgc__ctx_scope_t scope = {false};
  cgc_status_t st;
  CGC_TRY_GOTO(st, kernel_node(graph, kernel_index, &node, __func__), out);
  CGC_TRY_GOTO(st, cgc__ctx_enter(graph->dev, &scope, __func__), out);
  st = CGC_CU(__func__, cuGraphNodeSetEnabled(graph->exec, node, enabled != 0));
  if (st == CGC_SUCCESS && !enabled) graph->any_disabled = true;
out: /* a scope never entered is left alone */
  cgc__ctx_leave(&scope);
  cgc__mutex_unlock(&graph->inspect_lock, CGC__LOCK_INSPECT);
  return st;
}

cgc_status_t cgc_graph_kernel_node_set_args(cgc_graph_t graph, size_t kernel_index, void** args) {
  CGC_CHECK_HANDLE(graph, CGC_MAGIC_GRAPH);
  CGC_CHECK_ARG(args != NULL, "args is NULL");
  cgc__mutex_lock(&graph->inspect_lock, CGC__LOCK_INSPECT);
  CUgraphNode node = NULL;
  cgc__ctx_scope_t scope = {false};
  cgc_status_t st;
  CGC_TRY_GOTO(st, kernel_node(graph, kernel_index, &node, __func__), out);
  CGC_TRY_GOTO(st, cgc__ctx_enter(graph->dev, &scope, __func__), out);
  /* The same kernel, grid and block as captured; only the arguments change (the driver copies
   * their values now). */
  CUDA_KERNEL_NODE_PARAMS params;
  memset(&params, 0, sizeof params);
  CGC_TRY_GOTO(st, CGC_CU(__func__, cuGraphKernelNodeGetParams(node, &params)), out);
  params.kernelParams = args;
  params.extra = NULL;
  st = CGC_CU(__func__, cuGraphExecKernelNodeSetParams(graph->exec, node, &params));
  if (st == CGC_SUCCESS) graph->args_changed = true;
out: /* a scope never entered is left alone */
  cgc__ctx_leave(&scope);
  cgc__mutex_unlock(&graph->inspect_lock, CGC__LOCK_INSPECT);
  return st;
}

/* ---- families (1.6; the family itself: family.c) ---- */

/* Why `g` cannot be part of a family now, or NULL (inspect_lock held). */
static const char* not_shareable(cgc_graph_t g) {
  if (g->exec == NULL) return "was reset";
  if (g->any_disabled || g->args_changed) return "had its executable changed by per-node updates";
  return NULL;
}

cgc_status_t cgc_graph_share_executable(cgc_graph_t graph, cgc_graph_t leader) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  CGC_CHECK_HANDLE(graph, CGC_MAGIC_GRAPH);
  CGC_CHECK_HANDLE(leader, CGC_MAGIC_GRAPH);
  CGC_CHECK_ARG(graph != leader, "graph and leader are the same graph");
  if (graph->dev != leader->dev)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, __func__, "graph is on device %d, leader on device %d",
                     graph->dev->ordinal, leader->dev->ordinal);
  /* Both are taken as a capture takes a graph it updates: no reset, destroy, update by capture or
   * per-node update (which refuses while `updating` is claimed) starts meanwhile. */
  CGC_TRY(claim_for(graph, "sharing an executable with", __func__));
  cgc_status_t st = claim_for(leader, "sharing its executable with", __func__);
  if (st != CGC_SUCCESS) {
    atomic_store(&graph->updating, false);
    return st;
  }
  /* The leader: a per-node update under way (it holds the leader's inspect_lock throughout) ends
   * before this goes on; its nodes are counted now, so that cgc_graph_info never reads its graph
   * while a switch does. */
  cgc__mutex_lock(&leader->inspect_lock, CGC__LOCK_INSPECT);
  const char* why = not_shareable(leader);
  if (why == NULL) st = count_any(leader, __func__); /* (built first if it joined unbuilt) */
  cgc__mutex_unlock(&leader->inspect_lock, CGC__LOCK_INSPECT);
  cgc__ctx_scope_t scope = {false};
  cgc__mutex_lock(&graph->inspect_lock, CGC__LOCK_INSPECT);
  if (why != NULL) {
    st = cgc__fail(CGC_ERROR_INVALID_STATE, __func__, "leader (graph %p) %s", (void*)leader, why);
  } else if (st != CGC_SUCCESS) {
    /* (counting the leader's nodes failed: its message stands) */
  } else if ((why = not_shareable(graph)) != NULL) {
    st = cgc__fail(CGC_ERROR_INVALID_STATE, __func__, "graph %p %s", (void*)graph, why);
  } else if (graph->family != NULL && graph->family != leader->family) {
    st = cgc__fail(CGC_ERROR_INVALID_STATE, __func__,
                   "graph %p shares another family's executable already: reset it and capture it anew to move it",
                   (void*)graph);
  } else if (graph->family == NULL) { /* (a member of leader's family already: nothing to do) */
    st = ensure_counted(graph, __func__);
    if (st == CGC_SUCCESS) st = cgc__ctx_enter(graph->dev, &scope, __func__);
    if (st == CGC_SUCCESS) st = cgc__family_join(graph, leader, __func__);
    cgc__ctx_leave(&scope);
  }
  cgc__mutex_unlock(&graph->inspect_lock, CGC__LOCK_INSPECT);
  atomic_store(&leader->updating, false);
  atomic_store(&graph->updating, false);
  return st;
}
