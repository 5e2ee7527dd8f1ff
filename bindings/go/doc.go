// Package cgc is the Go binding of libcgc: CUDA-graph capture with the semantics of PyTorch's
// torch.cuda.graph (stream capture, replay, private memory pools shared across graphs,
// fork/join capture through events, NCCL collectives and a graph-safe Philox generator), since
// version 1.1 the work a graph is made of: copies and sets, page-locked host memory, host
// functions, stream memory operations and kernels of the caller's own modules, since 1.2
// graphs that change without a new Graph (updates by capture, per-kernel changes) and
// conditional nodes, since 1.3 conditional nodes with several bodies, since 1.4 captures that
// another framework began with the driver allocating from a cgc pool (Pool.AdoptCapture), and
// since 1.5 pools of memory registered with an NCCL communicator (Comm.NewPool) and eager
// allocation from a pool (Pool.Malloc), and since 1.6 the device's memory snapshot, its segments
// and blocks (Context.MemorySnapshot), a pool's free memory claimed at a given address
// (Pool.Claim), pools whose memory is a virtual range reserved at a given base, which give
// the same requests the same addresses (Context.NewPoolAt), and graphs of such pools saved to
// bytes (SaveGraphs, ReadSavedInfo; SaveGraphsWith and SaveOptions.Verify replay each graph
// beside its rebuild from the bytes) and rebuilt from them, in another process too, at the same
// addresses (Context.RestoreGraphs, Context.AddModuleImage; ModuleRecord records the image of
// every module the driver loads, so that a save embeds kernels of libraries cgc did not load),
// and families: graphs of one topology that differ in their nodes' parameters sharing one
// executable (Graph.ShareExecutable, GraphInfo.FamilySize, RestoreOptions.Families);
// RestoreOptions.Threads sets how many host threads a restore builds and instantiates the
// graphs on. Graphs that draw from an Rng are saved with its state, and
// Context.RestoreGraphsWithGenerators returns the generators a restore creates again.
//
// # Importing
//
// The module path is "cgc/bindings/go" (package name cgc), a path without a dot in its first
// element: no download resolves it, so a module that uses the binding points go at a checkout of
// the cgc repository (the whole checkout: the package includes ../../capi/cgc.h):
//
//	go mod edit -require=cgc/bindings/go@v0.0.0 -replace=cgc/bindings/go=/path/to/cgc/bindings/go
//
// (or go work use /path/to/cgc/bindings/go in a go.work), then import cgc "cgc/bindings/go".
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
// values are themselves errors, so errors.Is(err, cgc.ErrNoDriver) works. LastStatus (1.6) is
// cgc_last_status(), the status that goes with the calling OS thread's message: for a goroutine
// locked to its thread, about calls made outside this package.
//
// # Lifetimes
//
// Every object has an explicit Close (Graph also has Destroy, DeviceMemory and HostBuffer have
// Free, HostRegistration has Unregister). They are idempotent and safe on a nil receiver. A
// finalizer is set on each object only as a safety net for a forgotten Close: finalizers run
// late or never, so programs must not rely on them, least of all for GPU memory. DeviceMemory
// and HostBuffer have no finalizer at all, because their addresses are usually handed to
// kernels, graphs or other libraries that Go cannot see (a graph reads and writes its
// page-locked host memory at every replay); freeing them behind the program's back would be
// worse than leaking them. Nor have NCCL pools (Comm.NewPool): their release is collective, so
// it must not run at a time the garbage collector picks on one rank. A pool at fixed addresses
// (Context.NewPoolAt) has one, but its release is refused while it is in use, and until a
// release succeeds its range stays reserved: close it. The Graphs and Pools of
// Context.RestoreGraphs are owned like a capture's Graph and NewPoolAt's Pool. As in C, an
// object must not be closed while another goroutine is using it.
//
// # The work a graph is made of
//
// Everything below works eagerly and inside a capture, where it becomes a graph node that runs
// at every replay. CopyHostToDevice, CopyDeviceToHost and CopyDeviceToDevice copy (slices of
// any Scalar type on the host side), Memset8/16/32 set. A captured copy reads or writes its host
// memory again at every replay, so inside a capture that memory must be page-locked: a
// HostBuffer from Context.HostAlloc (viewed through Bytes or HostSlice, and written between
// replays to give each replay new values) or memory given to Context.HostRegister. A Go slice
// there is refused with ErrCaptureUnsupported. Stream.LaunchHostFunc runs a Go function in
// stream order (a host node when captured; the function must not call cgc or CUDA).
// Stream.WriteValue32, WaitValue32 and their kin hand work between streams through a flag in
// device memory (writes take flags 0; Stream.BatchMemOps takes 1 to 255 operations, barriers
// among them). Context.LoadModule loads PTX, a cubin or a fatbin; Module.Function finds a
// kernel and Function.Launch launches it with its arguments as Go values of fixed size.
// Graph.Info counts a graph's nodes by kind.
//
// # Graphs that change (1.2)
//
// CaptureOptions.Update recaptures a graph instead of making a new one: the capture hands back
// the same *Graph, its executable updated in place when the driver accepts the new graph (the
// same topology, e.g. new pointers), else instantiated anew; Graph.Info says which and why.
// Graph.SetKernelEnabled and Graph.SetKernelArgs change one captured kernel for later replays.
// Stream.Conditional adds a conditional node inside a capture (ConditionalIf, ConditionalWhile):
// a body that runs on the device as long as a uint32 the caller's kernels write is nonzero,
// issued by a function on a body stream the library lends for its duration. Since 1.3,
// Stream.ConditionalBodies adds one with all its bodies at once (if/else, ConditionalSwitch) and
// gives the node's ConditionalHandle to kernels that set a loop's condition themselves
// (ConditionalBodySetsCondition); bodies may allocate and draw random numbers.
//
// # Threads
//
// Stream capture and the capture-interaction mode are tied to OS threads, not goroutines.
// Stream.Capture and WithCaptureMode lock the calling goroutine to its OS thread for their
// duration; callers of BeginCapture/EndCapture and ExchangeCaptureMode must do so themselves
// with runtime.LockOSThread.
package cgc
