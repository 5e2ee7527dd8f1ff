package cgc_test

// GPU tests of 1.5: a pool of memory registered with a 1-rank communicator, its blocks allocated
// eagerly (Pool.Malloc) and inside a capture into it, under all-reduces whose results are exact;
// and eager blocks of an ordinary pool.

import (
	"math"
	"testing"

	cgc "cgc/bindings/go"
)

// allEqual fails the test unless every float of the block is want.
func allEqual(t *testing.T, f *fixture, m *cgc.DeviceMemory, want float32, what string) {
	t.Helper()
	for i, x := range f.host(m) {
		if x != want {
			t.Fatalf("%s: element %d is %v, want %v", what, i, x, want)
		}
	}
}

func TestGPUNCCLPoolServesEagerAndCapturedAllReduces(t *testing.T) {
	const count = 4096       // floats per buffer
	const capacity = 8 << 20 // whole 2 MiB pages
	f := newFixture(t, 1, 0)
	ncclVersion(t)
	s := f.streams[0]
	id, err := cgc.NewCommID()
	f.ok(err)
	cm, err := f.ctx.NewComm(1, id, 0)
	f.ok(err)
	t.Cleanup(func() { _ = cm.Close() }) // after the pool's cleanup, before the fixture's
	pool, got, err := cm.NewPool(capacity-12345, cgc.NCCLMemoryRegistered)
	f.ok(err)
	t.Cleanup(func() { _ = pool.Close() })
	if got > cgc.NCCLMemoryRegistered {
		t.Fatalf("got %v, more than asked", got)
	}
	t.Logf("the pool's memory is %v", got)
	stats, err := f.ctx.MemoryStats(pool)
	f.ok(err)
	if stats.BytesReserved != capacity || stats.NumDriverAllocs != 1 {
		t.Fatalf("stats %+v: want the capacity rounded up to 2 MiB (%d), at once", stats, capacity)
	}

	// Eager blocks of the pool; beyond the capacity the pool does not grow.
	send, err := pool.Malloc(4*count, s)
	f.ok(err)
	recv, err := pool.Malloc(4*count, s)
	f.ok(err)
	if send.Ptr() == 0 || send.Size() != 4*count {
		t.Fatalf("send block %#x of %d bytes", send.Ptr(), send.Size())
	}
	if stats, _ = f.ctx.MemoryStats(pool); stats.BytesAllocated < 2*4*count {
		t.Errorf("stats %+v after two blocks of %d bytes", stats, 4*count)
	}
	big, err := pool.Malloc(capacity, s)
	if big != nil {
		t.Fatalf("a block of the whole capacity from a pool holding two blocks already")
	}
	wantRefusal(t, "Malloc beyond the capacity", err, cgc.ErrOutOfMemory, "cgc_pool_malloc")
	if stats, _ = f.ctx.MemoryStats(pool); stats.BytesReserved != capacity {
		t.Errorf("the pool grew: %+v", stats)
	}

	// An eager all-reduce over one rank copies send into recv.
	f.ok(cgc.Memset32(send.Ptr(), math.Float32bits(1.5), count, s))
	f.ok(cgc.Memset32(recv.Ptr(), 0, count, s))
	f.ok(cm.AllReduce(send.Ptr(), recv.Ptr(), count, cgc.Float32, cgc.Sum, s))
	f.ok(s.Synchronize())
	allEqual(t, f, recv, 1.5, "eager AllReduce on the pool's blocks")

	// Captured into the pool, with a temporary of the pool between input and result; Pool.Malloc
	// is eager only (the capture's pool decides inside).
	g, err := s.Capture(&cgc.CaptureOptions{Mode: cgc.CaptureModeGlobal, Pool: pool}, func(cs *cgc.Stream) error {
		_, err := pool.Malloc(512, cs)
		wantRefusal(t, "Pool.Malloc inside a capture", err, cgc.ErrCaptureUnsupported, "cgc_pool_malloc")
		tmp, err := f.ctx.Malloc(4*count, cs)
		if err != nil {
			return err
		}
		if err := cgc.CopyDeviceToDevice(tmp.Ptr(), send.Ptr(), 4*count, cs); err != nil {
			return err
		}
		if err := cm.AllReduce(tmp.Ptr(), recv.Ptr(), count, cgc.Float32, cgc.Sum, cs); err != nil {
			return err
		}
		return tmp.Free()
	})
	f.ok(err)
	t.Cleanup(func() { _ = g.Destroy() })
	gp, err := g.Pool()
	f.ok(err)
	if !gp.Equal(pool) {
		t.Error("the graph's pool is not the NCCL pool it was captured into")
	}
	f.ok(gp.Close())
	for _, value := range []float32{2, -3.5, 7.25} {
		f.ok(cgc.Memset32(send.Ptr(), math.Float32bits(value), count, s))
		f.ok(cgc.Memset32(recv.Ptr(), 0, count, s))
		f.ok(g.Launch(s))
		f.ok(s.Synchronize())
		allEqual(t, f, recv, value, "replay")
	}

	// The release is refused while the graph and the blocks hold the pool, and leaves it open;
	// the pool holds the communicator.
	wantRefusal(t, "Comm.Close with a live pool", cm.Close(), cgc.ErrInvalidState, "cgc_comm_destroy")
	wantRefusal(t, "Pool.Close with a graph and blocks", pool.Close(), cgc.ErrInvalidState, "cgc_pool_release")
	f.ok(g.Launch(s)) // a refused release changed nothing
	f.ok(s.Synchronize())
	f.ok(g.Destroy())
	wantRefusal(t, "Pool.Close with blocks", pool.Close(), cgc.ErrInvalidState, "cgc_pool_release")
	f.ok(send.Free())
	f.ok(recv.Free())
	all, err := f.ctx.MemoryStats(nil)
	f.ok(err)
	f.ok(pool.Close())
	after, err := f.ctx.MemoryStats(nil)
	f.ok(err)
	if after.BytesReserved != all.BytesReserved-capacity {
		t.Errorf("reserved %d after the release, want %d: the arena goes back", after.BytesReserved,
			all.BytesReserved-capacity)
	}
	f.ok(cm.Close())
	f.closeAll(true)
}

func TestGPUPoolMallocFromAnOrdinaryPool(t *testing.T) {
	f := newFixture(t, 1, 0)
	s := f.streams[0]
	pool, err := f.ctx.NewPool()
	f.ok(err)
	t.Cleanup(func() { _ = pool.Close() })
	block, err := pool.Malloc(3<<20, s)
	f.ok(err)
	stats, err := f.ctx.MemoryStats(pool)
	f.ok(err)
	if stats.BytesAllocated != 3<<20 {
		t.Errorf("stats %+v after a block of 3 MiB", stats)
	}
	address := block.Ptr()
	f.ok(block.Free())
	again, err := pool.Malloc(3<<20, s)
	f.ok(err)
	if again.Ptr() != address {
		t.Errorf("the freed eager block (%#x) did not serve the same stream again (%#x)", address, again.Ptr())
	}
	f.ok(again.Free())
	if stats, _ = f.ctx.MemoryStats(pool); stats.BytesAllocated != 0 {
		t.Errorf("stats %+v after the frees", stats)
	}
	// Refused inside a capture, which allocates from its own pool.
	g, err := s.Capture(&cgc.CaptureOptions{Mode: cgc.CaptureModeGlobal}, func(cs *cgc.Stream) error {
		_, err := pool.Malloc(512, cs)
		wantRefusal(t, "Pool.Malloc inside a capture", err, cgc.ErrCaptureUnsupported, "cgc_pool_malloc")
		return nil
	})
	f.ok(err)
	f.ok(g.Destroy())
	f.ok(pool.Close())
	f.closeAll(true)
}
