package cgc_test

// GPU tests of 1.6: the memory snapshot lists what was allocated and freed; Pool.Claim gives a
// pool's free memory back at its address; Context.NewPoolAt gives the same requests the same
// addresses at the same base.

import (
	"errors"
	"strings"
	"testing"

	cgc "cgc/bindings/go"
)

// Two blocks allocated, one freed: the snapshot lists the first allocated with its rounded size
// and the size asked, the second's memory free (merged with free neighbours, perhaps), a pool's
// block in a segment of that pool, and the segments add up to the device's reserved bytes.
func TestGPUMemorySnapshotListsAllocatedAndFreedBlocks(t *testing.T) {
	f := newFixture(t, 1, 0)
	s := f.streams[0]
	kept, err := f.ctx.Malloc(1000, s)
	f.ok(err)
	freed, err := f.ctx.Malloc(4096, s)
	f.ok(err)
	freedAt := freed.Ptr()
	f.ok(freed.Free())
	pool, err := f.ctx.NewPool()
	f.ok(err)
	pooled, err := pool.Malloc(8192, s)
	f.ok(err)
	f.ok(s.Synchronize())
	snapshot, err := f.ctx.MemorySnapshot()
	f.ok(err)
	stats, err := f.ctx.MemoryStats(nil)
	f.ok(err)

	var reserved uint64
	for i, seg := range snapshot {
		reserved += seg.Size
		if i > 0 && snapshot[i-1].Address >= seg.Address {
			t.Errorf("segment %d at %#x is not after %#x", i, seg.Address, snapshot[i-1].Address)
		}
		var spanned, allocated uint64
		for _, b := range seg.Blocks {
			spanned += b.Size
			if b.State == cgc.BlockAllocated {
				allocated += b.Size
			}
		}
		if spanned != seg.Size || allocated != seg.AllocatedBytes || seg.Blocks[0].Address != seg.Address {
			t.Errorf("segment %#x of %d bytes (%d allocated): its blocks span %d (%d allocated), the first at %#x",
				seg.Address, seg.Size, seg.AllocatedBytes, spanned, allocated, seg.Blocks[0].Address)
		}
	}
	if reserved != stats.BytesReserved {
		t.Errorf("the segments add up to %d bytes, the device has %d reserved", reserved, stats.BytesReserved)
	}
	find := func(p cgc.DevicePtr) (cgc.Segment, cgc.Block) {
		t.Helper()
		for _, seg := range snapshot {
			for _, b := range seg.Blocks {
				if b.Address <= p && uint64(p) < uint64(b.Address)+b.Size {
					return seg, b
				}
			}
		}
		t.Fatalf("no block holds %#x", p)
		return cgc.Segment{}, cgc.Block{}
	}
	seg, b := find(kept.Ptr())
	if b.Address != kept.Ptr() || b.Size != 1024 || b.Requested != 1000 || b.State != cgc.BlockAllocated {
		t.Errorf("the block kept: %+v, want 1024 bytes at %#x, 1000 asked, allocated", b, kept.Ptr())
	}
	if !seg.Small || seg.Pool != 0 {
		t.Errorf("the block kept is in %+v, want a small segment of the device cache", seg)
	}
	if _, b = find(freedAt); b.State != cgc.BlockFree || b.Requested != 0 {
		t.Errorf("the block freed: %+v, want free", b)
	}
	seg, b = find(pooled.Ptr())
	if b.Address != pooled.Ptr() || b.State != cgc.BlockAllocated || seg.Pool != pool.ID() {
		t.Errorf("the pool's block: %+v in a segment of pool %#x, want allocated in pool %#x", b, seg.Pool, pool.ID())
	}

	f.ok(pooled.Free())
	f.ok(kept.Free())
	f.ok(pool.Close())
	f.closeAll(true)
}

// Pool.Claim gives a freed block of a pool back at its address; the same range again is refused
// (ErrInvalidState: the pool's block holds it), as are address 0 or an unaligned one, size 0 and
// memory of the device cache; a 512-byte aligned range inside a freed block is cut out of it at
// its address; claimed blocks are freed like Pool.Malloc's.
func TestGPUPoolClaimGivesFreeMemoryBackAtItsAddress(t *testing.T) {
	f := newFixture(t, 1, 0)
	s := f.streams[0]
	pool, err := f.ctx.NewPool()
	f.ok(err)
	allocated := func(want uint64, what string) {
		t.Helper()
		stats, err := f.ctx.MemoryStats(pool)
		f.ok(err)
		if stats.BytesAllocated != want {
			t.Errorf("%s: the pool has %d bytes allocated, want %d", what, stats.BytesAllocated, want)
		}
	}
	refused := func(what string, ptr cgc.DevicePtr, size int, want cgc.Status) {
		t.Helper()
		m, err := pool.Claim(ptr, size)
		if m != nil {
			t.Errorf("Claim of %s (%#x, %d bytes) gave %#x", what, ptr, size, m.Ptr())
			f.ok(m.Free())
			return
		}
		var e *cgc.Error
		if !errors.As(err, &e) || e.Status != want || !strings.Contains(e.Message, "cgc_pool_claim") {
			t.Errorf("Claim of %s (%#x, %d bytes): %v, want %v naming cgc_pool_claim", what, ptr, size, err, want)
		}
	}
	first, err := pool.Malloc(4096, s)
	f.ok(err)
	second, err := pool.Malloc(8192, s)
	f.ok(err)
	firstAt, secondAt := first.Ptr(), second.Ptr()
	f.ok(first.Free())
	claimed, err := pool.Claim(firstAt, 4096)
	f.ok(err)
	if claimed.Ptr() != firstAt || claimed.Size() != 4096 {
		t.Errorf("claimed %d bytes at %#x, want 4096 at %#x", claimed.Size(), claimed.Ptr(), firstAt)
	}
	allocated(4096+8192, "after the claim")
	refused("the same range again", firstAt, 4096, cgc.ErrInvalidState)
	refused("a range inside the claimed block", firstAt, 512, cgc.ErrInvalidState)
	refused("0 bytes", firstAt, 0, cgc.ErrInvalidArgument)
	refused("an unaligned address", firstAt+256, 512, cgc.ErrInvalidArgument)
	refused("address 0", 0, 512, cgc.ErrInvalidArgument)
	cached, err := f.ctx.Malloc(4096, s)
	f.ok(err)
	cachedAt := cached.Ptr()
	f.ok(cached.Free())
	refused("memory of the device cache", cachedAt, 512, cgc.ErrInvalidState)

	// A sub-range of a freed block, at its address.
	f.ok(second.Free())
	sub, err := pool.Claim(secondAt+1024, 1000)
	f.ok(err)
	if sub.Ptr() != secondAt+1024 {
		t.Errorf("the sub-range was claimed at %#x, want %#x", sub.Ptr(), secondAt+1024)
	}
	allocated(4096+1024, "after the sub-range's claim (rounded up to 512)")
	refused("a range overlapping the claimed sub-range", secondAt, 2048, cgc.ErrInvalidState)
	before, err := pool.Claim(secondAt, 1024)
	f.ok(err)
	if before.Ptr() != secondAt {
		t.Errorf("the memory before the sub-range was claimed at %#x, want %#x", before.Ptr(), secondAt)
	}

	f.ok(before.Free())
	f.ok(sub.Free())
	f.ok(claimed.Free())
	allocated(0, "after the frees")
	f.ok(pool.Close())
	f.closeAll(true)
}

// Context.NewPoolAt reserves its range at exactly the base: the first block of a fresh pool is at
// the base and every block lies inside the range; allocations beyond the capacity are
// ErrOutOfMemory; Close is refused (the Pool stays open) while a block is allocated; once
// closed, a pool made again at the same base gives the same requests the same addresses. An
// unaligned base or capacity is refused (ErrInvalidArgument, "multiples of"), and so is a pool
// overlapping a live one (ErrInvalidState, "cannot reserve"). The base is the Go binding's own
// (Rust's and Python's tests use others), in case bindings' tests ever share a process.
func TestGPUPoolAtGivesTheSameAddressesAtTheSameBase(t *testing.T) {
	const (
		base     = cgc.DevicePtr(0x650000000000)
		capacity = 64 << 20
		mib      = 1 << 20
	)
	f := newFixture(t, 1, 0)
	s := f.streams[0]
	refused := func(what string, err error, want cgc.Status, function, words string) {
		t.Helper()
		var e *cgc.Error
		if !errors.As(err, &e) || e.Status != want || !strings.Contains(e.Message, function) ||
			!strings.Contains(e.Message, words) {
			t.Errorf("%s: %v, want %v naming %s and saying %q", what, err, want, function, words)
		}
	}
	inside := func(m *cgc.DeviceMemory, what string) cgc.DevicePtr {
		t.Helper()
		if m.Ptr() < base || m.Ptr()+cgc.DevicePtr(m.Size()) > base+capacity {
			t.Errorf("%s at %#x (+%d) is outside [%#x, %#x)", what, m.Ptr(), m.Size(), base, base+capacity)
		}
		return m.Ptr()
	}
	var rounds [2][2]cgc.DevicePtr
	for round := range rounds {
		pool, err := f.ctx.NewPoolAt(base, capacity)
		if err != nil {
			t.Fatalf("round %d: NewPoolAt(%#x, %d): %v", round, base, capacity, err)
		}
		first, err := pool.Malloc(mib, s)
		f.ok(err)
		second, err := pool.Malloc(3*mib, s)
		f.ok(err)
		if first.Ptr() != base {
			t.Errorf("round %d: a fresh pool's first block is at %#x, want its base %#x", round, first.Ptr(), base)
		}
		rounds[round] = [2]cgc.DevicePtr{inside(first, "the 1 MiB block"), inside(second, "the 3 MiB block")}
		if round == 0 {
			// Beyond the capacity: the range never grows past it.
			m, err := pool.Malloc(capacity, s)
			if m != nil {
				f.ok(m.Free())
			}
			refused("Malloc of more than the capacity left", err, cgc.ErrOutOfMemory, "cgc_pool_malloc", "")
			// The range is taken while the pool lives: another pool cannot reserve part of it.
			other, err := f.ctx.NewPoolAt(base+2*mib, 2*mib)
			if other != nil {
				f.ok(other.Close())
			}
			refused("a pool overlapping a live one", err, cgc.ErrInvalidState, "cgc_pool_create_at", "cannot reserve")
			// Close is refused while a block is allocated, and the Pool stays open.
			refused("Close with blocks", pool.Close(), cgc.ErrInvalidState, "cgc_pool_release", "")
			if !pool.Equal(pool) {
				t.Error("a refused Close closed the Pool")
			}
		}
		f.ok(first.Free())
		f.ok(second.Free())
		f.ok(s.Synchronize())
		f.ok(pool.Close())
	}
	if rounds[0] != rounds[1] {
		t.Errorf("the same requests at the same base got %#x, then %#x", rounds[0], rounds[1])
	}

	// Bases and capacities that are not multiples of 2 MiB.
	for _, c := range []struct {
		what     string
		base     cgc.DevicePtr
		capacity int
		words    string
	}{
		{"an unaligned base", base + 4096, capacity, "multiples of"},
		{"an unaligned capacity", base, capacity + 4096, "multiples of"},
		{"capacity 0", base, 0, ""},
		{"base 0", 0, capacity, ""},
	} {
		p, err := f.ctx.NewPoolAt(c.base, c.capacity)
		if p != nil {
			f.ok(p.Close())
		}
		refused(c.what, err, cgc.ErrInvalidArgument, "cgc_pool_create_at", c.words)
	}
	f.closeAll(true)
}
