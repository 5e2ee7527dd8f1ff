/* The lock rule's check (lockcheck.h): per thread, the cgc locks held; a lock taken out of order,
 * a driver call that may wait under a hot lock, or any driver call inside a host function
 * aborts the process when CGC_LOCK_CHECK=1. */
#include "src/lockcheck.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/driver.h"

bool cgc__lock_check_on;
_Thread_local int cgc__host_function_depth;

/* How many of each lock this thread holds (a count, so that a check turned on while a lock was
 * held never goes below zero). */
static _Thread_local int held[CGC__LOCK_COUNT];

static const struct lock_info {
  const char* name;
  int rank;
  bool hot;
  const char* what;
} locks[CGC__LOCK_COUNT] = {
#define CGC_LOCK_INFO(name, rank, hot, what) {#name, rank, hot, what},
    CGC_LOCKS(CGC_LOCK_INFO)
#undef CGC_LOCK_INFO
};

__attribute__((constructor)) static void read_setting(void) {
  const char* v = getenv("CGC_LOCK_CHECK");
  cgc__lock_check_on = v != NULL && v[0] != '\0' && strcmp(v, "0") != 0;
}

static void held_list(char* out, size_t cap) {
  size_t used = 0;
  out[0] = '\0';
  for (int i = 0; i < CGC__LOCK_COUNT && used < cap; i++)
    if (held[i] > 0) used += (size_t)snprintf(out + used, cap - used, "%s%s", used ? ", " : "", locks[i].what);
}

static _Noreturn void violation(const char* fmt, const char* a, const char* b) {
  char list[1024];
  held_list(list, sizeof list);
  fprintf(stderr, "cgc lock check (CGC_LOCK_CHECK=1): ");
  fprintf(stderr, fmt, a, b);
  fprintf(stderr, "; this thread holds: %s\n", list[0] ? list : "no cgc lock");
  fflush(stderr);
  abort();
}

void cgc__lock_acquired(cgc__lock_id_t id) {
  for (int i = 0; i < CGC__LOCK_COUNT; i++)
    if (held[i] > 0 && locks[i].rank >= locks[id].rank)
      violation("%s taken out of order (after %s)", locks[id].what, locks[i].what);
  held[id]++;
}

void cgc__lock_released(cgc__lock_id_t id) {
  if (held[id] > 0) held[id]--;
}

/* The driver calls that never wait for the GPU, measured (bench/driver_waits, docs/DESIGN.md):
 * the only ones a hot lock may be held across. */
static bool never_waits(const char* call, size_t len) {
  static const char* const list[] = {
#define CGC_NEVER_WAITS_NAME(name) #name,
      CGC_DRIVER_NEVER_WAITS(CGC_NEVER_WAITS_NAME)
#undef CGC_NEVER_WAITS_NAME
  };
  for (size_t i = 0; i < sizeof list / sizeof list[0]; i++)
    if (strlen(list[i]) == len && strncmp(list[i], call, len) == 0) return true;
  return false;
}

void cgc__lock_check_call(const char* call) {
  size_t len = strcspn(call, "( ");
  char name[96];
  snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name ? len : sizeof name - 1), call);
  if (cgc__host_function_depth > 0)
    violation("%s called inside a host function, where the driver forbids CUDA calls%s", name, "");
  if (never_waits(call, len)) return;
  for (int i = 0; i < CGC__LOCK_COUNT; i++)
    if (held[i] > 0 && locks[i].hot)
      violation("%s, which can wait for the GPU, called while holding %s (a hot lock)", name, locks[i].what);
}
