// Command fork_join captures a fork/join over three streams with cgc and replays it.
//
// The origin stream draws uniform numbers into x and forks two side streams: side1 draws normal
// numbers into y, side2 uniform numbers into z; both join back. A second graph, sharing the
// first one's memory pool, draws normal numbers into w. Both graphs are replayed a few times;
// every replay draws fresh numbers. Without a GPU it prints the library's message and exits 1.
//
// Run with CGC_LIBRARY=/path/to/libcgc.so.1 unless libcgc.so.1 is on the loader's path.
package main

import (
	"fmt"
	"os"

	cgc "cgc/bindings/go"
)

const n = 1 << 20 // floats per buffer

func main() {
	if count, err := cgc.DeviceCount(); err != nil || count == 0 {
		fmt.Println("cgc fork/join example: no GPU here")
		if err != nil {
			fmt.Println(" ", err)
		}
		os.Exit(1)
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "cgc fork/join example:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, err := cgc.NewContext(0)
	if err != nil {
		return err
	}
	defer ctx.Close()
	var streams [3]*cgc.Stream
	var events [3]*cgc.Event
	for i := range streams {
		if streams[i], err = ctx.NewStream(cgc.StreamNonBlocking, 0); err != nil {
			return err
		}
		defer streams[i].Close()
		if events[i], err = ctx.NewEvent(0); err != nil {
			return err
		}
		defer events[i].Close()
	}
	origin, side1, side2 := streams[0], streams[1], streams[2]
	fork, join1, join2 := events[0], events[1], events[2]
	gen, err := ctx.NewRng(42)
	if err != nil {
		return err
	}
	defer gen.Close()

	// alloc allocates n floats on s; inside a capture they come from the capture's pool and,
	// never freed during it, become the graph's outputs.
	var outputs []*cgc.DeviceMemory
	defer func() {
		for _, m := range outputs {
			m.Free()
		}
	}()
	alloc := func(s *cgc.Stream) (cgc.DevicePtr, error) {
		m, err := ctx.Malloc(4*n, s)
		if err != nil {
			return 0, err
		}
		outputs = append(outputs, m)
		return m.Ptr(), nil
	}

	forkJoin, err := origin.Capture(nil, func(s *cgc.Stream) error {
		x, err := alloc(s)
		if err != nil {
			return err
		}
		if err := gen.Uniform(x, n, s); err != nil {
			return err
		}
		// Fork: the side streams wait on an event recorded in the capture and so join it.
		if err := fork.Record(s); err != nil {
			return err
		}
		for _, side := range []*cgc.Stream{side1, side2} {
			if err := side.WaitEvent(fork); err != nil {
				return err
			}
		}
		y, err := alloc(side1)
		if err != nil {
			return err
		}
		if err := gen.Normal(y, n, 0, 1, side1); err != nil {
			return err
		}
		z, err := alloc(side2)
		if err != nil {
			return err
		}
		if err := gen.Uniform(z, n, side2); err != nil {
			return err
		}
		// Join: the origin waits for both side streams before the capture ends.
		if err := join1.Record(side1); err != nil {
			return err
		}
		if err := join2.Record(side2); err != nil {
			return err
		}
		if err := s.WaitEvent(join1); err != nil {
			return err
		}
		return s.WaitEvent(join2)
	})
	if err != nil {
		return err
	}
	defer forkJoin.Destroy()
	pool, err := forkJoin.Pool()
	if err != nil {
		return err
	}
	defer pool.Close()

	// The second graph allocates from the first one's pool, like torch.cuda.graph(pool=...).
	second, err := origin.Capture(&cgc.CaptureOptions{Pool: pool}, func(s *cgc.Stream) error {
		w, err := alloc(s)
		if err != nil {
			return err
		}
		return gen.Normal(w, n, 0, 1, s)
	})
	if err != nil {
		return err
	}
	defer second.Destroy()

	// Graphs sharing a pool are replayed in capture order, never concurrently.
	for i := 0; i < 5; i++ {
		if err := forkJoin.Launch(origin); err != nil {
			return err
		}
		if err := second.Launch(origin); err != nil {
			return err
		}
	}
	if err := origin.Synchronize(); err != nil {
		return err
	}

	info1, err := forkJoin.Info()
	if err != nil {
		return err
	}
	info2, err := second.Info()
	if err != nil {
		return err
	}
	pool2, err := second.Pool()
	if err != nil {
		return err
	}
	defer pool2.Close()
	stats, err := ctx.MemoryStats(pool)
	if err != nil {
		return err
	}
	shared := "no"
	if pool.Equal(pool2) {
		shared = "yes"
	}
	fmt.Printf("fork/join graph: %d nodes, replayed %d times\n", info1.NodeCount, info1.ReplayCount)
	fmt.Printf("second graph:    %d nodes, replayed %d times\n", info2.NodeCount, info2.ReplayCount)
	fmt.Printf("shared pool: %d bytes reserved\n", stats.BytesReserved)
	fmt.Printf("pool shared: %s\n", shared)
	return nil
}
