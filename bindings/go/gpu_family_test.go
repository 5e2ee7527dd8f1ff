package cgc_test

// GPU tests of 1.6's families: graphs of one structure share one executable
// (Graph.ShareExecutable), each launch running the launched graph's own nodes; a graph of
// another structure is refused and keeps its own; a restore with RestoreOptions.Families makes
// the family itself (on cgc's choice of threads and on one).

import (
	"strings"
	"testing"

	cgc "cgc/bindings/go"
)

// launchN launches affine over the first n floats: out = input * params[0] + params[1] + bias,
// a grid of n / workBlock blocks (rounded up).
func (a *affineSetup) launchN(s *cgc.Stream, out, params *cgc.DeviceMemory, bias float32, n uint32) error {
	grid := cgc.Dim3{X: (n + workBlock - 1) / workBlock, Y: 1, Z: 1}
	block := cgc.Dim3{X: workBlock, Y: 1, Z: 1}
	return a.affine.Launch(grid, block, 0, s, out, a.input, params, bias, n)
}

// launchAndExpect zeroes out, launches g and requires out's first n floats to be input * scale +
// shift + bias and the rest untouched (0).
func (a *affineSetup) launchAndExpect(g *cgc.Graph, out *cgc.DeviceMemory, n int, scale, shift, bias float32,
	what string) {
	a.f.t.Helper()
	a.f.ok(cgc.Memset32(out.Ptr(), 0, workCount, a.s))
	if err := g.Launch(a.s); err != nil {
		a.f.t.Fatalf("%s: launch: %v", what, err)
	}
	got := make([]float32, workCount)
	a.f.ok(cgc.CopyDeviceToHost(got, out.Ptr(), a.s))
	a.f.ok(a.s.Synchronize())
	for i, x := range a.in {
		want := float32(0)
		if i < n {
			want = x*scale + shift + bias
		}
		if got[i] != want {
			a.f.t.Fatalf("%s: [%d] = %v, want %v", what, i, got[i], want)
		}
	}
}

// familyOf requires g's GraphInfo to say a family of size members and no refused join.
func familyOf(t *testing.T, g *cgc.Graph, size int, what string) {
	t.Helper()
	info, err := g.Info()
	if err != nil {
		t.Fatalf("%s: Info: %v", what, err)
	}
	if info.FamilySize != size || info.FamilyResult != 0 {
		t.Errorf("%s: FamilySize %d, FamilyResult %d; want %d and 0", what, info.FamilySize, info.FamilyResult, size)
	}
}

// Two graphs of one structure (affine, with other buffers, parameters, bias and grid) share one
// executable after ShareExecutable: both count a family of 2, and each launch runs the launched
// graph's own nodes, in any order. A member takes no per-node updates nor updates by capture;
// joining again does nothing; the leader's Reset leaves the executable to the member.
func TestGPUGraphsOfOneStructureShareOneExecutable(t *testing.T) {
	a := newAffineSetup(t)
	f, s := a.f, a.s
	x, y := a.zeroed(), a.zeroed()
	otherParams := a.paramsOf(3, -1)
	const nx, ny = workCount, workCount / 2
	leader, err := s.Capture(nil, func(cs *cgc.Stream) error { return a.launchN(cs, x, a.params, 0.5, nx) })
	f.ok(err)
	member, err := s.Capture(nil, func(cs *cgc.Stream) error { return a.launchN(cs, y, otherParams, 0.25, ny) })
	f.ok(err)
	familyOf(t, leader, 1, "a graph with its own executable")
	if leader.NativeExec() == member.NativeExec() {
		t.Fatal("two captures, one executable")
	}

	f.ok(member.ShareExecutable(leader))
	familyOf(t, leader, 2, "the leader")
	familyOf(t, member, 2, "the member")
	if leader.NativeExec() != member.NativeExec() {
		t.Error("the family's members hold other executables")
	}
	for round := 0; round < 3; round++ {
		a.launchAndExpect(member, y, ny, 3, -1, 0.25, "the member")
		a.launchAndExpect(leader, x, nx, 2, 1, 0.5, "the leader")
	}
	a.launchAndExpect(leader, x, nx, 2, 1, 0.5, "the leader again (no switch)")
	f.ok(member.Upload(s))
	a.launchAndExpect(member, y, ny, 3, -1, 0.25, "the member after its upload")
	li, err := leader.Info()
	f.ok(err)
	mi, err := member.Info()
	f.ok(err)
	if li.ReplayCount != 4 || mi.ReplayCount != 4 {
		t.Errorf("replays: leader %d, member %d; want 4 and 4", li.ReplayCount, mi.ReplayCount)
	}
	// Joining the family it is in already: nothing changes.
	f.ok(member.ShareExecutable(leader))
	familyOf(t, member, 2, "the member after joining again")

	// Refusals: itself as leader; per-node updates and updates by capture of a member.
	wantMessage(t, "the leader as its own leader", leader.ShareExecutable(leader), cgc.ErrInvalidArgument,
		"cgc_graph_share_executable")
	wantMessage(t, "SetKernelEnabled of a member", member.SetKernelEnabled(0, false), cgc.ErrInvalidState,
		"cgc_graph_kernel_node_set_enabled", "family")
	_, err = s.Capture(&cgc.CaptureOptions{Update: member}, func(cs *cgc.Stream) error {
		return a.launchN(cs, y, a.params, 0, ny)
	})
	wantMessage(t, "an update by capture of a member", err, cgc.ErrInvalidState, "cgc_capture_begin", "family")
	a.launchAndExpect(member, y, ny, 3, -1, 0.25, "the member after the refusals")

	// The leader goes first: the member keeps the executable.
	f.ok(leader.Reset())
	familyOf(t, leader, 0, "the reset leader")
	familyOf(t, member, 1, "the member after the leader's reset")
	a.launchAndExpect(member, y, ny, 3, -1, 0.25, "the member after the leader's reset")
	wantMessage(t, "joining a reset leader", member.ShareExecutable(leader), cgc.ErrInvalidState,
		"cgc_graph_share_executable", "reset")

	f.ok(member.Destroy())
	f.ok(leader.Destroy())
	f.ok(s.Synchronize())
}

// A graph of another structure (one kernel more) cannot join: ErrNotSupported, naming the call;
// it keeps its own executable, its FamilyResult says why (not 0) and both graphs still run their
// own nodes.
func TestGPUAGraphOfAnotherStructureCannotShare(t *testing.T) {
	a := newAffineSetup(t)
	f, s := a.f, a.s
	x, y, z := a.zeroed(), a.zeroed(), a.zeroed()
	otherParams := a.paramsOf(3, -1)
	leader, err := s.Capture(nil, func(cs *cgc.Stream) error { return a.launchN(cs, x, a.params, 0, workCount) })
	f.ok(err)
	other, err := s.Capture(nil, func(cs *cgc.Stream) error {
		if err := a.launchN(cs, y, otherParams, 0, workCount); err != nil {
			return err
		}
		return a.launchN(cs, z, a.params, 0.5, workCount) // one kernel more
	})
	f.ok(err)
	wantMessage(t, "ShareExecutable of another structure", other.ShareExecutable(leader), cgc.ErrNotSupported,
		"cgc_graph_share_executable")
	info, err := other.Info()
	f.ok(err)
	if info.FamilyResult == 0 || info.FamilySize != 1 {
		t.Errorf("the refused graph: FamilyResult %d, FamilySize %d; want a reason (not 0) and 1",
			info.FamilyResult, info.FamilySize)
	}
	familyOf(t, leader, 1, "the leader after the refusal")
	if leader.NativeExec() == other.NativeExec() {
		t.Error("the refused graph holds the leader's executable")
	}
	a.launchAndExpect(other, y, workCount, 3, -1, 0, "y, of the refused graph")
	a.expect(z, 2, 1, 0.5, "z, of the refused graph")
	a.launchAndExpect(leader, x, workCount, 2, 1, 0, "x, of the leader")

	f.ok(other.Destroy())
	f.ok(leader.Destroy())
	f.ok(s.Synchronize())
}

// Two graphs of one structure captured into a pool at fixed addresses, saved, and restored with
// RestoreOptions.Families: the restored graphs share one executable (a family of 2) and each
// launch writes the launched graph's own output; so again with Threads: 1, and Threads: 65 is
// refused. The base is the Go binding's own.
func TestGPURestoreWithFamiliesSharesOneExecutable(t *testing.T) {
	const (
		base     = cgc.DevicePtr(0x698000000000)
		capacity = 64 << 20
	)
	f := newFixture(t, 1, 0)
	s := f.streams[0]
	module, affine, pool := affineAndFixedPool(f, base, capacity)
	g0, out0 := captureAffineInPool(f, s, affine, pool)
	g1, out1 := captureAffineInPool(f, s, affine, pool)
	at := []cgc.DevicePtr{out0.Ptr(), out1.Ptr()}
	data, err := cgc.SaveGraphs([]*cgc.Graph{g0, g1}, nil)
	f.ok(err)
	f.ok(g0.Destroy())
	f.ok(g1.Destroy())
	f.ok(out0.Free())
	f.ok(out1.Free())
	f.ok(s.Synchronize())
	f.ok(pool.Close())
	f.ok(module.Close())

	graphs, pools, err := f.ctx.RestoreGraphsWith(data, &cgc.RestoreOptions{Families: true})
	f.ok(err)
	if len(graphs) != 2 || len(pools) != 1 {
		t.Fatalf("restored %d graphs and %d pools, want 2 and 1", len(graphs), len(pools))
	}
	t.Cleanup(func() {
		for _, g := range graphs {
			_ = g.Destroy()
		}
		_ = pools[0].Close()
	})
	familyOf(t, graphs[0], 2, "restored graph 0")
	familyOf(t, graphs[1], 2, "restored graph 1")
	if graphs[0].NativeExec() != graphs[1].NativeExec() {
		t.Error("the restored family's graphs hold other executables")
	}
	outs := make([]*cgc.DeviceMemory, 2)
	for i := range outs {
		outs[i], err = cgc.DeviceMemoryAt(at[i], 4*workCount)
		f.ok(err)
	}
	for round := 0; round < 2; round++ {
		for _, i := range []int{1, 0} {
			for _, p := range at {
				f.ok(cgc.Memset32(p, 0, workCount, s))
			}
			f.ok(graphs[i].Launch(s))
			mine, theirs := readFloats(f, s, at[i]), readFloats(f, s, at[1-i])
			for k := range mine {
				if mine[k] != 5.5 || theirs[k] != 0 {
					t.Fatalf("round %d, graph %d: [%d] = %v (its own), %v (the other's); want 5.5 and 0", round, i, k,
						mine[k], theirs[k])
				}
			}
		}
	}

	for _, g := range graphs {
		f.ok(g.Destroy())
	}
	for _, m := range outs {
		f.ok(m.Free())
	}
	f.ok(s.Synchronize())
	f.ok(pools[0].Close())

	// On the calling thread alone (Threads: 1) the restore makes the same family and outputs; more
	// than 64 threads are the library's ErrInvalidArgument, refused before anything is made.
	_, _, err = f.ctx.RestoreGraphsWith(data, &cgc.RestoreOptions{Families: true, Threads: 65})
	if e := asError(t, err, cgc.ErrInvalidArgument); !strings.Contains(e.Message, "options->threads is 65") {
		t.Errorf("a restore on 65 threads: %q, want cgc_graphs_restore refusing options->threads", e.Message)
	}
	graphs, pools, err = f.ctx.RestoreGraphsWith(data, &cgc.RestoreOptions{Families: true, Threads: 1})
	f.ok(err)
	for i, g := range graphs {
		familyOf(t, g, 2, "a graph restored on one thread")
		f.ok(cgc.Memset32(at[i], 0, workCount, s))
		f.ok(g.Launch(s))
		for k, x := range readFloats(f, s, at[i]) {
			if x != 5.5 {
				t.Fatalf("graph %d restored on one thread: [%d] = %v, want 5.5", i, k, x)
			}
		}
	}
	for i, g := range graphs {
		f.ok(g.Destroy())
		outs[i], err = cgc.DeviceMemoryAt(at[i], 4*workCount)
		f.ok(err)
		f.ok(outs[i].Free())
	}
	f.ok(s.Synchronize())
	f.ok(pools[0].Close())
	f.closeAll(true)
}
