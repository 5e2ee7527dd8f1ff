package cgc

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/cgo"
	"runtime/debug"
	"sync/atomic"
)

// hostFunction is what the library's `user` pointer stands for: a runtime/cgo.Handle of it
// crosses into C, because C may not keep a Go pointer, and the handle also keeps the functions
// reachable for as long as a graph can call them.
type hostFunction struct {
	fn, release func()
}

// hostFunctionsPending counts the handles the library may still call or release; it drops back
// when every release has run (the tests check it).
var hostFunctionsPending atomic.Int64

// LaunchHostFunc enqueues fn on the stream (cgc_launch_host_func): it runs on a driver thread
// once the stream's earlier work is done, and later work waits for it. Eagerly it runs once;
// inside a capture begun with cgc it becomes a host node that runs at every replay of the graph.
//
// release, which may be nil, is called exactly once when nothing can call fn any more: after
// the eager call, when the graph is reset or destroyed (after its last replay), when the
// capture fails, and at once if this call fails. Until then the binding keeps fn and release
// alive, so they may hold on to anything they use.
//
// fn and release must not call cgc or CUDA: the driver forbids it on its thread, and cgc
// refuses such calls with ErrInvalidState. release may also run inside Graph.Destroy or
// Graph.Reset on the caller's goroutine. Keep fn short: the stream waits for it. A panic in fn
// or release is recovered and reported on standard error, since it cannot travel up a driver
// thread; the stream goes on.
func (s *Stream) LaunchHostFunc(fn func(), release func()) error {
	if fn == nil {
		runRelease(release)
		return &Error{Status: ErrInvalidArgument, Message: "cgc (Go binding): Stream.LaunchHostFunc: fn is nil"}
	}
	h, err := s.handle("Stream.LaunchHostFunc")
	if err != nil {
		runRelease(release) // the same promise as the library's: release runs also on failure
		return err
	}
	handle := cgo.NewHandle(&hostFunction{fn: fn, release: release})
	hostFunctionsPending.Add(1)
	var msg *C.char
	// On failure the library has already called the release trampoline, which deleted handle.
	err = check(C.cgcgo_launch_host_func(h, C.uintptr_t(handle), &msg), msg)
	runtime.KeepAlive(s)
	return err
}

// runRelease calls a release function on the caller's goroutine, as the trampoline would.
func runRelease(release func()) {
	if release == nil {
		return
	}
	defer recoverHostPanic("the release function of a host function")
	release()
}

// hostPanicReports is where a recovered panic of a host function is reported (a variable so
// that the tests can read the report).
var hostPanicReports io.Writer = os.Stderr

// recoverHostPanic stops a panic from unwinding into C: a panic crossing a driver thread's
// frames would kill the process.
func recoverHostPanic(what string) {
	if p := recover(); p != nil {
		fmt.Fprintf(hostPanicReports, "cgc (Go binding): %s panicked (recovered, the stream goes on): %v\n%s", what, p, debug.Stack())
	}
}

//export cgcgoRunHostFunction
func cgcgoRunHostFunction(user C.uintptr_t) {
	defer recoverHostPanic("a host function")
	cgo.Handle(user).Value().(*hostFunction).fn()
}

//export cgcgoReleaseHostFunction
func cgcgoReleaseHostFunction(user C.uintptr_t) {
	handle := cgo.Handle(user)
	// Deferred first so that it runs last, after release, even if release panics.
	defer func() {
		handle.Delete()
		hostFunctionsPending.Add(-1)
	}()
	runRelease(handle.Value().(*hostFunction).release)
}
