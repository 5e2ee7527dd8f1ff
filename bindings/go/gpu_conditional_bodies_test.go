package cgc_test

// GPU tests of 1.3's conditional nodes (Stream.ConditionalBodies): what the library checks of
// the kind, the count and the flags; an IF/ELSE and a SWITCH choosing their body per replay; a
// WHILE loop whose own kernel (examples/kernels/loop_continue.ptx) sets the condition through
// the node's handle; memory allocated inside a body; generator draws inside a WHILE body
// compared with eager draws. They skip without a GPU and with a driver older than CUDA 12.4
// (newConditionalSetup); IF/ELSE and SWITCH also with one older than 12.8.

import (
	"errors"
	"testing"

	cgc "cgc/bindings/go"
)

// noBodies is a ConditionalBodies function that leaves every body empty.
func noBodies([]*cgc.Stream, cgc.ConditionalHandle) error { return nil }

// skipWithoutCUDA128 skips the test when the driver refuses an IF/ELSE node, which needs CUDA
// 12.8 as SWITCH does. The library says so before it changes the capture, which then ends
// intact; the graph it gives is discarded.
func (c *conditionalSetup) skipWithoutCUDA128() {
	c.f.t.Helper()
	var refusal error
	g, err := c.s.Capture(nil, func(s *cgc.Stream) error {
		refusal = s.ConditionalBodies(cgc.ConditionalIf, c.more.Ptr(), 0, 2, noBodies)
		return nil
	})
	c.f.ok(err)
	c.f.ok(g.Destroy())
	if errors.Is(refusal, cgc.ErrNotSupported) {
		c.f.t.Skipf("SKIP (IF/ELSE and SWITCH need a driver for CUDA 12.8): %v", refusal)
	}
	c.f.ok(refusal)
}

// The checks the library makes before it changes the capture: each refusal names the call, runs
// no body function, and leaves the capture able to end.
func TestGPUConditionalBodiesChecksKindCountAndFlags(t *testing.T) {
	c := newConditionalSetup(t)
	f := c.f
	ran := false
	body := func([]*cgc.Stream, cgc.ConditionalHandle) error { ran = true; return nil }
	cases := []struct {
		kind    cgc.ConditionalKind
		flags   cgc.ConditionalFlags
		nBodies int
		want    string
	}{
		{cgc.ConditionalIf, 0, 3, "n_bodies is 3"},
		{cgc.ConditionalIf, 0, 0, "n_bodies is 0"},
		{cgc.ConditionalWhile, 0, 2, "n_bodies is 2"},
		{cgc.ConditionalSwitch, 0, 0, "n_bodies is 0"},
		{cgc.ConditionalIf, cgc.ConditionalBodySetsCondition, 1, "WHILE"},
		{cgc.ConditionalSwitch, cgc.ConditionalBodySetsCondition, 2, "WHILE"},
		{cgc.ConditionalWhile, 0x80, 1, "flags 0x80"},
		{cgc.ConditionalKind(7), 0, 1, "kind 7"},
	}
	g, err := c.s.Capture(nil, func(s *cgc.Stream) error {
		for _, k := range cases {
			err := s.ConditionalBodies(k.kind, c.more.Ptr(), k.flags, k.nBodies, body)
			wantMessage(t, k.kind.String()+" "+k.want, err, cgc.ErrInvalidArgument,
				"cgc_capture_conditional_begin_bodies", k.want)
		}
		// The one-body call leaves SWITCH to ConditionalBodies.
		wantMessage(t, "Conditional(Switch)", s.Conditional(cgc.ConditionalSwitch, c.more.Ptr(), func(*cgc.Stream) error {
			ran = true
			return nil
		}), cgc.ErrInvalidArgument, "cgc_capture_conditional_begin", "cgc_capture_conditional_begin_bodies")
		return nil
	})
	f.ok(err) // nothing was added: the capture is intact
	defer g.Destroy()
	if ran {
		t.Error("a body function ran although no node was added")
	}
	if info, err := g.Info(); err != nil || info.ConditionalNodes != 0 {
		t.Errorf("graph info: %+v, %v; want no conditional node", info, err)
	}
}

// IF/ELSE: bodies[0] runs when the condition is nonzero, bodies[1] when it is 0, chosen per
// replay. A second node's function fails after using both bodies: its error comes back and
// both bodies are ended (else the capture could not end).
func TestGPUConditionalIfElseChoosesABodyPerReplay(t *testing.T) {
	c := newConditionalSetup(t)
	c.skipWithoutCUDA128()
	f := c.f
	run := cgc.HostSlice[uint32](f.hostBuffer(4)) // the condition, copied in at every replay
	bodyFailure := errors.New("the body function's own failure")
	var lent []*cgc.Stream
	g, err := c.s.Capture(nil, func(s *cgc.Stream) error {
		f.ok(cgc.CopyHostToDevice(c.more.Ptr(), run, s))
		f.ok(s.ConditionalBodies(cgc.ConditionalIf, c.more.Ptr(), 0, 2, func(bodies []*cgc.Stream, handle cgc.ConditionalHandle) error {
			if len(bodies) != 2 || bodies[0] == bodies[1] || bodies[0].Native() == bodies[1].Native() {
				t.Errorf("bodies: %v, want two streams of their own", bodies)
			}
			if handle == 0 {
				t.Error("the node's handle is 0")
			}
			wantMessage(t, "closing a lent body", bodies[1].Close(), cgc.ErrInvalidState, "conditional")
			lent = bodies
			f.ok(cgc.Memset32(c.hits.Ptr(), 1, 1, bodies[0]))
			return cgc.Memset32(c.hits.Ptr(), 2, 1, bodies[1])
		}))
		err := s.ConditionalBodies(cgc.ConditionalIf, c.never.Ptr(), 0, 2, func(bodies []*cgc.Stream, _ cgc.ConditionalHandle) error {
			f.ok(cgc.Memset32(c.after.Ptr(), 1, 1, bodies[0]))
			f.ok(cgc.Memset32(c.after.Ptr(), 2, 1, bodies[1]))
			return bodyFailure
		})
		if err != bodyFailure {
			t.Errorf("ConditionalBodies with a failing function: %v, want its error", err)
		}
		return nil
	})
	f.ok(err)
	defer g.Destroy()
	for i, body := range lent {
		wantMessage(t, "a body after its end", body.Synchronize(), cgc.ErrInvalidHandle, "closed")
		if err := body.Close(); err != nil {
			t.Errorf("Close of body %d after its end: %v", i, err)
		}
	}
	if info, err := g.Info(); err != nil || info.ConditionalNodes != 2 {
		t.Errorf("graph info: %+v, %v; want 2 conditional nodes", info, err)
	}
	for _, r := range []uint32{1, 0, 5, 0, 0} {
		run[0] = r
		f.ok(g.Launch(c.s))
		want := uint32(2)
		if r != 0 {
			want = 1
		}
		if got := c.word(c.hits); got != want {
			t.Errorf("condition %d: body %d ran, want the one writing %d", r, got, want)
		}
		// The failing function's node: its condition (never) is 0, so its else body ran.
		if got := c.word(c.after); got != 2 {
			t.Errorf("condition %d: the second node's else body wrote %d, want 2", r, got)
		}
	}
}

// SWITCH of 3 bodies: body i runs when the condition is i; none when it is 3 or more.
func TestGPUConditionalSwitchRunsTheBodyTheConditionNames(t *testing.T) {
	c := newConditionalSetup(t)
	c.skipWithoutCUDA128()
	f := c.f
	selector := cgc.HostSlice[uint32](f.hostBuffer(4))
	const untouched = 99
	g, err := c.s.Capture(nil, func(s *cgc.Stream) error {
		f.ok(cgc.CopyHostToDevice(c.more.Ptr(), selector, s))
		f.ok(cgc.Memset32(c.hits.Ptr(), untouched, 1, s)) // what stays when no body runs
		return s.ConditionalBodies(cgc.ConditionalSwitch, c.more.Ptr(), 0, 3, func(bodies []*cgc.Stream, _ cgc.ConditionalHandle) error {
			for i, body := range bodies {
				if err := cgc.Memset32(c.hits.Ptr(), uint32(10+i), 1, body); err != nil {
					return err
				}
			}
			return nil
		})
	})
	f.ok(err)
	defer g.Destroy()
	if info, err := g.Info(); err != nil || info.ConditionalNodes != 1 {
		t.Errorf("graph info: %+v, %v; want 1 conditional node", info, err)
	}
	for _, v := range []uint32{0, 1, 2, 7, 1, 3} {
		selector[0] = v
		f.ok(g.Launch(c.s))
		want := uint32(untouched)
		if v < 3 {
			want = 10 + v
		}
		if got := c.word(c.hits); got != want {
			t.Errorf("condition %d: %d, want %d", v, got, want)
		}
	}
}

// ConditionalBodySetsCondition: the body's own kernel (loop_continue) counts and sets the
// condition through the node's handle, so the loop stops at a bound given per replay.
func TestGPUConditionalWhileBodySetsItsCondition(t *testing.T) {
	c := newConditionalSetup(t)
	f := c.f
	module, err := f.ctx.LoadModule(loopContinuePTX(t))
	f.ok(err)
	t.Cleanup(func() { _ = module.Close() })
	loopContinue, err := module.Function("loop_continue")
	f.ok(err)
	bound := cgc.HostSlice[uint32](f.hostBuffer(4))
	g, err := c.s.Capture(nil, func(s *cgc.Stream) error {
		f.ok(cgc.CopyHostToDevice(c.n.Ptr(), bound, s))
		f.ok(c.init.Launch(one, one, 0, s, c.counter, c.n, c.more)) // counter = 0, more = n != 0
		return s.ConditionalBodies(cgc.ConditionalWhile, c.more.Ptr(), cgc.ConditionalBodySetsCondition, 1,
			func(bodies []*cgc.Stream, handle cgc.ConditionalHandle) error {
				if handle == 0 {
					t.Error("the node's handle is 0")
				}
				return loopContinue.Launch(one, one, 0, bodies[0], handle, c.counter, c.n)
			})
	})
	f.ok(err)
	defer g.Destroy()
	for _, b := range []uint32{4, 1, 0, 9, 1000} {
		bound[0] = b
		f.ok(g.Launch(c.s))
		if got := c.word(c.counter); got != b {
			t.Errorf("bound %d: the body's kernel ended the loop at %d", b, got)
		}
	}
}

// Memory allocated in a body comes from the capture's pool: freed there, it is reused by the
// body; once the body has ended, by the stream the node was added on (the node runs first).
func TestGPUConditionalBodyAllocatesFromTheCapturesPool(t *testing.T) {
	c := newConditionalSetup(t)
	f := c.f
	pool, err := f.ctx.NewPool()
	f.ok(err)
	t.Cleanup(func() { _ = pool.Close() })
	const bytes, words = 1024, 256
	var first cgc.DevicePtr
	g, err := c.s.Capture(&cgc.CaptureOptions{Pool: pool}, func(s *cgc.Stream) error {
		f.ok(s.ConditionalBodies(cgc.ConditionalIf, c.more.Ptr(), 0, 1, func(bodies []*cgc.Stream, _ cgc.ConditionalHandle) error {
			body := bodies[0]
			a, err := f.ctx.Malloc(bytes, body)
			f.ok(err)
			first = a.Ptr()
			f.ok(cgc.Memset32(a.Ptr(), 5, words, body))
			f.ok(cgc.CopyDeviceToDevice(c.hits.Ptr(), a.Ptr(), 4, body))
			f.ok(a.Free())
			b, err := f.ctx.Malloc(bytes, body)
			f.ok(err)
			if b.Ptr() != first {
				t.Errorf("freed in the body at %#x, the body's next block is at %#x", first, b.Ptr())
			}
			f.ok(cgc.Memset32(b.Ptr(), 6, words, body))
			f.ok(cgc.CopyDeviceToDevice(c.counter.Ptr(), b.Ptr(), 4, body))
			return b.Free()
		}))
		after, err := f.ctx.Malloc(bytes, s)
		f.ok(err)
		if after.Ptr() != first {
			t.Errorf("the body's memory (%#x) did not pass to the capture's stream at its end: got %#x", first, after.Ptr())
		}
		f.ok(cgc.Memset32(after.Ptr(), 7, words, s))
		f.ok(cgc.CopyDeviceToDevice(c.after.Ptr(), after.Ptr(), 4, s))
		return after.Free()
	})
	f.ok(err)
	defer g.Destroy()
	if stats, err := f.ctx.MemoryStats(pool); err != nil || stats.BytesReserved == 0 {
		t.Errorf("pool stats: %+v, %v; the body's memory is the pool's", stats, err)
	}
	for _, run := range []uint32{1, 0} {
		for _, w := range []*cgc.DeviceMemory{c.hits, c.counter, c.after} {
			f.ok(cgc.Memset32(w.Ptr(), 0, 1, c.s))
		}
		f.ok(cgc.Memset32(c.more.Ptr(), run, 1, c.s))
		f.ok(g.Launch(c.s))
		want := [3]uint32{0, 0, 7}
		if run != 0 {
			want = [3]uint32{5, 6, 7}
		}
		if got := [3]uint32{c.word(c.hits), c.word(c.counter), c.word(c.after)}; got != want {
			t.Errorf("condition %d: the blocks' values %v, want %v", run, got, want)
		}
	}
}

// Draws in a WHILE body: after a replay of k iterations the body's buffer holds iteration k-1's
// numbers, which are what the k-th of k eager draws gives from the generator's state at that
// replay; each replay moves the generator on by the loop's window.
func TestGPUConditionalWhileDrawsWhatEagerDrawsDraw(t *testing.T) {
	c := newConditionalSetup(t)
	f := c.f
	const perIteration = 8 // a multiple of 4: the window is exactly this many numbers per iteration
	drawn := f.deviceBuffer(4*perIteration, c.s)
	eagerOut := f.deviceBuffer(4*perIteration, c.s)
	bound := cgc.HostSlice[uint32](f.hostBuffer(4))
	g, err := c.s.Capture(nil, func(s *cgc.Stream) error {
		f.ok(cgc.CopyHostToDevice(c.n.Ptr(), bound, s))
		f.ok(c.init.Launch(one, one, 0, s, c.counter, c.n, c.more))
		return s.ConditionalBodies(cgc.ConditionalWhile, c.more.Ptr(), 0, 1, func(bodies []*cgc.Stream, _ cgc.ConditionalHandle) error {
			f.ok(f.gen.Normal(drawn.Ptr(), perIteration, 0, 1, bodies[0]))
			return c.step.Launch(one, one, 0, bodies[0], c.counter, c.n, c.more)
		})
	})
	f.ok(err)
	defer g.Destroy()
	read := func(m *cgc.DeviceMemory) []float32 {
		v := make([]float32, perIteration)
		f.ok(c.s.Synchronize())
		f.ok(cgc.CopyDeviceToHost(v, m.Ptr(), c.s))
		f.ok(c.s.Synchronize())
		return v
	}
	window := perIteration * cgc.LoopEagerIterations
	seed, offset, err := f.gen.State()
	f.ok(err)
	var previous []float32
	for _, k := range []uint32{5, 3, 0, 7, 1} {
		_, before, err := f.gen.State()
		f.ok(err)
		if before != offset {
			t.Errorf("before the replay of %d iterations: offset %d, want %d", k, before, offset)
		}
		bound[0] = k
		f.ok(g.Launch(c.s))
		offset += window
		if _, after, err := f.gen.State(); err != nil || after != offset {
			t.Errorf("after the replay of %d iterations: offset %d (%v), want %d: a replay reserves the loop's window",
				k, after, err, offset)
		}
		if k == 0 {
			continue // no iteration ran: the buffer keeps the previous replay's numbers
		}
		got := read(drawn)
		eager, err := f.ctx.NewRng(seed)
		f.ok(err)
		f.ok(eager.SetState(seed, before))
		for i := uint32(0); i < k; i++ {
			f.ok(eager.Normal(eagerOut.Ptr(), perIteration, 0, 1, c.s))
		}
		want := read(eagerOut)
		f.ok(eager.Close())
		if !equalBits(got, want) {
			t.Errorf("%d iterations: the last drew %v, the %d-th eager draw %v", k, got, k, want)
		}
		if previous != nil && equalBits(got, previous) {
			t.Errorf("%d iterations: the same numbers as the replay before", k)
		}
		previous = got
	}
}
