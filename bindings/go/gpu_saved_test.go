package cgc_test

// GPU tests of 1.6's saved graphs: a graph of a pool at fixed addresses is saved to bytes and
// restored at the same addresses once everything it used is gone; a verifying save replays a
// deterministic graph beside its rebuild from the bytes; graphs that reach memory outside such
// pools are refused; a graph that draws is restored with its generator.

import (
	"bytes"
	"math"
	"testing"

	cgc "cgc/bindings/go"
)

// captureAffineInPool captures affine's work into pool with everything it reads and writes
// allocated in the capture from that pool: its input (1.5 everywhere) and parameters (scale 2,
// shift 2) written by sets in the graph itself and freed in the capture (kept for the graph), and
// its output, which the graph gives back (1.5 * 2 + 2 + 0.5 = 5.5 everywhere). Nothing outside
// the pool is reached, so the graph can be saved when the pool is at fixed addresses.
func captureAffineInPool(f *fixture, s *cgc.Stream, affine *cgc.Function, pool *cgc.Pool) (*cgc.Graph, *cgc.DeviceMemory) {
	f.t.Helper()
	var out *cgc.DeviceMemory
	g, err := s.Capture(&cgc.CaptureOptions{Pool: pool}, func(cs *cgc.Stream) error {
		input, err := f.ctx.Malloc(4*workCount, cs)
		if err != nil {
			return err
		}
		params, err := f.ctx.Malloc(8, cs)
		if err != nil {
			return err
		}
		o, err := f.ctx.Malloc(4*workCount, cs)
		if err != nil {
			return err
		}
		if err := cgc.Memset32(input.Ptr(), math.Float32bits(1.5), workCount, cs); err != nil {
			return err
		}
		if err := cgc.Memset32(params.Ptr(), math.Float32bits(2), 2, cs); err != nil {
			return err
		}
		grid := cgc.Dim3{X: (workCount + workBlock - 1) / workBlock, Y: 1, Z: 1}
		block := cgc.Dim3{X: workBlock, Y: 1, Z: 1}
		if err := affine.Launch(grid, block, 0, cs, o, input, params, float32(0.5), uint32(workCount)); err != nil {
			return err
		}
		if err := input.Free(); err != nil {
			return err
		}
		if err := params.Free(); err != nil {
			return err
		}
		out = o
		return nil
	})
	f.ok(err)
	return g, out
}

// affineAndFixedPool loads the binding tests' module and its kernel "affine", and makes a pool at
// fixed addresses [base, base+capacity): what the saved-graph tests capture with. Both are closed
// at the test's end if the test has not closed them.
func affineAndFixedPool(f *fixture, base cgc.DevicePtr, capacity int) (*cgc.Module, *cgc.Function, *cgc.Pool) {
	f.t.Helper()
	module, err := f.ctx.LoadModule(bindingTestsPTX(f.t))
	f.ok(err)
	f.t.Cleanup(func() { _ = module.Close() })
	affine, err := module.Function("affine")
	f.ok(err)
	pool, err := f.ctx.NewPoolAt(base, capacity)
	if err != nil {
		f.t.Fatalf("NewPoolAt(%#x, %d): %v", base, capacity, err)
	}
	f.t.Cleanup(func() { _ = pool.Close() })
	return module, affine, pool
}

// readFloats copies workCount floats at ptr to the host.
func readFloats(f *fixture, s *cgc.Stream, ptr cgc.DevicePtr) []float32 {
	f.t.Helper()
	got := make([]float32, workCount)
	f.ok(cgc.CopyDeviceToHost(got, ptr, s))
	f.ok(s.Synchronize())
	return got
}

// A graph captured into a pool at fixed addresses is saved to bytes (with its kernel's module and
// the pool's layout), described by ReadSavedInfo, and, once the graph, its output, its pool (its
// range given back) and its module are all gone, restored from the bytes: one new Graph and one
// new Pool at the same base, the output allocated again at its address (the application's to
// free), and the restored graph, launched, writes there what the first one wrote. The base is the
// Go binding's own (Rust's and Python's tests use others).
func TestGPUSavedGraphIsRestoredAtTheSameAddresses(t *testing.T) {
	const (
		base     = cgc.DevicePtr(0x690000000000)
		capacity = 64 << 20
	)
	f := newFixture(t, 1, 0)
	s := f.streams[0]
	module, affine, pool := affineAndFixedPool(f, base, capacity)
	g, out := captureAffineInPool(f, s, affine, pool)
	at := out.Ptr()
	if at < base || at+4*workCount > base+capacity {
		t.Fatalf("the output at %#x is outside [%#x, %#x)", at, base, base+capacity)
	}
	f.ok(g.Launch(s))
	first := readFloats(f, s, at)
	for i, x := range first {
		if x != 5.5 {
			t.Fatalf("first replay: [%d] = %v, want 1.5 * 2 + 2 + 0.5", i, x)
		}
	}

	data, err := cgc.SaveGraphs([]*cgc.Graph{g}, nil)
	f.ok(err)
	info, err := cgc.ReadSavedInfo(data)
	f.ok(err)
	if info.NGraphs != 1 || info.NPools != 1 || info.NModules != 1 {
		t.Errorf("saved info %+v, want 1 graph, 1 pool, 1 module", info)
	}
	if info.PoolBytes < 2<<20 || info.NNodes < 3 || info.ImageBytes == 0 || info.ComputeMajor <= 0 ||
		info.DriverVersion < 12040 {
		t.Errorf("saved info %+v: want at least a 2 MiB granule backed, 3 nodes, an image, an architecture and "+
			"a CUDA 12.4 driver", info)
	}
	// Only a verifying save measures the device memory a restore takes besides the pools.
	if info.RestoreBytes != 0 || info.FamilyRestoreBytes != 0 {
		t.Errorf("saved info %+v: want RestoreBytes and FamilyRestoreBytes 0 without verifying", info)
	}
	// The pool may be named again among the extra pools: it is saved once.
	again, err := cgc.SaveGraphs([]*cgc.Graph{g}, []*cgc.Pool{pool})
	f.ok(err)
	if againInfo, err := cgc.ReadSavedInfo(again); err != nil || againInfo.NPools != 1 {
		t.Errorf("saved with its own pool again: %+v, %v; want 1 pool", againInfo, err)
	}
	_, err = cgc.ReadSavedInfo(data[:len(data)-1])
	wantMessage(t, "ReadSavedInfo of a truncated buffer", err, cgc.ErrSavedMismatch, "cgc_saved_info")

	// Everything goes: the graph, the output, the pool (its range given back), the module.
	f.ok(g.Destroy())
	f.ok(out.Free())
	f.ok(s.Synchronize())
	f.ok(pool.Close())
	f.ok(module.Close())

	graphs, pools, err := f.ctx.RestoreGraphs(data)
	f.ok(err)
	if len(graphs) != 1 || len(pools) != 1 {
		t.Fatalf("restored %d graphs and %d pools, want 1 and 1", len(graphs), len(pools))
	}
	rg, rp := graphs[0], pools[0]
	t.Cleanup(func() { _ = rg.Destroy(); _ = rp.Close() })
	gp, err := rg.Pool()
	f.ok(err)
	if !gp.Equal(rp) {
		t.Error("the restored graph's pool is not the restored pool")
	}
	f.ok(gp.Close())
	// The output is allocated again at its address, in the restored pool, the application's.
	snapshot, err := f.ctx.MemorySnapshot()
	f.ok(err)
	found := false
	for _, seg := range snapshot {
		for _, b := range seg.Blocks {
			if b.Address == at {
				found = true
				if b.State != cgc.BlockAllocated || seg.Pool != rp.ID() {
					t.Errorf("the block at the saved output's address %#x: %v in pool %#x, want Allocated in %#x",
						at, b.State, seg.Pool, rp.ID())
				}
			}
		}
	}
	if !found {
		t.Errorf("no block at the saved output's address %#x", at)
	}
	// The range is held by the restored pool: a second restore cannot reserve it.
	g2, p2, err := f.ctx.RestoreGraphs(data)
	if g2 != nil || p2 != nil {
		t.Errorf("a second restore gave %v, %v", g2, p2)
	}
	asError(t, err, cgc.ErrInvalidState)

	restored, err := cgc.DeviceMemoryAt(at, 4*workCount)
	f.ok(err)
	f.ok(cgc.Memset32(at, 0, workCount, s))
	for i, x := range readFloats(f, s, at) {
		if x != 0 {
			t.Fatalf("after the set: [%d] = %v, want 0", i, x)
		}
	}
	f.ok(rg.Launch(s))
	f.ok(s.Synchronize())
	if got := readFloats(f, s, at); !equalBits(got, first) {
		t.Errorf("the restored graph wrote %v..., the first one %v...", got[:4], first[:4])
	}

	f.ok(rg.Destroy())
	f.ok(restored.Free())
	f.ok(s.Synchronize())
	f.ok(rp.Close())
	f.closeAll(true)
}

// A verifying save (SaveGraphsWith, SaveOptions.Verify): the graph rebuilt from the saved bytes
// and replayed beside the graph itself, from the same contents of its pool, writes the same bytes
// (affine's graph is deterministic: its own sets write the input and parameters its kernel reads,
// and nothing else runs on the pool meanwhile), so the save succeeds with the bytes of a save
// without verifying but for the device memory it measured on the rebuild (FamilyRestoreBytes at
// most RestoreBytes, which may be 0: a graph this small fits in memory the driver holds already;
// both 0 in the plain save), and the pool ends as the graph's
// own replay left it: the output, zeroed before the save, holds 5.5 again. The base is the Go
// binding's own.
func TestGPUVerifyingSaveReplaysADeterministicGraphBesideItsRebuild(t *testing.T) {
	const (
		base     = cgc.DevicePtr(0x69C000000000)
		capacity = 64 << 20
	)
	f := newFixture(t, 1, 0)
	s := f.streams[0]
	module, affine, pool := affineAndFixedPool(f, base, capacity)
	g, out := captureAffineInPool(f, s, affine, pool)
	at := out.Ptr()
	f.ok(g.Launch(s))
	first := readFloats(f, s, at)
	for i, x := range first {
		if x != 5.5 {
			t.Fatalf("first replay: [%d] = %v, want 1.5 * 2 + 2 + 0.5", i, x)
		}
	}
	plain, err := cgc.SaveGraphs([]*cgc.Graph{g}, nil)
	f.ok(err)

	// The output zeroed, the set finished before the save copies the pool.
	f.ok(cgc.Memset32(at, 0, workCount, s))
	f.ok(s.Synchronize())
	verify := &cgc.SaveOptions{Verify: true}
	data, err := cgc.SaveGraphsWith([]*cgc.Graph{g}, nil, verify)
	if err != nil {
		t.Fatalf("SaveGraphsWith with Verify: %v", err)
	}
	// Only a verifying save measures what a restore takes on the device besides the pools (its
	// modules and executables): each graph its own, or one executable for each structure.
	measured, err := cgc.ReadSavedInfo(data)
	f.ok(err)
	unmeasured, err := cgc.ReadSavedInfo(plain)
	f.ok(err)
	if measured.FamilyRestoreBytes > measured.RestoreBytes {
		t.Errorf("a verifying save measured %+v: want FamilyRestoreBytes at most RestoreBytes", measured)
	}
	if unmeasured.RestoreBytes != 0 || unmeasured.FamilyRestoreBytes != 0 {
		t.Errorf("a plain save measured %+v: want RestoreBytes and FamilyRestoreBytes 0", unmeasured)
	}
	rest := measured
	rest.RestoreBytes, rest.FamilyRestoreBytes = 0, 0
	if rest != unmeasured {
		t.Errorf("a verifying save's header %+v, a plain save's %+v: want them equal but for the measures", measured,
			unmeasured)
	}
	// The bytes are the plain save's but for those two 8-byte fields of the header.
	if len(data) != len(plain) {
		t.Errorf("a verifying save wrote %d bytes, %d without verifying", len(data), len(plain))
	} else {
		differs := 0
		for differs < len(data) && data[differs] == plain[differs] {
			differs++
		}
		end := differs + 16
		if end > len(data) {
			end = len(data)
		}
		if !bytes.Equal(data[end:], plain[end:]) {
			t.Errorf("a verifying save wrote other bytes than a plain save's beyond the 16 from offset %d", differs)
		}
	}
	// Whatever the save copied back to the pool has landed before the stream reads it.
	f.ok(f.ctx.Synchronize())
	if got := readFloats(f, s, at); !equalBits(got, first) {
		t.Errorf("after the verifying save the output holds %v..., want the graph's own replay %v...", got[:4],
			first[:4])
	}
	// The graph's pool named again among the extra pools: saved once, verified as before.
	again, err := cgc.SaveGraphsWith([]*cgc.Graph{g}, []*cgc.Pool{pool}, verify)
	f.ok(err)
	if info, err := cgc.ReadSavedInfo(again); err != nil || info.NPools != 1 ||
		info.FamilyRestoreBytes > info.RestoreBytes {
		t.Errorf("a verifying save with its own pool again: %+v, %v; want 1 pool and the restore measured", info, err)
	}

	f.ok(g.Destroy())
	f.ok(out.Free())
	f.ok(s.Synchronize())
	f.ok(pool.Close())
	f.ok(module.Close())
	f.closeAll(true)
}

// A graph captured into an ordinary pool (its memory not at fixed addresses) is refused by the
// save with ErrNotSavable, naming the call, and so is one whose kernel reads memory outside its
// pool at fixed addresses (the device cache's).
func TestGPUGraphOfAnOrdinaryPoolIsNotSavable(t *testing.T) {
	const base = cgc.DevicePtr(0x694000000000)
	f := newFixture(t, 1, 0)
	s := f.streams[0]
	module, err := f.ctx.LoadModule(bindingTestsPTX(t))
	f.ok(err)
	t.Cleanup(func() { _ = module.Close() })
	affine, err := module.Function("affine")
	f.ok(err)

	ordinary, err := f.ctx.NewPool()
	f.ok(err)
	g, out := captureAffineInPool(f, s, affine, ordinary)
	f.ok(g.Launch(s))
	if got := readFloats(f, s, out.Ptr()); got[0] != 5.5 {
		t.Errorf("replay: [0] = %v, want 5.5", got[0])
	}
	data, err := cgc.SaveGraphs([]*cgc.Graph{g}, nil)
	if data != nil {
		t.Errorf("a refused save gave %d bytes", len(data))
	}
	wantMessage(t, "SaveGraphs of a graph of an ordinary pool", err, cgc.ErrNotSavable, "cgc_graphs_save")
	f.ok(g.Destroy())
	f.ok(out.Free())
	f.ok(ordinary.Close())

	// At fixed addresses, but the kernel reads parameters of the device cache.
	pool, err := f.ctx.NewPoolAt(base, 64<<20)
	f.ok(err)
	t.Cleanup(func() { _ = pool.Close() })
	params := f.deviceBuffer(8, s)
	f.ok(cgc.CopyHostToDevice(params.Ptr(), []float32{2, 1}, s))
	var o *cgc.DeviceMemory
	g, err = s.Capture(&cgc.CaptureOptions{Pool: pool}, func(cs *cgc.Stream) error {
		input, err := f.ctx.Malloc(4*workCount, cs)
		if err != nil {
			return err
		}
		if o, err = f.ctx.Malloc(4*workCount, cs); err != nil {
			return err
		}
		if err := cgc.Memset32(input.Ptr(), math.Float32bits(1.5), workCount, cs); err != nil {
			return err
		}
		grid := cgc.Dim3{X: (workCount + workBlock - 1) / workBlock, Y: 1, Z: 1}
		block := cgc.Dim3{X: workBlock, Y: 1, Z: 1}
		if err := affine.Launch(grid, block, 0, cs, o, input, params, float32(0), uint32(workCount)); err != nil {
			return err
		}
		return input.Free()
	})
	f.ok(err)
	_, err = cgc.SaveGraphs([]*cgc.Graph{g}, nil)
	wantMessage(t, "SaveGraphs of a kernel reading the device cache", err, cgc.ErrNotSavable, "cgc_graphs_save")
	f.ok(g.Destroy())
	f.ok(o.Free())
	f.ok(params.Free())
	f.ok(s.Synchronize())
	f.ok(pool.Close())
	f.ok(module.Close())
	f.closeAll(true)
}

// A graph that draws uniform numbers from a generator (the fixture's, seed 1234) into its pool at
// fixed addresses is saved with the generator's state after one replay (SavedInfo.NGenerators 1),
// then replayed twice more, its outputs recorded as 32-bit words. Once the graph, its output, its
// pool and the generator are all gone, RestoreGraphsWithGenerators returns the generator created
// again in that state (seed 1234, offset one replay's draws: draws rounded up to a multiple of 4),
// and the restored graph's two launches write, word for word, what the saving process's two
// replays wrote, each advancing the generator by one replay's draws. Closing the Rng leaves the
// graph drawing; a plain RestoreGraphs (no generators asked for) draws from the saved state too.
// The base is the Go binding's own.
func TestGPUGraphThatDrawsIsRestoredWithItsGenerator(t *testing.T) {
	const (
		base       = cgc.DevicePtr(0x6E4000000000)
		capacity   = 64 << 20
		seed       = 1234
		draws      = 1001 // one replay advances the offset by 1004
		perReplay  = (draws + 3) / 4 * 4
		drawnBytes = 4 * draws
	)
	f := newFixture(t, 1, 0)
	s := f.streams[0]
	gen := f.gen // seed 1234, offset 0
	if sd, off, err := gen.State(); err != nil || sd != seed || off != 0 {
		t.Fatalf("the fixture's generator is at (%d, %d), %v; want (%d, 0)", sd, off, err, seed)
	}
	pool, err := f.ctx.NewPoolAt(base, capacity)
	if err != nil {
		t.Fatalf("NewPoolAt(%#x, %d): %v", base, capacity, err)
	}
	t.Cleanup(func() { _ = pool.Close() })
	var out *cgc.DeviceMemory
	g, err := s.Capture(&cgc.CaptureOptions{Pool: pool}, func(cs *cgc.Stream) error {
		o, err := f.ctx.Malloc(drawnBytes, cs)
		if err != nil {
			return err
		}
		out = o
		return gen.Uniform(o.Ptr(), draws, cs)
	})
	f.ok(err)
	at := out.Ptr()
	if at < base || at+drawnBytes > base+capacity {
		t.Fatalf("the output at %#x is outside [%#x, %#x)", at, base, base+capacity)
	}
	readWords := func() []uint32 {
		t.Helper()
		got := make([]uint32, draws)
		f.ok(cgc.CopyDeviceToHost(got, at, s))
		f.ok(s.Synchronize())
		return got
	}
	f.ok(g.Launch(s))
	f.ok(s.Synchronize())
	if sd, off, err := gen.State(); err != nil || sd != seed || off != perReplay {
		t.Fatalf("after one replay the generator is at (%d, %d), %v; want (%d, %d)", sd, off, err, seed, perReplay)
	}

	data, err := cgc.SaveGraphs([]*cgc.Graph{g}, nil)
	f.ok(err)
	info, err := cgc.ReadSavedInfo(data)
	f.ok(err)
	if info.NGraphs != 1 || info.NPools != 1 || info.NGenerators != 1 {
		t.Errorf("saved info %+v, want 1 graph, 1 pool, 1 generator", info)
	}
	// What the saving process's next two replays write.
	var want [2][]uint32
	for i := range want {
		f.ok(g.Launch(s))
		want[i] = readWords()
		for k, w := range want[i] {
			if x := math.Float32frombits(w); !(x >= 0 && x < 1) {
				t.Fatalf("replay %d after the save: [%d] = %v, outside [0, 1)", i, k, x)
			}
		}
	}
	if equalWords(want[0], want[1]) {
		t.Fatal("two replays drew the same numbers")
	}

	// Everything goes: the graph, the output, the pool (its range given back), the generator.
	f.ok(g.Destroy())
	f.ok(out.Free())
	f.ok(s.Synchronize())
	f.ok(pool.Close())
	f.ok(gen.Close())

	graphs, pools, rngs, err := f.ctx.RestoreGraphsWithGenerators(data, nil)
	f.ok(err)
	if len(graphs) != 1 || len(pools) != 1 || len(rngs) != 1 {
		t.Fatalf("restored %d graphs, %d pools and %d generators, want 1 of each", len(graphs), len(pools), len(rngs))
	}
	rg, rp, rr := graphs[0], pools[0], rngs[0]
	t.Cleanup(func() { _ = rg.Destroy(); _ = rr.Close(); _ = rp.Close() })
	if sd, off, err := rr.State(); err != nil || sd != seed || off != perReplay {
		t.Errorf("the restored generator is at (%d, %d), %v; want the saved (%d, %d)", sd, off, err, seed, perReplay)
	}
	restored, err := cgc.DeviceMemoryAt(at, drawnBytes)
	f.ok(err)
	for i, words := range want {
		f.ok(rg.Launch(s))
		got := readWords()
		for k := range got {
			if got[k] != words[k] {
				t.Fatalf("restored replay %d: word %d is %#08x, the saving process drew %#08x", i, k, got[k], words[k])
			}
		}
	}
	if sd, off, err := rr.State(); err != nil || sd != seed || off != 3*perReplay {
		t.Errorf("after two restored replays the generator is at (%d, %d), %v; want (%d, %d)", sd, off, err, seed,
			3*perReplay)
	}
	// The caller's reference goes; the graph keeps its own and draws on.
	f.ok(rr.Close())
	f.ok(rg.Launch(s))
	f.ok(s.Synchronize())
	f.ok(rg.Destroy())
	f.ok(restored.Free())
	f.ok(s.Synchronize())
	f.ok(rp.Close())

	// A plain restore leaves the generator to the graph alone, at the same saved state.
	graphs, pools, err = f.ctx.RestoreGraphs(data)
	f.ok(err)
	if len(graphs) != 1 || len(pools) != 1 {
		t.Fatalf("a plain restore gave %d graphs and %d pools, want 1 and 1", len(graphs), len(pools))
	}
	pg, pp := graphs[0], pools[0]
	t.Cleanup(func() { _ = pg.Destroy(); _ = pp.Close() })
	again, err := cgc.DeviceMemoryAt(at, drawnBytes)
	f.ok(err)
	f.ok(pg.Launch(s))
	if got := readWords(); !equalWords(got, want[0]) {
		t.Errorf("a plain restore's first replay drew other numbers than the saving process's next replay")
	}
	f.ok(pg.Destroy())
	f.ok(again.Free())
	f.ok(s.Synchronize())
	f.ok(pp.Close())
	f.closeAll(true)
}

// equalWords reports whether x and y hold the same words.
func equalWords(x, y []uint32) bool {
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		if x[i] != y[i] {
			return false
		}
	}
	return true
}
