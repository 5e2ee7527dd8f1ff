package cgc

/*
#include "shim.h"
*/
import "C"

import "runtime"

// Context is a handle on one device's primary context (cgc_context_t). The primary context is
// shared with the CUDA runtime and any framework in the process. Objects made from a Context
// keep working after it is closed: closing only drops this handle's reference.
type Context struct {
	h      C.cgc_context_t
	device int
	closed bool
}

// NewContext returns a handle on device's primary context. It does not make that context
// current on any thread.
func NewContext(device int) (*Context, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	var h C.cgc_context_t
	var msg *C.char
	if err := check(C.cgcgo_context_create(C.int(device), &h, &msg), msg); err != nil {
		return nil, err
	}
	c := &Context{h: h, device: device}
	runtime.SetFinalizer(c, (*Context).Close) // safety net only; see the package documentation
	return c, nil
}

// handle is what the C calls receive: NULL for a nil *Context (the library then answers
// ErrInvalidArgument with its own message), an error for a closed one.
func (c *Context) handle(op string) (C.cgc_context_t, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	if c == nil {
		return nil, nil
	}
	if c.closed {
		return nil, closedError("context", op)
	}
	return c.h, nil
}

// Device is the device ordinal the context was created for.
func (c *Context) Device() int {
	if c == nil {
		return -1
	}
	return c.device
}

// Synchronize waits for all work on the device (cuCtxSynchronize). It is not allowed during a
// Global-mode capture.
func (c *Context) Synchronize() error {
	h, err := c.handle("Context.Synchronize")
	if err != nil {
		return err
	}
	var msg *C.char
	err = check(C.cgcgo_context_synchronize(h, &msg), msg)
	runtime.KeepAlive(c)
	return err
}

// Close drops this handle (cgc_context_destroy). It is idempotent and does nothing on nil.
func (c *Context) Close() error {
	if c == nil || c.closed || c.h == nil {
		return nil
	}
	var msg *C.char
	if err := check(C.cgcgo_context_destroy(c.h, &msg), msg); err != nil {
		return err
	}
	c.h, c.closed = nil, true
	runtime.SetFinalizer(c, nil)
	return nil
}
