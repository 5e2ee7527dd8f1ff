package cgc_test

// CI tests (no GPU) of the 1.1 wrappers, the work a graph is made of: the library checks their
// handles and arguments before it needs a driver, so bad calls get their status and a message
// naming the C function here too; what the binding refuses itself never reaches C.

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unsafe"

	cgc "cgc/bindings/go"
)

func TestWorkFunctionsRefuseNilHandles(t *testing.T) {
	if err := cgc.Load(); err != nil {
		t.Fatal(err)
	}
	var (
		ctx *cgc.Context
		s   *cgc.Stream
		m   *cgc.Module
		f   *cgc.Function
	)
	one := cgc.Dim3{X: 1, Y: 1, Z: 1}
	cases := []struct {
		name, fn string
		err      error
	}{
		{"Context.StreamPriorityRange", "cgc_stream_priority_range", third(ctx.StreamPriorityRange())},
		{"Stream.Priority", "cgc_stream_priority", second(s.Priority())},
		{"Stream.ID", "cgc_stream_id", second(s.ID())},
		{"Stream.Device", "cgc_stream_device", third(s.Device())},
		{"Stream.CopyAttributes", "cgc_stream_copy_attributes", s.CopyAttributes(nil)},
		{"Stream.SetAccessPolicy", "cgc_stream_set_access_policy", s.SetAccessPolicy(cgc.AccessPolicy{})},
		{"Stream.AccessPolicy", "cgc_stream_get_access_policy", second(s.AccessPolicy())},
		{"Context.HostAlloc", "cgc_host_alloc", second(ctx.HostAlloc(64, 0))},
		{"Context.HostRegister", "cgc_host_register", second(ctx.HostRegister(make([]byte, 64), 0))},
		{"CopyHostToDevice", "cgc_memcpy_htod_async", cgc.CopyHostToDevice(0, []float32{1, 2}, s)},
		{"CopyHostToDevice (empty)", "cgc_memcpy_htod_async", cgc.CopyHostToDevice(0, []float32{}, s)},
		{"CopyDeviceToHost", "cgc_memcpy_dtoh_async", cgc.CopyDeviceToHost(make([]uint16, 3), 0, s)},
		{"CopyDeviceToDevice", "cgc_memcpy_dtod_async", cgc.CopyDeviceToDevice(0, 0, 16, s)},
		{"Memset8", "cgc_memset_d8_async", cgc.Memset8(0, 1, 16, s)},
		{"Memset16", "cgc_memset_d16_async", cgc.Memset16(0, 1, 16, s)},
		{"Memset32", "cgc_memset_d32_async", cgc.Memset32(0, 1, 16, s)},
		{"Stream.WriteValue32", "cgc_stream_write_value32", s.WriteValue32(0, 1, 0)},
		{"Stream.WriteValue64", "cgc_stream_write_value64", s.WriteValue64(0, 1, 0)},
		{"Stream.WaitValue32", "cgc_stream_wait_value32", s.WaitValue32(0, 1, cgc.WaitEQ)},
		{"Stream.WaitValue64", "cgc_stream_wait_value64", s.WaitValue64(0, 1, cgc.WaitGEQ)},
		{"Stream.BatchMemOps", "cgc_stream_batch_mem_op", s.BatchMemOps([]cgc.MemOp{{Kind: cgc.MemOpWriteValue32}})},
		{"Context.LoadModule", "cgc_module_load", second(ctx.LoadModule([]byte("// no code")))},
		{"Module.Function", "cgc_module_get_function", second(m.Function("scale"))},
		{"Function.Attribute", "cgc_function_get_attribute", second(f.Attribute(cgc.FuncNumRegs))},
		{"Function.SetAttribute", "cgc_function_set_attribute", f.SetAttribute(cgc.FuncPreferredSharedMemoryCarveout, 50)},
		{"Function.Launch", "cgc_launch_kernel", f.Launch(one, one, 0, s, cgc.DevicePtr(0), float32(1), uint32(4))},
		{"Stream.LaunchHostFunc", "cgc_launch_host_func", s.LaunchHostFunc(func() {}, nil)},
	}
	for _, c := range cases {
		if e := asError(t, c.err, cgc.ErrInvalidArgument); !strings.Contains(e.Message, c.fn) {
			t.Errorf("%s: message %q does not name %s", c.name, e.Message, c.fn)
		}
	}
}

// A host function whose launch fails is released at once, exactly once, and never called:
// the library calls the release trampoline, which runs the Go release.
func TestHostFunctionReleasedWhenTheLaunchFails(t *testing.T) {
	if err := cgc.Load(); err != nil {
		t.Fatal(err)
	}
	calls, releases := 0, 0
	fn, release := func() { calls++ }, func() { releases++ }
	err := (*cgc.Stream)(nil).LaunchHostFunc(fn, release)
	if e := asError(t, err, cgc.ErrInvalidArgument); !strings.Contains(e.Message, "cgc_launch_host_func") {
		t.Errorf("message %q does not name cgc_launch_host_func", e.Message)
	}
	if calls != 0 || releases != 1 {
		t.Errorf("after a failed launch: fn ran %d times, release %d; want 0 and 1", calls, releases)
	}
	// The binding's own refusal (no fn) keeps the same promise.
	err = (*cgc.Stream)(nil).LaunchHostFunc(nil, release)
	if e := asError(t, err, cgc.ErrInvalidArgument); !strings.Contains(e.Message, "fn is nil") || releases != 2 {
		t.Errorf("LaunchHostFunc(nil): %v, releases %d", e, releases)
	}
	// A nil release is allowed.
	asError(t, (*cgc.Stream)(nil).LaunchHostFunc(fn, nil), cgc.ErrInvalidArgument)
}

func TestWorkArgumentsTheBindingRefuses(t *testing.T) {
	if err := cgc.Load(); err != nil {
		t.Fatal(err)
	}
	var s *cgc.Stream
	var f *cgc.Function
	one := cgc.Dim3{X: 1, Y: 1, Z: 1}
	freed := &cgc.DeviceMemory{}
	_ = freed.Free()
	type myIndex uint32 // named scalar types are accepted by kind; see below
	cases := map[string]struct {
		err  error
		want string
	}{
		"HostAlloc(-1)":              {second((*cgc.Context)(nil).HostAlloc(-1, 0)), "negative size"},
		"CopyDeviceToDevice(-1)":     {cgc.CopyDeviceToDevice(0, 0, -1, s), "negative size"},
		"Memset8(-1)":                {cgc.Memset8(0, 0, -1, s), "negative size"},
		"Memset16(-1)":               {cgc.Memset16(0, 0, -1, s), "negative size"},
		"Memset32(-1)":               {cgc.Memset32(0, 0, -1, s), "negative size"},
		"SetAccessPolicy(Bytes -1)":  {s.SetAccessPolicy(cgc.AccessPolicy{Bytes: -1}), "negative size"},
		"SetAttribute(1<<40)":        {f.SetAttribute(cgc.FuncPreferredSharedMemoryCarveout, 1<<40), "does not fit a C int"},
		"Launch(sharedBytes -1)":     {f.Launch(one, one, -1, s), "sharedBytes"},
		"Launch(int)":                {f.Launch(one, one, 0, s, 7), "argument 0 (int)"},
		"Launch(uint)":               {f.Launch(one, one, 0, s, int32(1), uint(7)), "argument 1 (uint)"},
		"Launch(string)":             {f.Launch(one, one, 0, s, "text"), "not a fixed-size scalar"},
		"Launch(nil)":                {f.Launch(one, one, 0, s, nil), "nil has no type"},
		"Launch(struct)":             {f.Launch(one, one, 0, s, struct{ X, Y float32 }{}), "not a fixed-size scalar"},
		"Launch(freed DeviceMemory)": {f.Launch(one, one, 0, s, freed), "nil or was freed"},
		"Launch(nil DeviceMemory)":   {f.Launch(one, one, 0, s, (*cgc.DeviceMemory)(nil)), "nil or was freed"},
	}
	for name, c := range cases {
		if e := asError(t, c.err, cgc.ErrInvalidArgument); !strings.Contains(e.Message, c.want) || !strings.Contains(e.Message, "Go binding") {
			t.Errorf("%s: message %q, want the binding's refusal saying %q", name, e.Message, c.want)
		}
	}
	// Every kind of argument the binding takes gets past it to the library, which then refuses
	// the nil function by name.
	err := f.Launch(one, one, 0, s, int8(1), uint8(2), int16(3), uint16(4), int32(5), uint32(6), int64(7), uint64(8),
		float32(9), float64(10), true, uintptr(11), cgc.DevicePtr(12), myIndex(13), unsafe.Pointer(nil),
		&cgc.DeviceMemory{})
	if e := asError(t, err, cgc.ErrInvalidArgument); !strings.Contains(e.Message, "cgc_launch_kernel") {
		t.Errorf("Launch with every accepted kind of argument: %q, want the library's refusal of the nil function", e.Message)
	}
}

// second and third keep the error of a call with two or three results.
func second(_ any, err error) error   { return err }
func third(_, _ any, err error) error { return err }

func TestWorkObjectsAreNilSafe(t *testing.T) {
	if err := (*cgc.HostBuffer)(nil).Free(); err != nil {
		t.Errorf("nil HostBuffer.Free: %v", err)
	}
	if err := (*cgc.HostRegistration)(nil).Unregister(); err != nil {
		t.Errorf("nil HostRegistration.Unregister: %v", err)
	}
	if err := (*cgc.Module)(nil).Close(); err != nil {
		t.Errorf("nil Module.Close: %v", err)
	}
	var b *cgc.HostBuffer
	if b.Bytes() != nil || cgc.HostSlice[float32](b) != nil || b.Ptr() != nil || b.Size() != 0 {
		t.Error("a nil HostBuffer has a view")
	}
	if (*cgc.Function)(nil).Name() != "" {
		t.Error("a nil Function has a name")
	}
	// The zero MemOpKind and others print readably.
	if cgc.MemOpWaitValue32.String() != "WaitValue32" || cgc.MemOpBarrier.String() != "Barrier" ||
		cgc.MemOpKind(99).String() != "MemOpKind(99)" ||
		cgc.AccessPersisting.String() != "Persisting" {
		t.Error("String of MemOpKind or AccessProperty")
	}
}

// 1.2 without a GPU: the per-node updates refuse a nil graph by name (the library checks the
// handle first), and what the binding can tell is wrong never reaches C.
func TestUpdateFunctionsRefuseNilGraphs(t *testing.T) {
	if err := cgc.Load(); err != nil {
		t.Fatal(err)
	}
	var g *cgc.Graph
	cases := []struct {
		name, fn string
		err      error
	}{
		{"Graph.SetKernelEnabled", "cgc_graph_kernel_node_set_enabled", g.SetKernelEnabled(0, false)},
		{"Graph.SetKernelArgs", "cgc_graph_kernel_node_set_args", g.SetKernelArgs(1, cgc.DevicePtr(0), float32(1), uint32(4))},
		// No arguments: the shim still passes an array, so the refusal is the graph's, not "args is NULL".
		{"Graph.SetKernelArgs (no arguments)", "cgc_graph_kernel_node_set_args", g.SetKernelArgs(0)},
	}
	for _, c := range cases {
		e := asError(t, c.err, cgc.ErrInvalidArgument)
		if !strings.Contains(e.Message, c.fn) || !strings.Contains(e.Message, "graph") || strings.Contains(e.Message, "args is NULL") {
			t.Errorf("%s: message %q, want %s refusing the NULL graph", c.name, e.Message, c.fn)
		}
	}
	refusals := map[string]struct {
		err  error
		want string
	}{
		"SetKernelEnabled(-1)":     {g.SetKernelEnabled(-1, true), "kernelIndex -1 is negative"},
		"SetKernelArgs(-2)":        {g.SetKernelArgs(-2, uint32(1)), "kernelIndex -2 is negative"},
		"SetKernelArgs(int)":       {g.SetKernelArgs(0, cgc.DevicePtr(0), 7), "argument 1 (int)"},
		"Update with a zero Graph": {(*cgc.Stream)(nil).BeginCapture(&cgc.CaptureOptions{Update: &cgc.Graph{}}), "CaptureOptions.Update"},
	}
	for name, c := range refusals {
		if e := asError(t, c.err, cgc.ErrInvalidArgument); !strings.Contains(e.Message, c.want) || !strings.Contains(e.Message, "Go binding") {
			t.Errorf("%s: message %q, want the binding's refusal saying %q", name, e.Message, c.want)
		}
	}
	// A nil Update is no update: the library then refuses the nil stream, naming the call.
	err := (*cgc.Stream)(nil).BeginCapture(&cgc.CaptureOptions{Update: nil})
	if e := asError(t, err, cgc.ErrInvalidArgument); !strings.Contains(e.Message, "cgc_capture_begin") {
		t.Errorf("BeginCapture on a nil stream: %q", e.Message)
	}
	if cgc.GraphUpdateInPlace.String() != "InPlace" || cgc.GraphUpdateReinstantiated.String() != "Reinstantiated" ||
		cgc.GraphUpdateNone.String() != "None" || cgc.GraphUpdate(9).String() != "GraphUpdate(9)" {
		t.Error("String of GraphUpdate")
	}
}

// 1.2's conditional nodes without a GPU: a nil stream is refused by the library, naming the
// call, before the body could run; a nil body is the binding's refusal; the kinds print.
func TestConditionalRefusesNilStreams(t *testing.T) {
	if err := cgc.Load(); err != nil {
		t.Fatal(err)
	}
	ran := false
	body := func(*cgc.Stream) error { ran = true; return nil }
	for _, kind := range []cgc.ConditionalKind{cgc.ConditionalIf, cgc.ConditionalWhile, cgc.ConditionalKind(3)} {
		// Kind 3 is the library's to judge, after the stream: the NULL stream answers first.
		err := (*cgc.Stream)(nil).Conditional(kind, cgc.DevicePtr(0x10000), body)
		if e := asError(t, err, cgc.ErrInvalidArgument); !strings.Contains(e.Message, "cgc_capture_conditional_begin") ||
			!strings.Contains(e.Message, "NULL") {
			t.Errorf("Conditional(%v) on a nil stream: %q, want cgc_capture_conditional_begin refusing NULL", kind, e.Message)
		}
	}
	// A SWITCH has as many bodies as cases: the one-body call refuses it before anything else,
	// pointing to the call that makes one (1.3).
	err := (*cgc.Stream)(nil).Conditional(cgc.ConditionalSwitch, cgc.DevicePtr(0x10000), body)
	if e := asError(t, err, cgc.ErrInvalidArgument); !strings.Contains(e.Message, "cgc_capture_conditional_begin:") ||
		!strings.Contains(e.Message, "cgc_capture_conditional_begin_bodies") {
		t.Errorf("Conditional(Switch): %q, want cgc_capture_conditional_begin naming cgc_capture_conditional_begin_bodies", e.Message)
	}
	if ran {
		t.Error("the body ran although no node was added")
	}
	err = (*cgc.Stream)(nil).Conditional(cgc.ConditionalWhile, 0, nil)
	if e := asError(t, err, cgc.ErrInvalidArgument); !strings.Contains(e.Message, "Go binding") ||
		!strings.Contains(e.Message, "body is nil") {
		t.Errorf("Conditional with a nil body: %q", e.Message)
	}
	if cgc.ConditionalIf.String() != "If" || cgc.ConditionalWhile.String() != "While" ||
		cgc.ConditionalSwitch.String() != "Switch" || cgc.ConditionalKind(3).String() != "ConditionalKind(3)" ||
		cgc.ConditionalIf != 0 || cgc.ConditionalWhile != 1 || cgc.ConditionalSwitch != 2 {
		t.Error("ConditionalKind values or String")
	}
}

// 1.3's ConditionalBodies without a GPU: the library checks the stream before the kind, the
// count and the flags, so a nil stream is what it refuses here, by name, whatever those are
// (they are checked on a GPU, TestGPUConditionalBodiesChecksKindCountAndFlags); what the binding
// sees is wrong never reaches C; no body function runs when no node was added.
func TestConditionalBodiesRefusesNilStreamsAndBadCounts(t *testing.T) {
	if err := cgc.Load(); err != nil {
		t.Fatal(err)
	}
	ran := false
	body := func([]*cgc.Stream, cgc.ConditionalHandle) error { ran = true; return nil }
	cases := []struct {
		kind    cgc.ConditionalKind
		flags   cgc.ConditionalFlags
		nBodies int
	}{
		{cgc.ConditionalIf, 0, 1}, {cgc.ConditionalIf, 0, 2}, {cgc.ConditionalWhile, 0, 1},
		{cgc.ConditionalWhile, cgc.ConditionalBodySetsCondition, 1}, {cgc.ConditionalSwitch, 0, 3},
		{cgc.ConditionalSwitch, 0, 256},
		// Wrong for the kind, but the stream answers first.
		{cgc.ConditionalIf, 0, 3}, {cgc.ConditionalSwitch, 0, 0}, {cgc.ConditionalKind(7), 0, 1},
		{cgc.ConditionalIf, cgc.ConditionalBodySetsCondition, 1}, {cgc.ConditionalWhile, 0x80, 1},
	}
	for _, c := range cases {
		err := (*cgc.Stream)(nil).ConditionalBodies(c.kind, cgc.DevicePtr(0x10000), c.flags, c.nBodies, body)
		e := asError(t, err, cgc.ErrInvalidArgument)
		if !strings.Contains(e.Message, "cgc_capture_conditional_begin_bodies") || !strings.Contains(e.Message, "NULL") {
			t.Errorf("ConditionalBodies(%v, flags %d, %d bodies) on a nil stream: %q, want "+
				"cgc_capture_conditional_begin_bodies refusing NULL", c.kind, c.flags, c.nBodies, e.Message)
		}
	}
	refusals := map[string]struct {
		err  error
		want string
	}{
		"nil body": {(*cgc.Stream)(nil).ConditionalBodies(cgc.ConditionalIf, 0, 0, 1, nil), "body is nil"},
		"-1 bodies": {(*cgc.Stream)(nil).ConditionalBodies(cgc.ConditionalSwitch, 0, 0, -1, body),
			"nBodies is -1"},
		"257 bodies": {(*cgc.Stream)(nil).ConditionalBodies(cgc.ConditionalSwitch, 0, 0, 257, body),
			"nBodies is 257: a conditional node has 1 to 256 bodies"},
	}
	for name, c := range refusals {
		if e := asError(t, c.err, cgc.ErrInvalidArgument); !strings.Contains(e.Message, c.want) ||
			!strings.Contains(e.Message, "Go binding") || !strings.Contains(e.Message, "Stream.ConditionalBodies") {
			t.Errorf("%s: message %q, want the binding's refusal saying %q", name, e.Message, c.want)
		}
	}
	if ran {
		t.Error("a body function ran although no node was added")
	}
	// The header's values, through cgo.
	if cgc.ConditionalBodySetsCondition != 1 || cgc.LoopEagerIterations != 65536 {
		t.Errorf("ConditionalBodySetsCondition %d, LoopEagerIterations %d; the header says 1 and 65536",
			cgc.ConditionalBodySetsCondition, cgc.LoopEagerIterations)
	}
}

// 1.4 without a GPU: a nil pool is refused by the library, naming the call, whatever the native
// stream (the pool is checked before the driver is asked about the stream); what the binding
// can tell is wrong (a nil or freed block) never reaches C.
func TestAdoptedCapturesRefuseNilPools(t *testing.T) {
	if err := cgc.Load(); err != nil {
		t.Fatal(err)
	}
	var p *cgc.Pool
	for _, native := range []uintptr{0, 2 /* cudaStreamPerThread */, 0x10000} {
		e := asError(t, p.AdoptCapture(native), cgc.ErrInvalidArgument)
		if !strings.Contains(e.Message, "cgc_pool_adopt_capture") || !strings.Contains(e.Message, "NULL") {
			t.Errorf("AdoptCapture(%#x) on a nil pool: %q, want cgc_pool_adopt_capture refusing NULL", native, e.Message)
		}
	}
	e := asError(t, p.EndAdoptedCapture(), cgc.ErrInvalidArgument)
	if !strings.Contains(e.Message, "cgc_pool_end_adopted_capture") || !strings.Contains(e.Message, "NULL") {
		t.Errorf("EndAdoptedCapture on a nil pool: %q", e.Message)
	}
	var m *cgc.DeviceMemory
	e = asError(t, m.RecordStreamNative(0), cgc.ErrInvalidArgument)
	if !strings.Contains(e.Message, "Go binding") || !strings.Contains(e.Message, "DeviceMemory.RecordStreamNative") {
		t.Errorf("RecordStreamNative of a nil block: %q, want the binding's refusal", e.Message)
	}
}

// 1.5 without a GPU: a nil pool or communicator is refused by the library, naming the call (the
// communicator by NCCL's absence where there is no NCCL); negative sizes are the binding's
// refusal and never reach C.
func TestNCCLPoolsAndPoolMallocRefuseNilHandles(t *testing.T) {
	if err := cgc.Load(); err != nil {
		t.Fatal(err)
	}
	var p *cgc.Pool
	for _, size := range []int{0, 512} {
		m, err := p.Malloc(size, nil)
		e := asError(t, err, cgc.ErrInvalidArgument)
		if m != nil || !strings.Contains(e.Message, "cgc_pool_malloc") || !strings.Contains(e.Message, "pool is NULL") {
			t.Errorf("Malloc(%d) from a nil pool: %v %q, want cgc_pool_malloc refusing the NULL pool", size, m, e.Message)
		}
	}
	m, err := p.Malloc(-1, nil)
	if e := asError(t, err, cgc.ErrInvalidArgument); m != nil || !strings.Contains(e.Message, "Go binding") ||
		!strings.Contains(e.Message, "Pool.Malloc") {
		t.Errorf("Malloc(-1): %q, want the binding's refusal", e.Message)
	}

	var cm *cgc.Comm
	for _, wanted := range []cgc.NCCLMemory{cgc.NCCLMemoryPlain, cgc.NCCLMemoryRegistered, cgc.NCCLMemorySymmetric} {
		pool, got, err := cm.NewPool(1<<20, wanted)
		var e *cgc.Error
		if !errors.As(err, &e) || (e.Status != cgc.ErrInvalidArgument && e.Status != cgc.ErrNCCLUnavailable) ||
			!strings.Contains(e.Message, "cgc_nccl_pool_create") {
			t.Errorf("NewPool(%v) on a nil communicator: %v, want cgc_nccl_pool_create refusing it", wanted, err)
		}
		if pool != nil || got != cgc.NCCLMemoryPlain {
			t.Errorf("NewPool(%v) failed but returned %v, %v", wanted, pool, got)
		}
	}
	_, _, err = cm.NewPool(-1, cgc.NCCLMemoryRegistered)
	if e := asError(t, err, cgc.ErrInvalidArgument); !strings.Contains(e.Message, "Go binding") ||
		!strings.Contains(e.Message, "Comm.NewPool") {
		t.Errorf("NewPool(-1): %q, want the binding's refusal", e.Message)
	}
}

// 1.6 without a GPU: a claim from a nil pool is refused by the library, naming the call and the
// pool, before it looks at the range (so whatever the address and size: 0, unaligned); a
// negative size is the binding's refusal and never reaches C.
func TestPoolClaimRefusesANilPool(t *testing.T) {
	if err := cgc.Load(); err != nil {
		t.Fatal(err)
	}
	var p *cgc.Pool
	for _, c := range []struct {
		ptr  cgc.DevicePtr
		size int
	}{{0x10000, 512}, {0x10000, 0}, {0x10001, 512}, {0, 512}} {
		m, err := p.Claim(c.ptr, c.size)
		e := asError(t, err, cgc.ErrInvalidArgument)
		if m != nil || !strings.Contains(e.Message, "cgc_pool_claim") || !strings.Contains(e.Message, "pool is NULL") {
			t.Errorf("Claim(%#x, %d) from a nil pool: %v %q, want cgc_pool_claim refusing the NULL pool", c.ptr, c.size,
				m, e.Message)
		}
	}
	m, err := p.Claim(0x10000, -1)
	if e := asError(t, err, cgc.ErrInvalidArgument); m != nil || !strings.Contains(e.Message, "Go binding") ||
		!strings.Contains(e.Message, "Pool.Claim") {
		t.Errorf("Claim(-1): %q, want the binding's refusal", e.Message)
	}
}

// 1.6 without a GPU: a pool at fixed addresses on a nil context is refused by the library,
// naming the call and the context, before it looks at the range (so whatever the base and
// capacity: 0, unaligned); a negative capacity is the binding's refusal and never reaches C.
func TestPoolAtRefusesANilContext(t *testing.T) {
	if err := cgc.Load(); err != nil {
		t.Fatal(err)
	}
	const base = cgc.DevicePtr(0x650000000000)
	var ctx *cgc.Context
	for _, c := range []struct {
		base     cgc.DevicePtr
		capacity int
	}{{base, 64 << 20}, {0, 64 << 20}, {base + 4096, 64 << 20}, {base, 0}, {base, 64<<20 + 1}} {
		p, err := ctx.NewPoolAt(c.base, c.capacity)
		e := asError(t, err, cgc.ErrInvalidArgument)
		if p != nil || !strings.Contains(e.Message, "cgc_pool_create_at") || !strings.Contains(e.Message, "ctx is NULL") {
			t.Errorf("NewPoolAt(%#x, %d) on a nil context: %v %q, want cgc_pool_create_at refusing the NULL context",
				c.base, c.capacity, p, e.Message)
		}
	}
	p, err := ctx.NewPoolAt(base, -1)
	if e := asError(t, err, cgc.ErrInvalidArgument); p != nil || !strings.Contains(e.Message, "Go binding") ||
		!strings.Contains(e.Message, "Context.NewPoolAt") {
		t.Errorf("NewPoolAt(-1): %q, want the binding's refusal", e.Message)
	}
}

// 1.6 without a GPU: saving refuses no graphs and a nil graph (ErrInvalidArgument, naming the
// call) before it needs the driver; bytes that are no saved buffer (garbage, zeros, too few,
// none) are ErrSavedMismatch, for a restore too, which reads them first; a module image on a nil
// context is refused by the library, a key with a NUL byte and a negative size by the binding.
func TestSavedGraphsRefuseBadArguments(t *testing.T) {
	if err := cgc.Load(); err != nil {
		t.Fatal(err)
	}
	named := func(what string, err error, want cgc.Status, words ...string) {
		t.Helper()
		e := asError(t, err, want)
		for _, w := range words {
			if !strings.Contains(e.Message, w) {
				t.Errorf("%s: %q does not say %q", what, e.Message, w)
			}
		}
	}
	data, err := cgc.SaveGraphs(nil, nil)
	named("SaveGraphs of no graphs", err, cgc.ErrInvalidArgument, "cgc_graphs_save", "n_graphs is 0")
	if data != nil {
		t.Errorf("a refused save gave %d bytes", len(data))
	}
	_, err = cgc.SaveGraphs([]*cgc.Graph{nil}, []*cgc.Pool{nil})
	named("SaveGraphs of a nil graph", err, cgc.ErrInvalidArgument, "cgc_graphs_save", "graphs[0]")

	garbage := make([]byte, 200)
	for i := range garbage {
		garbage[i] = byte(i*73 + 5)
	}
	for _, d := range [][]byte{garbage, garbage[:3], nil, make([]byte, 64)} {
		info, err := cgc.ReadSavedInfo(d)
		named(fmt.Sprintf("ReadSavedInfo of %d bytes", len(d)), err, cgc.ErrSavedMismatch, "cgc_saved_info")
		if info != (cgc.SavedInfo{}) {
			t.Errorf("a refused ReadSavedInfo gave %+v", info)
		}
	}
	var ctx *cgc.Context
	graphs, pools, err := ctx.RestoreGraphs(garbage)
	named("RestoreGraphs of garbage", err, cgc.ErrSavedMismatch, "cgc_saved_info")
	if graphs != nil || pools != nil {
		t.Errorf("a refused restore gave %v, %v", graphs, pools)
	}
	named("AddModuleImage on a nil context", ctx.AddModuleImage("cgc-go-test", garbage), cgc.ErrInvalidArgument,
		"cgc_module_add_image")
	named("AddModuleImage with a NUL in the key", ctx.AddModuleImage("a\x00b", garbage), cgc.ErrInvalidArgument,
		"Go binding", "Context.AddModuleImage")

	_, err = cgc.DeviceMemoryAt(0x10000, -1)
	named("DeviceMemoryAt(-1)", err, cgc.ErrInvalidArgument, "Go binding", "DeviceMemoryAt")
	m, err := cgc.DeviceMemoryAt(0xDEAD00, 512)
	if err != nil || m.Ptr() != 0xDEAD00 || m.Size() != 512 {
		t.Fatalf("DeviceMemoryAt: %v, %v", m, err)
	}
	named("Free of no block", m.Free(), cgc.ErrInvalidArgument, "cgc_free")
}

// 1.6 without a GPU: a verifying save. SaveGraphsWith, with nil options, the defaults or Verify
// (CGC_SAVE_VERIFY, which the library takes and then checks the graphs), refuses no graphs and a
// nil graph as SaveGraphs does (ErrInvalidArgument, naming the call), before it needs the driver.
func TestVerifyingSaveRefusesAsASaveDoes(t *testing.T) {
	if err := cgc.Load(); err != nil {
		t.Fatal(err)
	}
	for _, opts := range []*cgc.SaveOptions{nil, {}, {Verify: true}} {
		data, err := cgc.SaveGraphsWith(nil, nil, opts)
		if e := asError(t, err, cgc.ErrInvalidArgument); !strings.Contains(e.Message, "cgc_graphs_save") ||
			!strings.Contains(e.Message, "n_graphs is 0") || data != nil {
			t.Errorf("SaveGraphsWith(%+v) of no graphs: %d bytes, %q; want the library's refusal", opts, len(data),
				e.Message)
		}
		data, err = cgc.SaveGraphsWith([]*cgc.Graph{nil}, []*cgc.Pool{nil}, opts)
		if e := asError(t, err, cgc.ErrInvalidArgument); !strings.Contains(e.Message, "cgc_graphs_save") ||
			!strings.Contains(e.Message, "graphs[0]") || data != nil {
			t.Errorf("SaveGraphsWith(%+v) of a nil graph: %d bytes, %q; want the library's refusal", opts, len(data),
				e.Message)
		}
	}
}

// 1.6 without a GPU: families. ShareExecutable refuses a nil graph or leader (ErrInvalidArgument,
// naming the call and the graph, which it checks first) before it needs the driver; a restore
// with families or threads reads the bytes first as one without does (more than 64 threads are
// the library's refusal, on a GPU: gpu_family_test.go), a negative Threads is the binding's
// ErrInvalidArgument; the flag is the header's.
func TestShareExecutableRefusesNilGraphs(t *testing.T) {
	if err := cgc.Load(); err != nil {
		t.Fatal(err)
	}
	var g, leader *cgc.Graph
	for _, c := range []struct {
		what  string
		err   error
		named string
	}{
		{"ShareExecutable of a nil graph", g.ShareExecutable(leader), "graph is NULL"},
		{"ShareExecutable of a nil graph, itself as leader", g.ShareExecutable(g), "graph is NULL"},
	} {
		e := asError(t, c.err, cgc.ErrInvalidArgument)
		if !strings.Contains(e.Message, "cgc_graph_share_executable") || !strings.Contains(e.Message, c.named) {
			t.Errorf("%s: %q, want cgc_graph_share_executable saying %q", c.what, e.Message, c.named)
		}
	}
	garbage := make([]byte, 200)
	for i := range garbage {
		garbage[i] = byte(i*73 + 5)
	}
	var ctx *cgc.Context
	for _, opts := range []*cgc.RestoreOptions{nil, {}, {Families: true}, {Threads: 1}, {Families: true, Threads: 65}} {
		graphs, pools, err := ctx.RestoreGraphsWith(garbage, opts)
		if e := asError(t, err, cgc.ErrSavedMismatch); !strings.Contains(e.Message, "cgc_saved_info") ||
			graphs != nil || pools != nil {
			t.Errorf("RestoreGraphsWith(%+v) of garbage: %v %v %q, want cgc_saved_info's refusal", opts, graphs, pools,
				e.Message)
		}
	}
	graphs, pools, err := ctx.RestoreGraphsWith(garbage, &cgc.RestoreOptions{Threads: -1})
	if e := asError(t, err, cgc.ErrInvalidArgument); !strings.Contains(e.Message, "Context.RestoreGraphsWith") ||
		!strings.Contains(e.Message, "opts.Threads is -1") || graphs != nil || pools != nil {
		t.Errorf("RestoreGraphsWith with Threads -1: %v %v %q, want the binding's refusal", graphs, pools, e.Message)
	}
	// With the generators asked for, the same refusals, and no generators either.
	for _, opts := range []*cgc.RestoreOptions{nil, {Families: true, Threads: 2}} {
		graphs, pools, rngs, err := ctx.RestoreGraphsWithGenerators(garbage, opts)
		if e := asError(t, err, cgc.ErrSavedMismatch); !strings.Contains(e.Message, "cgc_saved_info") ||
			graphs != nil || pools != nil || rngs != nil {
			t.Errorf("RestoreGraphsWithGenerators(%+v) of garbage: %v %v %v %q, want cgc_saved_info's refusal", opts,
				graphs, pools, rngs, e.Message)
		}
	}
	graphs, pools, rngs, err := ctx.RestoreGraphsWithGenerators(garbage, &cgc.RestoreOptions{Threads: -1})
	if e := asError(t, err, cgc.ErrInvalidArgument); !strings.Contains(e.Message,
		"Context.RestoreGraphsWithGenerators") || !strings.Contains(e.Message, "opts.Threads is -1") ||
		graphs != nil || pools != nil || rngs != nil {
		t.Errorf("RestoreGraphsWithGenerators with Threads -1: %v %v %v %q, want the binding's refusal", graphs, pools,
			rngs, e.Message)
	}
}

// 1.6 without a GPU: the snapshot of a nil context is refused by the library, naming the call
// (a closed one never reaches C: internal_test.go); the block states are the header's.
func TestMemorySnapshotRefusesANilContext(t *testing.T) {
	if err := cgc.Load(); err != nil {
		t.Fatal(err)
	}
	segments, err := (*cgc.Context)(nil).MemorySnapshot()
	if e := asError(t, err, cgc.ErrInvalidArgument); segments != nil || !strings.Contains(e.Message, "cgc_memory_snapshot") ||
		!strings.Contains(e.Message, "ctx") {
		t.Errorf("MemorySnapshot of a nil context: %v %q, want cgc_memory_snapshot refusing ctx", segments, e.Message)
	}
	states := []cgc.BlockState{cgc.BlockFree, cgc.BlockAllocated, cgc.BlockWaiting}
	for i, s := range states {
		if int(s) != i {
			t.Errorf("%v is %d, want %d", s, int(s), i)
		}
	}
	if fmt.Sprint(states) != "[Free Allocated Waiting]" || cgc.BlockState(7).String() != "BlockState(7)" {
		t.Errorf("names: %v %v", states, cgc.BlockState(7))
	}
	if (*cgc.Pool)(nil).ID() != 0 {
		t.Error("a nil pool has an ID")
	}
}

func TestNCCLMemoryKindsAreTheHeaders(t *testing.T) {
	kinds := []cgc.NCCLMemory{cgc.NCCLMemoryPlain, cgc.NCCLMemoryRegistered, cgc.NCCLMemorySymmetric}
	for i, k := range kinds {
		if int(k) != i {
			t.Errorf("%v is %d, want %d", k, int(k), i)
		}
	}
	if fmt.Sprint(kinds) != "[Plain Registered Symmetric]" || cgc.NCCLMemory(7).String() != "NCCLMemory(7)" {
		t.Errorf("names: %v %v", kinds, cgc.NCCLMemory(7))
	}
	if cgc.HeaderVersion.Major != 1 || cgc.HeaderVersion.Minor < 5 {
		t.Errorf("the header is %+v, older than 1.5", cgc.HeaderVersion)
	}
}

// 1.6 without a GPU: the record of module images. ModuleRecord needs no Context and the library
// makes no driver call for it, so it runs here for real: off while off succeeds with both counts 0
// (this process never recorded); on succeeds where CUPTI can subscribe (a GPU machine with
// libcupti) and is otherwise refused naming cgc_module_record, ErrNotSupported (no libcupti, or
// CUPTI without a driver) or ErrInvalidState (another CUPTI client subscribed), with the counts
// the record holds either way; asked again it answers the same; off again at the end, the counts
// never going down. (The only test of this process that records.)
func TestModuleRecordRunsWithoutAGPUAndIsOffAtTheEnd(t *testing.T) {
	if err := cgc.Load(); err != nil {
		t.Fatal(err)
	}
	images, bytes, err := cgc.ModuleRecord(false)
	if err != nil || images != 0 || bytes != 0 {
		t.Fatalf("ModuleRecord(false) while off: %d images, %d bytes, %v; want 0, 0, nil", images, bytes, err)
	}
	images, bytes, err = cgc.ModuleRecord(true)
	var onStatus cgc.Status
	if err != nil {
		var e *cgc.Error
		if !errors.As(err, &e) || (e.Status != cgc.ErrNotSupported && e.Status != cgc.ErrInvalidState) ||
			!strings.Contains(e.Message, "cgc_module_record") {
			t.Fatalf("ModuleRecord(true): %v; want success, or ErrNotSupported or ErrInvalidState naming "+
				"cgc_module_record", err)
		}
		onStatus = e.Status
		t.Logf("the record is refused here: %v", err)
	}
	if (images == 0) != (bytes == 0) {
		t.Errorf("ModuleRecord(true): %d images of %d bytes", images, bytes)
	}
	// On while on changes nothing; a refusal stays one.
	again, againBytes, err := cgc.ModuleRecord(true)
	if err == nil {
		if onStatus != cgc.Success {
			t.Errorf("ModuleRecord(true) again succeeded after %v", onStatus)
		}
	} else if e := asError(t, err, onStatus); !strings.Contains(e.Message, "cgc_module_record") {
		t.Errorf("ModuleRecord(true) again: %q does not name cgc_module_record", e.Message)
	}
	if again < images || againBytes < bytes {
		t.Errorf("the counts went down: %d images of %d bytes, then %d of %d", images, bytes, again, againBytes)
	}
	// Off again: what the record holds stays.
	off, offBytes, err := cgc.ModuleRecord(false)
	if err != nil || off < again || offBytes < againBytes || (off == 0) != (offBytes == 0) {
		t.Fatalf("ModuleRecord(false): %d images of %d bytes, %v; want no error and at least %d of %d", off,
			offBytes, err, again, againBytes)
	}
	if n, b, err := cgc.ModuleRecord(false); err != nil || n != off || b != offBytes {
		t.Errorf("ModuleRecord(false) while off: %d images of %d bytes, %v; want %d of %d", n, b, err, off, offBytes)
	}
}

// 1.6: without libcupti (CGC_CUPTI_LIBRARY naming a file that is not there, then the only
// candidate) and without the driver, ModuleRecord(true) is ErrNotSupported naming
// cgc_module_record, the path tried and CGC_CUPTI_LIBRARY, each time it is asked, with both counts
// 0; ModuleRecord(false) succeeds: the record never needs the driver.
func TestModuleRecordWithoutCUPTI(t *testing.T) {
	if !inChild(t, "CGC_CUPTI_LIBRARY=/nonexistent/libcupti.so", "CGC_CUDA_DRIVER=/nonexistent/libcuda.so.1") {
		return
	}
	for i := 0; i < 2; i++ {
		images, bytes, err := cgc.ModuleRecord(true)
		e := asError(t, err, cgc.ErrNotSupported)
		for _, want := range []string{"cgc_module_record", "/nonexistent/libcupti.so", "CGC_CUPTI_LIBRARY"} {
			if !strings.Contains(e.Message, want) {
				t.Errorf("message %q does not contain %q", e.Message, want)
			}
		}
		if images != 0 || bytes != 0 {
			t.Errorf("a refused record: %d images of %d bytes, want 0 of 0", images, bytes)
		}
	}
	if images, bytes, err := cgc.ModuleRecord(false); err != nil || images != 0 || bytes != 0 {
		t.Errorf("ModuleRecord(false): %d images of %d bytes, %v; want 0, 0, nil", images, bytes, err)
	}
	_, err := cgc.DeviceCount()
	asError(t, err, cgc.ErrNoDriver) // the driver was never needed: it is not there
}
