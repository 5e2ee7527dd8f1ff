package cgc

/*
#include "shim.h"
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// Scalar is an element type of host buffers, copies and typed views: fixed-size numbers with
// no Go pointers inside, which is what cgo lets C read and write.
type Scalar interface {
	~int8 | ~uint8 | ~int16 | ~uint16 | ~int32 | ~uint32 | ~int64 | ~uint64 | ~uintptr | ~float32 | ~float64
}

// HostAllocFlags are the flags of Context.HostAlloc.
type HostAllocFlags uint32

// HostWriteCombined makes memory that is fast for the GPU to read and very slow for the CPU to
// read.
const HostWriteCombined HostAllocFlags = C.CGC_HOST_WRITE_COMBINED

// HostBuffer is page-locked host memory from cgc_host_alloc (portable, mapped): what a copy
// inside a capture needs, since the graph reads or writes that host memory again at every
// replay. Writing new values into it between replays is how a graph gets per-replay inputs.
//
// The memory is C memory, not Go's: Bytes and HostSlice are views of it, valid until Free.
// Like DeviceMemory it has no finalizer, because graphs Go cannot see may still use it; the
// caller frees it once no work (and no graph) uses it any more.
type HostBuffer struct {
	ptr   unsafe.Pointer
	size  int
	freed bool
}

// HostAlloc allocates size bytes of page-locked host memory. Size 0 gives an empty buffer.
func (c *Context) HostAlloc(size int, flags HostAllocFlags) (*HostBuffer, error) {
	if size < 0 {
		return nil, sizeError("Context.HostAlloc", size)
	}
	ch, err := c.handle("Context.HostAlloc")
	if err != nil {
		return nil, err
	}
	var p unsafe.Pointer
	var msg *C.char
	err = check(C.cgcgo_host_alloc(ch, C.size_t(size), C.uint(flags), &p, &msg), msg)
	runtime.KeepAlive(c)
	if err != nil {
		return nil, err
	}
	return &HostBuffer{ptr: p, size: size}, nil
}

// Ptr is the buffer's address (nil after Free or for an empty buffer). The memory is mapped,
// so kernels may read it too.
func (b *HostBuffer) Ptr() unsafe.Pointer {
	if b == nil || b.freed {
		return nil
	}
	return b.ptr
}

// Size is the size asked of HostAlloc.
func (b *HostBuffer) Size() int {
	if b == nil {
		return 0
	}
	return b.size
}

// Bytes is the buffer as a byte slice over its C memory (nil after Free). Do not use it, or any
// slice taken from it, after Free.
func (b *HostBuffer) Bytes() []byte {
	return HostSlice[byte](b)
}

// HostSlice views the buffer as a slice of T over its C memory: as many whole elements as fit
// (nil after Free). Pass it to CopyHostToDevice or CopyDeviceToHost for copies that may be
// captured. Do not use it after Free.
func HostSlice[T Scalar](b *HostBuffer) []T {
	p := b.Ptr()
	if p == nil {
		return nil
	}
	var zero T
	return unsafe.Slice((*T)(p), b.size/int(unsafe.Sizeof(zero)))
}

// Free frees the buffer (cgc_host_free). The caller makes sure no work and no graph still uses
// it. Idempotent; does nothing on nil.
func (b *HostBuffer) Free() error {
	if b == nil || b.freed {
		return nil
	}
	if b.ptr != nil {
		var msg *C.char
		if err := check(C.cgcgo_host_free(b.ptr, &msg), msg); err != nil {
			return err
		}
	}
	b.ptr, b.freed = nil, true
	return nil
}

// HostRegisterFlags are the flags of Context.HostRegister.
type HostRegisterFlags uint32

// HostReadOnly registers memory that the device only reads.
const HostReadOnly HostRegisterFlags = C.CGC_HOST_READ_ONLY

// HostRegistration is host memory of the caller's that cgc_host_register page-locked, so that
// copies inside captures may use it. Unregister undoes it.
type HostRegistration struct {
	ptr          unsafe.Pointer
	size         int
	unregistered bool
}

// HostRegister page-locks mem (portable, mapped) so that copies in captures may use it.
//
// mem must be memory that Go's garbage collector does not manage, such as a syscall.Mmap
// mapping or C memory: the device reads and writes it after this call returns, which cgo's
// rules forbid for Go memory. Keep it mapped until Unregister.
func (c *Context) HostRegister(mem []byte, flags HostRegisterFlags) (*HostRegistration, error) {
	ch, err := c.handle("Context.HostRegister")
	if err != nil {
		return nil, err
	}
	var p unsafe.Pointer
	if len(mem) > 0 {
		p = unsafe.Pointer(&mem[0])
	}
	var msg *C.char
	// An empty mem gives NULL and 0 bytes, which the library refuses by name.
	err = check(C.cgcgo_host_register(ch, p, C.size_t(len(mem)), C.uint(flags), &msg), msg)
	runtime.KeepAlive(c)
	if err != nil {
		return nil, err
	}
	return &HostRegistration{ptr: p, size: len(mem)}, nil
}

// Size is the number of bytes registered.
func (r *HostRegistration) Size() int {
	if r == nil {
		return 0
	}
	return r.size
}

// Unregister undoes HostRegister (cgc_host_unregister). The caller makes sure no work and no
// graph still uses the memory. Idempotent; does nothing on nil.
func (r *HostRegistration) Unregister() error {
	if r == nil || r.unregistered {
		return nil
	}
	var msg *C.char
	if err := check(C.cgcgo_host_unregister(r.ptr, &msg), msg); err != nil {
		return err
	}
	r.ptr, r.unregistered = nil, true
	return nil
}

// Close is Unregister, for io.Closer-style cleanup.
func (r *HostRegistration) Close() error { return r.Unregister() }
