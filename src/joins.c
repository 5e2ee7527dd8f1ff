/* Reuse after the join in captures a pool adopted (cgc_pool_adopt_capture: PyTorch's, or any
 * capture cgc did not begin). cgc sees the fork/join events of its own captures (registry.c), not
 * those of a framework that records and waits on events with the driver directly; the capture
 * graph shows them all. So, as PyTorch's allocator does with graph_capture_record_stream_reuse:
 * - a block freed during the capture after use on other streams of it keeps "free markers", the
 *   nodes each of those streams ended at then (cuStreamGetCaptureInfo);
 * - before a later allocation on the block's own stream, the ancestors of that stream's current
 *   nodes are walked backwards through the graph's edges; a block whose every marker is among
 *   them is ordered before anything the stream does next, in every replay, and goes back to the
 *   pool for it.
 * Only the thread that adopted the capture asks: it is the thread that ends it (PyTorch's
 * capture_end), so no other thread is ending it meanwhile (driver 580 crashes when a capture's
 * streams are queried while another thread ends it). Frees and allocations of other threads
 * keep the older rule: reuse at the capture's end. Graph queries may wait behind other threads'
 * driver calls, so every one runs with the allocator lock dropped. Only plain (full) edges are
 * followed: a programmatic edge orders less than completion. */
#include <stdlib.h>
#include <string.h>

#include "src/allocator.h"

static _Thread_local char adopter_token;

const void* cgc__adopter_token(void) { return &adopter_token; }

bool cgc__joins_mark_here(cgc_pool_t pool) {
  return pool->adopting && pool->adopter == &adopter_token && cgc__drv.cuGraphNodeGetDependencies != NULL;
}

/* Appends `n` nodes to `*list` (grown as needed); false when out of host memory. */
static bool append_nodes(void*** list, size_t* len, size_t* cap, const CUgraphNode* nodes, size_t n) {
  if (*len + n > *cap) {
    size_t want = *cap ? *cap : 8;
    while (want < *len + n) want *= 2;
    void** grown = realloc(*list, want * sizeof *grown);
    if (grown == NULL) return false;
    *list = grown;
    *cap = want;
  }
  for (size_t i = 0; i < n; i++) (*list)[(*len)++] = (void*)nodes[i];
  return true;
}

void cgc__joins_mark(cgc__block_t* b, uint64_t capture) {
  void** markers = NULL;
  size_t n = 0, cap = 0;
  bool ok = b->n_uses > 0;
  for (size_t i = 0; ok && i < b->n_uses; i++) {
    CUstream cu = b->uses[i].cu;
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t id = 0;
    const CUgraphNode* ends = NULL;
    size_t n_ends = 0;
    /* A use on the legacy or the per-thread stream (the handle names another thread's stream
     * here), one settled with a fence already (recorded outside the capture, or its stream has
     * gone and its address may name another), or a stream no longer (or never) in this capture:
     * nothing in the graph orders it, so the block waits for the capture's end. */
    ok = b->uses[i].fence == NULL && cu != NULL && cu != CU_STREAM_LEGACY && cu != CU_STREAM_PER_THREAD &&
         CGC_DRV(cuStreamGetCaptureInfo)(cu, &status, &id, NULL, &ends, &n_ends) == CUDA_SUCCESS &&
         status == CU_STREAM_CAPTURE_STATUS_ACTIVE && id == capture && append_nodes(&markers, &n, &cap, ends, n_ends);
  }
  if (!ok) {
    free(markers);
    return;
  }
  b->markers = markers;
  b->n_markers = n;
  b->has_markers = true;
}

/* ---- the walk: ancestors of one stream's current nodes ---- */

/* Kept between allocations of the adopter, one per stream of the capture (a list on the pool): a
 * stream's nodes only grow, and the ancestors of its earlier nodes are ancestors of its later
 * ones, so each node is visited once per stream. `seen` is an open-addressing set of node
 * addresses (NULL: empty). A walk that could not finish (out of host memory, a query refused) is
 * kept as `failed`: that stream's blocks then wait for the capture's end, and no walk is retried
 * at every allocation. */
#define CGC_JOIN_WALKS_MAX 8 /* streams walked per capture; blocks of others wait for the end */
struct cgc__join_walk {
  uint64_t key;
  bool failed;
  void** seen;
  size_t n, cap; /* cap: a power of two, or 0 */
  struct cgc__join_walk* next;
};

static size_t slot_of(const void* node, size_t cap) {
  uint64_t h = (uint64_t)(uintptr_t)node * 0x9E3779B97F4A7C15ull;
  return (size_t)(h >> 17) & (cap - 1);
}

static bool seen(const struct cgc__join_walk* w, const void* node) {
  if (w->cap == 0) return false;
  for (size_t i = slot_of(node, w->cap);; i = (i + 1) & (w->cap - 1)) {
    if (w->seen[i] == node) return true;
    if (w->seen[i] == NULL) return false;
  }
}

/* Adds `node` (not yet seen); false when out of host memory. */
static bool add_seen(struct cgc__join_walk* w, void* node) {
  if (2 * (w->n + 1) > w->cap) {
    size_t cap = w->cap ? 2 * w->cap : 256;
    void** grown = calloc(cap, sizeof *grown);
    if (grown == NULL) return false;
    for (size_t i = 0; i < w->cap; i++) {
      if (w->seen[i] == NULL) continue;
      size_t j = slot_of(w->seen[i], cap);
      while (grown[j] != NULL) j = (j + 1) & (cap - 1);
      grown[j] = w->seen[i];
    }
    free(w->seen);
    w->seen = grown;
    w->cap = cap;
  }
  size_t i = slot_of(node, w->cap);
  while (w->seen[i] != NULL) i = (i + 1) & (w->cap - 1);
  w->seen[i] = node;
  w->n++;
  return true;
}

static void free_walk(struct cgc__join_walk* w) {
  if (w == NULL) return;
  free(w->seen);
  free(w);
}

/* (lock held) Takes the walk of `key` out of the pool's list, or makes one; NULL when the list is
 * full or out of host memory. */
static struct cgc__join_walk* take_walk(cgc_pool_t pool, uint64_t key) {
  size_t n = 0;
  for (struct cgc__join_walk** p = &pool->join_walk; *p != NULL; p = &(*p)->next, n++) {
    if ((*p)->key != key) continue;
    struct cgc__join_walk* w = *p;
    *p = w->next;
    w->next = NULL;
    return w;
  }
  if (n >= CGC_JOIN_WALKS_MAX) return NULL;
  struct cgc__join_walk* w = calloc(1, sizeof *w);
  if (w != NULL) w->key = key;
  return w;
}

/* Adds the ancestors of `stream`'s current nodes in capture `capture` (themselves included) to
 * `w`; false when the walk could not finish (then what `w` holds may lack ancestors). */
static bool walk_back(struct cgc__join_walk* w, CUstream stream, uint64_t capture) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  const CUgraphNode* ends = NULL;
  size_t n_ends = 0;
  if (CGC_DRV(cuStreamGetCaptureInfo)(stream, &status, &id, NULL, &ends, &n_ends) != CUDA_SUCCESS ||
      status != CU_STREAM_CAPTURE_STATUS_ACTIVE || id != capture)
    return false;
  void** stack = NULL;
  size_t depth = 0, cap = 0;
  bool ok = append_nodes(&stack, &depth, &cap, ends, n_ends);
  CUgraphNode* deps = NULL;
  CUgraphEdgeData* edges = NULL;
  size_t deps_cap = 0;
  while (ok && depth > 0) {
    CUgraphNode node = (CUgraphNode)stack[--depth];
    if (seen(w, node)) continue; /* its ancestors were walked when it was added */
    size_t n = 0;
    ok = add_seen(w, node) && CGC_DRV(cuGraphNodeGetDependencies)(node, NULL, NULL, &n) == CUDA_SUCCESS;
    if (!ok || n == 0) continue;
    if (n > deps_cap) {
      CUgraphNode* d = realloc(deps, n * sizeof *d);
      CUgraphEdgeData* e = d != NULL ? realloc(edges, n * sizeof *e) : NULL;
      if (d != NULL) deps = d;
      if (e != NULL) edges = e;
      ok = d != NULL && e != NULL;
      if (ok) deps_cap = n;
    }
    ok = ok && CGC_DRV(cuGraphNodeGetDependencies)(node, deps, edges, &n) == CUDA_SUCCESS;
    for (size_t i = 0; ok && i < n; i++) {
      bool full_edge = edges[i].type == CU_GRAPH_DEPENDENCY_TYPE_DEFAULT && edges[i].from_port == 0;
      if (full_edge && !seen(w, deps[i])) ok = append_nodes(&stack, &depth, &cap, &deps[i], 1);
    }
  }
  free(stack);
  free(deps);
  free(edges);
  return ok;
}

/* A block found waiting before the lock was dropped: it is the same one after, if it is still
 * in the pool's list with the same free sequence. */
struct candidate {
  cgc__block_t* block;
  uint64_t free_seq;
  bool joined;
};

static bool is_candidate(const cgc__block_t* b, const cgc__stream_ref_t* ref) {
  return b->has_markers && b->stream == ref->key;
}

bool cgc__joins_reclaim(struct cgc__allocator* a, cgc_pool_t pool, const cgc__stream_ref_t* ref) {
  if (pool->deferred == NULL || !cgc__joins_mark_here(pool)) return false;
  size_t n = 0, n_markers = 0;
  for (cgc__block_t* b = pool->deferred; b != NULL; b = b->next_waiting) {
    if (!is_candidate(b, ref)) continue;
    n++;
    n_markers += b->n_markers;
  }
  if (n == 0) return false;
  for (struct cgc__join_walk* w = pool->join_walk; w != NULL; w = w->next)
    if (w->key == ref->key && w->failed) return false; /* this stream's blocks wait for the end */
  /* Copies: another thread may release a block (the capture's end) while the lock is dropped. */
  size_t released = 0;
  struct cgc__join_walk* w = NULL;
  struct candidate* cands = calloc(n, sizeof *cands);
  size_t* marker_start = calloc(n + 1, sizeof *marker_start);
  void** markers = calloc(n_markers ? n_markers : 1, sizeof *markers);
  if (cands == NULL || marker_start == NULL || markers == NULL) goto out; /* no reuse before the end */
  w = take_walk(pool, ref->key);
  if (w == NULL) goto out;
  size_t k = 0, m = 0;
  for (cgc__block_t* b = pool->deferred; b != NULL; b = b->next_waiting) {
    if (!is_candidate(b, ref)) continue;
    cands[k] = (struct candidate){b, b->free_seq, false};
    marker_start[k++] = m;
    if (b->n_markers > 0) memcpy(markers + m, b->markers, b->n_markers * sizeof *markers);
    m += b->n_markers;
  }
  marker_start[n] = m;
  uint64_t capture = pool->capture_id;
  pool->internal_refs++; /* alive while the lock is dropped; the caller dissolves it if unused */
  cgc__alloc_unlock(a);

  w->failed = !walk_back(w, ref->cu, capture);
  for (size_t i = 0; !w->failed && i < n; i++) {
    bool joined = true;
    for (size_t j = marker_start[i]; joined && j < marker_start[i + 1]; j++) joined = seen(w, markers[j]);
    cands[i].joined = joined;
  }

  cgc__alloc_lock(a);
  pool->internal_refs--;
  bool same_capture = pool->recording && pool->adopting && pool->capture_id == capture;
  for (size_t i = 0; same_capture && i < n; i++) {
    if (!cands[i].joined) continue;
    for (cgc__block_t** p = &pool->deferred; *p != NULL; p = &(*p)->next_waiting) {
      cgc__block_t* b = *p;
      if (b != cands[i].block || b->free_seq != cands[i].free_seq || !b->has_markers) continue;
      *p = b->next_waiting;
      cgc__alloc_release_block(a, b); /* drops its uses and markers */
      released++;
      break;
    }
  }
  if (same_capture) { /* kept for the stream's next allocation (a failed one marks the stream) */
    if (w->failed) {
      free(w->seen);
      w->seen = NULL;
      w->n = w->cap = 0;
    }
    w->next = pool->join_walk;
    pool->join_walk = w;
    w = NULL;
  }
out: /* lock held */
  free_walk(w); /* host memory only: no driver call under the lock */
  free(cands);
  free(marker_start);
  free(markers);
  return released > 0;
}

void cgc__joins_forget(cgc_pool_t pool) {
  while (pool->join_walk != NULL) {
    struct cgc__join_walk* w = pool->join_walk;
    pool->join_walk = w->next;
    free_walk(w);
  }
}
