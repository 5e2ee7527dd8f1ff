package cgc

import (
	"fmt"
	"strings"
)

// Status is a cgc_status_t code. Codes are pinned by the ABI: they are never renumbered or
// reused. A Status is also an error, so the constants below serve as sentinels for errors.Is.
// Values this binding does not know are kept as they are (see Known).
type Status int32

// The 16 status codes of cgc_status_t, with the same values.
const (
	Success                Status = 0  // CGC_SUCCESS
	ErrInvalidArgument     Status = 1  // CGC_ERROR_INVALID_ARGUMENT
	ErrInvalidHandle       Status = 2  // CGC_ERROR_INVALID_HANDLE
	ErrInvalidState        Status = 3  // CGC_ERROR_INVALID_STATE, e.g. EndCapture without BeginCapture
	ErrNoDriver            Status = 4  // CGC_ERROR_NO_DRIVER: libcuda.so.1 could not be loaded
	ErrNoDevice            Status = 5  // CGC_ERROR_NO_DEVICE: the driver sees no usable GPU
	ErrOutOfMemory         Status = 6  // CGC_ERROR_OUT_OF_MEMORY
	ErrCaptureUnsupported  Status = 7  // CGC_ERROR_CAPTURE_UNSUPPORTED: not allowed during a capture
	ErrCaptureInvalidated  Status = 8  // CGC_ERROR_CAPTURE_INVALIDATED: broken by an earlier call
	ErrCaptureUnjoined     Status = 9  // CGC_ERROR_CAPTURE_UNJOINED: a forked stream was not joined
	ErrCaptureLegacyStream Status = 10 // CGC_ERROR_CAPTURE_LEGACY_STREAM: capture on the legacy stream
	ErrNCCLUnavailable     Status = 11 // CGC_ERROR_NCCL_UNAVAILABLE: libnccl.so.2 could not be loaded
	ErrNCCL                Status = 12 // CGC_ERROR_NCCL
	ErrCUDA                Status = 13 // CGC_ERROR_CUDA: any other driver error
	ErrNotSupported        Status = 14 // CGC_ERROR_NOT_SUPPORTED: driver or device too old
	ErrInternal            Status = 15 // CGC_ERROR_INTERNAL
	statusCount                   = 16
)

var statusNames = [statusCount]string{
	"CGC_SUCCESS",
	"CGC_ERROR_INVALID_ARGUMENT",
	"CGC_ERROR_INVALID_HANDLE",
	"CGC_ERROR_INVALID_STATE",
	"CGC_ERROR_NO_DRIVER",
	"CGC_ERROR_NO_DEVICE",
	"CGC_ERROR_OUT_OF_MEMORY",
	"CGC_ERROR_CAPTURE_UNSUPPORTED",
	"CGC_ERROR_CAPTURE_INVALIDATED",
	"CGC_ERROR_CAPTURE_UNJOINED",
	"CGC_ERROR_CAPTURE_LEGACY_STREAM",
	"CGC_ERROR_NCCL_UNAVAILABLE",
	"CGC_ERROR_NCCL",
	"CGC_ERROR_CUDA",
	"CGC_ERROR_NOT_SUPPORTED",
	"CGC_ERROR_INTERNAL",
}

// Known reports whether s is one of the 16 codes this binding was written for.
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
