/* Handle validation and retirement.
 *
 * Destroyed objects are poisoned and kept for a while in a quarantine ring before their memory
 * is freed: a second destroy, or a call with a stale handle, then reads CGC_MAGIC_DEAD from
 * memory that is still ours and fails cleanly. Once evicted the memory may be reused, so
 * detection is "the common case", as docs/CONTRACT.md promises, not a guarantee. */
#include <stdlib.h>

#include "src/internal.h"

enum { kQuarantine = 256 };
static pthread_mutex_t quarantine_lock = PTHREAD_MUTEX_INITIALIZER;
static void* quarantine[kQuarantine];
static size_t quarantine_next;

static const char* kind_name(uint32_t magic) {
  switch (magic) {
    case CGC_MAGIC_CONTEXT: return "context";
    case CGC_MAGIC_STREAM: return "stream";
    case CGC_MAGIC_EVENT: return "event";
    case CGC_MAGIC_GRAPH: return "graph";
    case CGC_MAGIC_POOL: return "pool";
    case CGC_MAGIC_COMM: return "communicator";
    case CGC_MAGIC_RNG: return "generator";
    case CGC_MAGIC_MODULE: return "module";
    case CGC_MAGIC_FUNCTION: return "function";
  }
  return "object";
}

cgc_status_t cgc__check_handle(const void* h, uint32_t magic, const char* func, const char* arg) {
  if (h == NULL) return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, "%s is NULL", arg);
  uint32_t seen = *(const volatile uint32_t*)h;
  if (seen == magic) return CGC_SUCCESS;
  if (seen == CGC_MAGIC_DEAD)
    return cgc__fail(CGC_ERROR_INVALID_HANDLE, func, "%s (%p) was already destroyed", arg, h);
  return cgc__fail(CGC_ERROR_INVALID_HANDLE, func, "%s (%p) is not a live cgc %s handle", arg, h,
                   kind_name(magic));
}

void cgc__retire(void* obj) {
  if (obj == NULL) return;
  *(volatile uint32_t*)obj = CGC_MAGIC_DEAD;
  cgc__mutex_lock(&quarantine_lock, CGC__LOCK_QUARANTINE);
  void* evicted = quarantine[quarantine_next];
  quarantine[quarantine_next] = obj;
  quarantine_next = (quarantine_next + 1) % kQuarantine;
  cgc__mutex_unlock(&quarantine_lock, CGC__LOCK_QUARANTINE);
  free(evicted);
}
