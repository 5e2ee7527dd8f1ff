package cgc

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"strings"
)

// Status is a cgc_status_t code. Codes are pinned by the ABI: they are never renumbered or
// reused. A Status is also an error, so the constants below serve as sentinels for errors.Is.
// Values this binding does not know are kept as they are (see Known).
type Status int32

// The status codes of cgc_status_t. The values come from the header's enum through cgo, so they
// cannot drift from it; TestStatusCodesMatchTheHeader checks the names.
const (
	Success                Status = C.CGC_SUCCESS
	ErrInvalidArgument     Status = C.CGC_ERROR_INVALID_ARGUMENT
	ErrInvalidHandle       Status = C.CGC_ERROR_INVALID_HANDLE
	ErrInvalidState        Status = C.CGC_ERROR_INVALID_STATE // e.g. EndCapture without BeginCapture
	ErrNoDriver            Status = C.CGC_ERROR_NO_DRIVER     // libcuda.so.1 could not be loaded
	ErrNoDevice            Status = C.CGC_ERROR_NO_DEVICE     // the driver sees no usable GPU
	ErrOutOfMemory         Status = C.CGC_ERROR_OUT_OF_MEMORY
	ErrCaptureUnsupported  Status = C.CGC_ERROR_CAPTURE_UNSUPPORTED   // not allowed during a capture
	ErrCaptureInvalidated  Status = C.CGC_ERROR_CAPTURE_INVALIDATED   // broken by an earlier call
	ErrCaptureUnjoined     Status = C.CGC_ERROR_CAPTURE_UNJOINED      // a forked stream was not joined
	ErrCaptureLegacyStream Status = C.CGC_ERROR_CAPTURE_LEGACY_STREAM // capture on the legacy stream
	ErrNCCLUnavailable     Status = C.CGC_ERROR_NCCL_UNAVAILABLE      // libnccl.so.2 could not be loaded
	ErrNCCL                Status = C.CGC_ERROR_NCCL
	ErrCUDA                Status = C.CGC_ERROR_CUDA          // any other driver error
	ErrNotSupported        Status = C.CGC_ERROR_NOT_SUPPORTED // driver or device too old; 1.6: a join the driver refuses (Graph.ShareExecutable)
	ErrInternal            Status = C.CGC_ERROR_INTERNAL
	ErrNotSavable          Status = C.CGC_ERROR_NOT_SAVABLE    // 1.6: a graph holds what a saved buffer cannot rebuild
	ErrSavedMismatch       Status = C.CGC_ERROR_SAVED_MISMATCH // 1.6: a saved buffer this process cannot restore
	statusCount                   = C.CGCGO_STATUS_COUNT       // how many the header lists
)

// statusNames holds the C enum names, in code order, taken from the header's list by the shim.
var statusNames = func() (names [statusCount]string) {
	for i := range names {
		names[i] = C.GoString(C.cgcgo_status_name(C.int(i)))
	}
	return names
}()

// Known reports whether s is one of the codes this binding was written for.
func (s Status) Known() bool { return s >= 0 && s < statusCount }

// String is the C enum name ("CGC_ERROR_NO_DRIVER"), or "CGC_STATUS_UNKNOWN(99)" for a value
// this binding does not know; the number is kept either way.
func (s Status) String() string {
	if s.Known() {
		return statusNames[s]
	}
	return fmt.Sprintf("CGC_STATUS_UNKNOWN(%d)", int32(s))
}

// Error makes a Status usable as a sentinel error.
func (s Status) Error() string { return "cgc: " + s.String() }

// ParseStatus maps a C enum name ("CGC_ERROR_CUDA") back to its Status.
func ParseStatus(name string) (Status, bool) {
	for i, n := range statusNames {
		if n == name {
			return Status(i), true
		}
	}
	return 0, false
}

// Error is a failed cgc call: the status it returned and the message cgc_last_error() gave
// right after it, on the same OS thread. Errors the binding raises itself (a closed object)
// use the same type with a message starting "cgc (Go binding)".
type Error struct {
	Status  Status
	Message string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return "cgc: " + e.Status.String()
	}
	return "cgc: " + e.Status.String() + ": " + e.Message
}

// Unwrap returns the Status, so that errors.Is(err, cgc.ErrInvalidState) matches.
func (e *Error) Unwrap() error { return e.Status }

// LoadError says that libcgc could not be loaded, or is not a usable version. Every call of the
// package returns the same *LoadError once loading has failed (it is tried once per process).
type LoadError struct {
	Path    string // what was passed to dlopen
	FromEnv bool   // Path came from CGC_LIBRARY
	Reason  string // dlerror() or the version mismatch
}

func (e *LoadError) Error() string {
	var b strings.Builder
	if e.FromEnv {
		fmt.Fprintf(&b, "cgc: cannot use the cgc library %q named by CGC_LIBRARY: %s", e.Path, e.Reason)
		b.WriteString("; point CGC_LIBRARY at the full path of libcgc.so.1, or unset it to search the loader's path")
	} else {
		fmt.Fprintf(&b, "cgc: cannot use the cgc library %q from the dynamic loader's search path: %s", e.Path, e.Reason)
		b.WriteString("; set CGC_LIBRARY to the full path of libcgc.so.1 (or add its directory to LD_LIBRARY_PATH)")
	}
	return b.String()
}

// closedError is the binding's refusal to pass a destroyed handle on to the library (which
// could only detect it "in the common case"). The status matches the library's for that case.
func closedError(what, op string) error {
	return &Error{Status: ErrInvalidHandle, Message: "cgc (Go binding): " + op + ": the " + what + " was already closed"}
}
