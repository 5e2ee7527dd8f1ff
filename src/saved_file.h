/* The saved file's layout (1.6): what cgc_graphs_save writes (save.c), cgc_saved_info reads
 * (saved_file.c) and cgc_graphs_restore rebuilds (restore.c). docs/SEMANTICS.md 38 says what is
 * kept and refused; this header says how it is laid out.
 *
 * A fixed header, then the sections in this order: pools, modules, kernels, generators (each:
 * seed, offset, the address of its state slots when saved), graphs. A graph: its pool (u32), how
 * many generators it draws from (u32), its node and edge counts (u64 each), the length in bytes
 * of the rest of its record (u64: what follows, up to the next graph's record), then for each
 * generator its index (u32), 0 (u32) and what one replay draws from it (u64, a multiple of 4),
 * then its nodes, then its edges (pairs of u32 positions). A kernel node: its kernel's index and
 * launch dimensions and shared memory (u32s), how many launch attributes it keeps (u32), then its
 * argument bytes, then the attributes (id u32, 0 u32, the value). A DRAW node has, after the
 * attribute count, how many argument words hold a generator's slots (u32), 0 (u32), and for each
 * its byte offset and the generator's index (u32 each), then the rest as a kernel node's. The
 * slots are the library's: [seed, offset, laps, unused] as rng.c's prologue writes them and
 * kernels/philox.cu's draws read them (a file carries the draw kernels it was saved with, so that
 * layout is part of the format). Everything is
 * written as 32- and 64-bit little-endian fields (the byte order is checked), and byte strings are
 * padded to 8 bytes. A checksum of everything after the header (saved_file.c says how it is made)
 * catches a damaged or truncated file before anything is read from it; every read is bounded all
 * the same. */
#ifndef CGC_SAVED_FILE_H_
#define CGC_SAVED_FILE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "src/internal.h"

/* Format 5: each graph's record says its length, and the checksum is of 4 MiB chunks (both let a
 * restore read on threads). Formats 4 (generators: a section, each graph's uses of them, DRAW
 * nodes), 3 (the device memory a verifying save measured, in the header), 2 (a checksum of 8-byte
 * words) and 1 were never in a release. */
enum { CGC__SAVED_FORMAT = 5, CGC__SAVED_BYTE_ORDER = 0x01020304 };
#define CGC__SAVED_MAGIC "CGCGRAPH"

/* The header's fields, X(type, name), in file order; all are 32- or 64-bit. */
#define CGC_SAVED_HEADER_FIELDS(X) \
  X(uint32_t, format)              \
  X(uint32_t, byte_order)          \
  X(uint64_t, total_size)          \
  X(uint64_t, checksum)            \
  X(int32_t, compute_major)        \
  X(int32_t, compute_minor)        \
  X(int32_t, driver_version)       \
  X(int32_t, reserved)             \
  X(uint64_t, n_graphs)            \
  X(uint64_t, n_pools)             \
  X(uint64_t, n_modules)           \
  X(uint64_t, n_kernels)           \
  X(uint64_t, n_nodes)             \
  X(uint64_t, n_generators)        \
  X(uint64_t, pool_bytes)          \
  X(uint64_t, image_bytes)         \
  X(uint64_t, restore_bytes)       \
  X(uint64_t, family_restore_bytes)

typedef struct cgc__saved_header {
#define CGC_SAVED_HEADER_FIELD(type, name) type name;
  CGC_SAVED_HEADER_FIELDS(CGC_SAVED_HEADER_FIELD)
#undef CGC_SAVED_HEADER_FIELD
} cgc__saved_header_t;

/* The kinds of node a saved graph holds, X(name, value): the file's numbers. A DRAW is a kernel
 * node whose arguments hold the address of generators' state slots (cgc_rng_uniform's and
 * cgc_rng_normal's kernels in a capture): its record says where, and a restore writes the
 * restored generators' addresses there. */
#define CGC_SAVED_NODE_KINDS(X) \
  X(KERNEL, 1)                  \
  X(MEMSET, 2)                  \
  X(MEMCPY, 3)                  \
  X(EMPTY, 4)                   \
  X(DRAW, 5)
typedef enum cgc__saved_node_kind {
#define CGC_SAVED_NODE_KIND(name, value) CGC__SAVED_##name = value,
  CGC_SAVED_NODE_KINDS(CGC_SAVED_NODE_KIND)
#undef CGC_SAVED_NODE_KIND
} cgc__saved_node_kind_t;

/* The kernel node attributes a file keeps (CUlaunchAttributeID values): those a graph's kernel
 * node reports (internal.h), for each node only those that differ from a new node's, set again on
 * the rebuilt node. Preferred cluster sizes are not among them: the driver cannot report them
 * (docs/PERFORMANCE.md, the first checks). */
#define CGC_SAVED_KERNEL_ATTRIBUTES(X) CGC_REPORTED_NODE_ATTRIBUTES(X)

enum {
#define CGC_COUNT_ATTRIBUTE(name) +1
  CGC__SAVED_N_KERNEL_ATTRIBUTES = 0 CGC_SAVED_KERNEL_ATTRIBUTES(CGC_COUNT_ATTRIBUTE),
#undef CGC_COUNT_ATTRIBUTE
};

/* The function attributes a file keeps per kernel and sets again at a restore (those a program
 * may set: cuFuncSetAttribute). */
#define CGC_SAVED_FUNCTION_ATTRIBUTES(X)                         \
  X(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)             \
  X(CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT)          \
  X(CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED)         \
  X(CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE)
enum {
#define CGC_COUNT_ONE(name) +1
  CGC__SAVED_N_FUNCTION_ATTRIBUTES = 0 CGC_SAVED_FUNCTION_ATTRIBUTES(CGC_COUNT_ONE),
#undef CGC_COUNT_ONE
};

/* ---- writing: a growing buffer; `failed` once host memory ran out ---- */
typedef struct cgc__writer {
  unsigned char* data;
  size_t size, cap;
  bool failed;
} cgc__writer_t;
void cgc__put_u32(cgc__writer_t* w, uint32_t v);
void cgc__put_u64(cgc__writer_t* w, uint64_t v);
/* A 64-bit field written earlier at byte `at`, set now (a length known once what follows is). */
void cgc__patch_u64(cgc__writer_t* w, size_t at, uint64_t v);
/* `n` bytes, then zeros up to a multiple of 8. */
void cgc__put_bytes(cgc__writer_t* w, const void* p, size_t n);
/* Writes the header (computing the checksum of what follows it) in front of the body `w` holds;
 * the result replaces w's data. */
void cgc__put_header(cgc__writer_t* w, cgc__saved_header_t* h);

/* The two measured fields of a written header (`data` holds a whole file), set in place: they
 * are outside the checksum, which covers only what follows the header. */
void cgc__put_measured(void* data, uint64_t restore_bytes, uint64_t family_restore_bytes);

/* ---- reading: bounded; `bad` once a read went past the end (every later read gives zeros) ---- */
typedef struct cgc__reader {
  const unsigned char* data;
  size_t size, at;
  bool bad;
} cgc__reader_t;
/* Inline: a restore reads a few fields of each of hundreds of thousands of nodes. */
static inline const unsigned char* cgc__take(cgc__reader_t* r, uint64_t n) {
  if (r->bad || n > r->size - r->at) {
    r->bad = true;
    return NULL;
  }
  const unsigned char* at = r->data + r->at;
  r->at += n;
  return at;
}
static inline uint32_t cgc__get_u32(cgc__reader_t* r) {
  uint32_t v = 0;
  const unsigned char* at = cgc__take(r, sizeof v);
  if (at != NULL) memcpy(&v, at, sizeof v);
  return v;
}
static inline uint64_t cgc__get_u64(cgc__reader_t* r) {
  uint64_t v = 0;
  const unsigned char* at = cgc__take(r, sizeof v);
  if (at != NULL) memcpy(&v, at, sizeof v);
  return v;
}
/* A pointer to the next `n` bytes (skipping their padding), or NULL past the end. */
static inline const void* cgc__get_bytes(cgc__reader_t* r, uint64_t n) {
  if (n > UINT64_MAX - 7) {
    r->bad = true;
    return NULL;
  }
  return cgc__take(r, (n + 7) / 8 * 8);
}
/* Checks and reads the header of `data`; on success `r` is positioned at the body. The checksum
 * is read on up to `threads` threads, the calling one among them (0: cgc's choice, up to 4).
 * SAVED_MISMATCH naming what is wrong (not a saved file, another format or byte order, damaged or
 * truncated). */
cgc_status_t cgc__read_header(const void* data, size_t size, cgc__saved_header_t* h, cgc__reader_t* r,
                              size_t threads, const char* func);

/* A saved file's graphs rebuilt in the saving process (restore.c, for a verifying save,
 * verify.c): each graph's CUgraph and completion event, and the file's modules loaded again for
 * them (one reference each). */
typedef struct cgc__rebuilt {
  size_t n_graphs;
  CUgraph* graphs;
  CUevent* done;
  bool* first_alike; /* no graph before it has its structure (a family restore instantiates it) */
  size_t n_codes;
  void** codes;
} cgc__rebuilt_t;
/* Rebuilds every graph of `data` (the context current); *out is empty on failure. */
cgc_status_t cgc__graphs_rebuild(struct cgc__device* dev, const void* data, size_t size, cgc__rebuilt_t* out,
                                 const char* func);
void cgc__graphs_rebuilt_free(cgc__rebuilt_t* r);

/* A verifying save (verify.c): each of `graphs`, rebuilt from the `size` bytes of `data` it was
 * saved to, replayed beside the graph itself from the same contents of the saved pools (their
 * layouts as saved, in the file's order); NOT_SAVABLE, naming where, when the pools differ after.
 * *restore_bytes and *family_restore_bytes: the device memory the rebuild's modules and
 * executables took, all of them, or the first of each structure only. The context current; no
 * lock held. */
cgc_status_t cgc__verify_saved(struct cgc__device* dev, const cgc_graph_t* graphs, size_t n_graphs,
                               const cgc__pool_layout_t* layouts, size_t n_pools, const void* data, size_t size,
                               uint64_t* restore_bytes, uint64_t* family_restore_bytes, const char* func);

#endif /* CGC_SAVED_FILE_H_ */
