package cgc

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"runtime"
)

// CaptureMode is a stream-capture interaction mode (the values of CUstreamCaptureMode).
type CaptureMode int32

// Capture modes.
const (
	// CaptureModeGlobal (the default): an unsafe call from any thread breaks the capture.
	CaptureModeGlobal CaptureMode = C.CGC_CAPTURE_MODE_GLOBAL
	// CaptureModeThreadLocal: only the capturing thread's unsafe calls break it.
	CaptureModeThreadLocal CaptureMode = C.CGC_CAPTURE_MODE_THREAD_LOCAL
	// CaptureModeRelaxed: no call is checked.
	CaptureModeRelaxed CaptureMode = C.CGC_CAPTURE_MODE_RELAXED
)

func (m CaptureMode) String() string {
	switch m {
	case CaptureModeGlobal:
		return "Global"
	case CaptureModeThreadLocal:
		return "ThreadLocal"
	case CaptureModeRelaxed:
		return "Relaxed"
	}
	return fmt.Sprintf("CaptureMode(%d)", int32(m))
}

// CaptureStatus says whether a stream is capturing.
type CaptureStatus int32

// Capture states.
const (
	CaptureNone   CaptureStatus = C.CGC_CAPTURE_NONE   // not capturing
	CaptureActive CaptureStatus = C.CGC_CAPTURE_ACTIVE // capturing
	CaptureBroken CaptureStatus = C.CGC_CAPTURE_BROKEN // capturing but invalidated: EndCapture will fail
)

func (s CaptureStatus) String() string {
	switch s {
	case CaptureNone:
		return "None"
	case CaptureActive:
		return "Active"
	case CaptureBroken:
		return "Broken"
	}
	return fmt.Sprintf("CaptureStatus(%d)", int32(s))
}

// CaptureOptions are the options of a capture; a nil *CaptureOptions means the defaults
// (Global mode, a new private pool, no upload).
type CaptureOptions struct {
	Mode CaptureMode
	// Pool, if not nil, is shared: the capture allocates into it (like
	// torch.cuda.graph(pool=...)). Graphs sharing a pool must be replayed in capture order and
	// never concurrently. nil gives the graph a new private pool.
	Pool *Pool
	// Upload uploads the executable at the end of the capture (CGC_CAPTURE_UPLOAD), so that its
	// first launch is as fast as the rest.
	Upload bool
	// Update, if not nil (1.2), is a captured graph that this capture recaptures instead of
	// making a new one: EndCapture and Capture hand back this same *Graph, its executable
	// updated in place when the driver accepts the new graph (the same topology: new pointers
	// or values, much cheaper than instantiating), else instantiated anew. Graph.Info's
	// LastUpdate says which and LastUpdateResult why. The capture allocates from the graph's
	// own pool (Pool must be nil or that pool). Until the capture ends the graph may be
	// launched (its old content runs) but not reset, destroyed, changed or updated by another
	// capture (ErrInvalidState).
	Update *Graph
}

// BeginCapture starts capturing the stream into a new graph (or, with opts.Update, into that
// graph). Unless the mode is Relaxed, the driver requires EndCapture on the same OS thread: lock
// the goroutine with runtime.LockOSThread first, or use Capture, which does it. Errors:
// ErrCaptureLegacyStream on the legacy default stream, ErrInvalidState if the stream is already
// capturing, the pool is being recorded into by another capture, or opts.Update was reset or is
// being updated by another capture, ErrInvalidArgument for a bad mode.
func (s *Stream) BeginCapture(opts *CaptureOptions) error {
	const op = "Stream.BeginCapture"
	h, err := s.handle(op)
	if err != nil {
		return err
	}
	mode, flags := CaptureModeGlobal, C.uint(0)
	var pool *Pool
	var update *Graph
	if opts != nil {
		mode, pool, update = opts.Mode, opts.Pool, opts.Update
		if opts.Upload {
			flags |= C.CGC_CAPTURE_UPLOAD
		}
	}
	var ph C.cgc_pool_t
	if pool != nil {
		if ph, err = pool.handle(op); err != nil {
			return err
		}
	}
	var gh C.cgc_graph_t
	if update != nil {
		if gh, err = update.handle(op); err != nil {
			return err
		}
		if gh == nil { // a NULL update would quietly make a new graph instead
			return &Error{Status: ErrInvalidArgument, Message: "cgc (Go binding): " + op +
				": CaptureOptions.Update is a Graph that no capture made (a zero Graph): there is nothing to update"}
		}
	}
	if s != nil {
		s.captureMu.Lock()
		defer s.captureMu.Unlock()
	}
	var msg *C.char
	err = check(C.cgcgo_capture_begin(h, C.int(mode), ph, flags, gh, &msg), msg)
	if err == nil && update != nil && s != nil {
		s.updating = update
	}
	runtime.KeepAlive(s)
	runtime.KeepAlive(pool)
	runtime.KeepAlive(update)
	return err
}

// EndCapture ends the capture begun on the stream and instantiates the graph. The driver
// capture ends whatever happened: ErrCaptureUnjoined names side streams forked and never
// joined back, ErrCaptureInvalidated reports an earlier illegal call; either way no stream is
// left capturing and the stream can capture again. An empty capture succeeds. A capture begun
// with CaptureOptions.Update returns that *Graph, updated; if its end fails, the graph keeps
// what it had.
func (s *Stream) EndCapture() (*Graph, error) {
	g, _, err := s.endCapture()
	return g, err
}

// endCapture is EndCapture, also saying whether the graph is one the capture updated.
func (s *Stream) endCapture() (g *Graph, updated bool, err error) {
	h, err := s.handle("Stream.EndCapture")
	if err != nil {
		return nil, false, err
	}
	if s != nil {
		s.captureMu.Lock()
		defer s.captureMu.Unlock()
	}
	var out C.cgc_graph_t
	var msg *C.char
	err = check(C.cgcgo_capture_end(h, &out, &msg), msg)
	runtime.KeepAlive(s)
	if err != nil {
		// A failed end leaves no capture, except one ended from the wrong OS thread (the
		// driver's rule), which goes on and still updates its graph.
		if s != nil && s.updating != nil && !streamIsCapturing(h) {
			s.updating = nil
		}
		return nil, false, err
	}
	if s != nil && s.updating != nil {
		update := s.updating
		s.updating = nil
		if update.h == out {
			return update, true, nil
		}
	}
	return newGraph(out), false, nil
}

// streamIsCapturing reports whether stream h is capturing (false if that cannot be told).
func streamIsCapturing(h C.cgc_stream_t) bool {
	var st C.int
	var msg *C.char
	if check(C.cgcgo_stream_capture_status(h, &st, nil, &msg), msg) != nil {
		return false
	}
	return CaptureStatus(st) != CaptureNone
}

// Capture captures body's work on the stream into a graph: BeginCapture, body(s), EndCapture.
// The goroutine is locked to its OS thread for the whole capture (the driver ties captures to
// threads), and the capture is always ended: if body returns an error the graph is discarded
// and that error returned; if body panics the capture is ended, the graph discarded and the
// panic goes on up the stack; if body calls runtime.Goexit (t.FailNow) the capture is ended
// before the goroutine exits. Side streams body forks must be joined back before it returns.
//
// With opts.Update the result is opts.Update itself, updated. If body fails, the ended capture
// has put body's half-made work in place of that graph's old content, so the graph is reset
// (Launch is then ErrInvalidState) rather than left to replay it.
func (s *Stream) Capture(opts *CaptureOptions, body func(s *Stream) error) (*Graph, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := s.BeginCapture(opts); err != nil {
		return nil, err
	}
	returned := false
	defer func() {
		if !returned { // body panicked or called Goexit: the stream must not stay capturing
			s.abandonCapture()
		}
	}()
	bodyErr := body(s)
	returned = true
	if bodyErr != nil {
		// body's error is the cause; an end error after it (e.g. unjoined streams body left
		// behind when it bailed out) is a consequence, like cgc_capture does.
		s.abandonCapture()
		return nil, bodyErr
	}
	return s.EndCapture()
}

// abandonCapture ends a capture whose body failed and discards what it made: a new graph is
// destroyed, a graph it updated is reset (see Capture). Errors are ignored: the body's error,
// or its panic, is what the caller needs.
func (s *Stream) abandonCapture() {
	g, updated, err := s.endCapture()
	if err != nil {
		return
	}
	if updated {
		_ = g.Reset()
	} else {
		_ = g.Destroy()
	}
}

// CaptureStatus reports whether the stream is capturing and, if so, the driver's capture id
// (0 when not capturing). Safe during any capture.
func (s *Stream) CaptureStatus() (CaptureStatus, uint64, error) {
	h, err := s.handle("Stream.CaptureStatus")
	if err != nil {
		return CaptureNone, 0, err
	}
	var st C.int
	var id C.uint64_t
	var msg *C.char
	err = check(C.cgcgo_stream_capture_status(h, &st, &id, &msg), msg)
	runtime.KeepAlive(s)
	return CaptureStatus(st), uint64(id), err
}

// ExchangeCaptureMode sets the calling OS THREAD's capture-interaction mode and returns the
// previous one (cuThreadExchangeStreamCaptureMode): call it again with the returned mode to
// restore it. The mode belongs to the OS thread, not the goroutine, so the caller must hold
// runtime.LockOSThread from the first exchange to the second; WithCaptureMode does all that.
func ExchangeCaptureMode(mode CaptureMode) (CaptureMode, error) {
	if err := Load(); err != nil {
		return mode, err
	}
	m := C.int(mode)
	var msg *C.char
	err := check(C.cgcgo_capture_mode_exchange(&m, &msg), msg)
	return CaptureMode(m), err
}

// WithCaptureMode runs fn with the calling thread's capture-interaction mode set to mode: it
// locks the goroutine to its OS thread, pushes the mode, runs fn and pops the mode again (also
// when fn panics). A typical use is Relaxed around a call that would otherwise break another
// thread's Global capture. It returns fn's error, else the error of restoring the mode.
func WithCaptureMode(mode CaptureMode, fn func() error) (err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	prev, err := ExchangeCaptureMode(mode)
	if err != nil {
		return err
	}
	defer func() {
		if _, popErr := ExchangeCaptureMode(prev); err == nil {
			err = popErr
		}
	}()
	return fn()
}
