/* A verifying save (1.6, CGC_SAVE_VERIFY): the bytes a save wrote, rebuilt into graphs in the
 * saving process (restore.c) and each replayed beside the graph it was saved from, from the same
 * contents of the saved pools; the pools must be byte-equal after both.
 *
 * The checks of a save see each node's parameters as the driver reports them; what it does not
 * report (a preferred cluster size) or what the restore finds another way (a kernel by its
 * module's key) only shows in what the graphs write. Both graphs use the same addresses, the
 * saved pools' memory, so one replay of each from the same starting bytes must write the same
 * bytes. Each graph in turn: the pools' backed bytes copied to the host (`before`), the graph
 * replayed (an executable instantiated from its own CUgraph, so that no family or launch of the
 * caller's is touched), its result copied (`want`), `before` copied back, the rebuilt graph
 * replayed, its result (`got`) compared with `want`, and `want` copied back: the pools end as
 * the graph's own replay left them.
 *
 * It also measures what a restore of the bytes and each graph's first launch take on the device
 * besides the pools: free device memory (cuMemGetInfo) before the rebuild loads its modules,
 * after the first graph of each structure is instantiated and uploaded (what a family restore
 * makes), and after the others are. The rebuild is a restore's own steps, so the difference is
 * what a restore takes; anything else allocating on the device meanwhile shows in it. All the
 * rebuilt executables are alive at once for it (as after a restore), so a verifying save needs
 * that much device memory besides the graphs' own; where it has not, nothing is measured and the
 * check makes one executable at a time.
 *
 * Locks: a graph's CUgraph is instantiated under its inspect_lock (and its family's claim for a
 * member), as a save reads it; the replays and copies hold nothing. Nothing else may run on the
 * saved pools' memory meanwhile (the contract says so). */
#include <stdlib.h>
#include <string.h>

#include "src/saved_file.h"

/* Graph `g`'s own CUgraph instantiated (context current), after the replays of the graph
 * launched before: the copy replays its completion record too (the graph's `done`, which must
 * complete only after every replay of the graph), so none of them may be running then. */
static cgc_status_t instantiate_original(cgc_graph_t g, CUgraphExec* exec, const char* func) {
  /* Waited for with no lock held (the graph is the caller's, not reset meanwhile: the contract). */
  CUevent done = g->done;
  if (done != NULL) CGC_TRY(CGC_CU(func, cuEventSynchronize(done)));
  cgc__mutex_lock(&g->inspect_lock, CGC__LOCK_INSPECT);
  bool held = false;
  cgc_status_t st = CGC_SUCCESS;
  if (g->family != NULL) held = (st = cgc__family_hold(g, func)) == CGC_SUCCESS;
  if (st == CGC_SUCCESS && (g->graph == NULL || done == NULL))
    st = cgc__fail(CGC_ERROR_INVALID_STATE, func, "graph %p was reset while it was saved", (void*)g);
  if (st == CGC_SUCCESS) st = cgc__cu_fail(cgc__instantiate(g->graph, exec), func, "cuGraphInstantiateWithFlags");
  if (held) cgc__family_exit(g);
  cgc__mutex_unlock(&g->inspect_lock, CGC__LOCK_INSPECT);
  return st;
}

/* Every saved pool's backed bytes, into `host` (`to_host`) or from it, on `stream`, waited for
 * (the legacy default stream would wait for other threads' streams, and break their captures). */
static cgc_status_t copy_pools(const cgc__pool_layout_t* layouts, size_t n_pools, unsigned char* host, bool to_host,
                               CUstream stream, const char* func) {
  for (size_t i = 0; i < n_pools; i++) {
    const cgc__pool_layout_t* l = &layouts[i];
    if (l->backed == 0) continue;
    CGC_TRY(to_host ? CGC_CU(func, cuMemcpyDtoHAsync(host, (CUdeviceptr)l->base, (size_t)l->backed, stream))
                    : CGC_CU(func, cuMemcpyHtoDAsync((CUdeviceptr)l->base, host, (size_t)l->backed, stream)));
    host += l->backed;
  }
  return CGC_CU(func, cuStreamSynchronize(stream));
}

/* One replay of `exec` on `stream`, waited for. */
static cgc_status_t replay(CUgraphExec exec, CUstream stream, const char* func) {
  CGC_TRY(CGC_CU(func, cuGraphLaunch(exec, stream)));
  return CGC_CU(func, cuStreamSynchronize(stream));
}

/* The device memory taken between two readings of free memory (none if more is free after). */
static uint64_t taken(size_t free_before, size_t free_after) {
  return free_before > free_after ? (uint64_t)(free_before - free_after) : 0;
}

/* The rebuilt graphs that are the first of their structure (`firsts`), or the others,
 * instantiated and uploaded on `stream` into execs[], waited for. */
static CUresult make_rebuilt(const cgc__rebuilt_t* rebuilt, bool firsts, CUgraphExec* execs, CUstream stream) {
  for (size_t gi = 0; gi < rebuilt->n_graphs; gi++) {
    if (rebuilt->first_alike[gi] != firsts) continue;
    CUresult r = cgc__instantiate(rebuilt->graphs[gi], &execs[gi]);
    if (r != CUDA_SUCCESS) {
      execs[gi] = NULL;
      return r;
    }
    if ((r = CGC_DRV(cuGraphUpload)(execs[gi], stream)) != CUDA_SUCCESS) return r;
  }
  return CGC_DRV(cuStreamSynchronize)(stream);
}

/* The measure (see the top), with free device memory `free_at_start` read before the rebuild
 * (and `free_rebuilt` after it, for the debug log): every rebuilt graph instantiated and uploaded
 * into execs[], the first of each structure first. Best effort: where the device has no room for
 * all of them at once, or a reading fails, what was made is given back, nothing is measured (the
 * measures stay 0) and the check makes one executable at a time; no error is recorded, as the
 * save has not failed. */
static void measure(const cgc__rebuilt_t* rebuilt, CUgraphExec* execs, CUstream stream, size_t free_at_start,
                    size_t free_rebuilt, uint64_t* restore_bytes, uint64_t* family_restore_bytes, const char* func) {
  size_t free_with_firsts = 0, free_with_all = 0, device_total = 0;
  CUresult r = make_rebuilt(rebuilt, true, execs, stream);
  if (r == CUDA_SUCCESS) r = CGC_DRV(cuMemGetInfo)(&free_with_firsts, &device_total);
  if (r == CUDA_SUCCESS) r = make_rebuilt(rebuilt, false, execs, stream);
  if (r == CUDA_SUCCESS) r = CGC_DRV(cuMemGetInfo)(&free_with_all, &device_total);
  if (r != CUDA_SUCCESS) {
    for (size_t gi = 0; gi < rebuilt->n_graphs; gi++) {
      if (execs[gi] != NULL) CGC_DRV(cuGraphExecDestroy)(execs[gi]);
      execs[gi] = NULL;
    }
    cgc__log("%s: the verifying rebuild measured nothing: making every executable at once failed (CUresult %d)",
             func, (int)r);
    return;
  }
  /* Both from the same readings, so that the families' is never more than the whole's. */
  *family_restore_bytes = taken(free_at_start, free_with_firsts);
  *restore_bytes = *family_restore_bytes + taken(free_with_firsts, free_with_all);
  if (cgc__log_on())
    cgc__log("%s: the verifying rebuild took %.1f MiB of device memory loading modules and building graphs, %.1f MiB "
             "instantiating the first graph of each structure, %.1f MiB the others",
             func, (double)taken(free_at_start, free_rebuilt) / (1 << 20),
             (double)taken(free_rebuilt, free_with_firsts) / (1 << 20),
             (double)taken(free_with_firsts, free_with_all) / (1 << 20));
}

/* NOT_SAVABLE naming the first byte where `got` differs from `want`, or SUCCESS. */
static cgc_status_t compare(size_t graph, const cgc__pool_layout_t* layouts, size_t n_pools, const unsigned char* want,
                            const unsigned char* got, const char* func) {
  for (size_t i = 0; i < n_pools; i++) {
    size_t n = (size_t)layouts[i].backed;
    if (memcmp(want, got, n) != 0) {
      size_t first = 0, differing = 0;
      while (want[first] == got[first]) first++;
      for (size_t b = first; b < n; b++) differing += want[b] != got[b];
      return cgc__fail(CGC_ERROR_NOT_SAVABLE, func,
                       "graph %zu, rebuilt from the saved bytes, wrote other bytes than the graph itself: saved pool "
                       "%zu (base %#llx) differs first at offset %zu, %zu of its %zu backed bytes differ (a launch "
                       "attribute the driver does not report, another build of a kernel under an added image's key, "
                       "or replays that are not deterministic)",
                       graph, i, (unsigned long long)layouts[i].base, first, differing, n);
    }
    want += n;
    got += n;
  }
  return CGC_SUCCESS;
}

cgc_status_t cgc__verify_saved(struct cgc__device* dev, const cgc_graph_t* graphs, size_t n_graphs,
                               const cgc__pool_layout_t* layouts, size_t n_pools, const void* data, size_t size,
                               uint64_t* restore_bytes, uint64_t* family_restore_bytes, const char* func) {
  *restore_bytes = 0;
  *family_restore_bytes = 0;
  size_t total = 0;
  for (size_t i = 0; i < n_pools; i++) {
    if (layouts[i].backed > SIZE_MAX / 4 - total)
      return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "the saved pools are too large to verify");
    total += (size_t)layouts[i].backed;
  }
  /* Copies and stream work that would break a Global capture under way on another thread. */
  CUstreamCaptureMode mode = cgc__relaxed_begin();
  cgc__rebuilt_t rebuilt = {0};
  unsigned char* before = malloc(total + 1);
  unsigned char* want = malloc(total + 1);
  unsigned char* got = malloc(total + 1);
  CUgraphExec* execs = calloc(n_graphs + 1, sizeof *execs); /* the rebuilt graphs', while measured */
  CUstream stream = NULL;
  uint64_t measured_all = 0, measured_families = 0;
  cgc_status_t st = CGC_SUCCESS;
  if (before == NULL || want == NULL || got == NULL || execs == NULL) {
    st = cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory (verifying needs three copies of %zu bytes)",
                   total);
    goto out;
  }
  CGC_TRY_GOTO(st, CGC_CU(func, cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING)), out);
  size_t free_at_start = 0, free_rebuilt = 0, device_total = 0;
  bool measuring = CGC_DRV(cuMemGetInfo)(&free_at_start, &device_total) == CUDA_SUCCESS;
  CGC_TRY_GOTO(st, cgc__graphs_rebuild(dev, data, size, &rebuilt, func), out);
  if (rebuilt.n_graphs != n_graphs) {
    st = cgc__fail(CGC_ERROR_INVALID_STATE, func, "the saved bytes rebuilt %zu graphs of %zu", rebuilt.n_graphs,
                   n_graphs);
    goto out;
  }
  if (measuring && cgc__log_on()) CGC_DRV(cuMemGetInfo)(&free_rebuilt, &device_total);
  if (measuring)
    measure(&rebuilt, execs, stream, free_at_start, free_rebuilt, &measured_all, &measured_families, func);
  for (size_t gi = 0; gi < n_graphs && st == CGC_SUCCESS; gi++) {
    /* The rebuilt graph's executable: the measure's, or made for this graph alone. */
    CUgraphExec original = NULL, again = execs[gi], alone = NULL;
    bool have_before = false, have_want = false;
    st = instantiate_original(graphs[gi], &original, func);
    if (st == CGC_SUCCESS && again == NULL) {
      st = cgc__cu_fail(cgc__instantiate(rebuilt.graphs[gi], &alone), func, "cuGraphInstantiateWithFlags");
      if (st != CGC_SUCCESS) alone = NULL;
      again = alone;
    }
    if (st == CGC_SUCCESS) have_before = (st = copy_pools(layouts, n_pools, before, true, stream, func)) == CGC_SUCCESS;
    if (st == CGC_SUCCESS) st = replay(original, stream, func);
    if (st == CGC_SUCCESS) have_want = (st = copy_pools(layouts, n_pools, want, true, stream, func)) == CGC_SUCCESS;
    if (st == CGC_SUCCESS) st = copy_pools(layouts, n_pools, before, false, stream, func);
    if (st == CGC_SUCCESS) st = replay(again, stream, func);
    if (st == CGC_SUCCESS) st = copy_pools(layouts, n_pools, got, true, stream, func);
    if (st == CGC_SUCCESS) st = compare(gi, layouts, n_pools, want, got, func);
    /* The pools as the graph's own replay left them (as they were, if it did not run), whatever
     * the rebuilt one did. */
    if (have_want || have_before) {
      cgc_status_t back = copy_pools(layouts, n_pools, have_want ? want : before, false, stream, func);
      if (st == CGC_SUCCESS) st = back;
    }
    if (original != NULL) CGC_RELAXED(CGC_DRV(cuGraphExecDestroy)(original));
    if (alone != NULL) CGC_RELAXED(CGC_DRV(cuGraphExecDestroy)(alone));
    if (st != CGC_SUCCESS) cgc__append(" (verifying the save of graph %zu)", gi);
  }
  if (st == CGC_SUCCESS) {
    *restore_bytes = measured_all;
    *family_restore_bytes = measured_families;
  }
out:
  for (size_t gi = 0; execs != NULL && gi < n_graphs; gi++)
    if (execs[gi] != NULL) CGC_RELAXED(CGC_DRV(cuGraphExecDestroy)(execs[gi]));
  if (stream != NULL) CGC_DRV(cuStreamDestroy)(stream);
  cgc__relaxed_end(mode);
  free(before);
  free(want);
  free(got);
  free(execs);
  cgc__graphs_rebuilt_free(&rebuilt);
  return st;
}
