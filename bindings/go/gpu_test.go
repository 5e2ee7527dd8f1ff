package cgc_test

// GPU tests. They skip, saying why, when cgc_device_count fails or finds no device; on a GPU
// machine they run for real. Host-side checks use the driver through internal/cudatest.

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"

	cgc "cgc/bindings/go"
	"cgc/bindings/go/internal/cudatest"
)

const n = 1 << 16 // floats per buffer
const nbytes = 4 * n

// gpuContext skips the test without a usable GPU, else returns a context of device 0 (closed
// at cleanup if the test has not closed it itself).
func gpuContext(t *testing.T) *cgc.Context {
	t.Helper()
	count, err := cgc.DeviceCount()
	if err != nil {
		t.Skipf("SKIP (no GPU): cgc_device_count failed: %v", err)
	}
	if count == 0 {
		t.Skip("SKIP (no GPU): cgc_device_count found 0 devices")
	}
	if err := cudatest.Open(); err != nil {
		t.Fatalf("a GPU is present but the test's driver helper failed: %v", err)
	}
	ctx, err := cgc.NewContext(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctx.Close() })
	return ctx
}

// fixture holds what every capture test needs; close reports each failing cleanup call.
type fixture struct {
	t       *testing.T
	ctx     *cgc.Context
	streams []*cgc.Stream
	events  []*cgc.Event
	gen     *cgc.Rng
}

func newFixture(t *testing.T, streams, events int) *fixture {
	f := &fixture{t: t, ctx: gpuContext(t)}
	for i := 0; i < streams; i++ {
		s, err := f.ctx.NewStream(cgc.StreamNonBlocking, 0)
		f.ok(err)
		f.streams = append(f.streams, s)
	}
	for i := 0; i < events; i++ {
		e, err := f.ctx.NewEvent(0)
		f.ok(err)
		f.events = append(f.events, e)
	}
	var err error
	f.gen, err = f.ctx.NewRng(1234)
	f.ok(err)
	// Idempotent Close makes this a no-op after a successful close(); it matters on failure.
	t.Cleanup(func() { f.closeAll(false) })
	return f
}

func (f *fixture) ok(err error) {
	f.t.Helper()
	if err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) malloc(s *cgc.Stream) *cgc.DeviceMemory {
	f.t.Helper()
	m, err := f.ctx.Malloc(nbytes, s)
	f.ok(err)
	return m
}

// closeAll destroys the fixture's objects in dependency order (events, streams, generator,
// context), checking each call when check is set.
func (f *fixture) closeAll(check bool) {
	report := func(what string, err error) {
		if check && err != nil {
			f.t.Errorf("%s: %v", what, err)
		}
	}
	for _, e := range f.events {
		report("Event.Close", e.Close())
	}
	for _, s := range f.streams {
		report("Stream.Close", s.Close())
	}
	report("Rng.Close", f.gen.Close())
	report("Context.Close", f.ctx.Close())
}

// host copies the block's floats to the host.
func (f *fixture) host(m *cgc.DeviceMemory) []float32 {
	f.t.Helper()
	h := make([]float32, m.Size()/4)
	f.ok(cudatest.CopyToHost(h, uintptr(m.Ptr())))
	return h
}

func TestGPUForkJoinSharedPool(t *testing.T) {
	f := newFixture(t, 3, 3)
	origin, side1, side2 := f.streams[0], f.streams[1], f.streams[2]
	fork, join1, join2 := f.events[0], f.events[1], f.events[2]
	gen := f.gen
	var a, b, c, d *cgc.DeviceMemory

	g1, err := origin.Capture(&cgc.CaptureOptions{Mode: cgc.CaptureModeGlobal}, func(s *cgc.Stream) error {
		a = f.malloc(s)
		f.ok(gen.Uniform(a.Ptr(), n, s))
		f.ok(fork.Record(s))
		f.ok(side1.WaitEvent(fork))
		f.ok(side2.WaitEvent(fork))
		b = f.malloc(side1)
		f.ok(cudatest.CopyDeviceAsync(uintptr(b.Ptr()), uintptr(a.Ptr()), nbytes, side1.Native()))
		c = f.malloc(side2)
		f.ok(gen.Normal(c.Ptr(), n, 0, 1, side2))
		f.ok(join1.Record(side1))
		f.ok(join2.Record(side2))
		f.ok(s.WaitEvent(join1))
		return s.WaitEvent(join2)
	})
	f.ok(err)
	t.Cleanup(func() { _ = g1.Destroy() })
	pool1, err := g1.Pool()
	f.ok(err)
	t.Cleanup(func() { _ = pool1.Close() })

	g2, err := origin.Capture(&cgc.CaptureOptions{Pool: pool1}, func(s *cgc.Stream) error {
		d = f.malloc(s)
		return cudatest.CopyDeviceAsync(uintptr(d.Ptr()), uintptr(b.Ptr()), nbytes, s.Native())
	})
	f.ok(err)
	t.Cleanup(func() { _ = g2.Destroy() })
	pool2, err := g2.Pool()
	f.ok(err)
	t.Cleanup(func() { _ = pool2.Close() })
	if !pool1.Equal(pool2) {
		t.Error("the second graph does not use the first one's pool")
	}

	var prev []float32
	for replay := 1; replay <= 3; replay++ {
		f.ok(g1.Launch(origin))
		f.ok(g2.Launch(origin))
		f.ok(origin.Synchronize())
		ha, hb, hc, hd := f.host(a), f.host(b), f.host(c), f.host(d)
		for i := range ha {
			if math.Float32bits(hb[i]) != math.Float32bits(ha[i]) || math.Float32bits(hd[i]) != math.Float32bits(ha[i]) {
				t.Fatalf("replay %d: b[%d]=%v d[%d]=%v, want a[%d]=%v", replay, i, hb[i], i, hd[i], i, ha[i])
			}
			if !(ha[i] >= 0 && ha[i] < 1) {
				t.Fatalf("replay %d: a[%d]=%v not in [0,1)", replay, i, ha[i])
			}
		}
		if prev != nil && equalBits(prev, ha) {
			t.Errorf("replay %d drew the same uniform numbers as the previous one", replay)
		}
		prev = ha
		mean, std := meanStd(hc)
		if math.Abs(mean) >= 0.05 || math.Abs(std-1) >= 0.05 {
			t.Errorf("replay %d: normal numbers have mean %v, std %v", replay, mean, std)
		}
	}
	info1, err := g1.Info()
	f.ok(err)
	info2, err := g2.Info()
	f.ok(err)
	// g1 holds three work nodes (uniform draw, copy, normal draw): cgc_malloc serves capture
	// allocations from the pool without graph nodes, and events only add edges.
	if info1.NodeCount < 3 || info2.NodeCount < 1 || info1.ReplayCount != 3 || info2.ReplayCount != 3 {
		t.Errorf("graph info %+v / %+v: want >= 3 nodes in g1, >= 1 in g2 and 3 replays each", info1, info2)
	}
	stats, err := f.ctx.MemoryStats(pool1)
	f.ok(err)
	if stats.BytesReserved == 0 {
		t.Errorf("shared pool stats %+v: nothing reserved", stats)
	}
	t.Logf("g1 %+v, g2 %+v, pool %+v", info1, info2, stats)

	// Clean up everything, checking each call: a..d are the graphs' outputs.
	for _, m := range []*cgc.DeviceMemory{a, b, c, d} {
		f.ok(m.Free())
	}
	f.ok(g1.Destroy())
	f.ok(g2.Destroy())
	f.ok(pool1.Close())
	f.ok(pool2.Close())
	f.closeAll(true)
}

func TestGPUUnjoinedSideStream(t *testing.T) {
	f := newFixture(t, 2, 1)
	origin, side1, fork := f.streams[0], f.streams[1], f.events[0]
	lost, again := f.malloc(side1), f.malloc(origin) // eager, before any capture
	f.ok(origin.Synchronize())
	f.ok(side1.Synchronize())

	runtime.LockOSThread() // BeginCapture/EndCapture in Global mode: one OS thread
	defer runtime.UnlockOSThread()
	f.ok(origin.BeginCapture(nil))
	f.ok(fork.Record(origin))
	f.ok(side1.WaitEvent(fork))
	f.ok(f.gen.Uniform(lost.Ptr(), n, side1)) // work on side1, never joined back
	g, err := origin.EndCapture()
	if g != nil {
		t.Error("EndCapture returned a graph with an unjoined side stream")
	}
	e := asError(t, err, cgc.ErrCaptureUnjoined)
	side := fmt.Sprintf("%#x", side1.Native()) // the library prints streams with %p
	if !strings.Contains(e.Message, "cgc_capture_end") || !strings.Contains(e.Message, side) {
		t.Errorf("message %q does not name cgc_capture_end and side stream %s", e.Message, side)
	}
	for _, s := range []*cgc.Stream{origin, side1} {
		st, id, err := s.CaptureStatus()
		f.ok(err)
		if st != cgc.CaptureNone || id != 0 {
			t.Errorf("stream still capturing after the failed end: %v (id %d)", st, id)
		}
	}
	// The origin can capture again.
	g, err = origin.Capture(nil, func(s *cgc.Stream) error { return f.gen.Uniform(again.Ptr(), n, s) })
	f.ok(err)
	f.ok(g.Launch(origin))
	f.ok(origin.Synchronize())
	f.ok(g.Destroy())
	f.ok(lost.Free())
	f.ok(again.Free())
	f.closeAll(true)
}

// captureThatFails runs a Capture whose body draws and then calls fail (which returns an error
// or panics), checks that the capture was ended and the stream can capture again, and returns
// the value of a panic that came out of Capture and Capture's error.
func captureThatFails(t *testing.T, fail func() error) (recovered interface{}, err error) {
	f := newFixture(t, 1, 0)
	origin := f.streams[0]
	buf := f.malloc(origin)
	f.ok(origin.Synchronize())
	called := false
	var g *cgc.Graph
	func() {
		defer func() { recovered = recover() }()
		g, err = origin.Capture(nil, func(s *cgc.Stream) error {
			called = true
			f.ok(f.gen.Uniform(buf.Ptr(), n, s)) // a real node, so the capture is not empty
			return fail()
		})
	}()
	if !called || g != nil || (err == nil && recovered == nil) {
		t.Fatalf("Capture: body called %v, graph %v, error %v, panic %v", called, g, err, recovered)
	}
	st, _, serr := origin.CaptureStatus()
	f.ok(serr)
	if st != cgc.CaptureNone {
		t.Errorf("stream left %v after a failed capture body", st)
	}
	g, cerr := origin.Capture(nil, func(s *cgc.Stream) error { return f.gen.Uniform(buf.Ptr(), n, s) })
	f.ok(cerr)
	f.ok(g.Launch(origin))
	f.ok(origin.Synchronize())
	f.ok(g.Destroy())
	f.ok(buf.Free())
	f.closeAll(true)
	return recovered, err
}

var errBody = errors.New("the capture body gave up")

func TestGPUCaptureBodyError(t *testing.T) {
	recovered, err := captureThatFails(t, func() error { return errBody })
	if !errors.Is(err, errBody) || recovered != nil {
		t.Errorf("Capture returned %v (panic %v), want the body's error", err, recovered)
	}
}

func TestGPUCaptureBodyPanic(t *testing.T) {
	// Capture ends the capture and lets the panic go on up the stack.
	recovered, err := captureThatFails(t, func() error { panic("boom") })
	if recovered != "boom" || err != nil {
		t.Errorf("panic %v, error %v; want the body's panic to come out of Capture", recovered, err)
	}
}

func TestGPUWrapStreamAndCaptureMode(t *testing.T) {
	f := newFixture(t, 1, 0)
	owned := f.streams[0]
	w, err := f.ctx.WrapStream(owned.Native())
	f.ok(err)
	if !w.Borrowed() || owned.Borrowed() || w.Native() != owned.Native() {
		t.Errorf("wrapped stream: borrowed %v, native %#x, want %#x", w.Borrowed(), w.Native(), owned.Native())
	}
	f.ok(w.Close()) // frees the handle only
	f.ok(owned.Synchronize())

	runtime.LockOSThread() // the mode belongs to the OS thread
	defer runtime.UnlockOSThread()
	prev, err := cgc.ExchangeCaptureMode(cgc.CaptureModeRelaxed)
	f.ok(err)
	got, err := cgc.ExchangeCaptureMode(prev)
	f.ok(err)
	if prev != cgc.CaptureModeGlobal || got != cgc.CaptureModeRelaxed {
		t.Errorf("exchange gave %v then %v, want Global then Relaxed", prev, got)
	}
	var inside cgc.CaptureMode
	f.ok(cgc.WithCaptureMode(cgc.CaptureModeThreadLocal, func() error {
		m, err := cgc.ExchangeCaptureMode(cgc.CaptureModeThreadLocal) // read without changing
		inside = m
		return err
	}))
	after, err := cgc.ExchangeCaptureMode(cgc.CaptureModeGlobal)
	f.ok(err)
	if inside != cgc.CaptureModeThreadLocal || after != cgc.CaptureModeGlobal {
		t.Errorf("WithCaptureMode: mode inside %v, after %v", inside, after)
	}
	f.closeAll(true)
}

// ncclVersion skips the test, with the library's message, when NCCL is unavailable, else
// returns NCCL's version code.
func ncclVersion(t *testing.T) int {
	t.Helper()
	v, err := cgc.NCCLVersion()
	var e *cgc.Error
	if errors.As(err, &e) && e.Status == cgc.ErrNCCLUnavailable {
		t.Skipf("SKIP (no NCCL): %s", e.Message)
	}
	if err != nil {
		t.Fatalf("NCCLVersion: %v", err)
	}
	return v
}

// TestGPUNCCLOneRank runs the NCCL wrappers on one GPU with a 1-rank communicator, where every
// collective here copies send into recv: eagerly, and captured into a graph that is replayed
// with new inputs.
func TestGPUNCCLOneRank(t *testing.T) {
	const count = 4096 // floats per buffer
	f := newFixture(t, 1, 0)
	version := ncclVersion(t)
	// cgc counts NCCL older than 2.9.6 (code 20906, the 2.9+ format major*10000 + minor*100 +
	// patch) as missing.
	if version < 20906 {
		t.Fatalf("NCCL version code %d, want >= 20906", version)
	}
	t.Logf("NCCL %d.%d.%d", version/10000, version%10000/100, version%100)
	s, gen := f.streams[0], f.gen

	id, err := cgc.NewCommID()
	f.ok(err)
	cm, err := f.ctx.NewComm(1, id, 0)
	f.ok(err)
	t.Cleanup(func() { _ = cm.Close() }) // runs after the graph's cleanup, before the fixture's
	send, err := f.ctx.Malloc(4*count, s)
	f.ok(err)
	recv, err := f.ctx.Malloc(4*count, s)
	f.ok(err)
	// Other numbers in recv first, so that a collective that did nothing would be seen.
	f.ok(gen.Uniform(recv.Ptr(), count, s))

	// fresh draws new numbers into send (eagerly) and checks that recv does not hold them yet;
	// copied checks that it does.
	fresh := func(what string) {
		t.Helper()
		f.ok(gen.Uniform(send.Ptr(), count, s))
		f.ok(s.Synchronize())
		hs := f.host(send)
		for i, x := range hs {
			if !(x >= 0 && x < 1) {
				t.Fatalf("%s: send[%d]=%v not in [0,1)", what, i, x)
			}
		}
		if equalBits(f.host(recv), hs) {
			t.Fatalf("%s: recv already equals the new send", what)
		}
	}
	copied := func(what string) {
		t.Helper()
		f.ok(s.Synchronize())
		hs, hr := f.host(send), f.host(recv)
		for i := range hs {
			if math.Float32bits(hr[i]) != math.Float32bits(hs[i]) {
				t.Fatalf("%s: recv[%d]=%v, want send[%d]=%v", what, i, hr[i], i, hs[i])
			}
		}
	}

	// 1. eager all-reduce (sum over one rank).
	fresh("eager AllReduce")
	f.ok(cm.AllReduce(send.Ptr(), recv.Ptr(), count, cgc.Float32, cgc.Sum, s))
	copied("eager AllReduce")

	// 2. captured all-reduce, replayed with new inputs drawn eagerly before each replay.
	g, err := s.Capture(&cgc.CaptureOptions{Mode: cgc.CaptureModeGlobal}, func(cs *cgc.Stream) error {
		return cm.AllReduce(send.Ptr(), recv.Ptr(), count, cgc.Float32, cgc.Sum, cs)
	})
	f.ok(err)
	t.Cleanup(func() { _ = g.Destroy() })
	for replay := 1; replay <= 3; replay++ {
		what := fmt.Sprintf("replay %d", replay)
		fresh(what)
		f.ok(g.Launch(s))
		copied(what)
	}
	info, err := g.Info()
	f.ok(err)
	if info.NodeCount < 1 || info.ReplayCount != 3 {
		t.Errorf("graph info %+v: want >= 1 node and 3 replays", info)
	}

	// 3. eager all-gather (one rank: recv = send) and broadcast from root 0.
	fresh("AllGather")
	f.ok(cm.AllGather(send.Ptr(), recv.Ptr(), count, cgc.Float32, s))
	copied("AllGather")
	fresh("Broadcast")
	f.ok(cm.Broadcast(send.Ptr(), recv.Ptr(), count, cgc.Float32, 0, s))
	copied("Broadcast")

	// 4. the graph holds the communicator: closing it first is refused and leaves it intact;
	// after the graph it succeeds.
	e := asError(t, cm.Close(), cgc.ErrInvalidState)
	if !strings.Contains(e.Message, "cgc_comm_destroy") {
		t.Errorf("message %q does not name cgc_comm_destroy", e.Message)
	}
	f.ok(g.Destroy())
	f.ok(cm.Close())

	f.ok(send.Free())
	f.ok(recv.Free())
	f.closeAll(true)
}

func equalBits(x, y []float32) bool {
	for i := range x {
		if math.Float32bits(x[i]) != math.Float32bits(y[i]) {
			return false
		}
	}
	return true
}

func meanStd(x []float32) (mean, std float64) {
	for _, v := range x {
		mean += float64(v)
	}
	mean /= float64(len(x))
	for _, v := range x {
		std += (float64(v) - mean) * (float64(v) - mean)
	}
	return mean, math.Sqrt(std / float64(len(x)))
}
