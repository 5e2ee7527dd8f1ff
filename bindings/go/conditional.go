package cgc

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"runtime"
)

// ConditionalKind is the kind of a conditional node (cgc_conditional_kind_t, 1.2; the values of
// the driver's CUgraphConditionalNodeType).
type ConditionalKind int32

// Conditional node kinds.
const (
	// ConditionalIf runs the body once if the condition is nonzero where the node stands.
	ConditionalIf ConditionalKind = C.CGC_CONDITIONAL_IF
	// ConditionalWhile runs the body while the condition is nonzero: read before the first
	// iteration and again after each one, so a body that writes it decides whether it runs again.
	ConditionalWhile ConditionalKind = C.CGC_CONDITIONAL_WHILE
)

func (k ConditionalKind) String() string {
	switch k {
	case ConditionalIf:
		return "If"
	case ConditionalWhile:
		return "While"
	}
	return fmt.Sprintf("ConditionalKind(%d)", int32(k))
}

// Conditional adds a conditional node at this point of the capture under way on the stream (a
// capture, or the body of another conditional node) and calls body with the node's body
// stream: what body enqueues there becomes the node's body. condition is the device address of
// a uint32 that the caller's kernels write: ConditionalIf runs the body once if it is nonzero
// where the node stands, ConditionalWhile as long as it is nonzero.
//
// A body holds kernels (Function.Launch), copies, sets and nested conditionals
// (bodyStream.Conditional); allocations, host functions, stream memory operations, events,
// generator draws and collectives are refused there with ErrCaptureUnsupported. The capture
// cannot end while a body is open. ErrNotSupported with a driver older than CUDA 12.4,
// ErrInvalidState when the stream is not capturing; a kind the library does not know is its
// ErrInvalidArgument.
//
// The body stream is lent by the library, not the caller's: its Close is refused while body
// runs, and it is closed (every call then says so) once Conditional returns; do not keep it.
// The body is always ended: if body returns an error, that error is returned (whatever ending
// the body said); if body panics or calls runtime.Goexit, the body is ended on the way out.
func (s *Stream) Conditional(kind ConditionalKind, condition DevicePtr, body func(body *Stream) error) (err error) {
	const op = "Stream.Conditional"
	if body == nil {
		return &Error{Status: ErrInvalidArgument, Message: "cgc (Go binding): " + op + ": body is nil"}
	}
	h, err := s.handle(op)
	if err != nil {
		return err
	}
	var bh C.cgc_stream_t
	var msg *C.char
	err = check(C.cgcgo_capture_conditional_begin(h, C.int(kind), C.uintptr_t(condition), &bh, &msg), msg)
	runtime.KeepAlive(s)
	if err != nil {
		return err
	}
	// Not owned and with no finalizer: the library frees the handle at the end, and refuses
	// cgc_stream_destroy on it before.
	lent := &Stream{h: bh, borrowed: true, lent: true}
	defer func() {
		ended := lent.endBody()
		if err == nil { // body's error is the cause, whatever the end said after it
			err = ended
		}
	}()
	return body(lent)
}

// endBody ends the conditional body lent as s (cgc_capture_conditional_end). The end frees the
// handle whatever it returns, so s is closed either way.
func (s *Stream) endBody() error {
	if s.closed || s.h == nil {
		return nil
	}
	var msg *C.char
	err := check(C.cgcgo_capture_conditional_end(s.h, &msg), msg)
	s.h, s.closed = nil, true
	return err
}
