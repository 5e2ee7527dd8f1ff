// The allocator's block bookkeeping without a GPU: size classes, best fit per stream, split and
// merge, the pointer map. Addresses here are made up; nothing touches a device.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <vector>

#include "src/blocks.h"

namespace {

constexpr uint64_t kStreamA = 15;  // stream keys are the driver's stream ids
constexpr uint64_t kStreamB = 16;

void Recycle(cgc__block_t* b, void* arg) { static_cast<std::vector<cgc__block_t*>*>(arg)->push_back(b); }

// Spare block structs for splits, owned by the test (freed at exit).
std::vector<std::unique_ptr<cgc__block_t>> spares;
cgc__block_t* NewSpare(void*) {
  spares.push_back(std::make_unique<cgc__block_t>());
  return spares.back().get();
}

class Blocks : public ::testing::Test {
 protected:
  void TearDown() override {
    cgc__set_free(&state_.small);
    cgc__set_free(&state_.large);
    for (cgc__block_t* b : owned_) delete b;
  }
  cgc__block_t* NewBlock() {
    owned_.push_back(new cgc__block_t{});
    return owned_.back();
  }
  // A fresh segment as the allocator makes one: FREE, not yet in a set.
  cgc__block_t* Segment(uint64_t ptr, size_t size, uint64_t stream, bool small) {
    cgc__block_t* b = NewBlock();
    b->ptr = ptr;
    b->size = size;
    b->stream = stream;
    b->owner = &state_;
    b->small = small;
    return b;
  }
  // Hands out three blocks of `size` cut from the front of a fresh small segment, as malloc does;
  // the rest of the segment stays free in the set.
  void HandOutThree(cgc__block_t* seg, size_t size, cgc__block_t* parts[3]) {
    cgc__block_t* rest = seg;
    for (int i = 0; i < 3; i++) {
      if (i > 0) cgc__set_erase(&state_.small, rest);
      ASSERT_TRUE(cgc__block_split(rest, size, NewBlock()));
      rest->state = CGC_BLOCK_ALLOCATED;
      parts[i] = rest;
      rest = rest->next;
    }
  }
  cgc__pool_state_t state_{};
  std::vector<cgc__block_t*> owned_;
  std::vector<cgc__block_t*> recycled_;
};

TEST(BlockSizes, RoundTo512AndPickSegmentsLikePyTorch) {
  EXPECT_EQ(cgc__round_size(0), 512u);
  EXPECT_EQ(cgc__round_size(1), 512u);
  EXPECT_EQ(cgc__round_size(512), 512u);
  EXPECT_EQ(cgc__round_size(513), 1024u);
  EXPECT_TRUE(cgc__is_small(1 << 20));
  EXPECT_FALSE(cgc__is_small((1 << 20) + 512));
  EXPECT_EQ(cgc__segment_size(512), size_t(2) << 20);
  EXPECT_EQ(cgc__segment_size(1 << 20), size_t(2) << 20);
  EXPECT_EQ(cgc__segment_size((1 << 20) + 512), size_t(20) << 20);
  EXPECT_EQ(cgc__segment_size((10 << 20) - 512), size_t(20) << 20);
  EXPECT_EQ(cgc__segment_size(10 << 20), size_t(10) << 20);
  EXPECT_EQ(cgc__segment_size((10 << 20) + 512), size_t(12) << 20);
}

TEST(BlockSizes, SplitKeepsUsefulRemaindersOnly) {
  EXPECT_TRUE(cgc__should_split(true, 2 << 20, 512));           // small: any 512 B remainder
  EXPECT_FALSE(cgc__should_split(true, 1024, 1024));
  EXPECT_TRUE(cgc__should_split(true, 1024, 512));
  EXPECT_FALSE(cgc__should_split(false, 20 << 20, 19 << 20));   // large: 1 MiB is not enough
  EXPECT_TRUE(cgc__should_split(false, 20 << 20, (19 << 20) - 512));
}

TEST_F(Blocks, BestFitIsPerStreamAndSmallestFirst) {
  cgc__block_t* a1 = Segment(0x100000, 4096, kStreamA, true);
  cgc__block_t* a2 = Segment(0x200000, 1024, kStreamA, true);
  cgc__block_t* b1 = Segment(0x300000, 2048, kStreamB, true);
  for (cgc__block_t* b : {a1, a2, b1}) ASSERT_TRUE(cgc__set_insert(&state_.small, b));
  EXPECT_EQ(cgc__set_best_fit(&state_.small, kStreamA, 512), a2);
  EXPECT_EQ(cgc__set_best_fit(&state_.small, kStreamA, 1536), a1);
  EXPECT_EQ(cgc__set_best_fit(&state_.small, kStreamA, 8192), nullptr);
  EXPECT_EQ(cgc__set_best_fit(&state_.small, kStreamB, 1024), b1);
  EXPECT_EQ(cgc__set_best_fit(&state_.small, kStreamB, 4096), nullptr) << "never another stream's block";
  cgc__set_erase(&state_.small, a2);
  EXPECT_EQ(cgc__set_best_fit(&state_.small, kStreamA, 512), a1);
  EXPECT_EQ(state_.small.n, 2u);
}

TEST_F(Blocks, SplitThenReleaseMergesBackIntoOneSegment) {
  cgc__block_t* seg = Segment(0x7f0000000000, 2 << 20, kStreamA, true);
  // Hand out three blocks cut from the segment, as malloc does.
  cgc__block_t* parts[3];
  cgc__block_t* rest = seg;
  for (int i = 0; i < 3; i++) {
    if (i > 0) {
      cgc__set_erase(&state_.small, rest);
    }
    ASSERT_TRUE(cgc__block_split(rest, 4096, NewBlock()));
    rest->state = CGC_BLOCK_ALLOCATED;
    parts[i] = rest;
    rest = rest->next;
  }
  EXPECT_EQ(parts[0]->ptr + 4096, parts[1]->ptr);
  EXPECT_EQ(parts[1]->ptr + 4096, parts[2]->ptr);
  EXPECT_EQ(rest->size, (2u << 20) - 3 * 4096);
  EXPECT_EQ(state_.small.n, 1u);  // only the remainder is free
  // Free the middle one: no free neighbour, stays separate.
  cgc__block_t* m = cgc__block_release(parts[1], Recycle, &recycled_);
  EXPECT_EQ(m, parts[1]);
  EXPECT_EQ(state_.small.n, 2u);
  // Free the last: merges with the middle and the remainder.
  m = cgc__block_release(parts[2], Recycle, &recycled_);
  EXPECT_EQ(m, parts[1]);
  EXPECT_EQ(m->size, (2u << 20) - 4096);
  EXPECT_EQ(state_.small.n, 1u);
  // Free the first: the whole segment again.
  m = cgc__block_release(parts[0], Recycle, &recycled_);
  EXPECT_EQ(m, seg);
  EXPECT_TRUE(cgc__block_is_segment(m));
  EXPECT_EQ(m->size, 2u << 20);
  EXPECT_EQ(state_.small.n, 1u);
  EXPECT_EQ(recycled_.size(), 3u);
}

TEST_F(Blocks, UnmergedFreesCoalesceIntoTheWholeSegmentLater) {
  cgc__block_t* seg = Segment(0x20000000, 2 << 20, kStreamA, true);
  cgc__block_t* parts[3];
  ASSERT_NO_FATAL_FAILURE(HandOutThree(seg, 8192, parts));
  for (cgc__block_t* p : {parts[2], parts[0], parts[1]}) ASSERT_TRUE(cgc__block_release_unmerged(p));
  EXPECT_EQ(state_.small.n, 4u) << "freed without merging";
  // Same-size reuse takes the exact block, no split needed.
  EXPECT_EQ(cgc__set_take_best_fit(&state_.small, kStreamA, 8192, nullptr, nullptr), parts[0]);
  ASSERT_TRUE(cgc__block_release_unmerged(parts[0]));
  EXPECT_EQ(cgc__state_coalesce(&state_, Recycle, &recycled_), 3u);
  ASSERT_EQ(state_.small.n, 1u);
  EXPECT_EQ(state_.small.items[0], seg);
  EXPECT_TRUE(cgc__block_is_segment(seg));
  EXPECT_EQ(seg->size, 2u << 20);
  EXPECT_EQ(cgc__state_coalesce(&state_, Recycle, &recycled_), 0u);
}

// An NCCL pool's arena is one segment whose blocks belong to several streams: a block freed by
// stream A must never merge into memory stream B may take (or into the arena's unowned part),
// or B would reuse A's memory before A's work is done.
TEST_F(Blocks, NeighboursOfDifferentStreamsNeverMerge) {
  cgc__block_t* arena = Segment(0x30000000, 64 << 20, 0 /* unowned */, false);
  ASSERT_TRUE(cgc__set_insert(&state_.large, arena));
  cgc__block_t* a = cgc__set_take_best_fit(&state_.large, 0, 8 << 20, NewSpare, nullptr);
  ASSERT_EQ(a, arena);
  a->stream = kStreamA;  // cut first, keyed after: the rest stays unowned
  a->state = CGC_BLOCK_ALLOCATED;
  cgc__block_t* b = cgc__set_take_best_fit(&state_.large, 0, 8 << 20, NewSpare, nullptr);
  ASSERT_NE(b, nullptr);
  b->stream = kStreamB;
  b->state = CGC_BLOCK_ALLOCATED;
  ASSERT_EQ(a->next, b);
  cgc__block_t* rest = b->next;
  ASSERT_NE(rest, nullptr);
  EXPECT_EQ(rest->stream, 0u);

  EXPECT_EQ(cgc__block_release(a, Recycle, &recycled_), a) << "alone: nothing of its stream next to it";
  EXPECT_EQ(cgc__block_release(b, Recycle, &recycled_), b) << "A's and the unowned neighbours stay apart";
  EXPECT_EQ(a->size, 8u << 20);
  EXPECT_EQ(b->size, 8u << 20);
  EXPECT_EQ(cgc__state_coalesce(&state_, Recycle, &recycled_), 0u);
  EXPECT_EQ(state_.large.n, 3u);
  EXPECT_EQ(cgc__set_best_fit(&state_.large, kStreamB, 1), b);
  EXPECT_EQ(cgc__set_best_fit(&state_.large, kStreamA, 1), a);
  EXPECT_EQ(cgc__set_best_fit(&state_.large, 0, 40 << 20), rest);

  // Two freed pieces of one stream still merge.
  cgc__set_erase(&state_.large, a);
  ASSERT_TRUE(cgc__block_split(a, 4 << 20, NewBlock()));  // remainder (stream A) goes back to the set
  a->state = CGC_BLOCK_ALLOCATED;
  EXPECT_EQ(cgc__block_release(a, Recycle, &recycled_), a);
  EXPECT_EQ(a->size, 8u << 20) << "same-stream neighbours merged";
  EXPECT_EQ(state_.large.n, 3u);
}

// A run of free blocks right after an allocated block of the same stream is still merged by a
// coalesce (the allocated neighbour does not continue the run).
TEST_F(Blocks, CoalesceMergesFreeRunsThatFollowAnAllocatedBlock) {
  cgc__block_t* seg = Segment(0x40000000, 2 << 20, kStreamA, true);
  cgc__block_t* parts[3];
  ASSERT_NO_FATAL_FAILURE(HandOutThree(seg, 8192, parts));
  ASSERT_TRUE(cgc__block_release_unmerged(parts[1]));
  ASSERT_TRUE(cgc__block_release_unmerged(parts[2]));
  EXPECT_EQ(cgc__state_coalesce(&state_, Recycle, &recycled_), 2u) << "parts 1, 2 and the rest form one run";
  EXPECT_EQ(state_.small.n, 1u);
  EXPECT_EQ(parts[1]->size, (2u << 20) - 8192);
  ASSERT_TRUE(cgc__block_release_unmerged(parts[0]));
  EXPECT_EQ(cgc__state_coalesce(&state_, Recycle, &recycled_), 1u);
  EXPECT_TRUE(cgc__block_is_segment(seg));
}

TEST_F(Blocks, BlocksOfASmallSegmentStayInTheSmallSet) {
  cgc__block_t* seg = Segment(0x10000000, 2 << 20, kStreamA, true);
  ASSERT_TRUE(cgc__block_split(seg, 512, NewBlock()));
  seg->state = CGC_BLOCK_ALLOCATED;
  cgc__block_release(seg, Recycle, &recycled_);
  EXPECT_EQ(state_.small.n, 1u);
  EXPECT_EQ(state_.large.n, 0u);
  EXPECT_EQ(state_.small.items[0]->size, 2u << 20);  // 2 MiB > the small limit, still small
}

// Random allocations and frees against a model: the set stays sorted, the free blocks and the
// handed-out ones tile every segment exactly, and freeing everything merges each segment whole.
TEST_F(Blocks, RandomSplitsAndMergesKeepTheSetSortedAndTheSegmentsTiled) {
  std::mt19937 rng(11);
  const uint64_t streams[2] = {kStreamA, kStreamB};
  std::vector<cgc__block_t*> segments;
  for (int i = 0; i < 6; i++) {
    cgc__block_t* seg = Segment(0x100000000ull * (i + 1), 20 << 20, streams[i % 2], false);
    ASSERT_TRUE(cgc__set_insert(&state_.large, seg));
    segments.push_back(seg);
  }
  std::vector<cgc__block_t*> live;
  auto check = [&] {
    for (size_t i = 1; i < state_.large.n; i++) {
      const cgc__block_t* a = state_.large.items[i - 1];
      const cgc__block_t* b = state_.large.items[i];
      bool ordered = a->stream < b->stream ||
                     (a->stream == b->stream && (a->size < b->size || (a->size == b->size && a->ptr < b->ptr)));
      ASSERT_TRUE(ordered) << "set out of order at " << i;
    }
    for (cgc__block_t* seg : segments) {
      cgc__block_t* head = seg;
      while (head->prev != nullptr) head = head->prev;
      uint64_t expect = head->ptr;
      size_t total = 0;
      for (cgc__block_t* b = head; b != nullptr; b = b->next) {
        ASSERT_EQ(b->ptr, expect);
        if (b->next != nullptr) {
          ASSERT_EQ(b->next->prev, b);
        }
        expect += b->size;
        total += b->size;
      }
      ASSERT_EQ(total, size_t(20) << 20);
    }
  };
  for (int step = 0; step < 4000; step++) {
    bool alloc = live.empty() || rng() % 3 != 0;
    if (alloc) {
      const uint64_t stream = streams[rng() % 2];
      size_t want = cgc__round_size(512 + rng() % (6 << 20));
      cgc__block_t* b = cgc__set_take_best_fit(&state_.large, stream, want, NewSpare, nullptr);
      if (b == nullptr) continue;
      EXPECT_GE(b->size, want);
      EXPECT_EQ(b->stream, stream);
      b->state = CGC_BLOCK_ALLOCATED;
      live.push_back(b);
    } else {
      size_t k = rng() % live.size();
      ASSERT_NE(cgc__block_release(live[k], Recycle, &recycled_), nullptr);
      live.erase(live.begin() + long(k));
    }
    check();
    if (HasFatalFailure()) return;
  }
  for (cgc__block_t* b : live) ASSERT_NE(cgc__block_release(b, Recycle, &recycled_), nullptr);
  check();
  ASSERT_EQ(state_.large.n, segments.size()) << "every segment whole again";
  for (size_t i = 0; i < state_.large.n; i++) EXPECT_TRUE(cgc__block_is_segment(state_.large.items[i]));
}

TEST(PtrMap, PutGetTakeSurviveCollisionsAndDeletes) {
  cgc__ptr_map_t map{};
  std::vector<cgc__block_t> blocks(5000);
  std::mt19937_64 rng(7);
  std::map<uint64_t, cgc__block_t*> truth;
  for (size_t i = 0; i < blocks.size(); i++) {
    blocks[i].ptr = 0x7f0000000000ull + (rng() % (1ull << 30)) * 512;
    if (truth.count(blocks[i].ptr)) continue;
    ASSERT_TRUE(cgc__map_put(&map, &blocks[i]));
    truth[blocks[i].ptr] = &blocks[i];
  }
  EXPECT_EQ(map.n, truth.size());
  // Delete every other one, then check all lookups.
  bool take = true;
  for (auto it = truth.begin(); it != truth.end();) {
    if (take) {
      EXPECT_EQ(cgc__map_take(&map, it->first), it->second);
      it = truth.erase(it);
    } else {
      ++it;
    }
    take = !take;
  }
  for (auto& kv : truth) EXPECT_EQ(cgc__map_get(&map, kv.first), kv.second);
  EXPECT_EQ(cgc__map_get(&map, 0x1234), nullptr);
  EXPECT_EQ(cgc__map_take(&map, 0x1234), nullptr);
  EXPECT_EQ(map.n, truth.size());
  cgc__map_free(&map);
}

TEST(Stats, PeaksFollowTheCurrentValueUp) {
  cgc__stats_t s{};
  cgc__stats_add_reserved(&s, 100);
  cgc__stats_add_reserved(&s, -40);
  cgc__stats_add_allocated(&s, 30);
  cgc__stats_add_allocated(&s, -30);
  EXPECT_EQ(s.reserved, 60u);
  EXPECT_EQ(s.peak_reserved, 100u);
  EXPECT_EQ(s.allocated, 0u);
  EXPECT_EQ(s.peak_allocated, 30u);
}

}  // namespace
