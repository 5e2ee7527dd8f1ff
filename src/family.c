/* Families (1.6): graphs of one structure sharing one executable.
 *
 * A member's own executable is freed when it joins; the family's (the first leader's) is updated
 * in place to a member's nodes (cuGraphExecUpdate, no device synchronisation) before a launch of
 * a member it does not hold, so that graphs that differ only in their nodes' parameters (one per
 * batch size) hold one executable's device memory and one instantiation. The executable's
 * launches run one after another on the device, as every executable's do, so members replay one
 * at a time, in launch order, whatever their streams.
 *
 * A switch touches only the nodes that differ where it can: a member whose graph pairs node by
 * node with the executable's source graph (the same kinds in the same order, the same edges, the
 * same launch attributes, copies and sets) differs from it in some kernel nodes' parameters and
 * event nodes' events; switching from one such member to another sets the nodes either differs in
 * (cuGraphExecKernelNodeSetParams, cuGraphExecEventRecordNodeSetEvent), each from the member's own
 * node. Otherwise, or when most nodes differ anyway, the whole executable is updated. The pairing
 * is found at a member's first switch, so joins and restores do not pay for it.
 *
 * A restore's members join unbuilt (graph->deferred): no CUgraph, no trial update. A member's
 * first use (launch, upload, info, dump, save, native) builds its graph here, under the claim;
 * its first switch is its trial. If the driver refuses that update the member is instantiated
 * alone (`own`): it stays a member, launches its own executable, and says why (family_result).
 *
 * State: `busy` is claimed (compare-and-swap) by the one call that switches and launches,
 * uploads, joins or leaves; it guards `holder`, the member list, each member's `deferred` and
 * `graph` while unbuilt, and the writes of `n_own` and a member's `family_own` (atomics, read
 * without it by cgc_graph_info and cgc_graph_native_exec). The launch path never waits for it:
 * a launch that finds it taken is refused (the holder may be inside cuGraphLaunch, which can wait
 * for the GPU). Joins, leaves, and inspections that read a member's graph (its first count, a
 * dump, a save, the native graph), which are not on the launch path, wait for it, yielding; they
 * hold the member's inspect_lock first (which keeps the family alive: a member leaves only under
 * its own), and nothing holding the claim takes an inspect_lock. graph.c calls in here; nothing
 * here calls graph.c (a build goes through the member's cgc__deferred_t). */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/internal.h"

/* A member, and how its nodes pair with the executable's (found at its first switch). */
struct member {
  cgc_graph_t graph;
  enum { NOT_PAIRED_YET, PAIRED, NOT_PAIRED } pairing;
  CUgraphNode* nodes; /* PAIRED: its graph's nodes, node i paired with the source's node i */
  uint32_t* differs;  /* PAIRED: the indices whose parameters differ from the source's, ascending */
  size_t n_differs;
  bool tried;         /* the executable took its nodes once (a join's trial, or a switch) */
  CUgraphExec own;    /* the driver refused its first switch (it joined unbuilt): its own */
};

struct cgc__family {
  CUgraphExec exec;
  atomic_bool busy;
  cgc_graph_t holder;     /* the member whose nodes the executable has now; NULL: not said (busy) */
  struct member* members; /* (busy) */
  atomic_int n_members;   /* written under busy */
  int cap_members;
  atomic_int n_own;       /* members with an executable of their own (written under busy) */
  /* The graph the executable was instantiated from, whose nodes a per-node switch names: its
   * graph's (the first leader's exec_graph or graph) while that graph is a member, the family's
   * own (source_owned) once it has left. Its nodes, their kinds and its edges are read at the
   * first switch that pairs a member (busy). */
  CUgraph source;
  bool source_owned;
  /* Once it is the family's, the modules of its graph's kernels, held: reading its nodes names
   * their functions (their graph released its own references when it left). */
  struct cgc__use* source_uses;
  size_t n_source_uses;
  bool source_read;
  size_t n_nodes;
  CUgraphNode* source_nodes;
  CUgraphNodeType* source_types;
  size_t n_edges;
  uint64_t* source_edges; /* (from << 32 | to) by node index, sorted; edges with data: not paired */
};

static bool claim(struct cgc__family* f) {
  bool expected = false;
  return atomic_compare_exchange_strong_explicit(&f->busy, &expected, true, memory_order_acquire,
                                                 memory_order_relaxed);
}

static void claim_waiting(struct cgc__family* f) {
  while (!claim(f)) sched_yield(); /* a launch (microseconds), or a member's build (milliseconds) */
}

static void unclaim(struct cgc__family* f) { atomic_store_explicit(&f->busy, false, memory_order_release); }

static struct member* member_of(struct cgc__family* f, cgc_graph_t g) {
  int n = atomic_load(&f->n_members);
  for (int i = 0; i < n; i++)
    if (f->members[i].graph == g) return &f->members[i];
  return NULL;
}

static void forget_pairing(struct member* m) {
  free(m->nodes);
  free(m->differs);
  m->nodes = NULL;
  m->differs = NULL;
  m->n_differs = 0;
  m->pairing = NOT_PAIRED_YET;
}

/* ---- pairing a member's nodes with the source's (claimed, context current) ---- */

/* The launch attributes a kernel node may carry (CUDA 13.0's, those valid for graph nodes), all
 * of which a per-node switch leaves as the source has them: a member pairs only if each reads the
 * same (or fails to read on both: the driver reports no preferred cluster size). The others are
 * for streams or launches alone, and a node refuses to be asked for them. */
#define NODE_LAUNCH_ATTRIBUTES(X)                    \
  CGC_REPORTED_NODE_ATTRIBUTES(X)                    \
  X(CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION) \
  X(CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE) \
  X(CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING)
static const CUlaunchAttributeID kNodeLaunchAttributes[] = {
#define NODE_LAUNCH_ATTRIBUTE_(id) id,
    NODE_LAUNCH_ATTRIBUTES(NODE_LAUNCH_ATTRIBUTE_)
#undef NODE_LAUNCH_ATTRIBUTE_
};

static int by_value(const void* a, const void* b) {
  uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
  return x < y ? -1 : x > y;
}

typedef struct node_index {
  CUgraphNode node;
  uint32_t index;
} node_index_t;

static int by_node(const void* a, const void* b) {
  uintptr_t x = (uintptr_t)((const node_index_t*)a)->node, y = (uintptr_t)((const node_index_t*)b)->node;
  return x < y ? -1 : x > y;
}

/* `graph`'s nodes (*nodes, n) and its edges as sorted (from << 32 | to) index pairs (*edges).
 * false when the driver cannot say, or an edge carries data (a programmatic dependency): such a
 * graph is switched by whole updates only. */
static bool read_graph(CUgraph graph, CUgraphNode** nodes, size_t* n, uint64_t** edges, size_t* n_edges) {
  *nodes = NULL;
  *edges = NULL;
  *n = *n_edges = 0;
  if (cgc__drv.cuGraphGetEdges == NULL || CGC_DRV(cuGraphGetNodes)(graph, NULL, n) != CUDA_SUCCESS ||
      CGC_DRV(cuGraphGetEdges)(graph, NULL, NULL, NULL, n_edges) != CUDA_SUCCESS)
    return false;
  *nodes = calloc(*n + 1, sizeof **nodes);
  *edges = calloc(*n_edges + 1, sizeof **edges);
  CUgraphNode* from = calloc(*n_edges + 1, sizeof *from);
  CUgraphNode* to = calloc(*n_edges + 1, sizeof *to);
  CUgraphEdgeData* data = calloc(*n_edges + 1, sizeof *data);
  node_index_t* index = calloc(*n + 1, sizeof *index);
  bool ok = *nodes && *edges && from && to && data && index &&
            CGC_DRV(cuGraphGetNodes)(graph, *nodes, n) == CUDA_SUCCESS &&
            CGC_DRV(cuGraphGetEdges)(graph, from, to, data, n_edges) == CUDA_SUCCESS;
  for (size_t i = 0; ok && i < *n; i++) index[i] = (node_index_t){(*nodes)[i], (uint32_t)i};
  if (ok) qsort(index, *n, sizeof *index, by_node);
  static const CUgraphEdgeData kPlain;
  for (size_t e = 0; ok && e < *n_edges; e++) {
    node_index_t key_from = {from[e], 0}, key_to = {to[e], 0};
    const node_index_t* a = bsearch(&key_from, index, *n, sizeof *index, by_node);
    const node_index_t* b = bsearch(&key_to, index, *n, sizeof *index, by_node);
    ok = a != NULL && b != NULL && memcmp(&data[e], &kPlain, sizeof kPlain) == 0;
    if (ok) (*edges)[e] = (uint64_t)a->index << 32 | b->index;
  }
  if (ok) qsort(*edges, *n_edges, sizeof **edges, by_value);
  free(from);
  free(to);
  free(data);
  free(index);
  if (!ok) {
    free(*nodes);
    free(*edges);
    *nodes = NULL;
    *edges = NULL;
  }
  return ok;
}

static bool read_source(struct cgc__family* f) {
  if (f->source_read) return f->source_nodes != NULL;
  f->source_read = true;
  if (!read_graph(f->source, &f->source_nodes, &f->n_nodes, &f->source_edges, &f->n_edges)) return false;
  f->source_types = calloc(f->n_nodes + 1, sizeof *f->source_types);
  bool ok = f->source_types != NULL;
  for (size_t i = 0; ok && i < f->n_nodes; i++)
    ok = CGC_DRV(cuGraphNodeGetType)(f->source_nodes[i], &f->source_types[i]) == CUDA_SUCCESS;
  if (!ok) {
    free(f->source_nodes);
    f->source_nodes = NULL;
  }
  return ok;
}

/* The bytes of a kernel node's arguments are the same in both (a kernel of one layout). */
static bool same_arguments(CUfunction fn, const CUDA_KERNEL_NODE_PARAMS* a, const CUDA_KERNEL_NODE_PARAMS* b) {
  if (a->kernelParams == NULL || b->kernelParams == NULL || a->extra != NULL || b->extra != NULL) return false;
  for (size_t j = 0;; j++) {
    size_t offset = 0, size = 0;
    if (CGC_DRV(cuFuncGetParamInfo)(fn, j, &offset, &size) != CUDA_SUCCESS) return true;
    if (memcmp(a->kernelParams[j], b->kernelParams[j], size) != 0) return false;
  }
}

/* Node i of the member (m) against the source's (s), both of kind `type`: *differs when a
 * per-node switch must set it; false when one cannot switch it (the member does not pair). */
static bool compare_node(CUgraphNodeType type, CUgraphNode m, CUgraphNode s, bool* differs) {
  *differs = false;
  switch (type) {
    case CU_GRAPH_NODE_TYPE_EMPTY: return true;
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD: {
      CUevent a = NULL, b = NULL;
      if (CGC_DRV(cuGraphEventRecordNodeGetEvent)(m, &a) != CUDA_SUCCESS ||
          CGC_DRV(cuGraphEventRecordNodeGetEvent)(s, &b) != CUDA_SUCCESS)
        return false;
      *differs = a != b;
      return true;
    }
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      CUDA_MEMSET_NODE_PARAMS a, b;
      memset(&a, 0, sizeof a);
      memset(&b, 0, sizeof b);
      return CGC_DRV(cuGraphMemsetNodeGetParams)(m, &a) == CUDA_SUCCESS &&
             CGC_DRV(cuGraphMemsetNodeGetParams)(s, &b) == CUDA_SUCCESS && memcmp(&a, &b, sizeof a) == 0;
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY: {
      CUDA_MEMCPY3D a, b;
      memset(&a, 0, sizeof a);
      memset(&b, 0, sizeof b);
      return CGC_DRV(cuGraphMemcpyNodeGetParams)(m, &a) == CUDA_SUCCESS &&
             CGC_DRV(cuGraphMemcpyNodeGetParams)(s, &b) == CUDA_SUCCESS && memcmp(&a, &b, sizeof a) == 0;
    }
    case CU_GRAPH_NODE_TYPE_KERNEL: break;
    default: return false;
  }
  CUDA_KERNEL_NODE_PARAMS a, b;
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  if (CGC_DRV(cuGraphKernelNodeGetParams)(m, &a) != CUDA_SUCCESS ||
      CGC_DRV(cuGraphKernelNodeGetParams)(s, &b) != CUDA_SUCCESS || a.func == NULL || b.func == NULL)
    return false;
  *differs = a.func != b.func || a.gridDimX != b.gridDimX || a.gridDimY != b.gridDimY || a.gridDimZ != b.gridDimZ ||
             a.blockDimX != b.blockDimX || a.blockDimY != b.blockDimY || a.blockDimZ != b.blockDimZ ||
             a.sharedMemBytes != b.sharedMemBytes || !same_arguments(a.func, &a, &b);
  for (size_t a = 0; a < sizeof kNodeLaunchAttributes / sizeof *kNodeLaunchAttributes; a++) {
    CUlaunchAttributeID id = kNodeLaunchAttributes[a];
    CUlaunchAttributeValue x, y;
    memset(&x, 0, sizeof x);
    memset(&y, 0, sizeof y);
    CUresult rx = CGC_DRV(cuGraphKernelNodeGetAttribute)(m, (CUlaunchAttributeID)id, &x);
    CUresult ry = CGC_DRV(cuGraphKernelNodeGetAttribute)(s, (CUlaunchAttributeID)id, &y);
    if ((rx == CUDA_SUCCESS) != (ry == CUDA_SUCCESS) || (rx == CUDA_SUCCESS && memcmp(&x, &y, sizeof x) != 0))
      return false;
  }
  return true;
}

/* Finds how member m pairs with the source (its first switch). */
static void pair(struct cgc__family* f, struct member* m) {
  m->pairing = NOT_PAIRED;
  if (cgc__drv.cuFuncGetParamInfo == NULL || !read_source(f)) return;
  CUgraphNode* nodes = NULL;
  uint64_t* edges = NULL;
  size_t n = 0, n_edges = 0;
  uint32_t* differs = NULL;
  size_t n_differs = 0;
  bool ok = read_graph(m->graph->graph, &nodes, &n, &edges, &n_edges) && n == f->n_nodes && n_edges == f->n_edges &&
            memcmp(edges, f->source_edges, n_edges * sizeof *edges) == 0;
  if (ok) differs = calloc(n + 1, sizeof *differs);
  ok = ok && differs != NULL;
  for (size_t i = 0; ok && i < n; i++) {
    CUgraphNodeType type;
    bool node_differs = false;
    ok = CGC_DRV(cuGraphNodeGetType)(nodes[i], &type) == CUDA_SUCCESS && type == f->source_types[i] &&
         compare_node(type, nodes[i], f->source_nodes[i], &node_differs);
    if (ok && node_differs) differs[n_differs++] = (uint32_t)i;
    /* A member differing in more than half the nodes is always switched whole (switch_to): not
     * worth pairing further. */
    if (n_differs > n / 2) ok = false;
  }
  free(edges);
  if (!ok) {
    free(nodes);
    free(differs);
    return;
  }
  m->nodes = nodes;
  m->differs = differs;
  m->n_differs = n_differs;
  m->pairing = PAIRED;
}

/* ---- switching ---- */

/* Sets node i of the executable to member `to`'s. */
static CUresult set_node(struct cgc__family* f, const struct member* to, uint32_t i) {
  if (f->source_types[i] == CU_GRAPH_NODE_TYPE_EVENT_RECORD) {
    CUevent event = NULL;
    CUresult r = CGC_DRV(cuGraphEventRecordNodeGetEvent)(to->nodes[i], &event);
    return r != CUDA_SUCCESS ? r : CGC_DRV(cuGraphExecEventRecordNodeSetEvent)(f->exec, f->source_nodes[i], event);
  }
  CUDA_KERNEL_NODE_PARAMS p;
  memset(&p, 0, sizeof p);
  CUresult r = CGC_DRV(cuGraphKernelNodeGetParams)(to->nodes[i], &p);
  return r != CUDA_SUCCESS ? r : CGC_DRV(cuGraphExecKernelNodeSetParams)(f->exec, f->source_nodes[i], &p);
}

/* The nodes `from` or `to` differ in from the source, each set to `to`'s; false when a node
 * could not be (the executable then holds a mix, and is updated whole). */
static bool switch_nodes(struct cgc__family* f, const struct member* from, const struct member* to) {
  size_t a = 0, b = 0;
  while (a < from->n_differs || b < to->n_differs) {
    uint32_t i;
    if (b == to->n_differs || (a < from->n_differs && from->differs[a] < to->differs[b])) i = from->differs[a++];
    else if (a == from->n_differs || to->differs[b] < from->differs[a]) i = to->differs[b++];
    else i = (a++, to->differs[b++]);
    if (set_node(f, to, i) != CUDA_SUCCESS) return false;
  }
  return true;
}

/* Builds member `g`'s graph if it joined unbuilt (claimed, context current). A failure leaves
 * it unbuilt: the next use tries again. */
static cgc_status_t build_member(cgc_graph_t g, const char* func) {
  cgc__deferred_t* d = g->deferred;
  if (d == NULL) return CGC_SUCCESS;
  CUgraph built = NULL;
  cgc_status_t st = d->build(d, g->done, &built, func);
  if (st != CGC_SUCCESS) {
    cgc__append(" (building graph %p, restored as a family member, at its first use)", (void*)g);
    return st;
  }
  g->graph = built;
  g->deferred = NULL;
  d->drop(d);
  return CGC_SUCCESS;
}

/* The driver refused to switch the executable to member `to`, whose join had no trial (claimed,
 * context current): it is instantiated alone, as a join's refusal would have left it. */
static cgc_status_t instantiate_own(struct cgc__family* f, struct member* to, int update_result, const char* func) {
  CUgraphExec own = NULL;
  cgc_status_t st = cgc__cu_fail(cgc__instantiate(to->graph->graph, &own), func, "cuGraphInstantiateWithFlags");
  if (st != CGC_SUCCESS) {
    cgc__append(" (graph %p, whose family's executable could not take its nodes: update result %d)",
                (void*)to->graph, update_result);
    return st;
  }
  to->own = own;
  to->tried = true;
  atomic_fetch_add(&f->n_own, 1);
  atomic_store(&to->graph->family_result, update_result);
  atomic_store(&to->graph->family_own, own);
  cgc__warn(func, "graph %p could not share its family's executable (update result %d): it has its own",
            (void*)to->graph, update_result);
  return CGC_SUCCESS;
}

/* The executable takes `g`'s nodes (claimed, context current), and *exec is what to launch: the
 * family's, or the member's own. Node by node when both members pair with the source and
 * together differ in at most half its nodes (past that, setting nodes one at a time costs more
 * than the driver's whole update), else by cuGraphExecUpdate. */
static cgc_status_t switch_to(struct cgc__family* f, cgc_graph_t g, CUgraphExec* exec, const char* func) {
  struct member* to = member_of(f, g);
  *exec = to != NULL && to->own != NULL ? to->own : f->exec;
  if (f->holder == g || *exec != f->exec) return CGC_SUCCESS;
  CGC_TRY(build_member(g, func));
  struct member* from = f->holder != NULL ? member_of(f, f->holder) : NULL;
  if (to != NULL && to->pairing == NOT_PAIRED_YET) pair(f, to);
  if (from != NULL && to != NULL && from->pairing == PAIRED && to->pairing == PAIRED &&
      from->n_differs + to->n_differs <= f->n_nodes / 2) {
    bool done;
    CGC_RELAXED(done = switch_nodes(f, from, to));
    if (done) {
      to->tried = true;
      f->holder = g;
      return CGC_SUCCESS;
    }
    f->holder = NULL; /* a mix of both: the whole update below sets every node */
  }
  CUgraphExecUpdateResultInfo result = {CU_GRAPH_EXEC_UPDATE_SUCCESS, NULL, NULL};
  CUresult r;
  CGC_RELAXED(r = CGC_DRV(cuGraphExecUpdate)(f->exec, g->graph, &result));
  if (r == CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE && to != NULL && !to->tried) {
    /* Its trial, refused (nothing changed): it runs alone from now on. */
    CGC_TRY(instantiate_own(f, to, (int)result.result, func));
    *exec = to->own;
    return CGC_SUCCESS;
  }
  if (r != CUDA_SUCCESS) {
    /* A refused update changes nothing (CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE); after another
     * error what the executable holds is not said, and the next launch updates it again. */
    if (r != CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE) f->holder = NULL;
    cgc_status_t st = cgc__cu_fail(r, func, "cuGraphExecUpdate");
    cgc__append(" (switching graph %p's family executable to it: update result %d)", (void*)g, (int)result.result);
    return st;
  }
  if (to != NULL) to->tried = true;
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

cgc_status_t cgc__family_enter(cgc_graph_t g, CUgraphExec* exec, const char* func) {
  struct cgc__family* f = g->family;
  if (!claim(f))
    return cgc__fail(CGC_ERROR_INVALID_STATE, func,
                     "another thread is launching, uploading or joining a graph of graph %p's family: members of a "
                     "family launch one at a time (they share one executable)",
                     (void*)g);
  cgc_status_t st = switch_to(f, g, exec, func);
  if (st != CGC_SUCCESS) unclaim(f);
  return st;
}

void cgc__family_exit(cgc_graph_t g) { unclaim(g->family); }

cgc_status_t cgc__family_hold(cgc_graph_t g, const char* func) {
  struct cgc__family* f = g->family;
  claim_waiting(f);
  cgc_status_t st = build_member(g, func);
  if (st != CGC_SUCCESS) unclaim(f);
  return st;
}

void* cgc__family_exec(cgc_graph_t g) {
  CUgraphExec own = atomic_load(&g->family_own);
  return own != NULL ? own : g->exec;
}

/* The source graph is no more (its modules could not be held when its graph left): members are
 * switched by whole updates from now on (claimed). */
static void drop_source(struct cgc__family* f) {
  int n = atomic_load(&f->n_members);
  for (int i = 0; i < n; i++) {
    forget_pairing(&f->members[i]);
    f->members[i].pairing = NOT_PAIRED;
  }
  if (f->source_owned) CGC_DRV(cuGraphDestroy)(f->source);
  free(f->source_nodes);
  free(f->source_types);
  free(f->source_edges);
  f->source = NULL;
  f->source_owned = false;
  f->source_read = true;
  f->source_nodes = NULL;
  f->source_types = NULL;
  f->source_edges = NULL;
}

/* The source graph becomes the family's as `g`, its graph's, leaves (claimed): with the modules
 * of g's kernels held, else dropped. */
static void take_source(struct cgc__family* f, cgc_graph_t g) {
  f->source_owned = true;
  size_t n = 0;
  for (size_t i = 0; i < g->n_uses; i++) n += strcmp(g->uses[i].ops->kind, "module") == 0;
  f->source_uses = calloc(n + 1, sizeof *f->source_uses);
  if (f->source_uses == NULL) {
    drop_source(f);
    return;
  }
  for (size_t i = 0; i < g->n_uses; i++)
    if (strcmp(g->uses[i].ops->kind, "module") == 0) {
      f->source_uses[f->n_source_uses++] = g->uses[i];
      g->uses[i].ops->retain(g->uses[i].object);
    }
}

static void free_family(struct cgc__family* f) {
  if (f->source_owned) CGC_DRV(cuGraphDestroy)(f->source);
  for (size_t i = 0; i < f->n_source_uses; i++) f->source_uses[i].ops->release(f->source_uses[i].object);
  free(f->source_uses);
  free(f->source_nodes);
  free(f->source_types);
  free(f->source_edges);
  free(f->members);
  free(f);
}

cgc_status_t cgc__family_leave(cgc_graph_t g, const char* func) {
  struct cgc__family* f = g->family;
  cgc_status_t st = CGC_SUCCESS;
  claim_waiting(f);
  /* The executable must not keep the nodes of a graph that goes: their kernels' modules may be
   * unloaded with it. It takes another member's, whose launch would have switched it anyway. */
  int n = atomic_load(&f->n_members);
  if (f->holder == g) {
    /* A built member that shares. When only unbuilt ones remain (a restore's, holding the same
     * modules as the graph that goes), none is built for it: the next launch updates the
     * executable whole. */
    cgc_graph_t next = NULL;
    for (int i = 0; i < n && next == NULL; i++) {
      const struct member* o = &f->members[i];
      if (o->graph != g && o->own == NULL && o->graph->deferred == NULL) next = o->graph;
    }
    CUgraphExec unused;
    if (next != NULL && switch_to(f, next, &unused, func) != CGC_SUCCESS) {
      /* The graph goes all the same; the next launch of a member updates the executable whole. */
      char why[512];
      snprintf(why, sizeof why, "%s", cgc_last_error());
      cgc__warn(func, "graph %p leaves its family, whose executable could not take another member's nodes now: %s",
                (void*)g, why);
    }
    if (f->holder == g) f->holder = NULL;
  }
  struct member* m = member_of(f, g);
  if (m != NULL) {
    forget_pairing(m);
    if (m->own != NULL) {
      CGC_RELAXED(CGC_DRV(cuGraphExecDestroy)(m->own)); /* a replay still running keeps it */
      atomic_fetch_sub(&f->n_own, 1);
      atomic_store(&g->family_own, NULL);
    }
    *m = f->members[n - 1];
    atomic_store(&f->n_members, n - 1);
    n--;
  }
  /* The source graph stays, the family's now, while members remain: per-node switches name its
   * nodes (the graph's reset destroys what is left of it). */
  if (!f->source_owned && f->source != NULL && f->source == g->exec_graph) {
    g->exec_graph = NULL;
    take_source(f, g);
  } else if (!f->source_owned && f->source != NULL && f->source == g->graph) {
    g->graph = NULL;
    take_source(f, g);
  }
  unclaim(f);
  g->family = NULL;
  g->exec = NULL;
  if (n > 0) return st;
  CGC_RELAXED(st = CGC_CU(func, cuGraphExecDestroy(f->exec)));
  free_family(f);
  return st;
}

static bool add_member(struct cgc__family* f, cgc_graph_t g, bool tried) {
  int n = atomic_load(&f->n_members);
  if (n == f->cap_members) {
    int cap = f->cap_members ? 2 * f->cap_members : 8;
    struct member* grown = realloc(f->members, (size_t)cap * sizeof *grown);
    if (grown == NULL) return false;
    f->members = grown;
    f->cap_members = cap;
  }
  f->members[n] = (struct member){.graph = g, .pairing = NOT_PAIRED_YET, .tried = tried};
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
    made->source = leader->exec_graph != NULL ? leader->exec_graph : leader->graph;
    made->holder = leader;
    atomic_init(&made->busy, false);
    atomic_init(&made->n_members, 0);
    atomic_init(&made->n_own, 0);
    if (!add_member(made, leader, true)) {
      free(made);
      return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
    }
    f = made;
  } else {
    claim_waiting(f);
  }
  cgc_status_t st = CGC_SUCCESS;
  /* The trial: the executable takes the graph's nodes, or the driver says why it cannot. An
   * unbuilt graph has its trial at its first switch. */
  bool unbuilt = graph->deferred != NULL;
  cgc_graph_t before = f->holder;
  CUgraphExecUpdateResultInfo result = {CU_GRAPH_EXEC_UPDATE_SUCCESS, NULL, NULL};
  CUresult r = CUDA_SUCCESS;
  if (!unbuilt) CGC_RELAXED(r = CGC_DRV(cuGraphExecUpdate)(f->exec, graph->graph, &result));
  if (r == CUDA_SUCCESS && !add_member(f, graph, !unbuilt)) {
    st = cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
    if (!unbuilt) f->holder = NULL; /* it holds the graph's nodes, which is no member's */
  } else if (r != CUDA_SUCCESS) {
    atomic_store(&graph->family_result, (int)result.result);
    if (r != CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE) f->holder = NULL; /* see switch_to */
    st = cgc__fail(r == CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE ? CGC_ERROR_NOT_SUPPORTED : cgc__status_from_cu(r), func,
                   "graph %p cannot share leader %p's executable: cuGraphExecUpdate refused it (update result %d); "
                   "it keeps its own (cgc_graph_info's family_result says why)",
                   (void*)graph, (void*)leader, (int)result.result);
  } else {
    if (!unbuilt) f->holder = graph;
    CUgraphExec own = graph->exec; /* NULL for a graph made to join (a restore's) */
    atomic_store(&graph->family_result, 0);
    graph->exec = f->exec;
    graph->family = f;
    atomic_store(&graph->uploaded, 0);
    /* A replay of its own executable still running keeps it until it completes. */
    if (own != NULL) CGC_RELAXED(CGC_DRV(cuGraphExecDestroy)(own));
  }
  if (st != CGC_SUCCESS && f->holder == NULL && before != NULL) {
    /* The trial left the executable holding the graph's nodes, or nothing said: it takes the
     * holder's back now (a refused join changes nothing), else its next launch updates it. */
    CUgraphExecUpdateResultInfo ignored = {CU_GRAPH_EXEC_UPDATE_SUCCESS, NULL, NULL};
    CUresult back;
    CGC_RELAXED(back = CGC_DRV(cuGraphExecUpdate)(f->exec, before->graph, &ignored));
    if (back == CUDA_SUCCESS) f->holder = before;
  }
  if (made != NULL && (f->holder == NULL || st == CGC_SUCCESS)) {
    leader->family = made; /* a family now (of one, when the executable must be updated back) */
    made = NULL;
  }
  if (made == NULL) unclaim(f);
  if (made != NULL) free_family(made); /* refused, the executable unchanged: the leader stays as it was */
  return st;
}

size_t cgc__family_size(cgc_graph_t g, int* result) {
  struct cgc__family* f = g->family;
  *result = atomic_load(&g->family_result);
  if (f == NULL) return g->exec != NULL ? 1 : 0;
  if (atomic_load(&g->family_own) != NULL) return 1;
  return (size_t)(atomic_load(&f->n_members) - atomic_load(&f->n_own));
}
