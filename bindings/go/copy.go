package cgc

/*
#include "shim.h"
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// Copies and sets, ordered on a stream and captured as graph nodes inside a capture. They are
// functions rather than Stream methods because Go methods cannot take type parameters.
//
// Host memory comes as slices. Inside a capture the host side must be page-locked (HostSlice of
// a HostBuffer, or memory given to Context.HostRegister): the graph reads or writes it again at
// every replay, which the driver cannot do with pageable memory, so a Go slice there is refused
// with ErrCaptureUnsupported before it could break the capture. Eagerly any slice will do: a
// copy from pageable memory returns once the slice may be reused, and one into pageable memory
// once the data is there.

// hostBytes is the address and byte length of a slice's elements (nil for an empty slice).
func hostBytes[T Scalar](host []T) (unsafe.Pointer, int) {
	if len(host) == 0 {
		return nil, 0
	}
	return unsafe.Pointer(&host[0]), len(host) * int(unsafe.Sizeof(host[0]))
}

// CopyHostToDevice copies the elements of src to device memory dst, ordered on s
// (cgc_memcpy_htod_async).
func CopyHostToDevice[T Scalar](dst DevicePtr, src []T, s *Stream) error {
	p, bytes := hostBytes(src)
	return copyHostToDevice(dst, p, bytes, s)
}

// CopyDeviceToHost copies len(dst) elements from device memory src into dst, ordered on s
// (cgc_memcpy_dtoh_async). With a page-locked dst the call returns before the data is there:
// synchronise the stream before reading dst.
func CopyDeviceToHost[T Scalar](dst []T, src DevicePtr, s *Stream) error {
	p, bytes := hostBytes(dst)
	return copyDeviceToHost(p, src, bytes, s)
}

// copyHostToDevice and copyDeviceToHost are the generic functions' C calls, kept out of the
// generic bodies so that each is compiled once.
func copyHostToDevice(dst DevicePtr, src unsafe.Pointer, bytes int, s *Stream) error {
	sh, err := s.handle("CopyHostToDevice")
	if err != nil {
		return err
	}
	var msg *C.char
	err = check(C.cgcgo_memcpy_htod_async(C.uintptr_t(dst), src, C.size_t(bytes), sh, &msg), msg)
	runtime.KeepAlive(s)
	return err
}

func copyDeviceToHost(dst unsafe.Pointer, src DevicePtr, bytes int, s *Stream) error {
	sh, err := s.handle("CopyDeviceToHost")
	if err != nil {
		return err
	}
	var msg *C.char
	err = check(C.cgcgo_memcpy_dtoh_async(dst, C.uintptr_t(src), C.size_t(bytes), sh, &msg), msg)
	runtime.KeepAlive(s)
	return err
}

// CopyDeviceToDevice copies bytes bytes from src to dst, both device memory, ordered on s
// (cgc_memcpy_dtod_async).
func CopyDeviceToDevice(dst, src DevicePtr, bytes int, s *Stream) error {
	if bytes < 0 {
		return sizeError("CopyDeviceToDevice", bytes)
	}
	sh, err := s.handle("CopyDeviceToDevice")
	if err != nil {
		return err
	}
	var msg *C.char
	err = check(C.cgcgo_memcpy_dtod_async(C.uintptr_t(dst), C.uintptr_t(src), C.size_t(bytes), sh, &msg), msg)
	runtime.KeepAlive(s)
	return err
}

// Memset8 sets count bytes at dst to value, ordered on s (cgc_memset_d8_async).
func Memset8(dst DevicePtr, value uint8, count int, s *Stream) error {
	if count < 0 {
		return sizeError("Memset8", count)
	}
	sh, err := s.handle("Memset8")
	if err != nil {
		return err
	}
	var msg *C.char
	err = check(C.cgcgo_memset_d8_async(C.uintptr_t(dst), C.uint8_t(value), C.size_t(count), sh, &msg), msg)
	runtime.KeepAlive(s)
	return err
}

// Memset16 sets count 16-bit elements at dst (2-byte aligned) to value, ordered on s
// (cgc_memset_d16_async).
func Memset16(dst DevicePtr, value uint16, count int, s *Stream) error {
	if count < 0 {
		return sizeError("Memset16", count)
	}
	sh, err := s.handle("Memset16")
	if err != nil {
		return err
	}
	var msg *C.char
	err = check(C.cgcgo_memset_d16_async(C.uintptr_t(dst), C.uint16_t(value), C.size_t(count), sh, &msg), msg)
	runtime.KeepAlive(s)
	return err
}

// Memset32 sets count 32-bit elements at dst (4-byte aligned) to value, ordered on s
// (cgc_memset_d32_async). For a float32 value pass math.Float32bits(v).
func Memset32(dst DevicePtr, value uint32, count int, s *Stream) error {
	if count < 0 {
		return sizeError("Memset32", count)
	}
	sh, err := s.handle("Memset32")
	if err != nil {
		return err
	}
	var msg *C.char
	err = check(C.cgcgo_memset_d32_async(C.uintptr_t(dst), C.uint32_t(value), C.size_t(count), sh, &msg), msg)
	runtime.KeepAlive(s)
	return err
}
