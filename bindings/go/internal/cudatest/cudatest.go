// Package cudatest is TEST SUPPORT for the cgc binding's GPU tests, not part of the binding:
// the few CUDA driver calls those tests need to check results on the host (copies), which cgc
// itself does not offer, and a capture begun with the driver rather than cgc (1.4's adopted
// captures), as a framework begins one. cgo is not allowed in _test.go files, hence this
// internal package.
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
// A capture begun with the driver, not cgc (1.4's adopted captures), and its graph.
typedef void* CUgraph;
typedef void* CUgraphExec;
static CUresult (*p_cuMemsetD32Async)(CUdeviceptr, unsigned, size_t, CUstream);
static CUresult (*p_cuStreamBeginCapture_v2)(CUstream, int);
static CUresult (*p_cuStreamEndCapture)(CUstream, CUgraph*);
static CUresult (*p_cuGraphInstantiateWithFlags)(CUgraphExec*, CUgraph, unsigned long long);
static CUresult (*p_cuGraphLaunch)(CUgraphExec, CUstream);
static CUresult (*p_cuGraphExecDestroy)(CUgraphExec);
static CUresult (*p_cuGraphDestroy)(CUgraph);
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
  RESOLVE(cuMemsetD32Async)
  RESOLVE(cuStreamBeginCapture_v2)
  RESOLVE(cuStreamEndCapture)
  RESOLVE(cuGraphInstantiateWithFlags)
  RESOLVE(cuGraphLaunch)
  RESOLVE(cuGraphExecDestroy)
  RESOLVE(cuGraphDestroy)
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

static CUresult cudatest_memset_d32_async(uintptr_t dst, unsigned value, size_t count, uintptr_t stream) {
  CUresult r = p_cuCtxSetCurrent(primary);
  return r != 0 ? r : p_cuMemsetD32Async((CUdeviceptr)dst, value, count, (CUstream)stream);
}

// Global mode (0), as torch.cuda.graph begins its captures.
static CUresult cudatest_begin_capture(uintptr_t stream) {
  CUresult r = p_cuCtxSetCurrent(primary);
  return r != 0 ? r : p_cuStreamBeginCapture_v2((CUstream)stream, 0);
}

static CUresult cudatest_end_capture(uintptr_t stream, uintptr_t* graph) {
  CUgraph g = NULL;
  CUresult r = p_cuCtxSetCurrent(primary);
  if (r == 0) r = p_cuStreamEndCapture((CUstream)stream, &g);
  *graph = (uintptr_t)g;
  return r;
}

// Instantiates the graph, launches it once and destroys the executable (freed by the driver
// once the launch is done) and the graph, whatever fails.
static CUresult cudatest_launch_once_and_destroy(uintptr_t graph, uintptr_t stream) {
  CUgraphExec exec = NULL;
  CUresult r = p_cuCtxSetCurrent(primary);
  if (r == 0) r = p_cuGraphInstantiateWithFlags(&exec, (CUgraph)graph, 0);
  if (r == 0) r = p_cuGraphLaunch(exec, (CUstream)stream);
  if (exec != NULL) {
    CUresult d = p_cuGraphExecDestroy(exec);
    if (r == 0) r = d;
  }
  CUresult d = p_cuGraphDestroy((CUgraph)graph);
  return r != 0 ? r : d;
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

// MemsetD32Async enqueues count 32-bit values into device memory at dst on the native stream
// (captured if the stream is capturing).
func MemsetD32Async(dst uintptr, value uint32, count int, stream uintptr) error {
	if err := Open(); err != nil {
		return err
	}
	if r := C.cudatest_memset_d32_async(C.uintptr_t(dst), C.unsigned(value), C.size_t(count), C.uintptr_t(stream)); r != 0 {
		return fmt.Errorf("cudatest: cuMemsetD32Async failed with CUresult %d", int(r))
	}
	return nil
}

// BeginCapture begins a Global-mode capture on the native stream with the driver, as a
// framework (torch.cuda.graph) does: a capture cgc did not begin.
func BeginCapture(stream uintptr) error {
	if err := Open(); err != nil {
		return err
	}
	if r := C.cudatest_begin_capture(C.uintptr_t(stream)); r != 0 {
		return fmt.Errorf("cudatest: cuStreamBeginCapture_v2 failed with CUresult %d", int(r))
	}
	return nil
}

// EndCapture ends the driver capture on the native stream and returns its CUgraph.
func EndCapture(stream uintptr) (uintptr, error) {
	if err := Open(); err != nil {
		return 0, err
	}
	var graph C.uintptr_t
	if r := C.cudatest_end_capture(C.uintptr_t(stream), &graph); r != 0 {
		return 0, fmt.Errorf("cudatest: cuStreamEndCapture failed with CUresult %d", int(r))
	}
	return uintptr(graph), nil
}

// LaunchOnceAndDestroy instantiates a CUgraph, launches it once on the native stream (ordered
// there: synchronise the stream to read its results) and destroys the executable and the graph.
func LaunchOnceAndDestroy(graph, stream uintptr) error {
	if err := Open(); err != nil {
		return err
	}
	if r := C.cudatest_launch_once_and_destroy(C.uintptr_t(graph), C.uintptr_t(stream)); r != 0 {
		return fmt.Errorf("cudatest: instantiating, launching or destroying the graph failed with CUresult %d", int(r))
	}
	return nil
}
