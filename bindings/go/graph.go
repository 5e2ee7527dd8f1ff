package cgc

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

// Graph is a captured graph and its executable (cgc_graph_t), like torch.cuda.CUDAGraph.
type Graph struct {
	h      C.cgc_graph_t
	closed bool
}

func newGraph(h C.cgc_graph_t) *Graph {
	g := &Graph{h: h}
	runtime.SetFinalizer(g, (*Graph).Destroy) // safety net only; see the package documentation
	return g
}

func (g *Graph) handle(op string) (C.cgc_graph_t, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	if g == nil {
		return nil, nil
	}
	if g.closed {
		return nil, closedError("graph", op)
	}
	return g.h, nil
}

// GraphInfo describes a graph (cgc_graph_info_t).
type GraphInfo struct {
	NodeCount         int    // the captured nodes (not cgc's own completion record)
	ReplayCount       uint64 // successful launches
	Uploaded          bool   // after Upload or CaptureOptions.Upload
	PoolBytesReserved uint64 // bytes the graph's pool holds

	// The captured nodes by kind (since 1.1; all 0 after Reset). They add up to NodeCount.
	KernelNodes      int
	MemcpyNodes      int
	MemsetNodes      int
	HostNodes        int
	ChildGraphNodes  int
	EmptyNodes       int
	EventWaitNodes   int
	EventRecordNodes int // cgc's own completion record is not counted
	MemAllocNodes    int
	MemFreeNodes     int
	MemOpNodes       int // stream write/wait-value operations and batches of them
	ConditionalNodes int
	OtherNodes       int // kinds not listed (external semaphores, kinds newer than the header)

	// Updates by capture (since 1.2, CaptureOptions.Update).
	UpdateCount uint64      // captures that updated the graph
	LastUpdate  GraphUpdate // how the last one did it
	// LastUpdateResult is the driver's CUgraphExecUpdateResult of the last update: 0 when the
	// executable took the new graph in place, else why it did not (e.g. 2,
	// CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED).
	LastUpdateResult int

	// Families (since 1.6, Graph.ShareExecutable).
	FamilySize int // graphs sharing its executable: 1 with its own, 0 after Reset
	// FamilyResult is why its last join (ShareExecutable) was refused: the driver's
	// CUgraphExecUpdateResult (e.g. 2, topology changed); 0 when none was.
	FamilyResult int
}

// GraphUpdate says how a capture with CaptureOptions.Update changed its graph
// (cgc_graph_update_t, 1.2).
type GraphUpdate int32

// How a graph was updated.
const (
	GraphUpdateNone           GraphUpdate = C.CGC_GRAPH_UPDATE_NONE           // never updated
	GraphUpdateInPlace        GraphUpdate = C.CGC_GRAPH_UPDATE_IN_PLACE       // the executable took the new graph
	GraphUpdateReinstantiated GraphUpdate = C.CGC_GRAPH_UPDATE_REINSTANTIATED // refused by the driver (LastUpdateResult says why): a new executable
)

func (u GraphUpdate) String() string {
	switch u {
	case GraphUpdateNone:
		return "None"
	case GraphUpdateInPlace:
		return "InPlace"
	case GraphUpdateReinstantiated:
		return "Reinstantiated"
	}
	return fmt.Sprintf("GraphUpdate(%d)", int32(u))
}

// Launch replays the graph on s (any stream of the graph's device). It does not synchronise.
// Graphs sharing a pool must be replayed in capture order and never concurrently. Errors:
// ErrInvalidState after Reset.
func (g *Graph) Launch(s *Stream) error {
	h, err := g.handle("Graph.Launch")
	if err != nil {
		return err
	}
	sh, err := s.handle("Graph.Launch")
	if err != nil {
		return err
	}
	var msg *C.char
	err = check(C.cgcgo_graph_launch(h, sh, &msg), msg)
	runtime.KeepAlive(g)
	runtime.KeepAlive(s)
	return err
}

// Upload uploads the executable on s ahead of the first launch.
func (g *Graph) Upload(s *Stream) error {
	h, err := g.handle("Graph.Upload")
	if err != nil {
		return err
	}
	sh, err := s.handle("Graph.Upload")
	if err != nil {
		return err
	}
	var msg *C.char
	err = check(C.cgcgo_graph_upload(h, sh, &msg), msg)
	runtime.KeepAlive(g)
	runtime.KeepAlive(s)
	return err
}

// Info returns the graph's node counts (in all and by kind), replay count, upload state and
// pool size. The counts by kind are asked of the driver at this call.
func (g *Graph) Info() (GraphInfo, error) {
	h, err := g.handle("Graph.Info")
	if err != nil {
		return GraphInfo{}, err
	}
	var info C.cgc_graph_info_t
	var msg *C.char
	err = check(C.cgcgo_graph_info(h, &info, &msg), msg)
	runtime.KeepAlive(g)
	if err != nil {
		return GraphInfo{}, err
	}
	return GraphInfo{
		NodeCount:         int(info.node_count),
		ReplayCount:       uint64(info.replay_count),
		Uploaded:          info.uploaded != 0,
		PoolBytesReserved: uint64(info.pool_bytes_reserved),
		KernelNodes:       int(info.kernel_nodes),
		MemcpyNodes:       int(info.memcpy_nodes),
		MemsetNodes:       int(info.memset_nodes),
		HostNodes:         int(info.host_nodes),
		ChildGraphNodes:   int(info.child_graph_nodes),
		EmptyNodes:        int(info.empty_nodes),
		EventWaitNodes:    int(info.event_wait_nodes),
		EventRecordNodes:  int(info.event_record_nodes),
		MemAllocNodes:     int(info.mem_alloc_nodes),
		MemFreeNodes:      int(info.mem_free_nodes),
		MemOpNodes:        int(info.mem_op_nodes),
		ConditionalNodes:  int(info.conditional_nodes),
		OtherNodes:        int(info.other_nodes),
		UpdateCount:       uint64(info.update_count),
		LastUpdate:        GraphUpdate(info.last_update),
		LastUpdateResult:  int(info.last_update_result),
		FamilySize:        int(info.family_size),
		FamilyResult:      int(info.family_result),
	}, nil
}

// ShareExecutable (1.6, families) makes g give up its own executable and share leader's
// (cgc_graph_share_executable), so that graphs of one topology that differ in their nodes'
// parameters (one per batch size: other buffers, values, grids) hold one executable. A Launch or
// Upload of a member the executable does not hold updates it in place to that member's nodes
// first (no device synchronisation), then launches. Members replay one at a time, in launch
// order, whatever their streams; a Launch while another goroutine launches a member of the same
// family is refused (ErrInvalidState), never waits. Members take no per-node updates
// (SetKernelEnabled, SetKernelArgs) and no updates by capture (ErrInvalidState). Joining the
// family g is in already does nothing. The last member's Reset or Destroy frees the executable;
// GraphInfo.FamilySize counts the members.
//
// ErrNotSupported when the driver refuses to update the executable to g's nodes (another
// topology, other kernels): g keeps its own executable and GraphInfo.FamilyResult says why.
// ErrInvalidArgument for a nil graph or leader, g itself as leader, or graphs of two devices;
// ErrInvalidState after a Reset or per-node updates of either graph, or when g shares another
// family's executable already. Not while another goroutine launches, resets or destroys either
// graph.
func (g *Graph) ShareExecutable(leader *Graph) error {
	const op = "Graph.ShareExecutable"
	h, err := g.handle(op)
	if err != nil {
		return err
	}
	lh, err := leader.handle(op)
	if err != nil {
		return err
	}
	var msg *C.char
	err = check(C.cgcgo_graph_share_executable(h, lh, &msg), msg)
	runtime.KeepAlive(g)
	runtime.KeepAlive(leader)
	return err
}

// Pool returns the pool the graph allocated into, holding a reference of its own: Close the
// returned Pool when done with it; it stays valid after the graph is reset or destroyed. Pass
// it in CaptureOptions.Pool to share it with a later capture (like CUDAGraph.pool()).
// ErrInvalidState after Reset.
func (g *Graph) Pool() (*Pool, error) {
	h, err := g.handle("Graph.Pool")
	if err != nil {
		return nil, err
	}
	var ph C.cgc_pool_t
	var msg *C.char
	err = check(C.cgcgo_graph_pool_retained(h, &ph, &msg), msg)
	runtime.KeepAlive(g)
	if err != nil {
		return nil, err
	}
	return newPool(ph), nil
}

// DebugDump writes the graph in Graphviz DOT form (verbose) to path.
func (g *Graph) DebugDump(path string) error {
	h, err := g.handle("Graph.DebugDump")
	if err != nil {
		return err
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var msg *C.char
	err = check(C.cgcgo_graph_debug_dump(h, cpath, &msg), msg)
	runtime.KeepAlive(g)
	return err
}

// Reset frees the executable and graph now and drops the pool reference, like
// CUDAGraph.reset(); the Graph stays valid (Launch is then ErrInvalidState). Resetting twice is
// fine. Refused (ErrInvalidState) while a capture updates the graph (CaptureOptions.Update).
func (g *Graph) Reset() error {
	h, err := g.handle("Graph.Reset")
	if err != nil {
		return err
	}
	var msg *C.char
	err = check(C.cgcgo_graph_reset(h, &msg), msg)
	runtime.KeepAlive(g)
	return err
}

// Native is the CUgraph behind the handle (0 after Reset). It is owned by the Graph and valid
// until Reset or Destroy.
func (g *Graph) Native() uintptr {
	h, err := g.handle("Graph.Native")
	if err != nil || h == nil {
		return 0
	}
	n := uintptr(C.cgcgo_graph_native(h))
	runtime.KeepAlive(g)
	return n
}

// NativeExec is the CUgraphExec behind the handle (0 after Reset); owned like Native.
func (g *Graph) NativeExec() uintptr {
	h, err := g.handle("Graph.NativeExec")
	if err != nil || h == nil {
		return 0
	}
	n := uintptr(C.cgcgo_graph_native_exec(h))
	runtime.KeepAlive(g)
	return n
}

// SetKernelEnabled enables or disables (1.2) the graph's kernel number kernelIndex: kernels are
// numbered from 0 to GraphInfo.KernelNodes-1 in the order the capture launched them (cgc's own
// kernels, e.g. Rng draws, count too). A disabled kernel does nothing at later replays; what
// depends on it still waits for it. ErrInvalidArgument past the last kernel, ErrInvalidState
// after Reset or while a capture updates the graph. Not while another goroutine launches or
// changes the graph.
func (g *Graph) SetKernelEnabled(kernelIndex int, enabled bool) error {
	const op = "Graph.SetKernelEnabled"
	if err := checkKernelIndex(op, kernelIndex); err != nil {
		return err
	}
	h, err := g.handle(op)
	if err != nil {
		return err
	}
	on := C.int(0)
	if enabled {
		on = 1
	}
	var msg *C.char
	err = check(C.cgcgo_graph_kernel_node_set_enabled(h, C.size_t(kernelIndex), on, &msg), msg)
	runtime.KeepAlive(g)
	return err
}

// SetKernelArgs gives the graph's kernel number kernelIndex (numbered as for SetKernelEnabled)
// new arguments for later replays, e.g. another buffer; the kernel, grid and block stay. args
// are the kernel's parameters in order, taken as Function.Launch takes them, and copied at the
// call; memory they point to must stay valid as long as the graph is replayed. Not while
// another goroutine launches or changes the graph.
func (g *Graph) SetKernelArgs(kernelIndex int, args ...any) error {
	const op = "Graph.SetKernelArgs"
	if err := checkKernelIndex(op, kernelIndex); err != nil {
		return err
	}
	h, err := g.handle(op)
	if err != nil {
		return err
	}
	slots, err := kernelArgSlots(op, args)
	if err != nil {
		return err
	}
	defer C.free(slots)
	var msg *C.char
	err = check(C.cgcgo_graph_kernel_node_set_args(h, C.size_t(kernelIndex), slots, C.size_t(len(args)), &msg), msg)
	runtime.KeepAlive(g)
	return err
}

// checkKernelIndex refuses a negative index, which C's size_t would turn into a huge one.
func checkKernelIndex(op string, kernelIndex int) error {
	if kernelIndex < 0 {
		return &Error{Status: ErrInvalidArgument, Message: fmt.Sprintf("cgc (Go binding): %s: kernelIndex %d is negative", op, kernelIndex)}
	}
	return nil
}

// Destroy resets the graph and frees the handle. Blocks it allocated and never freed are its
// outputs and stay valid. Idempotent; does nothing on nil. Refused (ErrInvalidState) while a
// capture updates the graph (CaptureOptions.Update).
func (g *Graph) Destroy() error {
	if g == nil || g.closed || g.h == nil {
		return nil
	}
	var msg *C.char
	if err := check(C.cgcgo_graph_destroy(g.h, &msg), msg); err != nil {
		return err
	}
	g.h, g.closed = nil, true
	runtime.SetFinalizer(g, nil)
	return nil
}

// Close is Destroy, for io.Closer-style cleanup.
func (g *Graph) Close() error { return g.Destroy() }
