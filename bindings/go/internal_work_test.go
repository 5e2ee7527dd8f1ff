package cgc

// White-box tests of the 1.1 wrappers that need no GPU: closed modules are never passed on,
// host-function handles are deleted however the launch ends, a panicking release does not
// escape, and kernel arguments land in their slots with their C sizes.

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"unsafe"
)

func TestClosedModuleAndItsFunctionsAreRefused(t *testing.T) {
	if err := Load(); err != nil {
		t.Fatal(err)
	}
	m := &Module{closed: true}
	f := &Function{module: m, name: "scale"}
	one := Dim3{1, 1, 1}
	calls := map[string]error{
		"Function.SetAttribute": f.SetAttribute(FuncPreferredSharedMemoryCarveout, 50),
		"Function.Launch":       f.Launch(one, one, 0, nil),
	}
	_, calls["Module.Function"] = m.Function("scale")
	_, calls["Function.Attribute"] = f.Attribute(FuncNumRegs)
	for name, err := range calls {
		var ce *Error
		if !errors.As(err, &ce) || ce.Status != ErrInvalidHandle || !strings.Contains(ce.Message, "closed") {
			t.Errorf("%s with a closed module: %v, want ErrInvalidHandle naming the closed module", name, err)
		}
	}
	if err := m.Close(); err != nil {
		t.Errorf("Module.Close again: %v", err)
	}
}

// syncBuffer is a bytes.Buffer that the driver's thread may write while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// captureHostPanicReports sends the reports of recovered host-function panics to a buffer for
// the rest of the test.
func captureHostPanicReports(t *testing.T) *syncBuffer {
	reports := &syncBuffer{}
	saved := hostPanicReports
	hostPanicReports = reports
	t.Cleanup(func() { hostPanicReports = saved })
	return reports
}

func TestHostFunctionHandlesAreDeletedWhenTheLaunchFails(t *testing.T) {
	if err := Load(); err != nil {
		t.Fatal(err)
	}
	reports := captureHostPanicReports(t)
	before := hostFunctionsPending.Load()
	// The library refuses the nil stream and calls the release trampoline, whose release panics:
	// recovered and reported, and the handle is deleted all the same.
	err := (*Stream)(nil).LaunchHostFunc(func() {}, func() { panic("release gave up") })
	var ce *Error
	if !errors.As(err, &ce) || ce.Status != ErrInvalidArgument {
		t.Fatalf("LaunchHostFunc on a nil stream: %v", err)
	}
	if got := hostFunctionsPending.Load(); got != before {
		t.Errorf("%d host-function handles pending after a failed launch, want %d", got, before)
	}
	if r := reports.String(); !strings.Contains(r, "release gave up") || !strings.Contains(r, "recovered") {
		t.Errorf("the release's panic was not reported: %q", r)
	}
	// A closed stream is refused by the binding before any handle exists.
	err = (&Stream{closed: true}).LaunchHostFunc(func() {}, nil)
	if !errors.As(err, &ce) || ce.Status != ErrInvalidHandle || hostFunctionsPending.Load() != before {
		t.Errorf("LaunchHostFunc on a closed stream: %v, %d handles pending", err, hostFunctionsPending.Load())
	}
}

// The library needs the driver to tell page-locked memory from other memory, so here it
// answers ErrNoDriver (ErrInvalidArgument on a machine with a driver); either way the call is
// named and the object keeps its pointer.
func TestHostFreeOfForeignPointerChangesNothing(t *testing.T) {
	if err := Load(); err != nil {
		t.Fatal(err)
	}
	var foreign [16]byte
	b := &HostBuffer{ptr: unsafe.Pointer(&foreign[0]), size: len(foreign)}
	r := &HostRegistration{ptr: unsafe.Pointer(&foreign[0]), size: len(foreign)}
	for name, c := range map[string]struct {
		err error
		fn  string
	}{
		"HostBuffer.Free":             {b.Free(), "cgc_host_free"},
		"HostRegistration.Unregister": {r.Unregister(), "cgc_host_unregister"},
	} {
		var ce *Error
		if !errors.As(c.err, &ce) || (ce.Status != ErrInvalidArgument && ce.Status != ErrNoDriver) ||
			!strings.Contains(ce.Message, c.fn) {
			t.Errorf("%s of a pointer cgc did not page-lock: %v", name, c.err)
		}
	}
	if b.Ptr() == nil || len(b.Bytes()) != len(foreign) || r.unregistered {
		t.Error("a failed Free or Unregister marked the object done")
	}
}

func TestKernelArgumentsLandWithTheirCSizes(t *testing.T) {
	type myIndex uint16
	block := &DeviceMemory{ptr: 0xd000, size: 64}
	cases := []struct {
		arg  any
		want []byte // the slot's 8 bytes, little-endian
	}{
		{int8(-2), []byte{0xfe, 0, 0, 0, 0, 0, 0, 0}},
		{uint8(0xab), []byte{0xab, 0, 0, 0, 0, 0, 0, 0}},
		{int16(-2), []byte{0xfe, 0xff, 0, 0, 0, 0, 0, 0}},
		{myIndex(0x1234), []byte{0x34, 0x12, 0, 0, 0, 0, 0, 0}},
		{int32(-2), []byte{0xfe, 0xff, 0xff, 0xff, 0, 0, 0, 0}},
		{uint32(0x01020304), []byte{4, 3, 2, 1, 0, 0, 0, 0}},
		{int64(-2), []byte{0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
		{uint64(1) << 40, []byte{0, 0, 0, 0, 0, 1, 0, 0}},
		{float32(1.5), []byte{0, 0, 0xc0, 0x3f, 0, 0, 0, 0}},
		{math.Pi, []byte{0x18, 0x2d, 0x44, 0x54, 0xfb, 0x21, 0x09, 0x40}},
		{true, []byte{1, 0, 0, 0, 0, 0, 0, 0}},
		{DevicePtr(0x7f0000001000), []byte{0, 0x10, 0, 0, 0, 0x7f, 0, 0}},
		{block, []byte{0, 0xd0, 0, 0, 0, 0, 0, 0}},
	}
	for _, c := range cases {
		var slot [8]byte
		if err := putKernelArg(unsafe.Pointer(&slot[0]), c.arg); err != nil {
			t.Errorf("%T(%v): %v", c.arg, c.arg, err)
			continue
		}
		if !bytes.Equal(slot[:], c.want) {
			t.Errorf("%T(%v): slot % x, want % x", c.arg, c.arg, slot, c.want)
		}
	}
}

// A panic in a host function cannot unwind through the driver's thread: it is recovered and
// reported, the release still runs, and the stream goes on. (Here rather than beside the other
// GPU tests because the report goes to the package's hostPanicReports.)
func TestGPUHostFunctionPanicIsRecovered(t *testing.T) {
	if n, err := DeviceCount(); err != nil || n == 0 {
		t.Skipf("SKIP (no GPU): cgc_device_count gave %d devices, %v", n, err)
	}
	ctx, err := NewContext(0)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	s, err := ctx.NewStream(StreamNonBlocking, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	reports := captureHostPanicReports(t)
	before := hostFunctionsPending.Load()
	ran, released := make(chan string, 2), make(chan string, 2)
	if err := s.LaunchHostFunc(func() { ran <- "first"; panic("host function gave up") }, func() { released <- "first" }); err != nil {
		t.Fatal(err)
	}
	if err := s.LaunchHostFunc(func() { ran <- "second" }, func() { released <- "second" }); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatalf("the stream after a panicking host function: %v", err)
	}
	if len(ran) != 2 || len(released) != 2 {
		t.Errorf("%d host functions ran and %d were released, want 2 and 2", len(ran), len(released))
	}
	if got := hostFunctionsPending.Load(); got != before {
		t.Errorf("%d host-function handles pending, want %d", got, before)
	}
	if r := reports.String(); !strings.Contains(r, "host function gave up") {
		t.Errorf("the panic was not reported: %q", r)
	}
}

// 1.2: a closed graph is refused by the per-node updates and as the graph a capture updates,
// before anything reaches C; a refused update leaves the stream remembering no graph.
func TestClosedGraphIsRefusedByTheUpdateCalls(t *testing.T) {
	if err := Load(); err != nil {
		t.Fatal(err)
	}
	g := &Graph{closed: true}
	s := &Stream{}
	calls := map[string]error{
		"Graph.SetKernelEnabled": g.SetKernelEnabled(0, true),
		"Graph.SetKernelArgs":    g.SetKernelArgs(0, uint32(1)),
		"Stream.BeginCapture":    s.BeginCapture(&CaptureOptions{Update: g}),
	}
	for name, err := range calls {
		var ce *Error
		if !errors.As(err, &ce) || ce.Status != ErrInvalidHandle || !strings.Contains(ce.Message, "closed") ||
			!strings.Contains(ce.Message, name) {
			t.Errorf("%s with a closed graph: %v, want ErrInvalidHandle naming the call and the closed graph", name, err)
		}
	}
	if s.updating != nil {
		t.Error("a refused update left the stream remembering its graph")
	}
	// Ending with no capture (the library refuses the NULL stream) hands back no graph.
	if g, err := s.EndCapture(); err == nil || g != nil {
		t.Errorf("EndCapture on a NULL stream: %v, %v", g, err)
	}
}

// foreignStream is a Stream whose handle is memory that is no cgc object (its first word is no
// cgc magic), as a stale or foreign handle looks to the library, which reads that word first.
func foreignStream(memory *[32]uint64, lent bool) *Stream {
	for i := range memory {
		memory[i] = 0x5a5a5a5a5a5a5a5a
	}
	s := &Stream{borrowed: true, lent: lent}
	*(*unsafe.Pointer)(unsafe.Pointer(&s.h)) = unsafe.Pointer(&memory[0])
	return s
}

// The conditional functions refuse a foreign stream by name (the handle is checked before the
// kind), and the lent body stream cannot be closed by the caller.
func TestConditionalForeignStreamsAndLentBodies(t *testing.T) {
	if err := Load(); err != nil {
		t.Fatal(err)
	}
	var memory [32]uint64
	s := foreignStream(&memory, false)
	for _, kind := range []ConditionalKind{ConditionalWhile, ConditionalKind(7)} {
		err := s.Conditional(kind, DevicePtr(0x10000), func(*Stream) error {
			t.Error("the body ran although no node was added")
			return nil
		})
		var ce *Error
		if !errors.As(err, &ce) || ce.Status != ErrInvalidHandle || !strings.Contains(ce.Message, "cgc_capture_conditional_begin") ||
			!strings.Contains(ce.Message, "not a live cgc stream handle") {
			t.Errorf("Conditional(%v) on a foreign stream: %v", kind, err)
		}
	}
	lent := foreignStream(&memory, true)
	err := lent.Close()
	var ce *Error
	if !errors.As(err, &ce) || ce.Status != ErrInvalidState || !strings.Contains(ce.Message, "conditional") {
		t.Errorf("Close of a lent body: %v, want ErrInvalidState", err)
	}
	if lent.closed || lent.h == nil {
		t.Error("a refused Close closed the lent body")
	}
	// What Conditional does once its body function returns: the end is the library's, which
	// refuses the foreign handle by name here, and the lent Stream is closed whatever it says.
	err = lent.endBody()
	if !errors.As(err, &ce) || ce.Status != ErrInvalidHandle || !strings.Contains(ce.Message, "cgc_capture_conditional_end") {
		t.Errorf("the end of a foreign body: %v", err)
	}
	if !lent.closed || lent.h != nil {
		t.Error("the lent Stream is still open after its end")
	}
	if err := lent.Close(); err != nil {
		t.Errorf("Close after the end: %v", err)
	}
	if err := lent.endBody(); err != nil {
		t.Errorf("a second end: %v", err)
	}
}

// 1.3: ConditionalBodies refuses a foreign stream by name (the handle is checked before the kind,
// the count and the flags), and what it does once its body function returns, endBodies, ends
// every lent body, the last first, even when each end fails, returning the first failure.
func TestConditionalBodiesForeignStreamsAndTheirEnds(t *testing.T) {
	if err := Load(); err != nil {
		t.Fatal(err)
	}
	var memory [32]uint64
	s := foreignStream(&memory, false)
	for _, kind := range []ConditionalKind{ConditionalSwitch, ConditionalKind(7)} {
		err := s.ConditionalBodies(kind, DevicePtr(0x10000), 0, 3, func([]*Stream, ConditionalHandle) error {
			t.Error("the body function ran although no node was added")
			return nil
		})
		var ce *Error
		if !errors.As(err, &ce) || ce.Status != ErrInvalidHandle ||
			!strings.Contains(ce.Message, "cgc_capture_conditional_begin_bodies") ||
			!strings.Contains(ce.Message, "not a live cgc stream handle") {
			t.Errorf("ConditionalBodies(%v) on a foreign stream: %v", kind, err)
		}
	}
	var memories [3][32]uint64
	bodies := make([]*Stream, len(memories))
	for i := range memories {
		bodies[i] = foreignStream(&memories[i], true)
	}
	err := endBodies(bodies)
	var ce *Error
	// The library names the handle it refused: the first failure is the last body's.
	last := fmt.Sprintf("%p", unsafe.Pointer(&memories[2][0]))
	if !errors.As(err, &ce) || ce.Status != ErrInvalidHandle || !strings.Contains(ce.Message, "cgc_capture_conditional_end") ||
		!strings.Contains(ce.Message, last) {
		t.Errorf("the ends of three foreign bodies: %v, want the last one's (%s) refusal", err, last)
	}
	for i, b := range bodies {
		if !b.closed || b.h != nil {
			t.Errorf("body %d is still open after the ends", i)
		}
	}
	if err := endBodies(bodies); err != nil {
		t.Errorf("ending them again: %v", err)
	}
	if err := endBodies(nil); err != nil {
		t.Errorf("no bodies: %v", err)
	}
}
