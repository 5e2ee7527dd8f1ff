package cgc_test

// GPU test of 1.4's adopted captures: a capture begun with the driver (internal/cudatest), as a
// framework such as torch.cuda.graph begins one, allocates from a cgc pool that adopts it.

import (
	"math"
	"runtime"
	"strings"
	"testing"

	cgc "cgc/bindings/go"
	"cgc/bindings/go/internal/cudatest"
)

// wantRefusal fails the test unless err is a *cgc.Error with status want naming fn.
func wantRefusal(t *testing.T, what string, err error, want cgc.Status, fn string) {
	t.Helper()
	if e := asError(t, err, want); !strings.Contains(e.Message, fn) {
		t.Errorf("%s: %q does not name %s", what, e.Message, fn)
	}
}

func TestGPUPoolAdoptsACaptureBegunWithTheDriver(t *testing.T) {
	f := newFixture(t, 2, 0)
	stream, side := f.streams[0], f.streams[1]
	pool, err := f.ctx.NewPool()
	f.ok(err)
	t.Cleanup(func() { _ = pool.Close() }) // on failure; closed and checked below otherwise
	before, err := f.ctx.MemoryStats(pool)
	f.ok(err)

	// Nothing captures yet: nothing to adopt, nothing to end.
	wantRefusal(t, "adopting a stream that does not capture", pool.AdoptCapture(stream.Native()),
		cgc.ErrInvalidState, "cgc_pool_adopt_capture")
	wantRefusal(t, "ending an adoption that was not begun", pool.EndAdoptedCapture(),
		cgc.ErrInvalidState, "cgc_pool_end_adopted_capture")

	// A capture begun with the driver; the pool adopts it, and cgc's allocation on the stream
	// comes from the pool. The driver's own set writes the block.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	f.ok(cudatest.BeginCapture(stream.Native()))
	f.ok(pool.AdoptCapture(stream.Native()))
	wantRefusal(t, "a second adoption (a pool records one capture at a time)", pool.AdoptCapture(stream.Native()),
		cgc.ErrInvalidState, "cgc_pool_adopt_capture")
	out, err := f.ctx.Malloc(nbytes, stream)
	if err != nil {
		_, _ = cudatest.EndCapture(stream.Native())
		_ = pool.EndAdoptedCapture()
		t.Fatalf("Malloc in the adopted capture: %v", err)
	}
	f.ok(cudatest.MemsetD32Async(uintptr(out.Ptr()), math.Float32bits(2.5), n, stream.Native()))
	during, err := f.ctx.MemoryStats(pool)
	f.ok(err)
	graph, err := cudatest.EndCapture(stream.Native())
	f.ok(err)
	f.ok(pool.EndAdoptedCapture())
	wantRefusal(t, "ending the adoption twice", pool.EndAdoptedCapture(), cgc.ErrInvalidState,
		"cgc_pool_end_adopted_capture")

	// The pool's memory grew by the block: reserved from the driver, handed out, still live.
	after, err := f.ctx.MemoryStats(pool)
	f.ok(err)
	if before.BytesReserved != 0 || before.BytesAllocated != 0 {
		t.Errorf("a new pool holds memory: %+v", before)
	}
	if after.BytesReserved < nbytes || after.BytesAllocated < nbytes || after.NumDriverAllocs <= before.NumDriverAllocs {
		t.Errorf("the pool did not grow by the adopted capture's block (%d bytes): before %+v, after %+v", nbytes, before, after)
	}
	if after.BytesAllocated != during.BytesAllocated {
		t.Errorf("ending the capture and the adoption freed memory: during %+v, after %+v", during, after)
	}

	// The driver's graph, launched with the driver, writes the block cgc gave it.
	f.ok(cudatest.LaunchOnceAndDestroy(graph, stream.Native()))
	f.ok(stream.Synchronize())
	for i, v := range f.host(out) {
		if v != 2.5 {
			t.Fatalf("element %d of the adopted block is %v after the replay, want 2.5", i, v)
		}
	}

	// RecordStreamNative: a use by another native stream, then the free.
	f.ok(out.RecordStreamNative(side.Native()))
	f.ok(out.Free())
	if st, err := f.ctx.MemoryStats(pool); err != nil || st.BytesAllocated != 0 {
		t.Errorf("after the free: %+v, %v", st, err)
	}
	f.ok(side.Synchronize())
	f.ok(pool.Close())
	f.closeAll(true)
}
