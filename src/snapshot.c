/* cgc_memory_snapshot: the device's segments and their blocks, as PyTorch's memory snapshot lists
 * them (docs/TORCH.md: PyTorch's allocator backend builds torch.cuda.memory_snapshot and its
 * small/large statistics from it).
 *
 * Every block of a segment is linked to its neighbours (prev/next), so one block of each segment
 * leads to all of them. Each segment has at least one block in a place the allocator lists: a free
 * set of the device cache or of a pool, the map of allocated blocks, or a list of blocks waiting
 * (pending fences, deferred fences, a pool's deferred frees, drains). The walk collects every
 * listed block, sorts them by address once, and walks each segment from its first block once:
 * a listed block inside the segment walked last is skipped, so the cost is the sort plus one step
 * per block. Blocks a thread holds alone with the lock dropped (a segment being handed back to the
 * driver, blocks whose fences are being recorded) are in no list then: a segment whose blocks are
 * all such is missed (said in cgc.h).
 *
 * Locks: the allocator's lock is held for the whole walk (one consistent picture); host memory
 * is allocated under it (the list of blocks), no driver call is made. */
#include <stdlib.h>
#include <string.h>

#include "src/allocator.h"

typedef struct listed {
  cgc__block_t** items;
  size_t n, cap;
  bool out_of_memory;
} listed_t;

static void add_block(listed_t* l, cgc__block_t* b) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 256;
    cgc__block_t** grown = realloc(l->items, cap * sizeof *grown);
    if (grown == NULL) {
      l->out_of_memory = true;
      return;
    }
    l->items = grown;
    l->cap = cap;
  }
  l->items[l->n++] = b;
}

static void add_set(listed_t* l, const cgc__block_set_t* set) {
  for (size_t i = 0; i < set->n; i++) add_block(l, set->items[i]);
}

static void add_list(listed_t* l, cgc__block_t* list) {
  for (cgc__block_t* b = list; b != NULL; b = b->next_waiting) add_block(l, b);
}

static int by_address(const void* x, const void* y) {
  uint64_t a = (*(cgc__block_t* const*)x)->ptr, b = (*(cgc__block_t* const*)y)->ptr;
  return a < b ? -1 : a > b;
}

/* (lock held) The first block of every segment of the device, in address order, each once: the
 * listed blocks sorted, each segment found from its lowest listed block and walked once. */
static void collect_heads(struct cgc__allocator* a, listed_t* heads) {
  listed_t l = {NULL, 0, 0, false};
  add_set(&l, &a->cache.small);
  add_set(&l, &a->cache.large);
  for (cgc_pool_t p = a->pools; p != NULL; p = p->next_pool) {
    add_set(&l, &p->state.small);
    add_set(&l, &p->state.large);
    add_list(&l, p->deferred);
  }
  for (size_t i = 0; i < a->live.cap; i++)
    if (a->live.slots[i] != NULL) add_block(&l, a->live.slots[i]);
  add_list(&l, a->pending);
  add_list(&l, a->deferred);
  for (cgc__drain_t* d = a->drains; d != NULL; d = d->next) add_list(&l, d->segments);
  if (l.out_of_memory) {
    heads->out_of_memory = true;
    free(l.items);
    return;
  }
  if (l.n > 0) qsort(l.items, l.n, sizeof *l.items, by_address);
  uint64_t walked_end = 0; /* the end of the segment walked last: segments never overlap */
  for (size_t i = 0; i < l.n && !heads->out_of_memory; i++) {
    cgc__block_t* b = l.items[i];
    if (b->ptr < walked_end) continue;
    while (b->prev != NULL) b = b->prev; /* the lowest listed block: only its segment's lower part */
    add_block(heads, b);
    for (const cgc__block_t* x = b; x != NULL; x = x->next) walked_end = x->ptr + x->size;
  }
  free(l.items);
}

/* The driver's stream id a key names (a pool's eager blocks keep theirs under a marked key);
 * 0 for any stream, a capture's address key, a destroyed stream's or none. */
static uint64_t stream_id_of(uint64_t key) {
  uint64_t id = key & ~CGC__KEY_POOL_EAGER_BIT;
  return (id >> 61) == 0 ? id : 0;
}

static cgc_block_state_t public_state(cgc__block_state_t state) {
  switch (state) {
    case CGC_BLOCK_FREE: return CGC_BLOCK_STATE_FREE;
    case CGC_BLOCK_ALLOCATED: return CGC_BLOCK_STATE_ALLOCATED;
    case CGC_BLOCK_WAITING: return CGC_BLOCK_STATE_WAITING;
  }
  return CGC_BLOCK_STATE_WAITING;
}

cgc_status_t cgc_memory_snapshot(cgc_context_t ctx, cgc_segment_info_t* segments, size_t max_segments,
                                 cgc_block_info_t* blocks, size_t max_blocks, size_t* n_segments, size_t* n_blocks) {
  CGC_CHECK_ARG(n_segments != NULL, "n_segments is NULL");
  CGC_CHECK_ARG(n_blocks != NULL, "n_blocks is NULL");
  CGC_CHECK_HANDLE(ctx, CGC_MAGIC_CONTEXT);
  CGC_CHECK_ARG(segments != NULL || max_segments == 0, "segments is NULL with max_segments %zu", max_segments);
  CGC_CHECK_ARG(blocks != NULL || max_blocks == 0, "blocks is NULL with max_blocks %zu", max_blocks);
  struct cgc__allocator* a = atomic_load_explicit(&ctx->dev->alloc, memory_order_acquire);
  if (a == NULL) { /* nothing allocated on the device yet */
    *n_segments = *n_blocks = 0;
    return CGC_SUCCESS;
  }
  listed_t h = {NULL, 0, 0, false};
  size_t total_blocks = 0;
  cgc__alloc_lock(a);
  collect_heads(a, &h);
  if (!h.out_of_memory) {
    for (size_t i = 0; i < h.n; i++)
      for (const cgc__block_t* b = h.items[i]; b != NULL; b = b->next) total_blocks++;
  }
  bool fits = !h.out_of_memory && h.n <= max_segments && total_blocks <= max_blocks;
  for (size_t i = 0, next_block = 0; fits && i < h.n; i++) {
    const cgc__block_t* head = h.items[i];
    cgc_segment_info_t* s = &segments[i];
    memset(s, 0, sizeof *s);
    s->address = (void*)(uintptr_t)head->ptr;
    s->pool = head->owner != NULL ? (cgc_pool_t)head->owner->pool : NULL;
    s->stream_id = stream_id_of(head->stream);
    s->small = head->small;
    s->first_block = next_block;
    for (const cgc__block_t* b = head; b != NULL; b = b->next) {
      cgc_block_info_t* out = &blocks[next_block++];
      out->address = (void*)(uintptr_t)b->ptr;
      out->size = b->size;
      out->state = public_state(b->state);
      out->requested = b->state == CGC_BLOCK_ALLOCATED ? b->requested : 0;
      s->size += b->size;
      s->n_blocks++;
      if (b->state == CGC_BLOCK_ALLOCATED) s->allocated_bytes += b->size;
    }
  }
  cgc__alloc_unlock(a);
  free(h.items);
  if (h.out_of_memory) return cgc__fail(CGC_ERROR_OUT_OF_MEMORY, __func__, "out of host memory");
  *n_segments = h.n;
  *n_blocks = total_blocks;
  return CGC_SUCCESS;
}
