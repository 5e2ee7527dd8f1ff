/* The lock rule, made checkable.
 *
 * Every cgc lock has a rank (the lock order: a lock may be taken only while every lock the thread
 * holds ranks lower) and a temperature: a hot lock is one that cgc_malloc, cgc_free,
 * cgc_record_stream, cgc_event_record or cgc_graph_launch takes, and no hot lock may be held
 * across a driver call that can wait for the GPU (driver.h's CGC_DRIVER_WAITS, measured by
 * bench/driver_waits: on driver 580 cuEventRecord and kernel launches wait behind another
 * thread's cuMemFree). Inside a host function no driver call may be made at all.
 *
 * With CGC_LOCK_CHECK=1 in the environment (the tests run so: .bazelrc, run_tests.sh) each thread
 * records the cgc locks it holds, and a lock taken out of order, a waiting driver call under a
 * hot lock, or a driver call inside a host function prints what happened and aborts the process:
 * a test mode, never a production one. Without it the cost is one predictable branch per lock
 * and per driver call. */
#ifndef CGC_LOCKCHECK_H_
#define CGC_LOCKCHECK_H_

#include <pthread.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, rank, hot, what it guards): the one list of cgc's locks. Each is declared next to the
 * state it guards; the comment there says which driver calls may run under it. */
#define CGC_LOCKS(X)                                                                                   \
  X(INSPECT, 5, false, "a graph's inspect_lock (graph.c): its node counts, per-node updates")          \
  X(FUNCTIONS, 5, false, "a module's functions_lock (module.c): its function handles")                 \
  X(IMAGES, 6, false, "module.c's images_lock: images added by key, their modules for lookups")        \
  X(RECORD, 7, false, "recorder.c's record_lock: cgc_module_record's CUPTI subscription")              \
  X(CONDITION, 5, false, "conditional.c's condition_lock: loading the condition kernel")              \
  X(RNG, 10, true, "a generator's lock (rng.c): its seed, offset and capture state")                   \
  X(LOOP_STATES, 10, false, "conditional.c's loop_states_lock: a loop's generator states")              \
  X(ALLOC, 20, true, "a device allocator's lock (allocator.h): blocks, pools, fences")                 \
  X(REGISTRY, 30, true, "registry_lock (registry.c): the captures under way, fork/join bookkeeping")   \
  X(LOOP, 40, true, "rng.c's loop_lock: the generators of loop bodies")                                \
  X(KERNELS, 45, false, "rng.c's kernels_lock: the library's kernels, dead generators' slots")        \
  X(DEVICES, 45, false, "device.c's devices_lock: the per-device state, created once")                 \
  X(FENCE_STREAM, 45, false, "device.c's fence_lock: the fence stream, created once")                  \
  X(ORDER, 50, true, "a communicator's order_lock (nccl.c): the last event of its work")               \
  X(QUARANTINE, 60, true, "handle.c's quarantine_lock: retired handles")                              \
  X(RECORDED, 70, false, "module.c's recorded_lock: recorded images (taken inside the driver's loads)")

typedef enum cgc__lock_id {
#define CGC_LOCK_ENUM(name, rank, hot, what) CGC__LOCK_##name,
  CGC_LOCKS(CGC_LOCK_ENUM)
#undef CGC_LOCK_ENUM
      CGC__LOCK_COUNT
} cgc__lock_id_t;

/* > 0 while this thread runs a host function of cgc_launch_host_func (hostfn.c). */
#ifdef __cplusplus
extern thread_local int cgc__host_function_depth;
#else
extern _Thread_local int cgc__host_function_depth;
#endif

/* Set once, from CGC_LOCK_CHECK, when the driver is loaded (and by the first lock taken). */
extern bool cgc__lock_check_on;

void cgc__lock_acquired(cgc__lock_id_t id);
void cgc__lock_released(cgc__lock_id_t id);
/* A driver call is about to be made: `call` is its name (or the text of the call). */
void cgc__lock_check_call(const char* call);

static inline void cgc__lock_note_acquired(cgc__lock_id_t id) {
  if (__builtin_expect(cgc__lock_check_on, 0)) cgc__lock_acquired(id);
}
static inline void cgc__lock_note_released(cgc__lock_id_t id) {
  if (__builtin_expect(cgc__lock_check_on, 0)) cgc__lock_released(id);
}

/* pthread mutexes of cgc, checked. */
static inline void cgc__mutex_lock(pthread_mutex_t* m, cgc__lock_id_t id) {
  cgc__lock_note_acquired(id);
  pthread_mutex_lock(m);
}
static inline void cgc__mutex_unlock(pthread_mutex_t* m, cgc__lock_id_t id) {
  pthread_mutex_unlock(m);
  cgc__lock_note_released(id);
}

#ifdef __cplusplus
}
#endif

#endif /* CGC_LOCKCHECK_H_ */
