package cgc_test

// GPU test of 1.6: the memory snapshot lists what was allocated and freed.

import (
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
