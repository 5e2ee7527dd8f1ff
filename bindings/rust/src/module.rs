//! Modules and kernels of the caller's own (1.1): load PTX (or a cubin / fatbin), find a kernel
//! by name, read and set its attributes, launch it eagerly or into a capture.
//!
//! A kernel launched inside a capture keeps its module's code loaded for as long as the graph
//! lives, so the [`Module`] may be dropped before the graph; its [`Function`]s borrow it, so none
//! outlives it.

use std::ffi::{CStr, CString};
use std::fmt;
use std::marker::PhantomData;
use std::os::raw::{c_int, c_void};
use std::ptr;

use crate::error::{check, Result};
use crate::{sys, Context, DeviceBuffer, Error, Status, Stream};

/// A loaded module (`cgc_module_t`), unloaded on drop (`cgc_module_unload`).
pub struct Module {
    raw: sys::cgc_module_t,
    api: &'static sys::cgc_api_t,
}

// SAFETY: cgc functions may be called from any thread and the module's function list has its
// own lock in the library; unloading needs ownership, which no Function can outlive.
unsafe impl Send for Module {}
// SAFETY: as for Send.
unsafe impl Sync for Module {}

impl Module {
    /// Loads PTX text on `ctx`'s device (the driver compiles it for the GPU; its compile log is
    /// in the error message). E.g. `CString::new(include_str!("kernel.ptx"))`.
    pub fn from_ptx(ctx: &Context, ptx: &CStr) -> Result<Module> {
        // SAFETY: NUL-terminated text is a complete PTX image; it may be freed once this
        // returns.
        unsafe { Module::from_image(ctx, ptx.as_ptr() as *const c_void) }
    }

    /// Loads a module image on `ctx`'s device (`cgc_module_load`).
    ///
    /// # Safety
    /// `image` must be a complete fatbin or cubin (the driver reads as many bytes as its headers
    /// say), or NUL-terminated PTX text. It may be freed once this returns.
    pub unsafe fn from_image(ctx: &Context, image: *const c_void) -> Result<Module> {
        let mut raw = ptr::null_mut();
        check(ctx.api, (ctx.api.cgc_module_load)(ctx.raw, image, &mut raw))?;
        Ok(Module { raw, api: ctx.api })
    }

    /// The raw handle (still owned by `self`).
    pub fn as_raw(&self) -> sys::cgc_module_t {
        self.raw
    }

    /// The kernel named `name` (its `extern "C"` or mangled name);
    /// [`Status::InvalidArgument`] naming it when the module has none. Asking twice gives the
    /// same kernel.
    pub fn function(&self, name: &str) -> Result<Function<'_>> {
        let c_name = CString::new(name).map_err(|_| {
            Error::new(
                Status::InvalidArgument,
                format!(
                    "cgc_module_get_function: name {:?} contains a NUL byte",
                    name
                ),
            )
        })?;
        let mut raw = ptr::null_mut();
        // SAFETY: live handle, valid C string and out pointer.
        check(self.api, unsafe {
            (self.api.cgc_module_get_function)(self.raw, c_name.as_ptr(), &mut raw)
        })?;
        Ok(Function {
            raw,
            api: self.api,
            _module: PhantomData,
        })
    }

    /// Unloads the module, reporting the status. Graphs that launched its kernels keep its code
    /// loaded until they are reset or dropped.
    pub fn unload(mut self) -> Result<()> {
        let raw = std::mem::replace(&mut self.raw, ptr::null_mut());
        // SAFETY: owned handle, unloaded once (Drop sees null); no Function outlives `self`.
        check(self.api, unsafe { (self.api.cgc_module_unload)(raw) })
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        if !self.raw.is_null() {
            // SAFETY: owned handle; no Function outlives `self`.
            unsafe { (self.api.cgc_module_unload)(self.raw) };
        }
    }
}

impl fmt::Debug for Module {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Module").field("raw", &self.raw).finish()
    }
}

/// The attributes of a kernel (`cgc_function_attribute_t`, the values of
/// CUfunction_attribute). Only [`FunctionAttribute::MaxDynamicSharedSizeBytes`] and
/// [`FunctionAttribute::PreferredSharedMemoryCarveout`] can be set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FunctionAttribute {
    /// The most threads a block of this kernel may have.
    MaxThreadsPerBlock,
    /// Static shared memory, in bytes.
    SharedSizeBytes,
    /// Constant memory, in bytes.
    ConstSizeBytes,
    /// Local memory per thread, in bytes.
    LocalSizeBytes,
    /// Registers per thread.
    NumRegs,
    /// The PTX version it was compiled from (major * 10 + minor).
    PtxVersion,
    /// The binary's architecture (major * 10 + minor).
    BinaryVersion,
    /// Whether it was compiled with the `-Xptxas --dlcm=ca` cache mode.
    CacheModeCa,
    /// The most dynamic shared memory a launch may ask for (settable: needed above 48 KiB).
    MaxDynamicSharedSizeBytes,
    /// The percentage of L1 preferred as shared memory (settable).
    PreferredSharedMemoryCarveout,
}

impl FunctionAttribute {
    /// The raw `cgc_function_attribute_t`.
    pub fn to_raw(self) -> sys::cgc_function_attribute_t {
        match self {
            FunctionAttribute::MaxThreadsPerBlock => sys::CGC_FUNC_MAX_THREADS_PER_BLOCK,
            FunctionAttribute::SharedSizeBytes => sys::CGC_FUNC_SHARED_SIZE_BYTES,
            FunctionAttribute::ConstSizeBytes => sys::CGC_FUNC_CONST_SIZE_BYTES,
            FunctionAttribute::LocalSizeBytes => sys::CGC_FUNC_LOCAL_SIZE_BYTES,
            FunctionAttribute::NumRegs => sys::CGC_FUNC_NUM_REGS,
            FunctionAttribute::PtxVersion => sys::CGC_FUNC_PTX_VERSION,
            FunctionAttribute::BinaryVersion => sys::CGC_FUNC_BINARY_VERSION,
            FunctionAttribute::CacheModeCa => sys::CGC_FUNC_CACHE_MODE_CA,
            FunctionAttribute::MaxDynamicSharedSizeBytes => {
                sys::CGC_FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES
            }
            FunctionAttribute::PreferredSharedMemoryCarveout => {
                sys::CGC_FUNC_PREFERRED_SHARED_MEMORY_CARVEOUT
            }
        }
    }
}

/// The grid and blocks of a kernel launch, and its dynamic shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LaunchConfig {
    /// Blocks in x, y, z (none may be 0).
    pub grid: [u32; 3],
    /// Threads per block in x, y, z (none may be 0).
    pub block: [u32; 3],
    /// Dynamic shared memory per block, in bytes.
    pub shared_bytes: u32,
}

impl LaunchConfig {
    /// A one-dimensional launch of `block`-thread blocks covering `elements` threads (the last
    /// block may reach past them: the kernel checks its index against the count).
    pub fn linear(elements: u32, block: u32) -> LaunchConfig {
        // In u64 so that rounding up cannot overflow; block 0 gives grid 0, which the library
        // refuses by name.
        let blocks = if block == 0 {
            0
        } else {
            (elements as u64 + block as u64 - 1) / block as u64
        };
        LaunchConfig {
            grid: [blocks as u32, 1, 1],
            block: [block, 1, 1],
            shared_bytes: 0,
        }
    }

    /// With `bytes` of dynamic shared memory per block.
    pub fn with_shared_bytes(mut self, bytes: u32) -> LaunchConfig {
        self.shared_bytes = bytes;
        self
    }
}

/// A value that can be passed as one kernel parameter: [`Function::launch`] hands the driver a
/// pointer to its bytes, which are copied at the call.
///
/// Implemented for the integer and float types (by value: `u32` for `unsigned`, `f32` for
/// `float`, ...), for raw pointers and [`DeviceBuffer`] (the device address, for a `T*`
/// parameter). A `#[repr(C)]` struct passed by value may implement it with the default method.
///
/// # Safety
/// [`KernelArg::kernel_param_ptr`] must return a pointer to the parameter's bytes, valid for as
/// long as `self` is borrowed, laid out as the kernel's parameter is (for a struct: `#[repr(C)]`).
pub unsafe trait KernelArg {
    /// Where the parameter's value is: by default `self` itself.
    fn kernel_param_ptr(&self) -> *const c_void {
        self as *const Self as *const c_void
    }
}

macro_rules! kernel_args_by_value {
    ($($t:ty),*) => {$(
        // SAFETY: a plain value whose bytes are the parameter's.
        unsafe impl KernelArg for $t {}
    )*};
}
kernel_args_by_value!(u8, i8, u16, i16, u32, i32, u64, i64, usize, isize, f32, f64);

// SAFETY: the pointer's own bytes are the parameter (a device address).
unsafe impl<T> KernelArg for *const T {}
// SAFETY: as above.
unsafe impl<T> KernelArg for *mut T {}

// SAFETY: points at the buffer's device address (its `ptr` field), which lives as long as the
// borrow of the buffer.
unsafe impl KernelArg for DeviceBuffer {
    fn kernel_param_ptr(&self) -> *const c_void {
        &self.ptr as *const *mut c_void as *const c_void
    }
}

/// A kernel of a [`Module`] (`cgc_function_t`): a handle owned by the module, so it borrows it.
#[derive(Clone, Copy)]
pub struct Function<'m> {
    raw: sys::cgc_function_t,
    api: &'static sys::cgc_api_t,
    _module: PhantomData<&'m Module>,
}

// SAFETY: the handle stays valid while the module is borrowed; cgc and the driver accept
// attribute queries and launches of one kernel from any thread.
unsafe impl Send for Function<'_> {}
// SAFETY: as for Send.
unsafe impl Sync for Function<'_> {}

/// Parameters of up to this many arguments are passed from the stack, more from the heap.
const ARGS_ON_STACK: usize = 16;

impl Function<'_> {
    /// The raw handle (owned by its module).
    pub fn as_raw(&self) -> sys::cgc_function_t {
        self.raw
    }

    /// The value of `attribute`.
    pub fn attribute(&self, attribute: FunctionAttribute) -> Result<i32> {
        let mut value: c_int = 0;
        // SAFETY: live handle (the module is borrowed), valid out pointer.
        check(self.api, unsafe {
            (self.api.cgc_function_get_attribute)(self.raw, attribute.to_raw(), &mut value)
        })?;
        Ok(value)
    }

    /// Sets `attribute` (only the two settable ones; the others are
    /// [`Status::InvalidArgument`]).
    pub fn set_attribute(&self, attribute: FunctionAttribute, value: i32) -> Result<()> {
        // SAFETY: live handle.
        check(self.api, unsafe {
            (self.api.cgc_function_set_attribute)(self.raw, attribute.to_raw(), value)
        })
    }

    /// Launches the kernel on `config`'s grid with `args`, one per kernel parameter, ordered on
    /// `stream` (`cgc_launch_kernel`; captured as a kernel node inside a capture, whose graph
    /// then keeps the module's code loaded). The argument values are copied at the call, so
    /// they may change or go once this returns.
    ///
    /// ```no_run
    /// # fn f(ctx: &cgc::Context, stream: &cgc::Stream, ptx: &str, out: &cgc::DeviceBuffer,
    /// #      input: &cgc::DeviceBuffer, params: &cgc::DeviceBuffer) -> cgc::Result<()> {
    /// let ptx = std::ffi::CString::new(ptx).expect("PTX has no NUL byte");
    /// let module = cgc::Module::from_ptx(ctx, &ptx)?;
    /// // scale_add(float* out, const float* in, const float* params, unsigned n)
    /// let scale_add = module.function("scale_add")?;
    /// let n: u32 = 4096;
    /// let config = cgc::LaunchConfig::linear(n, 256);
    /// // SAFETY: four arguments of the kernel's four parameter types; the buffers hold n floats
    /// // (params 2) and outlive the launch.
    /// unsafe { scale_add.launch(&config, &[out, input, params, &n], stream)? };
    /// # Ok(()) }
    /// ```
    ///
    /// # Safety
    /// Nothing can check the kernel's parameters: neither cgc nor the driver knows their number
    /// or types from the handle, and the driver reads one pointer per parameter from the array
    /// built from `args`. So `args` must hold exactly one value per parameter, each of that
    /// parameter's type (`u32` for `unsigned`, a [`DeviceBuffer`] or device pointer for `T*`,
    /// ...), and what the kernel does with them must be valid: the memory it reads or writes
    /// must be large enough and stay alive until the kernel has run (for a captured launch:
    /// until the graph's last replay is over).
    pub unsafe fn launch(
        &self,
        config: &LaunchConfig,
        args: &[&dyn KernelArg],
        stream: &Stream,
    ) -> Result<()> {
        let [grid_x, grid_y, grid_z] = config.grid;
        let [block_x, block_y, block_z] = config.block;
        with_kernel_params(args, |params| {
            check(
                self.api,
                (self.api.cgc_launch_kernel)(
                    self.raw,
                    grid_x,
                    grid_y,
                    grid_z,
                    block_x,
                    block_y,
                    block_z,
                    config.shared_bytes,
                    stream.raw,
                    params,
                ),
            )
        })
    }
}

/// Calls `call` with the `void**` that cuLaunchKernel-style calls take for `args`: one pointer
/// per kernel parameter, to its value, valid during the call (the callee copies the values).
/// The pointer is never null, also for no arguments: [`crate::Graph::set_kernel_args`]'s C
/// function refuses null.
pub(crate) fn with_kernel_params<R>(
    args: &[&dyn KernelArg],
    call: impl FnOnce(*mut *mut c_void) -> R,
) -> R {
    let mut on_stack = [ptr::null_mut::<c_void>(); ARGS_ON_STACK];
    let mut on_heap = Vec::new();
    let params: &mut [*mut c_void] = if args.len() <= ARGS_ON_STACK {
        &mut on_stack[..args.len()]
    } else {
        on_heap.resize(args.len(), ptr::null_mut());
        &mut on_heap
    };
    for (param, arg) in params.iter_mut().zip(args) {
        // The driver only reads through these pointers (it copies the values); the C type is
        // `void**` rather than `const void* const*`.
        *param = arg.kernel_param_ptr() as *mut c_void;
    }
    call(params.as_mut_ptr())
}

// For the tests without a GPU, which need handles the library refuses (NULL).
#[cfg(test)]
impl Module {
    pub(crate) fn with_raw(raw: sys::cgc_module_t, api: &'static sys::cgc_api_t) -> Module {
        Module { raw, api }
    }
}

#[cfg(test)]
impl Function<'_> {
    pub(crate) fn with_raw(raw: sys::cgc_function_t, api: &'static sys::cgc_api_t) -> Self {
        Function {
            raw,
            api,
            _module: PhantomData,
        }
    }
}

impl fmt::Debug for Function<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Function").field("raw", &self.raw).finish()
    }
}
