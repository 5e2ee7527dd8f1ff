//! What a stream is, beside the work on it (1.1): its priority, its driver id, its device, and
//! the L2 access-policy window that kernels launched on it carry.

use std::os::raw::{c_int, c_void};
use std::ptr;

use crate::error::{check, Result};
use crate::{sys, Context, DeviceBuffer, Error, Status, Stream};

/// The priorities the streams of a device can have ([`Context::stream_priority_range`]).
/// Lower numbers are higher priorities: `greatest` is the highest priority (the lowest number),
/// `least` the lowest (0). [`Stream::with_flags`] clamps a priority into this range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StreamPriorityRange {
    /// The lowest priority (the highest number, 0).
    pub least: i32,
    /// The highest priority (the lowest number, e.g. -5).
    pub greatest: i32,
}

impl StreamPriorityRange {
    /// Whether `priority` is one the device has (not clamped by [`Stream::with_flags`]).
    pub fn contains(&self, priority: i32) -> bool {
        self.greatest <= priority && priority <= self.least
    }
}

impl Context {
    /// The priorities streams of this device can have.
    pub fn stream_priority_range(&self) -> Result<StreamPriorityRange> {
        let (mut least, mut greatest): (c_int, c_int) = (0, 0);
        // SAFETY: live handle, valid out pointers.
        check(self.api, unsafe {
            (self.api.cgc_stream_priority_range)(self.raw, &mut least, &mut greatest)
        })?;
        Ok(StreamPriorityRange { least, greatest })
    }
}

/// What an access to memory inside (hit) or outside (miss) an access-policy window does to L2
/// (`cgc_access_property_t`, the values of CUaccessProperty).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum AccessProperty {
    /// No hint.
    #[default]
    Normal,
    /// Less likely to stay in L2.
    Streaming,
    /// More likely to stay in L2 (in its set-aside part).
    Persisting,
}

impl AccessProperty {
    /// The raw `cgc_access_property_t`.
    pub fn to_raw(self) -> sys::cgc_access_property_t {
        match self {
            AccessProperty::Normal => sys::CGC_ACCESS_NORMAL,
            AccessProperty::Streaming => sys::CGC_ACCESS_STREAMING,
            AccessProperty::Persisting => sys::CGC_ACCESS_PERSISTING,
        }
    }

    /// The property for a raw value, `None` if unknown.
    pub fn from_raw(raw: sys::cgc_access_property_t) -> Option<AccessProperty> {
        match raw {
            sys::CGC_ACCESS_NORMAL => Some(AccessProperty::Normal),
            sys::CGC_ACCESS_STREAMING => Some(AccessProperty::Streaming),
            sys::CGC_ACCESS_PERSISTING => Some(AccessProperty::Persisting),
            _ => None,
        }
    }
}

/// A stream's L2 access-policy window (`cgc_access_policy_t`): accesses to
/// `[base, base + bytes)` get `hit_property` with probability `hit_ratio`, the others
/// `miss_property`. `bytes` 0 turns the window off ([`AccessPolicy::off`], the default). It is a
/// hint to the cache: nothing is read or written through `base`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AccessPolicy {
    /// Start of the window (device memory).
    pub base: *mut c_void,
    /// Its size, at most the device's largest window.
    pub bytes: usize,
    /// The fraction of accesses that get `hit_property`, in [0, 1].
    pub hit_ratio: f32,
    /// What the accesses of the `hit_ratio` fraction get.
    pub hit_property: AccessProperty,
    /// What the others get.
    pub miss_property: AccessProperty,
}

impl Default for AccessPolicy {
    fn default() -> AccessPolicy {
        AccessPolicy::off()
    }
}

impl AccessPolicy {
    /// No window.
    pub fn off() -> AccessPolicy {
        AccessPolicy {
            base: ptr::null_mut(),
            bytes: 0,
            hit_ratio: 0.0,
            hit_property: AccessProperty::Normal,
            miss_property: AccessProperty::Normal,
        }
    }

    /// The common case: keep `hit_ratio` of the accesses to `buffer` in L2 (persisting), let
    /// the rest stream through.
    pub fn persisting(buffer: &DeviceBuffer, hit_ratio: f32) -> AccessPolicy {
        AccessPolicy {
            base: buffer.as_ptr(),
            bytes: buffer.len(),
            hit_ratio,
            hit_property: AccessProperty::Persisting,
            miss_property: AccessProperty::Streaming,
        }
    }

    /// The C struct, with `struct_size` set.
    pub fn to_raw(&self) -> sys::cgc_access_policy_t {
        sys::cgc_access_policy_t {
            struct_size: std::mem::size_of::<sys::cgc_access_policy_t>(),
            base: self.base,
            bytes: self.bytes,
            hit_ratio: self.hit_ratio,
            hit_property: self.hit_property.to_raw(),
            miss_property: self.miss_property.to_raw(),
        }
    }

    /// The policy of a C struct; an error naming the field if a property is unknown.
    pub fn from_raw(raw: &sys::cgc_access_policy_t) -> Result<AccessPolicy> {
        let property = |value: sys::cgc_access_property_t, field: &str| {
            AccessProperty::from_raw(value).ok_or_else(|| {
                Error::new(
                    Status::Internal,
                    format!("cgc_stream_get_access_policy: unknown {} {}", field, value),
                )
            })
        };
        Ok(AccessPolicy {
            base: raw.base,
            bytes: raw.bytes,
            hit_ratio: raw.hit_ratio,
            hit_property: property(raw.hit_property, "hit_property")?,
            miss_property: property(raw.miss_property, "miss_property")?,
        })
    }
}

impl Stream {
    /// The stream's priority (lower is higher; see [`Context::stream_priority_range`]).
    pub fn priority(&self) -> Result<i32> {
        let mut priority: c_int = 0;
        // SAFETY: live handle, valid out pointer.
        check(self.api, unsafe {
            (self.api.cgc_stream_priority)(self.raw, &mut priority)
        })?;
        Ok(priority)
    }

    /// The driver's id of the stream (unique in the process, never reused; for the per-thread
    /// stream, the calling thread's). [`Status::CaptureUnsupported`] for a wrapped stream whose
    /// id cgc has not learnt while it captures: asking would break the capture.
    pub fn id(&self) -> Result<u64> {
        let mut id = 0u64;
        // SAFETY: live handle, valid out pointer.
        check(self.api, unsafe {
            (self.api.cgc_stream_id)(self.raw, &mut id)
        })?;
        Ok(id)
    }

    /// The ordinal of the stream's device.
    pub fn device(&self) -> Result<i32> {
        let mut device: c_int = -1;
        // SAFETY: live handle, valid out pointer; the context output is not asked for (NULL).
        check(self.api, unsafe {
            (self.api.cgc_stream_device)(self.raw, &mut device, ptr::null_mut())
        })?;
        Ok(device)
    }

    /// The `CUcontext` of the stream's device (its primary context), for driver calls of the
    /// caller's own.
    pub fn native_context(&self) -> Result<*mut c_void> {
        let mut context = ptr::null_mut();
        // SAFETY: live handle, valid out pointer; the device output is not asked for (NULL).
        check(self.api, unsafe {
            (self.api.cgc_stream_device)(self.raw, ptr::null_mut(), &mut context)
        })?;
        Ok(context)
    }

    /// Copies the driver's attributes of `src` (access-policy window, synchronisation policy,
    /// priority where settable) onto this stream. Both must be of one device.
    pub fn copy_attributes_from(&self, src: &Stream) -> Result<()> {
        // SAFETY: live handles.
        check(self.api, unsafe {
            (self.api.cgc_stream_copy_attributes)(self.raw, src.raw)
        })
    }

    /// Sets the stream's L2 access-policy window: kernels launched (or captured) on it
    /// afterwards carry it. A window above the device's largest, or a `hit_ratio` outside
    /// [0, 1], is [`Status::InvalidArgument`]; a device without windows is
    /// [`Status::NotSupported`].
    pub fn set_access_policy(&self, policy: &AccessPolicy) -> Result<()> {
        let raw = policy.to_raw();
        // SAFETY: live handle; the struct is valid for the call and only read.
        check(self.api, unsafe {
            (self.api.cgc_stream_set_access_policy)(self.raw, &raw)
        })
    }

    /// The stream's L2 access-policy window ([`AccessPolicy::off`] when it has none).
    pub fn access_policy(&self) -> Result<AccessPolicy> {
        let mut raw = AccessPolicy::off().to_raw();
        // SAFETY: live handle, valid out pointer with struct_size set.
        check(self.api, unsafe {
            (self.api.cgc_stream_get_access_policy)(self.raw, &mut raw)
        })?;
        AccessPolicy::from_raw(&raw)
    }
}
