package cgc

/*
#cgo CFLAGS: -I${SRCDIR}/../..
#cgo LDFLAGS: -ldl
#include "shim.h"
*/
import "C"

import (
	"os"
	"sync"
	"unsafe"
)

// DefaultLibrary is the name dlopen searches for when CGC_LIBRARY is not set.
const DefaultLibrary = "libcgc.so.1"

var (
	loadOnce sync.Once
	loadErr  error
	loadPath string
)

// Load loads libcgc now, if it is not loaded yet, and returns the *LoadError if it cannot be.
// Calling it is optional: every function loads the library on first use. The attempt is made
// once per process, so set CGC_LIBRARY before the first call.
func Load() error {
	loadOnce.Do(func() {
		path, fromEnv := os.LookupEnv("CGC_LIBRARY")
		if !fromEnv || path == "" {
			path, fromEnv = DefaultLibrary, false
		}
		cpath := C.CString(path)
		defer C.free(unsafe.Pointer(cpath))
		var msg *C.char
		if C.cgcgo_load(cpath, &msg) != 0 {
			loadErr = &LoadError{Path: path, FromEnv: fromEnv, Reason: takeMessage(msg)}
			return
		}
		loadPath = path
	})
	return loadErr
}

// LibraryPath is the name or path libcgc was loaded from ("" if it is not loaded).
func LibraryPath() string {
	if Load() != nil {
		return ""
	}
	return loadPath
}

// Version is a library version.
type Version struct{ Major, Minor, Patch int }

// LibraryVersion is the loaded library's cgc_version().
func LibraryVersion() (Version, error) {
	if err := Load(); err != nil {
		return Version{}, err
	}
	v := uint32(C.cgcgo_version())
	return Version{int(v >> 16), int(v>>8) & 0xff, int(v & 0xff)}, nil
}

// HeaderVersion is the version of capi/cgc.h this binding was compiled against.
var HeaderVersion = Version{C.CGC_VERSION_MAJOR, C.CGC_VERSION_MINOR, C.CGC_VERSION_PATCH}

// StatusString is the library's own description of s (cgc_status_string): the C enum name, a
// colon and an English explanation. It works for values the library does not know, too.
func StatusString(s Status) (string, error) {
	if err := Load(); err != nil {
		return "", err
	}
	return C.GoString(C.cgcgo_status_string(C.int(s))), nil
}

// LastStatus (1.6) is cgc_last_status(): the status that goes with the library's last message
// on the calling OS thread, that of the failure the message describes, or Success when it is a
// warning or there is none. A failed call of this package already returns its status in its
// *Error (copied on the thread that failed); LastStatus is for a goroutine locked to its OS
// thread (runtime.LockOSThread) asking about a call made on that thread outside this package (C
// code of its own calling libcgc, such as cgc_torch_malloc, which returns no status). Unlocked,
// a goroutine may move to another OS thread between two calls and see that thread's status.
func LastStatus() (Status, error) {
	if err := Load(); err != nil {
		return Success, err
	}
	return Status(C.cgcgo_last_status()), nil
}

// takeMessage converts and frees a message malloc'd by a shim.
func takeMessage(msg *C.char) string {
	if msg == nil {
		return ""
	}
	s := C.GoString(msg)
	C.free(unsafe.Pointer(msg))
	return s
}

// check turns a shim's status and message into an error (nil on success).
func check(st C.cgc_status_t, msg *C.char) error {
	if st == C.CGC_SUCCESS {
		return nil
	}
	return &Error{Status: Status(st), Message: takeMessage(msg)}
}

// DeviceCount is the number of CUDA devices. It fails with ErrNoDriver when libcuda.so.1
// cannot be loaded and ErrNoDevice when the driver sees no GPU.
func DeviceCount() (int, error) {
	if err := Load(); err != nil {
		return 0, err
	}
	var n C.int
	var msg *C.char
	if err := check(C.cgcgo_device_count(&n, &msg), msg); err != nil {
		return 0, err
	}
	return int(n), nil
}
