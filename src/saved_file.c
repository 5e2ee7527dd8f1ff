/* The saved file's bytes (1.6): writing and bounded reading of its fields, its header and
 * checksum, and cgc_saved_info, which reads a header without the driver. saved_file.h describes
 * the layout. */
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "src/saved_file.h"

/* The checksum (format 5): the body cut in chunks of 4 MiB (the last one shorter), each hashed
 * alone, then the chunks' hashes and the body's length folded in order as 64-bit FNV-1a, so that
 * threads can hash chunks apart. A chunk: four lanes of 8-byte words, each lane starting from the
 * FNV basis xor its number and the chunk's, each step lane = (lane ^ word) * FNV prime, then lane
 * ^= lane >> 29 (both steps are one-to-one, so a word that differs always leaves its lane
 * different); the lanes, then the bytes after the last whole 32, folded in as FNV-1a. It catches
 * damage, not tampering. Byte by byte FNV-1a (format 1) read a 33 MiB file in about 38 ms, one
 * thread of this in about 4; a restore's checksum is the first read of a mapped file's pages. */
enum { kChecksumChunk = 4 << 20, kChecksumThreads = 4 };
static const uint64_t kFnvBasis = 0xcbf29ce484222325ull, kFnvPrime = 0x100000001b3ull;

static uint64_t chunk_hash(const unsigned char* p, size_t n, uint64_t number) {
  uint64_t lane[4];
  for (uint64_t l = 0; l < 4; l++) lane[l] = kFnvBasis ^ (number << 2 | l);
  size_t i = 0;
  for (; n - i >= 32; i += 32)
    for (int l = 0; l < 4; l++) {
      uint64_t word;
      memcpy(&word, p + i + 8 * l, sizeof word); /* little-endian: the byte order is checked */
      lane[l] = (lane[l] ^ word) * kFnvPrime;
      lane[l] ^= lane[l] >> 29;
    }
  uint64_t h = kFnvBasis;
  for (int l = 0; l < 4; l++) h = (h ^ lane[l]) * kFnvPrime;
  for (; i < n; i++) h = (h ^ p[i]) * kFnvPrime;
  return h;
}

/* Chunk c of the n bytes at p, hashed. */
static uint64_t hash_of_chunk(const unsigned char* p, size_t n, size_t c) {
  size_t at = c * (size_t)kChecksumChunk, left = n - at;
  return chunk_hash(p + at, left < kChecksumChunk ? left : kChecksumChunk, c);
}

/* Chunks hashed by several threads: each takes the next until none is left. */
typedef struct checksum_work {
  const unsigned char* p;
  size_t n, n_chunks;
  uint64_t* hashes; /* each chunk's slot written by the thread that took it */
  atomic_size_t next;
} checksum_work_t;

static void* hash_chunks(void* arg) {
  checksum_work_t* w = arg;
  for (size_t c; (c = atomic_fetch_add(&w->next, 1)) < w->n_chunks;) w->hashes[c] = hash_of_chunk(w->p, w->n, c);
  return NULL;
}

/* On up to max_threads threads (the calling one of them; 0: kChecksumThreads). */
static uint64_t checksum(const unsigned char* p, size_t n, size_t max_threads) {
  size_t n_chunks = n / kChecksumChunk + (n % kChecksumChunk != 0);
  uint64_t* hashes = malloc((n_chunks + 1) * sizeof *hashes);
  uint64_t h = kFnvBasis;
  if (hashes == NULL) { /* out of host memory: the same value, on this thread alone */
    for (size_t c = 0; c < n_chunks; c++) h = (h ^ hash_of_chunk(p, n, c)) * kFnvPrime;
    return (h ^ (uint64_t)n) * kFnvPrime;
  }
  checksum_work_t w = {.p = p, .n = n, .n_chunks = n_chunks, .hashes = hashes};
  atomic_init(&w.next, 0);
  pthread_t threads[kChecksumThreads - 1];
  size_t started = 0;
  if (max_threads == 0 || max_threads > kChecksumThreads) max_threads = kChecksumThreads;
  /* A thread that cannot be started leaves its chunks to the others. */
  while (started + 1 < max_threads && started + 1 < n_chunks &&
         pthread_create(&threads[started], NULL, hash_chunks, &w) == 0)
    started++;
  hash_chunks(&w);
  for (size_t i = 0; i < started; i++) pthread_join(threads[i], NULL);
  for (size_t c = 0; c < n_chunks; c++) h = (h ^ hashes[c]) * kFnvPrime;
  free(hashes);
  return (h ^ (uint64_t)n) * kFnvPrime;
}

/* ---- writing ---- */

static unsigned char* room(cgc__writer_t* w, size_t n) {
  if (w->failed) return NULL;
  if (n > SIZE_MAX / 2 - w->size) {
    w->failed = true;
    return NULL;
  }
  if (w->size + n > w->cap) {
    size_t cap = w->cap ? w->cap : 4096;
    while (cap < w->size + n) cap *= 2;
    unsigned char* grown = realloc(w->data, cap);
    if (grown == NULL) {
      w->failed = true;
      return NULL;
    }
    w->data = grown;
    w->cap = cap;
  }
  unsigned char* at = w->data + w->size;
  w->size += n;
  return at;
}

void cgc__put_u32(cgc__writer_t* w, uint32_t v) {
  unsigned char* at = room(w, sizeof v);
  if (at != NULL) memcpy(at, &v, sizeof v);
}

void cgc__put_u64(cgc__writer_t* w, uint64_t v) {
  unsigned char* at = room(w, sizeof v);
  if (at != NULL) memcpy(at, &v, sizeof v);
}

void cgc__patch_u64(cgc__writer_t* w, size_t at, uint64_t v) {
  if (!w->failed && at <= w->size && w->size - at >= sizeof v) memcpy(w->data + at, &v, sizeof v);
}

void cgc__put_bytes(cgc__writer_t* w, const void* p, size_t n) {
  size_t padded = (n + 7) / 8 * 8;
  unsigned char* at = room(w, padded);
  if (at == NULL) return;
  if (n > 0) memcpy(at, p, n);
  memset(at + n, 0, padded - n);
}

/* The header as it lies in the file, for the offsets of its fields: the magic, then the fields
 * in order, packed (each is 32 or 64 bits, as they are written). */
struct header_layout {
  char magic[8];
#define LAYOUT_FIELD(type, name) type name;
  CGC_SAVED_HEADER_FIELDS(LAYOUT_FIELD)
#undef LAYOUT_FIELD
} __attribute__((packed));

void cgc__put_header(cgc__writer_t* w, cgc__saved_header_t* h) {
  cgc__writer_t head = {NULL, 0, 0, false};
  h->format = CGC__SAVED_FORMAT;
  h->byte_order = CGC__SAVED_BYTE_ORDER;
  h->checksum = w->failed ? 0 : checksum(w->data, w->size, 0);
  cgc__put_bytes(&head, CGC__SAVED_MAGIC, 8);
#define PUT_FIELD(type, name) \
  if (sizeof(type) == 8) cgc__put_u64(&head, (uint64_t)h->name); else cgc__put_u32(&head, (uint32_t)h->name);
  h->total_size = 0; /* counted below, written in place */
  CGC_SAVED_HEADER_FIELDS(PUT_FIELD)
#undef PUT_FIELD
  unsigned char* body = room(&head, w->size);
  if (head.failed || w->failed) {
    free(head.data);
    free(w->data);
    *w = (cgc__writer_t){NULL, 0, 0, true};
    return;
  }
  memcpy(body, w->data, w->size);
  h->total_size = head.size;
  memcpy(head.data + offsetof(struct header_layout, total_size), &h->total_size, sizeof h->total_size);
  free(w->data);
  *w = head;
}

void cgc__put_measured(void* data, uint64_t restore_bytes, uint64_t family_restore_bytes) {
  unsigned char* file = data;
  memcpy(file + offsetof(struct header_layout, restore_bytes), &restore_bytes, sizeof restore_bytes);
  memcpy(file + offsetof(struct header_layout, family_restore_bytes), &family_restore_bytes,
         sizeof family_restore_bytes);
}

/* ---- reading ---- */

cgc_status_t cgc__read_header(const void* data, size_t size, cgc__saved_header_t* h, cgc__reader_t* r,
                              size_t threads, const char* func) {
  memset(h, 0, sizeof *h);
  *r = (cgc__reader_t){data, size, 0, false};
  const void* magic = cgc__get_bytes(r, 8);
  if (magic == NULL || memcmp(magic, CGC__SAVED_MAGIC, 8) != 0)
    return cgc__fail(CGC_ERROR_SAVED_MISMATCH, func, "the %zu bytes are not a file of cgc_graphs_save", size);
#define GET_FIELD(type, name) h->name = (type)(sizeof(type) == 8 ? cgc__get_u64(r) : cgc__get_u32(r));
  CGC_SAVED_HEADER_FIELDS(GET_FIELD)
#undef GET_FIELD
  if (r->bad) return cgc__fail(CGC_ERROR_SAVED_MISMATCH, func, "the file is truncated: %zu bytes hold no whole header", size);
  if (h->byte_order != CGC__SAVED_BYTE_ORDER)
    return cgc__fail(CGC_ERROR_SAVED_MISMATCH, func, "the file was saved on a machine of the other byte order");
  if (h->format != CGC__SAVED_FORMAT)
    return cgc__fail(CGC_ERROR_SAVED_MISMATCH, func,
                     "the file is of format version %u; this library reads version %d", h->format, CGC__SAVED_FORMAT);
  if (h->total_size != size)
    return cgc__fail(CGC_ERROR_SAVED_MISMATCH, func, "the file says it has %llu bytes, %zu were given (truncated?)",
                     (unsigned long long)h->total_size, size);
  if (checksum(r->data + r->at, size - r->at, threads) != h->checksum)
    return cgc__fail(CGC_ERROR_SAVED_MISMATCH, func, "the file is damaged: its checksum does not match its bytes");
  return CGC_SUCCESS;
}

cgc_status_t cgc_saved_info(const void* data, size_t size, cgc_saved_info_t* info) {
  CGC_CHECK_ARG(info != NULL, "info is NULL");
  CGC_CHECK_ARG(info->struct_size >= sizeof(size_t), "info->struct_size is %zu", info->struct_size);
  CGC_CHECK_ARG(data != NULL, "data is NULL");
  cgc__saved_header_t h;
  cgc__reader_t r;
  CGC_TRY(cgc__read_header(data, size, &h, &r, 0, __func__));
  cgc_saved_info_t full = {
      .struct_size = info->struct_size,
      .format_version = h.format,
      .compute_major = h.compute_major,
      .compute_minor = h.compute_minor,
      .driver_version = h.driver_version,
      .n_graphs = (size_t)h.n_graphs,
      .n_pools = (size_t)h.n_pools,
      .n_modules = (size_t)h.n_modules,
      .n_nodes = (size_t)h.n_nodes,
      .n_generators = (size_t)h.n_generators,
      .pool_bytes = (size_t)h.pool_bytes,
      .image_bytes = (size_t)h.image_bytes,
      .restore_bytes = (size_t)h.restore_bytes,
      .family_restore_bytes = (size_t)h.family_restore_bytes,
  };
  memcpy(info, &full, info->struct_size < sizeof full ? info->struct_size : sizeof full);
  return CGC_SUCCESS;
}
