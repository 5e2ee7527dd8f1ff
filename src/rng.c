/* Graph-safe random numbers: Philox generators whose draws replay like eager calls.
 *
 * Eager draws pass the generator's seed and offset to the kernel and advance the offset by the
 * draw's size rounded up to a multiple of 4. Inside a cgc capture the kernel reads seed and
 * base offset from two device slots owned by the generator and gets only its position within
 * the graph; the capture adds the generator to its uses, and the graph records how far one
 * replay advances it. Each cgc_graph_launch of such a graph first writes the generator's
 * current seed and offset into the slots (a one-thread kernel on the launch stream) and
 * advances the offset, so N replays produce what N eager runs of the captured calls produce
 * from the same state (SEMANTICS 17, PyTorch's CUDAGeneratorImpl in spirit).
 *
 * The slots are per generator: graphs that draw from one generator must not run concurrently
 * on different streams (each replay's prologue rewrites them), as with PyTorch.
 *
 * Draws inside conditional bodies: an IF or SWITCH body's draws simply take their positions in
 * the graph, as any captured draw. A WHILE body runs many times per replay, so each loop that
 * draws keeps, per generator, a state in device memory (conditional.c allocates it; the kernel
 * before the node zeroes it): how far the iterations so far moved the generator. The draw adds
 * its enclosing loops' states to its position, and a kernel at the end of each iteration moves
 * the state on by what one iteration consumes (P). Iteration i of a loop then draws what the
 * i-th iteration of an eager run draws. The graph reserves P * CGC_LOOP_EAGER_ITERATIONS of the
 * generator's offsets for the loop, so what follows the loop, and the next replay, never
 * overlaps it; an iteration past that many starts a new "lap", a counter word no other draw of
 * the replay uses (kernels/philox.cu). */
#include <stdlib.h>
#include <string.h>

#include "src/internal.h"

extern const unsigned char cgc__kernels_fatbin[];
extern const size_t cgc__kernels_fatbin_size;

struct cgc__kernels {
  CUmodule module;
  CUfunction uniform, normal, set_state, loop_advance;
  int generators; /* live generators of the device: the module stays while any exists */
};

struct cgc_rng_s {
  uint32_t magic;
  struct cgc__device* dev;
  pthread_mutex_t lock; /* guards seed, offset and the capture state */
  uint64_t seed, offset;
  uint64_t capture_id;     /* the capture drawing from it now (0: none) */
  uint64_t capture_offset; /* what that capture has consumed so far */
  CUdeviceptr slots;       /* [seed, offset, laps, unused] as the running replay sees them */
  atomic_int refs;         /* the user's handle + each capture and graph that draws from it */
};

enum { kSlots = 4 };

/* Guards every body's generator list and end_iteration (struct cgc__body's loop fields). Taken
 * inside a generator's lock, never across a driver call. */
static pthread_mutex_t loop_lock = PTHREAD_MUTEX_INITIALIZER;

/* Guards every device's `kernels` (and its count of generators) and the dead slots below. */
static pthread_mutex_t kernels_lock = PTHREAD_MUTEX_INITIALIZER;

/* Loads cgc's embedded kernels into `k` (context current, Relaxed mode). Nothing to undo here:
 * device_kernels unloads what was loaded when this fails. */
static cgc_status_t load_kernels(struct cgc__kernels* k, const char* func) {
  CGC_TRY(CGC_CU(func, cuModuleLoadData(&k->module, cgc__kernels_fatbin)));
  CGC_TRY(CGC_CU(func, cuModuleGetFunction(&k->uniform, k->module, "cgc_philox_uniform")));
  CGC_TRY(CGC_CU(func, cuModuleGetFunction(&k->normal, k->module, "cgc_philox_normal")));
  CGC_TRY(CGC_CU(func, cuModuleGetFunction(&k->set_state, k->module, "cgc_philox_set_state")));
  return CGC_CU(func, cuModuleGetFunction(&k->loop_advance, k->module, "cgc_philox_loop_advance"));
}

/* The device's kernels, loaded on first use (context current), counting one more generator.
 * Loading a module breaks a Global capture under way on another thread (measured on driver
 * 580): it runs in Relaxed mode. */
static cgc_status_t device_kernels(struct cgc__device* dev, struct cgc__kernels** out, const char* func) {
  cgc__mutex_lock(&kernels_lock, CGC__LOCK_KERNELS);
  cgc_status_t st = CGC_SUCCESS;
  if (dev->kernels == NULL) {
    struct cgc__kernels* k = calloc(1, sizeof *k);
    if (k == NULL) {
      st = cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
    } else {
      CGC_RELAXED(st = load_kernels(k, func));
      if (st == CGC_SUCCESS) {
        dev->kernels = k;
      } else {
        /* Unloading is unsafe during another thread's Global capture, as loading is. */
        if (k->module != NULL) CGC_RELAXED(CGC_DRV(cuModuleUnload)(k->module));
        free(k);
        cgc__append(" (loading cgc's embedded kernels: sm_80/sm_90 SASS and compute_90 PTX)");
      }
    }
  }
  if (st == CGC_SUCCESS) dev->kernels->generators++;
  *out = dev->kernels;
  cgc__mutex_unlock(&kernels_lock, CGC__LOCK_KERNELS);
  return st;
}

/* Slots of dead generators, kept for the device's next generators. A replay of a destroyed graph
 * may still read them: a graph's reset makes the device's fence stream wait for its last replay
 * before it drops the generator (ordered_after_replays), and the generator's death records
 * `retired` on that stream, so the slots are free once `retired` completes. They are reused then
 * (cgc_rng_create) and given back to the driver only when the device's last context goes: no
 * call on the way, create, destroy or a graph's destroy, waits for the device (a cuMemFree would
 * wait for every kernel of it). Guarded by kernels_lock; driver calls run outside it. */
struct dead_slots {
  struct cgc__device* dev;
  CUdeviceptr slots;
  CUevent retired; /* NULL: no record could be made, reuse waits for the device's release */
  struct dead_slots* next;
};
static struct dead_slots* dead;

/* Dead slots of `dev` that no replay reads any more, or 0 (the context is current). */
static CUdeviceptr take_dead_slots(struct cgc__device* dev) {
  cgc__mutex_lock(&kernels_lock, CGC__LOCK_KERNELS);
  struct dead_slots** at = &dead;
  struct dead_slots* found = NULL;
  for (; *at != NULL; at = &(*at)->next) {
    struct dead_slots* d = *at;
    /* cuEventQuery never waits; in Relaxed mode, as a query during another thread's Global
     * capture is an unsafe call. */
    if (d->dev != dev || d->retired == NULL) continue;
    CUresult q;
    CGC_RELAXED(q = CGC_DRV(cuEventQuery)(d->retired));
    if (q != CUDA_SUCCESS) continue;
    *at = d->next;
    found = d;
    break;
  }
  cgc__mutex_unlock(&kernels_lock, CGC__LOCK_KERNELS);
  if (found == NULL) return 0;
  CUdeviceptr slots = found->slots;
  CGC_DRV(cuEventDestroy)(found->retired);
  free(found);
  return slots;
}

void cgc__rng_device_release(struct cgc__device* dev) {
  cgc__mutex_lock(&kernels_lock, CGC__LOCK_KERNELS);
  struct dead_slots* mine = NULL;
  for (struct dead_slots** at = &dead; *at != NULL;) {
    struct dead_slots* d = *at;
    if (d->dev == dev) {
      *at = d->next;
      d->next = mine;
      mine = d;
    } else {
      at = &d->next;
    }
  }
  struct cgc__kernels* k = dev->kernels;
  if (k != NULL && k->generators == 0) {
    dev->kernels = NULL;
  } else {
    k = NULL;
  }
  cgc__mutex_unlock(&kernels_lock, CGC__LOCK_KERNELS);
  cgc__ctx_scope_t scope;
  bool in_ctx = cgc__ctx_enter(dev, &scope, "cgc_context_destroy") == CGC_SUCCESS;
  CUstreamCaptureMode previous = cgc__relaxed_begin();
  while (mine != NULL) { /* the last context goes: waiting for the device here is expected */
    struct dead_slots* d = mine;
    mine = d->next;
    if (in_ctx) {
      CGC_DRV(cuMemFree)(d->slots);
      if (d->retired != NULL) CGC_DRV(cuEventDestroy)(d->retired);
    }
    free(d);
  }
  if (in_ctx && k != NULL) CGC_DRV(cuModuleUnload)(k->module);
  cgc__relaxed_end(previous);
  if (in_ctx) cgc__ctx_leave(&scope);
  free(k);
}

cgc_status_t cgc_rng_create(cgc_context_t ctx, uint64_t seed, cgc_rng_t* out) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  CGC_CHECK_ARG(out != NULL, "out is NULL");
  *out = NULL;
  CGC_CHECK_HANDLE(ctx, CGC_MAGIC_CONTEXT);
  cgc__ctx_scope_t scope = {false};
  struct cgc__kernels* k = NULL; /* non-NULL: this generator is counted in k->generators */
  cgc_status_t st;
  cgc_rng_t rng = calloc(1, sizeof *rng);
  if (rng == NULL) {
    st = cgc__fail(CGC_ERROR_OUT_OF_MEMORY, __func__, "out of host memory");
    goto fail;
  }
  CGC_TRY_GOTO(st, cgc__ctx_enter(ctx->dev, &scope, __func__), fail);
  st = device_kernels(ctx->dev, &k, __func__);
  if (st != CGC_SUCCESS) {
    k = NULL;
    goto fail;
  }
  rng->slots = take_dead_slots(ctx->dev);
  if (rng->slots == 0) {
    CUresult r = cgc__relaxed_mem_alloc(&rng->slots, kSlots * sizeof(uint64_t));
    CGC_TRY_GOTO(st, cgc__cu_fail(r, __func__, "cuMemAlloc"), fail);
  }
  cgc__ctx_leave(&scope);
  pthread_mutex_init(&rng->lock, NULL);
  rng->magic = CGC_MAGIC_RNG;
  rng->dev = ctx->dev;
  rng->seed = seed;
  atomic_store(&rng->refs, 1);
  *out = rng;
  return CGC_SUCCESS;

fail:
  if (k != NULL) {
    cgc__mutex_lock(&kernels_lock, CGC__LOCK_KERNELS);
    k->generators--;
    cgc__mutex_unlock(&kernels_lock, CGC__LOCK_KERNELS);
  }
  cgc__ctx_leave(&scope);
  free(rng);
  return st;
}

/* The generator's death: its slots wait on the dead list for the replays that may still read
 * them (the fence stream waited for each of its graphs' last replays before they dropped it). */
static void rng_release(void* object) {
  cgc_rng_t rng = object;
  if (atomic_fetch_sub(&rng->refs, 1) != 1) return;
  struct dead_slots* d = malloc(sizeof *d);
  CUevent retired = NULL;
  cgc__ctx_scope_t scope;
  bool in_ctx = cgc__ctx_enter(rng->dev, &scope, "cgc_rng_destroy") == CGC_SUCCESS;
  if (in_ctx && d != NULL) {
    CUstream fence = NULL;
    if (cgc__device_fence_stream(rng->dev, &fence, "cgc_rng_destroy") == CGC_SUCCESS &&
        CGC_DRV(cuEventCreate)(&retired, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS &&
        CGC_DRV(cuEventRecord)(retired, fence) != CUDA_SUCCESS) {
      CGC_DRV(cuEventDestroy)(retired);
      retired = NULL;
    }
  }
  if (in_ctx) cgc__ctx_leave(&scope);
  cgc__mutex_lock(&kernels_lock, CGC__LOCK_KERNELS);
  if (d != NULL) {
    *d = (struct dead_slots){rng->dev, rng->slots, retired, dead};
    dead = d;
  } /* else out of host memory: 32 bytes of device memory stay unused until the process ends */
  rng->dev->kernels->generators--;
  cgc__mutex_unlock(&kernels_lock, CGC__LOCK_KERNELS);
  pthread_mutex_destroy(&rng->lock);
  cgc__retire(rng);
}

static void rng_retain(void* object) { atomic_fetch_add(&((cgc_rng_t)object)->refs, 1); }

cgc_status_t cgc_rng_destroy(cgc_rng_t rng) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  CGC_CHECK_HANDLE(rng, CGC_MAGIC_RNG);
  /* The handle dies now; graphs that draw from the generator keep its state until they go. */
  rng->magic = CGC_MAGIC_DEAD;
  rng_release(rng);
  return CGC_SUCCESS;
}

/* The capture that drew from the generator is over: what one replay consumes. */
static uint64_t rng_capture_done(void* object, bool kept) {
  (void)kept;
  cgc_rng_t rng = object;
  cgc__mutex_lock(&rng->lock, CGC__LOCK_RNG);
  uint64_t consumed = rng->capture_offset;
  rng->capture_id = 0;
  rng->capture_offset = 0;
  cgc__mutex_unlock(&rng->lock, CGC__LOCK_RNG);
  return consumed;
}

/* A replay that was not launched gives its numbers back, unless the generator moved on meanwhile
 * (as undo_draw). */
static void rng_launch_failed(void* object, uint64_t amount, uint64_t offset_before) {
  cgc_rng_t rng = object;
  cgc__mutex_lock(&rng->lock, CGC__LOCK_RNG);
  if (rng->offset == offset_before + amount) rng->offset = offset_before;
  cgc__mutex_unlock(&rng->lock, CGC__LOCK_RNG);
}

/* Before each replay: the generator's seed and offset into its device slots (a one-thread
 * kernel on the launch stream), then the offset advances by what one replay consumes. */
static CUresult rng_before_launch(void* object, uint64_t amount, CUstream stream, uint64_t stream_key,
                                  uint64_t* undo) {
  (void)stream_key;
  cgc_rng_t rng = object;
  cgc__mutex_lock(&rng->lock, CGC__LOCK_RNG);
  unsigned long long seed = rng->seed, offset = rng->offset;
  rng->offset += amount;
  cgc__mutex_unlock(&rng->lock, CGC__LOCK_RNG);
  *undo = offset;
  CUdeviceptr slots = rng->slots;
  void* args[] = {&slots, &seed, &offset};
  CUresult r = CGC_DRV(cuLaunchKernel)(rng->dev->kernels->set_state, 1, 1, 1, 1, 1, 1, 0, stream, args, NULL);
  if (r != CUDA_SUCCESS) rng_launch_failed(rng, amount, offset);
  return r;
}

static const cgc__use_ops_t rng_use_ops = {
    .kind = "generator",
    .retain = rng_retain,
    .release = rng_release,
    .capture_done = rng_capture_done,
    .before_launch = rng_before_launch,
    .launch_failed = rng_launch_failed,
    .ordered_after_replays = true, /* a replay still running reads the slots */
};

static uint64_t round4(uint64_t n) { return (n + 3) & ~(uint64_t)3; }

/* ---- draws inside WHILE loops ---- */

/* kernels/philox.cu's LoopChain and LoopAdvance, field for field: their sizes are the kernels'
 * (the chain has the device's 4 slots whatever depth the library allows, CGC__LOOP_DEPTH). */
enum { kLoopChainSlots = 4 };
typedef struct loop_chain {
  uint64_t state[kLoopChainSlots]; /* innermost first, 0 after the last */
} loop_chain_t;
typedef struct loop_advance {
  uint64_t amount[CGC__LOOP_GENERATORS];
  uint64_t laps[CGC__LOOP_GENERATORS];
  uint64_t cap;
  uint32_t n;
} loop_advance_t;
_Static_assert(sizeof(loop_chain_t) == 32 && sizeof(loop_advance_t) == 144,
               "loop_chain_t and loop_advance_t are kernel parameters: kernels/philox.cu's layout");
_Static_assert((int)CGC__LOOP_DEPTH <= (int)kLoopChainSlots, "the kernels take at most 4 enclosing loops");

/* The WHILE loops around `body`, innermost first, with their state memory. */
static cgc_status_t enclosing_loops(struct cgc__body* body, struct cgc__body** loops, CUdeviceptr* states, int* n,
                                    const char* func) {
  *n = 0;
  for (struct cgc__body* b = body; b != NULL; b = b->parent) {
    if (b->kind != CGC_CONDITIONAL_WHILE) continue;
    if (*n == CGC__LOOP_DEPTH)
      return cgc__fail(CGC_ERROR_CAPTURE_UNSUPPORTED, func,
                       "a generator's draw inside a WHILE loop nested in another WHILE loop is not supported: each "
                       "loop reserves %llu iterations of the generator's offsets per replay, and nested "
                       "reservations multiply; draw in the outer loop's body, or before the loops",
                       (unsigned long long)CGC_LOOP_EAGER_ITERATIONS);
    CGC_TRY(cgc__body_loop_states(b, &states[*n], func));
    loops[(*n)++] = b;
  }
  return CGC_SUCCESS;
}

static cgc_status_t loop_end_iteration(struct cgc__body* b, CUstream stream, const char* func);

/* Under the generator's lock: each loop's state for `rng` (a new one starts at the generator's
 * current position in the graph), into the draw's chain. */
static cgc_status_t chain_for(cgc_rng_t rng, struct cgc__body** loops, const CUdeviceptr* states, int n,
                              loop_chain_t* chain, const char* func) {
  cgc_status_t st = CGC_SUCCESS;
  cgc__mutex_lock(&loop_lock, CGC__LOCK_LOOP);
  for (int d = n - 1; d >= 0 && st == CGC_SUCCESS; d--) { /* outermost first */
    struct cgc__body* loop = loops[d];
    int j = 0;
    while (j < loop->n_generators && loop->generators[j].rng != rng) j++;
    if (j == loop->n_generators) {
      if (j == CGC__LOOP_GENERATORS) {
        st = cgc__fail(CGC_ERROR_CAPTURE_UNSUPPORTED, func,
                       "a WHILE loop draws from more than %d generators: not supported", CGC__LOOP_GENERATORS);
        break;
      }
      loop->generators[j] = (struct cgc__loop_generator){rng, rng->capture_offset};
      loop->n_generators++;
      loop->end_iteration = loop_end_iteration;
    }
    chain->state[d] = states[d] + (uint64_t)j * 4 * sizeof(uint64_t);
  }
  cgc__mutex_unlock(&loop_lock, CGC__LOCK_LOOP);
  return st;
}

/* The end of a WHILE body that drew: each generator's window for the loop, and the kernel that
 * moves the loop's states on at the end of every iteration. */
static cgc_status_t loop_end_iteration(struct cgc__body* b, CUstream stream, const char* func) {
  cgc__mutex_lock(&loop_lock, CGC__LOCK_LOOP);
  int n = b->n_generators;
  struct cgc__loop_generator generators[CGC__LOOP_GENERATORS] = {{0}};
  for (int j = 0; j < n; j++) generators[j] = b->generators[j];
  CUdeviceptr states = b->loop_states;
  cgc__mutex_unlock(&loop_lock, CGC__LOCK_LOOP);
  loop_advance_t advance = {.cap = CGC_LOOP_EAGER_ITERATIONS, .n = (uint32_t)n};
  cgc_status_t st = CGC_SUCCESS;
  for (int j = 0; j < n && st == CGC_SUCCESS; j++) {
    cgc_rng_t rng = generators[j].rng;
    cgc__mutex_lock(&rng->lock, CGC__LOCK_RNG);
    uint64_t per_iteration = rng->capture_offset - generators[j].begin;
    if (per_iteration > UINT64_MAX / CGC_LOOP_EAGER_ITERATIONS / 2) {
      st = cgc__fail(CGC_ERROR_CAPTURE_UNSUPPORTED, func,
                     "one iteration of the loop draws %llu numbers from a generator: more than a loop may "
                     "(its window of %llu iterations would not fit the generator's offsets)",
                     (unsigned long long)per_iteration, (unsigned long long)CGC_LOOP_EAGER_ITERATIONS);
    } else {
      rng->capture_offset = generators[j].begin + per_iteration * CGC_LOOP_EAGER_ITERATIONS;
    }
    cgc__mutex_unlock(&rng->lock, CGC__LOCK_RNG);
    advance.amount[j] = per_iteration;
    advance.laps[j] = rng->slots + 2 * sizeof(uint64_t);
  }
  if (st != CGC_SUCCESS) return st;
  void* args[] = {&states, &advance};
  cgc_rng_t first = generators[0].rng;
  return CGC_CU(func, cuLaunchKernel(first->dev->kernels->loop_advance, 1, 1, 1, CGC__LOOP_GENERATORS, 1, 1, 0, stream, args,
                               NULL));
}

/* A draw whose kernel was not launched gives its numbers back (CONTRACT: a failed call leaves
 * nothing half done), unless another draw advanced the generator meanwhile: then the numbers are
 * skipped, which no result can tell from a draw that happened. */
static void undo_draw(cgc_rng_t rng, uint64_t capture_id, unsigned long long offset, size_t n) {
  cgc__mutex_lock(&rng->lock, CGC__LOCK_RNG);
  if (capture_id == 0 && rng->offset == offset + round4(n))
    rng->offset = offset;
  else if (capture_id != 0 && rng->capture_id == capture_id && rng->capture_offset == offset + round4(n))
    rng->capture_offset = offset;
  cgc__mutex_unlock(&rng->lock, CGC__LOCK_RNG);
}

/* The common path of uniform and normal: where the draw's numbers come from, then the launch. */
static cgc_status_t draw(cgc_rng_t rng, float* out, size_t n, bool normal, float mean, float stddev,
                         cgc_stream_t stream, const char* func) {
  CGC_TRY(cgc__check_handle(rng, CGC_MAGIC_RNG, func, "rng"));
  CGC_TRY(cgc__check_handle(stream, CGC_MAGIC_STREAM, func, "stream"));
  if (n == 0) return CGC_SUCCESS;
  CGC_CHECK_ARG(out != NULL, "out is NULL");
  CGC_CHECK_ARG(n <= ((size_t)1 << 62), "n is %zu", n);
  if (stream->dev != rng->dev)
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func, "stream %p is on device %d, the generator on device %d",
                     (void*)stream->cu, stream->dev->ordinal, rng->dev->ordinal);
  cgc__stream_ref_t ref;
  CGC_TRY(cgc__stream_resolve(stream, true, &ref, func));
  uint64_t capture_id = 0;
  CGC_TRY(cgc__registry_capture_of(&ref, &capture_id, func));
  /* In a conditional body: the WHILE loops around it, their state memory made first (it may
   * allocate: never under the generator's lock). */
  struct cgc__body* body = capture_id != 0 ? atomic_load(&stream->body) : NULL;
  struct cgc__body* loops[CGC__LOOP_DEPTH];
  CUdeviceptr states[CGC__LOOP_DEPTH];
  int n_loops = 0;
  if (body != NULL) CGC_TRY(enclosing_loops(body, loops, states, &n_loops, func));

  cgc_status_t st = CGC_SUCCESS;
  unsigned long long seed = 0, offset = 0;
  CUdeviceptr slots = 0;
  loop_chain_t chain = {{0}};
  cgc__mutex_lock(&rng->lock, CGC__LOCK_RNG);
  if (capture_id == 0) {
    seed = rng->seed;
    offset = rng->offset;
    rng->offset += round4(n);
  } else if (rng->capture_id != 0 && rng->capture_id != capture_id) {
    st = cgc__fail(CGC_ERROR_INVALID_STATE, func,
                   "the generator is drawn from by another capture (id %llu): one capture at a time per generator",
                   (unsigned long long)rng->capture_id);
  } else {
    /* The capture's first draw registers the generator as one of its uses (holding a
     * reference) under this lock, before any other thread can draw into the same capture. */
    if (rng->capture_id == 0) st = cgc__registry_add_use(capture_id, &rng_use_ops, rng, func);
    if (st == CGC_SUCCESS) {
      rng->capture_id = capture_id;
      if (n_loops > 0) st = chain_for(rng, loops, states, n_loops, &chain, func);
    }
    if (st == CGC_SUCCESS) {
      slots = rng->slots;
      offset = rng->capture_offset; /* the draw's position in the graph */
      rng->capture_offset += round4(n);
    }
  }
  cgc__mutex_unlock(&rng->lock, CGC__LOCK_RNG);
  if (st != CGC_SUCCESS) return st;

  cgc__ctx_scope_t scope;
  st = cgc__ctx_enter(rng->dev, &scope, func);
  if (st != CGC_SUCCESS) {
    undo_draw(rng, capture_id, offset, n);
    return st;
  }
  struct cgc__kernels* k = rng->dev->kernels;
  unsigned long long count = n;
  unsigned long long groups = (count + 3) / 4;
  unsigned blocks = (unsigned)((groups + 255) / 256);
  if (blocks > 4096) blocks = 4096; /* grid-stride beyond: plenty to fill any current GPU */
  const unsigned long long* slot_ptr = (const unsigned long long*)(uintptr_t)slots;
  CUresult r;
  if (normal) {
    void* args[] = {&out, &count, &mean, &stddev, &slot_ptr, &chain, &seed, &offset};
    r = CGC_DRV(cuLaunchKernel)(k->normal, blocks, 1, 1, 256, 1, 1, 0, stream->cu, args, NULL);
  } else {
    void* args[] = {&out, &count, &slot_ptr, &chain, &seed, &offset};
    r = CGC_DRV(cuLaunchKernel)(k->uniform, blocks, 1, 1, 256, 1, 1, 0, stream->cu, args, NULL);
  }
  cgc__ctx_leave(&scope);
  if (r != CUDA_SUCCESS) undo_draw(rng, capture_id, offset, n);
  return cgc__cu_fail(r, func, "cuLaunchKernel");
}

cgc_status_t cgc_rng_uniform(cgc_rng_t rng, float* out, size_t n, cgc_stream_t stream) {
  return draw(rng, out, n, false, 0.0f, 1.0f, stream, __func__);
}

cgc_status_t cgc_rng_normal(cgc_rng_t rng, float* out, size_t n, float mean, float stddev, cgc_stream_t stream) {
  return draw(rng, out, n, true, mean, stddev, stream, __func__);
}

cgc_status_t cgc_rng_get_state(cgc_rng_t rng, uint64_t* seed, uint64_t* offset) {
  CGC_CHECK_HANDLE(rng, CGC_MAGIC_RNG);
  CGC_CHECK_ARG(seed != NULL || offset != NULL, "seed and offset are both NULL");
  cgc__mutex_lock(&rng->lock, CGC__LOCK_RNG);
  if (seed != NULL) *seed = rng->seed;
  if (offset != NULL) *offset = rng->offset;
  cgc__mutex_unlock(&rng->lock, CGC__LOCK_RNG);
  return CGC_SUCCESS;
}

cgc_status_t cgc_rng_set_state(cgc_rng_t rng, uint64_t seed, uint64_t offset) {
  CGC_CHECK_HANDLE(rng, CGC_MAGIC_RNG);
  CGC_CHECK_ARG(offset % 4 == 0, "offset %llu is not a multiple of 4 (draws consume offsets 4 at a time)",
                (unsigned long long)offset);
  cgc_status_t st = CGC_SUCCESS;
  cgc__mutex_lock(&rng->lock, CGC__LOCK_RNG);
  if (rng->capture_id != 0) {
    /* Like manual_seed during a PyTorch capture: the same state is a no-op, a change is refused. */
    if (seed != rng->seed || offset != rng->offset)
      st = cgc__fail(CGC_ERROR_INVALID_STATE, __func__,
                     "a capture (id %llu) is drawing from the generator: its state can change only after "
                     "cgc_capture_end",
                     (unsigned long long)rng->capture_id);
  } else {
    rng->seed = seed;
    rng->offset = offset;
  }
  cgc__mutex_unlock(&rng->lock, CGC__LOCK_RNG);
  return st;
}

/* ---- saved graphs (1.6) ---- */

cgc_rng_t cgc__rng_of_use(const struct cgc__use* use) { return use->ops == &rng_use_ops ? use->object : NULL; }

void cgc__rng_state(cgc_rng_t rng, uint64_t* seed, uint64_t* offset, uint64_t* slots) {
  cgc__mutex_lock(&rng->lock, CGC__LOCK_RNG);
  *seed = rng->seed;
  *offset = rng->offset;
  cgc__mutex_unlock(&rng->lock, CGC__LOCK_RNG);
  *slots = rng->slots; /* set at creation, never changed */
}

struct cgc__use cgc__rng_use(cgc_rng_t rng, uint64_t amount) {
  rng_retain(rng);
  return (struct cgc__use){&rng_use_ops, rng, amount, true};
}

bool cgc__rng_kernels_image(struct cgc__device* dev, CUfunction fn, const void** image, size_t* size) {
  CUmodule module = NULL;
  if (CGC_DRV(cuFuncGetModule)(&module, fn) != CUDA_SUCCESS) return false;
  cgc__mutex_lock(&kernels_lock, CGC__LOCK_KERNELS);
  bool ours = dev->kernels != NULL && dev->kernels->module == module;
  cgc__mutex_unlock(&kernels_lock, CGC__LOCK_KERNELS);
  if (ours) {
    *image = cgc__kernels_fatbin;
    *size = cgc__kernels_fatbin_size;
  }
  return ours;
}
