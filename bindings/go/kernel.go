package cgc

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"math"
	"reflect"
	"runtime"
	"unsafe"
)

// Dim3 is a grid of blocks or a block of threads. Every dimension must be at least 1.
type Dim3 struct{ X, Y, Z uint32 }

// Launch launches the kernel on a grid of blocks of threads with sharedBytes of dynamic shared
// memory, ordered on s (cgc_launch_kernel); inside a capture it becomes a kernel node, and the
// graph then keeps the module's code loaded. args are the kernel's parameters in order; their
// values are copied at the call, so later changes to the variables do not reach the kernel (a
// graph that needs new values at every replay reads them from device memory, filled by a
// captured copy from a HostBuffer).
//
// Each argument must have the C size of its parameter, so only fixed-size values are taken:
// int8 to int64, uint8 to uint64, float32, float64, bool (1 byte), uintptr and DevicePtr
// (8 bytes), or named types of these; unsafe.Pointer for host memory the device can reach
// (HostBuffer.Ptr(), never Go memory); and *DeviceMemory, which passes its address. Go's int
// and uint are refused: their size is not C's int, so say int32 or int64.
func (f *Function) Launch(grid, block Dim3, sharedBytes int, s *Stream, args ...any) error {
	const op = "Function.Launch"
	if sharedBytes < 0 || uint64(sharedBytes) > math.MaxUint32 {
		return &Error{Status: ErrInvalidArgument, Message: fmt.Sprintf("cgc (Go binding): %s: sharedBytes %d is outside [0, 2^32)", op, sharedBytes)}
	}
	h, err := f.handle(op)
	if err != nil {
		return err
	}
	sh, err := s.handle(op)
	if err != nil {
		return err
	}
	slots, err := kernelArgSlots(op, args)
	if err != nil {
		return err
	}
	defer C.free(slots)
	var msg *C.char
	err = check(C.cgcgo_launch_kernel(h, C.uint32_t(grid.X), C.uint32_t(grid.Y), C.uint32_t(grid.Z),
		C.uint32_t(block.X), C.uint32_t(block.Y), C.uint32_t(block.Z), C.uint32_t(sharedBytes), sh,
		slots, C.size_t(len(args)), &msg), msg)
	runtime.KeepAlive(f)
	runtime.KeepAlive(s)
	return err
}

// kernelArgSlots writes args, the parameters of a kernel in order, into C memory, one slot of
// C.CGCGO_KERNEL_SLOT_BYTES each, for the shims that build the array of pointers to them. C
// memory, because pointers to it are free of cgo's rules for Go memory in C's hands. The
// caller frees the result (nil when there are no args) with C.free.
func kernelArgSlots(op string, args []any) (unsafe.Pointer, error) {
	if len(args) == 0 {
		return nil, nil
	}
	slots := C.malloc(C.size_t(len(args) * C.CGCGO_KERNEL_SLOT_BYTES))
	for i, arg := range args {
		slot := unsafe.Add(slots, i*C.CGCGO_KERNEL_SLOT_BYTES)
		*(*uint64)(slot) = 0 // the bytes a smaller value leaves are then defined
		if err := putKernelArg(slot, arg); err != nil {
			C.free(slots)
			return nil, &Error{Status: ErrInvalidArgument, Message: fmt.Sprintf("cgc (Go binding): %s: argument %d (%T): %v", op, i, arg, err)}
		}
	}
	return slots, nil
}

// putKernelArg writes one argument's value at the start of its 8-byte slot, with the C size its
// Go type says.
func putKernelArg(slot unsafe.Pointer, arg any) error {
	switch v := arg.(type) {
	case *DeviceMemory:
		if v == nil || v.freed {
			return fmt.Errorf("the block is nil or was freed")
		}
		*(*uintptr)(slot) = uintptr(v.Ptr())
		return nil
	case nil:
		return fmt.Errorf("nil has no type to give it a size; pass DevicePtr(0) for a null pointer")
	}
	// By kind rather than by type, so that named types (DevicePtr, a caller's enum) work too.
	rv := reflect.ValueOf(arg)
	switch rv.Kind() {
	case reflect.Bool:
		if rv.Bool() {
			*(*uint8)(slot) = 1
		}
	case reflect.Int8:
		*(*int8)(slot) = int8(rv.Int())
	case reflect.Int16:
		*(*int16)(slot) = int16(rv.Int())
	case reflect.Int32:
		*(*int32)(slot) = int32(rv.Int())
	case reflect.Int64:
		*(*int64)(slot) = rv.Int()
	case reflect.Uint8:
		*(*uint8)(slot) = uint8(rv.Uint())
	case reflect.Uint16:
		*(*uint16)(slot) = uint16(rv.Uint())
	case reflect.Uint32:
		*(*uint32)(slot) = uint32(rv.Uint())
	case reflect.Uint64, reflect.Uintptr:
		*(*uint64)(slot) = rv.Uint()
	case reflect.Float32:
		*(*float32)(slot) = float32(rv.Float())
	case reflect.Float64:
		*(*float64)(slot) = rv.Float()
	case reflect.UnsafePointer:
		*(*uintptr)(slot) = uintptr(rv.UnsafePointer())
	case reflect.Int, reflect.Uint:
		return fmt.Errorf("int and uint have no fixed C size (C's int is 32 bits, Go's 64 here): convert to the kernel parameter's own int32, uint32, int64 or uint64")
	default:
		return fmt.Errorf("not a fixed-size scalar, DevicePtr, unsafe.Pointer or *DeviceMemory")
	}
	return nil
}
