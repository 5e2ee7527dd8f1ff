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
	// ConditionalSwitch (1.3) runs body i once if the condition is i, none if it is past the
	// last body. Only Stream.ConditionalBodies makes one (a SWITCH has as many bodies as cases).
	ConditionalSwitch ConditionalKind = C.CGC_CONDITIONAL_SWITCH
)

func (k ConditionalKind) String() string {
	switch k {
	case ConditionalIf:
		return "If"
	case ConditionalWhile:
		return "While"
	case ConditionalSwitch:
		return "Switch"
	}
	return fmt.Sprintf("ConditionalKind(%d)", int32(k))
}

// ConditionalFlags are the flags of Stream.ConditionalBodies (1.3).
type ConditionalFlags uint32

// ConditionalBodySetsCondition (ConditionalWhile only) leaves the loop's condition to the body's
// own kernels after the first read: they set it through the node's ConditionalHandle (CUDA's
// device function cudaGraphSetConditional), and cgc adds no kernel of its own at the end of each
// iteration. A body that never sets it loops for ever.
const ConditionalBodySetsCondition ConditionalFlags = C.CGC_CONDITIONAL_BODY_SETS_CONDITION

// LoopEagerIterations (1.3) is how many iterations of a WHILE body draw what as many eager
// draws would: iteration i (below it) of a replay gets the numbers of the i-th eager draw from
// the generator's state at that replay, and each replay moves the generator on by this many
// iterations' worth (the numbers one iteration draws, rounded up to a multiple of 4, times this),
// so that what follows the loop never repeats its numbers. Later iterations draw fresh numbers
// from a counter space of their own.
const LoopEagerIterations uint64 = C.CGC_LOOP_EAGER_ITERATIONS

// ConditionalHandle is a conditional node's handle (CUDA's cudaGraphConditionalHandle), given by
// Stream.ConditionalBodies for kernels of the caller's that set the node's condition
// themselves. Function.Launch passes it as it is: a kernel's 64-bit integer parameter.
type ConditionalHandle uint64

// maxConditionalBodies is the most bodies a node has (capi/cgc.h: SWITCH, 1 to 256). The binding
// refuses more itself so that a wrong count never makes it allocate room for that many handles.
const maxConditionalBodies = 256

// Conditional adds a conditional node at this point of the capture under way on the stream (a
// capture, or the body of another conditional node) and calls body with the node's body
// stream: what body enqueues there becomes the node's body. condition is the device address of
// a uint32 that the caller's kernels write: ConditionalIf runs the body once if it is nonzero
// where the node stands, ConditionalWhile as long as it is nonzero.
//
// A body holds kernels (Function.Launch), copies, sets, nested conditionals
// (bodyStream.Conditional) and, since 1.3, allocations (Context.Malloc on the body stream: from
// the capture's pool, passed to the enclosing stream once the body ends) and generator draws
// (see LoopEagerIterations for those in a WHILE body); host functions, stream memory operations,
// events and collectives are refused there with ErrCaptureUnsupported. The capture cannot end
// while a body is open. ErrNotSupported with a driver older than CUDA 12.4, ErrInvalidState when
// the stream is not capturing; ConditionalSwitch (use ConditionalBodies) and a kind the library
// does not know are its ErrInvalidArgument.
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

// ConditionalBodies (1.3) adds a conditional node with all its bodies at once, at this point of
// the capture under way on the stream (a capture, or the body of another conditional node), and
// calls body with the node's nBodies body streams and its handle: what body enqueues on
// bodies[i] becomes the node's i-th body. condition is the device address of a uint32 that the
// caller's kernels write.
//
//   - ConditionalIf, 1 body or 2 (if/else): bodies[0] runs once if the condition is nonzero,
//     bodies[1] if it is 0.
//   - ConditionalWhile, 1 body: runs while the condition is nonzero, as with Stream.Conditional;
//     with ConditionalBodySetsCondition the body's kernels set it themselves through handle.
//   - ConditionalSwitch, 1 to 256 bodies: bodies[i] runs once if the condition is i; none runs if
//     it is nBodies or more.
//
// flags is 0 or ConditionalBodySetsCondition. handle is the node's ConditionalHandle, for the
// caller's kernels (Function.Launch takes it as it is). If/else and SWITCH need a driver for CUDA
// 12.8 (ErrNotSupported before). A count the kind does not take, the flag on another kind than
// ConditionalWhile and unknown flag bits are the library's ErrInvalidArgument; a negative count
// or more than 256 bodies, and a nil body, are the binding's.
//
// Otherwise as Stream.Conditional: what a body may hold, and the body streams are lent by the
// library (their Close is refused, and they are closed once ConditionalBodies returns; do not
// keep them). Every body is ended, the last first, also when body returns an error (that error
// is returned, whatever the ends said), panics or calls runtime.Goexit; otherwise the first end
// that fails gives the error, and the other bodies are ended all the same.
func (s *Stream) ConditionalBodies(kind ConditionalKind, condition DevicePtr, flags ConditionalFlags, nBodies int,
	body func(bodies []*Stream, handle ConditionalHandle) error) (err error) {
	const op = "Stream.ConditionalBodies"
	if body == nil {
		return &Error{Status: ErrInvalidArgument, Message: "cgc (Go binding): " + op + ": body is nil"}
	}
	if nBodies < 0 || nBodies > maxConditionalBodies {
		return &Error{Status: ErrInvalidArgument, Message: fmt.Sprintf(
			"cgc (Go binding): %s: nBodies is %d: a conditional node has 1 to %d bodies", op, nBodies, maxConditionalBodies)}
	}
	h, err := s.handle(op)
	if err != nil {
		return err
	}
	// One entry more than asked for, so that C gets an array even for a count of 0: the library
	// then refuses the count itself, not a NULL array.
	handles := make([]C.cgc_stream_t, nBodies+1)
	var node C.uint64_t
	var msg *C.char
	err = check(C.cgcgo_capture_conditional_begin_bodies(h, C.int(kind), C.uintptr_t(condition), C.uint(flags),
		C.size_t(nBodies), &handles[0], &node, &msg), msg)
	runtime.KeepAlive(s)
	if err != nil {
		return err
	}
	// As in Conditional: not owned, no finalizer; the library frees each handle at its end.
	lent := make([]*Stream, nBodies)
	for i := range lent {
		lent[i] = &Stream{h: handles[i], borrowed: true, lent: true}
	}
	defer func() {
		ended := endBodies(lent)
		if err == nil { // body's error is the cause, whatever the ends said after it
			err = ended
		}
	}()
	// body gets a copy: whatever it does to its slice, every lent stream is still ended above.
	return body(append([]*Stream(nil), lent...), ConditionalHandle(node))
}

// endBodies ends every body of a node, the last first (the reverse of the order they were lent
// in, as the deferred ends of nested scopes run), and returns the first failure: a failing end
// still frees its handle, so the ends after it go on.
func endBodies(bodies []*Stream) (first error) {
	for i := len(bodies) - 1; i >= 0; i-- {
		if err := bodies[i].endBody(); first == nil {
			first = err
		}
	}
	return first
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
