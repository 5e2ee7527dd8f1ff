package cgc_test

// GPU tests of 1.2's conditional nodes: a WHILE loop that counts on the device to a bound given
// per replay through page-locked memory, an IF that skips its body, and what a body refuses
// (1.3's ConditionalBodies: gpu_conditional_bodies_test.go).
// They skip without a GPU (gpuContext), and with a driver older than CUDA 12.4
// (conditionalsSupported).

import (
	"errors"
	"testing"

	cgc "cgc/bindings/go"
)

// conditionalSetup is what the conditional tests share: a stream, the kernels (cond_init,
// cond_step and cond_count of tests/kernels/binding_tests.ptx, bindingTestsPTX), and one word of
// device memory per role, zeroed.
type conditionalSetup struct {
	f                  *fixture
	s                  *cgc.Stream
	init, step, count  *cgc.Function
	counter, n, more   *cgc.DeviceMemory
	hits, after, never *cgc.DeviceMemory
}

func newConditionalSetup(t *testing.T) *conditionalSetup {
	f := newFixture(t, 1, 0)
	c := &conditionalSetup{f: f, s: f.streams[0]}
	words := []**cgc.DeviceMemory{&c.counter, &c.n, &c.more, &c.hits, &c.after, &c.never}
	for _, w := range words {
		*w = f.deviceBuffer(4, c.s)
		f.ok(cgc.Memset32((*w).Ptr(), 0, 1, c.s))
	}
	f.ok(c.s.Synchronize())
	// Begin outside a capture: ErrNotSupported on a driver older than CUDA 12.4 (checked before
	// whether the stream captures), else ErrInvalidState.
	err := c.s.Conditional(cgc.ConditionalIf, c.more.Ptr(), func(*cgc.Stream) error {
		t.Fatal("a body began outside a capture")
		return nil
	})
	var ce *cgc.Error
	if errors.As(err, &ce) && ce.Status == cgc.ErrNotSupported {
		t.Skipf("SKIP (conditional nodes need a driver for CUDA 12.4): %v", err)
	}
	wantMessage(t, "a conditional outside a capture", err, cgc.ErrInvalidState, "cgc_capture_conditional_begin")
	module, err := f.ctx.LoadModule(bindingTestsPTX(t))
	f.ok(err)
	t.Cleanup(func() { _ = module.Close() })
	for name, fn := range map[string]**cgc.Function{"cond_init": &c.init, "cond_step": &c.step, "cond_count": &c.count} {
		*fn, err = module.Function(name)
		f.ok(err)
	}
	return c
}

var one = cgc.Dim3{X: 1, Y: 1, Z: 1}

// word reads one uint32 of device memory.
func (c *conditionalSetup) word(m *cgc.DeviceMemory) uint32 {
	c.f.t.Helper()
	v := make([]uint32, 1)
	c.f.ok(c.s.Synchronize())
	c.f.ok(cgc.CopyDeviceToHost(v, m.Ptr(), c.s))
	c.f.ok(c.s.Synchronize())
	return v[0]
}

func TestGPUConditionalWhileCountsToAPerReplayBound(t *testing.T) {
	c := newConditionalSetup(t)
	f := c.f
	host := f.hostBuffer(4) // page-locked: the bound, copied in by the graph at every replay
	bound := cgc.HostSlice[uint32](host)
	var lent *cgc.Stream
	g, err := c.s.Capture(nil, func(s *cgc.Stream) error {
		f.ok(cgc.CopyHostToDevice(c.n.Ptr(), bound, s))
		f.ok(c.init.Launch(one, one, 0, s, c.counter, c.n, c.more))
		return s.Conditional(cgc.ConditionalWhile, c.more.Ptr(), func(body *cgc.Stream) error {
			lent = body
			if body == s || body.Native() == s.Native() {
				t.Error("the body is not a stream of its own")
			}
			return c.step.Launch(one, one, 0, body, c.counter, c.n, c.more)
		})
	})
	f.ok(err)
	defer g.Destroy()
	// The lent stream is closed once Conditional returned: using it says so.
	wantMessage(t, "the body after its end", lent.Synchronize(), cgc.ErrInvalidHandle, "closed")
	if info, err := g.Info(); err != nil || info.ConditionalNodes != 1 {
		t.Errorf("graph info: %+v, %v; want 1 conditional node", info, err)
	}
	for _, b := range []uint32{3, 17, 0, 1, 1000} {
		bound[0] = b
		f.ok(g.Launch(c.s))
		if got := c.word(c.counter); got != b {
			t.Errorf("bound %d: the loop counted to %d", b, got)
		}
	}
}

func TestGPUConditionalIfSkipsItsBody(t *testing.T) {
	c := newConditionalSetup(t)
	f := c.f
	host := f.hostBuffer(4)
	run := cgc.HostSlice[uint32](host)
	g, err := c.s.Capture(nil, func(s *cgc.Stream) error {
		f.ok(cgc.CopyHostToDevice(c.more.Ptr(), run, s)) // the condition itself, per replay
		f.ok(s.Conditional(cgc.ConditionalIf, c.more.Ptr(), func(body *cgc.Stream) error {
			return c.count.Launch(one, one, 0, body, c.hits)
		}))
		return c.count.Launch(one, one, 0, s, c.after) // after the node: runs at every replay
	})
	f.ok(err)
	defer g.Destroy()
	want := uint32(0)
	for replay, r := range []uint32{1, 0, 0, 1, 1} {
		run[0] = r
		f.ok(g.Launch(c.s))
		want += r
		if hits, after := c.word(c.hits), c.word(c.after); hits != want || after != uint32(replay+1) {
			t.Errorf("replay %d: body ran %d times (want %d), the work after it %d (want %d)", replay, hits, want, after, replay+1)
		}
	}
}

func TestGPUConditionalBodyRefusesAHostFunctionAndIsAlwaysEnded(t *testing.T) {
	c := newConditionalSetup(t)
	f := c.f
	f.ok(cgc.Memset32(c.more.Ptr(), 1, 1, c.s))
	bodyFailure := errors.New("the body's own failure")
	g, err := c.s.Capture(nil, func(s *cgc.Stream) error {
		f.ok(s.Conditional(cgc.ConditionalIf, c.more.Ptr(), func(body *cgc.Stream) error {
			// Allocations are allowed in a body since 1.3 (TestGPUConditionalBodyAllocatesFromTheCapturesPool);
			// host functions still are not.
			wantMessage(t, "a host function in a body", body.LaunchHostFunc(func() {}, nil), cgc.ErrCaptureUnsupported,
				"cgc_launch_host_func")
			wantMessage(t, "closing the lent body", body.Close(), cgc.ErrInvalidState, "conditional")
			// What a body may hold still works: a set and a kernel.
			f.ok(cgc.Memset32(c.hits.Ptr(), 7, 1, body))
			return c.count.Launch(one, one, 0, body, c.hits)
		}))
		// A failing body function: its error comes back and the body is ended (else the capture
		// could not end). Its condition stays 0: it never runs.
		if err := s.Conditional(cgc.ConditionalWhile, c.never.Ptr(), func(*cgc.Stream) error { return bodyFailure }); err != bodyFailure {
			t.Errorf("Conditional with a failing body: %v, want the body's error", err)
		}
		// A panicking one: the body is ended on the way out.
		func() {
			defer func() {
				if recover() == nil {
					t.Error("the panic did not come through")
				}
			}()
			_ = s.Conditional(cgc.ConditionalIf, c.never.Ptr(), func(*cgc.Stream) error { panic("in the body") })
		}()
		// A kind the library does not know, on a capturing stream.
		wantMessage(t, "kind 3", s.Conditional(cgc.ConditionalKind(3), c.more.Ptr(), func(*cgc.Stream) error {
			t.Error("the body ran with kind 3")
			return nil
		}), cgc.ErrInvalidArgument, "cgc_capture_conditional_begin", "kind 3")
		return nil
	})
	f.ok(err) // no body is left open
	defer g.Destroy()
	if info, err := g.Info(); err != nil || info.ConditionalNodes != 3 {
		t.Errorf("graph info: %+v, %v; want 3 conditional nodes", info, err)
	}
	f.ok(g.Launch(c.s))
	if got := c.word(c.hits); got != 8 {
		t.Errorf("the body's set (7) and kernel (+1) gave %d", got)
	}
}
