// Package cudatest is TEST SUPPORT for the cgc binding's GPU tests, not part of the binding:
// the few CUDA driver calls those tests need to check results on the host (copies), which cgc
// itself does not offer. cgo is not allowed in _test.go files, hence this internal package.
//
// It dlopens the driver at run time like cgc does (CGC_CUDA_DRIVER, else "libcuda.so.1"), so the
// tests still build and run, skipping, on machines without one.
package cudatest

/*
#cgo LDFLAGS: -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdlib.h>
#include <stdint.h>

// Just the driver types these calls use, so that no CUDA header is needed.
typedef int CUresult;
typedef int CUdevice;
typedef void* CUcontext;
typedef unsigned long long CUdeviceptr;
typedef void* CUstream;

static CUresult (*p_cuInit)(unsigned);
static CUresult (*p_cuDeviceGet)(CUdevice*, int);
static CUresult (*p_cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
static CUresult (*p_cuCtxSetCurrent)(CUcontext);
static CUresult (*p_cuMemcpyDtoH_v2)(void*, CUdeviceptr, size_t);
static CUresult (*p_cuMemcpyDtoDAsync_v2)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
static CUcontext primary;

// Returns 0, -1 when the library cannot be loaded, -2 when a symbol is missing, or a CUresult.
static int cudatest_open(const char* path, int device, const char** missing) {
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) return -1;
#define RESOLVE(name)                                 \
  *(void**)&p_##name = dlsym(lib, #name);             \
  if (p_##name == NULL) { *missing = #name; return -2; }
  RESOLVE(cuInit)
  RESOLVE(cuDeviceGet)
  RESOLVE(cuDevicePrimaryCtxRetain)
  RESOLVE(cuCtxSetCurrent)
  RESOLVE(cuMemcpyDtoH_v2)
  RESOLVE(cuMemcpyDtoDAsync_v2)
#undef RESOLVE
  CUresult r = p_cuInit(0);
  CUdevice dev = 0;
  if (r == 0) r = p_cuDeviceGet(&dev, device);
  if (r == 0) r = p_cuDevicePrimaryCtxRetain(&primary, dev);
  return r;
}

// The current context is per OS thread, and a goroutine may change threads between cgo
// calls, so each copy makes the primary context current in the same C call.
static CUresult cudatest_dtoh(void* dst, uintptr_t src, size_t bytes) {
  CUresult r = p_cuCtxSetCurrent(primary);
  return r != 0 ? r : p_cuMemcpyDtoH_v2(dst, (CUdeviceptr)src, bytes);
}

static CUresult cudatest_dtod_async(uintptr_t dst, uintptr_t src, size_t bytes, uintptr_t stream) {
  CUresult r = p_cuCtxSetCurrent(primary);
  return r != 0 ? r : p_cuMemcpyDtoDAsync_v2((CUdeviceptr)dst, (CUdeviceptr)src, bytes, (CUstream)stream);
}
*/
import "C"

import (
	"fmt"
	"os"
	"sync"
	"unsafe"
)

var (
	openOnce sync.Once
	openErr  error
)

// Open loads the driver and retains device 0's primary context (once per process).
func Open() error {
	openOnce.Do(func() {
		path := os.Getenv("CGC_CUDA_DRIVER")
		if path == "" {
			path = "libcuda.so.1"
		}
		cpath := C.CString(path)
		defer C.free(unsafe.Pointer(cpath))
		var missing *C.char
		switch r := C.cudatest_open(cpath, 0, &missing); r {
		case 0:
		case -1:
			openErr = fmt.Errorf("cudatest: cannot dlopen %q", path)
		case -2:
			openErr = fmt.Errorf("cudatest: %q has no %s", path, C.GoString(missing))
		default:
			openErr = fmt.Errorf("cudatest: driver setup of device 0 failed with CUresult %d", int(r))
		}
	})
	return openErr
}

// CopyToHost copies len(dst) float32 values from device address src (synchronous).
func CopyToHost(dst []float32, src uintptr) error {
	if len(dst) == 0 {
		return nil
	}
	if err := Open(); err != nil {
		return err
	}
	if r := C.cudatest_dtoh(unsafe.Pointer(&dst[0]), C.uintptr_t(src), C.size_t(4*len(dst))); r != 0 {
		return fmt.Errorf("cudatest: cuMemcpyDtoH_v2 failed with CUresult %d", int(r))
	}
	return nil
}

// CopyDeviceAsync enqueues a device-to-device copy of bytes on the native stream (captured if
// the stream is capturing).
func CopyDeviceAsync(dst, src uintptr, bytes int, stream uintptr) error {
	if err := Open(); err != nil {
		return err
	}
	if r := C.cudatest_dtod_async(C.uintptr_t(dst), C.uintptr_t(src), C.size_t(bytes), C.uintptr_t(stream)); r != 0 {
		return fmt.Errorf("cudatest: cuMemcpyDtoDAsync_v2 failed with CUresult %d", int(r))
	}
	return nil
}
