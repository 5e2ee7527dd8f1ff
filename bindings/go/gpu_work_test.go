package cgc_test

// GPU tests of the 1.1 wrappers, the work a graph is made of: copies and sets, page-locked and
// registered host memory, stream attributes, stream memory operations, a kernel of the tests'
// own, and host functions, eagerly and captured into graphs replayed with per-replay values.
// They skip, saying why, without a GPU (gpuContext).

import (
	"bytes"
	"errors"
	"math"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	cgc "cgc/bindings/go"
)

// The tests' kernel is affine of tests/kernels/binding_tests.ptx (bindingTestsPTX):
//
//	out[i] = in[i] * params[0] + params[1] + bias   for i < n
//
// Its parameters are three pointers, a float and an unsigned int, so a launch exercises
// pointer, float32 and uint32 arguments.
const (
	workCount = 4096 // floats per buffer
	workBlock = 256  // threads per block of the kernel
)

// hostBuffer allocates page-locked host memory, freed at cleanup unless the test freed it.
func (f *fixture) hostBuffer(bytes int) *cgc.HostBuffer {
	f.t.Helper()
	b, err := f.ctx.HostAlloc(bytes, 0)
	f.ok(err)
	f.t.Cleanup(func() { _ = b.Free() })
	return b
}

// deviceBuffer allocates device memory on s, freed at cleanup unless the test freed it.
func (f *fixture) deviceBuffer(bytes int, s *cgc.Stream) *cgc.DeviceMemory {
	f.t.Helper()
	m, err := f.ctx.Malloc(bytes, s)
	f.ok(err)
	f.t.Cleanup(func() { _ = m.Free() })
	return m
}

// wantMessage requires err to have the given status and a message naming every one of want.
func wantMessage(t *testing.T, what string, err error, status cgc.Status, want ...string) {
	t.Helper()
	e := asError(t, err, status)
	for _, w := range want {
		if !strings.Contains(e.Message, w) {
			t.Errorf("%s: message %q does not contain %q", what, e.Message, w)
		}
	}
}

func TestGPUCopiesAndSetsRoundTrip(t *testing.T) {
	f := newFixture(t, 1, 0)
	s := f.streams[0]
	host := f.hostBuffer(4 * workCount)
	in := cgc.HostSlice[float32](host)
	if len(in) != workCount || len(host.Bytes()) != 4*workCount || host.Ptr() == nil {
		t.Fatalf("HostSlice has %d floats, Bytes %d bytes; want %d floats", len(in), len(host.Bytes()), workCount)
	}
	for i := range in {
		in[i] = float32(i) * 0.5
	}
	a, b := f.deviceBuffer(4*workCount, s), f.deviceBuffer(4*workCount, s)

	// page-locked -> device -> device -> pageable (a Go slice is fine eagerly)
	f.ok(cgc.CopyHostToDevice(a.Ptr(), in, s))
	f.ok(cgc.CopyDeviceToDevice(b.Ptr(), a.Ptr(), 4*workCount, s))
	back := make([]float32, workCount)
	f.ok(cgc.CopyDeviceToHost(back, b.Ptr(), s))
	f.ok(s.Synchronize())
	if !equalBits(back, in) {
		t.Fatal("page-locked -> device -> device -> Go slice did not round-trip")
	}

	// pageable -> device -> page-locked, with another element type
	src := make([]uint32, workCount)
	for i := range src {
		src[i] = uint32(i) * 3
	}
	f.ok(cgc.CopyHostToDevice(a.Ptr(), src, s))
	dst := cgc.HostSlice[uint32](host)
	f.ok(cgc.CopyDeviceToHost(dst, a.Ptr(), s))
	f.ok(s.Synchronize())
	for i := range src {
		if dst[i] != src[i] {
			t.Fatalf("Go slice -> device -> page-locked: [%d] = %d, want %d", i, dst[i], src[i])
		}
	}

	// Sets of each width over one another: 32-bit everywhere, 16-bit over the first 16 bytes,
	// 8-bit over bytes 1 to 3.
	f.ok(cgc.Memset32(a.Ptr(), math.Float32bits(2.5), workCount, s))
	f.ok(cgc.CopyDeviceToHost(back, a.Ptr(), s))
	f.ok(s.Synchronize())
	for i, x := range back {
		if x != 2.5 {
			t.Fatalf("after Memset32: [%d] = %v, want 2.5", i, x)
		}
	}
	f.ok(cgc.Memset16(a.Ptr(), 0xbeef, 8, s))
	f.ok(cgc.Memset8(a.Ptr()+1, 0x7f, 3, s))
	head := make([]uint8, 20)
	f.ok(cgc.CopyDeviceToHost(head, a.Ptr(), s))
	f.ok(s.Synchronize())
	want := []uint8{0xef, 0x7f, 0x7f, 0x7f, 0xef, 0xbe, 0xef, 0xbe, 0xef, 0xbe, 0xef, 0xbe, 0xef, 0xbe, 0xef, 0xbe,
		0x00, 0x00, 0x20, 0x40} // the last four: 2.5 as a little-endian float32
	if !bytes.Equal(head, want) {
		t.Errorf("after the sets: % x, want % x", head, want)
	}
	wantMessage(t, "misaligned Memset32", cgc.Memset32(a.Ptr()+2, 0, 1, s), cgc.ErrInvalidArgument,
		"cgc_memset_d32_async", "aligned")
	// Empty copies are no-ops, also from an empty Go slice that has no address.
	f.ok(cgc.CopyHostToDevice(a.Ptr(), []float32{}, s))
	f.ok(cgc.CopyDeviceToHost([]float32(nil), a.Ptr(), s))

	f.ok(a.Free())
	f.ok(b.Free())
	f.ok(host.Free())
	if host.Ptr() != nil || host.Bytes() != nil {
		t.Error("a freed HostBuffer still has a view")
	}
	f.closeAll(true)
}

// Memory the caller page-locks with HostRegister may be used by captured copies; writing it
// between replays gives each replay new input.
func TestGPURegisteredHostMemoryInACapture(t *testing.T) {
	f := newFixture(t, 1, 0)
	s := f.streams[0]
	// Memory Go's collector does not manage, as HostRegister requires.
	mem, err := syscall.Mmap(-1, 0, 4*workCount, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	f.ok(err)
	defer func() { _ = syscall.Munmap(mem) }()
	reg, err := f.ctx.HostRegister(mem, 0)
	f.ok(err)
	defer func() { _ = reg.Unregister() }()
	if reg.Size() != len(mem) {
		t.Errorf("registered %d bytes, want %d", reg.Size(), len(mem))
	}
	dev := f.deviceBuffer(len(mem), s)
	g, err := s.Capture(nil, func(cs *cgc.Stream) error { return cgc.CopyHostToDevice(dev.Ptr(), mem, cs) })
	f.ok(err)
	back := make([]byte, len(mem))
	for replay := 1; replay <= 2; replay++ {
		for i := range mem {
			mem[i] = byte(i*replay + replay)
		}
		f.ok(g.Launch(s))
		f.ok(cgc.CopyDeviceToHost(back, dev.Ptr(), s))
		f.ok(s.Synchronize())
		if string(back) != string(mem) {
			t.Fatalf("replay %d did not copy the registered memory's new contents", replay)
		}
	}
	f.ok(g.Destroy())
	f.ok(reg.Unregister())
	f.ok(dev.Free())
	f.closeAll(true)
}

func TestGPUStreamAttributes(t *testing.T) {
	f := newFixture(t, 1, 0)
	s := f.streams[0]
	least, greatest, err := f.ctx.StreamPriorityRange()
	f.ok(err)
	if greatest > least {
		t.Errorf("priority range: greatest %d above least %d (greatest is the lowest number)", greatest, least)
	}
	high, err := f.ctx.NewStream(cgc.StreamNonBlocking, greatest)
	f.ok(err)
	defer high.Close()
	if p, err := high.Priority(); err != nil || p != greatest {
		t.Errorf("priority of a stream created at %d: %d, %v", greatest, p, err)
	}
	if p, err := s.Priority(); err != nil || p != 0 {
		t.Errorf("priority of a default stream: %d, %v", p, err)
	}
	id1, err := s.ID()
	f.ok(err)
	id2, err := high.ID()
	f.ok(err)
	if id1 == id2 {
		t.Errorf("two streams share id %d", id1)
	}
	device, native, err := high.Device()
	f.ok(err)
	if device != 0 || native == 0 {
		t.Errorf("Device: ordinal %d, context %#x; want 0 and a context", device, native)
	}
	f.ok(high.CopyAttributes(s))

	window := f.deviceBuffer(1<<20, s)
	policy := cgc.AccessPolicy{Base: window.Ptr(), Bytes: 1 << 20, HitRatio: 0.5,
		HitProperty: cgc.AccessPersisting, MissProperty: cgc.AccessStreaming}
	err = s.SetAccessPolicy(policy)
	if errors.Is(err, cgc.ErrNotSupported) {
		t.Logf("this device has no access-policy window: %v", err)
	} else {
		f.ok(err)
		got, err := s.AccessPolicy()
		f.ok(err)
		if got != policy {
			t.Errorf("access policy read back as %+v, set %+v", got, policy)
		}
		f.ok(s.SetAccessPolicy(cgc.AccessPolicy{})) // window off
	}
	wantMessage(t, "hit ratio 2", s.SetAccessPolicy(cgc.AccessPolicy{HitRatio: 2}), cgc.ErrInvalidArgument,
		"cgc_stream_set_access_policy", "hit_ratio")
	f.ok(window.Free())
	f.ok(high.Close())
	f.closeAll(true)
}

// The graph of examples/c/graph_work.c with the tests' kernel: on the origin stream a set and a
// copy of the per-replay parameters in from page-locked memory, a fork; on the side stream the
// kernel and a write of the flag; a join; on the origin a wait for the flag, a copy out to
// page-locked memory and a host function. Replayed with new parameters each time.
func TestGPUGraphWork(t *testing.T) {
	f := newFixture(t, 2, 2)
	origin, side := f.streams[0], f.streams[1]
	fork, join := f.events[0], f.events[1]

	module, err := f.ctx.LoadModule(bindingTestsPTX(t))
	f.ok(err)
	defer module.Close()
	affine, err := module.Function("affine")
	f.ok(err)
	if again, err := module.Function("affine"); err != nil || again.Name() != "affine" {
		t.Errorf("asking for the kernel again: %v, %v", again, err)
	}
	_, err = module.Function("no_such_kernel")
	wantMessage(t, "a missing kernel", err, cgc.ErrInvalidArgument, "cgc_module_get_function", "no_such_kernel")
	if threads, err := affine.Attribute(cgc.FuncMaxThreadsPerBlock); err != nil || threads < workBlock {
		t.Errorf("max threads per block: %d, %v; want >= %d", threads, err, workBlock)
	}
	f.ok(affine.SetAttribute(cgc.FuncPreferredSharedMemoryCarveout, 50))
	wantMessage(t, "setting a read-only attribute", affine.SetAttribute(cgc.FuncNumRegs, 8), cgc.ErrInvalidArgument,
		"cgc_function_set_attribute")
	_, err = f.ctx.LoadModule([]byte("this is not PTX"))
	wantMessage(t, "a bad image", err, cgc.ErrCUDA, "cgc_module_load")

	hostIn, hostOut, hostParams := f.hostBuffer(4*workCount), f.hostBuffer(4*workCount), f.hostBuffer(8)
	in, out, params := cgc.HostSlice[float32](hostIn), cgc.HostSlice[float32](hostOut), cgc.HostSlice[float32](hostParams)
	for i := range in {
		in[i] = float32(i%97) * 0.25
	}
	devIn, devOut := f.deviceBuffer(4*workCount, origin), f.deviceBuffer(4*workCount, origin)
	devParams, flag := f.deviceBuffer(8, origin), f.deviceBuffer(4, origin)
	f.ok(cgc.CopyHostToDevice(devIn.Ptr(), in, origin))
	f.ok(origin.Synchronize())
	for _, m := range []*cgc.DeviceMemory{devIn, devOut, devParams, flag} {
		f.ok(m.RecordStream(side)) // used on the side stream too
	}

	const bias = float32(0.5)
	var calls, releases atomic.Int32
	grid := cgc.Dim3{X: (workCount + workBlock - 1) / workBlock, Y: 1, Z: 1}
	block := cgc.Dim3{X: workBlock, Y: 1, Z: 1}
	g, err := origin.Capture(nil, func(s *cgc.Stream) error {
		f.ok(cgc.Memset32(flag.Ptr(), 0, 1, s))
		f.ok(cgc.CopyHostToDevice(devParams.Ptr(), params, s))
		f.ok(fork.Record(s))
		f.ok(side.WaitEvent(fork)) // fork: the side stream joins the capture
		f.ok(affine.Launch(grid, block, 0, side, devOut, devIn, devParams.Ptr(), bias, uint32(workCount)))
		f.ok(side.WriteValue32(flag.Ptr(), 1, 0))
		f.ok(join.Record(side))
		f.ok(s.WaitEvent(join)) // join
		f.ok(s.WaitValue32(flag.Ptr(), 1, cgc.WaitEQ))
		f.ok(cgc.CopyDeviceToHost(out, devOut.Ptr(), s))
		return s.LaunchHostFunc(func() { calls.Add(1) }, func() { releases.Add(1) })
	})
	f.ok(err)
	defer g.Destroy()

	// The graph keeps the kernel's code loaded: the module can go now, and its kernel handle
	// with it.
	f.ok(module.Close())
	_, err = affine.Attribute(cgc.FuncNumRegs)
	wantMessage(t, "a kernel of a closed module", err, cgc.ErrInvalidHandle, "closed")

	for replay := 1; replay <= 3; replay++ {
		scale, shift := float32(replay), 10*float32(replay)
		params[0], params[1] = scale, shift // read by the graph's copy at this replay
		f.ok(g.Launch(origin))
		f.ok(origin.Synchronize())
		for i := range out {
			if want := in[i]*scale + shift + bias; out[i] != want {
				t.Fatalf("replay %d: out[%d] = %v, want %v", replay, i, out[i], want)
			}
		}
		if n := calls.Load(); n != int32(replay) {
			t.Errorf("after replay %d the host function ran %d times", replay, n)
		}
	}
	if n := releases.Load(); n != 0 {
		t.Errorf("the host function was released %d times while its graph exists", n)
	}
	info, err := g.Info()
	f.ok(err)
	t.Logf("graph info: %+v", info)
	// The events add edges, not nodes.
	want := cgc.GraphInfo{NodeCount: 7, ReplayCount: 3, PoolBytesReserved: info.PoolBytesReserved, Uploaded: info.Uploaded,
		KernelNodes: 1, MemcpyNodes: 2, MemsetNodes: 1, HostNodes: 1, MemOpNodes: 2,
		FamilySize: 1} // an executable of its own: a family of one
	if info != want {
		t.Errorf("graph info %+v, want %+v", info, want)
	}

	f.ok(g.Destroy())
	if n := releases.Load(); n != 1 {
		t.Errorf("after the graph's destroy the host function was released %d times, want 1", n)
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("the host function ran %d times in all, want 3", n)
	}
	for _, m := range []*cgc.DeviceMemory{devIn, devOut, devParams, flag} {
		f.ok(m.Free())
	}
	for _, b := range []*cgc.HostBuffer{hostIn, hostOut, hostParams} {
		f.ok(b.Free())
	}
	f.closeAll(true)
}

func TestGPUHostFunctionEager(t *testing.T) {
	f := newFixture(t, 1, 0)
	s := f.streams[0]
	order := make(chan string, 4)
	f.ok(s.LaunchHostFunc(func() { order <- "fn" }, func() { order <- "release" }))
	f.ok(s.Synchronize())
	close(order)
	var got []string
	for o := range order {
		got = append(got, o)
	}
	if strings.Join(got, " ") != "fn release" {
		t.Errorf("an eager host function: %v, want fn once, then release", got)
	}
	// What a host function must not do, the library refuses: any cgc call from inside it.
	inner := make(chan error, 1)
	f.ok(s.LaunchHostFunc(func() { inner <- s.Synchronize() }, nil))
	f.ok(s.Synchronize())
	wantMessage(t, "a cgc call inside a host function", <-inner, cgc.ErrInvalidState, "host function")
	f.closeAll(true)
}

// A copy between the device and a Go slice (pageable memory) cannot be captured: the graph would
// read or write the slice again at every replay. The library refuses it before the driver could
// break the capture, and the stream can capture again.
func TestGPUPageableCopyInCaptureRefused(t *testing.T) {
	f := newFixture(t, 1, 0)
	s := f.streams[0]
	dev := f.deviceBuffer(4*workCount, s)
	pageable := make([]float32, workCount)
	f.ok(s.Synchronize())

	_, err := s.Capture(nil, func(cs *cgc.Stream) error { return cgc.CopyHostToDevice(dev.Ptr(), pageable, cs) })
	wantMessage(t, "captured copy from a Go slice", err, cgc.ErrCaptureUnsupported, "cgc_memcpy_htod_async", "pageable")
	_, err = s.Capture(nil, func(cs *cgc.Stream) error { return cgc.CopyDeviceToHost(pageable, dev.Ptr(), cs) })
	wantMessage(t, "captured copy into a Go slice", err, cgc.ErrCaptureUnsupported, "cgc_memcpy_dtoh_async", "pageable")

	st, _, err := s.CaptureStatus()
	f.ok(err)
	if st != cgc.CaptureNone {
		t.Errorf("stream left %v", st)
	}
	g, err := s.Capture(nil, func(cs *cgc.Stream) error { return cgc.Memset32(dev.Ptr(), 7, workCount, cs) })
	f.ok(err)
	f.ok(g.Launch(s))
	f.ok(cgc.CopyDeviceToHost(pageable, dev.Ptr(), s)) // eagerly a Go slice is fine
	f.ok(s.Synchronize())
	if math.Float32bits(pageable[workCount-1]) != 7 {
		t.Errorf("the graph captured after the refusals did not run: %#x", math.Float32bits(pageable[workCount-1]))
	}
	f.ok(g.Destroy())
	f.ok(dev.Free())
	f.closeAll(true)
}

func TestGPUStreamMemoryOperations(t *testing.T) {
	f := newFixture(t, 1, 0)
	s := f.streams[0]
	flags := f.deviceBuffer(32, s)
	f.ok(cgc.Memset32(flags.Ptr(), 0, 8, s))
	words := make([]uint32, 8)
	read := func() {
		t.Helper()
		f.ok(cgc.CopyDeviceToHost(words, flags.Ptr(), s))
		f.ok(s.Synchronize())
	}

	// Eager: single operations and a batch (a write, a barrier, a wait).
	f.ok(s.WriteValue32(flags.Ptr(), 5, 0))
	f.ok(s.WaitValue32(flags.Ptr(), 5, cgc.WaitEQ))
	f.ok(s.BatchMemOps([]cgc.MemOp{
		{Kind: cgc.MemOpWriteValue32, Address: flags.Ptr() + 4, Value: 7},
		{Kind: cgc.MemOpBarrier, Flags: uint32(cgc.BarrierSystem)},
		{Kind: cgc.MemOpWaitValue32, Flags: uint32(cgc.WaitGEQ), Address: flags.Ptr() + 4, Value: 7},
		{Kind: cgc.MemOpWriteValue32, Address: flags.Ptr() + 8, Value: 9},
		{Kind: cgc.MemOpBarrier, Flags: uint32(cgc.BarrierGPU)},
	}))
	read()
	if words[0] != 5 || words[1] != 7 || words[2] != 9 {
		t.Errorf("after the writes: %v, want 5 7 9 first", words)
	}
	// 64-bit operations have a capability of their own.
	if err := s.WriteValue64(flags.Ptr()+16, 1<<40|3, 0); errors.Is(err, cgc.ErrNotSupported) {
		t.Logf("no 64-bit stream memory operations here: %v", err)
	} else {
		f.ok(err)
		f.ok(s.WaitValue64(flags.Ptr()+16, 1<<40|3, cgc.WaitEQ))
		read()
		if words[4] != 3 || words[5] != 1<<8 {
			t.Errorf("after the 64-bit write: %#x %#x", words[4], words[5])
		}
	}

	// Refusals, each naming what is wrong.
	wantMessage(t, "an empty batch", s.BatchMemOps(nil), cgc.ErrInvalidArgument, "cgc_stream_batch_mem_op", "count")
	wantMessage(t, "a 32-bit value that does not fit", s.BatchMemOps([]cgc.MemOp{
		{Kind: cgc.MemOpWriteValue32, Address: flags.Ptr(), Value: 1 << 32}}), cgc.ErrInvalidArgument, "ops[0]")
	wantMessage(t, "a misaligned write", s.WriteValue32(flags.Ptr()+2, 1, 0), cgc.ErrInvalidArgument,
		"cgc_stream_write_value32", "aligned")
	wantMessage(t, "a write with flags", s.WriteValue32(flags.Ptr(), 1, 1), cgc.ErrInvalidArgument,
		"cgc_stream_write_value32", "writes take 0")
	wantMessage(t, "a barrier of no scope", s.BatchMemOps([]cgc.MemOp{{Kind: cgc.MemOpBarrier, Flags: 7}}),
		cgc.ErrInvalidArgument, "cgc_stream_batch_mem_op", "barrier's flags")

	// Captured, a batch is one memory-operation node, run at every replay.
	g, err := s.Capture(nil, func(cs *cgc.Stream) error {
		return cs.BatchMemOps([]cgc.MemOp{
			{Kind: cgc.MemOpWriteValue32, Address: flags.Ptr() + 24, Value: 11},
			{Kind: cgc.MemOpWriteValue32, Address: flags.Ptr() + 28, Value: 12},
		})
	})
	f.ok(err)
	f.ok(cgc.Memset32(flags.Ptr(), 0, 8, s))
	f.ok(g.Launch(s))
	read()
	if words[6] != 11 || words[7] != 12 {
		t.Errorf("after the captured batch: %v", words)
	}
	info, err := g.Info()
	f.ok(err)
	if info.NodeCount != 1 || info.MemOpNodes != 1 {
		t.Errorf("a captured batch: %+v, want one memory-operation node", info)
	}
	f.ok(g.Destroy())
	f.ok(flags.Free())
	f.closeAll(true)
}

// ---- 1.2: graphs that change without a new Graph ----

// affineSetup is what the update tests share: a stream, the tests' kernel, its input (quarters
// below 25, so that every result is exact in float32) and parameters (scale 2, shift 1).
type affineSetup struct {
	f      *fixture
	s      *cgc.Stream
	affine *cgc.Function
	in     []float32
	input  *cgc.DeviceMemory
	params *cgc.DeviceMemory
}

func newAffineSetup(t *testing.T) *affineSetup {
	f := newFixture(t, 1, 0)
	s := f.streams[0]
	module, err := f.ctx.LoadModule(bindingTestsPTX(t))
	f.ok(err)
	t.Cleanup(func() { _ = module.Close() })
	affine, err := module.Function("affine")
	f.ok(err)
	in := make([]float32, workCount)
	for i := range in {
		in[i] = float32(i%97) * 0.25
	}
	a := &affineSetup{f: f, s: s, affine: affine, in: in, input: f.deviceBuffer(4*workCount, s)}
	f.ok(cgc.CopyHostToDevice(a.input.Ptr(), in, s))
	a.params = a.paramsOf(2, 1)
	return a
}

// paramsOf puts affine's (scale, shift) in device memory, copied in eagerly: a copy from a Go
// slice would be refused inside a capture.
func (a *affineSetup) paramsOf(scale, shift float32) *cgc.DeviceMemory {
	p := a.f.deviceBuffer(8, a.s)
	a.f.ok(cgc.CopyHostToDevice(p.Ptr(), []float32{scale, shift}, a.s))
	return p
}

// zeroed is a buffer of workCount zero floats.
func (a *affineSetup) zeroed() *cgc.DeviceMemory {
	m := a.f.deviceBuffer(4*workCount, a.s)
	a.f.ok(cgc.Memset32(m.Ptr(), 0, workCount, a.s))
	return m
}

// args are affine's parameters for out = input * params[0] + params[1] + bias.
func (a *affineSetup) args(out, params *cgc.DeviceMemory, bias float32) []any {
	return []any{out, a.input, params, bias, uint32(workCount)}
}

func (a *affineSetup) launch(s *cgc.Stream, out, params *cgc.DeviceMemory, bias float32) error {
	grid := cgc.Dim3{X: (workCount + workBlock - 1) / workBlock, Y: 1, Z: 1}
	block := cgc.Dim3{X: workBlock, Y: 1, Z: 1}
	return a.affine.Launch(grid, block, 0, s, a.args(out, params, bias)...)
}

// expect requires out to hold input * scale + shift + bias.
func (a *affineSetup) expect(out *cgc.DeviceMemory, scale, shift, bias float32, what string) {
	a.f.t.Helper()
	got := make([]float32, workCount)
	a.f.ok(cgc.CopyDeviceToHost(got, out.Ptr(), a.s))
	a.f.ok(a.s.Synchronize())
	for i, x := range a.in {
		if want := x*scale + shift + bias; got[i] != want {
			a.f.t.Fatalf("%s: [%d] = %v, want %v", what, i, got[i], want)
		}
	}
}

// The same topology with a new pointer and a new value: the same *Graph, its executable updated
// in place; through Capture and through BeginCapture/EndCapture, during which the graph cannot
// be reset, destroyed, changed or updated by another capture.
func TestGPUCaptureUpdateInPlace(t *testing.T) {
	a := newAffineSetup(t)
	f, s := a.f, a.s
	x, y := a.zeroed(), a.zeroed()
	g, err := s.Capture(nil, func(cs *cgc.Stream) error { return a.launch(cs, x, a.params, 0.5) })
	f.ok(err)
	f.ok(g.Launch(s))
	a.expect(x, 2, 1, 0.5, "x, first capture")
	if info, err := g.Info(); err != nil || info.LastUpdate != cgc.GraphUpdateNone || info.UpdateCount != 0 {
		t.Errorf("a graph never updated: %+v, %v", info, err)
	}
	executable := g.NativeExec()
	f.ok(cgc.Memset32(x.Ptr(), 0, workCount, s))

	same, err := s.Capture(&cgc.CaptureOptions{Update: g}, func(cs *cgc.Stream) error {
		return a.launch(cs, y, a.params, 0.25)
	})
	f.ok(err)
	if same != g {
		t.Fatalf("the update handed back %p, not the Graph it updated (%p)", same, g)
	}
	info, err := g.Info()
	f.ok(err)
	if info.UpdateCount != 1 || info.LastUpdate != cgc.GraphUpdateInPlace || info.LastUpdateResult != 0 || info.KernelNodes != 1 {
		t.Errorf("after an update of the same topology: %+v, want 1 update, InPlace, result 0, 1 kernel", info)
	}
	if g.NativeExec() != executable {
		t.Error("in place, yet the executable changed")
	}
	f.ok(g.Launch(s))
	a.expect(y, 2, 1, 0.25, "y, written by the updated graph")
	a.expect(x, 0, 0, 0, "x, no longer written")

	// The same with BeginCapture/EndCapture.
	other, err := f.ctx.NewStream(cgc.StreamNonBlocking, 0)
	f.ok(err)
	defer other.Close()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	f.ok(s.BeginCapture(&cgc.CaptureOptions{Update: g}))
	f.ok(a.launch(s, x, a.params, 0.5))
	wantMessage(t, "Destroy during the update", g.Destroy(), cgc.ErrInvalidState, "cgc_graph_destroy", "being updated")
	wantMessage(t, "Reset during the update", g.Reset(), cgc.ErrInvalidState, "cgc_graph_reset", "being updated")
	wantMessage(t, "SetKernelEnabled during the update", g.SetKernelEnabled(0, false), cgc.ErrInvalidState,
		"cgc_graph_kernel_node_set_enabled")
	wantMessage(t, "a second update of the graph", other.BeginCapture(&cgc.CaptureOptions{Update: g}), cgc.ErrInvalidState,
		"cgc_capture_begin", "already being updated")
	ended, err := s.EndCapture()
	f.ok(err)
	if ended != g {
		t.Fatalf("EndCapture of the update handed back %p, not the Graph it updated (%p)", ended, g)
	}
	if info, err := g.Info(); err != nil || info.UpdateCount != 2 || info.LastUpdate != cgc.GraphUpdateInPlace {
		t.Errorf("after the second update: %+v, %v", info, err)
	}
	f.ok(g.Launch(s))
	a.expect(x, 2, 1, 0.5, "x, written again")
	f.ok(g.Destroy())
}

// One kernel more: a new executable, the driver's reason in LastUpdateResult. A body that fails
// leaves the graph reset, and a reset graph has nothing to update.
func TestGPUCaptureUpdateReinstantiated(t *testing.T) {
	a := newAffineSetup(t)
	f, s := a.f, a.s
	x, y := a.zeroed(), a.zeroed()
	otherParams := a.paramsOf(3, -1)
	g, err := s.Capture(nil, func(cs *cgc.Stream) error { return a.launch(cs, x, a.params, 0) })
	f.ok(err)
	_, err = s.Capture(&cgc.CaptureOptions{Update: g}, func(cs *cgc.Stream) error {
		if err := a.launch(cs, x, otherParams, 0); err != nil {
			return err
		}
		return a.launch(cs, y, a.params, 0) // one kernel more
	})
	f.ok(err)
	info, err := g.Info()
	f.ok(err)
	// 2: CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED
	if info.UpdateCount != 1 || info.LastUpdate != cgc.GraphUpdateReinstantiated || info.LastUpdateResult != 2 || info.KernelNodes != 2 {
		t.Errorf("after an update with one kernel more: %+v, want 1 update, Reinstantiated, result 2, 2 kernels", info)
	}
	f.ok(g.Launch(s))
	a.expect(x, 3, -1, 0, "x")
	a.expect(y, 2, 1, 0, "y")

	gaveUp := errors.New("the body gives up")
	got, err := s.Capture(&cgc.CaptureOptions{Update: g}, func(cs *cgc.Stream) error {
		_ = a.launch(cs, x, a.params, 0)
		return gaveUp
	})
	if got != nil || err != gaveUp {
		t.Fatalf("an update whose body fails: %v, %v; want nil and the body's error", got, err)
	}
	if st, _, err := s.CaptureStatus(); err != nil || st != cgc.CaptureNone {
		t.Errorf("stream left %v, %v", st, err)
	}
	wantMessage(t, "Launch of the graph its failed update reset", g.Launch(s), cgc.ErrInvalidState, "cgc_graph_launch")
	_, err = s.Capture(&cgc.CaptureOptions{Update: g}, func(*cgc.Stream) error { return nil })
	wantMessage(t, "an update of a reset graph", err, cgc.ErrInvalidState, "cgc_capture_begin", "reset")
	f.ok(g.Destroy())
}

// Per-node updates: a kernel disabled and enabled again, another given new arguments.
func TestGPUKernelNodesDisabledAndGivenNewArguments(t *testing.T) {
	a := newAffineSetup(t)
	f, s := a.f, a.s
	x, y, z, w := a.zeroed(), a.zeroed(), a.zeroed(), a.zeroed()
	otherParams := a.paramsOf(3, -1)
	g, err := s.Capture(nil, func(cs *cgc.Stream) error {
		for _, out := range []*cgc.DeviceMemory{x, y, z} {
			if err := a.launch(cs, out, a.params, 0); err != nil {
				return err
			}
		}
		return nil
	})
	f.ok(err)
	if info, err := g.Info(); err != nil || info.KernelNodes != 3 {
		t.Fatalf("three kernels captured: %+v, %v", info, err)
	}
	f.ok(g.SetKernelEnabled(1, false))                       // y's kernel
	f.ok(g.SetKernelArgs(2, a.args(w, otherParams, 0.5)...)) // z's kernel writes w now
	f.ok(g.Launch(s))
	a.expect(x, 2, 1, 0, "x")
	a.expect(y, 0, 0, 0, "y (disabled)")
	a.expect(z, 0, 0, 0, "z (its kernel writes w now)")
	a.expect(w, 3, -1, 0.5, "w (new arguments)")
	f.ok(g.SetKernelEnabled(1, true))
	f.ok(g.Launch(s))
	a.expect(y, 2, 1, 0, "y (enabled again)")

	wantMessage(t, "kernel 3 of 3", g.SetKernelEnabled(3, false), cgc.ErrInvalidArgument,
		"cgc_graph_kernel_node_set_enabled", "3 kernel nodes")
	wantMessage(t, "new arguments for kernel 3 of 3", g.SetKernelArgs(3, a.args(w, a.params, 0)...), cgc.ErrInvalidArgument,
		"cgc_graph_kernel_node_set_args", "3 kernel nodes")
	f.ok(g.Reset())
	wantMessage(t, "after Reset", g.SetKernelEnabled(0, false), cgc.ErrInvalidState, "cgc_graph_kernel_node_set_enabled")
	f.ok(g.Destroy())
}
