package cgc

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"runtime"
)

// StreamPriorityRange is the range of priorities the device's streams can have: greatest is the
// highest priority (the lowest number), least the lowest (0). NewStream clamps into it.
func (c *Context) StreamPriorityRange() (least, greatest int, err error) {
	ch, err := c.handle("Context.StreamPriorityRange")
	if err != nil {
		return 0, 0, err
	}
	var l, g C.int
	var msg *C.char
	err = check(C.cgcgo_stream_priority_range(ch, &l, &g, &msg), msg)
	runtime.KeepAlive(c)
	return int(l), int(g), err
}

// Priority is the stream's priority (after clamping).
func (s *Stream) Priority() (int, error) {
	h, err := s.handle("Stream.Priority")
	if err != nil {
		return 0, err
	}
	var p C.int
	var msg *C.char
	err = check(C.cgcgo_stream_priority(h, &p, &msg), msg)
	runtime.KeepAlive(s)
	return int(p), err
}

// ID is the driver's id of the stream (cuStreamGetId): unique in the process, never reused.
// Refused (ErrCaptureUnsupported) for a borrowed stream whose id cgc has not learnt while it
// captures, since asking would break the capture.
func (s *Stream) ID() (uint64, error) {
	h, err := s.handle("Stream.ID")
	if err != nil {
		return 0, err
	}
	var id C.uint64_t
	var msg *C.char
	err = check(C.cgcgo_stream_id(h, &id, &msg), msg)
	runtime.KeepAlive(s)
	return uint64(id), err
}

// Device is the stream's device ordinal and its CUcontext (the device's primary context), as a
// number to pass to driver calls.
func (s *Stream) Device() (device int, nativeContext uintptr, err error) {
	h, err := s.handle("Stream.Device")
	if err != nil {
		return -1, 0, err
	}
	var d C.int
	var native C.uintptr_t
	var msg *C.char
	err = check(C.cgcgo_stream_device(h, &d, &native, &msg), msg)
	runtime.KeepAlive(s)
	return int(d), uintptr(native), err
}

// CopyAttributes copies the driver's attributes of src (access-policy window, synchronisation
// policy, priority where settable) onto s (cuStreamCopyAttributes). Both must be of one device.
func (s *Stream) CopyAttributes(src *Stream) error {
	h, err := s.handle("Stream.CopyAttributes")
	if err != nil {
		return err
	}
	sh, err := src.handle("Stream.CopyAttributes")
	if err != nil {
		return err
	}
	var msg *C.char
	err = check(C.cgcgo_stream_copy_attributes(h, sh, &msg), msg)
	runtime.KeepAlive(s)
	runtime.KeepAlive(src)
	return err
}

// AccessProperty is how the L2 cache treats accesses (the values of CUaccessProperty).
type AccessProperty int32

// Access properties.
const (
	AccessNormal     AccessProperty = C.CGC_ACCESS_NORMAL
	AccessStreaming  AccessProperty = C.CGC_ACCESS_STREAMING  // likely not to stay in L2
	AccessPersisting AccessProperty = C.CGC_ACCESS_PERSISTING // likely to stay in L2
)

func (p AccessProperty) String() string {
	switch p {
	case AccessNormal:
		return "Normal"
	case AccessStreaming:
		return "Streaming"
	case AccessPersisting:
		return "Persisting"
	}
	return fmt.Sprintf("AccessProperty(%d)", int32(p))
}

// AccessPolicy is a stream's L2 access-policy window (cgc_access_policy_t).
type AccessPolicy struct {
	Base         DevicePtr // start of the window (device memory)
	Bytes        int       // its size; 0 turns the window off
	HitRatio     float32   // the fraction of accesses that get HitProperty, in [0, 1]
	HitProperty  AccessProperty
	MissProperty AccessProperty
}

// SetAccessPolicy sets the stream's L2 access-policy window; kernels launched (or captured) on
// it afterwards carry it. Bytes above the device's largest window or HitRatio outside [0, 1]
// are ErrInvalidArgument; ErrNotSupported where the device has no such window.
func (s *Stream) SetAccessPolicy(p AccessPolicy) error {
	if p.Bytes < 0 {
		return sizeError("Stream.SetAccessPolicy", p.Bytes)
	}
	h, err := s.handle("Stream.SetAccessPolicy")
	if err != nil {
		return err
	}
	var msg *C.char
	err = check(C.cgcgo_stream_set_access_policy(h, C.uintptr_t(p.Base), C.size_t(p.Bytes), C.float(p.HitRatio),
		C.int(p.HitProperty), C.int(p.MissProperty), &msg), msg)
	runtime.KeepAlive(s)
	return err
}

// AccessPolicy is the stream's L2 access-policy window.
func (s *Stream) AccessPolicy() (AccessPolicy, error) {
	h, err := s.handle("Stream.AccessPolicy")
	if err != nil {
		return AccessPolicy{}, err
	}
	var base C.uintptr_t
	var bytes C.size_t
	var ratio C.float
	var hit, miss C.int
	var msg *C.char
	err = check(C.cgcgo_stream_get_access_policy(h, &base, &bytes, &ratio, &hit, &miss, &msg), msg)
	runtime.KeepAlive(s)
	if err != nil {
		return AccessPolicy{}, err
	}
	return AccessPolicy{
		Base:         DevicePtr(base),
		Bytes:        int(bytes),
		HitRatio:     float32(ratio),
		HitProperty:  AccessProperty(hit),
		MissProperty: AccessProperty(miss),
	}, nil
}
