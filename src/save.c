/* cgc_graphs_save (1.6): a set of graphs, and what rebuilding them needs, as bytes.
 *
 * Nothing but generators' slots is relocated at a restore: a saved graph must use memory that
 * comes back at the same addresses, so every operand is checked here before anything is written
 * (SEMANTICS 38). An
 * operand of a copy or a set must lie in one of the saved pools (pools at fixed addresses); a
 * kernel argument's every 8-byte word must lie in one, or be no address the driver knows (a
 * number), or be the state slots of a generator the graph draws from (a draw's: the file keeps
 * the generator, and where its address lies, which a restore writes again). What the file cannot rebuild is refused with CGC_ERROR_NOT_SAVABLE, naming the graph,
 * the node and, for a kernel, the kernel and the argument.
 *
 * The graphs are walked one at a time under their inspect_lock (the driver allows one thread in a
 * graph at a time); pools' layouts are read under the allocator lock; no lock is held across
 * anything that waits for the GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/saved_file.h"

struct saved_module {
  cgc__kernel_origin_t origin;
  void* image_copy; /* origin.image points here */
};

struct saved_kernel {
  CUfunction fn;
  uint32_t module;
  char* name; /* a copy: the driver's goes with the module, which another thread may unload */
  cgc__kernel_identity_t identity;
  int function_attributes[CGC__SAVED_N_FUNCTION_ATTRIBUTES];
  uint32_t n_params;
  uint32_t (*params)[2]; /* offset, size of each parameter */
  uint32_t param_bytes;
  /* What a new node of this kernel reads for each launch attribute (learnt once, from a scratch
   * graph, since a kernel's compiled cluster size shows there): a node keeps only the attributes
   * whose values differ, so that most nodes keep none. */
  bool defaults_known;
  bool has_default[CGC__SAVED_N_KERNEL_ATTRIBUTES];
  CUlaunchAttributeValue defaults[CGC__SAVED_N_KERNEL_ATTRIBUTES];
};

/* A generator the graphs draw from: its state when first seen (under the graph's inspect_lock,
 * while the graph holds it) and where its slots are. */
struct saved_generator {
  cgc_rng_t rng; /* the saver's reference, until saver_free: a pointer no other generator takes */
  const cgc__use_ops_t* ops;
  uint64_t seed, offset, slots;
};

/* A generator of the graph being written: where its slots are, what one replay consumes, and
 * its index among the file's generators. */
struct graph_generator {
  uint64_t slots, amount;
  uint32_t index;
};

typedef struct saver {
  struct cgc__device* dev;
  cgc_pool_t* pools;
  cgc__pool_layout_t* layouts;
  size_t n_pools;
  struct saved_module* modules;
  size_t n_modules, cap_modules;
  struct saved_kernel* kernels;
  size_t n_kernels, cap_kernels;
  struct saved_generator* generators;
  size_t n_generators, cap_generators;
  /* The graph being written: the generators it draws from. */
  struct graph_generator* graph_generators;
  size_t n_graph_generators;
  cgc__writer_t graphs; /* the graphs' section, written as they are walked */
  uint64_t n_nodes;
  /* The node being written, for messages. */
  size_t graph_index, node_index;
} saver_t;

static const CUlaunchAttributeID kAttributeIds[] = {
#define ATTRIBUTE_ID(id) id,
    CGC_SAVED_KERNEL_ATTRIBUTES(ATTRIBUTE_ID)
#undef ATTRIBUTE_ID
};

static cgc_status_t out_of_memory(const char* func) {
  return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, func, "out of host memory");
}

static bool grow_array(void** items, size_t* cap, size_t n, size_t item_size) {
  if (n < *cap) return true;
  size_t fresh = *cap ? 2 * *cap : 16;
  void* grown = realloc(*items, fresh * item_size);
  if (grown == NULL) return false;
  *items = grown;
  *cap = fresh;
  return true;
}

/* ---- pools ---- */

static cgc_status_t add_pool(saver_t* s, cgc_pool_t pool, const char* func) {
  for (size_t i = 0; i < s->n_pools; i++)
    if (s->pools[i] == pool) return CGC_SUCCESS;
  cgc_pool_t* pools = realloc(s->pools, (s->n_pools + 1) * sizeof *pools);
  if (pools == NULL) return out_of_memory(func);
  s->pools = pools;
  cgc__pool_layout_t* layouts = realloc(s->layouts, (s->n_pools + 1) * sizeof *layouts);
  if (layouts == NULL) return out_of_memory(func);
  s->layouts = layouts;
  CGC_TRY(cgc__pool_layout(pool, &s->layouts[s->n_pools], func));
  cgc__pool_hold(pool); /* until the file is written: no release may take it meanwhile */
  s->pools[s->n_pools++] = pool;
  return CGC_SUCCESS;
}

static int64_t pool_holding(const saver_t* s, uint64_t address) {
  for (size_t i = 0; i < s->n_pools; i++)
    if (address - s->layouts[i].base < s->layouts[i].capacity) return (int64_t)i;
  return -1;
}

/* Whether the driver knows `value` as an address of memory (device, pinned host or managed)
 * that no saved pool holds. Small numbers and values beyond any virtual address are numbers
 * without asking. */
static bool foreign_address(const saver_t* s, uint64_t value) {
  if (value < 0x10000 || value >= ((uint64_t)1 << 57) || pool_holding(s, value) >= 0) return false;
  unsigned int type = 0;
  return CGC_DRV(cuPointerGetAttribute)(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)value) == CUDA_SUCCESS;
}

/* ---- modules and kernels ---- */

static const char* node_kind_name(CUgraphNodeType type) {
  switch (type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: return "kernel";
    case CU_GRAPH_NODE_TYPE_MEMCPY: return "copy";
    case CU_GRAPH_NODE_TYPE_MEMSET: return "set";
    case CU_GRAPH_NODE_TYPE_HOST: return "host function";
    case CU_GRAPH_NODE_TYPE_GRAPH: return "child graph";
    case CU_GRAPH_NODE_TYPE_EMPTY: return "empty";
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: return "event wait";
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD: return "event record";
    case CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL: return "external semaphore signal";
    case CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT: return "external semaphore wait";
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: return "memory allocation";
    case CU_GRAPH_NODE_TYPE_MEM_FREE: return "memory free";
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: return "memory operation";
    case CU_GRAPH_NODE_TYPE_CONDITIONAL: return "conditional";
    default: return "unknown";
  }
}

static cgc_status_t add_module(saver_t* s, const cgc__kernel_origin_t* origin, uint32_t* index, const char* func) {
  for (size_t i = 0; i < s->n_modules; i++) {
    const cgc__kernel_origin_t* o = &s->modules[i].origin;
    if (origin->key != NULL ? o->key != NULL && strcmp(o->key, origin->key) == 0
                            : o->key == NULL && o->size == origin->size &&
                                  memcmp(o->image, origin->image, origin->size) == 0) {
      *index = (uint32_t)i;
      return CGC_SUCCESS;
    }
  }
  if (!grow_array((void**)&s->modules, &s->cap_modules, s->n_modules, sizeof *s->modules)) return out_of_memory(func);
  /* Copies: a module's image goes with its code, which another thread's reset and unload may
   * free before the file is written (the key of an added image lives as long as the process). */
  struct saved_module* m = &s->modules[s->n_modules];
  m->origin = *origin;
  m->image_copy = malloc(origin->size ? origin->size : 1);
  if (m->image_copy == NULL) return out_of_memory(func);
  memcpy(m->image_copy, origin->image, origin->size);
  m->origin.image = m->image_copy;
  *index = (uint32_t)s->n_modules++;
  return CGC_SUCCESS;
}

/* The kernel `fn` of a graph holding `g`'s uses, added to the file's kernels on first sight. */
static cgc_status_t add_kernel(saver_t* s, cgc_graph_t g, CUfunction fn, uint32_t* index, const char* func) {
  for (size_t i = 0; i < s->n_kernels; i++)
    if (s->kernels[i].fn == fn) {
      *index = (uint32_t)i;
      return CGC_SUCCESS;
    }
  if (!grow_array((void**)&s->kernels, &s->cap_kernels, s->n_kernels, sizeof *s->kernels)) return out_of_memory(func);
  struct saved_kernel* k = &s->kernels[s->n_kernels];
  memset(k, 0, sizeof *k);
  k->fn = fn;
  const char* name = NULL;
  CGC_TRY(CGC_CU(func, cuFuncGetName(&name, fn)));
  if ((k->name = strdup(name)) == NULL) return out_of_memory(func); /* the driver's lives with the module */
  s->n_kernels++; /* counted now, so that saver_free frees what it holds; taken back on failure */
  /* A draw's kernel is the library's own: its image goes into the file as a module's. */
  cgc__kernel_origin_t origin = {NULL, 0, NULL};
  cgc_status_t st = cgc__rng_kernels_image(s->dev, fn, &origin.image, &origin.size)
                        ? CGC_SUCCESS
                        : cgc__module_origin(s->dev, fn, k->name, g->uses, g->n_uses, &origin, func);
  if (st != CGC_SUCCESS) {
    cgc__append(" (graph %zu, node %zu)", s->graph_index, s->node_index);
    return st;
  }
  CGC_TRY(add_module(s, &origin, &k->module, func));
  CGC_TRY(cgc__kernel_identity(fn, &k->identity, func));
  int n_attribute = 0;
#define READ_FUNCTION_ATTRIBUTE(attribute) \
  CGC_TRY(CGC_CU(func, cuFuncGetAttribute(&k->function_attributes[n_attribute++], attribute, fn)));
  CGC_SAVED_FUNCTION_ATTRIBUTES(READ_FUNCTION_ATTRIBUTE)
#undef READ_FUNCTION_ATTRIBUTE
  /* The parameters' layout: asked one index after another until the driver says there is none. */
  size_t cap = 0;
  for (;;) {
    size_t offset = 0, size = 0;
    if (CGC_DRV(cuFuncGetParamInfo)(fn, k->n_params, &offset, &size) != CUDA_SUCCESS) break;
    if (k->n_params == cap) {
      cap = cap ? 2 * cap : 8;
      void* grown = realloc(k->params, cap * sizeof *k->params);
      if (grown == NULL) return out_of_memory(func); /* saver_free frees k->params */
      k->params = grown;
    }
    k->params[k->n_params][0] = (uint32_t)offset;
    k->params[k->n_params][1] = (uint32_t)size;
    if (offset + size > k->param_bytes) k->param_bytes = (uint32_t)(offset + size);
    k->n_params++;
  }
  *index = (uint32_t)(s->n_kernels - 1);
  return CGC_SUCCESS;
}

/* ---- generators ---- */

/* The generators graph `g` draws from (its inspect_lock held, so it holds them): each added to
 * the file's on first sight with its state now, and listed for the graph's record and draws. */
static cgc_status_t graph_generators(saver_t* s, cgc_graph_t g, const char* func) {
  free(s->graph_generators);
  s->n_graph_generators = 0;
  s->graph_generators = calloc(g->n_uses + 1, sizeof *s->graph_generators);
  if (s->graph_generators == NULL) return out_of_memory(func);
  for (size_t i = 0; i < g->n_uses; i++) {
    cgc_rng_t rng = cgc__rng_of_use(&g->uses[i]);
    if (rng == NULL) continue;
    size_t k = 0;
    while (k < s->n_generators && s->generators[k].rng != rng) k++;
    if (k == s->n_generators) {
      if (!grow_array((void**)&s->generators, &s->cap_generators, s->n_generators, sizeof *s->generators))
        return out_of_memory(func);
      struct saved_generator* fresh = &s->generators[s->n_generators++];
      fresh->rng = rng;
      fresh->ops = g->uses[i].ops;
      fresh->ops->retain(rng);
      cgc__rng_state(rng, &fresh->seed, &fresh->offset, &fresh->slots);
    }
    s->graph_generators[s->n_graph_generators++] =
        (struct graph_generator){s->generators[k].slots, g->uses[i].amount, (uint32_t)k};
  }
  return CGC_SUCCESS;
}

/* Which of the graph's generators has its slots at `address`, or -1. */
static long generator_at(const saver_t* s, uint64_t address) {
  for (size_t i = 0; i < s->n_graph_generators; i++)
    if (s->graph_generators[i].slots == address) return (long)i;
  return -1;
}

/* ---- nodes ---- */

static cgc_status_t not_savable(const saver_t* s, const char* what, const char* why) {
  return cgc__fail(CGC_ERROR_NOT_SAVABLE, "cgc_graphs_save", "graph %zu, node %zu (%s): %s", s->graph_index,
                   s->node_index, what, why);
}

/* The argument bytes of a kernel node, laid out as the kernel's parameters are. */
static bool argument_bytes(const CUDA_KERNEL_NODE_PARAMS* p, const struct saved_kernel* k, unsigned char* out) {
  memset(out, 0, k->param_bytes);
  if (p->kernelParams != NULL) {
    for (uint32_t i = 0; i < k->n_params; i++) memcpy(out + k->params[i][0], p->kernelParams[i], k->params[i][1]);
    return true;
  }
  const void* buffer = NULL;
  size_t size = 0;
  for (void** e = p->extra; e != NULL && *e != CU_LAUNCH_PARAM_END; e += 2) {
    if (*e == CU_LAUNCH_PARAM_BUFFER_POINTER) buffer = e[1];
    if (*e == CU_LAUNCH_PARAM_BUFFER_SIZE) size = *(const size_t*)e[1];
  }
  if (buffer == NULL || size < k->param_bytes) return k->param_bytes == 0;
  memcpy(out, buffer, k->param_bytes);
  return true;
}

/* A new kernel node's attribute values, read from a node of `p`'s kernel added to a scratch graph. */
static cgc_status_t learn_defaults(struct saved_kernel* s, const CUDA_KERNEL_NODE_PARAMS* p, const char* func) {
  CUgraph scratch = NULL;
  CUgraphNode node = NULL;
  CGC_TRY(CGC_CU(func, cuGraphCreate(&scratch, 0)));
  cgc_status_t st = CGC_CU(func, cuGraphAddKernelNode(&node, scratch, NULL, 0, p));
  for (size_t i = 0; st == CGC_SUCCESS && i < CGC__SAVED_N_KERNEL_ATTRIBUTES; i++) {
    memset(&s->defaults[i], 0, sizeof s->defaults[i]);
    s->has_default[i] = CGC_DRV(cuGraphKernelNodeGetAttribute)(node, kAttributeIds[i], &s->defaults[i]) == CUDA_SUCCESS;
  }
  CGC_DRV(cuGraphDestroy)(scratch);
  s->defaults_known = st == CGC_SUCCESS;
  return st;
}

static cgc_status_t save_kernel_node(saver_t* s, cgc_graph_t g, CUgraphNode node, const char* func) {
  CUDA_KERNEL_NODE_PARAMS p;
  memset(&p, 0, sizeof p);
  CGC_TRY(CGC_CU(func, cuGraphKernelNodeGetParams(node, &p)));
  CUfunction fn = p.func;
  if (fn == NULL && p.kern != NULL) CGC_TRY(CGC_CU(func, cuKernelGetFunction(&fn, p.kern)));
  if (fn == NULL) return not_savable(s, "kernel", "the driver reports no function for it");
  uint32_t index = 0;
  CGC_TRY(add_kernel(s, g, fn, &index, func));
  const struct saved_kernel* k = &s->kernels[index];
  unsigned char* args = malloc(k->param_bytes ? k->param_bytes : 1);
  /* Where the arguments hold a generator's slots: byte offset, generator index. */
  uint32_t(*relocations)[2] = calloc(k->param_bytes / 8 + 1, sizeof *relocations);
  uint32_t n_relocations = 0;
  cgc_status_t st = CGC_SUCCESS;
  if (args == NULL || relocations == NULL) {
    st = out_of_memory(func);
    goto out;
  }
  if (!argument_bytes(&p, k, args)) {
    st = not_savable(s, "kernel", "its arguments are given in a form cgc cannot read");
    goto out;
  }
  /* Every 8-byte word of every argument: an address in a saved pool, a generator's slots, or no
   * address at all. */
  for (uint32_t i = 0; i < k->n_params; i++) {
    uint32_t offset = k->params[i][0], size = k->params[i][1];
    for (uint32_t at = (offset + 7) / 8 * 8; at + 8 <= offset + size; at += 8) {
      uint64_t word;
      memcpy(&word, args + at, sizeof word);
      long generator = generator_at(s, word);
      if (generator >= 0) {
        relocations[n_relocations][0] = at;
        relocations[n_relocations][1] = s->graph_generators[generator].index;
        n_relocations++;
        continue;
      }
      if (!foreign_address(s, word)) continue;
      st = cgc__fail(CGC_ERROR_NOT_SAVABLE, func,
                     "graph %zu, node %zu (kernel '%s'), argument %u, byte %u of it: %#llx is an address of memory "
                     "outside the saved pools (cgc_malloc's, another pool's or the application's own), which a "
                     "restore would not give back at that address: allocate it from a pool at fixed addresses and "
                     "save that pool too (options->pools)",
                     s->graph_index, s->node_index, k->name, i, at - offset, (unsigned long long)word);
      goto out;
    }
  }
  /* The node's launch attributes that differ from a new node's. */
  if (!s->kernels[index].defaults_known) CGC_TRY_GOTO(st, learn_defaults(&s->kernels[index], &p, func), out);
  const CUlaunchAttributeID* ids = kAttributeIds;
  CUlaunchAttributeValue values[CGC__SAVED_N_KERNEL_ATTRIBUTES];
  bool have[CGC__SAVED_N_KERNEL_ATTRIBUTES];
  uint32_t n_attributes = 0;
  for (size_t i = 0; i < CGC__SAVED_N_KERNEL_ATTRIBUTES; i++) {
    memset(&values[i], 0, sizeof values[i]);
    have[i] = CGC_DRV(cuGraphKernelNodeGetAttribute)(node, ids[i], &values[i]) == CUDA_SUCCESS &&
              (!k->has_default[i] || memcmp(&values[i], &k->defaults[i], sizeof values[i]) != 0);
    if (have[i] && ids[i] == CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW && values[i].accessPolicyWindow.num_bytes > 0 &&
        pool_holding(s, (uint64_t)(uintptr_t)values[i].accessPolicyWindow.base_ptr) < 0) {
      st = not_savable(s, "kernel", "its access policy window lies outside the saved pools");
      cgc__append(" (kernel '%s')", k->name);
      goto out;
    }
    n_attributes += have[i];
  }
  cgc__writer_t* w = &s->graphs;
  cgc__put_u32(w, n_relocations > 0 ? CGC__SAVED_DRAW : CGC__SAVED_KERNEL);
  cgc__put_u32(w, index);
  cgc__put_u32(w, p.gridDimX);
  cgc__put_u32(w, p.gridDimY);
  cgc__put_u32(w, p.gridDimZ);
  cgc__put_u32(w, p.blockDimX);
  cgc__put_u32(w, p.blockDimY);
  cgc__put_u32(w, p.blockDimZ);
  cgc__put_u32(w, p.sharedMemBytes);
  cgc__put_u32(w, n_attributes);
  if (n_relocations > 0) { /* a draw: where its generators' addresses go, before the arguments */
    cgc__put_u32(w, n_relocations);
    cgc__put_u32(w, 0);
    for (uint32_t r = 0; r < n_relocations; r++) {
      cgc__put_u32(w, relocations[r][0]);
      cgc__put_u32(w, relocations[r][1]);
    }
  }
  cgc__put_bytes(w, args, k->param_bytes);
  for (size_t i = 0; i < CGC__SAVED_N_KERNEL_ATTRIBUTES; i++) {
    if (!have[i]) continue;
    cgc__put_u32(w, (uint32_t)ids[i]);
    cgc__put_u32(w, 0);
    cgc__put_bytes(w, &values[i], sizeof values[i]);
  }
out:
  free(args);
  free(relocations);
  return st;
}

/* A copy's or a set's device operand must lie in a saved pool. */
static cgc_status_t check_operand(const saver_t* s, const char* kind, const char* operand, CUmemorytype type,
                                  uint64_t address) {
  char why[224];
  if (type == CU_MEMORYTYPE_HOST || type == CU_MEMORYTYPE_ARRAY) {
    snprintf(why, sizeof why, "its %s is %s, which a restore cannot give back", operand,
             type == CU_MEMORYTYPE_HOST ? "host memory" : "a CUDA array");
    return not_savable(s, kind, why);
  }
  if (pool_holding(s, address) >= 0) return CGC_SUCCESS;
  snprintf(why, sizeof why,
           "its %s %#llx lies outside the saved pools: allocate it from a pool at fixed addresses and save that pool",
           operand, (unsigned long long)address);
  return not_savable(s, kind, why);
}

static cgc_status_t save_memset_node(saver_t* s, CUgraphNode node, const char* func) {
  CUDA_MEMSET_NODE_PARAMS p;
  memset(&p, 0, sizeof p);
  CGC_TRY(CGC_CU(func, cuGraphMemsetNodeGetParams(node, &p)));
  CGC_TRY(check_operand(s, "set", "destination", CU_MEMORYTYPE_DEVICE, p.dst));
  cgc__writer_t* w = &s->graphs;
  cgc__put_u32(w, CGC__SAVED_MEMSET);
  cgc__put_u32(w, p.value);
  cgc__put_u64(w, p.dst);
  cgc__put_u64(w, p.pitch);
  cgc__put_u64(w, p.elementSize);
  cgc__put_u64(w, p.width);
  cgc__put_u64(w, p.height);
  return CGC_SUCCESS;
}

static cgc_status_t save_memcpy_node(saver_t* s, CUgraphNode node, const char* func) {
  CUDA_MEMCPY3D c;
  memset(&c, 0, sizeof c);
  CGC_TRY(CGC_CU(func, cuGraphMemcpyNodeGetParams(node, &c)));
  CGC_TRY(check_operand(s, "copy", "source", c.srcMemoryType, c.srcDevice));
  CGC_TRY(check_operand(s, "copy", "destination", c.dstMemoryType, c.dstDevice));
  uint64_t fields[] = {c.srcDevice, c.srcXInBytes, c.srcY, c.srcZ, c.srcPitch, c.srcHeight,
                       c.dstDevice, c.dstXInBytes, c.dstY, c.dstZ, c.dstPitch, c.dstHeight,
                       c.WidthInBytes, c.Height, c.Depth};
  cgc__writer_t* w = &s->graphs;
  cgc__put_u32(w, CGC__SAVED_MEMCPY);
  cgc__put_u32(w, 0);
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) cgc__put_u64(w, fields[i]);
  return CGC_SUCCESS;
}

/* ---- graphs ---- */

typedef struct node_index {
  CUgraphNode node;
  size_t index;
} node_index_t;

static int by_node(const void* a, const void* b) {
  uintptr_t x = (uintptr_t)((const node_index_t*)a)->node, y = (uintptr_t)((const node_index_t*)b)->node;
  return x < y ? -1 : x > y;
}

/* The position of `node` among the graph's kept nodes, or -1 (cgc's completion record). */
static long position_of(const node_index_t* sorted, size_t n, CUgraphNode node) {
  node_index_t key = {node, 0};
  const node_index_t* hit = bsearch(&key, sorted, n, sizeof *sorted, by_node);
  return hit != NULL ? (long)hit->index : -1;
}

/* Why graph `g` cannot be saved before its nodes are looked at, or NULL. */
static const char* graph_refusal(cgc_graph_t g, char* why, size_t why_size) {
  if (atomic_load(&g->updating)) return "a capture updates it, or another thread resets or destroys it";
  if (g->exec == NULL) return "it was reset";
  if (g->any_disabled) return "kernel nodes of its executable were disabled (cgc_graph_kernel_node_set_enabled)";
  if (g->args_changed)
    return "its executable's kernel arguments were changed (cgc_graph_kernel_node_set_args), which its graph does "
           "not show";
  for (size_t i = 0; i < g->n_uses; i++)
    if (strcmp(g->uses[i].ops->kind, "module") != 0 && cgc__rng_of_use(&g->uses[i]) == NULL) {
      snprintf(why, why_size, "it holds a %s (of what a graph holds, only modules and generators can be saved "
               "with it yet)", g->uses[i].ops->kind);
      return why;
    }
  if (!cgc__pool_is_fixed(g->pool))
    return "it was captured into a pool that is not at fixed addresses: capture it into a pool of "
           "cgc_pool_create_at";
  return NULL;
}

/* Writes graph `g` (inspect_lock held, context current): its pool, nodes in an order where each
 * follows its dependencies, then edges. */
static cgc_status_t save_graph(saver_t* s, cgc_graph_t g, const char* func) {
  CUgraphNode* nodes = NULL;
  node_index_t* sorted = NULL;
  CUgraphNode *from = NULL, *to = NULL;
  CUgraphEdgeData* data = NULL;
  size_t *order = NULL, *indegree = NULL, *first_out = NULL, *outs = NULL;
  long *edge_from = NULL, *edge_to = NULL;
  cgc_status_t st = CGC_SUCCESS;
  size_t n = 0, n_edges = 0, kept = 0;
  CGC_TRY_GOTO(st, CGC_CU(func, cuGraphGetNodes(g->graph, NULL, &n)), out);
  nodes = calloc(n + 1, sizeof *nodes);
  sorted = calloc(n + 1, sizeof *sorted);
  if (nodes == NULL || sorted == NULL) {
    st = out_of_memory(func);
    goto out;
  }
  CGC_TRY_GOTO(st, CGC_CU(func, cuGraphGetNodes(g->graph, nodes, &n)), out);
  /* Every node but cgc's completion record keeps its position in the driver's list. */
  for (size_t i = 0; i < n; i++) {
    CUgraphNodeType type;
    CGC_TRY_GOTO(st, CGC_CU(func, cuGraphNodeGetType(nodes[i], &type)), out);
    if (type == CU_GRAPH_NODE_TYPE_EVENT_RECORD) {
      CUevent ev = NULL;
      CGC_TRY_GOTO(st, CGC_CU(func, cuGraphEventRecordNodeGetEvent(nodes[i], &ev)), out);
      if (ev == g->done) continue;
    }
    nodes[kept] = nodes[i];
    sorted[kept] = (node_index_t){nodes[i], kept};
    kept++;
  }
  qsort(sorted, kept, sizeof *sorted, by_node);
  CGC_TRY_GOTO(st, CGC_CU(func, cuGraphGetEdges(g->graph, NULL, NULL, NULL, &n_edges)), out);
  from = calloc(n_edges + 1, sizeof *from);
  to = calloc(n_edges + 1, sizeof *to);
  data = calloc(n_edges + 1, sizeof *data);
  edge_from = calloc(n_edges + 1, sizeof *edge_from);
  edge_to = calloc(n_edges + 1, sizeof *edge_to);
  indegree = calloc(kept + 1, sizeof *indegree);
  first_out = calloc(kept + 2, sizeof *first_out);
  outs = calloc(n_edges + 1, sizeof *outs);
  order = calloc(kept + 1, sizeof *order);
  if (!from || !to || !data || !edge_from || !edge_to || !indegree || !first_out || !outs || !order) {
    st = out_of_memory(func);
    goto out;
  }
  CGC_TRY_GOTO(st, CGC_CU(func, cuGraphGetEdges(g->graph, from, to, data, &n_edges)), out);
  size_t n_kept_edges = 0;
  for (size_t e = 0; e < n_edges; e++) {
    long a = position_of(sorted, kept, from[e]), b = position_of(sorted, kept, to[e]);
    if (a < 0 || b < 0) continue; /* into cgc's completion record */
    if (data[e].type != CU_GRAPH_DEPENDENCY_TYPE_DEFAULT || data[e].from_port != 0 || data[e].to_port != 0) {
      s->node_index = (size_t)b;
      st = not_savable(s, "edge", "an edge of programmatic dependent launch, which cgc does not save yet");
      goto out;
    }
    edge_from[n_kept_edges] = a;
    edge_to[n_kept_edges] = b;
    n_kept_edges++;
    indegree[b]++;
    first_out[a + 1]++;
  }
  /* Kahn's order, stable in the driver's node order: every node after its dependencies. */
  for (size_t i = 0; i < kept; i++) first_out[i + 1] += first_out[i];
  {
    size_t* fill = calloc(kept + 1, sizeof *fill);
    if (fill == NULL) {
      st = out_of_memory(func);
      goto out;
    }
    for (size_t i = 0; i < kept; i++) fill[i] = first_out[i];
    for (size_t e = 0; e < n_kept_edges; e++) outs[fill[edge_from[e]]++] = (size_t)edge_to[e];
    free(fill);
  }
  size_t head = 0, tail = 0;
  for (size_t i = 0; i < kept; i++)
    if (indegree[i] == 0) order[tail++] = i;
  while (head < tail) {
    size_t v = order[head++];
    for (size_t j = first_out[v]; j < first_out[v + 1]; j++)
      if (--indegree[outs[j]] == 0) order[tail++] = outs[j];
  }
  if (tail != kept) {
    st = cgc__fail(CGC_ERROR_INTERNAL, func, "graph %zu: its edges form a cycle", s->graph_index);
    goto out;
  }
  /* rank[old] = new position, kept in indegree[] (no longer needed). */
  for (size_t i = 0; i < kept; i++) indegree[order[i]] = i;
  int64_t pool = -1;
  for (size_t i = 0; i < s->n_pools; i++)
    if (s->pools[i] == g->pool) pool = (int64_t)i;
  if (pool < 0) { /* recaptured into another pool since its pool was read */
    st = cgc__fail(CGC_ERROR_INVALID_STATE, func, "graph %zu changed while it was saved (another thread reset it)",
                   s->graph_index);
    goto out;
  }
  CGC_TRY_GOTO(st, graph_generators(s, g, func), out);
  cgc__put_u32(&s->graphs, (uint32_t)pool);
  cgc__put_u32(&s->graphs, (uint32_t)s->n_graph_generators);
  cgc__put_u64(&s->graphs, kept);
  cgc__put_u64(&s->graphs, n_kept_edges);
  size_t length_at = s->graphs.size; /* the rest's length, set once it is written */
  cgc__put_u64(&s->graphs, 0);
  for (size_t i = 0; i < s->n_graph_generators; i++) {
    cgc__put_u32(&s->graphs, s->graph_generators[i].index);
    cgc__put_u32(&s->graphs, 0);
    cgc__put_u64(&s->graphs, s->graph_generators[i].amount);
  }
  for (size_t i = 0; i < kept && st == CGC_SUCCESS; i++) {
    CUgraphNode node = nodes[order[i]];
    s->node_index = i;
    CUgraphNodeType type;
    CGC_TRY_GOTO(st, CGC_CU(func, cuGraphNodeGetType(node, &type)), out);
    switch (type) {
      case CU_GRAPH_NODE_TYPE_KERNEL: st = save_kernel_node(s, g, node, func); break;
      case CU_GRAPH_NODE_TYPE_MEMSET: st = save_memset_node(s, node, func); break;
      case CU_GRAPH_NODE_TYPE_MEMCPY: st = save_memcpy_node(s, node, func); break;
      case CU_GRAPH_NODE_TYPE_EMPTY:
        cgc__put_u32(&s->graphs, CGC__SAVED_EMPTY);
        cgc__put_u32(&s->graphs, 0);
        break;
      default:
        st = not_savable(s, node_kind_name(type), "a node of this kind cannot be saved (kernels, copies and sets "
                                                  "between saved pools, and empty nodes can)");
    }
  }
  if (st != CGC_SUCCESS) goto out;
  for (size_t e = 0; e < n_kept_edges; e++) {
    cgc__put_u32(&s->graphs, (uint32_t)indegree[edge_from[e]]);
    cgc__put_u32(&s->graphs, (uint32_t)indegree[edge_to[e]]);
  }
  cgc__patch_u64(&s->graphs, length_at, s->graphs.size - length_at - 8);
  s->n_nodes += kept;
out:
  free(nodes);
  free(sorted);
  free(from);
  free(to);
  free(data);
  free(edge_from);
  free(edge_to);
  free(indegree);
  free(first_out);
  free(outs);
  free(order);
  return st;
}

/* ---- the file ---- */

static void write_sections(saver_t* s, cgc__writer_t* w, cgc__saved_header_t* h) {
  for (size_t i = 0; i < s->n_pools; i++) {
    const cgc__pool_layout_t* l = &s->layouts[i];
    cgc__put_u64(w, l->base);
    cgc__put_u64(w, l->capacity);
    cgc__put_u64(w, l->backed);
    cgc__put_u64(w, l->n_blocks);
    for (size_t b = 0; b < l->n_blocks; b++) {
      cgc__put_u64(w, l->blocks[b].offset);
      cgc__put_u64(w, l->blocks[b].size);
    }
    h->pool_bytes += l->backed;
  }
  for (size_t i = 0; i < s->n_modules; i++) {
    const cgc__kernel_origin_t* o = &s->modules[i].origin;
    size_t key_length = o->key != NULL ? strlen(o->key) : 0;
    cgc__put_u32(w, o->key != NULL);
    cgc__put_u32(w, (uint32_t)key_length);
    cgc__put_u64(w, o->size);
    cgc__put_bytes(w, o->key, key_length);
    if (o->key == NULL) {
      cgc__put_bytes(w, o->image, o->size);
      h->image_bytes += o->size;
    }
  }
  for (size_t i = 0; i < s->n_kernels; i++) {
    const struct saved_kernel* k = &s->kernels[i];
    size_t name_length = strlen(k->name);
    cgc__put_u32(w, k->module);
    cgc__put_u32(w, (uint32_t)name_length);
    const int identity[] = {k->identity.registers, k->identity.static_shared, k->identity.constant,
                            k->identity.local, k->identity.binary_version, k->identity.max_threads};
    for (size_t j = 0; j < sizeof identity / sizeof identity[0]; j++) cgc__put_u32(w, (uint32_t)identity[j]);
    for (int j = 0; j < CGC__SAVED_N_FUNCTION_ATTRIBUTES; j++) cgc__put_u32(w, (uint32_t)k->function_attributes[j]);
    cgc__put_u32(w, k->n_params);
    cgc__put_u32(w, k->param_bytes);
    cgc__put_bytes(w, k->name, name_length);
    for (uint32_t j = 0; j < k->n_params; j++) {
      cgc__put_u32(w, k->params[j][0]);
      cgc__put_u32(w, k->params[j][1]);
    }
  }
  for (size_t i = 0; i < s->n_generators; i++) {
    cgc__put_u64(w, s->generators[i].seed);
    cgc__put_u64(w, s->generators[i].offset);
    cgc__put_u64(w, s->generators[i].slots);
  }
  h->n_generators = s->n_generators;
  cgc__put_bytes(w, s->graphs.data, s->graphs.size);
}

static void saver_free(saver_t* s) {
  for (size_t i = 0; i < s->n_pools; i++) {
    free(s->layouts[i].blocks);
    cgc__pool_unref(s->pools[i], NULL);
  }
  for (size_t i = 0; i < s->n_modules; i++) free(s->modules[i].image_copy);
  for (size_t i = 0; i < s->n_kernels; i++) free(s->kernels[i].name);
  free(s->layouts);
  free(s->pools);
  free(s->modules);
  for (size_t i = 0; i < s->n_kernels; i++) free(s->kernels[i].params);
  free(s->kernels);
  for (size_t i = 0; i < s->n_generators; i++) s->generators[i].ops->release(s->generators[i].rng);
  free(s->generators);
  free(s->graph_generators);
  free(s->graphs.data);
}

cgc_status_t cgc_graphs_save(const cgc_graph_t* graphs, size_t n_graphs, const cgc_save_options_t* options,
                             void* buffer, size_t capacity, size_t* size) {
  CGC_REFUSE_IN_HOST_FUNCTION();
  CGC_CHECK_ARG(size != NULL, "size is NULL");
  *size = 0;
  CGC_CHECK_ARG(graphs != NULL && n_graphs > 0, "graphs is NULL or n_graphs is 0");
  CGC_CHECK_ARG(buffer != NULL || capacity == 0, "buffer is NULL with capacity %zu", capacity);
  cgc_save_options_t opts = {sizeof opts, NULL, 0, 0};
  if (options != NULL) {
    CGC_CHECK_ARG(options->struct_size >= sizeof(size_t) && options->struct_size <= 4096,
                  "options->struct_size is %zu", options->struct_size);
    memcpy(&opts, options, options->struct_size < sizeof opts ? options->struct_size : sizeof opts);
    CGC_CHECK_ARG(opts.pools != NULL || opts.n_pools == 0, "options->pools is NULL with n_pools %zu", opts.n_pools);
    CGC_CHECK_ARG((opts.flags & ~CGC_SAVE_VERIFY) == 0, "options->flags has unknown bits %#x",
                  opts.flags & ~CGC_SAVE_VERIFY);
  }
  for (size_t i = 0; i < n_graphs; i++) {
    cgc_status_t st = cgc__check_handle(graphs[i], CGC_MAGIC_GRAPH, __func__, "graphs[i]");
    if (st != CGC_SUCCESS) {
      cgc__append(" (graphs[%zu])", i);
      return st;
    }
    if (graphs[i]->dev != graphs[0]->dev)
      return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, __func__, "graphs[%zu] is on device %d, graphs[0] on device %d", i,
                       graphs[i]->dev->ordinal, graphs[0]->dev->ordinal);
  }
  for (size_t i = 0; i < opts.n_pools; i++) {
    cgc_status_t st = cgc__check_handle(opts.pools[i], CGC_MAGIC_POOL, __func__, "options->pools[i]");
    if (st != CGC_SUCCESS) {
      cgc__append(" (options->pools[%zu])", i);
      return st;
    }
    if (!cgc__pool_is_fixed(opts.pools[i]))
      return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, __func__,
                       "options->pools[%zu] (%p) is not a pool at fixed addresses (cgc_pool_create_at)", i,
                       (void*)opts.pools[i]);
    if (cgc__pool_device(opts.pools[i]) != graphs[0]->dev)
      return cgc__fail(CGC_ERROR_INVALID_ARGUMENT, __func__, "options->pools[%zu] is on device %d, the graphs on %d",
                       i, cgc__pool_device(opts.pools[i])->ordinal, graphs[0]->dev->ordinal);
  }
  if (cgc__drv.cuFuncGetParamInfo == NULL || cgc__drv.cuFuncGetName == NULL || cgc__drv.cuGraphGetEdges == NULL)
    return cgc__fail(CGC_ERROR_NOT_SUPPORTED, __func__,
                     "the driver (CUDA %d) cannot describe kernels' parameters: saving graphs needs CUDA 12.4 or newer",
                     cgc__drv.version);
  saver_t s = {.dev = graphs[0]->dev};
  cgc__writer_t file = {NULL, 0, 0, false};
  cgc__ctx_scope_t scope = {false};
  cgc_status_t st = CGC_SUCCESS;
  /* The graphs' pools first, in the graphs' order, then the options' pools. */
  for (size_t i = 0; i < n_graphs && st == CGC_SUCCESS; i++) {
    char why[256];
    cgc__mutex_lock(&graphs[i]->inspect_lock, CGC__LOCK_INSPECT);
    const char* refusal = graph_refusal(graphs[i], why, sizeof why);
    cgc_pool_t pool = graphs[i]->pool;
    bool reset = graphs[i]->exec == NULL;
    cgc__mutex_unlock(&graphs[i]->inspect_lock, CGC__LOCK_INSPECT);
    if (refusal != NULL)
      st = cgc__fail(reset ? CGC_ERROR_INVALID_STATE : CGC_ERROR_NOT_SAVABLE, __func__, "graph %zu (%p): %s", i,
                     (void*)graphs[i], refusal);
    else
      st = add_pool(&s, pool, __func__);
  }
  for (size_t i = 0; i < opts.n_pools && st == CGC_SUCCESS; i++) st = add_pool(&s, opts.pools[i], __func__);
  if (st != CGC_SUCCESS) goto out;
  CGC_TRY_GOTO(st, cgc__ctx_enter(s.dev, &scope, __func__), out);
  for (size_t i = 0; i < n_graphs && st == CGC_SUCCESS; i++) {
    cgc_graph_t g = graphs[i];
    s.graph_index = i;
    cgc__mutex_lock(&g->inspect_lock, CGC__LOCK_INSPECT);
    char why[256];
    const char* refusal = graph_refusal(g, why, sizeof why); /* again: it may have changed meanwhile */
    bool held = false;
    if (refusal != NULL)
      st = cgc__fail(g->exec == NULL ? CGC_ERROR_INVALID_STATE : CGC_ERROR_NOT_SAVABLE, __func__, "graph %zu (%p): %s",
                     i, (void*)g, refusal);
    else if (g->family != NULL) /* no switch reads its graph meanwhile; built if it is not yet */
      held = (st = cgc__family_hold(g, __func__)) == CGC_SUCCESS;
    if (st == CGC_SUCCESS) st = save_graph(&s, g, __func__);
    if (held) cgc__family_exit(g);
    cgc__mutex_unlock(&g->inspect_lock, CGC__LOCK_INSPECT);
  }
  if (st != CGC_SUCCESS) goto out;
  int major = 0, minor = 0;
  CGC_TRY_GOTO(st, CGC_CU(__func__, cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                                         s.dev->cu_device)), out);
  CGC_TRY_GOTO(st, CGC_CU(__func__, cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                                         s.dev->cu_device)), out);
  cgc__saved_header_t h = {.compute_major = major,
                           .compute_minor = minor,
                           .driver_version = cgc__drv.version,
                           .n_graphs = n_graphs,
                           .n_pools = s.n_pools,
                           .n_modules = s.n_modules,
                           .n_kernels = s.n_kernels,
                           .n_nodes = s.n_nodes};
  write_sections(&s, &file, &h);
  cgc__put_header(&file, &h);
  if (file.failed || s.graphs.failed) {
    st = out_of_memory(__func__);
    goto out;
  }
  *size = file.size;
  if (buffer != NULL) {
    if (capacity < file.size) {
      st = cgc__fail(CGC_ERROR_INVALID_ARGUMENT, __func__, "capacity %zu is too small: the file needs %zu bytes",
                     capacity, file.size);
      goto out;
    }
    memcpy(buffer, file.data, file.size);
    /* The pools are held until the end: their layouts are those written. */
    uint64_t restore_bytes = 0, family_restore_bytes = 0;
    if (opts.flags & CGC_SAVE_VERIFY)
      st = cgc__verify_saved(s.dev, graphs, n_graphs, s.layouts, s.n_pools, file.data, file.size, &restore_bytes,
                             &family_restore_bytes, __func__);
    if (st == CGC_SUCCESS) cgc__put_measured(buffer, restore_bytes, family_restore_bytes);
  }
out:
  cgc__ctx_leave(&scope);
  saver_free(&s);
  free(file.data);
  return st;
}
