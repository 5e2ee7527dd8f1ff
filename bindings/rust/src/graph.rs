//! [`Graph`]: replay, upload, inspection, per-node updates, reset and destroy.

use super::*;

/// A captured graph and its executable, like `torch.cuda.CUDAGraph`.
pub struct Graph {
    pub(crate) raw: sys::cgc_graph_t,
    pub(crate) api: &'static sys::cgc_api_t,
}

// SAFETY: any thread may call cgc; destruction and reset need ownership / &mut.
unsafe impl Send for Graph {}
// Not Sync: CUDA does not synchronise concurrent use of one graph or executable graph, and
// cgc_graph_launch adds no lock (by design, for speed). Share a Graph across threads through a
// Mutex, which also gives PyTorch's rule that graphs are never replayed concurrently.

/// What [`Graph::info`] reports (`cgc_graph_info_t`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GraphInfo {
    /// Nodes in the graph (0 after reset); cgc's own completion record is not counted.
    pub node_count: usize,
    /// Successful launches.
    pub replay_count: u64,
    /// Whether the executable was uploaded.
    pub uploaded: bool,
    /// Bytes its pool holds.
    pub pool_bytes_reserved: usize,
    /// The captured nodes by kind (since 1.1; all 0 after reset).
    pub nodes: NodeCounts,
    /// Captures that updated the graph ([`Stream::capture_update`], since 1.2).
    pub update_count: u64,
    /// How the last of them did it.
    pub last_update: GraphUpdate,
    /// The driver's `CUgraphExecUpdateResult` of the last update: 0 when the executable took
    /// the new graph in place, else why it did not (e.g. 2, `CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED`).
    pub last_update_result: i32,
    /// Graphs sharing its executable ([`Graph::share_executable`], since 1.6): 1 with its own,
    /// 0 after reset.
    pub family_size: usize,
    /// Why its last join ([`Graph::share_executable`]) was refused: the driver's
    /// `CUgraphExecUpdateResult` (e.g. 2, topology changed); 0 when none was.
    pub family_result: i32,
}

/// How a [`Stream::capture_update`] changed its graph (`cgc_graph_update_t`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum GraphUpdate {
    /// Never updated.
    #[default]
    None,
    /// The executable took the new graph in place (`cuGraphExecUpdate`).
    InPlace,
    /// The driver refused the new graph ([`GraphInfo::last_update_result`] says why): a new
    /// executable replaced the old one.
    Reinstantiated,
    /// A value this version of the crate does not know (a newer library), kept as is.
    Unknown(i32),
}

impl GraphUpdate {
    /// The kind for a raw `cgc_graph_update_t`.
    pub fn from_raw(raw: sys::cgc_graph_update_t) -> GraphUpdate {
        match raw {
            sys::CGC_GRAPH_UPDATE_NONE => GraphUpdate::None,
            sys::CGC_GRAPH_UPDATE_IN_PLACE => GraphUpdate::InPlace,
            sys::CGC_GRAPH_UPDATE_REINSTANTIATED => GraphUpdate::Reinstantiated,
            other => GraphUpdate::Unknown(other),
        }
    }

    /// The raw `cgc_graph_update_t`.
    pub fn to_raw(self) -> sys::cgc_graph_update_t {
        match self {
            GraphUpdate::None => sys::CGC_GRAPH_UPDATE_NONE,
            GraphUpdate::InPlace => sys::CGC_GRAPH_UPDATE_IN_PLACE,
            GraphUpdate::Reinstantiated => sys::CGC_GRAPH_UPDATE_REINSTANTIATED,
            GraphUpdate::Unknown(raw) => raw,
        }
    }
}

/// The captured nodes of a graph by kind (the header's `CGC_GRAPH_NODE_KINDS`). Their sum is
/// [`GraphInfo::node_count`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeCounts {
    /// Kernels (cgc's own, e.g. random numbers, and those of [`Function::launch`]).
    pub kernel: usize,
    /// Copies.
    pub memcpy: usize,
    /// Sets.
    pub memset: usize,
    /// Host functions ([`Stream::launch_host_func`]).
    pub host: usize,
    /// Child graphs.
    pub child_graph: usize,
    /// Empty nodes.
    pub empty: usize,
    /// Event waits (on events recorded outside the capture).
    pub event_wait: usize,
    /// Event records (cgc's own completion record is not counted).
    pub event_record: usize,
    /// Memory allocations of the driver's graph allocator.
    pub mem_alloc: usize,
    /// Memory frees of the driver's graph allocator.
    pub mem_free: usize,
    /// Stream memory operations (write/wait-value and batches of them).
    pub mem_op: usize,
    /// Conditional nodes.
    pub conditional: usize,
    /// Kinds not listed (external semaphores, kinds newer than the library's header).
    pub other: usize,
}

impl NodeCounts {
    pub(crate) fn from_raw(i: &sys::cgc_graph_info_t) -> NodeCounts {
        NodeCounts {
            kernel: i.kernel_nodes,
            memcpy: i.memcpy_nodes,
            memset: i.memset_nodes,
            host: i.host_nodes,
            child_graph: i.child_graph_nodes,
            empty: i.empty_nodes,
            event_wait: i.event_wait_nodes,
            event_record: i.event_record_nodes,
            mem_alloc: i.mem_alloc_nodes,
            mem_free: i.mem_free_nodes,
            mem_op: i.mem_op_nodes,
            conditional: i.conditional_nodes,
            other: i.other_nodes,
        }
    }

    /// All nodes counted, whatever their kind.
    pub fn total(&self) -> usize {
        self.kernel
            + self.memcpy
            + self.memset
            + self.host
            + self.child_graph
            + self.empty
            + self.event_wait
            + self.event_record
            + self.mem_alloc
            + self.mem_free
            + self.mem_op
            + self.conditional
            + self.other
    }
}

/// The handles (as numbers) that a [`Graph`] owns. A capture that updates a graph hands back
/// that graph's own handle from whichever call ends it ([`Stream::capture_update`], or
/// [`Stream::end_capture`] called from its body or, in Relaxed mode, from another thread), so a
/// handle is wrapped only if no Graph owns it yet: each handle has one owner, destroyed once.
pub(crate) static OWNED_GRAPHS: Mutex<Option<HashSet<usize>>> = Mutex::new(None);

pub(crate) fn owned_graphs() -> MutexGuard<'static, Option<HashSet<usize>>> {
    // An insert or a remove cannot be left half-done by a panic: go on after one.
    OWNED_GRAPHS.lock().unwrap_or_else(|e| e.into_inner())
}

impl Graph {
    /// Takes ownership of a handle that a capture's end handed back: `None` when a Graph owns it
    /// already (the graph of an update) or when it is null.
    pub(crate) fn adopt(raw: sys::cgc_graph_t, api: &'static sys::cgc_api_t) -> Option<Graph> {
        if raw.is_null() {
            return None;
        }
        let newly_owned = owned_graphs()
            .get_or_insert_with(HashSet::new)
            .insert(raw as usize);
        if newly_owned {
            Some(Graph { raw, api })
        } else {
            None
        }
    }

    /// Gives up ownership of `raw`, before it is destroyed (the next graph may get its address).
    pub(crate) fn disown(raw: sys::cgc_graph_t) {
        if let Some(owned) = owned_graphs().as_mut() {
            owned.remove(&(raw as usize));
        }
    }

    /// The raw handle (still owned by `self`).
    pub fn as_raw(&self) -> sys::cgc_graph_t {
        self.raw
    }

    /// Replays the graph on `stream` (any stream of its device). Does not synchronise.
    /// Graphs sharing a pool must be replayed in capture order and never concurrently.
    pub fn launch(&self, stream: &Stream) -> Result<()> {
        // SAFETY: live handles.
        check(self.api, unsafe {
            (self.api.cgc_graph_launch)(self.raw, stream.raw)
        })
    }

    /// Uploads the executable on `stream` ahead of the first launch.
    pub fn upload(&self, stream: &Stream) -> Result<()> {
        // SAFETY: live handles.
        check(self.api, unsafe {
            (self.api.cgc_graph_upload)(self.raw, stream.raw)
        })
    }

    /// Node count (also by kind), replay count, upload state and pool size. The counts by kind
    /// are asked of the driver at this call.
    pub fn info(&self) -> Result<GraphInfo> {
        let mut i = sys::cgc_graph_info_t {
            struct_size: std::mem::size_of::<sys::cgc_graph_info_t>(),
            ..Default::default()
        };
        // SAFETY: live handle, valid out pointer with struct_size set.
        check(self.api, unsafe {
            (self.api.cgc_graph_info)(self.raw, &mut i)
        })?;
        Ok(GraphInfo {
            node_count: i.node_count,
            replay_count: i.replay_count,
            uploaded: i.uploaded != 0,
            pool_bytes_reserved: i.pool_bytes_reserved,
            nodes: NodeCounts::from_raw(&i),
            update_count: i.update_count,
            last_update: GraphUpdate::from_raw(i.last_update),
            last_update_result: i.last_update_result,
            family_size: i.family_size,
            family_result: i.family_result,
        })
    }

    /// The pool the graph allocated into, as a new reference of the caller's (retained, so
    /// it outlives the graph's reset or destroy). Pass it in [`CaptureOptions::pool`] to share
    /// it, like `CUDAGraph.pool()`. [`Status::InvalidState`] after reset.
    pub fn pool(&self) -> Result<Pool> {
        let mut raw = ptr::null_mut();
        // SAFETY: live handle, valid out pointer. The lent pool stays valid until reset or
        // destroy, which need &mut self / self, so retaining it now is race-free.
        check(self.api, unsafe {
            (self.api.cgc_graph_pool)(self.raw, &mut raw)
        })?;
        check(self.api, unsafe { (self.api.cgc_pool_retain)(raw) })?;
        Ok(Pool { raw, api: self.api })
    }

    /// Writes the graph in Graphviz DOT form to `path`.
    pub fn debug_dump(&self, path: impl AsRef<Path>) -> Result<()> {
        use std::os::unix::ffi::OsStrExt;
        let path = path.as_ref();
        let c_path = CString::new(path.as_os_str().as_bytes()).map_err(|_| {
            Error::new(
                Status::InvalidArgument,
                format!("cgc_graph_debug_dump: path {:?} contains a NUL byte", path),
            )
        })?;
        // SAFETY: live handle, valid C string.
        check(self.api, unsafe {
            (self.api.cgc_graph_debug_dump)(self.raw, c_path.as_ptr())
        })
    }

    /// Like `CUDAGraph.reset()`: frees the executable and graph now and drops the pool
    /// reference; launching is then [`Status::InvalidState`]. Resetting twice is fine. What the
    /// graph holds for its replays (the closures of [`Stream::launch_host_func`], the code of
    /// [`Module`]s whose kernels it launches) is let go once its last replay is over: this
    /// waits for that replay.
    pub fn reset(&mut self) -> Result<()> {
        // SAFETY: live handle; &mut self: no one else uses the executable.
        check(self.api, unsafe { (self.api.cgc_graph_reset)(self.raw) })
    }

    /// The `CUgraph` behind the handle (null after reset); valid until reset or drop.
    pub fn native(&self) -> *mut c_void {
        // SAFETY: live handle.
        unsafe { (self.api.cgc_graph_native)(self.raw) }
    }

    /// The `CUgraphExec` behind the handle (null after reset); valid until reset or drop.
    pub fn native_exec(&self) -> *mut c_void {
        // SAFETY: live handle.
        unsafe { (self.api.cgc_graph_native_exec)(self.raw) }
    }

    /// Enables or disables (1.2) the graph's kernel number `kernel_index`: kernels are numbered
    /// 0 .. [`NodeCounts::kernel`] in the order the capture launched them (cgc's own kernels,
    /// e.g. random numbers, count too). A disabled kernel does nothing at later replays; what
    /// depends on it still waits for it. [`Status::InvalidArgument`] past the last kernel,
    /// [`Status::InvalidState`] after reset.
    pub fn set_kernel_enabled(&mut self, kernel_index: usize, enabled: bool) -> Result<()> {
        // SAFETY: live handle; &mut self: no other thread launches or changes the graph.
        check(self.api, unsafe {
            (self.api.cgc_graph_kernel_node_set_enabled)(self.raw, kernel_index, c_int::from(enabled))
        })
    }

    /// Gives the graph's kernel number `kernel_index` (numbered as for
    /// [`Graph::set_kernel_enabled`]) new argument values for later replays, e.g. another
    /// buffer; the kernel, grid and block stay. The values are copied at the call, as with
    /// [`Function::launch`].
    ///
    /// # Safety
    /// As for [`Function::launch`], for the captured kernel: `args` must hold exactly one value
    /// per parameter of that kernel, each of the parameter's type, and the memory they point to
    /// must be large enough for what the kernel does with it and stay alive until the graph's
    /// last replay with them is over.
    pub unsafe fn set_kernel_args(&mut self, kernel_index: usize, args: &[&dyn KernelArg]) -> Result<()> {
        module::with_kernel_params(args, |params| {
            // &mut self: no other thread launches or changes the graph meanwhile.
            check(
                self.api,
                (self.api.cgc_graph_kernel_node_set_args)(self.raw, kernel_index, params),
            )
        })
    }

    /// 1.6: families (`cgc_graph_share_executable`): this graph gives up its own executable and
    /// shares `leader`'s, so that graphs of one topology that differ in their nodes' parameters
    /// (one per batch size) hold one executable. A launch or upload of a member the executable
    /// does not hold updates it in place to that member's nodes first (no device
    /// synchronisation), then launches. Members replay one at a time, in launch order, whatever
    /// their streams; a launch while another thread launches a member of the same family is
    /// refused ([`Status::InvalidState`]), never waits. Members take no per-node updates
    /// ([`Graph::set_kernel_enabled`], [`Graph::set_kernel_args`]) and no updates by capture
    /// ([`Status::InvalidState`]). Joining a family the graph is already in does nothing. The last
    /// member's reset or drop frees the executable; [`GraphInfo::family_size`] counts the members.
    ///
    /// Errors: [`Status::NotSupported`] when the driver refuses to update the executable to this
    /// graph's nodes (another topology, other kernels): the graph keeps its own executable and
    /// [`GraphInfo::family_result`] says why; [`Status::InvalidArgument`] for the graph itself as
    /// its leader or graphs of two devices; [`Status::InvalidState`] after a reset or per-node
    /// updates of either graph, or for a graph of another family already.
    pub fn share_executable(&self, leader: &Graph) -> Result<()> {
        // SAFETY: live handles. Graph is not Sync, so no other thread launches, resets or
        // destroys either of them meanwhile (another member of leader's family launched
        // elsewhere is refused by the library, which never waits for it).
        check(self.api, unsafe {
            (self.api.cgc_graph_share_executable)(self.raw, leader.raw)
        })
    }

    /// Resets and frees the handle, reporting the status (see [`Graph::reset`]). Buffers
    /// allocated in the capture (its outputs) stay valid.
    pub fn destroy(mut self) -> Result<()> {
        let raw = std::mem::replace(&mut self.raw, ptr::null_mut());
        Graph::disown(raw);
        // SAFETY: owned handle, destroyed once.
        check(self.api, unsafe { (self.api.cgc_graph_destroy)(raw) })
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        if !self.raw.is_null() {
            Graph::disown(self.raw);
            // SAFETY: owned handle.
            unsafe { (self.api.cgc_graph_destroy)(self.raw) };
        }
    }
}

impl fmt::Debug for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Graph").field("raw", &self.raw).finish()
    }
}
