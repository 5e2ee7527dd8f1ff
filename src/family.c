/* Families (1.6): graphs of one structure sharing one executable.
 *
 * A member's own executable is freed when it joins; the family's (the first leader's) is updated
 * in place to a member's nodes (cuGraphExecUpdate, no device synchronisation) before a launch of
 * a member it does not hold, so that graphs that differ only in their nodes' parameters (one per
 * batch size) hold one executable's device memory and one instantiation. The executable's
 * launches run one after another on the device, as every executable's do, so members replay one
 * at a time, in launch order, whatever their streams.
 *
 * State: `busy` is claimed (compare-and-swap) by the one call that switches and launches,
 * uploads, joins or leaves; it guards `holder` and the member list. The launch path never waits
 * for it: a launch that finds it taken is refused (the holder may be inside cuGraphLaunch, which
 * can wait for the GPU). Joins and leaves, which are not on the launch path, wait for it, yielding.
 * `n_members` is also read without the claim (cgc_graph_info), under a member's inspect_lock,
 * which keeps the family alive: a member leaves only under its own. graph.c calls in here; nothing
 * here calls graph.c. */
#include <sched.h>
#include <stdlib.h>

#include "src/internal.h"

struct cgc__family {
  CUgraphExec exec;
  atomic_bool busy;
  cgc_graph_t holder;   /* the member whose nodes the executable has now; NULL: not said (busy) */
  cgc_graph_t* members; /* (busy) */
  atomic_int n_members; /* written under busy */
  int cap_members;
};

static bool claim(struct cgc__family* f) {
  bool expected = false;
  return atomic_compare_exchange_strong_explicit(&f->busy, &expected, true, memory_order_acquire,
                                                 memory_order_relaxed);
}

static void claim_waiting(struct cgc__family* f) {
  while (!claim(f)) sched_yield(); /* a launch of another member: over in microseconds */
}

static void unclaim(struct cgc__family* f) { atomic_store_explicit(&f->busy, false, memory_order_release); }

/* The executable takes `g`'s nodes (claimed, context current). */
static cgc_status_t switch_to(struct cgc__family* f, cgc_graph_t g, const char* func) {
  if (f->holder == g) return CGC_SUCCESS;
  CUgraphExecUpdateResultInfo result = {CU_GRAPH_EXEC_UPDATE_SUCCESS, NULL, NULL};
  CUresult r;
  CGC_RELAXED(r = CGC_DRV(cuGraphExecUpdate)(f->exec, g->graph, &result));
  if (r != CUDA_SUCCESS) {
    /* A refused update changes nothing (CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE); after another
     * error what the executable holds is not said, and the next launch updates it again. */
    if (r != CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE) f->holder = NULL;
    cgc_status_t st = cgc__cu_fail(r, func, "cuGraphExecUpdate");
    cgc__append(" (switching graph %p's family executable to it: update result %d)", (void*)g, (int)result.result);
    return st;
  }
  f->holder = g;
  return CGC_SUCCESS;
}

bool cgc__family_launch_held(cgc_graph_t g, CUstream stream, CUresult* r) {
  struct cgc__family* f = g->family;
  if (!claim(f)) return false;
  bool held = f->holder == g;
  if (held) *r = CGC_DRV(cuGraphLaunch)(f->exec, stream);
  unclaim(f);
  return held;
}

cgc_status_t cgc__family_enter(cgc_graph_t g, const char* func) {
  struct cgc__family* f = g->family;
  if (!claim(f))
    return cgc__fail(CGC_ERROR_INVALID_STATE, func,
                     "another thread is launching, uploading or joining a graph of graph %p's family: members of a "
                     "family launch one at a time (they share one executable)",
                     (void*)g);
  cgc_status_t st = switch_to(f, g, func);
  if (st != CGC_SUCCESS) unclaim(f);
  return st;
}

void cgc__family_exit(cgc_graph_t g) { unclaim(g->family); }

cgc_status_t cgc__family_leave(cgc_graph_t g, const char* func) {
  struct cgc__family* f = g->family;
  cgc_status_t st = CGC_SUCCESS;
  claim_waiting(f);
  int n = atomic_load(&f->n_members), at = 0;
  while (at < n && f->members[at] != g) at++;
  if (at < n) f->members[at] = f->members[n - 1];
  atomic_store(&f->n_members, at < n ? n - 1 : n);
  n = atomic_load(&f->n_members);
  /* The executable must not keep the nodes of a graph that goes: their kernels' modules may be
   * unloaded with it. It takes another member's, whose launch would have switched it anyway. */
  if (f->holder == g) {
    f->holder = NULL;
    if (n > 0) st = switch_to(f, f->members[0], func);
  }
  unclaim(f);
  g->family = NULL;
  g->exec = NULL;
  if (n > 0) return st;
  CGC_RELAXED(st = CGC_CU(func, cuGraphExecDestroy(f->exec)));
  free(f->members);
  free(f);
  return st;
}

static bool add_member(struct cgc__family* f, cgc_graph_t g) {
  int n = atomic_load(&f->n_members);
  if (n == f->cap_members) {
    int cap = f->cap_members ? 2 * f->cap_members : 8;
    cgc_graph_t* grown = realloc(f->members, (size_t)cap * sizeof *grown);
    if (grown == NULL) return false;
    f->members = grown;
    f->cap_members = cap;
  }
  f->members[n] = g;
  atomic_store(&f->n_members, n + 1);
  return true;
}

cgc_status_t cgc__family_join(cgc_graph_t graph, cgc_graph_t leader, const char* func) {
  struct cgc__family* made = NULL;
  struct cgc__family* f = leader->family;
  if (f == NULL) { /* the leader's executable becomes the family's */
    made = calloc(1, sizeof *made);
    if (made == NULL) return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
    made->exec = leader->exec;
    made->holder = leader;
    atomic_init(&made->busy, false);
    atomic_init(&made->n_members, 0);
    if (!add_member(made, leader)) {
      free(made);
      return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
    }
    f = made;
  } else {
    claim_waiting(f);
  }
  cgc_status_t st = CGC_SUCCESS;
  /* The trial: the executable takes the graph's nodes, or the driver says why it cannot. */
  CUgraphExecUpdateResultInfo result = {CU_GRAPH_EXEC_UPDATE_SUCCESS, NULL, NULL};
  CUresult r;
  CGC_RELAXED(r = CGC_DRV(cuGraphExecUpdate)(f->exec, graph->graph, &result));
  if (r == CUDA_SUCCESS && !add_member(f, graph)) {
    st = cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
    f->holder = NULL; /* it holds the graph's nodes, which is no member's */
  } else if (r != CUDA_SUCCESS) {
    graph->family_result = (int)result.result;
    if (r != CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE) f->holder = NULL; /* see switch_to */
    st = cgc__fail(r == CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE ? CGC_ERROR_NOT_SUPPORTED : cgc__status_from_cu(r), func,
                   "graph %p cannot share leader %p's executable: cuGraphExecUpdate refused it (update result %d); "
                   "it keeps its own (cgc_graph_info's family_result says why)",
                   (void*)graph, (void*)leader, (int)result.result);
  } else {
    f->holder = graph;
    CUgraphExec own = graph->exec; /* NULL for a graph made to join (a restore's) */
    graph->family_result = 0;
    graph->exec = f->exec;
    graph->family = f;
    atomic_store(&graph->uploaded, 0);
    /* A replay of its own executable still running keeps it until it completes. */
    if (own != NULL) CGC_RELAXED(CGC_DRV(cuGraphExecDestroy)(own));
  }
  if (made != NULL && (f->holder == NULL || st == CGC_SUCCESS)) {
    leader->family = made; /* a family now (of one, when the executable must be updated back) */
    made = NULL;
  }
  if (made == NULL) unclaim(f);
  if (made != NULL) { /* refused, the executable unchanged: the leader stays as it was */
    free(made->members);
    free(made);
  }
  return st;
}

size_t cgc__family_size(cgc_graph_t g) {
  if (g->family == NULL) return g->exec != NULL ? 1 : 0;
  return (size_t)atomic_load(&g->family->n_members);
}
