package cgc

/*
#include "shim.h"
*/
import "C"

import (
	"runtime"
	"strconv"
)

// Pool is a private memory pool (cgc_pool_t), like torch.cuda.graph_pool_handle(). Each Pool
// value holds one reference of the caller's, dropped by Close; the pool itself lives on while
// graphs captured into it or blocks allocated from it exist. Since 1.5 a pool may be an NCCL
// pool (Comm.NewPool), whose Close is collective and refused while it is in use, and since 1.6 a
// pool at fixed addresses (Context.NewPoolAt), whose Close is refused likewise.
type Pool struct {
	h      C.cgc_pool_t
	closed bool
	comm   *Comm // 1.5: an NCCL pool's communicator, which the pool holds (kept reachable here)
}

func newPool(h C.cgc_pool_t) *Pool {
	p := &Pool{h: h}
	runtime.SetFinalizer(p, (*Pool).Close) // safety net only; see the package documentation
	return p
}

// NewPool creates a pool to share between captures (CaptureOptions.Pool).
func (c *Context) NewPool() (*Pool, error) {
	ch, err := c.handle("Context.NewPool")
	if err != nil {
		return nil, err
	}
	var h C.cgc_pool_t
	var msg *C.char
	err = check(C.cgcgo_pool_create(ch, &h, &msg), msg)
	runtime.KeepAlive(c)
	if err != nil {
		return nil, err
	}
	return newPool(h), nil
}

// NewPoolAt (1.6) creates a pool whose memory lies at fixed virtual addresses
// (cgc_pool_create_at): [base, base + capacity) is reserved with the driver at exactly base and
// backed with device memory in 2 MiB steps as the pool's allocations need it. Captures
// (CaptureOptions.Pool), Pool.Malloc and Pool.Claim allocate from it as from any pool, but its
// memory never moves and never goes to the device's cache: the same requests in the same order
// get the same addresses, in this process or in another that reserves the same base. base is an
// address to reserve, passed to C as a number and never dereferenced.
//
// ErrInvalidArgument for base 0, capacity 0, or a base or capacity that is not a multiple of
// 2 MiB (of the device's granularity if larger: the message names it); ErrInvalidState when the
// driver cannot reserve that range in this process (part of it is in use, e.g. by another such
// pool). Allocations beyond the capacity get ErrOutOfMemory. Its Close synchronises the device
// and gives the range back; it is refused with ErrInvalidState while a block of it is allocated
// or a graph or capture holds it (and with ErrCaptureUnsupported while a capture is under way on
// its device), and the Pool then stays open: free the blocks, destroy the graphs and call Close
// again. Its finalizer is a safety net only: until Close succeeds the range stays reserved.
func (c *Context) NewPoolAt(base DevicePtr, capacity int) (*Pool, error) {
	if capacity < 0 {
		return nil, sizeError("Context.NewPoolAt", capacity)
	}
	ch, err := c.handle("Context.NewPoolAt")
	if err != nil {
		return nil, err
	}
	var h C.cgc_pool_t
	var msg *C.char
	err = check(C.cgcgo_pool_create_at(ch, C.uintptr_t(base), C.size_t(capacity), &h, &msg), msg)
	runtime.KeepAlive(c)
	if err != nil {
		return nil, err
	}
	return newPool(h), nil
}

func (p *Pool) handle(op string) (C.cgc_pool_t, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	if p == nil {
		return nil, nil
	}
	if p.closed {
		return nil, closedError("pool", op)
	}
	return p.h, nil
}

// Equal reports whether p and q refer to the same pool (e.g. two graphs' Pool results).
func (p *Pool) Equal(q *Pool) bool {
	return p != nil && q != nil && !p.closed && !q.closed && p.h == q.h
}

// Close drops this Pool's reference (cgc_pool_release). Idempotent; does nothing on nil. The
// last release of an NCCL pool (1.5) is collective, on every rank, and refused with
// ErrInvalidState while a block of it is allocated or a graph or capture holds it (and with
// ErrCaptureUnsupported while a capture is under way on its device: it synchronises the
// device); the Pool then stays open: free the blocks, destroy the graphs and call Close again.
// The last release of a pool at fixed addresses (1.6, Context.NewPoolAt) is refused the same
// way (not collective: it gives the range back).
func (p *Pool) Close() error {
	if p == nil || p.closed || p.h == nil {
		return nil
	}
	var msg *C.char
	if err := check(C.cgcgo_pool_release(p.h, &msg), msg); err != nil {
		return err
	}
	p.h, p.closed, p.comm = nil, true, nil
	runtime.SetFinalizer(p, nil)
	return nil
}

// AdoptCapture (1.4) lets a capture that cgc did not begin, one another framework began with the
// driver (torch.cuda.graph with cgc as PyTorch's allocator, or a raw cuStreamBeginCapture),
// allocate from the pool: from this call until EndAdoptedCapture, Context.Malloc on any stream
// taking part in the capture that nativeStream (a CUstream of the pool's device, given as its
// numeric value as for Context.WrapStream) takes part in gets its blocks from the pool, as in a
// capture begun with CaptureOptions.Pool set to it; without an adoption such an allocation is
// refused (ErrCaptureUnsupported).
//
// ErrInvalidState when the stream is not capturing, when its capture is one cgc began, or when
// the pool records another capture (one at a time); ErrCaptureInvalidated for an invalidated
// capture. A nil pool is refused by the library (ErrInvalidArgument). The pool holds a
// reference of its own until the end. cgc does not see the replays of graphs it did not
// instantiate, so once the pool is released its memory never goes to other streams: it returns
// to the driver at Context.EmptyCache.
func (p *Pool) AdoptCapture(nativeStream uintptr) error {
	ph, err := p.handle("Pool.AdoptCapture")
	if err != nil {
		return err
	}
	var msg *C.char
	err = check(C.cgcgo_pool_adopt_capture(ph, C.uintptr_t(nativeStream), &msg), msg)
	runtime.KeepAlive(p)
	return err
}

// EndAdoptedCapture (1.4) ends the adoption begun by AdoptCapture; call it after the capture
// ended (or was abandoned). Allocations on the capture's streams are refused again, and blocks
// freed during it that other streams used are settled. ErrInvalidState when the pool adopts no
// capture.
func (p *Pool) EndAdoptedCapture() error {
	ph, err := p.handle("Pool.EndAdoptedCapture")
	if err != nil {
		return err
	}
	var msg *C.char
	err = check(C.cgcgo_pool_end_adopted_capture(ph, &msg), msg)
	runtime.KeepAlive(p)
	return err
}

// Malloc (1.5) allocates size bytes (512-byte aligned) from the pool outside captures, ordered on
// s (a stream of the pool's device that is not capturing: inside a capture the capture's pool
// decides, and Malloc is refused with ErrCaptureUnsupported). Size 0 gives a block with address
// 0. Blocks allocated so are reused only by Pool.Malloc on the same stream, never by a capture,
// so a pool's graph memory and its eager memory stay apart. An NCCL pool (Comm.NewPool) never
// grows, and a pool at fixed addresses (Context.NewPoolAt) grows only within its range: beyond
// its capacity Malloc is ErrOutOfMemory. Free the block with DeviceMemory.Free.
func (p *Pool) Malloc(size int, s *Stream) (*DeviceMemory, error) {
	if size < 0 {
		return nil, sizeError("Pool.Malloc", size)
	}
	ph, err := p.handle("Pool.Malloc")
	if err != nil {
		return nil, err
	}
	sh, err := s.handle("Pool.Malloc")
	if err != nil {
		return nil, err
	}
	var out C.uintptr_t
	var msg *C.char
	err = check(C.cgcgo_pool_malloc(ph, C.size_t(size), sh, &out, &msg), msg)
	runtime.KeepAlive(p)
	runtime.KeepAlive(s)
	if err != nil {
		return nil, err
	}
	return &DeviceMemory{ptr: DevicePtr(out), size: size}, nil
}

// Claim (1.6) allocates exactly [ptr, ptr + size rounded up to 512) from the pool's free memory
// (cgc_pool_claim), as a block at ptr freed like Malloc's (DeviceMemory.Free): a range the pool
// holds and no block of it uses, after its free neighbours are merged. The block keeps the stream
// of the free memory it is cut from, so it is reused as that memory would have been. It puts a
// pool back to a state it had (its live blocks at their addresses, like PyTorch's
// setCheckpointPoolState). ErrInvalidState when the range is not wholly free memory of the pool
// (the message says what holds it); ErrInvalidArgument for a 0 or unaligned ptr or size 0;
// ErrNotSupported for an NCCL pool (Comm.NewPool).
func (p *Pool) Claim(ptr DevicePtr, size int) (*DeviceMemory, error) {
	if size < 0 {
		return nil, sizeError("Pool.Claim", size)
	}
	ph, err := p.handle("Pool.Claim")
	if err != nil {
		return nil, err
	}
	var msg *C.char
	err = check(C.cgcgo_pool_claim(ph, C.uintptr_t(ptr), C.size_t(size), &msg), msg)
	runtime.KeepAlive(p)
	if err != nil {
		return nil, err
	}
	return &DeviceMemory{ptr: ptr, size: size}, nil
}

// DevicePtr is a device address (a CUdeviceptr), kept as a number because it is not host
// memory.
type DevicePtr uintptr

// DeviceMemory is a block of cgc's stream-ordered caching allocator. During a capture on its
// stream the block comes from the capture's pool; a block allocated in a capture and never
// freed is the graph's output and stays valid after the graph is destroyed.
//
// DeviceMemory has no finalizer: its address usually escapes to graphs and kernels Go cannot
// see, so it is freed only by Free.
type DeviceMemory struct {
	ptr   DevicePtr
	size  int
	freed bool
}

func sizeError(op string, n int) error {
	return &Error{Status: ErrInvalidArgument, Message: "cgc (Go binding): " + op + ": negative size " + strconv.Itoa(n)}
}

// Malloc allocates size bytes (512-byte aligned), ordered on s. Size 0 gives a block with
// address 0. ErrOutOfMemory comes after the cache was emptied and the allocation retried
// (never during a capture), with the sizes in the message.
func (c *Context) Malloc(size int, s *Stream) (*DeviceMemory, error) {
	if size < 0 {
		return nil, sizeError("Context.Malloc", size)
	}
	ch, err := c.handle("Context.Malloc")
	if err != nil {
		return nil, err
	}
	sh, err := s.handle("Context.Malloc")
	if err != nil {
		return nil, err
	}
	var p C.uintptr_t
	var msg *C.char
	err = check(C.cgcgo_malloc(ch, C.size_t(size), sh, &p, &msg), msg)
	runtime.KeepAlive(c)
	runtime.KeepAlive(s)
	if err != nil {
		return nil, err
	}
	return &DeviceMemory{ptr: DevicePtr(p), size: size}, nil
}

// DeviceMemoryAt (1.6) is a block of cgc's allocator at ptr, of size bytes, that the caller owns
// and nothing else frees, as a DeviceMemory whose Free frees it (cgc_free): a block that
// Context.RestoreGraphs claimed at the address it had when its graphs were saved, which the
// application knows from the saving process, or an address kept from another DeviceMemory's
// Ptr. The library refuses Free (ErrInvalidArgument) for an address that is no live block.
// ErrInvalidArgument (the binding's) for a negative size.
func DeviceMemoryAt(ptr DevicePtr, size int) (*DeviceMemory, error) {
	if size < 0 {
		return nil, sizeError("DeviceMemoryAt", size)
	}
	return &DeviceMemory{ptr: ptr, size: size}, nil
}

// Ptr is the block's device address (0 after Free).
func (m *DeviceMemory) Ptr() DevicePtr {
	if m == nil || m.freed {
		return 0
	}
	return m.ptr
}

// Size is the size asked of Malloc.
func (m *DeviceMemory) Size() int {
	if m == nil {
		return 0
	}
	return m.size
}

// Free returns the block to the allocator, ordered on its allocation stream. Idempotent; does
// nothing on nil.
func (m *DeviceMemory) Free() error {
	if m == nil || m.freed {
		return nil
	}
	if m.ptr != 0 {
		var msg *C.char
		if err := check(C.cgcgo_free(C.uintptr_t(m.ptr), &msg), msg); err != nil {
			return err
		}
	}
	m.freed = true
	return nil
}

// RecordStream notes that work on s uses the block too (like Tensor.record_stream), so that
// after Free it is not reused before that work is done.
func (m *DeviceMemory) RecordStream(s *Stream) error {
	if m == nil || m.freed {
		return &Error{Status: ErrInvalidArgument, Message: "cgc (Go binding): DeviceMemory.RecordStream: nil or freed block"}
	}
	sh, err := s.handle("DeviceMemory.RecordStream")
	if err != nil {
		return err
	}
	var msg *C.char
	err = check(C.cgcgo_record_stream(C.uintptr_t(m.ptr), sh, &msg), msg)
	runtime.KeepAlive(s)
	return err
}

// RecordStreamNative (1.4) is RecordStream for a native CUstream cgc has no Stream for (a
// framework's), given as its numeric value as for Context.WrapStream: after Free the block is not
// reused before the work enqueued on nativeStream so far is done. The stream is taken as one of
// the block's device.
func (m *DeviceMemory) RecordStreamNative(nativeStream uintptr) error {
	if m == nil || m.freed {
		return &Error{Status: ErrInvalidArgument, Message: "cgc (Go binding): DeviceMemory.RecordStreamNative: nil or freed block"}
	}
	if err := Load(); err != nil {
		return err
	}
	var msg *C.char
	return check(C.cgcgo_record_stream_native(C.uintptr_t(m.ptr), C.uintptr_t(nativeStream), &msg), msg)
}

// EmptyCache gives the device cache's unused segments back to the driver; referenced pools
// keep theirs. ErrInvalidState while a capture is under way.
func (c *Context) EmptyCache() error {
	ch, err := c.handle("Context.EmptyCache")
	if err != nil {
		return err
	}
	var msg *C.char
	err = check(C.cgcgo_empty_cache(ch, &msg), msg)
	runtime.KeepAlive(c)
	return err
}

// MemoryStats are the allocator's counters (cgc_memory_stats_t).
type MemoryStats struct {
	BytesReserved      uint64 // obtained from the driver
	BytesAllocated     uint64 // handed out and not yet freed (block sizes, 512-byte rounded)
	PeakBytesAllocated uint64
	PeakBytesReserved  uint64
	NumDriverAllocs    uint64 // cuMemAlloc calls so far
	NumDriverFrees     uint64
}

// MemoryStats returns the statistics of one pool, or of the whole device when pool is nil.
func (c *Context) MemoryStats(pool *Pool) (MemoryStats, error) {
	ch, err := c.handle("Context.MemoryStats")
	if err != nil {
		return MemoryStats{}, err
	}
	var ph C.cgc_pool_t
	if pool != nil {
		if ph, err = pool.handle("Context.MemoryStats"); err != nil {
			return MemoryStats{}, err
		}
	}
	var st C.cgc_memory_stats_t
	var msg *C.char
	err = check(C.cgcgo_memory_stats(ch, ph, &st, &msg), msg)
	runtime.KeepAlive(c)
	runtime.KeepAlive(pool)
	if err != nil {
		return MemoryStats{}, err
	}
	return MemoryStats{
		BytesReserved:      uint64(st.bytes_reserved),
		BytesAllocated:     uint64(st.bytes_allocated),
		PeakBytesAllocated: uint64(st.peak_bytes_allocated),
		PeakBytesReserved:  uint64(st.peak_bytes_reserved),
		NumDriverAllocs:    uint64(st.num_driver_allocs),
		NumDriverFrees:     uint64(st.num_driver_frees),
	}, nil
}
