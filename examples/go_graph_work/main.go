// Command graph_work captures the work a graph is made of with cgc and replays it with new
// values each time (the Go version of examples/c/graph_work.c).
//
// It loads the examples' own kernel (examples/kernels/scale_add.ptx), copies the input in, and
// captures one graph on two streams with a fork/join:
//
//	origin: set flag = 0, copy the per-replay parameters in from page-locked host memory, fork ->
//	side:   kernel out = in * params[0] + params[1], write flag = 1 (a stream memory operation),
//	        join ->
//	origin: wait until flag == 1, copy out to page-locked host memory, host function (counts
//	        replays).
//
// Then it replays the graph three times with new parameters written into host memory between
// replays (no recapture), checks every output on the host, and prints the graph's nodes by kind.
// Without a GPU it prints the library's message and exits 1.
//
//	go build && ./graph_work [-ptx path/to/scale_add.ptx]
//
// Run with CGC_LIBRARY=/path/to/libcgc.so.1 unless libcgc.so.1 is on the loader's path.
package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	cgc "cgc/bindings/go"
)

const (
	count   = 4096 // floats per buffer
	replays = 3
	block   = 256 // threads per block
)

func main() {
	ptxPath := flag.String("ptx", "", "the kernel's PTX file (default: ../kernels/scale_add.ptx from this "+
		"example's directory, else examples/kernels/scale_add.ptx, else scale_add.ptx beside the binary)")
	flag.Parse()
	if n, err := cgc.DeviceCount(); err != nil || n == 0 {
		fmt.Println("cgc graph-work example: no GPU here")
		if err != nil {
			fmt.Println(" ", err)
		}
		os.Exit(1)
	}
	if err := run(*ptxPath); err != nil {
		fmt.Fprintln(os.Stderr, "cgc graph-work example:", err)
		os.Exit(1)
	}
	fmt.Println("ok: every replay saw its own parameters")
}

// readPTX reads the kernel's PTX from path or, when path is empty, from where the repository
// and the GPU bundle keep it.
func readPTX(path string) ([]byte, error) {
	candidates := []string{path}
	if path == "" {
		candidates = []string{
			filepath.Join("..", "kernels", "scale_add.ptx"),       // run from examples/go_graph_work
			filepath.Join("examples", "kernels", "scale_add.ptx"), // run from the repository's root
		}
		if exe, err := os.Executable(); err == nil {
			candidates = append(candidates, filepath.Join(filepath.Dir(exe), "scale_add.ptx")) // the bundle
		}
	}
	for _, c := range candidates {
		if ptx, err := os.ReadFile(c); err == nil {
			return ptx, nil
		} else if path != "" || !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("cannot read the kernel's PTX: %w", err)
		}
	}
	return nil, fmt.Errorf("cannot find the kernel's PTX (tried %s): pass -ptx path/to/scale_add.ptx",
		strings.Join(candidates, ", "))
}

// inOrder runs steps until one fails, and returns its error.
func inOrder(steps ...func() error) error {
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

func run(ptxPath string) error {
	ptx, err := readPTX(ptxPath)
	if err != nil {
		return err
	}
	ctx, err := cgc.NewContext(0)
	if err != nil {
		return err
	}
	defer ctx.Close()
	origin, err := ctx.NewStream(cgc.StreamNonBlocking, 0)
	if err != nil {
		return err
	}
	defer origin.Close()
	side, err := ctx.NewStream(cgc.StreamNonBlocking, 0)
	if err != nil {
		return err
	}
	defer side.Close()
	fork, err := ctx.NewEvent(0)
	if err != nil {
		return err
	}
	defer fork.Close()
	join, err := ctx.NewEvent(0)
	if err != nil {
		return err
	}
	defer join.Close()
	module, err := ctx.LoadModule(ptx) // LoadModule adds the NUL that PTX text needs
	if err != nil {
		return err
	}
	defer module.Close()
	scaleAdd, err := module.Function("scale_add")
	if err != nil {
		return err
	}

	// Page-locked host memory: what a captured copy reads or writes at every replay.
	var hostBuffers []*cgc.HostBuffer
	defer func() {
		for _, b := range hostBuffers {
			b.Free()
		}
	}()
	hostFloats := func(n int) ([]float32, error) {
		b, err := ctx.HostAlloc(4*n, 0)
		if err != nil {
			return nil, err
		}
		hostBuffers = append(hostBuffers, b)
		return cgc.HostSlice[float32](b), nil
	}
	hostIn, err := hostFloats(count)
	if err != nil {
		return err
	}
	hostOut, err := hostFloats(count)
	if err != nil {
		return err
	}
	hostParams, err := hostFloats(2)
	if err != nil {
		return err
	}
	for i := range hostIn {
		hostIn[i] = float32(i%97) * 0.25
	}

	var blocks []*cgc.DeviceMemory
	defer func() {
		for _, m := range blocks {
			m.Free()
		}
	}()
	deviceBytes := func(n int) (*cgc.DeviceMemory, error) {
		m, err := ctx.Malloc(n, origin)
		if err != nil {
			return nil, err
		}
		blocks = append(blocks, m)
		return m, nil
	}
	in, err := deviceBytes(4 * count)
	if err != nil {
		return err
	}
	out, err := deviceBytes(4 * count)
	if err != nil {
		return err
	}
	params, err := deviceBytes(8)
	if err != nil {
		return err
	}
	flagWord, err := deviceBytes(4)
	if err != nil {
		return err
	}
	if err := cgc.CopyHostToDevice(in.Ptr(), hostIn, origin); err != nil {
		return err
	}
	if err := origin.Synchronize(); err != nil {
		return err
	}
	// in, out, params and the flag are used on the side stream too.
	for _, m := range blocks {
		if err := m.RecordStream(side); err != nil {
			return err
		}
	}

	var replaysSeen atomic.Int32
	grid := cgc.Dim3{X: (count + block - 1) / block, Y: 1, Z: 1}
	threads := cgc.Dim3{X: block, Y: 1, Z: 1}
	graph, err := origin.Capture(nil, func(s *cgc.Stream) error {
		return inOrder(
			func() error { return cgc.Memset32(flagWord.Ptr(), 0, 1, s) },
			func() error { return cgc.CopyHostToDevice(params.Ptr(), hostParams, s) },
			func() error { return fork.Record(s) },
			func() error { return side.WaitEvent(fork) }, // fork: the side stream joins the capture
			// The arguments' values are captured now; the per-replay values come through params.
			func() error { return scaleAdd.Launch(grid, threads, 0, side, out, in, params, uint32(count)) },
			func() error { return side.WriteValue32(flagWord.Ptr(), 1, 0) },
			func() error { return join.Record(side) },
			func() error { return s.WaitEvent(join) }, // join
			func() error { return s.WaitValue32(flagWord.Ptr(), 1, cgc.WaitEQ) },
			func() error { return cgc.CopyDeviceToHost(hostOut, out.Ptr(), s) },
			// Runs at every replay on a driver thread; it must not call cgc or CUDA.
			func() error { return s.LaunchHostFunc(func() { replaysSeen.Add(1) }, nil) },
		)
	})
	if err != nil {
		return err
	}
	defer graph.Destroy()

	failures := 0
	for r := 1; r <= replays; r++ {
		scale, shift := float32(r), 10*float32(r)
		// Per-replay parameters: written on the host, copied in by the graph.
		hostParams[0], hostParams[1] = scale, shift
		if err := graph.Launch(origin); err != nil {
			return err
		}
		if err := origin.Synchronize(); err != nil {
			return err
		}
		for i, got := range hostOut {
			want := hostIn[i]*scale + shift
			if math.Abs(float64(got-want)) > 1e-4*math.Abs(float64(want))+1e-6 {
				if failures < 5 {
					fmt.Fprintf(os.Stderr, "replay %d: out[%d] = %g, want %g\n", r, i, got, want)
				}
				failures++
			}
		}
		fmt.Printf("replay %d: scale %g, shift %g: out[1] = %g, host function ran %d time(s)\n",
			r, scale, shift, hostOut[1], replaysSeen.Load())
	}
	info, err := graph.Info()
	if err != nil {
		return err
	}
	fmt.Printf("graph: %d nodes: %d kernel, %d copies, %d set, %d host, %d memory operations, %d event\n",
		info.NodeCount, info.KernelNodes, info.MemcpyNodes, info.MemsetNodes, info.HostNodes, info.MemOpNodes,
		info.EventRecordNodes+info.EventWaitNodes)
	if n := replaysSeen.Load(); n != replays {
		return fmt.Errorf("the host function ran %d times, want %d", n, replays)
	}
	if failures > 0 {
		return fmt.Errorf("%d wrong outputs", failures)
	}
	return nil
}
