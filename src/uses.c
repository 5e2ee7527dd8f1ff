/* A graph's uses: the objects a capture, then its graph, holds (generators, communicators, host
 * functions' data, modules' code), each with its small table of operations (internal.h's
 * cgc__use_ops_t), so that graphs know no kind of object by name. How they move from a capture to
 * its graph, and how they are released once the graph's replays no longer need them. */
#include <stdlib.h>

#include "src/internal.h"

void cgc__release_uses(struct cgc__use* uses, size_t n_uses) {
  for (size_t i = 0; i < n_uses; i++) {
    if (!uses[i].settled) uses[i].ops->capture_done(uses[i].object, false);
    uses[i].ops->release(uses[i].object);
  }
}

bool cgc__take_uses(cgc__graph_uses_t* out, const struct cgc__use* uses, size_t n_uses) {
  *out = (cgc__graph_uses_t){NULL, 0, 0, false};
  if (n_uses == 0) return true;
  out->uses = calloc(n_uses, sizeof *out->uses);
  if (out->uses == NULL) return false;
  for (int pass = 0; pass < 2; pass++) {
    for (size_t i = 0; i < n_uses; i++) {
      bool prologue = uses[i].ops->before_launch != NULL || uses[i].ops->after_launch != NULL;
      if (prologue != (pass == 0)) continue;
      struct cgc__use* u = &out->uses[out->n_uses++];
      *u = uses[i];
      if (!u->settled) u->amount = u->ops->capture_done(u->object, true);
      if (prologue) out->n_prologue++;
      if (u->ops->after_launch != NULL) out->ordered = true;
    }
  }
  return true;
}

bool cgc__releases_after_replays(const struct cgc__use* uses, size_t n_uses) {
  for (size_t i = 0; i < n_uses; i++)
    if (uses[i].ops->release_after_replays) return true;
  return false;
}

void cgc__order_fence_stream_after(struct cgc__device* dev, CUevent last_replay, const struct cgc__use* uses,
                                   size_t n_uses, const char* func) {
  bool ordered = false;
  for (size_t i = 0; i < n_uses; i++) ordered = ordered || uses[i].ops->ordered_after_replays;
  if (!ordered || last_replay == NULL) return;
  CUstream fence = NULL;
  if (cgc__device_fence_stream(dev, &fence, func) == CGC_SUCCESS &&
      CGC_DRV(cuStreamWaitEvent)(fence, last_replay, 0) == CUDA_SUCCESS)
    return;
  CGC_RELAXED(CGC_DRV(cuEventSynchronize)(last_replay));
}

void cgc__release_taken(struct cgc__use* uses, size_t n_uses) {
  for (size_t i = 0; i < n_uses; i++) uses[i].ops->release(uses[i].object);
  free(uses);
}
