"""cgc for Python: CUDA-graph capture with torch.cuda.graph's semantics, through libcgc.so.1.

One ctypes module, no compiled extension and no dependencies (Python >= 3.8). The library is
loaded on first use, not at import, so that ``import cgc`` never fails: from $CGC_LIBRARY (a full
path) if set, else "libcgc.so.1" through the dynamic loader's search path. Every function is
called through the table of ``cgc_get_api`` (checked by struct_size and cgc_version()).

    import cgc
    ctx = cgc.Context(0)
    stream = cgc.Stream(ctx)
    g = cgc.Graph()
    with cgc.graph(g, stream=stream):
        ...                      # work issued on `stream` is captured
    g.replay()

Since 1.1 a graph can hold the caller's own work (examples/python/graph_work.py): Stream's
copies and sets (memcpy_htod, memset_d32, ...), host functions (launch_host_func), stream memory
operations (write_value32, wait_value32, batch_mem_op), and kernels of a Module launched with
Function.launch. HostBuffer is the page-locked host memory that captured copies read and write at
every replay, so per-replay values are written there between replays.

Since 1.2 a graph can change without a new Graph: ``with cgc.graph(g, stream=s, update=True):``
recaptures into g, whose executable takes the new graph in place when the driver accepts it (same
topology: new pointers or values), else is instantiated anew (g.info().last_update says which);
and g.set_kernel_enabled(i, False) / g.set_kernel_args(i, args) change its i-th captured kernel.
Inside a capture, ``with stream.conditional(cgc.ConditionalKind.WHILE, cond) as body:`` adds a
conditional node whose body is the work issued on `body` in the block (kernels, copies, sets,
nested conditionals and, since 1.3, allocations and generator draws), run while the device uint32
at `cond` is nonzero (IF: once if it is).

Since 1.3 ``with stream.conditional_bodies(kind, cond, n_bodies) as (bodies, handle):`` adds a node
with all its bodies at once: IF/ELSE (2 bodies, the second runs when the condition is 0), SWITCH
(body i runs when it is i), or a WHILE whose own kernels set the condition through `handle`
(flags=CONDITIONAL_BODY_SETS_CONDITION).

Since 1.4, with cgc as PyTorch's allocator (use_as_torch_allocator), the captures torch begins
itself (torch.cuda.graph, make_graphed_callables) allocate from cgc's pools too, one per torch
pool id (torch_pool(g.pool()) is it), and cgc.graph takes torch.cuda.graph's arguments (pool,
stream, capture_error_mode) and enters as it does. Pool.adopt_capture lets any capture begun
outside cgc allocate from a cgc pool.

Since 1.5 ``cgc.Pool.nccl(comm, capacity, wanted)`` makes a pool of memory registered with an NCCL
communicator (a fixed arena, NcclMemory.REGISTERED or SYMMETRIC where NCCL has them; the kind it
got is ``pool.nccl_memory``), which captures allocate from through ``pool=`` and eager code
through ``pool.malloc(size, stream)``, eager allocation from any pool.

Since 1.6 ``ctx.memory_snapshot()`` lists the device's memory as cgc holds it, as
torch.cuda.memory_snapshot() does: every segment (Segment: a driver allocation of the device cache
or of a pool) with its blocks (Block, in a BlockState: FREE, ALLOCATED or WAITING),
``pool.claim(ptr, size)`` allocates a given range of a pool's free memory at its address (to put a
pool back to a state it had), and ``cgc.Pool.at(ctx, base, capacity)`` makes a pool whose memory
is a virtual range reserved at ``base``, so that the same requests in the same order get the same
addresses. Graphs of such pools can be saved: ``data = cgc.save_graphs(graphs, pools)`` writes
them, with their kernels and the layout of their pools (``verify=True`` replays each graph beside
its rebuild from the bytes, failing when they write different bytes), to bytes that
``cgc.saved_info(data)`` describes without a driver and ``ctx.restore_graphs(data)`` rebuilds (in
another process on the same architecture and driver version) into new Graphs and Pools at the
same addresses, ready to launch; ``ctx.add_module_image(key, image)`` names a module cgc did not
load by a key, and ``cgc.module_record(True)`` records the image of every module the driver loads
(through CUPTI), so that a save embeds kernels of libraries cgc did not load. Graphs of one
topology that differ in their nodes' parameters (one per batch size) can share one executable
(families): ``g.share_executable(leader)`` makes g a member of leader's family, the executable
updated in place to a member's nodes before its launch (``info().family_size``,
``info().family_result``), and ``ctx.restore_graphs(data, families=True)`` makes restored graphs
of one structure share theirs (``threads=`` sets how many host threads build and instantiate
them).

Errors are ``cgc.Error`` (``.status`` is a ``cgc.Status`` or, for a code this module does not
know, the raw int; ``.message`` is cgc_last_error() copied right after the failing call, on the
same thread). Each status has its subclass, e.g. ``cgc.CaptureUnjoinedError``. Since 1.6
``cgc.last_status()`` is the status that goes with this thread's last message, for calls that
return no status (cgc_torch_malloc's NULL: OUT_OF_MEMORY or another refusal). Arguments this
module checks itself (values ctypes would silently cut to their low bits, host buffers too small
for a copy) raise InvalidArgumentError worded like the library's, naming the C function.
"""

import contextlib
import ctypes
import enum
import gc
import itertools
import operator
import os
import sys
import threading
from collections import namedtuple

__all__ = [
    "Status", "Error", "LibraryError", "CaptureMode", "CaptureStatus", "DType", "ReduceOp",
    "Context", "Stream", "Event", "Graph", "Pool", "Rng", "Comm", "graph", "capture",
    "version", "device_count", "status_string", "library_path", "api",
    "malloc", "free", "record_stream", "memory_stats", "empty_cache",
    "capture_mode", "exchange_capture_mode", "nccl_version", "nccl_group",
    "use_as_torch_allocator", "GraphInfo", "MemoryStats",
    # 1.1: the work a graph is made of
    "HostBuffer", "Module", "Function", "MemOp", "AccessPolicy", "GRAPH_NODE_KINDS",
    "AccessProperty", "MemOpKind", "FunctionAttribute",
    "HOST_WRITE_COMBINED", "HOST_READ_ONLY", "WAIT_GEQ", "WAIT_EQ", "WAIT_AND", "WAIT_NOR",
    "WAIT_FLUSH", "BARRIER_SYSTEM", "BARRIER_GPU", "pending_host_funcs",
    # 1.2: graphs that change without recapture, and control flow on the device
    "GraphUpdate", "ConditionalKind",
    # 1.3: conditional nodes with every body at once, and what bodies may hold
    "ConditionalNode", "CONDITIONAL_BODY_SETS_CONDITION", "LOOP_EAGER_ITERATIONS",
    # 1.4: captures torch begins, on cgc's pools
    "torch_graph_pools", "torch_pool", "torch_pool_ids", "record_stream_native",
    # 1.5: pools of memory registered with a communicator, eager allocation from a pool
    "NcclMemory",
    # 1.6: the status that goes with the last message; the device's segments and blocks; saved
    # graphs; families (Graph.share_executable, restore_graphs(families=True))
    "last_status", "memory_snapshot", "Segment", "Block", "BlockState", "save_graphs", "saved_info", "SavedInfo",
    "RESTORE_FAMILIES", "SAVE_VERIFY", "module_record", "RecordedImages",
]

# The header's CGC_VERSION that this module was written against: cgc_get_api hands an older
# minor version's table to a newer library, and struct_size says how much of it there is.
VERSION_MAJOR, VERSION_MINOR, VERSION_PATCH = 1, 6, 0
_HEADER_VERSION = (VERSION_MAJOR << 16) | (VERSION_MINOR << 8) | VERSION_PATCH

STREAM_NON_BLOCKING = 0x1
EVENT_TIMING = 0x1
CAPTURE_UPLOAD = 0x1
CAPTURE_AUTO_FREE_ON_LAUNCH = 0x2
# 1.6: restore_options_t.flags: restored graphs of one structure share one executable (a family)
RESTORE_FAMILIES = 0x1
# 1.6: save_options_t.flags: each saved graph is replayed beside its rebuild from the saved bytes
SAVE_VERIFY = 0x1
# 1.1: page-locked host memory (HostBuffer) ...
HOST_WRITE_COMBINED = 0x1  # allocate: fast for the GPU to read, very slow for the CPU to read
HOST_READ_ONLY = 0x2  # register: the device only reads it
# ... and the flags of stream memory operations: a wait's condition (one of them, optionally
# | WAIT_FLUSH) ...
WAIT_GEQ = 0x0  # until (int32)(*address - value) >= 0: a counter that wraps
WAIT_EQ = 0x1  # until *address == value
WAIT_AND = 0x2  # until (*address & value) != 0
WAIT_NOR = 0x3  # until ~(*address | value) != 0 (devices with the NOR capability)
WAIT_FLUSH = 0x40000000  # also make remote writes before the wait visible
# Writes take flags 0: a write is ordered after the stream's earlier writes (the driver's v2
# operations have no unordered write). A batch may hold a barrier (MemOp.barrier), whose flags
# say its scope:
BARRIER_SYSTEM = 0x0  # earlier writes visible to the whole system (host, peers)
BARRIER_GPU = 0x1  # earlier writes visible to the device
# 1.3: the flag of Stream.conditional_bodies. WHILE only: the body's own kernels set the node's
# condition (CUDA's device function cudaGraphSetConditional(handle, value), the handle passed to
# them as a 64-bit integer), so cgc adds no kernel at the end of each iteration; a body that never
# sets it loops for ever.
CONDITIONAL_BODY_SETS_CONDITION = 0x1
# 1.3: iteration i of a WHILE body draws what the i-th of as many eager draws would, for i below
# this many; each replay advances the generator by this many iterations' worth of numbers (those
# of one iteration rounded up to 4), so what follows the loop never repeats them.
LOOP_EAGER_ITERATIONS = 65536
# The most bodies a node has (a SWITCH's; the header's "SWITCH with 1 to 256"). The binding
# allocates the array of lent bodies, so it refuses more itself rather than allocate any size.
_MAX_CONDITIONAL_BODIES = 256


# ---- status and errors ---------------------------------------------------------------------


class Status(enum.IntEnum):
    """cgc_status_t. Values are pinned forever by the C ABI."""

    SUCCESS = 0
    INVALID_ARGUMENT = 1
    INVALID_HANDLE = 2
    INVALID_STATE = 3
    NO_DRIVER = 4
    NO_DEVICE = 5
    OUT_OF_MEMORY = 6
    CAPTURE_UNSUPPORTED = 7
    CAPTURE_INVALIDATED = 8
    CAPTURE_UNJOINED = 9
    CAPTURE_LEGACY_STREAM = 10
    NCCL_UNAVAILABLE = 11
    NCCL = 12
    CUDA = 13
    NOT_SUPPORTED = 14  # the driver or device is too old; 1.6: a join the driver refuses (share_executable)
    INTERNAL = 15
    NOT_SAVABLE = 16  # 1.6: a graph holds what a saved buffer cannot rebuild (save_graphs)
    SAVED_MISMATCH = 17  # 1.6: a saved buffer this process cannot restore (damaged, another format,
    # architecture or driver, a kernel it lacks)

    @classmethod
    def of(cls, code):
        """The Status for `code`, or the plain int for a code this module does not know (a newer
        library may add codes; they are kept, not mapped to something wrong)."""
        try:
            return cls(int(code))
        except ValueError:
            return int(code)

    @property
    def c_name(self):
        """The C enumerator, e.g. "CGC_ERROR_INVALID_ARGUMENT"."""
        return "CGC_SUCCESS" if self == 0 else "CGC_ERROR_" + self.name


class Error(Exception):
    """A failed cgc call. ``Error(status, message)`` builds the subclass for `status`."""

    status = None

    def __new__(cls, status=None, message=""):
        if cls is Error and status is not None:
            cls = _ERROR_CLASSES.get(int(status), Error)
        # Exception.__new__, not super(): MemoryError refuses to build a subclass instance.
        return Exception.__new__(cls, status, message)

    def __init__(self, status=None, message=""):
        super().__init__(status, message)
        self.status = None if status is None else Status.of(status)
        self.message = message

    def __str__(self):
        if isinstance(self.status, Status):
            name = "%s (%d)" % (self.status.c_name, self.status)
        elif self.status is None:
            name = "cgc"
        else:
            name = "unknown cgc status %d" % self.status
        return "%s: %s" % (name, self.message) if self.message else name


class LibraryError(Error):
    """libcgc.so.1 could not be loaded or is not a usable cgc 1.x (status None)."""


def _error_class(status, name, doc, extra_bases=()):
    cls = type(name, (Error,) + extra_bases, {"__doc__": doc, "__module__": __name__})
    _ERROR_CLASSES[int(status)] = cls
    return cls


_ERROR_CLASSES = {}
InvalidArgumentError = _error_class(Status.INVALID_ARGUMENT, "InvalidArgumentError", "CGC_ERROR_INVALID_ARGUMENT", (ValueError,))
InvalidHandleError = _error_class(Status.INVALID_HANDLE, "InvalidHandleError", "CGC_ERROR_INVALID_HANDLE")
InvalidStateError = _error_class(Status.INVALID_STATE, "InvalidStateError", "CGC_ERROR_INVALID_STATE")
NoDriverError = _error_class(Status.NO_DRIVER, "NoDriverError", "CGC_ERROR_NO_DRIVER")
NoDeviceError = _error_class(Status.NO_DEVICE, "NoDeviceError", "CGC_ERROR_NO_DEVICE")
OutOfMemoryError = _error_class(Status.OUT_OF_MEMORY, "OutOfMemoryError", "CGC_ERROR_OUT_OF_MEMORY", (MemoryError,))
CaptureUnsupportedError = _error_class(Status.CAPTURE_UNSUPPORTED, "CaptureUnsupportedError", "CGC_ERROR_CAPTURE_UNSUPPORTED")
CaptureInvalidatedError = _error_class(Status.CAPTURE_INVALIDATED, "CaptureInvalidatedError", "CGC_ERROR_CAPTURE_INVALIDATED")
CaptureUnjoinedError = _error_class(Status.CAPTURE_UNJOINED, "CaptureUnjoinedError", "CGC_ERROR_CAPTURE_UNJOINED")
CaptureLegacyStreamError = _error_class(Status.CAPTURE_LEGACY_STREAM, "CaptureLegacyStreamError", "CGC_ERROR_CAPTURE_LEGACY_STREAM")
NcclUnavailableError = _error_class(Status.NCCL_UNAVAILABLE, "NcclUnavailableError", "CGC_ERROR_NCCL_UNAVAILABLE")
NcclError = _error_class(Status.NCCL, "NcclError", "CGC_ERROR_NCCL")
CudaError = _error_class(Status.CUDA, "CudaError", "CGC_ERROR_CUDA")
NotSupportedError = _error_class(Status.NOT_SUPPORTED, "NotSupportedError", "CGC_ERROR_NOT_SUPPORTED")
InternalError = _error_class(Status.INTERNAL, "InternalError", "CGC_ERROR_INTERNAL")
NotSavableError = _error_class(Status.NOT_SAVABLE, "NotSavableError", "CGC_ERROR_NOT_SAVABLE (1.6)")
SavedMismatchError = _error_class(Status.SAVED_MISMATCH, "SavedMismatchError", "CGC_ERROR_SAVED_MISMATCH (1.6)")
__all__ += [c.__name__ for c in _ERROR_CLASSES.values()]


class CaptureMode(enum.IntEnum):
    GLOBAL = 0
    THREAD_LOCAL = 1
    RELAXED = 2


class CaptureStatus(enum.IntEnum):
    NONE = 0
    ACTIVE = 1
    BROKEN = 2


class DType(enum.IntEnum):  # ncclDataType_t's values
    INT8, UINT8, INT32, UINT32, INT64, UINT64, FLOAT16, FLOAT32, FLOAT64, BFLOAT16 = range(10)


class ReduceOp(enum.IntEnum):
    SUM, PROD, MAX, MIN, AVG = range(5)


class AccessProperty(enum.IntEnum):  # CUaccessProperty's values
    NORMAL = 0
    STREAMING = 1
    PERSISTING = 2


class MemOpKind(enum.IntEnum):  # CUstreamBatchMemOpType's values
    WAIT_VALUE_32 = 1
    WRITE_VALUE_32 = 2
    FLUSH_REMOTE_WRITES = 3
    WAIT_VALUE_64 = 4
    WRITE_VALUE_64 = 5
    BARRIER = 6  # batches only: a memory barrier (flags BARRIER_*)


class FunctionAttribute(enum.IntEnum):  # CUfunction_attribute's values
    MAX_THREADS_PER_BLOCK = 0  # read only
    SHARED_SIZE_BYTES = 1  # static shared memory; read only
    CONST_SIZE_BYTES = 2  # read only
    LOCAL_SIZE_BYTES = 3  # read only
    NUM_REGS = 4  # read only
    PTX_VERSION = 5  # read only
    BINARY_VERSION = 6  # read only
    CACHE_MODE_CA = 7  # read only
    MAX_DYNAMIC_SHARED_SIZE_BYTES = 8  # settable: needed above 48 KiB of dynamic shared memory
    PREFERRED_SHARED_MEMORY_CARVEOUT = 9  # settable: percent of L1 given to shared memory


class ConditionalKind(enum.IntEnum):  # cgc_conditional_kind_t: the driver's CUgraphConditionalNodeType
    IF = 0  # the body runs once if the condition is nonzero where the node stands (IF/ELSE: else the second)
    WHILE = 1  # the body runs while the condition is nonzero, read before each iteration
    SWITCH = 2  # 1.3: body i runs once if the condition is i; none if it is the number of bodies or more


class NcclMemory(enum.IntEnum):  # cgc_nccl_memory_t (1.5): memory NCCL reaches at its best
    PLAIN = 0  # cuMemAlloc'ed, not registered with the communicator
    REGISTERED = 1  # ncclMemAlloc'ed and registered (ncclCommRegister, NCCL >= 2.19)
    SYMMETRIC = 2  # ncclMemAlloc'ed, a symmetric window (ncclCommWindowRegister, NCCL >= 2.27)


class GraphUpdate(enum.IntEnum):  # cgc_graph_update_t: how the last update capture changed a graph
    NONE = 0  # never updated
    IN_PLACE = 1  # the executable took the new graph (same topology)
    REINSTANTIATED = 2  # the driver refused it (GraphInfo.last_update_result says why): a new executable


class BlockState(enum.IntEnum):  # cgc_block_state_t (1.6): a block's state in a memory snapshot
    FREE = 0  # cached: reusable
    ALLOCATED = 1  # handed out and not yet freed
    WAITING = 2  # freed, not yet reusable: work recorded on it may still run


# ---- C structs -----------------------------------------------------------------------------


class _Sized(ctypes.Structure):
    """A cgc option/result struct: struct_size is filled in, so the library knows our layout."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.struct_size = ctypes.sizeof(self)


class capture_options_t(_Sized):
    _fields_ = [("struct_size", ctypes.c_size_t), ("mode", ctypes.c_int),
                ("pool", ctypes.c_void_p), ("flags", ctypes.c_uint),
                ("update", ctypes.c_void_p)]  # 1.2: the graph this capture updates, or NULL


# The header's CGC_GRAPH_NODE_KINDS, in order: cgc_graph_info_t's counts of nodes by kind (1.1).
GRAPH_NODE_KINDS = ("kernel_nodes", "memcpy_nodes", "memset_nodes", "host_nodes", "child_graph_nodes",
                    "empty_nodes", "event_wait_nodes", "event_record_nodes", "mem_alloc_nodes",
                    "mem_free_nodes", "mem_op_nodes", "conditional_nodes")


class graph_info_t(_Sized):
    _fields_ = [("struct_size", ctypes.c_size_t), ("node_count", ctypes.c_size_t),
                ("replay_count", ctypes.c_uint64), ("uploaded", ctypes.c_int),
                ("pool_bytes_reserved", ctypes.c_size_t)] + [
        (kind, ctypes.c_size_t) for kind in GRAPH_NODE_KINDS + ("other_nodes",)] + [
        # 1.2: updates by capture
        ("update_count", ctypes.c_uint64), ("last_update", ctypes.c_int), ("last_update_result", ctypes.c_int),
        # 1.6: families (cgc_graph_share_executable)
        ("family_size", ctypes.c_size_t), ("family_result", ctypes.c_int)]


class memory_stats_t(_Sized):
    _fields_ = [("struct_size", ctypes.c_size_t), ("bytes_reserved", ctypes.c_size_t),
                ("bytes_allocated", ctypes.c_size_t), ("peak_bytes_allocated", ctypes.c_size_t),
                ("peak_bytes_reserved", ctypes.c_size_t), ("num_driver_allocs", ctypes.c_uint64),
                ("num_driver_frees", ctypes.c_uint64)]


class comm_id_t(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


class access_policy_t(_Sized):
    _fields_ = [("struct_size", ctypes.c_size_t), ("base", ctypes.c_void_p), ("bytes", ctypes.c_size_t),
                ("hit_ratio", ctypes.c_float), ("hit_property", ctypes.c_int), ("miss_property", ctypes.c_int)]


class mem_op_t(ctypes.Structure):
    """cgc_mem_op_t: a fixed layout (arrays of it are passed), so no struct_size."""

    _fields_ = [("kind", ctypes.c_int), ("flags", ctypes.c_uint), ("address", ctypes.c_void_p),
                ("value", ctypes.c_uint64)]


class segment_info_t(ctypes.Structure):
    """cgc_segment_info_t (1.6): a fixed layout (arrays of it are passed), so no struct_size."""

    _fields_ = [("address", ctypes.c_void_p), ("size", ctypes.c_size_t), ("allocated_bytes", ctypes.c_size_t),
                ("pool", ctypes.c_void_p), ("stream_id", ctypes.c_uint64), ("small", ctypes.c_int),
                ("first_block", ctypes.c_size_t), ("n_blocks", ctypes.c_size_t)]


class block_info_t(ctypes.Structure):
    """cgc_block_info_t (1.6): a fixed layout (arrays of it are passed), so no struct_size."""

    _fields_ = [("address", ctypes.c_void_p), ("size", ctypes.c_size_t), ("requested", ctypes.c_size_t),
                ("state", ctypes.c_int)]


class save_options_t(_Sized):
    """cgc_save_options_t (1.6): more pools at fixed addresses to save with the graphs; flags
    SAVE_VERIFY (each graph replayed beside its rebuild from the saved bytes), or 0."""

    _fields_ = [("struct_size", ctypes.c_size_t), ("pools", ctypes.POINTER(ctypes.c_void_p)),
                ("n_pools", ctypes.c_size_t), ("flags", ctypes.c_uint)]


class saved_info_t(_Sized):
    """cgc_saved_info_t (1.6): what a saved buffer holds and needs."""

    _fields_ = [("struct_size", ctypes.c_size_t), ("format_version", ctypes.c_uint32),
                ("compute_major", ctypes.c_int), ("compute_minor", ctypes.c_int), ("driver_version", ctypes.c_int),
                ("n_graphs", ctypes.c_size_t), ("n_pools", ctypes.c_size_t), ("n_modules", ctypes.c_size_t),
                ("n_nodes", ctypes.c_size_t), ("pool_bytes", ctypes.c_size_t), ("image_bytes", ctypes.c_size_t),
                ("restore_bytes", ctypes.c_size_t), ("family_restore_bytes", ctypes.c_size_t),
                ("n_generators", ctypes.c_size_t)]


class restore_options_t(_Sized):
    """cgc_restore_options_t (1.6): flags RESTORE_FAMILIES, or 0; threads, the host threads that
    read the checksum (at most 4), check and instantiate the graphs, which the calling thread
    builds (the calling thread one of them, at most 64): 0 lets cgc
    choose (up to 4, as many as there are CPUs), 1 restores on the calling thread alone;
    generators, an out array of n_generators handles (exactly saved_info_t.n_generators of them)
    that a successful restore fills with the generators the graphs draw from, each created again
    at its saved seed and offset and with a reference of the caller's (cgc_rng_destroy), or NULL
    (n_generators 0) to leave them to the graphs alone."""

    _fields_ = [("struct_size", ctypes.c_size_t), ("flags", ctypes.c_uint), ("threads", ctypes.c_uint),
                ("generators", ctypes.POINTER(ctypes.c_void_p)), ("n_generators", ctypes.c_size_t)]


# node_count counts every captured node; the kinds split it (other_nodes: kinds the header does
# not list). cgc's own completion record is in none of them. update_count counts the captures
# that updated the graph (update=True), last_update (a GraphUpdate) says how the last one did,
# last_update_result is the driver's CUgraphExecUpdateResult of it (0 in place; 2 = topology
# changed). 1.6: family_size counts the graphs sharing its executable (Graph.share_executable: 1
# with its own), family_result is why its last join was refused (a CUgraphExecUpdateResult; 0 when
# none was).
GraphInfo = namedtuple("GraphInfo", ("node_count", "replay_count", "uploaded", "pool_bytes_reserved")
                       + GRAPH_NODE_KINDS + ("other_nodes", "update_count", "last_update", "last_update_result",
                                             "family_size", "family_result"))
MemoryStats = namedtuple("MemoryStats", "bytes_reserved bytes_allocated peak_bytes_allocated "
                         "peak_bytes_reserved num_driver_allocs num_driver_frees")
# 1.6: memory_snapshot's segments (driver allocations) and their blocks, by address. A Segment's
# pool is the raw cgc_pool_t handle (an int: compare it with Pool.handle) of the private pool it
# belongs to, None for the device's cache; no reference is taken (the pool may be gone by the
# time it is read). stream_id is the cgc_stream_id its free blocks are kept for (0: any stream);
# small is True for a 2 MiB segment of requests up to 1 MiB. A Block's size is what it spans (a
# 512-byte multiple), requested what was asked for when ALLOCATED (0 otherwise), state a BlockState
# (or the plain int for a state a newer library added).
Segment = namedtuple("Segment", "address size allocated_bytes pool stream_id small blocks")
Block = namedtuple("Block", "address size requested state")
# 1.6: what saved_info() reads from the bytes of save_graphs(): the layout's format_version; the
# architecture (compute_major, compute_minor, e.g. 9, 0) and cuDriverGetVersion (driver_version,
# e.g. 13000) of the saving process, which the restoring one must have; the graphs, the pools
# (created by the restore, in this order), the module images (embedded or named by key) and the
# nodes it holds; pool_bytes, the device memory the restored pools back (exactly their backed
# ranges), and image_bytes, the embedded images' size; restore_bytes, the device memory a restore
# takes on top of pool_bytes (the modules it loads, an executable for every graph), and
# family_restore_bytes, the same for a restore with families=True (one executable for each
# structure): a verifying save (save_graphs(verify=True)) measures both in the saving process
# with cuMemGetInfo around its rebuild, so other allocations on the device meanwhile count too
# (not memory the driver takes once per process, which the saving process had paid and a fresh
# restoring process may pay too); both are 0 in bytes saved without verifying; n_generators,
# the generators (Rng) the graphs draw from, which a restore creates again at the seed and offset
# they had at the save (restore_graphs(generators=True) returns them).
SavedInfo = namedtuple("SavedInfo", "format_version compute_major compute_minor driver_version n_graphs n_pools "
                       "n_modules n_nodes pool_bytes image_bytes restore_bytes family_restore_bytes "
                       "n_generators")
# 1.6: what module_record() returns: how many distinct module images the record holds and their
# size in bytes, all together.
RecordedImages = namedtuple("RecordedImages", "images bytes")
# 1.3: what `with stream.conditional_bodies(...)` yields: the lent body Streams (a tuple, body i
# first: IF/ELSE's else body is bodies[1]) and the node's conditional handle, an int to pass to
# the caller's kernels as ctypes.c_uint64 (a cudaGraphConditionalHandle).
ConditionalNode = namedtuple("ConditionalNode", "bodies handle")

# ---- prototypes, in the order of cgc_api_t (capi/cgc_api.h's CGC_API_FUNCTIONS) --------------------

_st = ctypes.c_int  # cgc_status_t and the other enums are int-sized
_h = ctypes.c_void_p  # every handle, native stream and device pointer
_hp = ctypes.POINTER(ctypes.c_void_p)
_ip = ctypes.POINTER(ctypes.c_int)
_u64p = ctypes.POINTER(ctypes.c_uint64)
_sz = ctypes.c_size_t
_u8, _u16, _u32, _u64 = ctypes.c_uint8, ctypes.c_uint16, ctypes.c_uint32, ctypes.c_uint64
capture_fn = ctypes.CFUNCTYPE(_st, _h, _h)  # cgc_capture_fn(stream, user)
host_fn = ctypes.CFUNCTYPE(None, _h)  # cgc_host_fn(user)

_PROTOTYPES = [
    # status
    ("cgc_version", ctypes.c_uint32, ()),
    ("cgc_status_string", ctypes.c_char_p, (_st,)),
    ("cgc_last_error", ctypes.c_char_p, ()),
    # devices, streams, events
    ("cgc_device_count", _st, (_ip,)),
    ("cgc_context_create", _st, (ctypes.c_int, _hp)),
    ("cgc_context_destroy", _st, (_h,)),
    ("cgc_context_synchronize", _st, (_h,)),
    ("cgc_stream_create", _st, (_h, ctypes.c_uint, ctypes.c_int, _hp)),
    ("cgc_stream_wrap", _st, (_h, _h, _hp)),
    ("cgc_stream_native", _h, (_h,)),
    ("cgc_stream_destroy", _st, (_h,)),
    ("cgc_stream_synchronize", _st, (_h,)),
    ("cgc_stream_query", _st, (_h, _ip)),
    ("cgc_stream_wait_event", _st, (_h, _h)),
    ("cgc_event_create", _st, (_h, ctypes.c_uint, _hp)),
    ("cgc_event_destroy", _st, (_h,)),
    ("cgc_event_record", _st, (_h, _h)),
    ("cgc_event_synchronize", _st, (_h,)),
    ("cgc_event_query", _st, (_h, _ip)),
    ("cgc_event_elapsed_ms", _st, (_h, _h, ctypes.POINTER(ctypes.c_float))),
    # capture
    ("cgc_capture_begin", _st, (_h, ctypes.POINTER(capture_options_t))),
    ("cgc_capture_end", _st, (_h, _hp)),
    ("cgc_capture", _st, (_h, ctypes.POINTER(capture_options_t), capture_fn, _h, _hp)),
    ("cgc_stream_capture_status", _st, (_h, _ip, _u64p)),
    ("cgc_capture_mode_exchange", _st, (_ip,)),
    # graphs
    ("cgc_graph_launch", _st, (_h, _h)),
    ("cgc_graph_upload", _st, (_h, _h)),
    ("cgc_graph_info", _st, (_h, ctypes.POINTER(graph_info_t))),
    ("cgc_graph_pool", _st, (_h, _hp)),
    ("cgc_graph_debug_dump", _st, (_h, ctypes.c_char_p)),
    ("cgc_graph_reset", _st, (_h,)),
    ("cgc_graph_destroy", _st, (_h,)),
    ("cgc_graph_native", _h, (_h,)),
    ("cgc_graph_native_exec", _h, (_h,)),
    # pools and the allocator
    ("cgc_pool_create", _st, (_h, _hp)),
    ("cgc_pool_retain", _st, (_h,)),
    ("cgc_pool_release", _st, (_h,)),
    ("cgc_malloc", _st, (_h, _sz, _h, _hp)),
    ("cgc_free", _st, (_h,)),
    ("cgc_record_stream", _st, (_h, _h)),
    ("cgc_empty_cache", _st, (_h,)),
    ("cgc_memory_stats", _st, (_h, _h, ctypes.POINTER(memory_stats_t))),
    ("cgc_torch_malloc", _h, (ctypes.c_ssize_t, ctypes.c_int, _h)),
    ("cgc_torch_free", None, (_h, ctypes.c_ssize_t, ctypes.c_int, _h)),
    # NCCL
    ("cgc_nccl_version", _st, (_ip,)),
    ("cgc_comm_unique_id", _st, (ctypes.POINTER(comm_id_t),)),
    ("cgc_comm_create", _st, (_h, ctypes.c_int, ctypes.POINTER(comm_id_t), ctypes.c_int, _hp)),
    ("cgc_comm_destroy", _st, (_h,)),
    ("cgc_comm_abort", _st, (_h,)),
    ("cgc_all_reduce", _st, (_h, _h, _h, _sz, _st, _st, _h)),
    ("cgc_all_gather", _st, (_h, _h, _h, _sz, _st, _h)),
    ("cgc_reduce_scatter", _st, (_h, _h, _h, _sz, _st, _st, _h)),
    ("cgc_broadcast", _st, (_h, _h, _h, _sz, _st, ctypes.c_int, _h)),
    ("cgc_send", _st, (_h, _h, _sz, _st, ctypes.c_int, _h)),
    ("cgc_recv", _st, (_h, _h, _sz, _st, ctypes.c_int, _h)),
    ("cgc_group_start", _st, ()),
    ("cgc_group_end", _st, ()),
    # random numbers
    ("cgc_rng_create", _st, (_h, ctypes.c_uint64, _hp)),
    ("cgc_rng_destroy", _st, (_h,)),
    ("cgc_rng_uniform", _st, (_h, _h, _sz, _h)),
    ("cgc_rng_normal", _st, (_h, _h, _sz, ctypes.c_float, ctypes.c_float, _h)),
    ("cgc_rng_get_state", _st, (_h, _u64p, _u64p)),
    ("cgc_rng_set_state", _st, (_h, ctypes.c_uint64, ctypes.c_uint64)),
    # 1.1: streams
    ("cgc_stream_priority_range", _st, (_h, _ip, _ip)),
    ("cgc_stream_priority", _st, (_h, _ip)),
    ("cgc_stream_id", _st, (_h, _u64p)),
    ("cgc_stream_device", _st, (_h, _ip, _hp)),
    ("cgc_stream_copy_attributes", _st, (_h, _h)),
    ("cgc_stream_set_access_policy", _st, (_h, ctypes.POINTER(access_policy_t))),
    ("cgc_stream_get_access_policy", _st, (_h, ctypes.POINTER(access_policy_t))),
    # 1.1: page-locked host memory, copies and sets
    ("cgc_host_alloc", _st, (_h, _sz, ctypes.c_uint, _hp)),
    ("cgc_host_free", _st, (_h,)),
    ("cgc_host_register", _st, (_h, _h, _sz, ctypes.c_uint)),
    ("cgc_host_unregister", _st, (_h,)),
    ("cgc_memcpy_htod_async", _st, (_h, _h, _sz, _h)),
    ("cgc_memcpy_dtoh_async", _st, (_h, _h, _sz, _h)),
    ("cgc_memcpy_dtod_async", _st, (_h, _h, _sz, _h)),
    ("cgc_memset_d8_async", _st, (_h, _u8, _sz, _h)),
    ("cgc_memset_d16_async", _st, (_h, _u16, _sz, _h)),
    ("cgc_memset_d32_async", _st, (_h, _u32, _sz, _h)),
    # 1.1: host functions
    ("cgc_launch_host_func", _st, (_h, host_fn, _h, host_fn)),
    # 1.1: stream memory operations
    ("cgc_stream_write_value32", _st, (_h, _h, _u32, ctypes.c_uint)),
    ("cgc_stream_write_value64", _st, (_h, _h, _u64, ctypes.c_uint)),
    ("cgc_stream_wait_value32", _st, (_h, _h, _u32, ctypes.c_uint)),
    ("cgc_stream_wait_value64", _st, (_h, _h, _u64, ctypes.c_uint)),
    ("cgc_stream_batch_mem_op", _st, (_h, ctypes.POINTER(mem_op_t), _sz)),
    # 1.1: modules and kernels
    ("cgc_module_load", _st, (_h, _h, _hp)),
    ("cgc_module_unload", _st, (_h,)),
    ("cgc_module_get_function", _st, (_h, ctypes.c_char_p, _hp)),
    ("cgc_function_get_attribute", _st, (_h, ctypes.c_int, _ip)),
    ("cgc_function_set_attribute", _st, (_h, ctypes.c_int, ctypes.c_int)),
    ("cgc_launch_kernel", _st, (_h, _u32, _u32, _u32, _u32, _u32, _u32, _u32, _h, _hp)),
    # 1.2: per-node updates of an instantiated graph
    ("cgc_graph_kernel_node_set_enabled", _st, (_h, _sz, ctypes.c_int)),
    ("cgc_graph_kernel_node_set_args", _st, (_h, _sz, _hp)),
    # 1.2: conditional nodes (the kind is an int-sized enum; *body is a stream cgc lends)
    ("cgc_capture_conditional_begin", _st, (_h, ctypes.c_int, _h, _hp)),
    ("cgc_capture_conditional_end", _st, (_h,)),
    # 1.3: a conditional node with every body at once (flags are unsigned; *bodies is an array of
    # n_bodies streams cgc lends; *handle the node's 64-bit conditional handle)
    ("cgc_capture_conditional_begin_bodies", _st, (_h, ctypes.c_int, _h, ctypes.c_uint, _sz, _hp, _u64p)),
    # 1.4: a capture cgc did not begin allocating from a pool; record_stream for a native stream
    ("cgc_pool_adopt_capture", _st, (_h, _h)),
    ("cgc_pool_end_adopted_capture", _st, (_h,)),
    ("cgc_record_stream_native", _st, (_h, _h)),
    # 1.5: a pool of memory registered with a communicator (the kinds are an int-sized enum, *got
    # one of them); eager allocation from a pool
    ("cgc_nccl_pool_create", _st, (_h, _sz, ctypes.c_int, _hp, _ip)),
    ("cgc_pool_malloc", _st, (_h, _sz, _h, _hp)),
    # 1.6: the status that goes with cgc_last_error() (CGC_SUCCESS for a warning or none); the
    # device's segments and blocks (the arrays are filled only when both fit; the totals always);
    # [ptr, ptr + size rounded up to 512) of a pool's free memory as a block (cgc_free frees it);
    # a private pool whose memory is [base, base + capacity), reserved at exactly `base` and
    # backed as it grows (base and capacity multiples of 2 MiB)
    ("cgc_last_status", _st, ()),
    ("cgc_memory_snapshot", _st, (_h, ctypes.POINTER(segment_info_t), _sz, ctypes.POINTER(block_info_t), _sz,
                                  ctypes.POINTER(_sz), ctypes.POINTER(_sz))),
    ("cgc_pool_claim", _st, (_h, _h, _sz)),
    ("cgc_pool_create_at", _st, (_h, _h, _sz, _hp)),
    # 1.6: graphs saved to a buffer (buffer NULL, capacity 0: *size is the bytes needed), what a
    # saved buffer holds (no driver needed), the graphs rebuilt from one (graphs[] and pools[]
    # receive cgc_saved_info's counts of new handles, each pool with one reference), and a module
    # image added by key for kernels of modules cgc did not load
    ("cgc_graphs_save", _st, (_hp, _sz, ctypes.POINTER(save_options_t), _h, _sz, ctypes.POINTER(_sz))),
    ("cgc_saved_info", _st, (_h, _sz, ctypes.POINTER(saved_info_t))),
    ("cgc_graphs_restore", _st, (_h, _h, _sz, ctypes.POINTER(restore_options_t), _hp, _sz, _hp, _sz)),
    ("cgc_module_add_image", _st, (_h, ctypes.c_char_p, _h, _sz)),
    # 1.6: families: `graph` gives up its own executable and shares `leader`'s (NOT_SUPPORTED when
    # the driver refuses the update; cgc_graph_info's family_result says why)
    ("cgc_graph_share_executable", _st, (_h, _h)),
    # 1.6: the record of module images (through CUPTI): `on` 1 records the image of every module
    # the driver loads from then on, 0 stops; *images and *bytes (when not NULL) receive what the
    # record holds after the call, also when it fails (INVALID_STATE while another CUPTI client is
    # subscribed, NOT_SUPPORTED without libcupti). Needs no context and no driver call.
    ("cgc_module_record", _st, (ctypes.c_int, ctypes.POINTER(_sz), ctypes.POINTER(_sz))),
]


class api_t(ctypes.Structure):
    """cgc_api_t: struct_size, then one function pointer per entry of _PROTOTYPES."""

    _fields_ = [("struct_size", ctypes.c_size_t)] + [
        (name, ctypes.CFUNCTYPE(restype, *argtypes)) for name, restype, argtypes in _PROTOTYPES]


# ---- loading -------------------------------------------------------------------------------


class _Api(object):
    """The loaded library: one attribute per C function (prototyped), plus `dll` and `path`."""


_load_lock = threading.Lock()
_loaded = None


def library_path():
    """What this module loads (or loaded): $CGC_LIBRARY, else "libcgc.so.1"."""
    if _loaded is not None:
        return _loaded.path
    return os.environ.get("CGC_LIBRARY") or "libcgc.so.1"


def api():
    """The loaded library's functions, loading it on first use (raises LibraryError)."""
    global _loaded
    if _loaded is not None:
        return _loaded
    with _load_lock:
        if _loaded is None:
            _loaded = _load(library_path())
    return _loaded


def _load(path):
    how = ("$CGC_LIBRARY" if os.environ.get("CGC_LIBRARY") else
           "the dynamic loader's search path; set CGC_LIBRARY to the full path of libcgc.so.1")
    try:
        dll = ctypes.CDLL(path)
    except OSError as e:
        raise LibraryError(None, "could not load the cgc library %r (from %s): %s" % (path, how, e)) from None
    try:
        get_api = dll.cgc_get_api
    except AttributeError:
        raise LibraryError(None, "%r has no cgc_get_api: not a cgc library (set CGC_LIBRARY)" % path) from None
    get_api.restype = ctypes.c_int
    get_api.argtypes = [ctypes.c_uint32, ctypes.POINTER(ctypes.POINTER(api_t))]
    table = ctypes.POINTER(api_t)()
    st = get_api(_HEADER_VERSION, ctypes.byref(table))
    if st != 0 or not table:
        # Refused: another major version, or an older minor one that lacks functions this module
        # calls. cgc_version (a plain symbol in every 1.x) says which, for the message.
        try:
            get_version = dll.cgc_version
            get_version.restype, get_version.argtypes = ctypes.c_uint32, []
            v = get_version()
            found = "it is cgc %d.%d.%d" % (v >> 16, (v >> 8) & 0xFF, v & 0xFF)
        except AttributeError:
            found = "it has no cgc_version"
        raise LibraryError(None, "%r: cgc_get_api(%#x) failed with status %d: %s; this module needs "
                           "%d.%d or a newer %d.x" % (path, _HEADER_VERSION, st, found, VERSION_MAJOR,
                                                       VERSION_MINOR, VERSION_MAJOR))
    if table.contents.struct_size < ctypes.sizeof(api_t):
        raise LibraryError(None, "%r: its function table has %d bytes, this module needs %d"
                           % (path, table.contents.struct_size, ctypes.sizeof(api_t)))
    out = _Api()
    out.dll, out.path, out.table = dll, path, table
    for name, _, _ in _PROTOTYPES:
        setattr(out, name, getattr(table.contents, name))
    major = out.cgc_version() >> 16
    if major != VERSION_MAJOR:
        raise LibraryError(None, "%r is cgc %d.x; this module needs %d.x" % (path, major, VERSION_MAJOR))
    return out


def _raise(st, what=""):
    """Raises the Error for status `st`, with cgc_last_error() read at once on this thread."""
    lib = api()
    msg = (lib.cgc_last_error() or b"").decode("utf-8", "replace")
    if not msg:
        msg = what or lib.cgc_status_string(st).decode("utf-8", "replace")
    raise Error(st, msg)


def _check(st):
    if st != 0:
        _raise(st)


def _ptr(x):
    """A device address from an int, None, a ctypes pointer or anything with data_ptr() (a tensor)."""
    if x is None:
        return None
    if hasattr(x, "data_ptr"):
        return x.data_ptr()
    if isinstance(x, ctypes.c_void_p):
        return x.value
    return int(x)


def _closed(what):
    return InvalidHandleError(Status.INVALID_HANDLE, "%s is closed" % what)


def _bad_argument(func, text, *args):
    """The InvalidArgumentError of a check done here, worded like the library's: the C function first."""
    return InvalidArgumentError(Status.INVALID_ARGUMENT, "%s: %s" % (func, text % args))


def _unsigned(value, bits, func, what):
    """`value` as an int of `bits` unsigned bits. ctypes would silently keep only the low bits of
    a larger or negative number (256 as a uint8_t is 0), so such a value is refused here."""
    try:
        v = operator.index(value)
    except TypeError:
        raise _bad_argument(func, "%s must be an integer, not %r", what, value) from None
    if not 0 <= v < (1 << bits):
        raise _bad_argument(func, "%s (%d) does not fit %d unsigned bits", what, v, bits)
    return v


def _enum_value(cls, value, func, what):
    """An enum argument as the int the C call takes: a member, its name ("persisting") or an int.
    Ints outside the enum are passed on for the library to judge (a newer library may know them)."""
    if isinstance(value, str):
        try:
            return int(cls[value.upper()])
        except KeyError:
            raise _bad_argument(func, "%s %r is not one of %s", what, value,
                                ", ".join(m.name.lower() for m in cls)) from None
    return _int32(value, func, what)  # a C enum is int-sized


def _int32(value, func, what):
    """`value` as a C int, refused rather than cut to its low 32 bits."""
    try:
        v = operator.index(value)
    except TypeError:
        raise _bad_argument(func, "%s must be an integer, not %r", what, value) from None
    if not -(1 << 31) <= v < (1 << 31):
        raise _bad_argument(func, "%s (%d) does not fit a C int", what, v)
    return v


def _member_or_int(cls, value):
    """The member of enum `cls` for `value`, or the plain int for a value a newer library added."""
    try:
        return cls(value)
    except ValueError:
        return int(value)


_CTYPES_DATA = (ctypes._SimpleCData, ctypes.Structure, ctypes.Union, ctypes.Array)


def _host_memory(obj, func, what, writable):
    """Host memory for a C call: (address, its size in bytes or None where unknown, the object that
    keeps it valid until the call returns). obj: a HostBuffer, a ctypes object, an int address, a
    tensor (data_ptr()), or a contiguous buffer (bytes, bytearray, memoryview, array.array, a
    numpy array). A read-only buffer that is not bytes can only be read through a temporary copy,
    so it is refused where the memory is written (writable=True)."""
    if obj is None:
        return None, None, None
    if isinstance(obj, HostBuffer):
        return obj.address, obj.nbytes, obj
    if isinstance(obj, ctypes.c_void_p):
        return obj.value, None, None
    if isinstance(obj, _CTYPES_DATA):
        return ctypes.addressof(obj), ctypes.sizeof(obj), obj
    if isinstance(obj, int):
        return obj, None, None
    if hasattr(obj, "data_ptr"):
        size = obj.numel() * obj.element_size() if hasattr(obj, "element_size") else None
        return obj.data_ptr(), size, obj
    try:
        view = memoryview(obj)
    except TypeError:
        raise _bad_argument(func, "%s is a %s: pass a HostBuffer, a buffer (bytearray, array.array, a ctypes "
                            "array, ...) or an address", what, type(obj).__name__) from None
    if not view.c_contiguous:
        raise _bad_argument(func, "%s is not a contiguous buffer", what)
    if not view.readonly:
        # The ctypes array holds an export of the buffer: a bytearray cannot be resized (moved)
        # while it is alive.
        exported = (ctypes.c_char * view.nbytes).from_buffer(view)
        return ctypes.addressof(exported), view.nbytes, exported
    if writable:
        raise _bad_argument(func, "%s is a read-only buffer and the call writes it", what)
    if isinstance(obj, bytes):  # its own bytes, without a copy
        return ctypes.cast(ctypes.c_char_p(obj), ctypes.c_void_p).value, len(obj), obj
    copy = (ctypes.c_char * view.nbytes).from_buffer_copy(view)
    return ctypes.addressof(copy), view.nbytes, copy


def _copy_size(nbytes, known, func, what):
    """The bytes a copy moves: `nbytes`, or all of the host memory when it is None; never more
    than the host memory holds."""
    if nbytes is None:
        if known is None:
            raise _bad_argument(func, "nbytes is needed: the size of %s is not known", what)
        return known
    n = _unsigned(nbytes, 64, func, "nbytes")
    if known is not None and n > known:
        raise _bad_argument(func, "nbytes (%d) is more than %s holds (%d bytes)", n, what, known)
    return n


# ---- module functions ----------------------------------------------------------------------


def version():
    """The library's version as (major, minor, patch)."""
    v = api().cgc_version()
    return (v >> 16, (v >> 8) & 0xFF, v & 0xFF)


def status_string(status):
    """The library's static name and description of `status` ("CGC_ERROR_...: ...")."""
    return api().cgc_status_string(int(status)).decode("utf-8", "replace")


def last_status():
    """1.6: cgc_last_status(), the status that goes with this thread's last message of the
    library: that of the failure the message describes, Status.SUCCESS when it is a warning or
    there is none. A failed call of this module raises an Error carrying its status already; this
    is for calls that return none (cgc_torch_malloc returns NULL: OUT_OF_MEMORY tells out of
    memory from other refusals). A call that succeeds without a warning leaves it; the next
    failure on this thread sets it. A Status, or the plain int for a code this module does not
    know."""
    return Status.of(api().cgc_last_status())


def device_count():
    n = ctypes.c_int(0)
    _check(api().cgc_device_count(ctypes.byref(n)))
    return n.value


def malloc(ctx, size, stream):
    """Device memory from cgc's caching allocator, ordered on `stream`; an int address (0 for size
    0). During a capture on `stream` it comes from the capture's pool, also on the body of a
    conditional node (1.3), where memory freed is reused by that body alone until it ends."""
    out = ctypes.c_void_p()
    _check(api().cgc_malloc(ctx.handle, size, stream.handle, ctypes.byref(out)))
    return out.value or 0


def free(ptr):
    """Frees a block of cgc.malloc (ordered on its allocation stream); 0/None is a no-op."""
    _check(api().cgc_free(_ptr(ptr)))


def record_stream(ptr, stream):
    _check(api().cgc_record_stream(_ptr(ptr), stream.handle))


def record_stream_native(ptr, native_stream):
    """record_stream for a native CUstream (an int, or a torch stream: its cuda_stream) (1.4)."""
    native = getattr(native_stream, "cuda_stream", native_stream)
    _check(api().cgc_record_stream_native(_ptr(ptr), native or None))


def memory_stats(ctx, pool=None):
    """MemoryStats of the whole device (pool None) or of one Pool."""
    s = memory_stats_t()
    _check(api().cgc_memory_stats(ctx.handle, None if pool is None else pool.handle, ctypes.byref(s)))
    return MemoryStats(s.bytes_reserved, s.bytes_allocated, s.peak_bytes_allocated,
                       s.peak_bytes_reserved, s.num_driver_allocs, s.num_driver_frees)


def memory_snapshot(ctx):
    """1.6: the device's memory as cgc holds it (cgc_memory_snapshot), like
    torch.cuda.memory_snapshot(): a list of Segment, one per driver allocation (the device cache's
    and every pool's), sorted by address, each with its Blocks in address order; their sizes add
    up to memory_stats().bytes_reserved. A diagnostic: the library walks every block with the
    device allocator's lock held (allocations on other threads wait meanwhile). Segments may come
    and go between asking for the totals and the call that fills the arrays: the arrays get some
    slack and the call is repeated until they fit."""
    handle = ctx.handle
    lib = api()
    n_segments, n_blocks = ctypes.c_size_t(0), ctypes.c_size_t(0)
    _check(lib.cgc_memory_snapshot(handle, None, 0, None, 0, ctypes.byref(n_segments), ctypes.byref(n_blocks)))
    while n_segments.value or n_blocks.value:
        max_segments = n_segments.value + n_segments.value // 4 + 4
        max_blocks = n_blocks.value + n_blocks.value // 4 + 16
        segments, blocks = (segment_info_t * max_segments)(), (block_info_t * max_blocks)()
        _check(lib.cgc_memory_snapshot(handle, segments, max_segments, blocks, max_blocks,
                                       ctypes.byref(n_segments), ctypes.byref(n_blocks)))
        if n_segments.value <= max_segments and n_blocks.value <= max_blocks:
            return [Segment(s.address or 0, s.size, s.allocated_bytes, s.pool or None, s.stream_id, bool(s.small),
                            [Block(b.address or 0, b.size, b.requested, _member_or_int(BlockState, b.state))
                             for b in blocks[s.first_block:s.first_block + s.n_blocks]])
                    for s in segments[:n_segments.value]]
    return []


def empty_cache(ctx):
    _check(api().cgc_empty_cache(ctx.handle))


# ---- saved graphs (1.6) --------------------------------------------------------------------


def _saved_bytes(data, func):
    """(address, size, the object keeping them valid) of a saved buffer: bytes, bytearray,
    memoryview or any contiguous buffer, or a path (str or os.PathLike) of a file holding it."""
    if isinstance(data, (str, os.PathLike)):
        with open(data, "rb") as f:
            data = f.read()
    if isinstance(data, (int, ctypes.c_void_p)) or data is None:
        raise _bad_argument(func, "data is a %s: pass the bytes of save_graphs (bytes, bytearray, memoryview) or "
                            "the path of a file holding them", type(data).__name__)
    return _host_memory(data, func, "data", writable=False)


def _saved_info(address, size):
    info = saved_info_t()
    _check(api().cgc_saved_info(address, size, ctypes.byref(info)))
    return info


def saved_info(data):
    """1.6: what `data` (the bytes of save_graphs, or the path of a file holding them) holds and
    needs, as a SavedInfo (cgc_saved_info). Needs no driver and allocates nothing on the device,
    so a server can size the rest of its memory first. Raises SavedMismatchError for bytes that
    are not a saved buffer, are damaged or truncated, or of another format version."""
    address, size, keep = _saved_bytes(data, "cgc_saved_info")
    i = _saved_info(address, size)
    del keep
    return SavedInfo(i.format_version, i.compute_major, i.compute_minor, i.driver_version, i.n_graphs, i.n_pools,
                     i.n_modules, i.n_nodes, i.pool_bytes, i.image_bytes, i.restore_bytes, i.family_restore_bytes,
                     i.n_generators)


def save_graphs(graphs, pools=(), path=None, verify=False):
    """1.6: `graphs` (a Graph or a sequence of them, captured by cgc, none reset) and what rebuilding
    them needs, as bytes (cgc_graphs_save, asked first for the size, then for the bytes), also
    written to the file `path` when given: each graph's nodes and edges; its kernels' module
    images (or the keys of Context.add_module_image), names, attributes and argument bytes; the
    layout of every pool the graphs were captured into and of `pools` (more pools at fixed
    addresses to save, after the graphs' own: the weights and inputs their kernels read), namely
    base, capacity, how far it is backed and its blocks allocated now; the device's architecture
    and the driver's version. Nothing is relocated: every address a graph uses must lie in one of
    those pools, each made by Pool.at. The memory's contents are not saved. A pool named twice is
    saved once. A graph's draws from an Rng (uniform, normal in the capture) are saved with the
    generator's seed and offset as they are at the save (SavedInfo.n_generators counts the
    generators), so that a restored graph draws on from there.

    Raises NotSavableError when a graph holds what a saved buffer cannot rebuild (a pool not at
    fixed addresses, an argument or operand in memory outside the pools, host or event nodes,
    memory allocation or free nodes, child graphs, conditional nodes, memory operations, NCCL
    collectives, a kernel of a module cgc cannot name, an executable
    changed by set_kernel_enabled or set_kernel_args): the message names the graph, the node,
    its kind, the kernel and the argument. InvalidArgumentError for no graphs or a pool not at
    fixed addresses, InvalidStateError for an empty (reset) Graph, NotSupportedError before a
    CUDA 12.4 driver. Not while another thread updates, resets or closes one of the graphs.

    verify=True (SAVE_VERIFY, save_options_t.flags): after the bytes are written, each graph is
    rebuilt from them in this process (its modules loaded again from the bytes or by key) and
    replayed beside the graph itself from the same contents of the saved pools; their replays must
    leave the pools byte-equal, or the save raises NotSavableError naming the graph, the pool and
    the first differing offset. It catches what the checks cannot see (a launch attribute the
    driver does not report, an image under a key that builds another kernel). Each graph is
    replayed twice and the pools are left as the graph's own replay left them; the saved pools'
    backed bytes are copied to host memory three times over. Only while nothing else runs on the
    saved pools' memory; graphs whose replays are not deterministic (a timer, a race) fail it. The
    bytes are those of a save without verifying but for SavedInfo's restore_bytes and
    family_restore_bytes, which a verifying save measures on its rebuild (0 without verifying)."""
    func = "cgc_graphs_save"
    graphs = [graphs] if isinstance(graphs, Graph) else list(graphs)
    pools = [pools] if isinstance(pools, Pool) else list(pools)
    for what, objs, cls in (("graphs", graphs, Graph), ("pools", pools, Pool)):
        for i, obj in enumerate(objs):
            if not isinstance(obj, cls):
                raise _bad_argument(func, "%s[%d] is a %s, not a cgc.%s", what, i, type(obj).__name__, cls.__name__)
    graph_handles = (ctypes.c_void_p * max(len(graphs), 1))(*[g.handle for g in graphs])
    pool_handles = (ctypes.c_void_p * max(len(pools), 1))(*[p.handle for p in pools])
    opts = save_options_t(pools=ctypes.cast(pool_handles, _hp) if pools else None, n_pools=len(pools),
                          flags=SAVE_VERIFY if verify else 0)
    lib, size = api(), ctypes.c_size_t(0)
    # Asking for the size replays nothing, also for a verifying save.
    _check(lib.cgc_graphs_save(graph_handles, len(graphs), ctypes.byref(opts), None, 0, ctypes.byref(size)))
    while True:
        capacity = size.value
        buffer = ctypes.create_string_buffer(max(capacity, 1))
        st = lib.cgc_graphs_save(graph_handles, len(graphs), ctypes.byref(opts), buffer, capacity, ctypes.byref(size))
        if st == Status.INVALID_ARGUMENT and size.value > capacity:
            continue  # the pools' blocks grew in between: size says how much is needed now
        _check(st)
        break
    data = buffer.raw[:size.value]
    if path is not None:
        with open(path, "wb") as f:
            f.write(data)
    return data


def module_record(on):
    """1.6: turns the record of module images on or off (cgc_module_record), for the whole process,
    and returns what the record holds after the call, a RecordedImages(images, bytes) (a tuple: how
    many distinct images it has kept and their size). With `on` true, every module the driver loads
    in this process from then on, by any library or thread (cuBLAS's, cuDNN's, Triton's, torch's,
    the application's; a lazily loaded one at its first kernel), has its image copied and kept for
    the life of the process, until module_record(False) stops the recording (the images kept stay).
    save_graphs finds a kernel of a module cgc did not load among the images added by key
    (Context.add_module_image), then among the recorded ones (by name and the same attributes), and
    embeds a recorded image in the bytes as it embeds a Module's, so the restoring process needs no
    record and no key; when different recorded images have a kernel of that name and build, the save
    raises NotSavableError (add the right image by key). Turn it on before the libraries load their
    modules; each image loaded meanwhile costs a copy (a library's can be many megabytes). Needs no
    Context; turning it on again, or off while it is off, changes nothing.

    The record uses CUPTI (libcupti, opened at the first call: $CGC_CUPTI_LIBRARY names it), which
    serves one client per process. Raises InvalidStateError while a profiler or sanitizer (Nsight
    Systems, the PyTorch profiler, compute-sanitizer) is subscribed (and while the record is on
    such a tool cannot subscribe), NotSupportedError, naming what was tried, without libcupti (or
    when CUPTI cannot subscribe, e.g. without a driver); the message names cgc_module_record."""
    images, nbytes = ctypes.c_size_t(0), ctypes.c_size_t(0)
    _check(api().cgc_module_record(1 if on else 0, ctypes.byref(images), ctypes.byref(nbytes)))
    return RecordedImages(images.value, nbytes.value)


def _mode(mode):
    if isinstance(mode, str):
        try:
            return CaptureMode[mode.upper()]
        except KeyError:
            raise InvalidArgumentError(Status.INVALID_ARGUMENT, "capture mode %r: use 'global', "
                                       "'thread_local' or 'relaxed'" % mode) from None
    return CaptureMode(mode)


def exchange_capture_mode(mode):
    """cgc_capture_mode_exchange: sets this thread's capture mode, returns the previous one."""
    m = ctypes.c_int(_mode(mode))
    _check(api().cgc_capture_mode_exchange(ctypes.byref(m)))
    return CaptureMode(m.value)


class capture_mode(object):
    """``with cgc.capture_mode("relaxed"):`` this thread's capture mode, restored on exit."""

    def __init__(self, mode):
        self._mode = _mode(mode)

    def __enter__(self):
        self._previous = exchange_capture_mode(self._mode)
        return self

    def __exit__(self, *exc):
        exchange_capture_mode(self._previous)
        return False


# ---- objects -------------------------------------------------------------------------------


class _Handle(object):
    """An owned cgc handle: close() destroys it; `with` closes it; __del__ is only a safety net
    for handles nobody closed (errors there are swallowed: there is no one to report them to)."""

    _destroy = None  # name of the C function that destroys the handle
    _h = None

    @property
    def handle(self):
        """The C handle (an int); raises InvalidHandleError once closed."""
        if self._h is None:
            raise _closed(type(self).__name__)
        return self._h

    @property
    def closed(self):
        return self._h is None

    def close(self):
        h, self._h = self._h, None
        if h is not None:
            st = getattr(api(), self._destroy)(h)
            if st != 0:
                self._h = h  # still ours: e.g. a stream refused while it captures
                _raise(st)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        if self._h is not None and not sys.is_finalizing():
            try:
                self.close()
            except Exception:
                pass

    def __repr__(self):
        return "<cgc.%s %s>" % (type(self).__name__, "closed" if self._h is None else hex(self._h))


class Context(_Handle):
    """One device's primary context (shared with the CUDA runtime and frameworks)."""

    _destroy = "cgc_context_destroy"

    def __init__(self, device=0):
        out = ctypes.c_void_p()
        _check(api().cgc_context_create(int(device), ctypes.byref(out)))
        self._h, self.device = out.value, int(device)

    def synchronize(self):
        _check(api().cgc_context_synchronize(self.handle))

    def memory_stats(self, pool=None):
        return memory_stats(self, pool)

    def memory_snapshot(self):
        """1.6: this device's segments and blocks, a list of Segment (cgc.memory_snapshot)."""
        return memory_snapshot(self)

    def empty_cache(self):
        empty_cache(self)

    def malloc(self, size, stream):
        return malloc(self, size, stream)

    def restore_graphs(self, data, stream=None, families=False, threads=0, generators=False):
        """1.6: rebuilds the graphs of `data` (the bytes of save_graphs, or the path of a file
        holding them, from this process or another on the same GPU architecture and driver
        version) on this device (cgc_graphs_restore). Its pools are created again at their bases,
        as by Pool.at, with the blocks allocated at save time claimed at their addresses: they
        are the application's to free with cgc.free (as in the saving process), and they hold
        their pool until then; the rest of the pools' backed memory is kept for the graphs.
        Modules are loaded again (embedded images, or those added by key with add_module_image),
        each kernel checked against its saved attributes, and each graph built and instantiated
        as a capture's, ready to launch.

        Returns (graphs, pools): saved_info's n_graphs Graphs and n_pools Pools, in the saved
        order, owned as a capture's Graph and Pool.at's Pool are: close() destroys a Graph and
        releases a Pool's reference, which gives its range back and is refused
        (InvalidStateError, the pool stays open) while a block of it is allocated or a graph
        holds it. A restored Graph has no capture stream: launch(s) it, or give `stream` (a
        Stream of this device), which replay() then uses. The memory's contents are not
        restored: write the inputs again. The generators the graphs draw from are created again
        at the seed and offset they had at the save, so the first replay draws what the saving
        process's next replay would have drawn, and each replay advances them as the saved
        graph's did; the graphs alone hold them unless `generators` asks for them.

        generators=True (restore_options_t.generators): returns (graphs, pools, rngs), rngs being
        saved_info's n_generators Rngs in the saved order, each with a reference of its own that
        close() drops, as an Rng made by Rng(ctx, seed) (the graphs keep theirs): get_state() says
        where the next replay starts, set_state() moves it, and eager draws work as on any Rng.

        families=True (RESTORE_FAMILIES): restored graphs of one structure (the same nodes of the
        same kinds and kernels, the same edges) join one family, as after Graph.share_executable:
        one instantiation for each structure, an update for each other graph; a graph the driver
        refuses to share instantiates its own (info().family_result says why).

        threads (restore_options_t.threads): the host threads that read the checksum (at most 4),
        check and instantiate the graphs (which the calling thread builds), the calling thread one
        of them: 0, the default, lets cgc choose (up to 4, as many
        as there are CPUs), 1 restores on the calling thread alone. More than 64 is the library's
        InvalidArgumentError; a negative count or one that is no integer is the binding's.

        Raises SavedMismatchError, naming what differs, for damaged bytes, another format
        version, another architecture or driver version, a module key not added, or a kernel
        missing or with other attributes; InvalidStateError when a pool's range cannot be reserved
        here (e.g. the saved pools, or other pools at fixed addresses, still hold it). On failure
        nothing is left: no graph, pool or module."""
        func = "cgc_graphs_restore"
        handle = self.handle
        threads = _unsigned(threads, 32, func, "threads")
        address, size, keep = _saved_bytes(data, func)
        info = _saved_info(address, size)
        n_graphs, n_pools = info.n_graphs, info.n_pools
        graphs = (ctypes.c_void_p * max(n_graphs, 1))()
        pools = (ctypes.c_void_p * max(n_pools, 1))()
        opts = restore_options_t(flags=RESTORE_FAMILIES if families else 0, threads=threads)
        # Room for the generators only when asked for: NULL (and 0) leaves them to the graphs.
        n_generators = info.n_generators if generators else 0
        rngs = (ctypes.c_void_p * max(n_generators, 1))()
        if n_generators:
            opts.generators = ctypes.cast(rngs, ctypes.POINTER(ctypes.c_void_p))
            opts.n_generators = n_generators
        _check(api().cgc_graphs_restore(handle, address, size, ctypes.byref(opts), graphs, n_graphs, pools, n_pools))
        del keep
        restored_pools = []
        for h in pools[:n_pools]:
            pool = Pool.__new__(Pool)
            pool._h, pool.context, pool._refs = h, self, 1
            restored_pools.append(pool)
        restored = [Graph._restored(h, self, stream) for h in graphs[:n_graphs]], restored_pools
        if not generators:
            return restored
        return restored + ([Rng._restored(h, self) for h in rngs[:n_generators]],)

    def add_module_image(self, key, image):
        """1.6: adds a module image under `key` (cgc_module_add_image; a str or bytes of up to 255
        bytes, no NUL; the image is copied): save_graphs names a kernel of a module cgc did not
        load (the application's own, a library's) by this key when the image has a kernel of that
        name with the same attributes, and restore_graphs loads the image added under the key a
        saved buffer names, so the restoring process adds the same image under the same key
        first. `image`: a fatbin or a cubin (bytes), or PTX text (str or bytes; a NUL is added
        when it has none). Images stay for the life of the process.

        Raises InvalidStateError for another image under a key already taken (the same image
        again is fine), CudaError when the driver cannot load the image, InvalidArgumentError for
        a key too long or with a NUL byte."""
        func = "cgc_module_add_image"
        handle = self.handle
        if isinstance(key, str):
            key = key.encode("utf-8")
        if not isinstance(key, bytes) or b"\0" in key:
            raise _bad_argument(func, "key must be a str or bytes without NUL bytes, not %r", key)
        if isinstance(image, str):
            image = image.encode("utf-8")
        try:
            image = memoryview(image).tobytes()
        except TypeError:
            raise _bad_argument(func, "image must be bytes or str (PTX text), not a %s", type(image).__name__) from None
        if image[:1] in (b"/", b".", b"\n", b"\t", b" ", b"\r") or b"a" <= image[:1] <= b"z":
            if not image.endswith(b"\0"):
                image += b"\0"  # PTX text: NUL-terminated, as cgc_module_load keeps it
        _check(api().cgc_module_add_image(handle, key, image, len(image)))

    def stream_priority_range(self):
        """(least, greatest): the priorities streams of this device can have. greatest is the
        highest priority (the lowest number), least the lowest (0); Stream(ctx, priority=p)
        clamps p into that range."""
        least, greatest = ctypes.c_int(0), ctypes.c_int(0)
        _check(api().cgc_stream_priority_range(self.handle, ctypes.byref(least), ctypes.byref(greatest)))
        return least.value, greatest.value


_contexts = {}  # device -> Context, for streams that come from PyTorch


def _context_for(device):
    with _load_lock:
        ctx = _contexts.get(device)
    if ctx is None:
        ctx = Context(device)
        with _load_lock:
            ctx = _contexts.setdefault(device, ctx)
    return ctx


class Stream(_Handle):
    """A stream: Stream(ctx) creates an owned one (non-blocking by default); Stream.wrap and
    Stream.from_torch borrow an existing CUstream (close() frees only the handle)."""

    _destroy = "cgc_stream_destroy"

    def __init__(self, ctx, non_blocking=True, priority=0):
        out = ctypes.c_void_p()
        flags = STREAM_NON_BLOCKING if non_blocking else 0
        _check(api().cgc_stream_create(ctx.handle, flags, int(priority), ctypes.byref(out)))
        self._h, self.context, self.owned = out.value, ctx, True

    @classmethod
    def wrap(cls, ctx, native):
        """Borrows CUstream `native` (an int; 0 is the legacy default stream) of ctx's device."""
        out = ctypes.c_void_p()
        _check(api().cgc_stream_wrap(ctx.handle, _ptr(native) or None, ctypes.byref(out)))
        self = cls.__new__(cls)
        self._h, self.context, self.owned = out.value, ctx, False
        return self

    @classmethod
    def from_torch(cls, torch_stream, ctx=None):
        """Borrows a torch.cuda.Stream (or ExternalStream); ctx defaults to its device's."""
        if ctx is None:
            index = torch_stream.device.index
            ctx = _context_for(0 if index is None else index)
        stream = cls.wrap(ctx, torch_stream.cuda_stream)
        stream.torch_stream = torch_stream
        return stream

    @property
    def native(self):
        """The CUstream as an int (0 for the legacy default stream)."""
        return api().cgc_stream_native(self.handle) or 0

    def synchronize(self):
        _check(api().cgc_stream_synchronize(self.handle))

    def query(self):
        """True when all work on the stream has finished."""
        done = ctypes.c_int(0)
        _check(api().cgc_stream_query(self.handle, ctypes.byref(done)))
        return bool(done.value)

    def wait_event(self, event):
        """Future work here waits for `event`'s last record (a fork or join inside a capture)."""
        _check(api().cgc_stream_wait_event(self.handle, event.handle))

    def record_event(self, event=None):
        """Records `event` (a new one if None) on this stream and returns it."""
        if event is None:
            event = Event(self.context)
        event.record(self)
        return event

    def wait_stream(self, other):
        """Like torch's Stream.wait_stream: future work here waits for the work queued on `other`
        so far. Uses one event kept by `other`, so it costs no event creation per call."""
        ev = getattr(other, "_join_event", None)
        if ev is None or ev.closed:
            ev = other._join_event = Event(other.context)
        ev.record(other)
        self.wait_event(ev)

    def capture_status(self):
        """(CaptureStatus, capture id); the id is 0 when not capturing."""
        st, cid = ctypes.c_int(0), ctypes.c_uint64(0)
        _check(api().cgc_stream_capture_status(self.handle, ctypes.byref(st), ctypes.byref(cid)))
        return CaptureStatus(st.value), cid.value

    def is_capturing(self):
        return self.capture_status()[0] != CaptureStatus.NONE

    # ---- what the driver knows of the stream (1.1) ----

    @property
    def priority(self):
        """The stream's priority: lower numbers are higher priority (Context.stream_priority_range)."""
        p = ctypes.c_int(0)
        _check(api().cgc_stream_priority(self.handle, ctypes.byref(p)))
        return p.value

    @property
    def id(self):
        """The driver's id of the stream: unique in the process, never reused. Raises
        CaptureUnsupportedError for a borrowed stream that captures before cgc learnt its id
        (asking the driver then would break the capture)."""
        out = ctypes.c_uint64(0)
        _check(api().cgc_stream_id(self.handle, ctypes.byref(out)))
        return out.value

    @property
    def device(self):
        """The ordinal of the stream's device."""
        device = ctypes.c_int(-1)
        _check(api().cgc_stream_device(self.handle, ctypes.byref(device), None))
        return device.value

    @property
    def native_context(self):
        """The CUcontext of the stream (its device's primary context), as an int."""
        out = ctypes.c_void_p()
        _check(api().cgc_stream_device(self.handle, None, ctypes.byref(out)))
        return out.value or 0

    def copy_attributes_from(self, src):
        """Gives this stream the driver's attributes of Stream `src` (access-policy window,
        synchronisation policy, priority where settable); both of one device."""
        _check(api().cgc_stream_copy_attributes(self.handle, src.handle))

    def set_access_policy(self, base, nbytes, hit_ratio=1.0, hit_property=AccessProperty.PERSISTING,
                          miss_property=AccessProperty.STREAMING):
        """Sets the stream's L2 access-policy window [base, base + nbytes) of device memory:
        kernels launched (or captured) on it afterwards carry it. nbytes 0 turns it off. The
        properties are AccessProperty members or their names. Restore a saved window with
        ``s.set_access_policy(*saved)``."""
        func = "cgc_stream_set_access_policy"
        policy = access_policy_t(base=_ptr(base), bytes=_unsigned(nbytes, 64, func, "nbytes"),
                                 hit_ratio=float(hit_ratio),
                                 hit_property=_enum_value(AccessProperty, hit_property, func, "hit_property"),
                                 miss_property=_enum_value(AccessProperty, miss_property, func, "miss_property"))
        _check(api().cgc_stream_set_access_policy(self.handle, ctypes.byref(policy)))

    def access_policy(self):
        """The stream's access-policy window, an AccessPolicy (nbytes 0: none)."""
        policy = access_policy_t()
        _check(api().cgc_stream_get_access_policy(self.handle, ctypes.byref(policy)))
        return AccessPolicy(policy.base or 0, policy.bytes, policy.hit_ratio,
                            _member_or_int(AccessProperty, policy.hit_property),
                            _member_or_int(AccessProperty, policy.miss_property))

    # ---- copies and sets (1.1) ----
    # Device memory is an address (an int, or a tensor). Host memory is a HostBuffer, a buffer
    # (bytearray, array.array, a ctypes array, a numpy array) or an address. Inside a capture the
    # host memory must be page-locked (a HostBuffer): the graph reads or writes it again at every
    # replay, so it must stay alive as long as the graph; a pageable buffer is refused there with
    # CaptureUnsupportedError. Eagerly any buffer works (the call returns once it may be reused).

    def memcpy_htod(self, dst, src, nbytes=None):
        """Copies nbytes (default: all of `src`) from host memory `src` to device memory `dst`."""
        func = "cgc_memcpy_htod_async"
        address, known, keep = _host_memory(src, func, "src", writable=False)
        n = _copy_size(nbytes, known, func, "src")
        _check(api().cgc_memcpy_htod_async(_ptr(dst), address, n, self.handle))
        del keep  # the staged copy has read it (or, page-locked, it is the caller's to keep)

    def memcpy_dtoh(self, dst, src, nbytes=None):
        """Copies nbytes (default: all of `dst`) from device memory `src` to host memory `dst`.
        Asynchronous for page-locked `dst`: synchronise before reading it."""
        func = "cgc_memcpy_dtoh_async"
        address, known, keep = _host_memory(dst, func, "dst", writable=True)
        n = _copy_size(nbytes, known, func, "dst")
        _check(api().cgc_memcpy_dtoh_async(address, _ptr(src), n, self.handle))
        del keep

    def memcpy_dtod(self, dst, src, nbytes):
        """Copies nbytes from device memory `src` to device memory `dst`."""
        n = _unsigned(nbytes, 64, "cgc_memcpy_dtod_async", "nbytes")
        _check(api().cgc_memcpy_dtod_async(_ptr(dst), _ptr(src), n, self.handle))

    def memset_d8(self, dst, value, count):
        """Sets `count` bytes at device address `dst` to `value` (0 to 255)."""
        func = "cgc_memset_d8_async"
        _check(api().cgc_memset_d8_async(_ptr(dst), _unsigned(value, 8, func, "value"),
                                         _unsigned(count, 64, func, "count"), self.handle))

    def memset_d16(self, dst, value, count):
        """Sets `count` 16-bit elements at `dst` (2-byte aligned) to `value`."""
        func = "cgc_memset_d16_async"
        _check(api().cgc_memset_d16_async(_ptr(dst), _unsigned(value, 16, func, "value"),
                                          _unsigned(count, 64, func, "count"), self.handle))

    def memset_d32(self, dst, value, count):
        """Sets `count` 32-bit elements at `dst` (4-byte aligned) to `value` (a float's bits:
        ``struct.unpack("<I", struct.pack("<f", x))[0]``)."""
        func = "cgc_memset_d32_async"
        _check(api().cgc_memset_d32_async(_ptr(dst), _unsigned(value, 32, func, "value"),
                                          _unsigned(count, 64, func, "count"), self.handle))

    # ---- host functions (1.1) ----

    def launch_host_func(self, fn):
        """Runs fn() on a driver thread once the stream's earlier work is done; later work waits
        for it. Eagerly it runs once; inside a capture (begun by cgc) it becomes a host node that
        runs at every replay. cgc keeps `fn` alive as long as something can call it: until it
        ran, or until the graph is reset or closed.

        fn must not call cgc or CUDA (the driver forbids it there: cgc raises InvalidStateError).
        It takes the GIL to run, and later work on the stream waits for it: keep it short, and
        never wait for the stream while holding the GIL (cgc's own waits release it). An
        exception it raises cannot reach this caller: ctypes reports it through
        sys.unraisablehook, and the stream goes on."""
        if not callable(fn):
            raise _bad_argument("cgc_launch_host_func", "fn must be callable, not %r", fn)
        handle, lib = self.handle, api()
        user = _host_funcs.add(fn)
        # The library calls the release exactly once, also when this call fails.
        _check(lib.cgc_launch_host_func(handle, _HOST_FUNC_TRAMPOLINE, user, _HOST_FUNC_RELEASE))

    # ---- stream memory operations (1.1) ----
    # A write of a value to a 4- or 8-byte aligned device address, or a wait until the value there
    # meets a condition, in stream order; captured they become memory-operation nodes. Streams and
    # graphs hand work over through a flag this way without the host. NotSupportedError where the
    # device lacks them. A wait for a value no work will write hangs the stream.

    def write_value32(self, address, value, flags=0):
        """Writes the 32-bit `value` to `address`. flags must be 0 (writes take no flags)."""
        func = "cgc_stream_write_value32"
        _check(api().cgc_stream_write_value32(self.handle, _ptr(address), _unsigned(value, 32, func, "value"),
                                              _unsigned(flags, 32, func, "flags")))

    def write_value64(self, address, value, flags=0):
        """Writes the 64-bit `value` to `address` (8-byte aligned). flags must be 0."""
        func = "cgc_stream_write_value64"
        _check(api().cgc_stream_write_value64(self.handle, _ptr(address), _unsigned(value, 64, func, "value"),
                                              _unsigned(flags, 32, func, "flags")))

    def wait_value32(self, address, value, flags=WAIT_GEQ):
        """Makes later work wait until the 32-bit value at `address` meets `flags`' condition
        (WAIT_GEQ, WAIT_EQ, WAIT_AND or WAIT_NOR, optionally | WAIT_FLUSH) with `value`."""
        func = "cgc_stream_wait_value32"
        _check(api().cgc_stream_wait_value32(self.handle, _ptr(address), _unsigned(value, 32, func, "value"),
                                             _unsigned(flags, 32, func, "flags")))

    def wait_value64(self, address, value, flags=WAIT_GEQ):
        """wait_value32 on the 64-bit value at `address` (8-byte aligned)."""
        func = "cgc_stream_wait_value64"
        _check(api().cgc_stream_wait_value64(self.handle, _ptr(address), _unsigned(value, 64, func, "value"),
                                             _unsigned(flags, 32, func, "flags")))

    def batch_mem_op(self, ops):
        """Issues MemOp operations (1 to 255, the driver's limit) in one call, in order."""
        func = "cgc_stream_batch_mem_op"
        ops = list(ops)
        c_ops = (mem_op_t * len(ops))()
        for i, op in enumerate(ops):
            if not isinstance(op, MemOp):
                raise _bad_argument(func, "ops[%d] is a %s, not a cgc.MemOp", i, type(op).__name__)
            c_ops[i] = mem_op_t(kind=_enum_value(MemOpKind, op.kind, func, "ops[%d].kind" % i),
                              flags=_unsigned(op.flags, 32, func, "ops[%d].flags" % i),
                              address=_ptr(op.address),
                              value=_unsigned(op.value, 64, func, "ops[%d].value" % i))
        # An empty array is still an array: the library, not a NULL pointer, says why 0 is refused.
        _check(api().cgc_stream_batch_mem_op(self.handle, c_ops, len(ops)))

    # ---- conditional nodes (1.2, 1.3) ----
    # A body holds kernels, copies, sets, nested conditionals and (1.3) allocations (from the
    # capture's pool: memory freed in a body is reused there, and passes to this stream when the
    # body ends) and generator draws (in a WHILE body, iteration i draws what the i-th of as many
    # eager draws would: see LOOP_EAGER_ITERATIONS); host functions, memory operations, events
    # and collectives raise CaptureUnsupportedError there. The capture cannot end while a body is
    # open. NotSupportedError with a driver older than CUDA 12.4 (IF/ELSE and SWITCH: 12.8).

    @contextlib.contextmanager
    def conditional(self, kind, condition):
        """Adds a conditional node at this point of the capture under way on this stream (a
        capture, or the body of another conditional) and yields the body: a Stream that cgc
        lends, whose work until the end of the `with` block is the node's body::

            with s.conditional(cgc.ConditionalKind.WHILE, more) as body:
                step.launch(1, 1, [counter, n, more], body)   # writes *more: loop again or not

        kind: ConditionalKind.IF or WHILE (or its name, "while"; a SWITCH has its bodies from
        conditional_bodies). condition: the device address of a uint32 the caller's kernels
        write; IF runs the body once if it is nonzero where the node stands, WHILE runs it as
        long as it is nonzero (read again after each iteration).

        The body stream belongs to cgc: it is given back when the block ends, also when the block
        raises (the block's exception is the one that propagates), and cannot be closed before."""
        func = "cgc_capture_conditional_begin"
        handle = self.handle
        k = _enum_value(ConditionalKind, kind, func, "kind")
        out = ctypes.c_void_p()
        _check(api().cgc_capture_conditional_begin(handle, k, _ptr(condition), ctypes.byref(out)))
        with _ending_bodies((_BodyStream._lend(out.value, self),)) as (body,):
            yield body

    @contextlib.contextmanager
    def conditional_bodies(self, kind, condition, n_bodies=1, flags=0):
        """1.3: adds a conditional node with all its bodies, as conditional() does one, and yields
        a ConditionalNode (bodies, handle)::

            with s.conditional_bodies("switch", which, 3) as (bodies, _):
                for i, body in enumerate(bodies):
                    ...                                   # work of case i, issued on bodies[i]

        kind and n_bodies: IF with 1 body, or 2 (IF/ELSE: bodies[1] runs when the condition is
        0); WHILE with 1; SWITCH with 1 to 256 (bodies[i] runs when the condition is i, none when
        it is n_bodies or more). condition: the device address of a uint32, as for conditional().
        flags: 0, or CONDITIONAL_BODY_SETS_CONDITION for a WHILE whose body's kernels set the
        condition themselves: cgc reads the condition before the node only, and the kernels get
        `handle` (ctypes.c_uint64(handle)) to call cudaGraphSetConditional(handle, value) with.
        handle is the node's conditional handle whatever the flags.

        Every body is given back when the block ends, the last first, each once, also when the
        block raises (its exception is the one that propagates); none can be closed before.
        IF/ELSE and SWITCH need a driver for CUDA 12.8 (NotSupportedError before)."""
        func = "cgc_capture_conditional_begin_bodies"
        handle = self.handle
        k = _enum_value(ConditionalKind, kind, func, "kind")
        count = _unsigned(n_bodies, 64, func, "n_bodies")
        if count > _MAX_CONDITIONAL_BODIES:
            raise _bad_argument(func, "n_bodies is %d: a node has at most %d bodies (a SWITCH's)",
                                count, _MAX_CONDITIONAL_BODIES)
        f = _unsigned(flags, 32, func, "flags")
        # At least one slot, so that the library, not a NULL pointer, says why 0 bodies is refused.
        lent = (ctypes.c_void_p * max(count, 1))()
        node_handle = ctypes.c_uint64(0)
        _check(api().cgc_capture_conditional_begin_bodies(handle, k, _ptr(condition), f, count, lent,
                                                          ctypes.byref(node_handle)))
        with _ending_bodies(tuple(_BodyStream._lend(lent[i], self) for i in range(count))) as bodies:
            yield ConditionalNode(bodies, node_handle.value)

    def close(self):
        ev = getattr(self, "_join_event", None)
        if ev is not None:
            ev.close()
        super().close()


@contextlib.contextmanager
def _ending_bodies(bodies):
    """Yields the lent `bodies` and ends each exactly once when the block ends, the last first
    (the order nested `with` blocks would end them in), whether the block raised or not. A failed
    end does not stop the others: the capture could not end while any body is open."""
    failures = []

    def end_all():
        for body in reversed(bodies):
            try:
                body._end()
            except Error as e:
                failures.append(e)

    try:
        yield bodies
    except BaseException:
        # The block's exception is the caller's news: a failure to end a body would only hide it.
        end_all()
        raise
    end_all()
    if failures:
        raise failures[0]


class _BodyStream(Stream):
    """The body of a conditional node (Stream.conditional, Stream.conditional_bodies): a Stream
    that cgc lends until the `with` block ends. It is not the caller's: close() refuses while it
    is lent (as cgc_stream_destroy does), and the block's end gives it back with
    cgc_capture_conditional_end, after which the object is closed."""

    @classmethod
    def _lend(cls, handle, parent):
        self = cls.__new__(cls)
        # The parent's context (a Stream made by Stream.__new__, as tests do, may have none).
        self._h, self.context, self.owned, self.parent = handle, getattr(parent, "context", None), False, parent
        return self

    def _end(self):
        h, self._h = self._h, None
        ev = getattr(self, "_join_event", None)
        if ev is not None:
            ev.close()
        if h is not None:
            # cgc_capture_conditional_end frees the handle whatever it returns, but for one
            # refusal: a body with a body begun inside it still open (InvalidStateError) stays
            # lent, to be ended once the inner one has; the object then stays open too.
            st = api().cgc_capture_conditional_end(h)
            if st == Status.INVALID_STATE:
                self._h = h
            _check(st)

    def close(self):
        if self._h is not None:
            raise InvalidStateError(Status.INVALID_STATE,
                                    "cgc_stream_destroy: stream %#x is lent for a conditional body: the end of "
                                    "its `with stream.conditional(...)` (or conditional_bodies) block gives it back"
                                    % self._h)

    def __del__(self):
        pass  # never destroyed here: a body that is still lent is ended by its `with` block

    def __repr__(self):
        return "<cgc.Stream %s (conditional body)>" % ("ended" if self._h is None else hex(self._h))


class Event(_Handle):
    _destroy = "cgc_event_destroy"

    def __init__(self, ctx, timing=False):
        out = ctypes.c_void_p()
        _check(api().cgc_event_create(ctx.handle, EVENT_TIMING if timing else 0, ctypes.byref(out)))
        self._h, self.context = out.value, ctx

    def record(self, stream):
        _check(api().cgc_event_record(self.handle, stream.handle))

    def synchronize(self):
        _check(api().cgc_event_synchronize(self.handle))

    def query(self):
        done = ctypes.c_int(0)
        _check(api().cgc_event_query(self.handle, ctypes.byref(done)))
        return bool(done.value)

    def elapsed_ms(self, end):
        """Milliseconds from this event's record to `end`'s (both created with timing=True)."""
        ms = ctypes.c_float(0)
        _check(api().cgc_event_elapsed_ms(self.handle, end.handle, ctypes.byref(ms)))
        return ms.value


class Pool(_Handle):
    """A private memory pool, like torch.cuda.graph_pool_handle(). Pass it as ``pool=`` to share
    it between captures. The object holds its references: close() releases them; retain() and
    release() take and drop more explicitly. Since 1.5 Pool.nccl makes one of memory registered
    with a communicator, and malloc() allocates from a pool outside captures."""

    _destroy = "cgc_pool_release"
    nccl_memory = None  # 1.5: the NcclMemory of a pool made by Pool.nccl (None for the others)
    comm = None  # 1.5: the Comm of a pool made by Pool.nccl, kept alive as long as the pool

    def __init__(self, ctx):
        out = ctypes.c_void_p()
        _check(api().cgc_pool_create(ctx.handle, ctypes.byref(out)))
        self._h, self.context, self._refs = out.value, ctx, 1

    @classmethod
    def nccl(cls, comm, capacity, wanted=NcclMemory.REGISTERED):
        """1.5: a pool of `capacity` bytes (rounded up to 2 MiB) of memory registered with Comm
        `comm`, made at once on its device and never grown: allocation beyond it raises
        OutOfMemoryError. Collective: every rank calls it with the same capacity and kind.

        wanted: the best NcclMemory asked for (a member, its name or an int). An older NCCL
        gives the next one down (SYMMETRIC -> REGISTERED -> PLAIN); the pool's ``nccl_memory``
        says which it got (the returned Pool is the pool plus that kind). Ranks that got
        different kinds are refused on every rank (InvalidStateError). SYMMETRIC is for NCCL's
        symmetric kernels, which need every rank to allocate from the pool in the same order
        with the same sizes.

        Captures allocate from it through ``pool=``, eager code through malloc(). Its release
        (close(), on every rank: it synchronises the device and drops the registration) is
        refused with InvalidStateError, and the pool stays open, while a graph or capture holds
        it or a block of it is allocated: free the blocks and close the graphs first. The pool
        holds the communicator, whose close() is refused meanwhile; this object keeps the Comm
        alive (``pool.comm``)."""
        func = "cgc_nccl_pool_create"
        handle = comm.handle
        size = _unsigned(capacity, 64, func, "capacity")
        kind = _enum_value(NcclMemory, wanted, func, "wanted")
        out, got = ctypes.c_void_p(), ctypes.c_int(0)
        _check(api().cgc_nccl_pool_create(handle, size, kind, ctypes.byref(out), ctypes.byref(got)))
        self = cls.__new__(cls)
        self._h, self.context, self._refs = out.value, getattr(comm, "context", None), 1
        self.comm, self.nccl_memory = comm, _member_or_int(NcclMemory, got.value)
        return self

    @classmethod
    def at(cls, ctx, base, capacity):
        """1.6: a pool whose memory lies at fixed virtual addresses (cgc_pool_create_at):
        [base, base + capacity) is reserved with the driver at exactly `base` (an int address,
        never dereferenced) and backed with device memory in 2 MiB steps as the pool's
        allocations need it. Captures (``pool=``), malloc() and claim() allocate from it as from
        any pool, but its memory never moves and never goes to the device's cache: the same
        requests in the same order get the same addresses, in this process or in another that
        reserves the same base.

        Raises InvalidArgumentError for base 0, capacity 0, or a base or capacity that is not a
        multiple of 2 MiB (of the device's granularity if larger: the message names it);
        InvalidStateError when the driver cannot reserve that range in this process (part of it
        is in use, e.g. by another such pool). Allocations beyond the capacity raise
        OutOfMemoryError. Its release (close()) synchronises the device and gives the range back;
        it is refused with InvalidStateError, and the pool stays open, while a graph or capture
        holds it or a block of it is allocated: free the blocks and close the graphs first."""
        func = "cgc_pool_create_at"
        handle = ctx.handle
        address = _unsigned(_ptr(base) or 0, 64, func, "base")
        size = _unsigned(capacity, 64, func, "capacity")
        out = ctypes.c_void_p()
        _check(api().cgc_pool_create_at(handle, address, size, ctypes.byref(out)))
        self = cls.__new__(cls)
        self._h, self.context, self._refs = out.value, ctx, 1
        return self

    def malloc(self, size, stream):
        """1.5: device memory from this pool outside captures, ordered on `stream` (a Stream of
        the pool's device that is not capturing: inside a capture ``pool=`` decides, and this
        raises CaptureUnsupportedError); an int address (0 for size 0), freed with cgc.free.
        Blocks allocated so are reused only by malloc() on the same stream, never by a capture,
        so a pool's graph memory and its eager memory stay apart."""
        func = "cgc_pool_malloc"
        handle = self.handle
        n = _unsigned(size, 64, func, "size")
        out = ctypes.c_void_p()
        _check(api().cgc_pool_malloc(handle, n, stream.handle, ctypes.byref(out)))
        return out.value or 0

    def claim(self, ptr, size):
        """1.6: allocates exactly [ptr, ptr + size rounded up to 512) from this pool's free memory
        (cgc_pool_claim): a range the pool holds and no block of it uses, after its free
        neighbours are merged. Returns the int address `ptr` of the block, freed with cgc.free like
        malloc()'s. The block keeps the stream of the free memory it is cut from, so it is reused
        as that memory would have been. It puts a pool back to a state it had (its live blocks at
        their addresses, like PyTorch's setCheckpointPoolState).

        Raises InvalidStateError when the range is not wholly free memory of the pool (the
        message says what holds it), InvalidArgumentError for a 0 or unaligned `ptr` or size 0,
        NotSupportedError for an NCCL pool (Pool.nccl)."""
        func = "cgc_pool_claim"
        handle = self.handle
        n = _unsigned(size, 64, func, "size")
        address = _ptr(ptr)
        _check(api().cgc_pool_claim(handle, address, n))
        return address

    @classmethod
    def _retained(cls, handle, ctx):
        _check(api().cgc_pool_retain(handle))
        self = cls.__new__(cls)
        self._h, self.context, self._refs = handle, ctx, 1
        return self

    def retain(self):
        _check(api().cgc_pool_retain(self.handle))
        self._refs += 1

    def release(self):
        """Drops one reference; the last one closes this object."""
        if self._refs <= 1:
            return self.close()
        _check(api().cgc_pool_release(self.handle))
        self._refs -= 1

    def close(self):
        while self._h is not None and self._refs > 1:
            _check(api().cgc_pool_release(self._h))
            self._refs -= 1
        super().close()

    def adopt_capture(self, native_stream):
        """1.4: the capture that `native_stream` (a CUstream as an int, or a torch stream) takes
        part in, begun outside cgc, allocates from this pool from now on, on every stream of it,
        until end_adopted_capture(). How torch.cuda.graph's captures reach cgc's pools."""
        native = getattr(native_stream, "cuda_stream", native_stream)
        _check(api().cgc_pool_adopt_capture(self.handle, native or None))

    def end_adopted_capture(self):
        """Ends adopt_capture's adoption (after the capture ended, or was abandoned)."""
        _check(api().cgc_pool_end_adopted_capture(self.handle))

    def memory_stats(self, ctx=None):
        ctx = ctx or self.context
        if ctx is None:
            raise InvalidArgumentError(Status.INVALID_ARGUMENT, "Pool.memory_stats needs a Context")
        return memory_stats(ctx, self)

    def __eq__(self, other):
        return isinstance(other, Pool) and other._h is not None and other._h == self._h

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        return hash(self._h)


class Graph(_Handle):
    """A captured graph, like torch.cuda.CUDAGraph: empty until captured (cgc.graph(...) or
    capture_begin/capture_end), then replay()/launch(stream). reset() frees it and leaves the
    object empty; close() destroys it for good. Since 1.2 a captured Graph can be recaptured in
    place (cgc.graph(g, ..., update=True)) and its kernels disabled or given new arguments
    (set_kernel_enabled, set_kernel_args)."""

    _destroy = "cgc_graph_destroy"

    def __init__(self):
        self._h = None
        self._is_closed = False
        self._capturing = None  # the Stream of a capture under way
        self._updating = False  # that capture updates the graph this object holds (1.2)
        self._stream = None  # the Stream it was captured on
        self._from_torch = False  # captured on a torch stream: replay() follows torch's current
        self._replay_streams = {}  # torch's raw stream (int) -> a Stream wrapping it
        self._torch_pool = None  # (device, torch pool id) whose use the graph holds until reset
        self._launch = self._raw_stream = self._device = None  # replay()'s, set by _set_captured
        self._owned = []  # Stream wrappers made for it, closed with it
        self._rng = None  # _TorchRng: PyTorch's generators its capture drew from (cgc.graph)
        self._generators = []  # torch.Generators registered for its captures (register_generator_state)

    @property
    def handle(self):
        if self._is_closed:
            raise _closed("Graph")
        if self._h is None:
            raise InvalidStateError(Status.INVALID_STATE, "the Graph is empty: capture into it first "
                                    "(with cgc.graph(g, ...)), or it was reset")
        return self._h

    @property
    def context(self):
        return self._context if self._stream is None else self._stream.context

    _context = None  # 1.6: the Context of a Graph of Context.restore_graphs made without a stream

    @classmethod
    def _restored(cls, handle, ctx, stream):
        """A Graph owning `handle`, a graph that Context.restore_graphs rebuilt on `ctx`: launched
        with launch(s), or by replay() on `stream` when given."""
        self = cls()
        if stream is not None:
            self._set_captured(handle, stream, False)
        else:
            self._h, self._context, self._launch, self._device = handle, ctx, api().cgc_graph_launch, ctx.device
        return self

    def capture_begin(self, stream, pool=None, mode="global", upload=False, update=False):
        """Starts capturing `stream` (a cgc.Stream) into this graph. pool: None for a new private
        pool, or a Pool (e.g. another graph's pool()) to share. update (1.2): this Graph holds a
        graph already, and the capture replaces it (see cgc.graph); pool must then be None or
        the graph's own pool."""
        if self._is_closed:
            raise _closed("Graph")
        if self._capturing is not None:
            raise InvalidStateError(Status.INVALID_STATE, "this Graph is being captured into already: "
                                    "end that capture first")
        if update and self._h is None:
            raise InvalidStateError(Status.INVALID_STATE, "cgc_capture_begin: update=True, but the Graph is empty: "
                                    "there is no graph to update (capture into it without update)")
        if not update and self._h is not None:
            raise InvalidStateError(Status.INVALID_STATE, "this Graph already holds a graph: reset() it, use a new "
                                    "Graph, or recapture it with update=True")
        opts = capture_options_t(mode=_mode(mode), pool=None if pool is None else pool.handle,
                                 flags=CAPTURE_UPLOAD if upload else 0, update=self._h if update else None)
        _check(api().cgc_capture_begin(stream.handle, ctypes.byref(opts)))
        self._capturing, self._updating = stream, bool(update)

    def capture_end(self):
        """Ends the capture and instantiates the graph; on error no stream is left capturing and
        the graph stays empty. An update (update=True) leaves this Graph holding the same handle,
        updated (info().last_update says how); if it fails, the Graph keeps its old graph."""
        self._end_capture(None)

    def _end_capture(self, rng):
        """capture_end, the graph then replaying with `rng` (a _TorchRng whose window has ended,
        or None): it replaces the generators' enrolment of the graph held before (an update)."""
        stream, self._capturing, self._updating = self._capturing, None, False
        if stream is None:
            raise InvalidStateError(Status.INVALID_STATE, "Graph.capture_end without capture_begin")
        out = ctypes.c_void_p()
        _check(api().cgc_capture_end(stream.handle, ctypes.byref(out)))
        # An update hands back the handle this object holds (the library promises it), so
        # nothing else owns it: the same assignment serves both kinds of capture.
        self._set_captured(out.value, stream, self._from_torch)
        self._set_rng(rng)

    def _set_rng(self, rng):
        """The graph's draws from PyTorch's generators are now `rng`'s (None: it draws none); the
        enrolment of the graph it held before is released."""
        if rng is not None and not rng.increment:
            rng.release()  # it drew nothing: its replays need no prologue
            rng = None
        old, self._rng = self._rng, rng
        if old is not None:
            old.release()

    def register_generator_state(self, generator):
        """Like torch.cuda.CUDAGraph.register_generator_state: `generator` (a CUDA torch.Generator
        of this graph's device, or one of its graphsafe_get_state() states) takes part in this
        Graph's captures by cgc.graph, as the device's default generator always does: random ops
        that draw from it in the body give fresh numbers at every replay, and each replay advances
        its offset. Needs cgc as PyTorch's allocator with the native backend."""
        torch = _torch()
        if torch is None or not isinstance(generator, torch.Generator) or generator.device.type != "cuda":
            raise InvalidArgumentError(Status.INVALID_ARGUMENT, "Graph.register_generator_state: pass a CUDA "
                                       "torch.Generator, not %r" % (generator,))
        if self._is_closed:
            raise _closed("Graph")
        if not any(g is generator for g in self._generators):
            self._generators.append(generator)

    def _abort_capture(self):
        """Ends a capture whose body failed: the driver capture ends, the graph is discarded. An
        update that ends anyway has put the body's half-made work in place of the old graph,
        which is gone: that graph is discarded too, so that it is never replayed."""
        stream, self._capturing = self._capturing, None
        updating, self._updating = self._updating, False
        if stream is None or stream.closed:
            return
        out = ctypes.c_void_p()
        if api().cgc_capture_end(stream.handle, ctypes.byref(out)) == 0 and out.value:
            if updating and out.value == self._h:
                self._h = None
                self._set_rng(None)  # the graph it served is gone
            api().cgc_graph_destroy(out.value)

    def _hold_torch_pool(self, key):
        if self._torch_pool is not None:  # a recapture (update) into the pool it holds already
            _torch_bridge_pool_release(*key)
        else:
            self._torch_pool = key

    def _torch_stream(self, raw=None):
        """Torch's current stream of the graph's device (`raw`: its handle, if read already), as
        CUDAGraph.replay() uses it, wrapped once per torch stream."""
        device = self._stream.context.device
        torch = sys.modules["torch"]
        if raw is None:
            raw = torch._C._cuda_getCurrentRawStream(device)
        s = self._replay_streams.get(raw)
        if s is None:
            ts = torch.cuda.current_stream(device)
            s = self._replay_streams[raw] = Stream.from_torch(ts, self._stream.context)
        return s

    def _default_stream(self):
        if self._from_torch:
            return self._torch_stream()
        if self._stream is None:
            if self._h is not None:
                raise InvalidStateError(Status.INVALID_STATE, "the Graph was restored (Context.restore_graphs) "
                                        "without a stream: launch(stream) it, or restore it with stream=")
            raise InvalidStateError(Status.INVALID_STATE, "the Graph is empty: capture into it first")
        return self._stream

    def _set_captured(self, handle, stream, from_torch):
        """The graph now holds `handle`, captured on `stream`: replay()'s inputs are read once here."""
        self._h, self._stream, self._from_torch = handle, stream, from_torch
        self._launch = api().cgc_graph_launch
        self._device = stream.context.device if stream.context is not None else None
        torch = sys.modules.get("torch") if from_torch else None
        self._raw_stream = torch._C._cuda_getCurrentRawStream if torch is not None else None

    def launch(self, stream):
        """Replays the graph on `stream` (any stream of its device). Does not synchronise."""
        h = self.handle
        if self._rng is not None:
            self._rng.replay(stream.native)
        _check(api().cgc_graph_launch(h, stream.handle))

    def replay(self):
        """Replays on the capture stream (or, for a graph captured on a torch stream, on torch's
        current stream, like CUDAGraph.replay())."""
        # The host time of this call is the point of a graph: no torch Stream object is made
        # (torch's raw current stream, looked up in a dict), and one ctypes call.
        h = self._h
        if h is None:
            h = self.handle  # raises: closed or empty
        if self._from_torch:
            raw = self._raw_stream(self._device)
            s = self._replay_streams.get(raw) or self._torch_stream(raw)
        else:
            s = self._default_stream()
        rng = self._rng
        if rng is not None:  # the graph draws PyTorch's random numbers: their seed and offset first
            rng.replay(raw if self._from_torch else s.native)
        st = (self._launch or api().cgc_graph_launch)(h, s._h)
        if st != 0:
            _raise(st)

    def upload(self, stream=None):
        _check(api().cgc_graph_upload(self.handle, (stream or self._default_stream()).handle))

    def info(self):
        """GraphInfo: the captured nodes (node_count, and by kind: kernel_nodes, memcpy_nodes, ...),
        replays so far, whether it is uploaded, the bytes its pool holds, its updates by capture and
        (1.6) its family: family_size graphs share its executable, family_result says why its last
        join (share_executable) was refused."""
        i = graph_info_t()
        _check(api().cgc_graph_info(self.handle, ctypes.byref(i)))
        fields = {name: getattr(i, name) for name in GraphInfo._fields}
        fields["uploaded"] = bool(i.uploaded)
        fields["last_update"] = _member_or_int(GraphUpdate, i.last_update)
        return GraphInfo(**fields)

    def share_executable(self, leader):
        """1.6, families (cgc_graph_share_executable): this graph gives up its own executable and
        shares `leader`'s (a Graph), so that graphs of one topology that differ in their nodes'
        parameters (one per batch size: other buffers, values, grids) hold one executable. A
        launch or upload of a member the executable does not hold updates it in place to that
        member's nodes first (no device synchronisation), then launches. Members replay one at a
        time, in launch order, whatever their streams; a launch while another thread launches a
        member of the same family is refused (InvalidStateError), never waits. Members take no
        per-node updates (set_kernel_enabled, set_kernel_args) and no updates by capture
        (InvalidStateError). Joining the family it is in already does nothing. The last member's
        reset or close frees the executable; info().family_size counts the members.

        Raises NotSupportedError when the driver refuses to update the executable to this graph's
        nodes (another topology, other kernels): the graph keeps its own executable and
        info().family_result says why. InvalidArgumentError for a leader that is no Graph, the
        graph itself as leader, or graphs of two devices; InvalidStateError for an empty (reset)
        Graph, after per-node updates of either graph, or when this graph shares another
        family's executable already. Not while another thread launches, resets or closes either
        graph."""
        func = "cgc_graph_share_executable"
        if not isinstance(leader, Graph):
            raise _bad_argument(func, "leader is a %s, not a cgc.Graph", type(leader).__name__)
        _check(api().cgc_graph_share_executable(self.handle, leader.handle))

    # ---- per-node updates (1.2) ----
    # Kernel nodes are numbered 0 .. info().kernel_nodes - 1 in the order the capture launched
    # them (cgc's own kernels, e.g. Rng draws, count too). A change holds for later replays; not
    # while another thread launches or changes this graph.

    def set_kernel_enabled(self, kernel_index, enabled=True):
        """Enables or disables (enabled False) the graph's kernel number `kernel_index`: a
        disabled kernel does nothing at later replays, what depends on it still waits for it."""
        func = "cgc_graph_kernel_node_set_enabled"
        _check(api().cgc_graph_kernel_node_set_enabled(self.handle, _unsigned(kernel_index, 64, func, "kernel_index"),
                                                       1 if enabled else 0))

    def set_kernel_args(self, kernel_index, args):
        """Gives kernel number `kernel_index` new argument values for later replays (e.g. another
        buffer), same kernel, grid and block: one ctypes value per parameter, as Function.launch
        takes them. Their values are copied at the call; memory they point to must stay valid as
        long as the graph is replayed."""
        func = "cgc_graph_kernel_node_set_args"
        index = _unsigned(kernel_index, 64, func, "kernel_index")
        pointers, values = _kernel_params(args, func)
        _check(api().cgc_graph_kernel_node_set_args(self.handle, index, ctypes.cast(pointers, _hp)))
        del values

    def pool(self):
        """The graph's pool, as a Pool holding its own reference (like CUDAGraph.pool())."""
        out = ctypes.c_void_p()
        _check(api().cgc_graph_pool(self.handle, ctypes.byref(out)))
        return Pool._retained(out.value, self.context)

    def debug_dump(self, path):
        _check(api().cgc_graph_debug_dump(self.handle, os.fsencode(path)))

    @property
    def native(self):
        """The CUgraph (int), or 0 when empty."""
        return (api().cgc_graph_native(self._h) or 0) if self._h else 0

    @property
    def native_exec(self):
        return (api().cgc_graph_native_exec(self._h) or 0) if self._h else 0

    def reset(self):
        """Like CUDAGraph.reset(): frees the graph now; the object is empty and can capture again.
        A graph captured into a torch pool id gives its use of the pool back, as torch's do."""
        h, self._h = self._h, None
        if h is not None:
            st = api().cgc_graph_destroy(h)
            if st != 0:
                self._h = h
                _raise(st)
        self._set_rng(None)
        if self._torch_pool is not None:
            key, self._torch_pool = self._torch_pool, None
            _torch_bridge_pool_release(*key)

    def close(self):
        if self._capturing is not None:
            self._abort_capture()
        try:
            self.reset()
        finally:
            self._is_closed = True
            self._generators = []
            for s in list(self._replay_streams.values()) + self._owned:
                s.close()
            self._replay_streams, self._owned = {}, []

    @property
    def closed(self):
        return self._is_closed

    def __del__(self):
        if (self._h is not None or self._owned or self._torch_pool) and not sys.is_finalizing():
            try:
                self.close()
            except Exception:
                pass

    def __repr__(self):
        state = "closed" if self._is_closed else ("empty" if self._h is None else hex(self._h))
        return "<cgc.Graph %s>" % state


class Rng(_Handle):
    """A graph-safe Philox generator: draws captured in a graph give fresh numbers each replay.
    Since 1.3 it also draws in conditional bodies: in a WHILE body, iteration i of a replay draws
    what the i-th of as many eager draws from the replay's starting state would (for i below
    LOOP_EAGER_ITERATIONS), and each replay advances the offset by LOOP_EAGER_ITERATIONS times
    the numbers one iteration draws (each draw's count rounded up to 4)."""

    _destroy = "cgc_rng_destroy"

    def __init__(self, ctx, seed=0):
        out = ctypes.c_void_p()
        _check(api().cgc_rng_create(ctx.handle, int(seed), ctypes.byref(out)))
        self._h, self.context = out.value, ctx

    @classmethod
    def _restored(cls, h, ctx):
        """An Rng owning a reference the library handed out (Context.restore_graphs' generators)."""
        rng = cls.__new__(cls)
        rng._h, rng.context = h, ctx
        return rng

    @staticmethod
    def _count(out, n):
        return out.numel() if n is None else int(n)

    def uniform(self, out, n, stream):
        """n float32 in [0, 1) into device memory `out` (an address, or a tensor with n None),
        ordered on `stream` (captured if it captures)."""
        _check(api().cgc_rng_uniform(self.handle, _ptr(out), self._count(out, n), stream.handle))

    def normal(self, out, n, stream, mean=0.0, std=1.0):
        """n normal float32 (mean, std) into `out`, ordered on `stream`."""
        _check(api().cgc_rng_normal(self.handle, _ptr(out), self._count(out, n), float(mean),
                                    float(std), stream.handle))

    def get_state(self):
        """(seed, offset) the next eager draw or replay starts from."""
        seed, offset = ctypes.c_uint64(0), ctypes.c_uint64(0)
        _check(api().cgc_rng_get_state(self.handle, ctypes.byref(seed), ctypes.byref(offset)))
        return seed.value, offset.value

    def set_state(self, seed, offset=0):
        _check(api().cgc_rng_set_state(self.handle, int(seed), int(offset)))


def nccl_version():
    v = ctypes.c_int(0)
    _check(api().cgc_nccl_version(ctypes.byref(v)))
    return v.value


class nccl_group(object):
    """``with cgc.nccl_group():`` brackets collectives with cgc_group_start/cgc_group_end."""

    def __enter__(self):
        _check(api().cgc_group_start())
        return self

    def __exit__(self, *exc):
        _check(api().cgc_group_end())
        return False


class Comm(_Handle):
    """An NCCL communicator: rank `rank` of `nranks`, joined with the id of Comm.unique_id()."""

    _destroy = "cgc_comm_destroy"

    @staticmethod
    def unique_id():
        """A new ncclUniqueId as 128 bytes, to send to the other ranks."""
        cid = comm_id_t()
        _check(api().cgc_comm_unique_id(ctypes.byref(cid)))
        return ctypes.string_at(ctypes.addressof(cid), ctypes.sizeof(cid))

    def __init__(self, ctx, nranks, unique_id, rank):
        cid = comm_id_t()
        ctypes.memmove(ctypes.addressof(cid), bytes(unique_id), min(len(unique_id), 128))
        out = ctypes.c_void_p()
        _check(api().cgc_comm_create(ctx.handle, int(nranks), ctypes.byref(cid), int(rank), ctypes.byref(out)))
        self._h, self.context = out.value, ctx

    def abort(self):
        _check(api().cgc_comm_abort(self.handle))

    def all_reduce(self, send, recv, count, dtype, op, stream):
        _check(api().cgc_all_reduce(self.handle, _ptr(send), _ptr(recv), count, dtype, op, stream.handle))

    def all_gather(self, send, recv, send_count, dtype, stream):
        _check(api().cgc_all_gather(self.handle, _ptr(send), _ptr(recv), send_count, dtype, stream.handle))

    def reduce_scatter(self, send, recv, recv_count, dtype, op, stream):
        _check(api().cgc_reduce_scatter(self.handle, _ptr(send), _ptr(recv), recv_count, dtype, op, stream.handle))

    def broadcast(self, send, recv, count, dtype, root, stream):
        _check(api().cgc_broadcast(self.handle, _ptr(send), _ptr(recv), count, dtype, root, stream.handle))

    def send(self, buf, count, dtype, peer, stream):
        _check(api().cgc_send(self.handle, _ptr(buf), count, dtype, peer, stream.handle))

    def recv(self, buf, count, dtype, peer, stream):
        _check(api().cgc_recv(self.handle, _ptr(buf), count, dtype, peer, stream.handle))


# ---- the work a graph is made of (1.1) -----------------------------------------------------
# Stream holds the copies, sets, host functions and memory operations; here are what they use.


AccessPolicy = namedtuple("AccessPolicy", "base nbytes hit_ratio hit_property miss_property")
AccessPolicy.__doc__ = """A stream's L2 access-policy window (Stream.access_policy()): [base, base + nbytes)
of device memory, the fraction hit_ratio of accesses getting hit_property, the others miss_property."""


class MemOp(namedtuple("MemOp", "kind address value flags")):
    """One operation of Stream.batch_mem_op: kind (a MemOpKind), a device address, the value
    written or waited for, and flags (WAIT_* for waits, 0 for writes and flushes, BARRIER_* for
    barriers; address and value are unused by flushes and barriers). Build them with the class
    methods: MemOp.write32(flag, 1), MemOp.wait32(flag, 1, WAIT_EQ), MemOp.barrier()."""

    __slots__ = ()

    def __new__(cls, kind, address=None, value=0, flags=0):
        return super().__new__(cls, kind, address, value, flags)

    @classmethod
    def write32(cls, address, value, flags=0):
        return cls(MemOpKind.WRITE_VALUE_32, address, value, flags)

    @classmethod
    def write64(cls, address, value, flags=0):
        return cls(MemOpKind.WRITE_VALUE_64, address, value, flags)

    @classmethod
    def wait32(cls, address, value, flags=WAIT_GEQ):
        return cls(MemOpKind.WAIT_VALUE_32, address, value, flags)

    @classmethod
    def wait64(cls, address, value, flags=WAIT_GEQ):
        return cls(MemOpKind.WAIT_VALUE_64, address, value, flags)

    @classmethod
    def flush_remote_writes(cls):
        return cls(MemOpKind.FLUSH_REMOTE_WRITES)

    @classmethod
    def barrier(cls, gpu_scope=False):
        """A memory barrier (batches only): earlier writes become visible to the whole system
        (BARRIER_SYSTEM), or with gpu_scope to the device only (BARRIER_GPU)."""
        return cls(MemOpKind.BARRIER, flags=BARRIER_GPU if gpu_scope else BARRIER_SYSTEM)


class _HostFuncs(object):
    """The callables of Stream.launch_host_func while something can call them, by the integer
    id passed to the library as `user`. ctypes keeps no reference to a Python callable once the
    C call returns, so this registry does: the library's release callback (exactly once, when
    nothing can call fn any more) removes the entry.

    No lock: each step is one dict operation or one next() on a count, atomic in Python. A lock
    could deadlock: garbage collection inside add() may close a Graph, whose release runs here
    on the same thread."""

    def __init__(self):
        self._ids = itertools.count(1)  # 0 would arrive as None
        self._calls = {}

    def add(self, fn):
        user = next(self._ids)
        self._calls[user] = fn
        return user

    def call(self, user):
        self._calls[user]()

    def release(self, user):
        del self._calls[user]

    def __len__(self):
        return len(self._calls)


_host_funcs = _HostFuncs()
# One trampoline and one release for every host function: module-level, so they outlive every
# graph that may still call them (a CFUNCTYPE object freed while C holds its pointer would crash).
_HOST_FUNC_TRAMPOLINE = host_fn(_host_funcs.call)
_HOST_FUNC_RELEASE = host_fn(_host_funcs.release)


def pending_host_funcs():
    """How many host-function callables cgc keeps alive now (eager calls not yet run, host nodes
    of graphs not yet reset or closed)."""
    return len(_host_funcs)


class HostBuffer(object):
    """Page-locked host memory, which copies inside captures need: a captured copy reads or
    writes the same host memory at every replay, so per-replay values are written here between
    replays. HostBuffer(ctx, nbytes) allocates it (cgc_host_alloc; write_combined: fast for the
    GPU to read, very slow for the CPU to read); HostBuffer.register(ctx, buffer) page-locks a
    writable buffer of the caller's in place (cgc_host_register). close() frees or unregisters it.

    Its contents are reached through as_array() (a ctypes array) or as_memoryview(). Keep the
    buffer open while work or graphs that copy to or from it may still run: they use its memory
    directly, and a view of it must not be used after close()."""

    def __init__(self, ctx, nbytes, write_combined=False):
        func = "cgc_host_alloc"
        n = _unsigned(nbytes, 64, func, "nbytes")
        out = ctypes.c_void_p()
        _check(api().cgc_host_alloc(ctx.handle, n, HOST_WRITE_COMBINED if write_combined else 0, ctypes.byref(out)))
        self._address, self.nbytes, self.context, self.registered = out.value or 0, n, ctx, False
        self._pinned = None  # a registered buffer's export, which keeps its memory in place
        self._is_closed = False

    @classmethod
    def register(cls, ctx, buffer, nbytes=None, read_only=False):
        """Page-locks `buffer` (a writable buffer: bytearray, array.array, a ctypes array, a numpy
        array; or an int address with nbytes) until close(). The HostBuffer keeps the buffer
        exported, so a bytearray cannot be resized under the driver. read_only: the device only
        reads it."""
        func = "cgc_host_register"
        address, known, keep = _host_memory(buffer, func, "buffer", writable=True)
        n = _copy_size(nbytes, known, func, "buffer")
        _check(api().cgc_host_register(ctx.handle, address, n, HOST_READ_ONLY if read_only else 0))
        self = cls.__new__(cls)
        self._address, self.nbytes, self.context, self.registered = address, n, ctx, True
        self._pinned, self._is_closed = keep, False
        return self

    @property
    def address(self):
        """Its address (an int); raises InvalidHandleError once closed."""
        if self._is_closed:
            raise _closed("HostBuffer")
        return self._address

    def data_ptr(self):
        """Its address, like a tensor's data_ptr(): a HostBuffer goes wherever an address does."""
        return self.address

    def __len__(self):
        return self.nbytes

    def as_array(self, ctype=ctypes.c_ubyte, count=None):
        """A ctypes array of `count` (default: as many as fit) `ctype` over the memory, e.g.
        ``params = host.as_array(ctypes.c_float); params[0] = 2.0``."""
        if count is None:
            count = self.nbytes // ctypes.sizeof(ctype)
        elif count * ctypes.sizeof(ctype) > self.nbytes:
            raise InvalidArgumentError(Status.INVALID_ARGUMENT, "HostBuffer.as_array: %d x %d bytes is more than its "
                                       "%d bytes" % (count, ctypes.sizeof(ctype), self.nbytes))
        view = (ctype * count).from_address(self.address)
        view._host_buffer = self  # the memory is not freed by garbage collection while a view is used
        return view

    def as_memoryview(self, format="B"):
        """A memoryview of the memory in a struct-module `format` ("f" for float32, "I" for uint32)."""
        view = memoryview(self.as_array(ctypes.c_ubyte)).cast("B")
        return view if format == "B" else view.cast(format)

    def close(self):
        """Frees (or unregisters) the memory; closing twice is fine."""
        if self._is_closed:
            return
        if self._address:
            lib = api()
            release = lib.cgc_host_unregister if self.registered else lib.cgc_host_free
            _check(release(self._address))
        self._is_closed, self._pinned = True, None

    @property
    def closed(self):
        return self._is_closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        if not getattr(self, "_is_closed", True) and not sys.is_finalizing():
            try:
                self.close()
            except Exception:
                pass

    def __repr__(self):
        state = "closed" if self._is_closed else "%#x, %d bytes" % (self._address, self.nbytes)
        return "<cgc.HostBuffer %s%s>" % (state, ", registered" if self.registered else "")


class Module(_Handle):
    """A loaded module: Module(ctx, image) with a fatbin, a cubin or PTX text (bytes or str; the
    driver compiles PTX for the device and its error log is in the error message), or
    Module.from_file(ctx, path). module.function(name) finds a kernel. close() unloads it: its
    Functions become unusable, and the code stays loaded as long as graphs that launch its
    kernels live."""

    _destroy = "cgc_module_unload"

    def __init__(self, ctx, image):
        if isinstance(image, str):
            image = image.encode("utf-8")
        if not isinstance(image, (bytes, bytearray, memoryview)):
            raise _bad_argument("cgc_module_load", "image must be bytes or str (PTX text), not a %s",
                                type(image).__name__)
        image = bytes(image)
        if not image.endswith(b"\0"):
            image += b"\0"  # PTX text must be NUL-terminated; a binary image ignores the byte after it
        out = ctypes.c_void_p()
        _check(api().cgc_module_load(ctx.handle, image, ctypes.byref(out)))
        self._h, self.context, self._functions = out.value, ctx, {}

    @classmethod
    def from_file(cls, ctx, path):
        with open(path, "rb") as f:
            return cls(ctx, f.read())

    def function(self, name):
        """The kernel `name` (its extern "C" or mangled name) as a Function; InvalidArgumentError
        naming it when the module has none. Asking twice gives the same Function."""
        f = self._functions.get(name)
        if f is None:
            out = ctypes.c_void_p()
            _check(api().cgc_module_get_function(self.handle, name.encode("utf-8"), ctypes.byref(out)))
            f = self._functions[name] = Function(self, name, out.value)
        return f

    def close(self):
        super().close()
        self._functions = {}


class Function(object):
    """A kernel of a Module (from Module.function): its attributes, and launch()."""

    def __init__(self, module, name, handle):
        self.module, self.name, self._h = module, name, handle

    @property
    def handle(self):
        """The C handle; raises InvalidHandleError once its Module is closed (the handle dies with it)."""
        if self.module.closed:
            raise _closed("Module of Function %r" % self.name)
        return self._h

    @property
    def closed(self):
        return self.module.closed

    def get_attribute(self, attribute):
        """The value of a FunctionAttribute (a member, its name or an int)."""
        func = "cgc_function_get_attribute"
        value = ctypes.c_int(0)
        _check(api().cgc_function_get_attribute(self.handle, _enum_value(FunctionAttribute, attribute, func, "attribute"),
                                                ctypes.byref(value)))
        return value.value

    def set_attribute(self, attribute, value):
        """Sets MAX_DYNAMIC_SHARED_SIZE_BYTES or PREFERRED_SHARED_MEMORY_CARVEOUT (the others are
        read only: InvalidArgumentError)."""
        func = "cgc_function_set_attribute"
        _check(api().cgc_function_set_attribute(self.handle, _enum_value(FunctionAttribute, attribute, func, "attribute"),
                                                _int32(value, func, "value")))

    def launch(self, grid, block, args, stream, shared_bytes=0):
        """Launches the kernel on `stream` (captured as a kernel node inside a capture; the graph
        then keeps the module loaded). grid and block: an int or a tuple of up to 3 ints. args:
        one ctypes value per kernel parameter, of the parameter's C type, e.g.
        ``(ctypes.c_void_p(out), ctypes.c_float(2.0), ctypes.c_uint32(n))``; their values are
        copied at the call. shared_bytes: dynamic shared memory per block."""
        func = "cgc_launch_kernel"
        gx, gy, gz = _dimensions(grid, func, "grid")
        bx, by, bz = _dimensions(block, func, "block")
        pointers, values = _kernel_params(args, func)
        _check(api().cgc_launch_kernel(self.handle, gx, gy, gz, bx, by, bz,
                                       _unsigned(shared_bytes, 32, func, "shared_bytes"), stream.handle,
                                       ctypes.cast(pointers, _hp) if values else None))
        del values

    def __repr__(self):
        return "<cgc.Function %r%s>" % (self.name, " (module closed)" if self.closed else "")


def _kernel_params(args, func):
    """cuLaunchKernel's kernelParams for `args` (ctypes values, one per kernel parameter): a ctypes
    array of one pointer per parameter to its value, and the list of the values, which the caller
    keeps alive until the C call has copied them. The array has at least one slot, so that it has
    an address even for a kernel without parameters (cgc_graph_kernel_node_set_args refuses NULL)."""
    values = list(args)
    for i, value in enumerate(values):
        if not isinstance(value, _CTYPES_DATA):
            raise _bad_argument(func, "args[%d] is a %s: pass ctypes values of the parameters' types "
                                "(ctypes.c_void_p(address), ctypes.c_float(x), ctypes.c_uint32(n), ...)",
                                i, type(value).__name__)
    pointers = (ctypes.c_void_p * max(len(values), 1))(*[ctypes.addressof(v) for v in values])
    return pointers, values


def _dimensions(dims, func, what):
    """A grid or block as (x, y, z): an int or a sequence of 1 to 3 ints, the missing ones 1.
    Zero dimensions go to the library, which refuses them."""
    if not isinstance(dims, (tuple, list)):
        dims = (dims,)
    if not 1 <= len(dims) <= 3:
        raise _bad_argument(func, "%s has %d dimensions (1 to 3)", what, len(dims))
    dims = tuple(dims) + (1,) * (3 - len(dims))
    return tuple(_unsigned(d, 32, func, "%s dimension %d" % (what, i)) for i, d in enumerate(dims))


# ---- capture helpers -----------------------------------------------------------------------


def _torch():
    """torch if the program imported it (this module never imports it by itself)."""
    return sys.modules.get("torch")


_default_capture_streams = {}  # device -> the torch.cuda.Stream cgc.graph captures on by default

# What PyTorch says when a random-number op draws, in a capture, from a generator that the
# capture did not enrol: PyTorch enrols its generators only in captures of torch.cuda.CUDAGraph,
# and has no public way to enrol them in another one. cgc's native backend enrols them in
# cgc.graph's captures (_TorchRng); without it, or for a generator not registered, PyTorch says:
_TORCH_RNG_REFUSAL = "CUDA generator not in capture mode"

_torch_rng_support = None  # (flags, why): what the native backend's cgc_torch_rng_supported said


def _torch_rng_supported():
    """(enrols the default generators, takes registered ones, why not) for this process: cgc is
    PyTorch's allocator with the native backend, built with PyTorch's generator headers."""
    global _torch_rng_support
    if _torch_allocator != "native" or _torch_bridge is None:
        why = ("cgc is not PyTorch's allocator" if _torch_allocator is None else
               "cgc serves PyTorch through the pluggable allocator, not its native backend")
        return False, False, why
    if _torch_rng_support is None:
        dll = _torch_bridge
        if not hasattr(dll, "cgc_torch_rng_supported"):
            _torch_rng_support = (0, "the loaded backend has no generator enrolment")
        else:
            error = ctypes.create_string_buffer(512)
            flags = dll.cgc_torch_rng_supported(error, len(error))
            _torch_rng_support = (flags, error.value.decode("utf-8", "replace"))
    flags, why = _torch_rng_support
    return bool(flags & 1), bool(flags & 2), why


class _TorchRng(object):
    """PyTorch's CUDA generators enrolled in one cgc.graph capture by the native backend
    (backend.cc): begun before cgc's capture begins, ended after the body; then, if the graph
    drew from them (increment > 0), held by the Graph, whose every launch runs replay() first
    on the launch stream, as CUDAGraph.replay() runs its generators' replay prologue."""

    __slots__ = ("_token", "_dll", "_lock", "_error", "increment")

    def __init__(self, dll, token):
        self._dll, self._token = dll, token
        self._lock = threading.Lock()  # a release waits for a replay under way on another thread
        self._error = ctypes.create_string_buffer(512)
        self.increment = None  # set by end(): the largest whole-graph increment

    def _raise(self, status, what):
        message = self._error.value.decode("utf-8", "replace")
        raise Error(Status.of(status), "%s: PyTorch's random numbers: %s" % (what, message))

    def end(self):
        """Ends the capture window: the generators leave capture mode. Raises if the window
        cannot serve the graph (it is ended all the same)."""
        increment = ctypes.c_ulonglong(0)
        st = self._dll.cgc_torch_rng_capture_end(self._token, ctypes.byref(increment), self._error,
                                                 len(self._error))
        self.increment = increment.value
        if st != 0:
            self._raise(st, "cgc.graph")

    def replay(self, raw_stream):
        """Before a launch on torch's raw stream `raw_stream`: the capture's seed and offset
        tensors filled there, each generator's offset advanced by the graph's increment."""
        with self._lock:
            if self._token is None:
                raise InvalidStateError(Status.INVALID_STATE, "the Graph's generator enrolment was released")
            st = self._dll.cgc_torch_rng_replay_prologue(self._token, raw_stream, self._error, len(self._error))
            if st != 0:
                self._raise(st, "Graph.replay")

    def release(self):
        with self._lock:
            token, self._token = self._token, None
        if token is not None:
            self._dll.cgc_torch_rng_release(token)

    def __del__(self):
        if self._token is not None and not sys.is_finalizing():
            self.release()


def _torch_rng_unenrolled_why():
    enrols, _, why = _torch_rng_supported()
    return "the capture is not on a torch stream" if enrols else why


def _torch_rng_begin(device, raw_stream, generators):
    """The enrolment of the device's default CUDA generator and of `generators` (registered with
    Graph.register_generator_state) in the capture about to begin on torch's raw stream
    `raw_stream`, or None where cgc cannot enrol them (not the native backend): the body's draws
    are then refused as before, and registered generators raise here."""
    enrols, takes_registered, why = _torch_rng_supported()
    if not enrols or (generators and not takes_registered):
        if generators:
            raise CaptureUnsupportedError(Status.CAPTURE_UNSUPPORTED, "cgc.graph: registered generators "
                                          "(Graph.register_generator_state) cannot take part in the capture: %s"
                                          % why)
        return None
    dll = _torch_bridge
    objects = (ctypes.c_void_p * max(len(generators), 1))(*[id(g) for g in generators])
    token = ctypes.c_void_p()
    error = ctypes.create_string_buffer(512)
    st = dll.cgc_torch_rng_capture_begin(device, raw_stream, objects, len(generators), ctypes.byref(token),
                                         error, len(error))
    if st != 0:
        raise Error(Status.of(st), "cgc.graph: enrolling PyTorch's generators in the capture: %s"
                    % error.value.decode("utf-8", "replace"))
    return _TorchRng(dll, token.value)


def _torch_capture_prelude(torch, collect_garbage):
    """What torch.cuda.graph.__enter__ (PyTorch 2.11) does before it begins: wait for the device,
    collect garbage only when asked (torch.compiler.config.force_cudagraph_gc, or collect_garbage),
    and empty the caches, so that the capture starts from the memory the graph needs."""
    torch.cuda.synchronize()
    if collect_garbage is None:
        config = getattr(getattr(torch, "compiler", None), "config", None)
        collect_garbage = bool(getattr(config, "force_cudagraph_gc", False))
    if collect_garbage:
        gc.collect()
    torch.cuda.empty_cache()  # cgc's cache too, when cgc is torch's allocator (the bridge's hook)
    host_empty = getattr(torch._C, "_host_emptyCache", None)
    if host_empty is not None:
        host_empty()


class graph(object):
    """Captures the body into `cuda_graph` (a cgc.Graph), like torch.cuda.graph, whose arguments
    it takes:

        with cgc.graph(g, pool=None, stream=None, capture_error_mode="global"):
            ...

    stream: a cgc.Stream, a torch.cuda.Stream, or None. None (torch imported) captures on a
    stream cgc keeps per device, as torch.cuda.graph does with its default capture stream. With a
    torch stream (or None) the body runs with that stream as torch's current stream, so torch
    work in it is captured, and entering does what torch.cuda.graph's does: synchronise the
    device, empty the caches, and collect garbage only when collect_garbage=True or
    torch.compiler.config.force_cudagraph_gc asks (it is slow: about 65 ms with a large model
    loaded, per capture).
    pool: None (a new private pool), a Pool, another graph's pool(), or a torch pool id
    (torch.cuda.graph_pool_handle(), a torch CUDAGraph's pool()) once cgc is torch's allocator
    (use_as_torch_allocator): then cgc's captures and torch's share that pool.
    capture_error_mode (or mode): "global", "thread_local" or "relaxed". upload: upload the
    executable at the end.
    update (1.2): recapture into `cuda_graph`, which holds a graph already, instead of into an
    empty one: at the end the same Graph (same handle) holds the new graph, its executable
    updated in place when the driver accepts the new graph (same topology: new pointers or
    values), else instantiated anew; cuda_graph.info().last_update says which. The recapture
    allocates from the graph's own pool (pool must be None or that pool). The old graph may be
    replayed while the recapture is under way.

    The capture always ends: if the body raises, its exception propagates and the graph is
    discarded (the Graph stays empty). With update=True it is empty afterwards too: ending an
    update after the body applies it, so the half-made recapture has replaced the old graph
    (cgc.capture(stream, body, update=g) keeps the old graph instead, ending inside the
    library). If ending fails (e.g. an unjoined fork), that Error is raised, no stream is left
    capturing and an updated Graph keeps its old graph.

    PyTorch's random numbers (torch.rand, dropout, ...): with cgc as PyTorch's allocator through
    its native backend, a capture on a torch stream enrols the device's default CUDA generator
    (and those registered with cuda_graph.register_generator_state) as torch.cuda.graph
    does: every replay draws fresh numbers, the very ones a torch.cuda.graph of the same body
    draws from the same seed, and advances the generator's offset by the graph's draws. Without
    that backend torch refuses them in a capture it did not begin, and cgc.graph raises
    CaptureUnsupportedError saying what to use instead (docs/TORCH.md, "Random numbers")."""

    def __init__(self, cuda_graph, pool=None, stream=None, capture_error_mode=None, mode=None, upload=False,
                 update=False, collect_garbage=None):
        if isinstance(pool, Stream) or hasattr(pool, "cuda_stream"):
            # Before 1.4 the second argument was the stream: cgc.graph(g, s) keeps working.
            pool, stream = stream, pool
        if capture_error_mode is not None and mode is not None and _mode(capture_error_mode) != _mode(mode):
            raise InvalidArgumentError(Status.INVALID_ARGUMENT, "cgc.graph: capture_error_mode=%r and mode=%r disagree"
                                       % (capture_error_mode, mode))
        self.cuda_graph = cuda_graph
        self.stream = stream
        self.pool = pool
        self.mode = _mode(capture_error_mode if capture_error_mode is not None else (mode or "global"))
        self.upload = upload
        self.update = update
        self.collect_garbage = collect_garbage
        self._torch_ctx = None
        self._on_torch_stream = False
        self._torch_pool = None  # the torch pool id this capture took a use of, until its end
        self._rng = None  # _TorchRng: PyTorch's generators enrolled in this capture, until its end

    def _resolve_stream(self):
        stream = self.stream
        if isinstance(stream, Stream):
            return stream, None
        torch = _torch()
        if stream is None:
            if torch is None:
                raise InvalidArgumentError(Status.INVALID_ARGUMENT, "cgc.graph: pass stream= (a cgc.Stream); "
                                           "the default, a capture stream of torch's, needs torch imported")
            index = torch.cuda.current_device()
            side = _default_capture_streams.get(index)
            if side is None:
                side = _default_capture_streams[index] = torch.cuda.Stream(device=index)
            return None, side
        if hasattr(stream, "cuda_stream"):
            return None, stream
        raise InvalidArgumentError(Status.INVALID_ARGUMENT, "cgc.graph: stream must be a cgc.Stream or a "
                                   "torch.cuda.Stream, not %r" % (stream,))

    def _resolve_pool(self, stream):
        """The pool to capture into: a Pool as given, or the cgc pool behind a torch pool id (one
        use of it taken, as torch's capture_begin takes one)."""
        pool = self.pool
        if pool is None or isinstance(pool, Pool):
            return pool
        if isinstance(pool, tuple) and len(pool) == 2 and all(isinstance(x, int) for x in pool):
            device = stream.context.device
            handle = _torch_bridge_pool(device, pool, create=True)
            self._torch_pool = (device, pool)
            return _LentPool(handle)
        raise InvalidArgumentError(Status.INVALID_ARGUMENT, "cgc.graph: pool must be None, a cgc.Pool or a torch "
                                   "pool id (torch.cuda.graph_pool_handle()), not %r" % (pool,))

    def _release_torch_pool(self):
        if self._torch_pool is not None:
            (device, pool_id), self._torch_pool = self._torch_pool, None
            _torch_bridge_pool_release(device, pool_id)

    def __enter__(self):
        g = self.cuda_graph
        stream, torch_stream = self._resolve_stream()
        if torch_stream is not None:
            torch = _torch()
            _torch_capture_prelude(torch, self.collect_garbage)
            stream = Stream.from_torch(torch_stream)
            g._owned.append(stream)
            self._torch_ctx = torch.cuda.stream(torch_stream)
            self._torch_ctx.__enter__()
        elif g._generators:
            raise InvalidArgumentError(Status.INVALID_ARGUMENT, "cgc.graph: the Graph has registered generators "
                                       "(register_generator_state), which take part only in captures on a torch "
                                       "stream: pass a torch.cuda.Stream or stream=None")
        try:
            pool = self._resolve_pool(stream)
            if torch_stream is not None:
                # As CUDAGraph.capture_begin: the generators enter capture mode before the capture
                # begins (their tensors are filled eagerly, outside it).
                self._rng = _torch_rng_begin(stream.context.device, torch_stream.cuda_stream, g._generators)
            g.capture_begin(stream, pool=pool, mode=self.mode, upload=self.upload, update=self.update)
        except BaseException:
            self._release_rng()
            self._release_torch_pool()
            self._leave_torch()
            raise
        self._on_torch_stream = torch_stream is not None
        return g

    def _release_rng(self):
        if self._rng is not None:
            rng, self._rng = self._rng, None
            rng.release()  # ends the window first when the capture did not end

    def _leave_torch(self):
        if self._torch_ctx is not None:
            ctx, self._torch_ctx = self._torch_ctx, None
            ctx.__exit__(None, None, None)

    def __exit__(self, exc_type, exc, tb):
        kept = False
        enrolled = self._rng is not None
        try:
            g = self.cuda_graph
            if exc_type is None:
                if self._rng is not None:
                    # As CUDAGraph.capture_end: the generators leave capture mode, each with the
                    # graph's increment of its offset (the body is done: nothing draws any more).
                    try:
                        self._rng.end()
                    except BaseException:
                        g._abort_capture()
                        raise
                rng, self._rng = self._rng, None
                try:
                    g._end_capture(rng)  # the Graph holds rng from here
                except BaseException:
                    if rng is not None:
                        rng.release()
                    raise
                kept = True
                # Set only once the end succeeded: a failed update leaves the Graph holding its
                # old graph, which replays where it did.
                g._set_captured(g._h, g._stream, self._on_torch_stream)
            else:
                g._abort_capture()
        finally:
            try:
                self._release_rng()
            finally:
                try:
                    self._leave_torch()
                finally:
                    if kept and self._torch_pool is not None:
                        self.cuda_graph._hold_torch_pool(self._torch_pool)  # released at its reset
                        self._torch_pool = None
                    self._release_torch_pool()
        if exc is not None and _TORCH_RNG_REFUSAL in str(exc):
            if enrolled:
                raise CaptureUnsupportedError(
                    Status.CAPTURE_UNSUPPORTED,
                    "cgc.graph: the body drew from a torch.Generator that this capture did not enrol: register "
                    "it with g.register_generator_state(generator) before the capture, as with "
                    "torch.cuda.CUDAGraph (the device's default generator is enrolled by itself) "
                    "(torch said: %s)" % exc) from exc
            raise CaptureUnsupportedError(
                Status.CAPTURE_UNSUPPORTED,
                "cgc.graph: PyTorch's random numbers (torch.rand, dropout, ...) cannot be drawn in this capture: "
                "%s, and PyTorch enrols its generators only in torch.cuda.graph's captures. Make cgc PyTorch's "
                "allocator with its native backend (cgc.use_as_torch_allocator(backend=\"native\")), which "
                "enrols them in cgc.graph's captures on torch streams; or capture this body with "
                "torch.cuda.graph (with cgc.use_as_torch_allocator() its memory still comes from cgc's pools, "
                "and every replay draws fresh numbers); or draw with a cgc.Rng inside cgc.graph "
                "(torch said: %s)" % (_torch_rng_unenrolled_why(), exc)) from exc
        return False


class _LentPool(object):
    """A pool handle lent by the PyTorch bridge for one capture (the bridge holds the reference)."""

    __slots__ = ("handle",)

    def __init__(self, handle):
        self.handle = handle


def capture(stream, body, pool=None, mode="global", upload=False, update=None):
    """cgc_capture: begin, body(stream), end, in one C call; returns the new Graph. If body
    raises, the capture is still ended, the graph discarded and the exception re-raised.

    update (1.2): a Graph holding a graph, which the capture recaptures as with
    ``cgc.graph(update, ..., update=True)`` and which is returned, updated. Here, unlike in the
    with statement, a body that raises leaves it as it was: the library itself ends the capture
    and can discard the recapture, which an end after the body cannot."""
    if update is not None:
        if not isinstance(update, Graph):
            raise _bad_argument("cgc_capture", "update must be a cgc.Graph, not %r", update)
        if update._capturing is not None:
            raise InvalidStateError(Status.INVALID_STATE, "cgc_capture: update is a Graph being captured into "
                                    "already: end that capture first")
        if update._h is None and not update._is_closed:
            raise InvalidStateError(Status.INVALID_STATE, "cgc_capture: update is an empty Graph: there is no graph "
                                    "to update (capture a new one)")
        update_handle = update.handle  # raises for a closed Graph
    failure = []

    def trampoline(_stream, _user):
        try:
            body(stream)
            return 0
        except BaseException as e:  # must not cross the C frame
            failure.append(e)
            return int(Status.INTERNAL)

    fn = capture_fn(trampoline)
    opts = capture_options_t(mode=_mode(mode), pool=None if pool is None else pool.handle,
                             flags=CAPTURE_UPLOAD if upload else 0,
                             update=None if update is None else update_handle)
    out = ctypes.c_void_p()
    st = api().cgc_capture(stream.handle, ctypes.byref(opts), fn, None, ctypes.byref(out))
    if failure:
        raise failure[0]
    _check(st)
    if update is not None and out.value == update_handle:
        # The library hands back the handle the Graph holds: the same object, updated.
        update._set_captured(update._h, stream, False)
        update._set_rng(None)  # the new graph draws from no torch generator it enrolled
        return update
    g = Graph()
    g._set_captured(out.value, stream, False)
    return g


# ---- PyTorch's allocator -------------------------------------------------------------------

_torch_allocator = None
_torch_bridge = None  # libcgc_torch.so.1 (ctypes), once attached to torch's allocator


def _bridge_candidates(lib_path):
    """Where libcgc_torch.so.1 may be: $CGC_TORCH_BRIDGE, beside the loaded libcgc, the loader's
    search path."""
    if os.environ.get("CGC_TORCH_BRIDGE"):
        return [os.environ["CGC_TORCH_BRIDGE"]]
    here = os.path.dirname(lib_path)
    found = [os.path.join(here, n) for n in ("libcgc_torch.so.1", "libcgc_torch.so")] if here else []
    return found + ["libcgc_torch.so.1"]


def _load_bridge(lib):
    """(the bridge as a ctypes.CDLL with cgc's table loaded into it, its path), or (None, why)."""
    errors = []
    for path in _bridge_candidates(lib.path):
        try:
            dll = ctypes.CDLL(path)
        except OSError as e:
            errors.append(str(e))
            continue
        dll.cgc_torch_bridge_load.restype = ctypes.c_int
        dll.cgc_torch_bridge_load.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
        dll.cgc_torch_bridge_attach.restype = ctypes.c_int
        dll.cgc_torch_bridge_attach.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        _set_pool_call_types(dll)
        error = ctypes.create_string_buffer(512)
        if dll.cgc_torch_bridge_load(os.fsencode(lib.path), error, len(error)) != 0:
            return None, error.value.decode("utf-8", "replace")
        return dll, path
    return None, "libcgc_torch.so.1 was not found (%s); set CGC_TORCH_BRIDGE to its path" % "; ".join(errors)


def _set_pool_call_types(dll):
    """The pool calls the bridge and the backend both export, typed for ctypes."""
    dll.cgc_torch_bridge_pool.restype = ctypes.c_void_p
    dll.cgc_torch_bridge_pool.argtypes = [ctypes.c_int, ctypes.c_ulonglong, ctypes.c_ulonglong, ctypes.c_int,
                                          ctypes.c_char_p, ctypes.c_size_t]
    dll.cgc_torch_bridge_pool_release.restype = None
    dll.cgc_torch_bridge_pool_release.argtypes = [ctypes.c_int, ctypes.c_ulonglong, ctypes.c_ulonglong]
    dll.cgc_torch_bridge_pool_ids.restype = ctypes.c_size_t
    dll.cgc_torch_bridge_pool_ids.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_ulonglong), ctypes.c_size_t]
    dll.cgc_torch_bridge_open_routes.restype = ctypes.c_int
    dll.cgc_torch_bridge_open_routes.argtypes = []


def _set_rng_call_types(dll):
    """The native backend's calls that enrol PyTorch's generators in cgc.graph's captures
    (backend.cc), typed for ctypes; nothing for a backend without them."""
    if not hasattr(dll, "cgc_torch_rng_supported"):
        return
    dll.cgc_torch_rng_supported.restype = ctypes.c_int
    dll.cgc_torch_rng_supported.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    dll.cgc_torch_rng_capture_begin.restype = ctypes.c_int
    dll.cgc_torch_rng_capture_begin.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                                                ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p,
                                                ctypes.c_size_t]
    dll.cgc_torch_rng_capture_end.restype = ctypes.c_int
    dll.cgc_torch_rng_capture_end.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_ulonglong), ctypes.c_char_p,
                                              ctypes.c_size_t]
    dll.cgc_torch_rng_replay_prologue.restype = ctypes.c_int
    dll.cgc_torch_rng_replay_prologue.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    dll.cgc_torch_rng_release.restype = None
    dll.cgc_torch_rng_release.argtypes = [ctypes.c_void_p]


def _torch_backend_sources():
    """The folder holding the backend's sources (bindings/torch_bridge/backend.cc, routes.cc,
    routes.h and capi/cgc.h, cgc_api.h beneath it), or None: $CGC_TORCH_BACKEND_SOURCES, the
    checkout this cgc.py is in, or torch_backend/ beside it (the GPU bundle)."""
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [os.environ.get("CGC_TORCH_BACKEND_SOURCES"), os.path.join(here, "..", ".."),
                  os.path.join(here, "torch_backend")]
    for root in candidates:
        if root and os.path.isfile(os.path.join(root, "bindings", "torch_bridge", "backend.cc")) and \
                os.path.isfile(os.path.join(root, "capi", "cgc.h")):
            return os.path.abspath(root)
    return None


def _build_torch_backend(torch):
    """(path of the built backend library, None), or (None, why it could not be built). Built by
    torch.utils.cpp_extension against the running PyTorch's own headers, as PyTorch extensions
    are, and cached by it ($TORCH_EXTENSIONS_DIR): a later process loads the built library."""
    root = _torch_backend_sources()
    if root is None:
        return None, ("the backend's sources were not found (bindings/torch_bridge/backend.cc beside capi/cgc.h); "
                      "set CGC_TORCH_BACKEND_SOURCES to the folder holding them")
    try:
        from torch.utils import cpp_extension
    except ImportError as e:
        return None, "torch.utils.cpp_extension cannot be imported (%s)" % e
    sources = [os.path.join(root, "bindings", "torch_bridge", n) for n in ("backend.cc", "routes.cc")]
    headers = [os.path.join(root, "bindings", "torch_bridge", "routes.h"), os.path.join(root, "capi", "cgc.h"),
               os.path.join(root, "capi", "cgc_api.h")]
    # The extension's name carries a digest of its sources, so that a changed source is built
    # anew instead of loading a stale library from PyTorch's cache.
    import hashlib
    digest = hashlib.sha256()
    for path in sources + headers:
        with open(path, "rb") as f:
            digest.update(f.read())
    # The compiler: $CGC_TORCH_CXX, else the system's (/usr/bin/c++), else PyTorch's choice ($CXX).
    # It must link the C++ runtime dynamically, sharing PyTorch's: a compiler that links its own
    # copy in statically (one was found as $CXX on the project's GPU machines) makes the library
    # crash in the first message it formats with a number.
    cxx = os.environ.get("CGC_TORCH_CXX") or ("/usr/bin/c++" if os.access("/usr/bin/c++", os.X_OK) else None)
    digest.update((cxx or os.environ.get("CXX", "")).encode())
    name = "cgc_torch_backend_" + digest.hexdigest()[:12]
    # With no TORCH_CUDA_ARCH_LIST, cpp_extension asks the GPUs for theirs, which initialises
    # PyTorch's CUDA and its own allocator, after which PyTorch refuses the swap. The sources hold
    # no CUDA code, so any list will do.
    env = {"CXX": cxx} if cxx else {}
    if not os.environ.get("TORCH_CUDA_ARCH_LIST"):
        env["TORCH_CUDA_ARCH_LIST"] = "9.0"
    saved = {k: os.environ.get(k) for k in env}
    try:
        os.environ.update(env)
        path = cpp_extension.load(name=name, sources=sources, extra_include_paths=[root],
                                  extra_cflags=["-O2", "-std=c++17", "-fvisibility=hidden"],
                                  with_cuda=True, is_python_module=False, verbose=False)
    except Exception as e:  # no compiler, no headers, a compile error: said, then the fallback
        lines = [line for line in str(e).strip().splitlines() if line.strip()]
        errors = [line for line in lines if "error" in line.lower()]
        return None, "building it with torch.utils.cpp_extension failed: %s" % " | ".join((errors or lines or [repr(e)])[:3])
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    if not isinstance(path, str):  # older PyTorch: loaded, path not returned
        path = os.path.join(cpp_extension._get_build_directory(name, False), name + ".so")
    with open(path, "rb") as f:
        if b"libstdc++.so" not in f.read():
            return None, ("the compiler %s linked the C++ runtime into it statically, beside PyTorch's; set "
                          "CGC_TORCH_CXX to a C++ compiler that links libstdc++.so" % (cxx or os.environ.get("CXX", "c++")))
    return path, None


def _install_torch_backend(torch, lib):
    """(the backend as a ctypes.CDLL, installed as PyTorch's allocator), or (None, why)."""
    path, why = _build_torch_backend(torch)
    if path is None:
        return None, why
    try:
        dll = ctypes.CDLL(path)
    except OSError as e:
        return None, "the built backend cannot be loaded (%s)" % e
    dll.cgc_torch_backend_install.restype = ctypes.c_int
    dll.cgc_torch_backend_install.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    _set_pool_call_types(dll)
    _set_rng_call_types(dll)
    error = ctypes.create_string_buffer(1024)
    if dll.cgc_torch_backend_install(os.fsencode(lib.path), error, len(error)) != 0:
        return None, error.value.decode("utf-8", "replace")
    return dll, None


def use_as_torch_allocator(backend=None):
    """Makes cgc PyTorch's CUDA allocator, so that torch tensors come from cgc: those of a cgc
    capture from the capture's pool, those of the captures torch begins itself (torch.cuda.graph,
    CUDAGraph.capture_begin, make_graphed_callables, torch.compile's CUDA graphs) from cgc's
    private pools, one per torch pool id, shared as torch shares it and released when torch
    releases it; torch.cuda.MemPool scopes (use_mem_pool) allocate from a cgc pool too.
    torch.cuda.empty_cache(), Tensor.record_stream and torch.cuda.memory_stats reach cgc.

    `backend` (default: $CGC_TORCH_BACKEND, else "auto"):
    - "native": cgc's complete PyTorch allocator (bindings/torch_bridge/backend.cc), built against
      the running PyTorch's headers with torch.utils.cpp_extension on first use (a C++ compiler
      and PyTorch's headers must be there) and cached; a failure raises LibraryError saying why;
    - "pluggable": PyTorch's CUDAPluggableAllocator over libcgc_torch.so.1, which has no memory
      statistics, snapshots, checkpoints or MemPool scopes (docs/TORCH.md);
    - "auto": "native", else "pluggable" with a warning saying why.
    Must run before PyTorch initialises CUDA (its first CUDA tensor, stream or device query);
    raises InvalidStateError otherwise. Calling it again is a no-op. Returns the backend's kind,
    "native" or "pluggable"."""
    global _torch_allocator, _torch_bridge
    mode = backend or os.environ.get("CGC_TORCH_BACKEND") or "auto"
    if mode not in ("auto", "native", "pluggable"):
        raise InvalidArgumentError(Status.INVALID_ARGUMENT, "cgc.use_as_torch_allocator: backend %r is not one of "
                                   "'auto', 'native', 'pluggable'" % (mode,))
    if _torch_allocator is not None:
        return _torch_allocator
    import torch  # the caller asked for torch; this is the one place cgc imports it
    lib = api()  # a clear LibraryError before torch tries the path itself
    if torch.cuda.is_initialized():
        raise InvalidStateError(Status.INVALID_STATE, "cgc.use_as_torch_allocator: PyTorch has already "
                                "initialised CUDA with its own allocator, which cannot be swapped now; "
                                "call it at program start, before any torch CUDA work")
    import warnings
    if mode != "pluggable":
        native, why = _install_torch_backend(torch, lib)
        if native is not None:
            _torch_bridge = native
            _torch_allocator = "native"
            return _torch_allocator
        if mode == "native":
            raise LibraryError(None, "cgc.use_as_torch_allocator: cgc's PyTorch allocator could "
                               "not be made: %s" % why)
        warnings.warn("cgc's complete PyTorch allocator could not be made (%s): cgc serves PyTorch through its "
                      "CUDAPluggableAllocator instead, without memory statistics, snapshots, allocator "
                      "checkpoints (torch.compile's CUDA graphs) or MemPool scopes" % why, RuntimeWarning,
                      stacklevel=2)
    bridge, where = _load_bridge(lib)
    if bridge is not None:
        allocator = torch.cuda.memory.CUDAPluggableAllocator(where, "cgc_torch_bridge_malloc", "cgc_torch_bridge_free")
    else:
        allocator = torch.cuda.memory.CUDAPluggableAllocator(lib.path, "cgc_torch_malloc", "cgc_torch_free")
    try:
        torch.cuda.memory.change_current_allocator(allocator)
    except RuntimeError as e:
        raise InvalidStateError(Status.INVALID_STATE, "cgc.use_as_torch_allocator: PyTorch refused the "
                                "allocator swap (%s); call it before any torch CUDA work" % e) from e
    _torch_allocator = "pluggable"
    why = where
    if bridge is not None:
        error = ctypes.create_string_buffer(512)
        if bridge.cgc_torch_bridge_attach(error, len(error)) == 0:
            _torch_bridge = bridge
        else:
            why = error.value.decode("utf-8", "replace")
    if _torch_bridge is None:
        warnings.warn("cgc is PyTorch's allocator, but torch's own captures (torch.cuda.graph) cannot allocate "
                      "from cgc's pools: %s" % why, RuntimeWarning, stacklevel=2)
    return _torch_allocator


def torch_graph_pools():
    """True when captures that torch begins allocate from cgc's pools (use_as_torch_allocator
    attached the bridge)."""
    return _torch_bridge is not None


def _bridge():
    if _torch_bridge is None:
        raise InvalidStateError(Status.INVALID_STATE, "torch pool ids name cgc pools only once cgc is torch's "
                                "allocator with its graph hooks (cgc.use_as_torch_allocator(), and "
                                "cgc.torch_graph_pools() is True)")
    return _torch_bridge


def _pool_id(pool_id):
    if not (isinstance(pool_id, tuple) and len(pool_id) == 2):
        raise InvalidArgumentError(Status.INVALID_ARGUMENT, "a torch pool id is a tuple of two ints "
                                   "(torch.cuda.graph_pool_handle()), not %r" % (pool_id,))
    return int(pool_id[0]), int(pool_id[1])


def _torch_bridge_pool(device, pool_id, create):
    """The cgc pool handle behind a torch pool id: with create, made if needed, one use more and
    lent by the bridge; without, a reference of the caller's (or None)."""
    first, second = _pool_id(pool_id)
    error = ctypes.create_string_buffer(512)
    handle = _bridge().cgc_torch_bridge_pool(device, first, second, 1 if create else 0, error, len(error))
    if not handle and create:
        raise OutOfMemoryError(Status.OUT_OF_MEMORY, error.value.decode("utf-8", "replace"))
    return handle


def _torch_bridge_pool_release(device, pool_id):
    first, second = _pool_id(pool_id)
    _bridge().cgc_torch_bridge_pool_release(device, first, second)


def _torch_device(device):
    if device is None:
        return _torch().cuda.current_device()
    return device.index if hasattr(device, "index") else int(device)


def torch_pool(pool_id, device=None):
    """The cgc pool behind torch pool id `pool_id` (a torch CUDAGraph's pool(),
    torch.cuda.graph_pool_handle()) on `device` (default: torch's current one), as a Pool holding
    a reference of its own (close it), or None when cgc holds no pool for that id (no capture
    used it yet, or torch released it)."""
    device = _torch_device(device)
    handle = _torch_bridge_pool(device, pool_id, create=False)  # retained by the bridge for us
    if not handle:
        return None
    pool = Pool.__new__(Pool)
    pool._h, pool.context, pool._refs = handle, _context_for(device), 1
    return pool


def torch_pool_ids(device=None):
    """The torch pool ids that have a cgc pool on `device` now (default: torch's current one)."""
    device = _torch_device(device)
    bridge = _bridge()
    n = bridge.cgc_torch_bridge_pool_ids(device, None, 0)
    ids = (ctypes.c_ulonglong * (2 * n))()
    n = min(n, bridge.cgc_torch_bridge_pool_ids(device, ids, n))
    return [(ids[2 * i], ids[2 * i + 1]) for i in range(n)]
