/* cgc_graphs_restore (1.6): the graphs of a saved file rebuilt in this process.
 *
 * In order: the file's header is checked (format, architecture, driver); every section is read
 * and bounds-checked before anything is made; then the pools are reserved at their bases with
 * their saved blocks claimed at their addresses and the rest of their backed ranges kept for the
 * graphs; the modules are loaded and each kernel checked against its saved identity; last each
 * graph is built node by node and instantiated as a capture's graph is (graph.c). The generators
 * the graphs draw from are created again (cgc_rng_create) after the modules, and each draw's
 * arguments get their slots. A failure at any step undoes every earlier one: graphs, claimed
 * blocks, pools, generators and modules go again.
 *
 * Locks: none of restore's own. It calls cgc_pool_create_at, cgc__pool_claim and cgc_free (the
 * allocator's lock, never held across a waiting driver call), cgc_rng_create (rng.c's locks) and
 * cgc__graph_create. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "src/saved_file.h"

struct restored_module {
  uint32_t by_key;
  const char* key; /* into the file */
  const void* image;
  uint64_t size;
  void* code; /* loaded: one reference, restore's own */
};

struct restored_kernel {
  uint32_t module;
  char* name; /* a copy */
  int identity[6];
  int function_attributes[CGC__SAVED_N_FUNCTION_ATTRIBUTES];
  uint32_t n_params, param_bytes;
  uint32_t* params; /* offset, size pairs (a copy: the file's bytes need not be aligned) */
  CUfunction fn;
};

/* A generator the graphs draw from: as saved, and (a restore's) created again. */
struct restored_generator {
  uint64_t seed, offset;
  uint64_t slots;  /* where its draws' arguments point: the restored generator's slots, or for a
                    * rebuild in the saving process the saved ones (the same generator's) */
  cgc_rng_t rng;   /* the restore's reference; NULL in a rebuild */
};

/* Threads that instantiate the graphs and join them to families when the caller leaves it to cgc:
 * on an H200 (driver 580) 256 instantiations of 1,000-node graphs took about 1.8 times less time
 * on four threads than on one, and no less on eight (they contend in the driver). */
enum { kDefaultRestoreThreads = 4, kMaxRestoreThreads = 64 };

typedef struct restorer {
  struct cgc__device* dev;
  cgc__reader_t r;
  cgc__saved_header_t h;
  cgc__pool_layout_t* layouts;
  struct restored_module* modules;
  struct restored_kernel* kernels;
  struct restored_generator* generators;
  /* The index's check of draws: the generators the graph being indexed lists (NULL outside the
   * index; each thread's own). */
  bool* listed;
  cgc_pool_t* pools;         /* the caller's array */
  void** claimed;            /* saved blocks claimed again, freed if the restore fails */
  size_t n_claimed;
  cgc_graph_t* graphs;       /* the caller's array */
  bool families;             /* CGC_RESTORE_FAMILIES */
  struct unbuilt_set* unbuilt; /* families: what the members built at their first use share */
  size_t threads;            /* that read the checksum (at most 4), index, instantiate and join the
                              * graphs, the calling thread one of them (it alone builds them) */
} restorer_t;

static cgc_status_t damaged(const char* func, const char* where) {
  return cgc__fail(CGC_ERROR_SAVED_MISMATCH, func, "the file is damaged: %s does not fit in it", where);
}

/* ---- reading the sections ---- */

static cgc_status_t read_pools(restorer_t* s, const char* func) {
  for (uint64_t i = 0; i < s->h.n_pools; i++) {
    cgc__pool_layout_t* l = &s->layouts[i];
    l->base = cgc__get_u64(&s->r);
    l->capacity = cgc__get_u64(&s->r);
    l->backed = cgc__get_u64(&s->r);
    uint64_t n = cgc__get_u64(&s->r);
    if (s->r.bad || n > (s->r.size - s->r.at) / 16 || l->backed > l->capacity || l->backed % 512 != 0 ||
        l->base % 512 != 0)
      return damaged(func, "a pool");
    l->blocks = calloc(n + 1, sizeof *l->blocks);
    if (l->blocks == NULL) return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
    l->n_blocks = n;
    uint64_t end = 0;
    for (uint64_t b = 0; b < n; b++) {
      l->blocks[b].offset = cgc__get_u64(&s->r);
      l->blocks[b].size = cgc__get_u64(&s->r);
      /* In address order, apart, inside what was backed. */
      if (l->blocks[b].offset < end || l->blocks[b].size == 0 || l->blocks[b].size > l->backed ||
          l->blocks[b].offset % 512 != 0 || l->blocks[b].size % 512 != 0 ||
          l->blocks[b].offset > l->backed - l->blocks[b].size)
        return damaged(func, "a pool's block");
      end = l->blocks[b].offset + l->blocks[b].size;
    }
  }
  return s->r.bad ? damaged(func, "the pools") : CGC_SUCCESS;
}

static cgc_status_t read_modules(restorer_t* s, const char* func) {
  for (uint64_t i = 0; i < s->h.n_modules; i++) {
    struct restored_module* m = &s->modules[i];
    m->by_key = cgc__get_u32(&s->r);
    uint32_t key_length = cgc__get_u32(&s->r);
    m->size = cgc__get_u64(&s->r);
    const char* key = cgc__get_bytes(&s->r, key_length);
    if (s->r.bad || m->by_key > 1 || (m->by_key && (key_length == 0 || key_length > 255)))
      return damaged(func, "a module");
    if (m->by_key) {
      /* Its padding holds the NUL unless the key fills it to a multiple of 8: copied to be sure. */
      char* copy = calloc(1, key_length + 1);
      if (copy == NULL) return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
      memcpy(copy, key, key_length);
      m->key = copy;
    } else {
      m->image = cgc__get_bytes(&s->r, m->size);
      if (m->image == NULL || m->size == 0) return damaged(func, "a module's image");
    }
  }
  return CGC_SUCCESS;
}

static cgc_status_t read_kernels(restorer_t* s, const char* func) {
  for (uint64_t i = 0; i < s->h.n_kernels; i++) {
    struct restored_kernel* k = &s->kernels[i];
    k->module = cgc__get_u32(&s->r);
    uint32_t name_length = cgc__get_u32(&s->r);
    for (int j = 0; j < 6; j++) k->identity[j] = (int)cgc__get_u32(&s->r);
    for (int j = 0; j < CGC__SAVED_N_FUNCTION_ATTRIBUTES; j++) k->function_attributes[j] = (int)cgc__get_u32(&s->r);
    k->n_params = cgc__get_u32(&s->r);
    k->param_bytes = cgc__get_u32(&s->r);
    const char* name = cgc__get_bytes(&s->r, name_length);
    const void* params = cgc__get_bytes(&s->r, (uint64_t)k->n_params * 8);
    if (s->r.bad || k->module >= s->h.n_modules || name_length == 0 || name_length > 65536 ||
        k->param_bytes > 32768 || k->n_params > k->param_bytes)
      return damaged(func, "a kernel");
    k->name = calloc(1, name_length + 1);
    k->params = calloc(k->n_params + 1, 8);
    if (k->name == NULL || k->params == NULL) return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
    memcpy(k->name, name, name_length);
    memcpy(k->params, params, (size_t)k->n_params * 8);
    for (uint32_t j = 0; j < k->n_params; j++)
      if (k->params[2 * j] > k->param_bytes || k->params[2 * j + 1] > k->param_bytes - k->params[2 * j])
        return damaged(func, "a kernel's parameter");
  }
  return CGC_SUCCESS;
}

static cgc_status_t read_generators(restorer_t* s, const char* func) {
  for (uint64_t i = 0; i < s->h.n_generators; i++) {
    struct restored_generator* g = &s->generators[i];
    g->seed = cgc__get_u64(&s->r);
    g->offset = cgc__get_u64(&s->r);
    g->slots = cgc__get_u64(&s->r);
    if (s->r.bad || g->offset % 4 != 0) return damaged(func, "a generator");
  }
  return CGC_SUCCESS;
}

/* ---- pools, modules, kernels ---- */

/* Pool i at its base, its saved blocks claimed (allocated, as they were) and the rest of what was
 * backed claimed and freed again: backed, and kept for the graphs (a claimed block of memory no
 * stream used serves claims only once freed, never another allocation: SEMANTICS 36). */
static cgc_status_t restore_pool(restorer_t* s, cgc_context_t ctx, size_t i, const char* func) {
  const cgc__pool_layout_t* l = &s->layouts[i];
  cgc_status_t st = cgc_pool_create_at(ctx, (void*)(uintptr_t)l->base, l->capacity, &s->pools[i]);
  if (st != CGC_SUCCESS) {
    cgc__append(" (restoring saved pool %zu)", i);
    return st;
  }
  uint64_t at = 0;
  for (size_t b = 0; b <= l->n_blocks; b++) {
    uint64_t next = b < l->n_blocks ? l->blocks[b].offset : l->backed;
    if (next > at) { /* a gap: the graphs' memory */
      CGC_TRY(cgc__pool_claim(s->pools[i], l->base + at, next - at, func));
      CGC_TRY(cgc_free((void*)(uintptr_t)(l->base + at)));
    }
    if (b == l->n_blocks) break;
    CGC_TRY(cgc__pool_claim(s->pools[i], l->base + l->blocks[b].offset, l->blocks[b].size, func));
    s->claimed[s->n_claimed++] = (void*)(uintptr_t)(l->base + l->blocks[b].offset);
    at = l->blocks[b].offset + l->blocks[b].size;
  }
  return CGC_SUCCESS;
}

/* Free device memory in MiB now, for CGC_LOG=debug's account of where a restore's memory goes
 * (0 with logging off: the reading is a driver call). */
static double free_mib(void) {
  size_t free_bytes = 0, total = 0;
  if (!cgc__log_on() || CGC_DRV(cuMemGetInfo)(&free_bytes, &total) != CUDA_SUCCESS) return 0;
  return (double)free_bytes / (1 << 20);
}

static cgc_status_t load_module(restorer_t* s, size_t i, const char* func) {
  struct restored_module* m = &s->modules[i];
  const void* image = m->image;
  size_t size = (size_t)m->size;
  if (m->by_key) {
    image = cgc__module_added_image(m->key, &size);
    if (image == NULL)
      return cgc__fail(CGC_ERROR_SAVED_MISMATCH, func,
                       "the file's module %zu is the image added under key '%s', and no image is added under that "
                       "key in this process: add it with cgc_module_add_image first",
                       i, m->key);
  }
  cgc_status_t st = cgc__module_code_load(s->dev, image, size, &m->code, func);
  if (st != CGC_SUCCESS) cgc__append(" (the file's module %zu)", i);
  return st;
}

static cgc_status_t find_kernel(restorer_t* s, size_t i, const char* func) {
  struct restored_kernel* k = &s->kernels[i];
  CGC_TRY(cgc__module_code_kernel(s->modules[k->module].code, k->name, &k->fn, func));
  cgc__kernel_identity_t found, wanted = {k->identity[0], k->identity[1], k->identity[2],
                                          k->identity[3], k->identity[4], k->identity[5]};
  CGC_TRY(cgc__kernel_identity(k->fn, &found, func));
  char what[96];
  if (cgc__kernel_identity_differs(&wanted, &found, what, sizeof what))
    return cgc__fail(CGC_ERROR_SAVED_MISMATCH, func,
                     "kernel '%s' is built differently here: %s as saved (another image under its module's key?)",
                     k->name, what);
  for (uint32_t j = 0; j <= k->n_params; j++) {
    size_t offset = 0, size = 0;
    CUresult r = CGC_DRV(cuFuncGetParamInfo)(k->fn, j, &offset, &size);
    bool same = j < k->n_params ? r == CUDA_SUCCESS && offset == k->params[2 * j] && size == k->params[2 * j + 1]
                                : r != CUDA_SUCCESS;
    if (!same)
      return cgc__fail(CGC_ERROR_SAVED_MISMATCH, func, "kernel '%s' takes other parameters here than when saved (%u "
                       "saved; parameter %u differs)", k->name, k->n_params, j);
  }
  static const CUfunction_attribute kSettable[] = {
#define SETTABLE(attribute) attribute,
      CGC_SAVED_FUNCTION_ATTRIBUTES(SETTABLE)
#undef SETTABLE
  };
  for (int j = 0; j < CGC__SAVED_N_FUNCTION_ATTRIBUTES; j++) {
    int now = 0;
    CGC_TRY(CGC_CU(func, cuFuncGetAttribute(&now, kSettable[j], k->fn)));
    if (now == k->function_attributes[j]) continue;
    cgc_status_t st = CGC_CU(func, cuFuncSetAttribute(k->fn, kSettable[j], k->function_attributes[j]));
    if (st != CGC_SUCCESS) {
      cgc__append(" (kernel '%s', attribute %d, value %d)", k->name, (int)kSettable[j], k->function_attributes[j]);
      return st;
    }
  }
  return CGC_SUCCESS;
}

/* ---- graphs ---- */

/* A draw's record of where its arguments hold generators' slots (after its kernel's fields):
 * their count, then (byte offset, generator) pairs, each checked against the kernel's argument
 * bytes and the file's generators. The pairs' bytes (*n of them), or NULL when damaged. */
static const unsigned char* read_relocations(restorer_t* s, uint32_t param_bytes, uint32_t* n) {
  *n = cgc__get_u32(&s->r);
  cgc__get_u32(&s->r);
  const unsigned char* pairs = *n > 0 && *n <= param_bytes / 8 ? cgc__get_bytes(&s->r, (uint64_t)*n * 8) : NULL;
  for (uint32_t i = 0; pairs != NULL && i < *n; i++) {
    uint32_t at_generator[2];
    memcpy(at_generator, pairs + 8 * i, sizeof at_generator);
    if (at_generator[0] % 8 != 0 || at_generator[0] > param_bytes - 8 || at_generator[1] >= s->h.n_generators ||
        (s->listed != NULL && !s->listed[at_generator[1]])) /* a draw from a generator its graph holds */
      pairs = NULL;
  }
  if (pairs == NULL) s->r.bad = true;
  return pairs;
}

static cgc_status_t add_kernel_node(restorer_t* s, CUgraph graph, const CUgraphNode* deps, size_t n_deps,
                                    CUgraphNode* node, bool* uses_module, bool draw, const char* func) {
  uint32_t index = cgc__get_u32(&s->r);
  uint32_t dims[7];
  for (int j = 0; j < 7; j++) dims[j] = cgc__get_u32(&s->r);
  uint32_t n_attributes = cgc__get_u32(&s->r);
  if (s->r.bad || index >= s->h.n_kernels) return damaged(func, "a kernel node");
  const struct restored_kernel* k = &s->kernels[index];
  uint32_t n_relocations = 0;
  const unsigned char* relocations = draw ? read_relocations(s, k->param_bytes, &n_relocations) : NULL;
  if (draw && relocations == NULL) return damaged(func, "a draw's generators");
  const unsigned char* args = cgc__get_bytes(&s->r, k->param_bytes);
  if (args == NULL) return damaged(func, "a kernel node's arguments");
  /* A draw's arguments, copied, with its generators' slots where they were. */
  unsigned char* drawn = draw ? malloc(k->param_bytes) : NULL;
  /* Where each argument lies: on the stack for the usual few (a node is added in about 0.7 us). */
  void* few[32];
  void** pointers = k->n_params <= 32 ? few : calloc(k->n_params, sizeof *pointers);
  if (pointers == NULL || (draw && drawn == NULL)) {
    free(drawn);
    if (pointers != few) free(pointers);
    return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
  }
  if (draw) {
    memcpy(drawn, args, k->param_bytes);
    for (uint32_t i = 0; i < n_relocations; i++) {
      uint32_t at_generator[2];
      memcpy(at_generator, relocations + 8 * i, sizeof at_generator);
      memcpy(drawn + at_generator[0], &s->generators[at_generator[1]].slots, sizeof(uint64_t));
    }
    args = drawn;
  }
  for (uint32_t j = 0; j < k->n_params; j++) pointers[j] = (void*)(args + k->params[2 * j]);
  CUDA_KERNEL_NODE_PARAMS p;
  memset(&p, 0, sizeof p);
  p.func = k->fn;
  p.gridDimX = dims[0], p.gridDimY = dims[1], p.gridDimZ = dims[2];
  p.blockDimX = dims[3], p.blockDimY = dims[4], p.blockDimZ = dims[5];
  p.sharedMemBytes = dims[6];
  p.kernelParams = pointers;
  cgc_status_t st = CGC_CU(func, cuGraphAddKernelNode(node, graph, deps, n_deps, &p));
  if (pointers != few) free(pointers);
  free(drawn);
  if (st != CGC_SUCCESS) {
    cgc__append(" (kernel '%s')", k->name);
    return st;
  }
  uses_module[k->module] = true;
  for (uint32_t a = 0; a < n_attributes; a++) {
    CUlaunchAttributeID id = (CUlaunchAttributeID)cgc__get_u32(&s->r);
    cgc__get_u32(&s->r);
    const void* value = cgc__get_bytes(&s->r, sizeof(CUlaunchAttributeValue));
    bool known = false; /* only the attributes a save keeps: others may carry handles */
#define KNOWN_ATTRIBUTE(a) known = known || id == a;
    CGC_SAVED_KERNEL_ATTRIBUTES(KNOWN_ATTRIBUTE)
#undef KNOWN_ATTRIBUTE
    if (value == NULL || !known) return damaged(func, "a kernel node's attribute");
    /* Saved because it differs from a new node's value: set without asking what it is. */
    CUlaunchAttributeValue saved;
    memcpy(&saved, value, sizeof saved);
    st = CGC_CU(func, cuGraphKernelNodeSetAttribute(*node, id, &saved));
    if (st != CGC_SUCCESS) {
      cgc__append(" (kernel '%s', launch attribute %d)", k->name, (int)id);
      return st;
    }
  }
  return CGC_SUCCESS;
}

static cgc_status_t add_node(restorer_t* s, CUgraph graph, const CUgraphNode* deps, size_t n_deps, CUgraphNode* node,
                             bool* uses_module, const char* func) {
  uint32_t kind = cgc__get_u32(&s->r);
  switch (kind) {
    case CGC__SAVED_KERNEL: return add_kernel_node(s, graph, deps, n_deps, node, uses_module, false, func);
    case CGC__SAVED_DRAW: return add_kernel_node(s, graph, deps, n_deps, node, uses_module, true, func);
    case CGC__SAVED_MEMSET: {
      CUDA_MEMSET_NODE_PARAMS p;
      memset(&p, 0, sizeof p);
      p.value = cgc__get_u32(&s->r);
      p.dst = cgc__get_u64(&s->r);
      p.pitch = cgc__get_u64(&s->r);
      p.elementSize = (unsigned)cgc__get_u64(&s->r);
      p.width = cgc__get_u64(&s->r);
      p.height = cgc__get_u64(&s->r);
      if (s->r.bad) return damaged(func, "a set node");
      return CGC_CU(func, cuGraphAddMemsetNode(node, graph, deps, n_deps, &p, s->dev->cu));
    }
    case CGC__SAVED_MEMCPY: {
      cgc__get_u32(&s->r);
      uint64_t f[15];
      for (int j = 0; j < 15; j++) f[j] = cgc__get_u64(&s->r);
      if (s->r.bad) return damaged(func, "a copy node");
      CUDA_MEMCPY3D c;
      memset(&c, 0, sizeof c);
      c.srcMemoryType = c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
      c.srcDevice = f[0], c.srcXInBytes = f[1], c.srcY = f[2], c.srcZ = f[3], c.srcPitch = f[4], c.srcHeight = f[5];
      c.dstDevice = f[6], c.dstXInBytes = f[7], c.dstY = f[8], c.dstZ = f[9], c.dstPitch = f[10], c.dstHeight = f[11];
      c.WidthInBytes = f[12], c.Height = f[13], c.Depth = f[14];
      return CGC_CU(func, cuGraphAddMemcpyNode(node, graph, deps, n_deps, &c, s->dev->cu));
    }
    case CGC__SAVED_EMPTY:
      cgc__get_u32(&s->r);
      return CGC_CU(func, cuGraphAddEmptyNode(node, graph, deps, n_deps));
    default: return damaged(func, "a node of an unknown kind");
  }
}

/* Skips a node record, for the first pass, checking what a build reads of it (a member built
 * at its first use is refused here already); returns what it adds to the graph's structure: its
 * kind, and for a kernel node which kernel, whose module it marks in `modules`. */
static uint64_t skip_node(restorer_t* s, bool* modules) {
  uint32_t kind = cgc__get_u32(&s->r), index = 0;
  if (kind == CGC__SAVED_KERNEL || kind == CGC__SAVED_DRAW) {
    index = cgc__get_u32(&s->r);
    for (int j = 0; j < 7; j++) cgc__get_u32(&s->r);
    uint32_t n_attributes = cgc__get_u32(&s->r);
    if (index >= s->h.n_kernels) {
      s->r.bad = true;
      return 0;
    }
    modules[s->kernels[index].module] = true;
    uint32_t n_relocations = 0;
    if (kind == CGC__SAVED_DRAW) read_relocations(s, s->kernels[index].param_bytes, &n_relocations);
    if (cgc__get_bytes(&s->r, s->kernels[index].param_bytes) == NULL) s->r.bad = true;
    if (n_attributes > 64) s->r.bad = true;
    for (uint32_t a = 0; a < n_attributes && !s->r.bad; a++) {
      uint32_t id = cgc__get_u32(&s->r);
      cgc__get_u32(&s->r);
      bool known = false;
#define KNOWN_ATTRIBUTE(a) known = known || id == a;
      CGC_SAVED_KERNEL_ATTRIBUTES(KNOWN_ATTRIBUTE)
#undef KNOWN_ATTRIBUTE
      if (cgc__get_bytes(&s->r, sizeof(CUlaunchAttributeValue)) == NULL || !known) s->r.bad = true;
    }
  } else if (kind == CGC__SAVED_MEMSET) {
    cgc__get_u32(&s->r);
    for (int j = 0; j < 5; j++) cgc__get_u64(&s->r);
  } else if (kind == CGC__SAVED_MEMCPY) {
    cgc__get_u32(&s->r);
    for (int j = 0; j < 15; j++) cgc__get_u64(&s->r);
  } else if (kind == CGC__SAVED_EMPTY) {
    cgc__get_u32(&s->r);
  } else {
    s->r.bad = true;
  }
  return (uint64_t)kind << 32 | index;
}

/* ---- graphs, on several threads ---- */

/* One graph of the file, from the first pass (index_graphs) to its making. The built fields are
 * build_graph's, taken by make_graph, or freed by drop_built when the restore fails first. Each
 * record is written by one thread at a time: the pass that builds it, then the one that makes it. */
typedef struct graph_record {
  size_t generators_at;      /* its uses of generators in the file (n_generators of them) */
  size_t nodes_at, edges_at; /* its nodes' and its edges' records in the file */
  size_t end_at;             /* where its record ends */
  uint64_t n_nodes, n_edges;
  uint32_t n_generators;
  uint32_t pool_index;
  uint64_t structure;        /* FNV-1a over its nodes' kinds and kernels, then its edges */
  size_t next_alike;         /* the next graph of its structure (families), or the graph count */
  bool first_alike;          /* no graph before it has its structure */
  CUgraph graph;             /* built */
  CUevent done;
  bool* modules;             /* indexed: which of the file's modules its kernels are of */
  struct cgc__use* uses;
  size_t n_uses;
} graph_record_t;

typedef cgc_status_t (*restore_step_fn)(restorer_t* s, graph_record_t* records, size_t item, const char* func);

/* One pass: items 0..n_items-1, taken in turn by the calling thread and up to threads - 1
 * others; the first failure stops the rest, and its message is carried to the caller's thread. */
typedef struct restore_pass {
  restorer_t* s;
  graph_record_t* records;
  restore_step_fn step;
  size_t n_items;
  const char* func;
  atomic_size_t next;
  atomic_bool failed;
  cgc_status_t status; /* of the first failure, written by the thread that set `failed` */
  char message[1024];
} restore_pass_t;

static void* pass_worker(void* arg) {
  restore_pass_t* p = arg;
  restorer_t own = *p->s; /* its own reader; the arrays are shared, each item's slots one thread's */
  cgc__ctx_scope_t scope = {false};
  cgc_status_t st = cgc__ctx_enter(own.dev, &scope, p->func);
  for (size_t item; st == CGC_SUCCESS && !atomic_load(&p->failed) && (item = atomic_fetch_add(&p->next, 1)) < p->n_items;)
    st = p->step(&own, p->records, item, p->func);
  cgc__ctx_leave(&scope);
  bool first = false;
  if (st != CGC_SUCCESS && atomic_compare_exchange_strong(&p->failed, &first, true)) {
    p->status = st;
    snprintf(p->message, sizeof p->message, "%s", cgc_last_error());
  }
  return NULL;
}

static cgc_status_t run_pass(restorer_t* s, graph_record_t* records, restore_step_fn step, size_t n_items,
                             size_t max_threads, const char* func) {
  restore_pass_t p = {.s = s, .records = records, .step = step, .n_items = n_items, .func = func};
  atomic_init(&p.next, 0);
  atomic_init(&p.failed, false);
  size_t n_threads = max_threads < n_items ? max_threads : n_items, started = 0;
  pthread_t* threads = n_threads > 1 ? calloc(n_threads - 1, sizeof *threads) : NULL;
  /* A thread that cannot be started leaves its share to the others. */
  while (threads != NULL && started + 1 < n_threads && pthread_create(&threads[started], NULL, pass_worker, &p) == 0)
    started++;
  pass_worker(&p);
  for (size_t i = 0; i < started; i++) pthread_join(threads[i], NULL);
  free(threads);
  return atomic_load(&p.failed) ? cgc__carry_failure(p.status, p.message) : CGC_SUCCESS;
}

/* The first pass's hop over the graphs' records, on the calling thread: each graph's counts, and
 * where its record lies (its length lets the records be walked apart, on threads). */
static cgc_status_t locate_records(restorer_t* s, graph_record_t* records, const char* func) {
  for (uint64_t gi = 0; gi < s->h.n_graphs; gi++) {
    graph_record_t* g = &records[gi];
    g->pool_index = cgc__get_u32(&s->r);
    g->n_generators = cgc__get_u32(&s->r);
    g->n_nodes = cgc__get_u64(&s->r);
    g->n_edges = cgc__get_u64(&s->r);
    uint64_t length = cgc__get_u64(&s->r);
    size_t remaining = s->r.size - s->r.at;
    if (s->r.bad || g->pool_index >= s->h.n_pools || g->n_nodes > remaining / 8 || g->n_edges > remaining / 8 ||
        g->n_generators > s->h.n_generators || length > remaining)
      return damaged(func, "a graph");
    g->generators_at = s->r.at;
    g->end_at = s->r.at + (size_t)length;
    s->r.at = g->end_at;
  }
  return CGC_SUCCESS;
}

/* One graph's record walked (on any thread; s->r is put back): its generators (each of the file's
 * at most once, each replay's draws a multiple of 4), its nodes as a build reads them, checked
 * against those generators, and its edges, up to exactly the record's end; its structure, and
 * which modules its kernels are of. */
static cgc_status_t index_step(restorer_t* s, graph_record_t* records, size_t gi, const char* func) {
  graph_record_t* g = &records[gi];
  cgc__reader_t whole = s->r;
  s->r = (cgc__reader_t){whole.data, g->end_at, g->generators_at, false}; /* this record alone */
  s->listed = calloc(s->h.n_generators + 1, sizeof *s->listed);
  g->modules = calloc(s->h.n_modules + 1, sizeof *g->modules);
  cgc_status_t st = CGC_SUCCESS;
  if (s->listed == NULL || g->modules == NULL) {
    st = cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
    goto out;
  }
  for (uint32_t i = 0; i < g->n_generators && !s->r.bad; i++) {
    uint32_t generator = cgc__get_u32(&s->r), pad = cgc__get_u32(&s->r);
    uint64_t amount = cgc__get_u64(&s->r);
    if (generator >= s->h.n_generators || s->listed[generator] || pad != 0 || amount % 4 != 0) s->r.bad = true;
    if (!s->r.bad) s->listed[generator] = true;
  }
  if (s->r.bad) {
    st = damaged(func, "a graph's generators");
    goto out;
  }
  g->nodes_at = s->r.at;
  uint64_t structure = 0xcbf29ce484222325ull;
  for (uint64_t i = 0; i < g->n_nodes && !s->r.bad; i++)
    structure = (structure ^ skip_node(s, g->modules)) * 0x100000001b3ull;
  g->edges_at = s->r.at;
  for (uint64_t e = 0; e < g->n_edges && !s->r.bad; e++) {
    uint64_t from = cgc__get_u32(&s->r), to = cgc__get_u32(&s->r);
    /* Saved in an order where every node follows its dependencies. */
    if (from >= to || to >= g->n_nodes) s->r.bad = true;
    structure = (structure ^ (from << 32 | to)) * 0x100000001b3ull;
  }
  if (s->r.bad || s->r.at != g->end_at) {
    st = damaged(func, "a graph's nodes or edges");
    goto out;
  }
  g->structure = structure;
out:
  free(s->listed);
  s->listed = NULL;
  s->r = whole;
  return st;
}

/* The first pass: where each graph's record lies (on the calling thread), each record walked and
 * checked (on threads: 256 graphs of 1,000 kernel nodes took 5-11 ms on one), then in file order
 * which graphs share a structure, and that every generator of the file is some graph's. */
static cgc_status_t index_graphs(restorer_t* s, graph_record_t* records, const char* func) {
  CGC_TRY(locate_records(s, records, func));
  CGC_TRY(run_pass(s, records, index_step, (size_t)s->h.n_graphs, s->threads, func));
  bool* used = calloc(s->h.n_generators + 1, sizeof *used);
  if (used == NULL) return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
  for (uint64_t gi = 0; gi < s->h.n_graphs; gi++) {
    graph_record_t* g = &records[gi];
    for (uint32_t i = 0; i < g->n_generators; i++) { /* read and checked by the walk */
      uint32_t generator;
      memcpy(&generator, s->r.data + g->generators_at + 16 * (size_t)i, sizeof generator);
      if (generator < s->h.n_generators) used[generator] = true; /* (the bytes may be shared) */
    }
    g->next_alike = s->h.n_graphs;
    g->first_alike = true;
    for (uint64_t before = gi; before-- > 0;)
      if (records[before].structure == g->structure && records[before].n_nodes == g->n_nodes &&
          records[before].n_edges == g->n_edges) { /* the latest of its structure so far */
        records[before].next_alike = gi;
        g->first_alike = false;
        break;
      }
  }
  cgc_status_t st = CGC_SUCCESS;
  /* A generator no graph draws from is no saved file's. */
  for (uint64_t i = 0; st == CGC_SUCCESS && i < s->h.n_generators; i++)
    if (!used[i]) st = damaged(func, "a generator no graph draws from");
  free(used);
  return st;
}

/* Builds graph `gi`'s CUgraph from the file: its nodes, each after its dependencies, its edges,
 * and cgc's completion record of g->done after every sink; g->modules says which modules its
 * kernels are of. What it made stays in `g` on failure too. */
static cgc_status_t build_graph(restorer_t* s, graph_record_t* g, size_t gi, const char* func) {
  uint64_t n_nodes = g->n_nodes, n_edges = g->n_edges;
  uint32_t* edges = calloc(2 * n_edges + 2, sizeof *edges);
  size_t* first_dep = calloc(n_nodes + 2, sizeof *first_dep);
  CUgraphNode* nodes = calloc(n_nodes + 1, sizeof *nodes);
  /* A node's dependencies, then the sinks: at most max(n_edges, n_nodes) of either. */
  CUgraphNode* deps = calloc((n_edges > n_nodes ? n_edges : n_nodes) + 1, sizeof *deps);
  bool* has_out = calloc(n_nodes + 1, sizeof *has_out);
  if (g->modules == NULL) g->modules = calloc(s->h.n_modules + 1, sizeof *g->modules);
  bool* uses_module = g->modules;
  size_t* fill = calloc(n_nodes + 1, sizeof *fill);
  uint32_t* dep_index = calloc(n_edges + 1, sizeof *dep_index);
  cgc_status_t st = CGC_SUCCESS;
  if (!edges || !first_dep || !nodes || !deps || !has_out || !uses_module || !fill || !dep_index) {
    st = cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
    goto out;
  }
  s->r.at = g->edges_at;
  for (uint64_t e = 0; e < n_edges; e++) {
    edges[2 * e] = cgc__get_u32(&s->r);
    edges[2 * e + 1] = cgc__get_u32(&s->r);
    /* Saved in an order where every node follows its dependencies. */
    if (edges[2 * e] >= edges[2 * e + 1] || edges[2 * e + 1] >= n_nodes) s->r.bad = true;
    if (s->r.bad) break;
    first_dep[edges[2 * e + 1] + 1]++;
    has_out[edges[2 * e]] = true;
  }
  if (s->r.bad) {
    st = damaged(func, "a graph's nodes or edges");
    goto out;
  }
  /* Each node's dependencies by index, together (first_dep[i] .. first_dep[i + 1]). */
  for (uint64_t i = 0; i < n_nodes; i++) first_dep[i + 1] += first_dep[i];
  for (uint64_t i = 0; i < n_nodes; i++) fill[i] = first_dep[i];
  for (uint64_t e = 0; e < n_edges; e++) dep_index[fill[edges[2 * e + 1]]++] = edges[2 * e];
  CUstreamCaptureMode mode = cgc__relaxed_begin(); /* building a graph breaks no capture, but be sure */
  st = CGC_CU(func, cuGraphCreate(&g->graph, 0));
  s->r.at = g->nodes_at;
  for (uint64_t i = 0; i < n_nodes && st == CGC_SUCCESS; i++) {
    /* Its dependencies, all added already. */
    size_t n_deps = first_dep[i + 1] - first_dep[i];
    for (size_t d = 0; d < n_deps; d++) deps[d] = nodes[dep_index[first_dep[i] + d]];
    st = add_node(s, g->graph, deps, n_deps, &nodes[i], uses_module, func);
    if (st != CGC_SUCCESS) cgc__append(" (graph %zu, node %llu)", gi, (unsigned long long)i);
  }
  /* cgc's completion record, after every node nothing follows. */
  size_t n_sinks = 0;
  for (uint64_t i = 0; i < n_nodes && st == CGC_SUCCESS; i++)
    if (!has_out[i]) deps[n_sinks++] = nodes[i];
  CUgraphNode record = NULL;
  if (st == CGC_SUCCESS) st = CGC_CU(func, cuGraphAddEventRecordNode(&record, g->graph, deps, n_sinks, g->done));
  cgc__relaxed_end(mode);
out:
  free(edges);
  free(first_dep);
  free(nodes);
  free(deps);
  free(has_out);
  free(fill);
  free(dep_index);
  return st;
}

/* Graph g's uses, each one reference more: the modules g->modules says its kernels are of, and
 * the restored generators it draws from, with what one replay consumes (as the saved graph's). */
static cgc_status_t graph_uses(restorer_t* s, graph_record_t* g, const char* func) {
  g->n_uses = 0;
  g->uses = calloc(s->h.n_modules + g->n_generators + 1, sizeof *g->uses);
  if (g->uses == NULL) return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
  for (uint64_t m = 0; m < s->h.n_modules; m++) {
    if (!g->modules[m]) continue;
    struct cgc__use* u = &g->uses[g->n_uses++];
    *u = cgc__module_code_use(s->modules[m].code);
    u->ops->retain(u->object);
  }
  cgc__reader_t r = s->r;
  r.at = g->generators_at;
  for (uint32_t i = 0; i < g->n_generators; i++) {
    uint32_t generator = cgc__get_u32(&r);
    cgc__get_u32(&r);
    uint64_t amount = cgc__get_u64(&r);
    g->uses[g->n_uses++] = cgc__rng_use(s->generators[generator].rng, amount); /* checked by the index */
  }
  return CGC_SUCCESS;
}

/* What build_graph made and make_graph did not take. */
static void drop_built(graph_record_t* g) {
  if (g->graph != NULL) CGC_DRV(cuGraphDestroy)(g->graph);
  if (g->done != NULL) CGC_DRV(cuEventDestroy)(g->done);
  for (size_t i = 0; i < g->n_uses; i++) g->uses[i].ops->release(g->uses[i].object);
  free(g->uses);
  free(g->modules);
  memset(g, 0, sizeof *g);
}

/* ---- members built at their first use (families) ---- */

/* What a restore's unbuilt members share: a copy of the file's bytes and the kernels found for
 * it (their functions stay loaded: every member holds its kernels' modules). The last member to
 * be built or reset frees it. */
typedef struct unbuilt_set {
  atomic_size_t refs;
  struct cgc__device* dev;
  cgc__saved_header_t h;
  unsigned char* bytes;
  size_t size;
  struct restored_kernel* kernels;
  struct restored_generator* generators; /* a copy, for the draws' slots (the graphs hold the generators) */
} unbuilt_set_t;

typedef struct unbuilt_member {
  cgc__deferred_t deferred; /* first: what family.c calls */
  unbuilt_set_t* set;
  graph_record_t record;    /* where its nodes and edges lie */
  size_t index;             /* in the file */
} unbuilt_member_t;

static void release_set(unbuilt_set_t* set) {
  if (set == NULL || atomic_fetch_sub(&set->refs, 1) != 1) return;
  for (uint64_t i = 0; i < set->h.n_kernels; i++) {
    free(set->kernels[i].name);
    free(set->kernels[i].params);
  }
  free(set->kernels);
  free(set->generators);
  free(set->bytes);
  free(set);
}

static cgc_status_t build_unbuilt(cgc__deferred_t* d, CUevent done, CUgraph* graph, const char* func) {
  unbuilt_member_t* u = (unbuilt_member_t*)d;
  restorer_t s = {.dev = u->set->dev, .h = u->set->h, .kernels = u->set->kernels, .generators = u->set->generators};
  s.r = (cgc__reader_t){u->set->bytes, u->set->size, 0, false};
  graph_record_t g = u->record;
  g.done = done;
  cgc_status_t st = build_graph(&s, &g, u->index, func);
  free(g.modules);
  if (st != CGC_SUCCESS && g.graph != NULL) CGC_DRV(cuGraphDestroy)(g.graph);
  if (st == CGC_SUCCESS) *graph = g.graph;
  return st;
}

static void drop_unbuilt(cgc__deferred_t* d) {
  unbuilt_member_t* u = (unbuilt_member_t*)d;
  release_set(u->set);
  free(u);
}

typedef struct file_copy {
  void* to;
  const void* from;
  size_t size;
  pthread_t thread;
  bool on_thread;
} file_copy_t;

static void* copy_file(void* arg) {
  file_copy_t* c = arg;
  memcpy(c->to, c->from, c->size);
  return NULL;
}

/* The set a restore's unbuilt members share: the kernels of `s`, and the file copied on a thread
 * of its own while the restore goes on (a 33 MiB file took about 10 ms: its pages are new), or on
 * the calling thread when the restore is to use no other; *copy is joined before the restore
 * returns. */
static cgc_status_t make_unbuilt_set(restorer_t* s, unbuilt_set_t** out, file_copy_t* copy, const char* func) {
  unbuilt_set_t* set = calloc(1, sizeof *set);
  unsigned char* bytes = malloc(s->r.size + 1);
  struct restored_generator* generators = calloc(s->h.n_generators + 1, sizeof *generators);
  if (set == NULL || bytes == NULL || generators == NULL) {
    free(set);
    free(bytes);
    free(generators);
    return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
  }
  memcpy(generators, s->generators, s->h.n_generators * sizeof *generators);
  *copy = (file_copy_t){bytes, s->r.data, s->r.size};
  copy->on_thread = s->threads > 1 && pthread_create(&copy->thread, NULL, copy_file, copy) == 0;
  if (!copy->on_thread) copy_file(copy);
  atomic_init(&set->refs, 1); /* the restore's own, until its end */
  set->dev = s->dev;
  set->h = s->h;
  set->bytes = bytes;
  set->size = s->r.size;
  set->kernels = s->kernels; /* the set's (the restore uses them until its end) */
  set->generators = generators;
  *out = set;
  return CGC_SUCCESS;
}

/* Graph `gi` made of its built CUgraph: instantiated, or sharing `leader`'s executable (a
 * family's, when the driver takes it). The graph takes the CUgraph, the event, the uses and a
 * reference to its pool in every case. */
static cgc_status_t make_graph(restorer_t* s, graph_record_t* g, size_t gi, cgc_graph_t leader, const char* func) {
  cgc_pool_t pool = s->pools[g->pool_index];
  cgc__pool_hold(pool);
  cgc_status_t st = cgc__graph_create_member(s->dev, g->graph, g->done, (size_t)g->n_nodes, pool, g->uses, g->n_uses,
                                             0, NULL, leader, NULL, func, &s->graphs[gi]);
  free(g->uses);
  g->graph = NULL;
  g->done = NULL;
  g->uses = NULL;
  g->n_uses = 0;
  if (st != CGC_SUCCESS) cgc__append(" (graph %zu)", gi);
  return st;
}

/* Graph `gi` made a member of `leader`'s family unbuilt: its event, its kernels' modules and
 * its pool now, its CUgraph at its first use. */
static cgc_status_t make_unbuilt(restorer_t* s, graph_record_t* records, size_t gi, cgc_graph_t leader,
                                 const char* func) {
  graph_record_t* g = &records[gi];
  unbuilt_member_t* u = calloc(1, sizeof *u);
  if (u == NULL) return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
  u->deferred = (cgc__deferred_t){build_unbuilt, drop_unbuilt};
  u->set = s->unbuilt;
  atomic_fetch_add(&u->set->refs, 1);
  u->record = *g;
  u->record.modules = NULL; /* (the restore's records' own) */
  u->index = gi;
  cgc_status_t st = CGC_CU(func, cuEventCreate(&g->done, CU_EVENT_DISABLE_TIMING));
  if (st == CGC_SUCCESS) st = graph_uses(s, g, func);
  if (st != CGC_SUCCESS) {
    drop_unbuilt(&u->deferred);
    return st;
  }
  cgc_pool_t pool = s->pools[g->pool_index];
  cgc__pool_hold(pool);
  st = cgc__graph_create_member(s->dev, NULL, g->done, (size_t)g->n_nodes, pool, g->uses, g->n_uses, 0, NULL, leader,
                                &u->deferred, func, &s->graphs[gi]);
  free(g->uses);
  g->done = NULL;
  g->uses = NULL;
  g->n_uses = 0;
  if (st != CGC_SUCCESS) cgc__append(" (graph %zu)", gi);
  return st;
}

/* The first pass, over graphs, on the calling thread: each graph's CUgraph is built, but a
 * family member's after the first of its structure (at its first use). */
static cgc_status_t build_step(restorer_t* s, graph_record_t* records, size_t gi, const char* func) {
  graph_record_t* g = &records[gi];
  if (s->families && !g->first_alike) return CGC_SUCCESS;
  CGC_TRY(CGC_CU(func, cuEventCreate(&g->done, CU_EVENT_DISABLE_TIMING)));
  CGC_TRY(build_graph(s, g, gi, func));
  /* The graph holds each module its kernels are of, and each generator it draws from, as a
   * captured graph does. */
  return graph_uses(s, g, func);
}

/* The second pass, over graphs, on threads: each graph built is made (instantiated). */
static cgc_status_t make_step(restorer_t* s, graph_record_t* records, size_t gi, const char* func) {
  if (s->families && !records[gi].first_alike) return CGC_SUCCESS;
  return make_graph(s, &records[gi], gi, NULL, func);
}

/* The third pass (families), over structures, one thread each, in file order: each graph joins
 * the family of the first of its structure, unbuilt. */
static cgc_status_t family_step(restorer_t* s, graph_record_t* records, size_t first, const char* func) {
  if (!records[first].first_alike) return CGC_SUCCESS;
  for (size_t gi = records[first].next_alike; gi < s->h.n_graphs; gi = records[gi].next_alike)
    CGC_TRY(make_unbuilt(s, records, gi, s->graphs[first], func));
  return CGC_SUCCESS;
}

static double ms_between(const struct timespec* a, const struct timespec* b) {
  return (double)(b->tv_sec - a->tv_sec) * 1e3 + (double)(b->tv_nsec - a->tv_nsec) / 1e6;
}

static cgc_status_t restore_graphs(restorer_t* s, const char* func) {
  size_t n_graphs = (size_t)s->h.n_graphs;
  graph_record_t* records = calloc(n_graphs + 1, sizeof *records);
  if (records == NULL) return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
  struct timespec t0, t1, t2, t3;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  double free_at_start = free_mib();
  /* Built on the calling thread alone: setting kernel nodes' launch attributes contends in the
   * driver (on driver 580 four threads building took longer together than one), and in a fresh
   * process even graphs without attributes were built and instantiated on four threads in more
   * time than built on one and instantiated on four; instantiating and joining scale. */
  cgc_status_t st = index_graphs(s, records, func);
  struct timespec t_indexed;
  clock_gettime(CLOCK_MONOTONIC, &t_indexed);
  bool any_unbuilt = false;
  for (size_t gi = 0; s->families && gi < n_graphs; gi++) any_unbuilt = any_unbuilt || !records[gi].first_alike;
  file_copy_t copy = {NULL, NULL, 0, 0, false};
  if (st == CGC_SUCCESS && any_unbuilt) st = make_unbuilt_set(s, &s->unbuilt, &copy, func);
  if (st == CGC_SUCCESS) st = run_pass(s, records, build_step, n_graphs, 1, func);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double free_built = free_mib();
  if (st == CGC_SUCCESS) st = run_pass(s, records, make_step, n_graphs, s->threads, func);
  clock_gettime(CLOCK_MONOTONIC, &t2);
  double free_made = free_mib();
  if (st == CGC_SUCCESS && s->families) st = run_pass(s, records, family_step, n_graphs, s->threads, func);
  clock_gettime(CLOCK_MONOTONIC, &t3);
  cgc__log("%s: %zu graphs, up to %zu threads: indexed in %.1f ms, built in %.1f ms (device memory %+.0f MiB), "
           "instantiated in %.1f ms (%+.0f MiB), the other members made (unbuilt) in %.1f ms",
           func, n_graphs, s->threads, ms_between(&t0, &t_indexed), ms_between(&t_indexed, &t1),
           free_at_start - free_built, ms_between(&t1, &t2), free_built - free_made, ms_between(&t2, &t3));
  if (copy.on_thread) pthread_join(copy.thread, NULL);
  for (size_t gi = 0; gi < n_graphs; gi++) drop_built(&records[gi]);
  free(records);
  return st;
}


/* ---- the call ---- */

/* Undoes a failed restore: graphs, then the claimed blocks, then the pools (whose release is
 * refused while a graph or block holds them), then the modules. */
static void undo(restorer_t* s, size_t n_graphs, size_t n_pools) {
  for (size_t i = 0; i < n_graphs; i++)
    if (s->graphs[i] != NULL) cgc_graph_destroy(s->graphs[i]);
  for (size_t i = 0; i < s->n_claimed; i++) cgc_free(s->claimed[i]);
  /* Nothing ran on the pools' memory: they go without the device synchronisation of a release,
   * which a capture under way on the device would refuse. */
  for (size_t i = 0; i < n_pools; i++)
    if (s->pools[i] != NULL && !cgc__pool_discard_unused(s->pools[i], "cgc_graphs_restore") &&
        cgc_pool_release(s->pools[i]) != CGC_SUCCESS)
      cgc__log("a failed restore could not release its pool %zu", i);
}

/* The file's header checked (its counts against the room given, unless want_graphs is SIZE_MAX)
 * and against this device and driver, and its pools', modules' and kernels' sections read into
 * `s` (allocated: close_saved frees them, also on failure). */
static cgc_status_t open_saved(restorer_t* s, const void* data, size_t size, size_t want_graphs, size_t want_pools,
                              const char* func) {
  CGC_TRY(cgc__read_header(data, size, &s->h, &s->r, s->threads, func));
  if (want_graphs != SIZE_MAX && (s->h.n_graphs != want_graphs || s->h.n_pools != want_pools))
    return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, func,
                     "the file holds %llu graphs and %llu pools; room was given for %zu and %zu (cgc_saved_info tells "
                     "the counts)",
                     (unsigned long long)s->h.n_graphs, (unsigned long long)s->h.n_pools, want_graphs, want_pools);
  int major = 0, minor = 0;
  CGC_TRY(CGC_CU(func, cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, s->dev->cu_device)));
  CGC_TRY(CGC_CU(func, cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, s->dev->cu_device)));
  if (major != s->h.compute_major || minor != s->h.compute_minor)
    return cgc__fail(CGC_ERROR_SAVED_MISMATCH, func,
                     "the file was saved on a device of compute capability %d.%d; device %d is %d.%d",
                     s->h.compute_major, s->h.compute_minor, s->dev->ordinal, major, minor);
  if (s->h.driver_version != cgc__drv.version)
    return cgc__fail(CGC_ERROR_SAVED_MISMATCH, func,
                     "the file was saved with a driver of CUDA %d; this one is CUDA %d (kernels and executables are "
                     "kept only within one driver version)",
                     s->h.driver_version, cgc__drv.version);
  size_t left = s->r.size - s->r.at;
  if (s->h.n_pools > left / 32 || s->h.n_modules > left / 16 || s->h.n_kernels > left / 64 ||
      s->h.n_graphs > left / 32 || s->h.n_generators > left / 24)
    return damaged(func, "the header's counts");
  s->layouts = calloc(s->h.n_pools + 1, sizeof *s->layouts);
  s->modules = calloc(s->h.n_modules + 1, sizeof *s->modules);
  s->kernels = calloc(s->h.n_kernels + 1, sizeof *s->kernels);
  s->generators = calloc(s->h.n_generators + 1, sizeof *s->generators);
  if (s->layouts == NULL || s->modules == NULL || s->kernels == NULL || s->generators == NULL)
    return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
  CGC_TRY(read_pools(s, func));
  CGC_TRY(read_modules(s, func));
  CGC_TRY(read_kernels(s, func));
  return read_generators(s, func);
}

/* The file's generators created again (a restore's: one reference each, in s->generators), with
 * their saved seed and offset; the draws' arguments get their slots. */
static cgc_status_t create_generators(restorer_t* s, cgc_context_t ctx, const char* func) {
  for (uint64_t i = 0; i < s->h.n_generators; i++) {
    struct restored_generator* g = &s->generators[i];
    cgc_status_t st = cgc_rng_create(ctx, g->seed, &g->rng);
    if (st == CGC_SUCCESS) st = cgc_rng_set_state(g->rng, g->seed, g->offset);
    if (st != CGC_SUCCESS) {
      cgc__append(" (%s, restoring saved generator %llu)", func, (unsigned long long)i);
      return st;
    }
    uint64_t seed = 0, offset = 0;
    cgc__rng_state(g->rng, &seed, &offset, &g->slots);
  }
  return CGC_SUCCESS;
}

/* The file's modules loaded and its kernels found and checked (the context current). */
static cgc_status_t load_code(restorer_t* s, const char* func) {
  /* With CGC_LOG=debug, each load or lookup that took device memory is named. */
  for (size_t i = 0; i < s->h.n_modules; i++) {
    double before = free_mib();
    CGC_TRY(load_module(s, i, func));
    double taken = before - free_mib();
    if (taken > 0)
      cgc__log("%s: module %zu (%llu bytes) took %.0f MiB of device memory to load", func, i,
               (unsigned long long)s->modules[i].size, taken);
  }
  for (size_t i = 0; i < s->h.n_kernels; i++) {
    double before = free_mib();
    CGC_TRY(find_kernel(s, i, func));
    double taken = before - free_mib();
    if (taken > 0)
      cgc__log("%s: kernel '%s' of module %u took %.0f MiB of device memory at its lookup", func, s->kernels[i].name,
               s->kernels[i].module, taken);
  }
  return CGC_SUCCESS;
}

/* What open_saved and load_code allocated and loaded (graphs hold their own modules). */
static void close_saved(restorer_t* s) {
  for (size_t i = 0; s->modules != NULL && i < s->h.n_modules; i++) {
    if (s->modules[i].code != NULL) cgc__module_code_release(s->modules[i].code);
    free((void*)s->modules[i].key);
  }
  for (size_t i = 0; s->layouts != NULL && i < s->h.n_pools; i++) free(s->layouts[i].blocks);
  if (s->unbuilt != NULL) { /* the kernels are the unbuilt members' set's: the restore's reference goes */
    release_set(s->unbuilt);
    s->kernels = NULL;
  }
  for (size_t i = 0; s->kernels != NULL && i < s->h.n_kernels; i++) {
    free(s->kernels[i].name);
    free(s->kernels[i].params);
  }
  free(s->layouts);
  free(s->modules);
  free(s->kernels);
  free(s->generators);
  free(s->claimed);
}

cgc_status_t cgc_graphs_restore(cgc_context_t ctx, const void* data, size_t size,
                                const cgc_restore_options_t* options, cgc_graph_t* graphs, size_t n_graphs,
                                cgc_pool_t* pools, size_t n_pools) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  CGC_CHECK_ARG(graphs != NULL || n_graphs == 0, "graphs is NULL with n_graphs %zu", n_graphs);
  CGC_CHECK_ARG(pools != NULL || n_pools == 0, "pools is NULL with n_pools %zu", n_pools);
  for (size_t i = 0; i < n_graphs; i++) graphs[i] = NULL;
  for (size_t i = 0; i < n_pools; i++) pools[i] = NULL;
  CGC_CHECK_HANDLE(ctx, CGC_MAGIC_CONTEXT);
  CGC_CHECK_ARG(data != NULL, "data is NULL");
  if (options != NULL) {
    CGC_CHECK_ARG(options->struct_size >= sizeof(size_t), "options->struct_size is %zu", options->struct_size);
    CGC_CHECK_ARG(options->struct_size < offsetof(cgc_restore_options_t, flags) + sizeof options->flags ||
                      (options->flags & ~CGC_RESTORE_FAMILIES) == 0,
                  "options->flags has unknown bits %#x", options->flags & ~CGC_RESTORE_FAMILIES);
    CGC_CHECK_ARG(options->struct_size < offsetof(cgc_restore_options_t, threads) + sizeof options->threads ||
                      options->threads <= kMaxRestoreThreads,
                  "options->threads is %u (at most %d)", options->threads, kMaxRestoreThreads);
    CGC_CHECK_ARG(options->struct_size < offsetof(cgc_restore_options_t, n_generators) + sizeof(size_t) ||
                      options->generators != NULL || options->n_generators == 0,
                  "options->generators is NULL with n_generators %zu", options->n_generators);
  }
#define HAS_OPTION(field) \
  (options != NULL && options->struct_size >= offsetof(cgc_restore_options_t, field) + sizeof options->field)
  /* The caller's room for the generators, or NULL: the graphs alone hold them. */
  cgc_rng_t* generators_out = HAS_OPTION(n_generators) ? options->generators : NULL;
  size_t n_generators_out = generators_out != NULL ? options->n_generators : 0;
  for (size_t i = 0; i < n_generators_out; i++) generators_out[i] = NULL;
  if (cgc__drv.cuFuncGetParamInfo == NULL)
    return cgc__fail(CGC_ERROR_NOT_SUPPORTED, __func__,
                     "the driver (CUDA %d) cannot describe kernels' parameters: restoring graphs needs CUDA 12.4 or "
                     "newer", cgc__drv.version);
  restorer_t s = {.dev = ctx->dev, .pools = pools, .graphs = graphs};
  s.families = HAS_OPTION(flags) && (options->flags & CGC_RESTORE_FAMILIES) != 0;
  s.threads = HAS_OPTION(threads) ? options->threads : 0;
#undef HAS_OPTION
  if (s.threads == 0) { /* cgc's choice: up to kDefaultRestoreThreads, as many as there are CPUs */
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    s.threads = cpus > 0 && cpus < kDefaultRestoreThreads ? (size_t)cpus : kDefaultRestoreThreads;
  }
  struct timespec t_start, t_read, t_pools, t_kernels;
  clock_gettime(CLOCK_MONOTONIC, &t_start);
  cgc__ctx_scope_t scope = {false};
  cgc_status_t st = open_saved(&s, data, size, n_graphs, n_pools, __func__);
  if (st != CGC_SUCCESS) goto out;
  if (generators_out != NULL && n_generators_out != s.h.n_generators) {
    st = cgc__fail(CGC_ERROR_INVALID_ARGUMENT, __func__,
                   "the file holds %llu generators; options->n_generators is %zu (cgc_saved_info tells the count)",
                   (unsigned long long)s.h.n_generators, n_generators_out);
    goto out;
  }
  size_t n_blocks = 0;
  for (size_t i = 0; i < n_pools; i++) n_blocks += s.layouts[i].n_blocks;
  s.claimed = calloc(n_blocks + 1, sizeof *s.claimed);
  if (s.claimed == NULL) {
    st = cgc__fail(CGC_ERROR_OUT_OF_MEMORY, __func__, "out of host memory");
    goto out;
  }
  CGC_TRY_GOTO(st, cgc__ctx_enter(s.dev, &scope, __func__), out);
  clock_gettime(CLOCK_MONOTONIC, &t_read);
  double free_at_start = free_mib();
  for (size_t i = 0; i < n_pools && st == CGC_SUCCESS; i++) st = restore_pool(&s, ctx, i, __func__);
  clock_gettime(CLOCK_MONOTONIC, &t_pools);
  double free_pooled = free_mib();
  if (st == CGC_SUCCESS) st = load_code(&s, __func__);
  if (st == CGC_SUCCESS) st = create_generators(&s, ctx, __func__);
  clock_gettime(CLOCK_MONOTONIC, &t_kernels);
  if (st == CGC_SUCCESS)
    cgc__log("%s: header, checksum and sections read in %.1f ms, pools restored in %.1f ms (device memory %+.0f "
             "MiB), modules loaded and kernels checked in %.1f ms (%+.0f MiB)",
             __func__, ms_between(&t_start, &t_read), ms_between(&t_read, &t_pools), free_at_start - free_pooled,
             ms_between(&t_pools, &t_kernels), free_pooled - free_mib());
  if (st == CGC_SUCCESS) st = restore_graphs(&s, __func__);
  if (st != CGC_SUCCESS) undo(&s, n_graphs, n_pools);
  /* The restore's reference to each generator: the caller's now, or let go (the graphs hold
   * theirs; after a failure none does). */
  for (uint64_t i = 0; s.generators != NULL && i < s.h.n_generators; i++) {
    if (s.generators[i].rng == NULL) continue;
    if (st == CGC_SUCCESS && generators_out != NULL)
      generators_out[i] = s.generators[i].rng;
    else
      cgc_rng_destroy(s.generators[i].rng);
  }
out:
  cgc__ctx_leave(&scope);
  close_saved(&s);
  if (st != CGC_SUCCESS) {
    for (size_t i = 0; i < n_graphs; i++) graphs[i] = NULL;
    for (size_t i = 0; i < n_pools; i++) pools[i] = NULL;
  }
  return st;
}

/* ---- rebuilding in the saving process (a verifying save, verify.c) ---- */

cgc_status_t cgc__graphs_rebuild(struct cgc__device* dev, const void* data, size_t size, cgc__rebuilt_t* out,
                                 const char* func) {
  memset(out, 0, sizeof *out);
  /* threads 0: the index on the calling thread, the checksum on cgc's choice of threads (a
   * verifying save's rebuild is a check, not a start to hurry). */
  restorer_t s = {.dev = dev};
  graph_record_t* records = NULL;
  cgc_status_t st = open_saved(&s, data, size, SIZE_MAX, SIZE_MAX, func);
  if (st == CGC_SUCCESS) st = load_code(&s, func);
  if (st == CGC_SUCCESS) {
    records = calloc(s.h.n_graphs + 1, sizeof *records);
    out->graphs = calloc(s.h.n_graphs + 1, sizeof *out->graphs);
    out->done = calloc(s.h.n_graphs + 1, sizeof *out->done);
    out->first_alike = calloc(s.h.n_graphs + 1, sizeof *out->first_alike);
    out->codes = calloc(s.h.n_modules + 1, sizeof *out->codes);
    if (records == NULL || out->graphs == NULL || out->done == NULL || out->first_alike == NULL || out->codes == NULL)
      st = cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
  }
  if (st == CGC_SUCCESS) st = index_graphs(&s, records, func);
  for (size_t gi = 0; st == CGC_SUCCESS && gi < s.h.n_graphs; gi++) {
    graph_record_t* g = &records[gi];
    st = CGC_CU(func, cuEventCreate(&g->done, CU_EVENT_DISABLE_TIMING));
    if (st == CGC_SUCCESS) st = build_graph(&s, g, gi, func);
    out->graphs[gi] = g->graph; /* the rebuilt set's now, built or not */
    out->done[gi] = g->done;
    out->first_alike[gi] = g->first_alike;
    g->graph = NULL;
    g->done = NULL;
    out->n_graphs = gi + 1;
  }
  /* The modules stay loaded while the rebuilt graphs run: the restore's references move. */
  for (size_t i = 0; st == CGC_SUCCESS && i < s.h.n_modules; i++) {
    out->codes[out->n_codes++] = s.modules[i].code;
    s.modules[i].code = NULL;
  }
  for (size_t gi = 0; records != NULL && gi < s.h.n_graphs; gi++) drop_built(&records[gi]);
  free(records);
  if (st != CGC_SUCCESS) cgc__graphs_rebuilt_free(out); /* its graphs before the modules they name */
  close_saved(&s);
  return st;
}

void cgc__graphs_rebuilt_free(cgc__rebuilt_t* r) {
  for (size_t i = 0; i < r->n_graphs; i++) {
    if (r->graphs[i] != NULL) CGC_DRV(cuGraphDestroy)(r->graphs[i]);
    if (r->done[i] != NULL) CGC_DRV(cuEventDestroy)(r->done[i]);
  }
  for (size_t i = 0; i < r->n_codes; i++) cgc__module_code_release(r->codes[i]);
  free(r->graphs);
  free(r->done);
  free(r->first_alike);
  free(r->codes);
  memset(r, 0, sizeof *r);
}
