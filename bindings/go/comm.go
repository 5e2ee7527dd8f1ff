package cgc

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

// DataType is an element type of a collective (the values of ncclDataType_t).
type DataType int32

// Element types.
const (
	Int8     DataType = C.CGC_INT8
	Uint8    DataType = C.CGC_UINT8
	Int32    DataType = C.CGC_INT32
	Uint32   DataType = C.CGC_UINT32
	Int64    DataType = C.CGC_INT64
	Uint64   DataType = C.CGC_UINT64
	Float16  DataType = C.CGC_FLOAT16
	Float32  DataType = C.CGC_FLOAT32
	Float64  DataType = C.CGC_FLOAT64
	BFloat16 DataType = C.CGC_BFLOAT16
)

// ReduceOp is a reduction (the values of ncclRedOp_t).
type ReduceOp int32

// Reductions.
const (
	Sum  ReduceOp = C.CGC_SUM
	Prod ReduceOp = C.CGC_PROD
	Max  ReduceOp = C.CGC_MAX
	Min  ReduceOp = C.CGC_MIN
	Avg  ReduceOp = C.CGC_AVG
)

// NCCLMemory is the kind of memory of an NCCL pool (cgc_nccl_memory_t, 1.5): what NCCL reaches
// at its best. The kinds are ordered, worst first, so got <= wanted compares them.
type NCCLMemory int32

// Kinds of NCCL pool memory.
const (
	NCCLMemoryPlain      NCCLMemory = C.CGC_NCCL_MEMORY_PLAIN      // cuMemAlloc'ed, not registered with the communicator
	NCCLMemoryRegistered NCCLMemory = C.CGC_NCCL_MEMORY_REGISTERED // ncclMemAlloc'ed and registered (ncclCommRegister, NCCL >= 2.19)
	NCCLMemorySymmetric  NCCLMemory = C.CGC_NCCL_MEMORY_SYMMETRIC  // ncclMemAlloc'ed, a symmetric window (ncclCommWindowRegister, NCCL >= 2.27)
)

func (k NCCLMemory) String() string {
	switch k {
	case NCCLMemoryPlain:
		return "Plain"
	case NCCLMemoryRegistered:
		return "Registered"
	case NCCLMemorySymmetric:
		return "Symmetric"
	}
	return fmt.Sprintf("NCCLMemory(%d)", int32(k))
}

// CommID is an ncclUniqueId: make it on one rank with NewCommID and pass its bytes to the
// others.
type CommID [128]byte

// NCCLVersion is NCCL's version code (e.g. 22809 for 2.28.9). ErrNCCLUnavailable without
// libnccl.so.2 (CGC_NCCL_LIBRARY names another file).
func NCCLVersion() (int, error) {
	if err := Load(); err != nil {
		return 0, err
	}
	var v C.int
	var msg *C.char
	if err := check(C.cgcgo_nccl_version(&v, &msg), msg); err != nil {
		return 0, err
	}
	return int(v), nil
}

// NewCommID makes a new unique id for NewComm.
func NewCommID() (CommID, error) {
	var id CommID
	if err := Load(); err != nil {
		return id, err
	}
	var msg *C.char
	// CommID and cgc_comm_id_t are both 128 plain bytes.
	err := check(C.cgcgo_comm_unique_id((*C.cgc_comm_id_t)(unsafe.Pointer(&id)), &msg), msg)
	return id, err
}

// Comm is an NCCL communicator (cgc_comm_t). Collectives on a capturing stream are captured
// and run at every replay; every rank must enqueue collectives and launch graphs holding them
// in the same order. NCCL does not allow concurrent calls on one communicator and cgc adds no
// lock, so the collectives and point-to-point calls of one Comm are serialised here (Abort is
// not: it is meant to unblock one of them).
type Comm struct {
	h       C.cgc_comm_t
	closed  bool
	enqueue sync.Mutex
}

// NewComm joins rank `rank` of nranks on the context's device; it blocks until every rank has
// joined. Refused (ErrCaptureUnsupported) while a capture is under way.
func (c *Context) NewComm(nranks int, id CommID, rank int) (*Comm, error) {
	ch, err := c.handle("Context.NewComm")
	if err != nil {
		return nil, err
	}
	var h C.cgc_comm_t
	var msg *C.char
	err = check(C.cgcgo_comm_create(ch, C.int(nranks), (*C.cgc_comm_id_t)(unsafe.Pointer(&id)), C.int(rank), &h, &msg), msg)
	runtime.KeepAlive(c)
	if err != nil {
		return nil, err
	}
	cm := &Comm{h: h}
	runtime.SetFinalizer(cm, (*Comm).Close) // safety net only; see the package documentation
	return cm, nil
}

func (cm *Comm) handle(op string) (C.cgc_comm_t, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	if cm == nil {
		return nil, nil
	}
	if cm.closed {
		return nil, closedError("communicator", op)
	}
	return cm.h, nil
}

// lock takes the communicator's enqueue lock and returns its release (nothing to lock on nil,
// which the library refuses).
func (cm *Comm) lock() func() {
	if cm == nil {
		return func() {}
	}
	cm.enqueue.Lock()
	return cm.enqueue.Unlock
}

// collective fetches both handles and checks the count, the preamble of every collective.
func (cm *Comm) collective(op string, count int, s *Stream) (C.cgc_comm_t, C.cgc_stream_t, error) {
	if count < 0 {
		return nil, nil, sizeError(op, count)
	}
	h, err := cm.handle(op)
	if err != nil {
		return nil, nil, err
	}
	sh, err := s.handle(op)
	return h, sh, err
}

// AllReduce reduces count elements of send across ranks into recv (which may equal send).
func (cm *Comm) AllReduce(send, recv DevicePtr, count int, dtype DataType, op ReduceOp, s *Stream) error {
	h, sh, err := cm.collective("Comm.AllReduce", count, s)
	if err != nil {
		return err
	}
	var msg *C.char
	unlock := cm.lock()
	err = check(C.cgcgo_all_reduce(h, C.uintptr_t(send), C.uintptr_t(recv), C.size_t(count), C.int(dtype), C.int(op), sh, &msg), msg)
	unlock()
	runtime.KeepAlive(cm)
	runtime.KeepAlive(s)
	return err
}

// AllGather gathers sendCount elements from every rank into recv (nranks*sendCount elements).
func (cm *Comm) AllGather(send, recv DevicePtr, sendCount int, dtype DataType, s *Stream) error {
	h, sh, err := cm.collective("Comm.AllGather", sendCount, s)
	if err != nil {
		return err
	}
	var msg *C.char
	unlock := cm.lock()
	err = check(C.cgcgo_all_gather(h, C.uintptr_t(send), C.uintptr_t(recv), C.size_t(sendCount), C.int(dtype), sh, &msg), msg)
	unlock()
	runtime.KeepAlive(cm)
	runtime.KeepAlive(s)
	return err
}

// ReduceScatter reduces send (nranks*recvCount elements) and leaves each rank its recvCount.
func (cm *Comm) ReduceScatter(send, recv DevicePtr, recvCount int, dtype DataType, op ReduceOp, s *Stream) error {
	h, sh, err := cm.collective("Comm.ReduceScatter", recvCount, s)
	if err != nil {
		return err
	}
	var msg *C.char
	unlock := cm.lock()
	err = check(C.cgcgo_reduce_scatter(h, C.uintptr_t(send), C.uintptr_t(recv), C.size_t(recvCount), C.int(dtype), C.int(op), sh, &msg), msg)
	unlock()
	runtime.KeepAlive(cm)
	runtime.KeepAlive(s)
	return err
}

// Broadcast copies count elements of root's send into every rank's recv.
func (cm *Comm) Broadcast(send, recv DevicePtr, count int, dtype DataType, root int, s *Stream) error {
	h, sh, err := cm.collective("Comm.Broadcast", count, s)
	if err != nil {
		return err
	}
	var msg *C.char
	unlock := cm.lock()
	err = check(C.cgcgo_broadcast(h, C.uintptr_t(send), C.uintptr_t(recv), C.size_t(count), C.int(dtype), C.int(root), sh, &msg), msg)
	unlock()
	runtime.KeepAlive(cm)
	runtime.KeepAlive(s)
	return err
}

// Send sends count elements of buf to rank peer.
func (cm *Comm) Send(buf DevicePtr, count int, dtype DataType, peer int, s *Stream) error {
	h, sh, err := cm.collective("Comm.Send", count, s)
	if err != nil {
		return err
	}
	var msg *C.char
	unlock := cm.lock()
	err = check(C.cgcgo_send(h, C.uintptr_t(buf), C.size_t(count), C.int(dtype), C.int(peer), sh, &msg), msg)
	unlock()
	runtime.KeepAlive(cm)
	runtime.KeepAlive(s)
	return err
}

// Recv receives count elements from rank peer into buf.
func (cm *Comm) Recv(buf DevicePtr, count int, dtype DataType, peer int, s *Stream) error {
	h, sh, err := cm.collective("Comm.Recv", count, s)
	if err != nil {
		return err
	}
	var msg *C.char
	unlock := cm.lock()
	err = check(C.cgcgo_recv(h, C.uintptr_t(buf), C.size_t(count), C.int(dtype), C.int(peer), sh, &msg), msg)
	unlock()
	runtime.KeepAlive(cm)
	runtime.KeepAlive(s)
	return err
}

// GroupStart opens an NCCL group (ncclGroupStart). NCCL's groups are per OS thread: lock the
// goroutine with runtime.LockOSThread until GroupEnd.
func GroupStart() error {
	if err := Load(); err != nil {
		return err
	}
	var msg *C.char
	return check(C.cgcgo_group_start(&msg), msg)
}

// GroupEnd closes the group opened by GroupStart on this OS thread.
func GroupEnd() error {
	if err := Load(); err != nil {
		return err
	}
	var msg *C.char
	return check(C.cgcgo_group_end(&msg), msg)
}

// Abort aborts the communicator's outstanding work; it may be called from another goroutine to
// unblock a hung collective. Afterwards only Close may be called.
func (cm *Comm) Abort() error {
	h, err := cm.handle("Comm.Abort")
	if err != nil {
		return err
	}
	var msg *C.char
	err = check(C.cgcgo_comm_abort(h, &msg), msg)
	runtime.KeepAlive(cm)
	return err
}

// NewPool (1.5) makes a pool of capacity bytes (rounded up to 2 MiB) of memory registered with
// the communicator, at once, on its device; the pool never grows (Pool.Malloc and captures get
// ErrOutOfMemory beyond it). Collective: every rank calls it with the same capacity and kind.
// It returns the pool and the kind it got: wanted is the best kind asked for, and an older NCCL
// gives the next one down (NCCLMemorySymmetric -> NCCLMemoryRegistered -> NCCLMemoryPlain).
// Ranks that got different kinds are refused on every rank (ErrInvalidState): NCCL leaves mixing
// registered and unregistered buffers undefined. For NCCL's symmetric kernels every rank must
// allocate from the pool in the same order with the same sizes.
//
// Captures allocate from the pool through CaptureOptions.Pool, eager code through Pool.Malloc.
// Its Close is collective too and refused while the pool is in use (see Pool.Close); the pool
// holds the communicator, whose Close is refused meanwhile. An NCCL pool has no finalizer: a
// collective release cannot run at a time the garbage collector picks, so a forgotten Close
// leaks the pool and keeps the communicator.
func (cm *Comm) NewPool(capacity int, wanted NCCLMemory) (*Pool, NCCLMemory, error) {
	if capacity < 0 {
		return nil, NCCLMemoryPlain, sizeError("Comm.NewPool", capacity)
	}
	h, err := cm.handle("Comm.NewPool")
	if err != nil {
		return nil, NCCLMemoryPlain, err
	}
	var ph C.cgc_pool_t
	var got C.int
	var msg *C.char
	// The creation registers memory with the communicator and runs a collective on it.
	unlock := cm.lock()
	err = check(C.cgcgo_nccl_pool_create(h, C.size_t(capacity), C.int(wanted), &ph, &got, &msg), msg)
	unlock()
	runtime.KeepAlive(cm)
	if err != nil {
		return nil, NCCLMemoryPlain, err
	}
	return &Pool{h: ph, comm: cm}, NCCLMemory(got), nil
}

// Close destroys the communicator. Idempotent; does nothing on nil. Refused (ErrInvalidState,
// the communicator stays open) while graphs holding its collectives or NCCL pools made from it
// (1.5) exist.
func (cm *Comm) Close() error {
	if cm == nil || cm.closed || cm.h == nil {
		return nil
	}
	var msg *C.char
	if err := check(C.cgcgo_comm_destroy(cm.h, &msg), msg); err != nil {
		return err
	}
	cm.h, cm.closed = nil, true
	runtime.SetFinalizer(cm, nil)
	return nil
}
