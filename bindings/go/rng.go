package cgc

/*
#include "shim.h"
*/
import "C"

import "runtime"

// Rng is a graph-safe Philox4x32-10 generator (cgc_rng_t) with PyTorch's graph semantics: a
// draw captured into a graph produces fresh numbers on every replay. Graphs drawing from one
// generator must not run concurrently on different streams.
type Rng struct {
	h      C.cgc_rng_t
	closed bool
}

// NewRng creates a generator on the context's device at (seed, offset 0).
func (c *Context) NewRng(seed uint64) (*Rng, error) {
	ch, err := c.handle("Context.NewRng")
	if err != nil {
		return nil, err
	}
	var h C.cgc_rng_t
	var msg *C.char
	err = check(C.cgcgo_rng_create(ch, C.uint64_t(seed), &h, &msg), msg)
	runtime.KeepAlive(c)
	if err != nil {
		return nil, err
	}
	return newRng(h), nil
}

// newRng wraps a generator handle the caller holds a reference of (NewRng's, or one a restore
// handed back).
func newRng(h C.cgc_rng_t) *Rng {
	r := &Rng{h: h}
	runtime.SetFinalizer(r, (*Rng).Close) // safety net only; see the package documentation
	return r
}

func (r *Rng) handle(op string) (C.cgc_rng_t, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	if r == nil {
		return nil, nil
	}
	if r.closed {
		return nil, closedError("generator", op)
	}
	return r.h, nil
}

// Uniform writes n float32 numbers in [0, 1) to device memory out, ordered on s (captured if s
// is capturing).
func (r *Rng) Uniform(out DevicePtr, n int, s *Stream) error {
	if n < 0 {
		return sizeError("Rng.Uniform", n)
	}
	h, err := r.handle("Rng.Uniform")
	if err != nil {
		return err
	}
	sh, err := s.handle("Rng.Uniform")
	if err != nil {
		return err
	}
	var msg *C.char
	err = check(C.cgcgo_rng_uniform(h, C.uintptr_t(out), C.size_t(n), sh, &msg), msg)
	runtime.KeepAlive(r)
	runtime.KeepAlive(s)
	return err
}

// Normal writes n normally distributed float32 numbers (Box-Muller) to device memory out,
// ordered on s.
func (r *Rng) Normal(out DevicePtr, n int, mean, stddev float32, s *Stream) error {
	if n < 0 {
		return sizeError("Rng.Normal", n)
	}
	h, err := r.handle("Rng.Normal")
	if err != nil {
		return err
	}
	sh, err := s.handle("Rng.Normal")
	if err != nil {
		return err
	}
	var msg *C.char
	err = check(C.cgcgo_rng_normal(h, C.uintptr_t(out), C.size_t(n), C.float(mean), C.float(stddev), sh, &msg), msg)
	runtime.KeepAlive(r)
	runtime.KeepAlive(s)
	return err
}

// State is the (seed, offset) the next eager draw or replay starts from.
func (r *Rng) State() (seed, offset uint64, err error) {
	h, err := r.handle("Rng.State")
	if err != nil {
		return 0, 0, err
	}
	var cs, co C.uint64_t
	var msg *C.char
	err = check(C.cgcgo_rng_get_state(h, &cs, &co, &msg), msg)
	runtime.KeepAlive(r)
	return uint64(cs), uint64(co), err
}

// SetState sets the state (offset a multiple of 4) for the next eager draw or replay.
// ErrInvalidState while a capture draws from the generator, unless nothing changes.
func (r *Rng) SetState(seed, offset uint64) error {
	h, err := r.handle("Rng.SetState")
	if err != nil {
		return err
	}
	var msg *C.char
	err = check(C.cgcgo_rng_set_state(h, C.uint64_t(seed), C.uint64_t(offset), &msg), msg)
	runtime.KeepAlive(r)
	return err
}

// Close destroys the generator; graphs that draw from it keep its state alive until they are
// reset or destroyed. Idempotent; does nothing on nil.
func (r *Rng) Close() error {
	if r == nil || r.closed || r.h == nil {
		return nil
	}
	var msg *C.char
	if err := check(C.cgcgo_rng_destroy(r.h, &msg), msg); err != nil {
		return err
	}
	r.h, r.closed = nil, true
	runtime.SetFinalizer(r, nil)
	return nil
}
