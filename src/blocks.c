/* Block bookkeeping: sizes, sorted free sets, split/merge, the pointer map. No driver calls. */
#include "src/blocks.h"

#include <stdlib.h>
#include <string.h>

/* (stream, size, ptr) order. */
static int compare(const cgc__block_t* a, uint64_t stream, size_t size, uint64_t ptr) {
  if (a->stream != stream) return a->stream < stream ? -1 : 1;
  if (a->size != size) return a->size < size ? -1 : 1;
  if (a->ptr != ptr) return a->ptr < ptr ? -1 : 1;
  return 0;
}

/* First index in [lo, hi) whose item is not less than (stream, size, ptr). */
static inline size_t lower_bound_in(const cgc__block_set_t* set, size_t lo, size_t hi, uint64_t stream, size_t size,
                             uint64_t ptr) {
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (compare(set->items[mid], stream, size, ptr) < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

static inline size_t lower_bound(const cgc__block_set_t* set, uint64_t stream, size_t size, uint64_t ptr) {
  return lower_bound_in(set, 0, set->n, stream, size, ptr);
}

/* Index of `b`, searched with the key it sits in the set under, or set->n. */
static size_t index_of(const cgc__block_set_t* set, const cgc__block_t* b) {
  size_t i = lower_bound(set, b->stream, b->size, b->ptr);
  return (i < set->n && set->items[i] == b) ? i : set->n;
}

/* Puts `b` in slot i, whose block is being replaced, and moves it to its sorted place. When no
 * other block sorts between the old key and b's -- the common case of a block merging with or
 * split from its neighbour -- nothing moves: one search instead of an erase and an insert. */
static void place_at(cgc__block_set_t* set, size_t i, cgc__block_t* b) {
  if (i > 0 && compare(set->items[i - 1], b->stream, b->size, b->ptr) > 0) {
    size_t j = lower_bound_in(set, 0, i, b->stream, b->size, b->ptr);
    memmove(&set->items[j + 1], &set->items[j], (i - j) * sizeof *set->items);
    set->items[j] = b;
  } else if (i + 1 < set->n && compare(set->items[i + 1], b->stream, b->size, b->ptr) < 0) {
    size_t j = lower_bound_in(set, i + 1, set->n, b->stream, b->size, b->ptr);
    memmove(&set->items[i], &set->items[i + 1], (j - 1 - i) * sizeof *set->items);
    set->items[j - 1] = b;
  } else {
    set->items[i] = b;
  }
}

bool cgc__set_insert(cgc__block_set_t* set, cgc__block_t* b) {
  if (set->n == set->cap) {
    size_t cap = set->cap ? set->cap * 2 : 16;
    cgc__block_t** items = realloc(set->items, cap * sizeof *items);
    if (items == NULL) return false;
    set->items = items;
    set->cap = cap;
  }
  size_t i = lower_bound(set, b->stream, b->size, b->ptr);
  memmove(&set->items[i + 1], &set->items[i], (set->n - i) * sizeof *set->items);
  set->items[i] = b;
  set->n++;
  return true;
}

void cgc__set_erase(cgc__block_set_t* set, cgc__block_t* b) {
  size_t i = lower_bound(set, b->stream, b->size, b->ptr);
  if (i < set->n && set->items[i] == b) {
    memmove(&set->items[i], &set->items[i + 1], (set->n - i - 1) * sizeof *set->items);
    set->n--;
  }
}

cgc__block_t* cgc__set_best_fit(const cgc__block_set_t* set, uint64_t stream, size_t size) {
  size_t i = lower_bound(set, stream, size, 0);
  if (i < set->n && set->items[i]->stream == stream) return set->items[i];
  return NULL;
}

cgc__block_t* cgc__set_take_best_fit(cgc__block_set_t* set, uint64_t stream, size_t rounded,
                                     cgc__block_t* (*new_spare)(void*), void* arg) {
  size_t i = lower_bound(set, stream, rounded, 0);
  if (i >= set->n || set->items[i]->stream != stream) return NULL;
  cgc__block_t* b = set->items[i];
  cgc__block_t* spare =
      (new_spare != NULL && cgc__should_split(b->small, b->size, rounded)) ? new_spare(arg) : NULL;
  if (spare != NULL) {
    cgc__block_init(spare, b->ptr + rounded, b->size - rounded, b->stream, b->owner, b->small);
    spare->prev = b;
    spare->next = b->next;
    if (b->next != NULL) b->next->prev = spare;
    b->next = spare;
    b->size = rounded;
    place_at(set, i, spare); /* the remainder takes the block's place in the set */
    return b;
  }
  memmove(&set->items[i], &set->items[i + 1], (set->n - i - 1) * sizeof *set->items);
  set->n--;
  return b;
}

void cgc__set_free(cgc__block_set_t* set) {
  free(set->items);
  memset(set, 0, sizeof *set);
}

void cgc__block_init(cgc__block_t* b, uint64_t ptr, size_t size, uint64_t stream, cgc__pool_state_t* owner,
                     bool small) {
  b->ptr = ptr;
  b->size = size;
  b->requested = 0;
  b->stream = stream;
  b->owner = owner;
  b->prev = NULL;
  b->next = NULL;
  b->state = CGC_BLOCK_FREE;
  b->small = small;
  b->n_uses = 0;
  b->capture_id = 0;
  b->free_seq = 0;
  b->next_waiting = NULL;
  b->markers = NULL; /* a recycled struct's were freed when it left its waiting list */
  b->n_markers = 0;
  b->has_markers = false;
}

bool cgc__block_split(cgc__block_t* b, size_t rounded, cgc__block_t* spare) {
  cgc__block_init(spare, b->ptr + rounded, b->size - rounded, b->stream, b->owner, b->small);
  if (!cgc__set_insert(cgc__state_set(b->owner, b->small), spare)) return false;
  spare->prev = b;
  spare->next = b->next;
  if (b->next != NULL) b->next->prev = spare;
  b->next = spare;
  b->size = rounded;
  return true;
}

cgc__block_t* cgc__block_release(cgc__block_t* b, void (*recycle)(cgc__block_t*, void*), void* arg) {
  cgc__block_set_t* set = cgc__state_set(b->owner, b->small);
  b->state = CGC_BLOCK_FREE;
  b->requested = 0;
  b->n_uses = 0;
  cgc__block_t* prev = b->prev;
  cgc__block_t* next = b->next;
  /* Neighbours merge only under one key: an arena (a pool's fixed memory) holds blocks of several
   * streams side by side, and memory must not pass from one stream to another by a merge. */
  bool merge_prev = prev != NULL && prev->state == CGC_BLOCK_FREE && prev->stream == b->stream;
  bool merge_next = next != NULL && next->state == CGC_BLOCK_FREE && next->stream == b->stream;
  if (!merge_prev && !merge_next) return cgc__set_insert(set, b) ? b : NULL;
  /* The merged block takes the slot of a free neighbour already in the set. */
  if (merge_prev && merge_next) cgc__set_erase(set, next);
  cgc__block_t* survivor = merge_prev ? prev : b;
  size_t slot = index_of(set, merge_prev ? prev : next); /* searched before any size changes */
  if (merge_prev) {
    prev->size += b->size;
    prev->next = b->next;
    if (b->next != NULL) b->next->prev = prev;
    recycle(b, arg);
  }
  if (merge_next) {
    survivor->size += next->size;
    survivor->next = next->next;
    if (next->next != NULL) next->next->prev = survivor;
    recycle(next, arg);
  }
  if (slot == set->n) return cgc__set_insert(set, survivor) ? survivor : NULL; /* not found: cannot happen */
  place_at(set, slot, survivor);
  return survivor;
}

bool cgc__block_release_unmerged(cgc__block_t* b) {
  b->state = CGC_BLOCK_FREE;
  b->requested = 0;
  b->n_uses = 0;
  return cgc__set_insert(cgc__state_set(b->owner, b->small), b);
}

/* Free blocks of one key merge (see cgc__block_release). */
static bool merges_with_next(const cgc__block_t* b) {
  return b->next != NULL && b->next->state == CGC_BLOCK_FREE && b->next->stream == b->stream;
}

/* The first free block of a run that can merge: its previous neighbour is not a free block of
 * its key (an allocated one of the same key does not continue the run). */
static bool is_run_head(const cgc__block_t* b) {
  const cgc__block_t* prev = b->prev;
  bool continues_a_run = prev != NULL && prev->state == CGC_BLOCK_FREE && prev->stream == b->stream;
  return !continues_a_run && merges_with_next(b);
}

size_t cgc__state_coalesce(cgc__pool_state_t* state, void (*recycle)(cgc__block_t*, void*), void* arg) {
  size_t merges = 0;
  cgc__block_set_t* sets[2] = {&state->small, &state->large};
  for (int s = 0; s < 2; s++) {
    cgc__block_set_t* set = sets[s];
    /* Heads of runs: free blocks whose previous neighbour is not free and whose next one is.
     * Collect first, then merge, so that the set is not edited while it is walked. */
    size_t n_heads = 0;
    for (size_t i = 0; i < set->n; i++) {
      cgc__block_t* b = set->items[i];
      if (is_run_head(b))
        n_heads++;
    }
    if (n_heads == 0) continue;
    cgc__block_t** heads = malloc(n_heads * sizeof *heads);
    if (heads == NULL) continue; /* no merging this time: nothing is lost */
    n_heads = 0;
    for (size_t i = 0; i < set->n; i++) {
      cgc__block_t* b = set->items[i];
      if (is_run_head(b))
        heads[n_heads++] = b;
    }
    for (size_t h = 0; h < n_heads; h++) {
      cgc__block_t* head = heads[h];
      cgc__set_erase(set, head);
      while (merges_with_next(head)) {
        cgc__block_t* next = head->next;
        cgc__set_erase(set, next);
        head->size += next->size;
        head->next = next->next;
        if (next->next != NULL) next->next->prev = head;
        recycle(next, arg);
        merges++;
      }
      cgc__set_insert(set, head); /* cannot fail: the set just shrank */
    }
    free(heads);
  }
  return merges;
}

/* ---- pointer map ---- */

static size_t slot_of(uint64_t ptr, size_t cap) {
  uint64_t h = ptr >> 9; /* blocks are 512-byte aligned */
  h *= 0x9E3779B97F4A7C15ull;
  return (size_t)(h >> 20) & (cap - 1);
}

static bool grow(cgc__ptr_map_t* map) {
  size_t cap = map->cap ? map->cap * 2 : 1024;
  cgc__block_t** slots = calloc(cap, sizeof *slots);
  if (slots == NULL) return false;
  for (size_t i = 0; i < map->cap; i++) {
    cgc__block_t* b = map->slots[i];
    if (b == NULL) continue;
    size_t j = slot_of(b->ptr, cap);
    while (slots[j] != NULL) j = (j + 1) & (cap - 1);
    slots[j] = b;
  }
  free(map->slots);
  map->slots = slots;
  map->cap = cap;
  return true;
}

bool cgc__map_put(cgc__ptr_map_t* map, cgc__block_t* b) {
  if ((map->n + 1) * 2 > map->cap && !grow(map)) return false;
  size_t j = slot_of(b->ptr, map->cap);
  while (map->slots[j] != NULL) j = (j + 1) & (map->cap - 1);
  map->slots[j] = b;
  map->n++;
  return true;
}

static size_t find(const cgc__ptr_map_t* map, uint64_t ptr) {
  if (map->cap == 0) return SIZE_MAX;
  size_t j = slot_of(ptr, map->cap);
  while (map->slots[j] != NULL) {
    if (map->slots[j]->ptr == ptr) return j;
    j = (j + 1) & (map->cap - 1);
  }
  return SIZE_MAX;
}

cgc__block_t* cgc__map_get(const cgc__ptr_map_t* map, uint64_t ptr) {
  size_t j = find(map, ptr);
  return j == SIZE_MAX ? NULL : map->slots[j];
}

cgc__block_t* cgc__map_take(cgc__ptr_map_t* map, uint64_t ptr) {
  size_t j = find(map, ptr);
  if (j == SIZE_MAX) return NULL;
  cgc__block_t* b = map->slots[j];
  map->slots[j] = NULL;
  map->n--;
  /* Backward-shift: move later members of the probe run into the hole when their home slot
   * does not lie cyclically in (hole, k]. */
  size_t hole = j, k = j;
  for (;;) {
    k = (k + 1) & (map->cap - 1);
    cgc__block_t* m = map->slots[k];
    if (m == NULL) break;
    size_t home = slot_of(m->ptr, map->cap);
    bool home_in_range = hole <= k ? (hole < home && home <= k) : (hole < home || home <= k);
    if (home_in_range) continue;
    map->slots[hole] = m;
    map->slots[k] = NULL;
    hole = k;
  }
  return b;
}

void cgc__map_free(cgc__ptr_map_t* map) {
  free(map->slots);
  memset(map, 0, sizeof *map);
}

