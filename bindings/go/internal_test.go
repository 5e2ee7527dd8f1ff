package cgc

// White-box tests of the binding's own refusals, which need no GPU: an object that was closed
// is never passed on to C (the library could only detect it "in the common case").

import (
	"errors"
	"strings"
	"testing"
	"unsafe"
)

func TestClosedObjectsAreRefused(t *testing.T) {
	if err := Load(); err != nil {
		t.Fatal(err)
	}
	ctx, s, e := &Context{closed: true}, &Stream{closed: true}, &Event{closed: true}
	g, p, r, cm := &Graph{closed: true}, &Pool{closed: true}, &Rng{closed: true}, &Comm{closed: true}
	calls := map[string]error{
		"Context.Synchronize": ctx.Synchronize(),
		"Stream.Synchronize":  s.Synchronize(),
		"Stream.WaitEvent":    (&Stream{}).WaitEvent(e),
		"Event.Record":        e.Record(nil),
		"Graph.Launch":        g.Launch(nil),
		"Stream.BeginCapture": (*Stream)(nil).BeginCapture(&CaptureOptions{Pool: p}),
		"Rng.Uniform":         r.Uniform(0, 4, nil),
		"Comm.AllReduce":      cm.AllReduce(0, 0, 4, Float32, Sum, nil),
	}
	_, calls["Context.NewStream"] = ctx.NewStream(0, 0)
	_, calls["Graph.Info"] = g.Info()
	_, calls["Context.MemoryStats"] = (&Context{}).MemoryStats(p)
	_, calls["Context.MemorySnapshot"] = ctx.MemorySnapshot()
	for name, err := range calls {
		var ce *Error
		if !errors.As(err, &ce) || ce.Status != ErrInvalidHandle || !strings.Contains(ce.Message, "closed") {
			t.Errorf("%s on a closed object: %v, want ErrInvalidHandle naming the closed object", name, err)
		}
	}
	// Closing again is a no-op.
	for _, c := range []interface{ Close() error }{ctx, s, e, g, p, r, cm} {
		if err := c.Close(); err != nil {
			t.Errorf("%T.Close again: %v", c, err)
		}
	}
	if g.Native() != 0 || s.Native() != 0 || p.Equal(p) || p.ID() != 0 {
		t.Error("a closed object still exposes its handle")
	}
}

func TestFreeOfForeignPointerChangesNothing(t *testing.T) {
	if err := Load(); err != nil {
		t.Fatal(err)
	}
	m := &DeviceMemory{ptr: 0x1234, size: 4}
	err := m.Free()
	var ce *Error
	if !errors.As(err, &ce) || ce.Status != ErrInvalidArgument || !strings.Contains(ce.Message, "cgc_free") {
		t.Fatalf("Free of a pointer cgc did not hand out: %v", err)
	}
	// The failed free did not mark the block freed: its address is still there to inspect.
	if m.Ptr() != 0x1234 {
		t.Errorf("Ptr after a failed Free = %#x", m.Ptr())
	}
}

// 1.4: a closed pool never reaches C, a pointer that is no cgc pool is refused by the library
// (INVALID_HANDLE, naming the call), and so is a block cgc did not hand out, for
// RecordStreamNative; a freed DeviceMemory is the binding's refusal.
func TestAdoptedCapturesForeignPoolsAndBlocks(t *testing.T) {
	if err := Load(); err != nil {
		t.Fatal(err)
	}
	closed := &Pool{closed: true}
	for name, err := range map[string]error{
		"Pool.AdoptCapture":      closed.AdoptCapture(0),
		"Pool.EndAdoptedCapture": closed.EndAdoptedCapture(),
	} {
		var ce *Error
		if !errors.As(err, &ce) || ce.Status != ErrInvalidHandle || !strings.Contains(ce.Message, "closed") ||
			!strings.Contains(ce.Message, name) {
			t.Errorf("%s on a closed pool: %v, want ErrInvalidHandle naming the closed pool", name, err)
		}
	}
	var memory [32]uint64
	for i := range memory {
		memory[i] = 0x5a5a5a5a5a5a5a5a
	}
	foreign := &Pool{}
	*(*unsafe.Pointer)(unsafe.Pointer(&foreign.h)) = unsafe.Pointer(&memory[0])
	for name, err := range map[string]error{
		"cgc_pool_adopt_capture":       foreign.AdoptCapture(0),
		"cgc_pool_end_adopted_capture": foreign.EndAdoptedCapture(),
	} {
		var ce *Error
		if !errors.As(err, &ce) || ce.Status != ErrInvalidHandle || !strings.Contains(ce.Message, name) {
			t.Errorf("%s of a foreign pool: %v, want ErrInvalidHandle naming the call", name, err)
		}
	}
	m := &DeviceMemory{ptr: 0x1234, size: 4}
	err := m.RecordStreamNative(0)
	var ce *Error
	if !errors.As(err, &ce) || ce.Status != ErrInvalidArgument || !strings.Contains(ce.Message, "cgc_record_stream_native") ||
		!strings.Contains(ce.Message, "not a live allocation") {
		t.Errorf("RecordStreamNative of a pointer cgc did not hand out: %v", err)
	}
	freed := &DeviceMemory{ptr: 0x1234, size: 4, freed: true}
	if err := freed.RecordStreamNative(0); !errors.As(err, &ce) || ce.Status != ErrInvalidArgument ||
		!strings.Contains(ce.Message, "nil or freed block") {
		t.Errorf("RecordStreamNative of a freed block: %v", err)
	}
}

// 1.5: a closed pool or communicator never reaches C; a pointer that is no cgc pool is refused by
// the library (INVALID_HANDLE, naming the call) whatever the stream, and so is one that is no cgc
// communicator (or NCCL is absent). 1.6's Pool.Claim the same way.
func TestNCCLPoolsAndPoolMallocForeignAndClosedHandles(t *testing.T) {
	if err := Load(); err != nil {
		t.Fatal(err)
	}
	closedPool, closedComm := &Pool{closed: true}, &Comm{closed: true}
	m, err := closedPool.Malloc(512, nil)
	var ce *Error
	if m != nil || !errors.As(err, &ce) || ce.Status != ErrInvalidHandle || !strings.Contains(ce.Message, "closed") ||
		!strings.Contains(ce.Message, "Pool.Malloc") {
		t.Errorf("Malloc from a closed pool: %v, want ErrInvalidHandle naming the closed pool", err)
	}
	p, _, err := closedComm.NewPool(1<<20, NCCLMemoryRegistered)
	if p != nil || !errors.As(err, &ce) || ce.Status != ErrInvalidHandle || !strings.Contains(ce.Message, "closed") ||
		!strings.Contains(ce.Message, "Comm.NewPool") {
		t.Errorf("NewPool on a closed communicator: %v, want ErrInvalidHandle naming the closed communicator", err)
	}

	var memory [32]uint64
	for i := range memory {
		memory[i] = 0x5a5a5a5a5a5a5a5a
	}
	foreignPool, foreignStream, foreignComm := &Pool{}, &Stream{}, &Comm{}
	*(*unsafe.Pointer)(unsafe.Pointer(&foreignPool.h)) = unsafe.Pointer(&memory[0])
	*(*unsafe.Pointer)(unsafe.Pointer(&foreignStream.h)) = unsafe.Pointer(&memory[0])
	*(*unsafe.Pointer)(unsafe.Pointer(&foreignComm.h)) = unsafe.Pointer(&memory[0])
	for _, s := range []*Stream{nil, foreignStream} {
		m, err := foreignPool.Malloc(512, s)
		if m != nil || !errors.As(err, &ce) || ce.Status != ErrInvalidHandle || !strings.Contains(ce.Message, "cgc_pool_malloc") {
			t.Errorf("Malloc from a foreign pool: %v, want ErrInvalidHandle naming cgc_pool_malloc", err)
		}
	}
	// 1.6: Claim likewise, whatever the range.
	m, err = closedPool.Claim(0x10000, 512)
	if m != nil || !errors.As(err, &ce) || ce.Status != ErrInvalidHandle || !strings.Contains(ce.Message, "closed") ||
		!strings.Contains(ce.Message, "Pool.Claim") {
		t.Errorf("Claim from a closed pool: %v, want ErrInvalidHandle naming the closed pool", err)
	}
	for _, size := range []int{0, 512} {
		m, err := foreignPool.Claim(0x10000, size)
		if m != nil || !errors.As(err, &ce) || ce.Status != ErrInvalidHandle || !strings.Contains(ce.Message, "cgc_pool_claim") {
			t.Errorf("Claim(%d) from a foreign pool: %v, want ErrInvalidHandle naming cgc_pool_claim", size, err)
		}
	}
	p, got, err := foreignComm.NewPool(1<<20, NCCLMemorySymmetric)
	if p != nil || got != NCCLMemoryPlain || !errors.As(err, &ce) ||
		(ce.Status != ErrInvalidHandle && ce.Status != ErrNCCLUnavailable) ||
		!strings.Contains(ce.Message, "cgc_nccl_pool_create") {
		t.Errorf("NewPool on a foreign communicator: %v, want cgc_nccl_pool_create refusing it", err)
	}
}

// 1.6: NewPoolAt on a closed context never reaches C; a pointer that is no cgc context is
// refused by the library (INVALID_HANDLE, naming the call) before it looks at the range,
// whatever the base and capacity; a negative capacity is the binding's refusal.
func TestPoolAtForeignAndClosedContexts(t *testing.T) {
	if err := Load(); err != nil {
		t.Fatal(err)
	}
	const base = DevicePtr(0x650000000000)
	var ce *Error
	p, err := (&Context{closed: true}).NewPoolAt(base, 64<<20)
	if p != nil || !errors.As(err, &ce) || ce.Status != ErrInvalidHandle || !strings.Contains(ce.Message, "closed") ||
		!strings.Contains(ce.Message, "Context.NewPoolAt") {
		t.Errorf("NewPoolAt on a closed context: %v, want ErrInvalidHandle naming the closed context", err)
	}
	var memory [32]uint64
	for i := range memory {
		memory[i] = 0x5a5a5a5a5a5a5a5a
	}
	foreign := &Context{}
	*(*unsafe.Pointer)(unsafe.Pointer(&foreign.h)) = unsafe.Pointer(&memory[0])
	for _, c := range []struct {
		base     DevicePtr
		capacity int
	}{{base, 64 << 20}, {0, 64 << 20}, {base + 4096, 64 << 20}, {base, 0}} {
		p, err := foreign.NewPoolAt(c.base, c.capacity)
		if p != nil || !errors.As(err, &ce) || ce.Status != ErrInvalidHandle ||
			!strings.Contains(ce.Message, "cgc_pool_create_at") {
			t.Errorf("NewPoolAt(%#x, %d) on a foreign context: %v, want ErrInvalidHandle naming cgc_pool_create_at",
				c.base, c.capacity, err)
		}
	}
	p, err = foreign.NewPoolAt(base, -1)
	if p != nil || !errors.As(err, &ce) || ce.Status != ErrInvalidArgument || !strings.Contains(ce.Message, "Go binding") ||
		!strings.Contains(ce.Message, "Context.NewPoolAt") {
		t.Errorf("NewPoolAt(-1): %v, want the binding's refusal", err)
	}
}

// 1.6: saving a closed graph or pool, restoring on a closed context and adding a module image to
// one never reach C; pointers that are no cgc graph or context are refused by the library
// (INVALID_HANDLE, naming the call), the graphs before the pools.
func TestSavedGraphsForeignAndClosedHandles(t *testing.T) {
	if err := Load(); err != nil {
		t.Fatal(err)
	}
	var ce *Error
	closed := func(what string, err error, op string) {
		t.Helper()
		if !errors.As(err, &ce) || ce.Status != ErrInvalidHandle || !strings.Contains(ce.Message, "closed") ||
			!strings.Contains(ce.Message, op) {
			t.Errorf("%s: %v, want ErrInvalidHandle naming %s and the closed object", what, err, op)
		}
	}
	_, err := SaveGraphs([]*Graph{{closed: true}}, nil)
	closed("SaveGraphs of a closed graph", err, "SaveGraphs")
	_, err = SaveGraphs([]*Graph{nil}, []*Pool{{closed: true}})
	closed("SaveGraphs with a closed pool", err, "SaveGraphs")
	_, _, err = (&Context{closed: true}).RestoreGraphs([]byte("not a saved graph"))
	closed("RestoreGraphs on a closed context", err, "Context.RestoreGraphs")
	closed("AddModuleImage on a closed context", (&Context{closed: true}).AddModuleImage("k", []byte{1}),
		"Context.AddModuleImage")

	var memory [32]uint64
	for i := range memory {
		memory[i] = 0x5a5a5a5a5a5a5a5a
	}
	foreignGraph, foreignPool, foreignContext := &Graph{}, &Pool{}, &Context{}
	*(*unsafe.Pointer)(unsafe.Pointer(&foreignGraph.h)) = unsafe.Pointer(&memory[0])
	*(*unsafe.Pointer)(unsafe.Pointer(&foreignPool.h)) = unsafe.Pointer(&memory[0])
	*(*unsafe.Pointer)(unsafe.Pointer(&foreignContext.h)) = unsafe.Pointer(&memory[0])
	for _, pools := range [][]*Pool{nil, {foreignPool}} {
		_, err = SaveGraphs([]*Graph{foreignGraph}, pools)
		if !errors.As(err, &ce) || ce.Status != ErrInvalidHandle || !strings.Contains(ce.Message, "cgc_graphs_save") ||
			!strings.Contains(ce.Message, "graphs[0]") {
			t.Errorf("SaveGraphs of a foreign graph (pools %v): %v, want ErrInvalidHandle naming graphs[0]", pools, err)
		}
	}
	err = foreignContext.AddModuleImage("cgc-go-test", []byte(".version 8.0"))
	if !errors.As(err, &ce) || ce.Status != ErrInvalidHandle || !strings.Contains(ce.Message, "cgc_module_add_image") {
		t.Errorf("AddModuleImage on a foreign context: %v, want ErrInvalidHandle naming cgc_module_add_image", err)
	}
}

// 1.6: a verifying save. SaveOptions.Verify is the header's CGC_SAVE_VERIFY in
// cgc_save_options_t.flags (nil options and the defaults: 0); SaveGraphsWith of a closed graph or
// pool never reaches C, and a pointer that is no cgc graph is refused by the library
// (ErrInvalidHandle naming graphs[0]) with Verify as without: the library takes the flag and
// checks the graphs next.
func TestVerifyingSaveFlagsAndForeignAndClosedHandles(t *testing.T) {
	if err := Load(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		opts *SaveOptions
		want uint32
	}{{nil, 0}, {&SaveOptions{}, 0}, {&SaveOptions{Verify: true}, 1}} {
		if got := uint32(c.opts.flags()); got != c.want {
			t.Errorf("the flags of %+v are %#x, want %#x", c.opts, got, c.want)
		}
	}
	var ce *Error
	verify := &SaveOptions{Verify: true}
	_, err := SaveGraphsWith([]*Graph{{closed: true}}, nil, verify)
	if !errors.As(err, &ce) || ce.Status != ErrInvalidHandle || !strings.Contains(ce.Message, "closed") ||
		!strings.Contains(ce.Message, "SaveGraphsWith") {
		t.Errorf("SaveGraphsWith of a closed graph: %v, want ErrInvalidHandle naming SaveGraphsWith", err)
	}
	_, err = SaveGraphsWith([]*Graph{nil}, []*Pool{{closed: true}}, verify)
	if !errors.As(err, &ce) || ce.Status != ErrInvalidHandle || !strings.Contains(ce.Message, "closed") ||
		!strings.Contains(ce.Message, "SaveGraphsWith") {
		t.Errorf("SaveGraphsWith with a closed pool: %v, want ErrInvalidHandle naming SaveGraphsWith", err)
	}

	var memory [32]uint64
	for i := range memory {
		memory[i] = 0x5a5a5a5a5a5a5a5a
	}
	foreignGraph, foreignPool := &Graph{}, &Pool{}
	*(*unsafe.Pointer)(unsafe.Pointer(&foreignGraph.h)) = unsafe.Pointer(&memory[0])
	*(*unsafe.Pointer)(unsafe.Pointer(&foreignPool.h)) = unsafe.Pointer(&memory[0])
	for _, pools := range [][]*Pool{nil, {foreignPool}} {
		for _, opts := range []*SaveOptions{nil, verify} {
			_, err = SaveGraphsWith([]*Graph{foreignGraph}, pools, opts)
			if !errors.As(err, &ce) || ce.Status != ErrInvalidHandle || !strings.Contains(ce.Message, "cgc_graphs_save") ||
				!strings.Contains(ce.Message, "graphs[0]") {
				t.Errorf("SaveGraphsWith(%+v) of a foreign graph (pools %v): %v, want ErrInvalidHandle naming graphs[0]",
					opts, pools, err)
			}
		}
	}
}

// 1.6: families. ShareExecutable with a closed graph or leader never reaches C; a pointer that is
// no cgc graph is refused by the library (ErrInvalidHandle, naming the call), the graph before
// the leader; RestoreGraphsWith on a closed context never reaches C either.
func TestShareExecutableForeignAndClosedGraphs(t *testing.T) {
	if err := Load(); err != nil {
		t.Fatal(err)
	}
	var ce *Error
	closed := func(what string, err error) {
		t.Helper()
		if !errors.As(err, &ce) || ce.Status != ErrInvalidHandle || !strings.Contains(ce.Message, "closed") ||
			!strings.Contains(ce.Message, "Graph.ShareExecutable") {
			t.Errorf("%s: %v, want ErrInvalidHandle naming Graph.ShareExecutable and the closed graph", what, err)
		}
	}
	var memory [32]uint64
	for i := range memory {
		memory[i] = 0x5a5a5a5a5a5a5a5a
	}
	foreign := &Graph{}
	*(*unsafe.Pointer)(unsafe.Pointer(&foreign.h)) = unsafe.Pointer(&memory[0])
	closedGraph := &Graph{closed: true}
	closed("ShareExecutable of a closed graph", closedGraph.ShareExecutable(foreign))
	closed("ShareExecutable with a closed leader", foreign.ShareExecutable(closedGraph))
	for _, leader := range []*Graph{nil, foreign} {
		err := foreign.ShareExecutable(leader)
		if !errors.As(err, &ce) || ce.Status != ErrInvalidHandle ||
			!strings.Contains(ce.Message, "cgc_graph_share_executable") || !strings.Contains(ce.Message, "graph (0x") {
			t.Errorf("ShareExecutable of a foreign graph (leader %v): %v, want ErrInvalidHandle naming the graph", leader, err)
		}
	}
	_, _, err := (&Context{closed: true}).RestoreGraphsWith([]byte("not a saved graph"), &RestoreOptions{Families: true})
	if !errors.As(err, &ce) || ce.Status != ErrInvalidHandle || !strings.Contains(ce.Message, "Context.RestoreGraphsWith") {
		t.Errorf("RestoreGraphsWith on a closed context: %v, want ErrInvalidHandle naming Context.RestoreGraphsWith", err)
	}
}
