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

// Stream memory operations (cuStreamWriteValue32 and its kin): a write of a value to a 4- or
// 8-byte aligned device address, or a wait until the value there meets a condition, in stream
// order. Captured, they become memory-operation nodes: two streams, or two graphs, hand work
// over through a flag this way without the host. Where the device lacks them (64-bit
// operations, WaitNor and WaitFlush have capabilities of their own) they fail with
// ErrNotSupported and the reason. A wait for a value no work will write hangs the stream.

// WaitFlags are the condition of a wait (the values of CUstreamWaitValue_flags).
type WaitFlags uint32

// Wait conditions; WaitFlush may be or'ed with one of the others.
const (
	WaitGEQ   WaitFlags = C.CGC_WAIT_GEQ   // until (int32)(*addr - value) >= 0: a counter that wraps
	WaitEQ    WaitFlags = C.CGC_WAIT_EQ    // until *addr == value
	WaitAnd   WaitFlags = C.CGC_WAIT_AND   // until (*addr & value) != 0
	WaitNor   WaitFlags = C.CGC_WAIT_NOR   // until ^(*addr | value) != 0 (devices with the NOR capability)
	WaitFlush WaitFlags = C.CGC_WAIT_FLUSH // also make remote writes before the wait visible
)

// Writes take flags 0: a write is ordered after the stream's earlier writes (the driver's v2
// operations have no unordered write). A batch may hold a barrier (MemOpBarrier), whose flags
// say its scope.

// BarrierFlags are the scope of a barrier (the values of CUstreamMemoryBarrier_flags).
type BarrierFlags uint32

// Barrier scopes.
const (
	BarrierSystem BarrierFlags = C.CGC_BARRIER_SYSTEM // earlier writes visible to the whole system (host, peers)
	BarrierGPU    BarrierFlags = C.CGC_BARRIER_GPU    // earlier writes visible to the device
)

// WriteValue32 writes value to the 4-byte aligned device address when the stream gets there.
// flags must be 0 (writes take no flags; any other value is ErrInvalidArgument).
func (s *Stream) WriteValue32(address DevicePtr, value uint32, flags uint32) error {
	h, err := s.handle("Stream.WriteValue32")
	if err != nil {
		return err
	}
	var msg *C.char
	err = check(C.cgcgo_stream_write_value32(h, C.uintptr_t(address), C.uint32_t(value), C.uint(flags), &msg), msg)
	runtime.KeepAlive(s)
	return err
}

// WriteValue64 writes value to the 8-byte aligned device address when the stream gets there.
// flags must be 0.
func (s *Stream) WriteValue64(address DevicePtr, value uint64, flags uint32) error {
	h, err := s.handle("Stream.WriteValue64")
	if err != nil {
		return err
	}
	var msg *C.char
	err = check(C.cgcgo_stream_write_value64(h, C.uintptr_t(address), C.uint64_t(value), C.uint(flags), &msg), msg)
	runtime.KeepAlive(s)
	return err
}

// WaitValue32 makes later work on the stream wait until the 32-bit value at the device address
// meets the condition flags names with value.
func (s *Stream) WaitValue32(address DevicePtr, value uint32, flags WaitFlags) error {
	h, err := s.handle("Stream.WaitValue32")
	if err != nil {
		return err
	}
	var msg *C.char
	err = check(C.cgcgo_stream_wait_value32(h, C.uintptr_t(address), C.uint32_t(value), C.uint(flags), &msg), msg)
	runtime.KeepAlive(s)
	return err
}

// WaitValue64 is WaitValue32 on an 8-byte aligned 64-bit value.
func (s *Stream) WaitValue64(address DevicePtr, value uint64, flags WaitFlags) error {
	h, err := s.handle("Stream.WaitValue64")
	if err != nil {
		return err
	}
	var msg *C.char
	err = check(C.cgcgo_stream_wait_value64(h, C.uintptr_t(address), C.uint64_t(value), C.uint(flags), &msg), msg)
	runtime.KeepAlive(s)
	return err
}

// MemOpKind is the kind of one operation of a batch (the values of CUstreamBatchMemOpType).
type MemOpKind int32

// Operation kinds.
const (
	MemOpWaitValue32       MemOpKind = C.CGC_MEM_OP_WAIT_VALUE_32
	MemOpWriteValue32      MemOpKind = C.CGC_MEM_OP_WRITE_VALUE_32
	MemOpFlushRemoteWrites MemOpKind = C.CGC_MEM_OP_FLUSH_REMOTE_WRITES
	MemOpWaitValue64       MemOpKind = C.CGC_MEM_OP_WAIT_VALUE_64
	MemOpWriteValue64      MemOpKind = C.CGC_MEM_OP_WRITE_VALUE_64
	MemOpBarrier           MemOpKind = C.CGC_MEM_OP_BARRIER // batches only: a memory barrier (Flags: BarrierFlags)
)

func (k MemOpKind) String() string {
	switch k {
	case MemOpWaitValue32:
		return "WaitValue32"
	case MemOpWriteValue32:
		return "WriteValue32"
	case MemOpFlushRemoteWrites:
		return "FlushRemoteWrites"
	case MemOpWaitValue64:
		return "WaitValue64"
	case MemOpWriteValue64:
		return "WriteValue64"
	case MemOpBarrier:
		return "Barrier"
	}
	return fmt.Sprintf("MemOpKind(%d)", int32(k))
}

// MemOp is one operation of a batch, laid out exactly as cgc_mem_op_t (whose layout the header
// fixes forever), so that a []MemOp goes to C as it is. Flags are WaitFlags for waits, 0 for
// writes and flushes, BarrierFlags for barriers; Value must fit 32 bits for 32-bit operations.
// Flushes and barriers use neither Address nor Value: a barrier is
// MemOp{Kind: MemOpBarrier, Flags: uint32(BarrierGPU)}, say.
type MemOp struct {
	Kind    MemOpKind
	Flags   uint32
	Address DevicePtr // a number, not a pointer: device memory is no business of Go's collector
	Value   uint64
}

// The layout promise above, checked by the compiler: each expression is a constant that is
// negative (a compile error for a uintptr) unless MemOp and cgc_mem_op_t agree.
const (
	_ = uintptr(unsafe.Sizeof(MemOp{}) - C.sizeof_cgc_mem_op_t)
	_ = uintptr(C.sizeof_cgc_mem_op_t - unsafe.Sizeof(MemOp{}))
	_ = uintptr(unsafe.Offsetof(MemOp{}.Flags) - unsafe.Offsetof(C.cgc_mem_op_t{}.flags))
	_ = uintptr(unsafe.Offsetof(C.cgc_mem_op_t{}.flags) - unsafe.Offsetof(MemOp{}.Flags))
	_ = uintptr(unsafe.Offsetof(MemOp{}.Address) - unsafe.Offsetof(C.cgc_mem_op_t{}.address))
	_ = uintptr(unsafe.Offsetof(C.cgc_mem_op_t{}.address) - unsafe.Offsetof(MemOp{}.Address))
	_ = uintptr(unsafe.Offsetof(MemOp{}.Value) - unsafe.Offsetof(C.cgc_mem_op_t{}.value))
	_ = uintptr(unsafe.Offsetof(C.cgc_mem_op_t{}.value) - unsafe.Offsetof(MemOp{}.Value))
)

// BatchMemOps enqueues ops (1 to 255 of them, the driver's limit) in one call, in order
// (cgc_stream_batch_mem_op); captured, the batch is one memory-operation node.
func (s *Stream) BatchMemOps(ops []MemOp) error {
	h, err := s.handle("Stream.BatchMemOps")
	if err != nil {
		return err
	}
	var p unsafe.Pointer
	if len(ops) > 0 {
		p = unsafe.Pointer(&ops[0])
	}
	var msg *C.char
	err = check(C.cgcgo_stream_batch_mem_op(h, p, C.size_t(len(ops)), &msg), msg)
	runtime.KeepAlive(s)
	runtime.KeepAlive(ops)
	return err
}
