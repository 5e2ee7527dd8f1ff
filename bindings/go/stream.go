package cgc

/*
#include "shim.h"
*/
import "C"

import (
	"runtime"
	"sync"
)

// StreamFlags are the flags of Context.NewStream.
type StreamFlags uint32

// StreamNonBlocking makes a stream that does not synchronise with the legacy default stream.
const StreamNonBlocking StreamFlags = C.CGC_STREAM_NON_BLOCKING

// Stream is a CUDA stream (cgc_stream_t): owned when made by Context.NewStream, borrowed when
// made by Context.WrapStream.
type Stream struct {
	h        C.cgc_stream_t
	borrowed bool
	closed   bool
	// lent marks the body stream of a conditional node (Stream.Conditional,
	// Stream.ConditionalBodies), which the library lends and takes back itself: Close refuses it.
	lent bool

	// updating is the Graph that the capture under way on the stream updates
	// (CaptureOptions.Update, 1.2), or nil: the capture's end hands back that Graph's own
	// handle, so EndCapture returns that same *Graph rather than a second owner of the handle.
	// captureMu guards it, and is held across each begin and end so that both see it settled.
	captureMu sync.Mutex
	updating  *Graph
}

func newStream(h C.cgc_stream_t, borrowed bool) *Stream {
	s := &Stream{h: h, borrowed: borrowed}
	runtime.SetFinalizer(s, (*Stream).Close) // safety net only; see the package documentation
	return s
}

// NewStream creates a stream on the context's device. priority 0 is the default; lower numbers
// are higher priority, clamped to the device's range.
func (c *Context) NewStream(flags StreamFlags, priority int) (*Stream, error) {
	ch, err := c.handle("Context.NewStream")
	if err != nil {
		return nil, err
	}
	var h C.cgc_stream_t
	var msg *C.char
	err = check(C.cgcgo_stream_create(ch, C.uint(flags), C.int(priority), &h, &msg), msg)
	runtime.KeepAlive(c)
	if err != nil {
		return nil, err
	}
	return newStream(h, false), nil
}

// WrapStream borrows an existing CUstream / cudaStream_t of the context's device, given as its
// numeric value (0 or cudaStreamLegacy is the legacy default stream; cudaStreamPerThread is
// accepted too). Closing the returned Stream frees only the handle: the stream stays the
// caller's.
func (c *Context) WrapStream(native uintptr) (*Stream, error) {
	ch, err := c.handle("Context.WrapStream")
	if err != nil {
		return nil, err
	}
	var h C.cgc_stream_t
	var msg *C.char
	err = check(C.cgcgo_stream_wrap(ch, C.uintptr_t(native), &h, &msg), msg)
	runtime.KeepAlive(c)
	if err != nil {
		return nil, err
	}
	return newStream(h, true), nil
}

func (s *Stream) handle(op string) (C.cgc_stream_t, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	if s == nil {
		return nil, nil
	}
	if s.closed {
		return nil, closedError("stream", op)
	}
	return s.h, nil
}

// Borrowed reports whether the stream was made by WrapStream.
func (s *Stream) Borrowed() bool { return s != nil && s.borrowed }

// Native is the CUstream behind the handle, to pass to driver or runtime calls (0 for the
// legacy default stream, or for a nil or closed Stream).
func (s *Stream) Native() uintptr {
	h, err := s.handle("Stream.Native")
	if err != nil || h == nil {
		return 0
	}
	n := uintptr(C.cgcgo_stream_native(h))
	runtime.KeepAlive(s)
	return n
}

// Synchronize waits until all work on the stream has finished.
func (s *Stream) Synchronize() error {
	h, err := s.handle("Stream.Synchronize")
	if err != nil {
		return err
	}
	var msg *C.char
	err = check(C.cgcgo_stream_synchronize(h, &msg), msg)
	runtime.KeepAlive(s)
	return err
}

// Query reports whether all work on the stream has finished, without waiting.
func (s *Stream) Query() (bool, error) {
	h, err := s.handle("Stream.Query")
	if err != nil {
		return false, err
	}
	var done C.int
	var msg *C.char
	err = check(C.cgcgo_stream_query(h, &done, &msg), msg)
	runtime.KeepAlive(s)
	return err == nil && done != 0, err
}

// WaitEvent makes future work on the stream wait for the event's last record. Inside a capture
// this is the fork (a stream outside the capture waits on an event recorded in it) and the join
// (the origin waits on an event recorded on a side stream).
func (s *Stream) WaitEvent(e *Event) error {
	h, err := s.handle("Stream.WaitEvent")
	if err != nil {
		return err
	}
	eh, err := e.handle("Stream.WaitEvent")
	if err != nil {
		return err
	}
	var msg *C.char
	err = check(C.cgcgo_stream_wait_event(h, eh, &msg), msg)
	runtime.KeepAlive(s)
	runtime.KeepAlive(e)
	return err
}

// Close destroys an owned stream (pending work still completes) or frees the handle of a
// borrowed one. The library refuses it (ErrInvalidState) while a capture begun with cgc is
// under way on the stream; the Stream then stays open. A body stream of Stream.Conditional or
// Stream.ConditionalBodies is the library's: refused there too (ErrInvalidState). Idempotent;
// does nothing on nil.
func (s *Stream) Close() error {
	if s == nil || s.closed || s.h == nil {
		return nil
	}
	if s.lent {
		return &Error{Status: ErrInvalidState, Message: "cgc (Go binding): Stream.Close: the stream is the body of a " +
			"conditional node, lent by the library: Stream.Conditional or Stream.ConditionalBodies gives it back when " +
			"its body function returns"}
	}
	var msg *C.char
	if err := check(C.cgcgo_stream_destroy(s.h, &msg), msg); err != nil {
		return err
	}
	s.h, s.closed = nil, true
	runtime.SetFinalizer(s, nil)
	return nil
}

// EventFlags are the flags of Context.NewEvent.
type EventFlags uint32

// EventTiming makes an event usable with ElapsedMs; without it events are created with timing
// disabled, which is faster.
const EventTiming EventFlags = C.CGC_EVENT_TIMING

// Event is a CUDA event (cgc_event_t). In captures, events are how streams fork and join.
type Event struct {
	h      C.cgc_event_t
	closed bool
}

// NewEvent creates an event on the context's device.
func (c *Context) NewEvent(flags EventFlags) (*Event, error) {
	ch, err := c.handle("Context.NewEvent")
	if err != nil {
		return nil, err
	}
	var h C.cgc_event_t
	var msg *C.char
	err = check(C.cgcgo_event_create(ch, C.uint(flags), &h, &msg), msg)
	runtime.KeepAlive(c)
	if err != nil {
		return nil, err
	}
	e := &Event{h: h}
	runtime.SetFinalizer(e, (*Event).Close) // safety net only; see the package documentation
	return e, nil
}

func (e *Event) handle(op string) (C.cgc_event_t, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	if e == nil {
		return nil, nil
	}
	if e.closed {
		return nil, closedError("event", op)
	}
	return e.h, nil
}

// Record records the event on the stream (the fork point or join point inside a capture).
func (e *Event) Record(s *Stream) error {
	h, err := e.handle("Event.Record")
	if err != nil {
		return err
	}
	sh, err := s.handle("Event.Record")
	if err != nil {
		return err
	}
	var msg *C.char
	err = check(C.cgcgo_event_record(h, sh, &msg), msg)
	runtime.KeepAlive(e)
	runtime.KeepAlive(s)
	return err
}

// Synchronize waits for the event's last record to complete.
func (e *Event) Synchronize() error {
	h, err := e.handle("Event.Synchronize")
	if err != nil {
		return err
	}
	var msg *C.char
	err = check(C.cgcgo_event_synchronize(h, &msg), msg)
	runtime.KeepAlive(e)
	return err
}

// Query reports whether the recorded work has finished. Like cuEventQuery it is an unsafe call
// during a Global-mode capture.
func (e *Event) Query() (bool, error) {
	h, err := e.handle("Event.Query")
	if err != nil {
		return false, err
	}
	var done C.int
	var msg *C.char
	err = check(C.cgcgo_event_query(h, &done, &msg), msg)
	runtime.KeepAlive(e)
	return err == nil && done != 0, err
}

// ElapsedMs is the time in milliseconds between two completed records of EventTiming events,
// from e to end.
func (e *Event) ElapsedMs(end *Event) (float32, error) {
	h, err := e.handle("Event.ElapsedMs")
	if err != nil {
		return 0, err
	}
	eh, err := end.handle("Event.ElapsedMs")
	if err != nil {
		return 0, err
	}
	var ms C.float
	var msg *C.char
	err = check(C.cgcgo_event_elapsed_ms(h, eh, &ms, &msg), msg)
	runtime.KeepAlive(e)
	runtime.KeepAlive(end)
	return float32(ms), err
}

// Close destroys the event. Idempotent; does nothing on nil.
func (e *Event) Close() error {
	if e == nil || e.closed || e.h == nil {
		return nil
	}
	var msg *C.char
	if err := check(C.cgcgo_event_destroy(e.h, &msg), msg); err != nil {
		return err
	}
	e.h, e.closed = nil, true
	runtime.SetFinalizer(e, nil)
	return nil
}
