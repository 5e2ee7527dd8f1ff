// Package cgc is the Go binding of libcgc: CUDA-graph capture with the semantics of PyTorch's
// torch.cuda.graph (stream capture, replay, private memory pools shared across graphs,
// fork/join capture through events, NCCL collectives and a graph-safe Philox generator).
//
// # Loading
//
// The package does not link against libcgc. The first call that needs the library dlopens it:
// the full path in the environment variable CGC_LIBRARY if it is set, else "libcgc.so.1"
// through the dynamic loader's search path. Programs therefore build, and start, on machines
// without libcgc; a missing library is reported as a *LoadError by every call (see Load). The
// library's entry points are reached through the function table of cgc_get_api, and its major
// version must be 1. The C declarations come from capi/cgc.h of the cgc repository, the single
// source of truth for the ABI.
//
// # Errors
//
// Failing calls return an *Error holding the library's Status and the message of
// cgc_last_error(). That message is thread-local in C and a goroutine may change OS threads
// between two cgo calls, so the binding copies it inside the same C call that failed. Status
// values are themselves errors, so errors.Is(err, cgc.ErrNoDriver) works.
//
// # Lifetimes
//
// Every object has an explicit Close (Graph also has Destroy, DeviceMemory has Free). They are
// idempotent and safe on a nil receiver. A finalizer is set on each object only as a safety
// net for a forgotten Close: finalizers run late or never, so programs must not rely on them,
// least of all for GPU memory. DeviceMemory has no finalizer at all, because its address is
// usually handed to kernels, graphs or other libraries that Go cannot see; freeing it behind
// the program's back would be worse than leaking it. As in C, an object must not be closed
// while another goroutine is using it.
//
// # Threads
//
// Stream capture and the capture-interaction mode are tied to OS threads, not goroutines.
// Stream.Capture and WithCaptureMode lock the calling goroutine to its OS thread for their
// duration; callers of BeginCapture/EndCapture and ExchangeCaptureMode must do so themselves
// with runtime.LockOSThread.
package cgc
