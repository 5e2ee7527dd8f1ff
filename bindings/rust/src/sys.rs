//! Raw declarations matching `capi/cgc.h`, and the run-time loader of `libcgc.so.1`.
//!
//! Nothing here is linked against libcgc: the library is opened with `dlopen` the first time
//! [`api`] is called, its `cgc_get_api` table is checked and kept for the life of the process.
//! Every function of the header is reached through [`cgc_api_t`], whose fields are in the
//! header's order (the table is append-only, so the order is part of the ABI).
//!
//! Names follow the C header on purpose, so that the header is the documentation.
#![allow(non_camel_case_types)]

use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int, c_uint, c_void};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Mutex, MutexGuard, Once};

// ---- versions, status --------------------------------------------------------------------------

/// Major version of the header this crate was written against (also the soname: libcgc.so.1).
pub const CGC_VERSION_MAJOR: u32 = 1;
/// Minor version of the header this crate was written against.
pub const CGC_VERSION_MINOR: u32 = 6;
/// Patch version of the header this crate was written against.
pub const CGC_VERSION_PATCH: u32 = 0;
/// `(major << 16) | (minor << 8) | patch`, as `CGC_VERSION` in C.
pub const CGC_VERSION: u32 =
    (CGC_VERSION_MAJOR << 16) | (CGC_VERSION_MINOR << 8) | CGC_VERSION_PATCH;

/// `cgc_status_t`. A C enum is passed as an `int` on every ABI cgc supports.
pub type cgc_status_t = c_int;

/// Every status code once, as the header's `CGC_STATUS_LIST` has them: `$m!` is called with
/// (variant, value, C name) for each. It makes the raw constants here and [`crate::Status`];
/// a CI test checks the list against the header (tools/abi_describe).
macro_rules! with_status_list {
    ($m:ident) => {
        $m! {
            /// `CGC_SUCCESS`.
            Success = 0, CGC_SUCCESS;
            /// An argument is NULL, out of range or inconsistent.
            InvalidArgument = 1, CGC_ERROR_INVALID_ARGUMENT;
            /// The handle was destroyed or is of another kind.
            InvalidHandle = 2, CGC_ERROR_INVALID_HANDLE;
            /// The object is not in a state that allows the call (e.g. launch after reset).
            InvalidState = 3, CGC_ERROR_INVALID_STATE;
            /// libcuda.so.1 could not be loaded.
            NoDriver = 4, CGC_ERROR_NO_DRIVER;
            /// The driver sees no usable GPU.
            NoDevice = 5, CGC_ERROR_NO_DEVICE;
            /// The device is out of memory.
            OutOfMemory = 6, CGC_ERROR_OUT_OF_MEMORY;
            /// A call not allowed while a capture is under way.
            CaptureUnsupported = 7, CGC_ERROR_CAPTURE_UNSUPPORTED;
            /// The capture was broken by an earlier call.
            CaptureInvalidated = 8, CGC_ERROR_CAPTURE_INVALIDATED;
            /// A forked stream was not joined back before capture end.
            CaptureUnjoined = 9, CGC_ERROR_CAPTURE_UNJOINED;
            /// Capture on the legacy default stream.
            CaptureLegacyStream = 10, CGC_ERROR_CAPTURE_LEGACY_STREAM;
            /// NCCL could not be loaded.
            NcclUnavailable = 11, CGC_ERROR_NCCL_UNAVAILABLE;
            /// An NCCL call failed.
            Nccl = 12, CGC_ERROR_NCCL;
            /// Any other CUDA driver error (the message names it).
            Cuda = 13, CGC_ERROR_CUDA;
            /// The driver or device is too old for the request; since 1.6 also a graph whose nodes
            /// the driver refuses to put in another's executable (`cgc_graph_share_executable`).
            NotSupported = 14, CGC_ERROR_NOT_SUPPORTED;
            /// An internal error in cgc.
            Internal = 15, CGC_ERROR_INTERNAL;
            /// 1.6: a graph holds what a saved buffer cannot rebuild (`cgc_graphs_save`).
            NotSavable = 16, CGC_ERROR_NOT_SAVABLE;
            /// 1.6: a saved buffer this process cannot restore: damaged, or of another format,
            /// architecture or driver, or with a kernel it lacks.
            SavedMismatch = 17, CGC_ERROR_SAVED_MISMATCH;
        }
    };
}
pub(crate) use with_status_list;

macro_rules! raw_status_constants {
    ($($(#[$doc:meta])* $variant:ident = $code:expr, $c_name:ident;)*) => {
        $($(#[$doc])* pub const $c_name: cgc_status_t = $code;)*
    };
}
with_status_list!(raw_status_constants);

// ---- handles -----------------------------------------------------------------------------------

macro_rules! opaque_handles {
    ($($(#[$doc:meta])* $s:ident => $t:ident;)*) => {$(
        /// Opaque C struct behind a handle; never constructed in Rust.
        #[repr(C)]
        pub struct $s {
            _private: [u8; 0],
        }
        $(#[$doc])*
        pub type $t = *mut $s;
    )*};
}

opaque_handles! {
    /// One device (its primary context).
    cgc_context_s => cgc_context_t;
    /// A created or wrapped stream.
    cgc_stream_s => cgc_stream_t;
    /// An event.
    cgc_event_s => cgc_event_t;
    /// A captured graph and its executable.
    cgc_graph_s => cgc_graph_t;
    /// A private memory pool.
    cgc_pool_s => cgc_pool_t;
    /// An NCCL communicator.
    cgc_comm_s => cgc_comm_t;
    /// A graph-safe Philox generator.
    cgc_rng_s => cgc_rng_t;
    /// A loaded fatbin, cubin or PTX image (1.1).
    cgc_module_s => cgc_module_t;
    /// A kernel of a module; lives as long as the module (1.1).
    cgc_function_s => cgc_function_t;
}

// ---- devices, streams, events ------------------------------------------------------------------

/// The stream does not synchronise with the legacy default stream.
pub const CGC_STREAM_NON_BLOCKING: c_uint = 0x1;
/// Events are created with timing disabled unless this flag is given.
pub const CGC_EVENT_TIMING: c_uint = 0x1;

// ---- capture -----------------------------------------------------------------------------------

/// `cgc_capture_mode_t` (the values of CUstreamCaptureMode).
pub type cgc_capture_mode_t = c_int;
pub const CGC_CAPTURE_MODE_GLOBAL: cgc_capture_mode_t = 0;
pub const CGC_CAPTURE_MODE_THREAD_LOCAL: cgc_capture_mode_t = 1;
pub const CGC_CAPTURE_MODE_RELAXED: cgc_capture_mode_t = 2;

/// `cgc_capture_status_t`.
pub type cgc_capture_status_t = c_int;
pub const CGC_CAPTURE_NONE: cgc_capture_status_t = 0;
pub const CGC_CAPTURE_ACTIVE: cgc_capture_status_t = 1;
pub const CGC_CAPTURE_BROKEN: cgc_capture_status_t = 2;

/// `cgc_capture_options_t`. A zeroed struct with `struct_size` set means the defaults.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct cgc_capture_options_t {
    pub struct_size: usize,
    pub mode: cgc_capture_mode_t,
    pub pool: cgc_pool_t,
    pub flags: c_uint,
    /// Since 1.2: null, or the graph this capture updates (its end hands back that graph).
    pub update: cgc_graph_t,
}

/// Upload the executable at capture end.
pub const CGC_CAPTURE_UPLOAD: c_uint = 0x1;
/// AutoFreeOnLaunch (always on; accepted for clarity).
pub const CGC_CAPTURE_AUTO_FREE_ON_LAUNCH: c_uint = 0x2;

/// `cgc_capture_fn`: the body of `cgc_capture`.
pub type cgc_capture_fn =
    Option<unsafe extern "C" fn(stream: cgc_stream_t, user: *mut c_void) -> cgc_status_t>;

// ---- graphs ------------------------------------------------------------------------------------

/// `cgc_graph_update_t` (1.2): how a capture with `cgc_capture_options_t.update` changed its graph.
pub type cgc_graph_update_t = c_int;
pub const CGC_GRAPH_UPDATE_NONE: cgc_graph_update_t = 0;
pub const CGC_GRAPH_UPDATE_IN_PLACE: cgc_graph_update_t = 1;
pub const CGC_GRAPH_UPDATE_REINSTANTIATED: cgc_graph_update_t = 2;

/// `cgc_graph_info_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct cgc_graph_info_t {
    pub struct_size: usize,
    pub node_count: usize,
    pub replay_count: u64,
    pub uploaded: c_int,
    pub pool_bytes_reserved: usize,
    // Since 1.1: the captured nodes by kind (the header's CGC_GRAPH_NODE_KINDS, in its order).
    pub kernel_nodes: usize,
    pub memcpy_nodes: usize,
    pub memset_nodes: usize,
    pub host_nodes: usize,
    pub child_graph_nodes: usize,
    pub empty_nodes: usize,
    pub event_wait_nodes: usize,
    pub event_record_nodes: usize,
    pub mem_alloc_nodes: usize,
    pub mem_free_nodes: usize,
    pub mem_op_nodes: usize,
    pub conditional_nodes: usize,
    pub other_nodes: usize,
    // Since 1.2: updates by capture (cgc_capture_options_t.update).
    pub update_count: u64,
    pub last_update: cgc_graph_update_t,
    /// The driver's CUgraphExecUpdateResult of the last update (2: topology changed).
    pub last_update_result: c_int,
    // Since 1.6: families (cgc_graph_share_executable).
    /// Graphs sharing its executable: 1 with its own, 0 after reset.
    pub family_size: usize,
    /// Why its last join was refused (a CUgraphExecUpdateResult); 0 when none was.
    pub family_result: c_int,
}

// ---- pools -------------------------------------------------------------------------------------

/// `cgc_memory_stats_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct cgc_memory_stats_t {
    pub struct_size: usize,
    pub bytes_reserved: usize,
    pub bytes_allocated: usize,
    pub peak_bytes_allocated: usize,
    pub peak_bytes_reserved: usize,
    pub num_driver_allocs: u64,
    pub num_driver_frees: u64,
}

/// `cgc_segment_info_t` (1.6): one segment (a driver allocation) of `cgc_memory_snapshot`; its
/// blocks are `blocks[first_block..first_block + n_blocks]`, in address order. A fixed layout
/// (arrays of it are passed), so no `struct_size`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct cgc_segment_info_t {
    pub address: *mut c_void,
    pub size: usize,
    /// Its blocks handed out and not yet freed.
    pub allocated_bytes: usize,
    /// The private pool it belongs to; NULL: the device's cache.
    pub pool: cgc_pool_t,
    /// The stream its free blocks are kept for (`cgc_stream_id`); 0: any stream.
    pub stream_id: u64,
    /// 1: a segment of small requests (2 MiB, for requests up to 1 MiB).
    pub small: c_int,
    pub first_block: usize,
    pub n_blocks: usize,
}

/// `cgc_block_state_t` (1.6): a block's state in `cgc_memory_snapshot`.
pub type cgc_block_state_t = c_int;
/// Cached: reusable.
pub const CGC_BLOCK_STATE_FREE: cgc_block_state_t = 0;
/// Handed out and not yet freed.
pub const CGC_BLOCK_STATE_ALLOCATED: cgc_block_state_t = 1;
/// Freed, not yet reusable: work recorded on it may still run.
pub const CGC_BLOCK_STATE_WAITING: cgc_block_state_t = 2;

/// `cgc_block_info_t` (1.6): one block of a segment in `cgc_memory_snapshot`. A fixed layout.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct cgc_block_info_t {
    pub address: *mut c_void,
    /// What the block spans (a 512-byte multiple).
    pub size: usize,
    /// What was asked for, for an allocated block; 0 otherwise.
    pub requested: usize,
    pub state: cgc_block_state_t,
}

// ---- saved graphs (1.6) ------------------------------------------------------------------------

/// `cgc_save_options_t` (1.6): what `cgc_graphs_save` keeps besides the graphs. A NULL pointer,
/// or a zeroed struct with `struct_size` set, means the defaults.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct cgc_save_options_t {
    pub struct_size: usize,
    /// More pools at fixed addresses to save (`n_pools` of them), after the graphs' own pools.
    pub pools: *const cgc_pool_t,
    pub n_pools: usize,
    /// [`CGC_SAVE_VERIFY`], or 0.
    pub flags: c_uint,
}

/// 1.6, a flag of `cgc_save_options_t.flags`: after the bytes are written, each graph is rebuilt
/// from them in this process and replayed beside the graph itself from the same contents of the
/// saved pools; their replays must leave the pools byte-equal, or the save fails with
/// NOT_SAVABLE naming the graph, the pool and the first differing offset. The pools are left as
/// the graph's own replay left them. Only with a buffer (asking for the size replays nothing),
/// only while nothing else runs on the saved pools' memory; graphs whose replays are not
/// deterministic fail it.
pub const CGC_SAVE_VERIFY: c_uint = 1;

/// `cgc_saved_info_t` (1.6): what a saved buffer holds and needs (`cgc_saved_info`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct cgc_saved_info_t {
    pub struct_size: usize,
    /// Of the buffer's layout.
    pub format_version: u32,
    /// The architecture it was saved on (e.g. 9, 0).
    pub compute_major: c_int,
    pub compute_minor: c_int,
    /// `cuDriverGetVersion` of the saving process, e.g. 13000.
    pub driver_version: c_int,
    pub n_graphs: usize,
    /// Pools `cgc_graphs_restore` creates, in this order.
    pub n_pools: usize,
    /// Module images, embedded or by key.
    pub n_modules: usize,
    /// The graphs' nodes, all together.
    pub n_nodes: usize,
    /// Device memory the restored pools back: exactly their backed ranges.
    pub pool_bytes: usize,
    /// Of the embedded module images.
    pub image_bytes: usize,
    /// Device memory a restore takes on top of `pool_bytes` (the modules it loads and the
    /// graphs' executables), each graph with an executable of its own, as a verifying save
    /// (`CGC_SAVE_VERIFY`) measured it around its rebuild in the saving process (`cuMemGetInfo`,
    /// so other work on the device meanwhile is counted too). 0 when saved without verifying.
    pub restore_bytes: usize,
    /// The same with `CGC_RESTORE_FAMILIES`: one executable for each structure. 0 when saved
    /// without verifying.
    pub family_restore_bytes: usize,
    /// The generators the graphs draw from, which the restore creates again (each with its seed
    /// and offset at the save).
    pub n_generators: usize,
}

/// `cgc_restore_options_t` (1.6): options of `cgc_graphs_restore`. A NULL pointer, or a zeroed
/// struct with `struct_size` set ([`Default`]), means the defaults.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct cgc_restore_options_t {
    pub struct_size: usize,
    /// [`CGC_RESTORE_FAMILIES`], or 0.
    pub flags: c_uint,
    /// Host threads that build and instantiate the graphs, the calling thread one of them (at
    /// most 64, more is INVALID_ARGUMENT): 0 lets cgc choose (up to 4, as many as there are
    /// CPUs), 1 restores on the calling thread alone.
    pub threads: c_uint,
    /// Out, when not NULL: room for `n_generators` handles, which must equal the saved
    /// `cgc_saved_info_t.n_generators` (INVALID_ARGUMENT otherwise). A successful restore writes
    /// there the generators the graphs draw from, created again with their seed and offset at
    /// the save, each with one reference the caller drops with `cgc_rng_destroy`. NULL (with
    /// `n_generators` 0) leaves the generators to the graphs alone.
    pub generators: *mut cgc_rng_t,
    pub n_generators: usize,
}

impl Default for cgc_restore_options_t {
    /// Zeroed, `struct_size` included (set it before passing the struct).
    fn default() -> Self {
        cgc_restore_options_t {
            struct_size: 0,
            flags: 0,
            threads: 0,
            generators: ptr::null_mut(),
            n_generators: 0,
        }
    }
}

/// 1.6, a flag of `cgc_restore_options_t.flags`: restored graphs of one structure (the same
/// nodes of the same kinds and kernels, the same edges) join one family
/// (`cgc_graph_share_executable`): one instantiation for each structure, an update for each other
/// graph; a graph the driver refuses to share instantiates its own (`family_result` says why).
pub const CGC_RESTORE_FAMILIES: c_uint = 1;

// ---- NCCL --------------------------------------------------------------------------------------

/// `cgc_comm_id_t`: an ncclUniqueId.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct cgc_comm_id_t {
    pub internal: [c_char; 128],
}

/// `cgc_dtype_t` (the values of ncclDataType_t).
pub type cgc_dtype_t = c_int;
pub const CGC_INT8: cgc_dtype_t = 0;
pub const CGC_UINT8: cgc_dtype_t = 1;
pub const CGC_INT32: cgc_dtype_t = 2;
pub const CGC_UINT32: cgc_dtype_t = 3;
pub const CGC_INT64: cgc_dtype_t = 4;
pub const CGC_UINT64: cgc_dtype_t = 5;
pub const CGC_FLOAT16: cgc_dtype_t = 6;
pub const CGC_FLOAT32: cgc_dtype_t = 7;
pub const CGC_FLOAT64: cgc_dtype_t = 8;
pub const CGC_BFLOAT16: cgc_dtype_t = 9;

/// `cgc_reduce_op_t`.
pub type cgc_reduce_op_t = c_int;
pub const CGC_SUM: cgc_reduce_op_t = 0;
pub const CGC_PROD: cgc_reduce_op_t = 1;
pub const CGC_MAX: cgc_reduce_op_t = 2;
pub const CGC_MIN: cgc_reduce_op_t = 3;
pub const CGC_AVG: cgc_reduce_op_t = 4;

/// `cgc_nccl_memory_t` (1.5): memory NCCL reaches at its best, the kinds of an NCCL pool.
pub type cgc_nccl_memory_t = c_int;
/// `cuMemAlloc`'ed, not registered with the communicator.
pub const CGC_NCCL_MEMORY_PLAIN: cgc_nccl_memory_t = 0;
/// `ncclMemAlloc`'ed and registered (`ncclCommRegister`, NCCL >= 2.19).
pub const CGC_NCCL_MEMORY_REGISTERED: cgc_nccl_memory_t = 1;
/// `ncclMemAlloc`'ed, a symmetric window (`ncclCommWindowRegister`, NCCL >= 2.27).
pub const CGC_NCCL_MEMORY_SYMMETRIC: cgc_nccl_memory_t = 2;

// ---- version 1.1: the work a graph is made of --------------------------------------------------

/// `cgc_host_fn`: a host function, and the release callback of its user data. Runs on a driver
/// thread; it must not call cgc or CUDA.
pub type cgc_host_fn = Option<unsafe extern "C" fn(user: *mut c_void)>;

/// `cgc_access_property_t` (the values of CUaccessProperty).
pub type cgc_access_property_t = c_int;
pub const CGC_ACCESS_NORMAL: cgc_access_property_t = 0;
pub const CGC_ACCESS_STREAMING: cgc_access_property_t = 1;
pub const CGC_ACCESS_PERSISTING: cgc_access_property_t = 2;

/// `cgc_access_policy_t`: a stream's L2 access-policy window (CUaccessPolicyWindow).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct cgc_access_policy_t {
    pub struct_size: usize,
    pub base: *mut c_void,
    pub bytes: usize,
    pub hit_ratio: f32,
    pub hit_property: cgc_access_property_t,
    pub miss_property: cgc_access_property_t,
}

/// Page-locked allocation: fast for the GPU to read, very slow for the CPU to read.
pub const CGC_HOST_WRITE_COMBINED: c_uint = 0x1;
/// Registration: the device only reads the memory.
pub const CGC_HOST_READ_ONLY: c_uint = 0x2;

/// Wait until `(int32_t)(*addr - value) >= 0` (a counter that wraps).
pub const CGC_WAIT_GEQ: c_uint = 0x0;
/// Wait until `*addr == value`.
pub const CGC_WAIT_EQ: c_uint = 0x1;
/// Wait until `(*addr & value) != 0`.
pub const CGC_WAIT_AND: c_uint = 0x2;
/// Wait until `~(*addr | value) != 0` (devices with the NOR capability).
pub const CGC_WAIT_NOR: c_uint = 0x3;
/// Also make remote writes before the wait visible.
pub const CGC_WAIT_FLUSH: c_uint = 0x4000_0000;
// Writes take flags 0: a write is ordered after the stream's earlier writes (the driver's v2
// operations have no unordered write). A batch may hold a barrier, whose flags say its scope:
/// A barrier making earlier writes visible to the whole system (host, peers).
pub const CGC_BARRIER_SYSTEM: c_uint = 0x0;
/// A barrier making earlier writes visible to the device.
pub const CGC_BARRIER_GPU: c_uint = 0x1;

/// `cgc_mem_op_kind_t` (the values of CUstreamBatchMemOpType).
pub type cgc_mem_op_kind_t = c_int;
pub const CGC_MEM_OP_WAIT_VALUE_32: cgc_mem_op_kind_t = 1;
pub const CGC_MEM_OP_WRITE_VALUE_32: cgc_mem_op_kind_t = 2;
pub const CGC_MEM_OP_FLUSH_REMOTE_WRITES: cgc_mem_op_kind_t = 3;
pub const CGC_MEM_OP_WAIT_VALUE_64: cgc_mem_op_kind_t = 4;
pub const CGC_MEM_OP_WRITE_VALUE_64: cgc_mem_op_kind_t = 5;
/// Batches only: a memory barrier (flags `CGC_BARRIER_*`).
pub const CGC_MEM_OP_BARRIER: cgc_mem_op_kind_t = 6;

/// `cgc_mem_op_t`: one operation of a batch. Its layout is fixed forever (arrays of it are
/// passed), so it has no `struct_size`. `flags`: `CGC_WAIT_*` for waits, 0 for writes and
/// flushes, `CGC_BARRIER_*` for barriers; `address` and `value` are unused by flushes and
/// barriers.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct cgc_mem_op_t {
    pub kind: cgc_mem_op_kind_t,
    pub flags: c_uint,
    pub address: *mut c_void,
    pub value: u64,
}

/// `cgc_function_attribute_t` (the values of CUfunction_attribute).
pub type cgc_function_attribute_t = c_int;
pub const CGC_FUNC_MAX_THREADS_PER_BLOCK: cgc_function_attribute_t = 0;
pub const CGC_FUNC_SHARED_SIZE_BYTES: cgc_function_attribute_t = 1;
pub const CGC_FUNC_CONST_SIZE_BYTES: cgc_function_attribute_t = 2;
pub const CGC_FUNC_LOCAL_SIZE_BYTES: cgc_function_attribute_t = 3;
pub const CGC_FUNC_NUM_REGS: cgc_function_attribute_t = 4;
pub const CGC_FUNC_PTX_VERSION: cgc_function_attribute_t = 5;
pub const CGC_FUNC_BINARY_VERSION: cgc_function_attribute_t = 6;
pub const CGC_FUNC_CACHE_MODE_CA: cgc_function_attribute_t = 7;
pub const CGC_FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES: cgc_function_attribute_t = 8;
pub const CGC_FUNC_PREFERRED_SHARED_MEMORY_CARVEOUT: cgc_function_attribute_t = 9;

/// `cgc_conditional_kind_t` (1.2): the kind of a conditional node (the values of
/// CUgraphConditionalNodeType).
pub type cgc_conditional_kind_t = c_int;
/// The body runs once if the condition is nonzero where the node stands (1.3: a second body
/// runs if it is 0).
pub const CGC_CONDITIONAL_IF: cgc_conditional_kind_t = 0;
/// The body runs while the condition is nonzero, read before each iteration.
pub const CGC_CONDITIONAL_WHILE: cgc_conditional_kind_t = 1;
/// 1.3: body i runs once if the condition is i; none if it is the number of bodies or more.
pub const CGC_CONDITIONAL_SWITCH: cgc_conditional_kind_t = 2;

/// 1.3: iteration i of a WHILE body's generator draws gives what the i-th of as many eager
/// draws gives, for i below this many; each replay advances the generator by this many
/// iterations' worth.
pub const CGC_LOOP_EAGER_ITERATIONS: u64 = 65536;

/// 1.3, a flag of `cgc_capture_conditional_begin_bodies` (WHILE only): the body's own kernels
/// set the node's condition through its handle; cgc adds no kernel at the end of an iteration.
pub const CGC_CONDITIONAL_BODY_SETS_CONDITION: c_uint = 1;

// ---- the function table ------------------------------------------------------------------------

/// Like the header's X-macro lists: every function is written once, and the list generates the
/// `#[repr(C)]` table and the list of names (used by the tests to check the order against
/// `dlsym` of each name).
macro_rules! api_table {
    ($(fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)?;)*) => {
        /// `cgc_api_t`: the function table of `cgc_get_api`, fields in the header's order.
        #[repr(C)]
        pub struct cgc_api_t {
            /// `sizeof(cgc_api_t)` of the library that filled it.
            pub struct_size: usize,
            $(#[allow(missing_docs)] pub $name: unsafe extern "C" fn($($arg: $ty),*) $(-> $ret)?,)*
        }

        /// The names of the table's functions, in order.
        pub const FUNCTION_NAMES: &[&str] = &[$(stringify!($name)),*];

        /// Every function's (name, return type, [(parameter name, type)]) as written here, for
        /// the test that checks them against the header (an empty return type is C's void).
        pub const SIGNATURES: &[(&str, &str, &[(&str, &str)])] =
            &[$((stringify!($name), stringify!($($ret)?), &[$((stringify!($arg), stringify!($ty))),*])),*];

        impl cgc_api_t {
            /// (name, address) of every function in the table, in order.
            pub fn entries(&self) -> Vec<(&'static str, usize)> {
                vec![$((stringify!($name), self.$name as usize)),*]
            }
        }
    };
}

api_table! {
    // status
    fn cgc_version() -> u32;
    fn cgc_status_string(status: cgc_status_t) -> *const c_char;
    fn cgc_last_error() -> *const c_char;
    // devices, streams, events
    fn cgc_device_count(count: *mut c_int) -> cgc_status_t;
    fn cgc_context_create(device: c_int, out: *mut cgc_context_t) -> cgc_status_t;
    fn cgc_context_destroy(ctx: cgc_context_t) -> cgc_status_t;
    fn cgc_context_synchronize(ctx: cgc_context_t) -> cgc_status_t;
    fn cgc_stream_create(ctx: cgc_context_t, flags: c_uint, priority: c_int, out: *mut cgc_stream_t) -> cgc_status_t;
    fn cgc_stream_wrap(ctx: cgc_context_t, native_stream: *mut c_void, out: *mut cgc_stream_t) -> cgc_status_t;
    fn cgc_stream_native(stream: cgc_stream_t) -> *mut c_void;
    fn cgc_stream_destroy(stream: cgc_stream_t) -> cgc_status_t;
    fn cgc_stream_synchronize(stream: cgc_stream_t) -> cgc_status_t;
    fn cgc_stream_query(stream: cgc_stream_t, complete: *mut c_int) -> cgc_status_t;
    fn cgc_stream_wait_event(stream: cgc_stream_t, event: cgc_event_t) -> cgc_status_t;
    fn cgc_event_create(ctx: cgc_context_t, flags: c_uint, out: *mut cgc_event_t) -> cgc_status_t;
    fn cgc_event_destroy(event: cgc_event_t) -> cgc_status_t;
    fn cgc_event_record(event: cgc_event_t, stream: cgc_stream_t) -> cgc_status_t;
    fn cgc_event_synchronize(event: cgc_event_t) -> cgc_status_t;
    fn cgc_event_query(event: cgc_event_t, complete: *mut c_int) -> cgc_status_t;
    fn cgc_event_elapsed_ms(start: cgc_event_t, end: cgc_event_t, ms: *mut f32) -> cgc_status_t;
    // capture
    fn cgc_capture_begin(stream: cgc_stream_t, options: *const cgc_capture_options_t) -> cgc_status_t;
    fn cgc_capture_end(stream: cgc_stream_t, out: *mut cgc_graph_t) -> cgc_status_t;
    fn cgc_capture(stream: cgc_stream_t, options: *const cgc_capture_options_t, body: cgc_capture_fn,
                   user: *mut c_void, out: *mut cgc_graph_t) -> cgc_status_t;
    fn cgc_stream_capture_status(stream: cgc_stream_t, status: *mut cgc_capture_status_t,
                                 capture_id: *mut u64) -> cgc_status_t;
    fn cgc_capture_mode_exchange(mode: *mut cgc_capture_mode_t) -> cgc_status_t;
    // graphs
    fn cgc_graph_launch(graph: cgc_graph_t, stream: cgc_stream_t) -> cgc_status_t;
    fn cgc_graph_upload(graph: cgc_graph_t, stream: cgc_stream_t) -> cgc_status_t;
    fn cgc_graph_info(graph: cgc_graph_t, info: *mut cgc_graph_info_t) -> cgc_status_t;
    fn cgc_graph_pool(graph: cgc_graph_t, pool: *mut cgc_pool_t) -> cgc_status_t;
    fn cgc_graph_debug_dump(graph: cgc_graph_t, dot_path: *const c_char) -> cgc_status_t;
    fn cgc_graph_reset(graph: cgc_graph_t) -> cgc_status_t;
    fn cgc_graph_destroy(graph: cgc_graph_t) -> cgc_status_t;
    fn cgc_graph_native(graph: cgc_graph_t) -> *mut c_void;
    fn cgc_graph_native_exec(graph: cgc_graph_t) -> *mut c_void;
    // pools and the allocator
    fn cgc_pool_create(ctx: cgc_context_t, out: *mut cgc_pool_t) -> cgc_status_t;
    fn cgc_pool_retain(pool: cgc_pool_t) -> cgc_status_t;
    fn cgc_pool_release(pool: cgc_pool_t) -> cgc_status_t;
    fn cgc_malloc(ctx: cgc_context_t, size: usize, stream: cgc_stream_t, out: *mut *mut c_void) -> cgc_status_t;
    fn cgc_free(ptr: *mut c_void) -> cgc_status_t;
    fn cgc_record_stream(ptr: *mut c_void, stream: cgc_stream_t) -> cgc_status_t;
    fn cgc_empty_cache(ctx: cgc_context_t) -> cgc_status_t;
    fn cgc_memory_stats(ctx: cgc_context_t, pool: cgc_pool_t, stats: *mut cgc_memory_stats_t) -> cgc_status_t;
    fn cgc_torch_malloc(size: isize, device: c_int, stream: *mut c_void) -> *mut c_void;
    fn cgc_torch_free(ptr: *mut c_void, size: isize, device: c_int, stream: *mut c_void);
    // NCCL
    fn cgc_nccl_version(version: *mut c_int) -> cgc_status_t;
    fn cgc_comm_unique_id(id: *mut cgc_comm_id_t) -> cgc_status_t;
    fn cgc_comm_create(ctx: cgc_context_t, nranks: c_int, id: *const cgc_comm_id_t, rank: c_int,
                       out: *mut cgc_comm_t) -> cgc_status_t;
    fn cgc_comm_destroy(comm: cgc_comm_t) -> cgc_status_t;
    fn cgc_comm_abort(comm: cgc_comm_t) -> cgc_status_t;
    fn cgc_all_reduce(comm: cgc_comm_t, send: *const c_void, recv: *mut c_void, count: usize,
                      dtype: cgc_dtype_t, op: cgc_reduce_op_t, stream: cgc_stream_t) -> cgc_status_t;
    fn cgc_all_gather(comm: cgc_comm_t, send: *const c_void, recv: *mut c_void, send_count: usize,
                      dtype: cgc_dtype_t, stream: cgc_stream_t) -> cgc_status_t;
    fn cgc_reduce_scatter(comm: cgc_comm_t, send: *const c_void, recv: *mut c_void, recv_count: usize,
                          dtype: cgc_dtype_t, op: cgc_reduce_op_t, stream: cgc_stream_t) -> cgc_status_t;
    fn cgc_broadcast(comm: cgc_comm_t, send: *const c_void, recv: *mut c_void, count: usize,
                     dtype: cgc_dtype_t, root: c_int, stream: cgc_stream_t) -> cgc_status_t;
    fn cgc_send(comm: cgc_comm_t, buf: *const c_void, count: usize, dtype: cgc_dtype_t, peer: c_int,
                stream: cgc_stream_t) -> cgc_status_t;
    fn cgc_recv(comm: cgc_comm_t, buf: *mut c_void, count: usize, dtype: cgc_dtype_t, peer: c_int,
                stream: cgc_stream_t) -> cgc_status_t;
    fn cgc_group_start() -> cgc_status_t;
    fn cgc_group_end() -> cgc_status_t;
    // random numbers
    fn cgc_rng_create(ctx: cgc_context_t, seed: u64, out: *mut cgc_rng_t) -> cgc_status_t;
    fn cgc_rng_destroy(rng: cgc_rng_t) -> cgc_status_t;
    fn cgc_rng_uniform(rng: cgc_rng_t, out: *mut f32, n: usize, stream: cgc_stream_t) -> cgc_status_t;
    fn cgc_rng_normal(rng: cgc_rng_t, out: *mut f32, n: usize, mean: f32, stddev: f32,
                      stream: cgc_stream_t) -> cgc_status_t;
    fn cgc_rng_get_state(rng: cgc_rng_t, seed: *mut u64, offset: *mut u64) -> cgc_status_t;
    fn cgc_rng_set_state(rng: cgc_rng_t, seed: u64, offset: u64) -> cgc_status_t;
    // 1.1: streams
    fn cgc_stream_priority_range(ctx: cgc_context_t, least: *mut c_int, greatest: *mut c_int) -> cgc_status_t;
    fn cgc_stream_priority(stream: cgc_stream_t, priority: *mut c_int) -> cgc_status_t;
    fn cgc_stream_id(stream: cgc_stream_t, id: *mut u64) -> cgc_status_t;
    fn cgc_stream_device(stream: cgc_stream_t, device: *mut c_int, native_context: *mut *mut c_void) -> cgc_status_t;
    fn cgc_stream_copy_attributes(dst: cgc_stream_t, src: cgc_stream_t) -> cgc_status_t;
    fn cgc_stream_set_access_policy(stream: cgc_stream_t, policy: *const cgc_access_policy_t) -> cgc_status_t;
    fn cgc_stream_get_access_policy(stream: cgc_stream_t, policy: *mut cgc_access_policy_t) -> cgc_status_t;
    // 1.1: copies, sets and page-locked host memory
    fn cgc_host_alloc(ctx: cgc_context_t, bytes: usize, flags: c_uint, out: *mut *mut c_void) -> cgc_status_t;
    fn cgc_host_free(ptr: *mut c_void) -> cgc_status_t;
    fn cgc_host_register(ctx: cgc_context_t, ptr: *mut c_void, bytes: usize, flags: c_uint) -> cgc_status_t;
    fn cgc_host_unregister(ptr: *mut c_void) -> cgc_status_t;
    fn cgc_memcpy_htod_async(dst: *mut c_void, src: *const c_void, bytes: usize, stream: cgc_stream_t) -> cgc_status_t;
    fn cgc_memcpy_dtoh_async(dst: *mut c_void, src: *const c_void, bytes: usize, stream: cgc_stream_t) -> cgc_status_t;
    fn cgc_memcpy_dtod_async(dst: *mut c_void, src: *const c_void, bytes: usize, stream: cgc_stream_t) -> cgc_status_t;
    fn cgc_memset_d8_async(dst: *mut c_void, value: u8, count: usize, stream: cgc_stream_t) -> cgc_status_t;
    fn cgc_memset_d16_async(dst: *mut c_void, value: u16, count: usize, stream: cgc_stream_t) -> cgc_status_t;
    fn cgc_memset_d32_async(dst: *mut c_void, value: u32, count: usize, stream: cgc_stream_t) -> cgc_status_t;
    // 1.1: host functions
    fn cgc_launch_host_func(stream: cgc_stream_t, r#fn: cgc_host_fn, user: *mut c_void,
                            release: cgc_host_fn) -> cgc_status_t;
    // 1.1: stream memory operations
    fn cgc_stream_write_value32(stream: cgc_stream_t, address: *mut c_void, value: u32, flags: c_uint) -> cgc_status_t;
    fn cgc_stream_write_value64(stream: cgc_stream_t, address: *mut c_void, value: u64, flags: c_uint) -> cgc_status_t;
    fn cgc_stream_wait_value32(stream: cgc_stream_t, address: *mut c_void, value: u32, flags: c_uint) -> cgc_status_t;
    fn cgc_stream_wait_value64(stream: cgc_stream_t, address: *mut c_void, value: u64, flags: c_uint) -> cgc_status_t;
    fn cgc_stream_batch_mem_op(stream: cgc_stream_t, ops: *const cgc_mem_op_t, count: usize) -> cgc_status_t;
    // 1.1: modules and kernels
    fn cgc_module_load(ctx: cgc_context_t, image: *const c_void, out: *mut cgc_module_t) -> cgc_status_t;
    fn cgc_module_unload(module: cgc_module_t) -> cgc_status_t;
    fn cgc_module_get_function(module: cgc_module_t, name: *const c_char, out: *mut cgc_function_t) -> cgc_status_t;
    fn cgc_function_get_attribute(function: cgc_function_t, attribute: cgc_function_attribute_t,
                                  value: *mut c_int) -> cgc_status_t;
    fn cgc_function_set_attribute(function: cgc_function_t, attribute: cgc_function_attribute_t,
                                  value: c_int) -> cgc_status_t;
    fn cgc_launch_kernel(function: cgc_function_t, grid_x: u32, grid_y: u32, grid_z: u32, block_x: u32,
                         block_y: u32, block_z: u32, shared_bytes: u32, stream: cgc_stream_t,
                         args: *mut *mut c_void) -> cgc_status_t;
    // 1.2: per-node updates of an instantiated graph
    fn cgc_graph_kernel_node_set_enabled(graph: cgc_graph_t, kernel_index: usize, enabled: c_int) -> cgc_status_t;
    fn cgc_graph_kernel_node_set_args(graph: cgc_graph_t, kernel_index: usize, args: *mut *mut c_void) -> cgc_status_t;
    // 1.2: conditional nodes (*body is a stream the library lends until the end)
    fn cgc_capture_conditional_begin(stream: cgc_stream_t, kind: cgc_conditional_kind_t, condition: *const u32,
                                     body: *mut cgc_stream_t) -> cgc_status_t;
    fn cgc_capture_conditional_end(body: cgc_stream_t) -> cgc_status_t;
    // 1.3: a conditional node with all its bodies (bodies[i] lent until its end) and its handle
    fn cgc_capture_conditional_begin_bodies(stream: cgc_stream_t, kind: cgc_conditional_kind_t,
                                            condition: *const u32, flags: c_uint, n_bodies: usize,
                                            bodies: *mut cgc_stream_t, handle: *mut u64) -> cgc_status_t;
    // 1.4: a capture cgc did not begin (a CUstream's) allocating from a pool; record_stream for
    // a native CUstream
    fn cgc_pool_adopt_capture(pool: cgc_pool_t, native_stream: *mut c_void) -> cgc_status_t;
    fn cgc_pool_end_adopted_capture(pool: cgc_pool_t) -> cgc_status_t;
    fn cgc_record_stream_native(ptr: *mut c_void, native_stream: *mut c_void) -> cgc_status_t;
    // 1.5: a pool of memory registered with a communicator (*got: the kind it got); eager
    // allocation from a pool
    fn cgc_nccl_pool_create(comm: cgc_comm_t, capacity: usize, wanted: cgc_nccl_memory_t, out: *mut cgc_pool_t,
                            got: *mut cgc_nccl_memory_t) -> cgc_status_t;
    fn cgc_pool_malloc(pool: cgc_pool_t, size: usize, stream: cgc_stream_t, out: *mut *mut c_void) -> cgc_status_t;
    // 1.6: the status that goes with cgc_last_error() (CGC_SUCCESS for a warning or none); the
    // device's segments and blocks (the arrays are filled only when both fit, the totals always);
    // [ptr, ptr + size rounded up to 512) of a pool's free memory as a block (cgc_free frees it);
    // a private pool whose memory is [base, base + capacity), reserved at exactly `base` and
    // backed as it grows (base and capacity multiples of 2 MiB)
    fn cgc_last_status() -> cgc_status_t;
    fn cgc_memory_snapshot(ctx: cgc_context_t, segments: *mut cgc_segment_info_t, max_segments: usize,
                           blocks: *mut cgc_block_info_t, max_blocks: usize, n_segments: *mut usize,
                           n_blocks: *mut usize) -> cgc_status_t;
    fn cgc_pool_claim(pool: cgc_pool_t, ptr: *mut c_void, size: usize) -> cgc_status_t;
    fn cgc_pool_create_at(ctx: cgc_context_t, base: *mut c_void, capacity: usize, out: *mut cgc_pool_t)
                          -> cgc_status_t;
    // 1.6: graphs saved to a buffer (buffer NULL, capacity 0: *size is the bytes needed), what a
    // saved buffer holds (no driver needed), the graphs rebuilt from one (graphs[] and pools[]
    // receive cgc_saved_info's counts of new handles, each pool with one reference), and a module
    // image added by key for kernels of modules cgc did not load
    fn cgc_graphs_save(graphs: *const cgc_graph_t, n_graphs: usize, options: *const cgc_save_options_t,
                       buffer: *mut c_void, capacity: usize, size: *mut usize) -> cgc_status_t;
    fn cgc_saved_info(data: *const c_void, size: usize, info: *mut cgc_saved_info_t) -> cgc_status_t;
    fn cgc_graphs_restore(ctx: cgc_context_t, data: *const c_void, size: usize, options: *const cgc_restore_options_t,
                          graphs: *mut cgc_graph_t, n_graphs: usize, pools: *mut cgc_pool_t, n_pools: usize)
                          -> cgc_status_t;
    fn cgc_module_add_image(ctx: cgc_context_t, key: *const c_char, image: *const c_void, size: usize)
                            -> cgc_status_t;
    // 1.6: families: `graph` gives up its own executable and shares `leader`'s (NOT_SUPPORTED
    // when the driver refuses the update; cgc_graph_info's family_result says why)
    fn cgc_graph_share_executable(graph: cgc_graph_t, leader: cgc_graph_t) -> cgc_status_t;
    // 1.6: the record of module images (through CUPTI): `on` 1 records the image of every module
    // the driver loads from then on, 0 stops; *images and *bytes (when not NULL) receive what the
    // record holds after the call, also when it fails (INVALID_STATE while another CUPTI client is
    // subscribed, NOT_SUPPORTED without libcupti). Needs no context and no driver call.
    fn cgc_module_record(on: c_int, images: *mut usize, bytes: *mut usize) -> cgc_status_t;
}

/// `cgc_get_api`, the one symbol resolved with `dlsym`.
pub type cgc_get_api_fn =
    unsafe extern "C" fn(version: u32, out: *mut *const cgc_api_t) -> cgc_status_t;

// ---- loading -----------------------------------------------------------------------------------

const RTLD_NOW: c_int = 2; // glibc's values (Linux is the only platform cgc supports)
const RTLD_LOCAL: c_int = 0;

// Declared here rather than taken from a crate: the crate has no dependencies. Linking "dl"
// explicitly keeps glibc older than 2.34 (where these live in libdl) working.
#[link(name = "dl")]
extern "C" {
    fn dlopen(filename: *const c_char, flag: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn dlerror() -> *mut c_char;
}

/// The environment variable naming the library file (a full path).
pub const LIBRARY_ENV: &str = "CGC_LIBRARY";
/// The name tried through the dynamic loader's search path when `CGC_LIBRARY` is not set.
pub const DEFAULT_LIBRARY: &str = "libcgc.so.1";

// The table once loaded (null before, or after a failed load). Loading happens at most once per
// process, like the library's own loading of libcuda: the outcome (success or the message) is
// kept, so that every later call answers the same way and cheaply.
static API: AtomicPtr<cgc_api_t> = AtomicPtr::new(ptr::null_mut());
static LOAD_ONCE: Once = Once::new();
static LOAD_ERROR: Mutex<Option<String>> = Mutex::new(None);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding this lock cannot leave the Option half-written; go on.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The library's function table, loading the library on first use. The error is a complete
/// message: what was tried, why it failed, and how to point `CGC_LIBRARY` at the library.
pub fn api() -> Result<&'static cgc_api_t, String> {
    let p = API.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: a non-null value is a table cgc_get_api documents as static, never freed,
        // and the library is never closed.
        return Ok(unsafe { &*p });
    }
    LOAD_ONCE.call_once(|| match load() {
        Ok(table) => API.store(
            table as *const cgc_api_t as *mut cgc_api_t,
            Ordering::Release,
        ),
        Err(message) => *lock(&LOAD_ERROR) = Some(message),
    });
    let p = API.load(Ordering::Acquire);
    if p.is_null() {
        Err(lock(&LOAD_ERROR)
            .clone()
            .unwrap_or_else(|| "cgc: libcgc failed to load".to_string()))
    } else {
        // SAFETY: as above.
        Ok(unsafe { &*p })
    }
}

fn dlerror_text() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl call on
    // this thread; it is copied at once.
    unsafe {
        let e = dlerror();
        if e.is_null() {
            "no reason given".to_string()
        } else {
            CStr::from_ptr(e).to_string_lossy().into_owned()
        }
    }
}

fn load() -> Result<&'static cgc_api_t, String> {
    use std::os::unix::ffi::OsStrExt;
    let from_env = std::env::var_os(LIBRARY_ENV).filter(|v| !v.is_empty());
    let (name, how) = match &from_env {
        Some(path) => (
            path.to_string_lossy().into_owned(),
            format!("{}={}", LIBRARY_ENV, path.to_string_lossy()),
        ),
        None => (
            DEFAULT_LIBRARY.to_string(),
            format!(
                "{} through the dynamic loader's search path ({} is not set)",
                DEFAULT_LIBRARY, LIBRARY_ENV
            ),
        ),
    };
    let hint = format!(
        "set {} to the full path of libcgc.so.1, or add its directory to LD_LIBRARY_PATH",
        LIBRARY_ENV
    );
    let bytes = match &from_env {
        Some(path) => path.as_bytes().to_vec(),
        None => DEFAULT_LIBRARY.as_bytes().to_vec(),
    };
    let c_name = CString::new(bytes).map_err(|_| {
        format!(
            "cgc: cannot load the cgc library: {} contains a NUL byte; {}",
            how, hint
        )
    })?;
    // SAFETY: c_name is a valid C string; the handle is never closed, so everything resolved
    // from it stays valid for the whole process.
    let handle = unsafe { dlopen(c_name.as_ptr(), RTLD_NOW | RTLD_LOCAL) };
    if handle.is_null() {
        return Err(format!(
            "cgc: cannot load the cgc library '{}' (tried {}): {}; {}",
            name,
            how,
            dlerror_text(),
            hint
        ));
    }
    // SAFETY: a NUL-terminated literal; the handle is valid.
    let sym = unsafe { dlsym(handle, b"cgc_get_api\0".as_ptr() as *const c_char) };
    if sym.is_null() {
        return Err(format!(
            "cgc: '{}' (tried {}) has no symbol cgc_get_api, so it is not libcgc: {}; {}",
            name,
            how,
            dlerror_text(),
            hint
        ));
    }
    // SAFETY: cgc_get_api has exactly this signature in capi/cgc.h.
    let get_api: cgc_get_api_fn =
        unsafe { std::mem::transmute::<*mut c_void, cgc_get_api_fn>(sym) };
    let mut table: *const cgc_api_t = ptr::null();
    // SAFETY: `table` is a valid out pointer.
    let status = unsafe { get_api(CGC_VERSION, &mut table) };
    if status != CGC_SUCCESS || table.is_null() {
        return Err(format!(
            "cgc: '{}' refused cgc_get_api for version {}.{}.{} (status {}): this crate needs libcgc {}.x at minor \
             version {} or later; {}",
            name, CGC_VERSION_MAJOR, CGC_VERSION_MINOR, CGC_VERSION_PATCH, status, CGC_VERSION_MAJOR, CGC_VERSION_MINOR,
            hint
        ));
    }
    // SAFETY: the library filled `table` with a pointer to its static table.
    let api: &'static cgc_api_t = unsafe { &*table };
    // An older minor version would have a shorter table (cgc_get_api already refuses one for
    // CGC_VERSION); this crate calls every field of the 1.6 table, so all of them must be there.
    if api.struct_size < std::mem::size_of::<cgc_api_t>() {
        return Err(format!(
            "cgc: '{}' has a function table of {} bytes, shorter than the {} this crate needs; {}",
            name,
            api.struct_size,
            std::mem::size_of::<cgc_api_t>(),
            hint
        ));
    }
    // SAFETY: the table is complete (checked above).
    let version = unsafe { (api.cgc_version)() };
    if version >> 16 != CGC_VERSION_MAJOR {
        return Err(format!(
            "cgc: '{}' is version {}.{}.{}, but this crate needs major version {}; {}",
            name,
            version >> 16,
            (version >> 8) & 0xff,
            version & 0xff,
            CGC_VERSION_MAJOR,
            hint
        ));
    }
    Ok(api)
}
