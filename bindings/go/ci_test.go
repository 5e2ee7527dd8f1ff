package cgc_test

// Tests that need no GPU (CI). Tests that depend on per-process state (the driver is loaded
// once per process, the library too) run their body in a child process: the parent re-runs
// this test binary with -test.run '^Name$', an environment marker and the variables under test.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	cgc "cgc/bindings/go"
)

const childMarker = "CGC_GO_TEST_CHILD"

// inChild returns true in the child process, where the caller runs the test's body. In the
// parent it starts the child with env added to this process's environment, requires it to
// pass, and returns false.
func inChild(t *testing.T, env ...string) bool {
	t.Helper()
	if os.Getenv(childMarker) == t.Name() {
		return true
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^"+t.Name()+"$", "-test.v")
	// Later entries win in exec's environment, so env overrides inherited values.
	cmd.Env = append(append(os.Environ(), childMarker+"="+t.Name()), env...)
	out, err := cmd.CombinedOutput()
	t.Logf("child process (%s):\n%s", strings.Join(env, " "), out)
	if err != nil {
		t.Fatalf("child process failed: %v", err)
	}
	if !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("child process did not run and pass %s", t.Name())
	}
	return false
}

// asError requires err to be a *cgc.Error with the given status.
func asError(t *testing.T, err error, want cgc.Status) *cgc.Error {
	t.Helper()
	var e *cgc.Error
	if !errors.As(err, &e) {
		t.Fatalf("got %v (%T), want a *cgc.Error with %v", err, err, want)
	}
	if e.Status != want || !errors.Is(err, want) {
		t.Fatalf("got status %v (%v), want %v", e.Status, err, want)
	}
	return e
}

func TestLibraryLoadsAndVersion(t *testing.T) {
	if err := cgc.Load(); err != nil {
		t.Fatalf("Load: %v", err)
	}
	v, err := cgc.LibraryVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.Major != 1 {
		t.Fatalf("library version %+v, want 1.x", v)
	}
	if cgc.HeaderVersion.Major != 1 {
		t.Fatalf("header version %+v, want 1.x", cgc.HeaderVersion)
	}
	t.Logf("libcgc %d.%d.%d loaded from %s", v.Major, v.Minor, v.Patch, cgc.LibraryPath())
}

func TestNoDriverError(t *testing.T) {
	if !inChild(t, "CGC_CUDA_DRIVER=/nonexistent/libcuda.so.1") {
		return
	}
	n, err := cgc.DeviceCount()
	e := asError(t, err, cgc.ErrNoDriver)
	if n != 0 {
		t.Errorf("count %d on failure", n)
	}
	for _, want := range []string{"cgc_device_count", "CGC_CUDA_DRIVER", "/nonexistent/libcuda.so.1"} {
		if !strings.Contains(e.Message, want) {
			t.Errorf("message %q does not contain %q", e.Message, want)
		}
	}
	ctx, err := cgc.NewContext(0)
	if e := asError(t, err, cgc.ErrNoDriver); ctx != nil || !strings.Contains(e.Message, "cgc_context_create") {
		t.Errorf("NewContext: %v, %v", ctx, err)
	}
	called := false
	err = cgc.WithCaptureMode(cgc.CaptureModeRelaxed, func() error { called = true; return nil })
	if asError(t, err, cgc.ErrNoDriver); called {
		t.Error("WithCaptureMode ran its function although the mode could not be set")
	}
}

// 1.6: LastStatus is the status of the calling OS thread's last failed call, the one its *Error
// carries, and another thread's failures are not its own. Without a driver that is ErrNoDriver.
// The goroutines are locked to their OS threads: LastStatus is per thread.
func TestLastStatusIsTheFailedCallsStatus(t *testing.T) {
	if !inChild(t, "CGC_CUDA_DRIVER=/nonexistent/libcuda.so.1") {
		return
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	wantLast := func(want cgc.Status, after string) {
		t.Helper()
		if got, err := cgc.LastStatus(); err != nil || got != want {
			t.Errorf("LastStatus after %s: %v, %v; want %v", after, got, err, want)
		}
	}
	_, err := cgc.DeviceCount()
	asError(t, err, cgc.ErrNoDriver)
	wantLast(cgc.ErrNoDriver, "DeviceCount without a driver")
	if _, err := cgc.StatusString(cgc.ErrNoDriver); err != nil { // a call that succeeds leaves it
		t.Fatal(err)
	}
	wantLast(cgc.ErrNoDriver, "a call that succeeded")

	other := make(chan string)
	go func() {
		runtime.LockOSThread() // another OS thread than the test's, which is locked to it
		defer runtime.UnlockOSThread()
		err := (*cgc.Stream)(nil).Synchronize()
		var e *cgc.Error
		if !errors.As(err, &e) || e.Status != cgc.ErrInvalidArgument {
			other <- fmt.Sprintf("Synchronize on a nil stream: %v", err)
			return
		}
		if got, err := cgc.LastStatus(); err != nil || got != e.Status {
			other <- fmt.Sprintf("LastStatus on the other thread: %v, %v; want %v", got, err, e.Status)
			return
		}
		other <- ""
	}()
	if m := <-other; m != "" {
		t.Error(m)
	}
	wantLast(cgc.ErrNoDriver, "another thread's failure")
}

// The message is thread-local in C; goroutines hop between OS threads. Failing calls with
// different messages from many goroutines at once must each get their own message.
func TestMessagesStayWithTheirCall(t *testing.T) {
	if !inChild(t, "CGC_CUDA_DRIVER=/nonexistent/libcuda.so.1") {
		return
	}
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				if (g+i)%2 == 0 {
					_, err := cgc.DeviceCount()
					var e *cgc.Error
					if !errors.As(err, &e) || e.Status != cgc.ErrNoDriver || !strings.HasPrefix(e.Message, "cgc_device_count") {
						errs <- "DeviceCount: " + err.Error()
						return
					}
				} else {
					err := (*cgc.Stream)(nil).Synchronize()
					var e *cgc.Error
					if !errors.As(err, &e) || e.Status != cgc.ErrInvalidArgument || !strings.HasPrefix(e.Message, "cgc_stream_synchronize") {
						errs <- "Synchronize: " + err.Error()
						return
					}
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for m := range errs {
		t.Error(m)
	}
}

func TestStatusCodesRoundTrip(t *testing.T) {
	names := []string{"CGC_SUCCESS", "CGC_ERROR_INVALID_ARGUMENT", "CGC_ERROR_INVALID_HANDLE",
		"CGC_ERROR_INVALID_STATE", "CGC_ERROR_NO_DRIVER", "CGC_ERROR_NO_DEVICE", "CGC_ERROR_OUT_OF_MEMORY",
		"CGC_ERROR_CAPTURE_UNSUPPORTED", "CGC_ERROR_CAPTURE_INVALIDATED", "CGC_ERROR_CAPTURE_UNJOINED",
		"CGC_ERROR_CAPTURE_LEGACY_STREAM", "CGC_ERROR_NCCL_UNAVAILABLE", "CGC_ERROR_NCCL", "CGC_ERROR_CUDA",
		"CGC_ERROR_NOT_SUPPORTED", "CGC_ERROR_INTERNAL", "CGC_ERROR_NOT_SAVABLE", "CGC_ERROR_SAVED_MISMATCH"}
	consts := []cgc.Status{cgc.Success, cgc.ErrInvalidArgument, cgc.ErrInvalidHandle, cgc.ErrInvalidState,
		cgc.ErrNoDriver, cgc.ErrNoDevice, cgc.ErrOutOfMemory, cgc.ErrCaptureUnsupported,
		cgc.ErrCaptureInvalidated, cgc.ErrCaptureUnjoined, cgc.ErrCaptureLegacyStream,
		cgc.ErrNCCLUnavailable, cgc.ErrNCCL, cgc.ErrCUDA, cgc.ErrNotSupported, cgc.ErrInternal,
		cgc.ErrNotSavable, cgc.ErrSavedMismatch}
	for code, name := range names {
		s := cgc.Status(code)
		if s != consts[code] || !s.Known() || s.String() != name {
			t.Errorf("code %d: constant %d, Known %v, String %q, want %q", code, consts[code], s.Known(), s, name)
		}
		if back, ok := cgc.ParseStatus(name); !ok || back != s {
			t.Errorf("ParseStatus(%q) = %v, %v", name, back, ok)
		}
		lib, err := cgc.StatusString(s)
		if err != nil || !strings.HasPrefix(lib, name) {
			t.Errorf("cgc_status_string(%d) = %q, %v; want it to start with %q", code, lib, err, name)
		}
		err = &cgc.Error{Status: s, Message: "m"}
		if !errors.Is(err, s) || errors.Is(err, cgc.Status(code+1)) {
			t.Errorf("errors.Is does not match %v exactly", s)
		}
	}
}

func TestUnknownStatusIsKept(t *testing.T) {
	s := cgc.Status(99)
	if s.Known() || !strings.Contains(s.String(), "99") || !strings.Contains(strings.ToLower(s.String()), "unknown") {
		t.Errorf("Status(99): Known %v, String %q", s.Known(), s)
	}
	if _, ok := cgc.ParseStatus(s.String()); ok {
		t.Error("ParseStatus accepted an unknown status")
	}
	err := error(&cgc.Error{Status: s, Message: "from a newer library"})
	var e *cgc.Error
	if !errors.As(err, &e) || int32(e.Status) != 99 || !errors.Is(err, cgc.Status(99)) {
		t.Errorf("unknown status not kept: %v", err)
	}
	if lib, err := cgc.StatusString(s); err != nil || lib == "" {
		t.Errorf("cgc_status_string(99) = %q, %v", lib, err)
	}
}

// TestStatusCodesMatchTheHeader compares the binding's statuses with the header's list as
// tools/abi_describe.c wrote it (bazel build //tools:abi_description; tools/test_all.sh exports
// its path as CGC_ABI_DESCRIPTION).
func TestStatusCodesMatchTheHeader(t *testing.T) {
	path := os.Getenv("CGC_ABI_DESCRIPTION")
	if path == "" {
		t.Skip("CGC_ABI_DESCRIPTION is not set (tools/test_all.sh sets it)")
	}
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("CGC_ABI_DESCRIPTION: %v", err)
	}
	count := 0
	for _, line := range strings.Split(string(text), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "status" {
			continue
		}
		code, err := strconv.Atoi(f[2])
		if err != nil {
			t.Fatalf("bad line %q", line)
		}
		s := cgc.Status(code)
		if !s.Known() || s.String() != f[1] {
			t.Errorf("header: %s = %d; binding: Known %v, String %q", f[1], code, s.Known(), s)
		}
		if back, ok := cgc.ParseStatus(f[1]); !ok || back != s {
			t.Errorf("ParseStatus(%q) = %v, %v; header says %d", f[1], back, ok, code)
		}
		count++
	}
	if count == 0 || cgc.Status(count).Known() || !cgc.Status(count-1).Known() {
		t.Errorf("the header lists %d statuses; the binding knows another number", count)
	}
}

func TestLoadErrorNamesLibraryAndVariable(t *testing.T) {
	if !inChild(t, "CGC_LIBRARY=/nonexistent/libcgc.so.1") {
		return
	}
	err := cgc.Load()
	var le *cgc.LoadError
	if !errors.As(err, &le) {
		t.Fatalf("Load: %v (%T), want *cgc.LoadError", err, err)
	}
	msg := err.Error()
	for _, want := range []string{"/nonexistent/libcgc.so.1", "CGC_LIBRARY"} {
		if !strings.Contains(msg, want) {
			t.Errorf("load error %q does not contain %q", msg, want)
		}
	}
	// Every entry point reports the same error instead of crashing.
	if _, err := cgc.DeviceCount(); !errors.As(err, &le) {
		t.Errorf("DeviceCount: %v", err)
	}
	if _, err := cgc.NewContext(0); !errors.As(err, &le) {
		t.Errorf("NewContext: %v", err)
	}
	if err := (*cgc.Stream)(nil).Synchronize(); !errors.As(err, &le) {
		t.Errorf("Stream.Synchronize: %v", err)
	}
	if _, err := cgc.LibraryVersion(); !errors.As(err, &le) {
		t.Errorf("LibraryVersion: %v", err)
	}
	t.Logf("load error: %v", err)
}

func TestBadCallsWithoutGPU(t *testing.T) {
	if err := cgc.Load(); err != nil {
		t.Fatal(err)
	}
	// nil objects are passed on as NULL; the library refuses them by name.
	cases := []struct {
		name, fn string
		err      error
	}{
		{"Stream.Synchronize", "cgc_stream_synchronize", (*cgc.Stream)(nil).Synchronize()},
		{"Graph.Launch", "cgc_graph_launch", (*cgc.Graph)(nil).Launch(nil)},
		{"Graph.Reset", "cgc_graph_reset", (*cgc.Graph)(nil).Reset()},
		{"Event.Record", "cgc_event_record", (*cgc.Event)(nil).Record(nil)},
		{"Stream.BeginCapture", "cgc_capture_begin", (*cgc.Stream)(nil).BeginCapture(nil)},
		{"Rng.Uniform", "cgc_rng_uniform", (*cgc.Rng)(nil).Uniform(0, 4, nil)},
	}
	for _, c := range cases {
		if e := asError(t, c.err, cgc.ErrInvalidArgument); !strings.Contains(e.Message, c.fn) {
			t.Errorf("%s: message %q does not name %s", c.name, e.Message, c.fn)
		}
	}
	if _, err := (*cgc.Context)(nil).NewStream(cgc.StreamNonBlocking, 0); err == nil {
		t.Error("NewStream on a nil context succeeded")
	} else {
		asError(t, err, cgc.ErrInvalidArgument)
	}
	if _, err := (*cgc.Stream)(nil).EndCapture(); err == nil {
		t.Error("EndCapture on a nil stream succeeded")
	}
	// The binding refuses what it can see is wrong before calling C.
	if _, err := (*cgc.Context)(nil).Malloc(-1, nil); err == nil {
		t.Error("Malloc(-1) succeeded")
	} else {
		asError(t, err, cgc.ErrInvalidArgument)
	}
	// Capture on a stream that cannot begin never runs the body.
	called := false
	g, err := (*cgc.Stream)(nil).Capture(nil, func(*cgc.Stream) error { called = true; return nil })
	if asError(t, err, cgc.ErrInvalidArgument); called || g != nil {
		t.Errorf("Capture ran its body (%v) or returned a graph (%v)", called, g)
	}
	// Cleanup is safe on nil objects.
	for _, closer := range []interface{ Close() error }{(*cgc.Context)(nil), (*cgc.Stream)(nil),
		(*cgc.Event)(nil), (*cgc.Graph)(nil), (*cgc.Pool)(nil), (*cgc.Rng)(nil), (*cgc.Comm)(nil)} {
		if err := closer.Close(); err != nil {
			t.Errorf("%T(nil).Close: %v", closer, err)
		}
	}
	if err := (*cgc.DeviceMemory)(nil).Free(); err != nil {
		t.Errorf("nil DeviceMemory.Free: %v", err)
	}
	if (*cgc.Stream)(nil).Native() != 0 || (*cgc.Graph)(nil).Native() != 0 {
		t.Error("Native of nil is not 0")
	}
}
