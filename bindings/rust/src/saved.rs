//! Saved graphs (1.6): [`save_graphs`] writes graphs and the pools they use to bytes,
//! [`SavedInfo::read`] says what such bytes hold, [`Context::restore_graphs`] rebuilds them (in
//! another process too, on the same GPU architecture and driver version; with
//! [`Context::restore_graphs_with`] and [`RestoreOptions::with_families`], graphs of one structure
//! share one executable; [`RestoreOptions::with_threads`] sets how many host threads check and
//! instantiate them; [`Context::restore_graphs_with_generators`] also hands back the generators
//! the graphs draw from, as [`Rng`]s), and [`Context::add_module_image`] names a module cgc did
//! not load by a key.
//! [`save_graphs_with`] and [`SaveOptions::with_verify`] verify a save: each graph rebuilt from
//! the bytes in this process and replayed beside the graph itself must write the same bytes.
//! [`module_record`] records the images of every module the driver loads (cuBLAS's, Triton's,
//! the application's), so that a save embeds kernels of modules cgc did not load without a key.

use super::*;

/// What a saved buffer holds and needs (`cgc_saved_info_t`), read by [`SavedInfo::read`]
/// without touching the device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SavedInfo {
    /// The version of the buffer's layout.
    pub format_version: u32,
    /// The architecture it was saved on (e.g. 9 for 9.0).
    pub compute_major: i32,
    /// The architecture's minor number (e.g. 0 for 9.0).
    pub compute_minor: i32,
    /// `cuDriverGetVersion` of the saving process, e.g. 13000.
    pub driver_version: i32,
    /// The graphs [`Context::restore_graphs`] rebuilds.
    pub n_graphs: usize,
    /// The pools [`Context::restore_graphs`] creates, in this order.
    pub n_pools: usize,
    /// Module images, embedded or named by key ([`Context::add_module_image`]).
    pub n_modules: usize,
    /// The graphs' nodes, all together.
    pub n_nodes: usize,
    /// Device memory the restored pools back: exactly their backed ranges.
    pub pool_bytes: usize,
    /// Bytes of the embedded module images.
    pub image_bytes: usize,
    /// Device memory a restore needs beyond [`pool_bytes`](Self::pool_bytes), for the modules
    /// it loads and one executable per graph ([`Context::restore_graphs`]). Measured by a
    /// verifying save ([`SaveOptions::with_verify`]) in the saving process, with `cuMemGetInfo`
    /// around its rebuild, so anything else allocating on the device meanwhile is counted too.
    /// Not counted: memory the driver takes once per process, which the saving process had paid
    /// and a fresh restoring process may pay too. 0 when the bytes were saved without
    /// verifying.
    pub restore_bytes: usize,
    /// As [`restore_bytes`](Self::restore_bytes), for a restore with
    /// [`RestoreOptions::with_families`]: one executable for each structure. 0 when the bytes
    /// were saved without verifying.
    pub family_restore_bytes: usize,
    /// The generators ([`Rng`]) the graphs draw from. A restore creates each again with the
    /// seed and offset it had when the bytes were saved;
    /// [`Context::restore_graphs_with_generators`] hands them back in this number.
    pub n_generators: usize,
}

impl SavedInfo {
    /// What `data` (bytes of [`save_graphs`]) holds (`cgc_saved_info`). Needs no driver and
    /// allocates nothing on the device, so a server can size the rest of its memory first.
    /// [`Status::SavedMismatch`] for bytes that are not a saved buffer, are damaged or truncated,
    /// or of another format version.
    pub fn read(data: &[u8]) -> Result<SavedInfo> {
        let api = api()?;
        let mut i = sys::cgc_saved_info_t {
            struct_size: std::mem::size_of::<sys::cgc_saved_info_t>(),
            ..Default::default()
        };
        // SAFETY: `data` is data.len() readable bytes; valid out pointer with struct_size set.
        check(api, unsafe {
            (api.cgc_saved_info)(data.as_ptr() as *const c_void, data.len(), &mut i)
        })?;
        Ok(SavedInfo::from_raw(&i))
    }

    pub(crate) fn from_raw(i: &sys::cgc_saved_info_t) -> SavedInfo {
        SavedInfo {
            format_version: i.format_version,
            compute_major: i.compute_major,
            compute_minor: i.compute_minor,
            driver_version: i.driver_version,
            n_graphs: i.n_graphs,
            n_pools: i.n_pools,
            n_modules: i.n_modules,
            n_nodes: i.n_nodes,
            pool_bytes: i.pool_bytes,
            image_bytes: i.image_bytes,
            restore_bytes: i.restore_bytes,
            family_restore_bytes: i.family_restore_bytes,
            n_generators: i.n_generators,
        }
    }
}

/// 1.6: `graphs` (captured by cgc, none reset) and what rebuilding them needs, as bytes
/// (`cgc_graphs_save`, asked first for the size, then for the bytes): each graph's nodes and
/// edges; its kernels' module images (or the keys of [`Context::add_module_image`]), names,
/// attributes and argument bytes; the layout of every pool the graphs were captured into and of
/// `pools` (more pools at fixed addresses to save, after the graphs' own, e.g. the weights and
/// inputs their kernels read): base, capacity, how far it is backed, and its blocks allocated now;
/// the device's architecture and the driver's version. Nothing is relocated: every address a
/// graph uses must lie in one of those pools, each a pool at fixed addresses
/// ([`Pool::create_at`]). The memory's contents are not saved. Draws from a generator
/// ([`Rng::uniform`], [`Rng::normal`] in the capture) are saved with the generator's seed and
/// offset as they are at the save ([`SavedInfo::n_generators`] counts the generators), so that a
/// restored graph draws on where the saved one would have.
///
/// Errors: [`Status::NotSavable`] when a graph holds what a saved buffer cannot rebuild (a pool
/// not at fixed addresses, an argument or operand in memory outside the pools, host or event
/// nodes, memory allocation or free nodes, child graphs, conditional nodes, memory operations,
/// NCCL collectives, a kernel of a module cgc cannot name, an executable changed by per-node
/// updates): the message names the graph, the node, its kind, the kernel and
/// the argument; [`Status::InvalidArgument`] for no graphs or an extra pool not at fixed
/// addresses; [`Status::InvalidState`] for a reset graph; [`Status::NotSupported`] before a CUDA
/// 12.4 driver. A pool named twice is saved once. Not while another thread
/// updates, resets or destroys one of the graphs (the borrows rule out this process's own).
/// [`save_graphs_with`] saves with options (a verifying save).
pub fn save_graphs(graphs: &[&Graph], pools: &[&Pool]) -> Result<Vec<u8>> {
    save_graphs_with(graphs, pools, &SaveOptions::new())
}

/// Options of [`save_graphs_with`] (`cgc_save_options_t`; its pools are the `pools` parameter).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SaveOptions {
    /// After the bytes are written, each graph is rebuilt from them in this process (its modules
    /// loaded again from the bytes or by key) and replayed beside the graph itself from the same
    /// contents of the saved pools; their replays must leave the pools byte-equal, or the save
    /// fails with [`Status::NotSavable`] naming the graph, the pool and the first differing
    /// offset. It catches what the save's checks cannot see (a launch attribute the driver does
    /// not report, an image under a key that builds another kernel). Each graph is replayed
    /// twice and the pools are left as the graph's own replay left them; the saved pools' backed
    /// bytes are copied to host memory three times over. Only while nothing else runs on the
    /// saved pools' memory; graphs whose replays are not deterministic (a timer, a race) fail
    /// it. The rebuild's device memory is recorded in the bytes as [`SavedInfo::restore_bytes`]
    /// and [`SavedInfo::family_restore_bytes`]. `CGC_SAVE_VERIFY`.
    pub verify: bool,
}

impl SaveOptions {
    /// The defaults: the bytes written, nothing replayed.
    pub fn new() -> Self {
        Self::default()
    }

    /// With each graph rebuilt from the saved bytes and replayed beside the graph itself, the
    /// save failing ([`Status::NotSavable`]) when they write different bytes (`CGC_SAVE_VERIFY`).
    pub fn with_verify(mut self, verify: bool) -> Self {
        self.verify = verify;
        self
    }

    /// The C struct, without extra pools ([`save_graphs_with`] sets `pools` and `n_pools`).
    pub fn to_raw(&self) -> sys::cgc_save_options_t {
        sys::cgc_save_options_t {
            struct_size: std::mem::size_of::<sys::cgc_save_options_t>(),
            pools: ptr::null(),
            n_pools: 0,
            flags: if self.verify { sys::CGC_SAVE_VERIFY } else { 0 },
        }
    }
}

/// 1.6: [`save_graphs`] with options: with [`SaveOptions::with_verify`] (`CGC_SAVE_VERIFY`), once
/// the bytes are written each graph is rebuilt from them and replayed beside the graph itself
/// from the same contents of the saved pools, and the save fails with [`Status::NotSavable`]
/// (naming the graph, the pool and the first differing offset) when their replays leave other
/// bytes; the pools end as the graph's own replay left them. The graphs must be deterministic,
/// and nothing else may run on the saved pools' memory meanwhile. The bytes are those of a save
/// without verifying but for the header's [`SavedInfo::restore_bytes`] and
/// [`SavedInfo::family_restore_bytes`], which a verifying save measures on its rebuild (0 in a
/// save without verifying).
pub fn save_graphs_with(graphs: &[&Graph], pools: &[&Pool], options: &SaveOptions) -> Result<Vec<u8>> {
    let api = api()?;
    let raw_graphs: Vec<sys::cgc_graph_t> = graphs.iter().map(|g| g.raw).collect();
    let raw_pools: Vec<sys::cgc_pool_t> = pools.iter().map(|p| p.raw).collect();
    let options = sys::cgc_save_options_t {
        pools: if raw_pools.is_empty() { ptr::null() } else { raw_pools.as_ptr() },
        n_pools: raw_pools.len(),
        ..options.to_raw()
    };
    let graphs_ptr = if raw_graphs.is_empty() { ptr::null() } else { raw_graphs.as_ptr() };
    let mut size = 0usize;
    // SAFETY: the handles are live (borrowed Graphs and Pools); the arrays hold the counts
    // given; a NULL buffer with capacity 0 asks for the size alone (a verifying save replays
    // nothing then).
    check(api, unsafe {
        (api.cgc_graphs_save)(graphs_ptr, raw_graphs.len(), &options, ptr::null_mut(), 0, &mut size)
    })?;
    loop {
        let mut buffer = vec![0u8; size];
        let capacity = buffer.len();
        // SAFETY: as above; `buffer` holds `capacity` writable bytes.
        let st = unsafe {
            (api.cgc_graphs_save)(graphs_ptr, raw_graphs.len(), &options, buffer.as_mut_ptr() as *mut c_void,
                                  capacity, &mut size)
        };
        if st == sys::CGC_ERROR_INVALID_ARGUMENT && size > capacity {
            continue; // the pools' blocks grew in between: *size says how much is needed now
        }
        check(api, st)?;
        buffer.truncate(size);
        return Ok(buffer);
    }
}

/// Options of [`Context::restore_graphs_with`] (`cgc_restore_options_t`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RestoreOptions {
    /// Restored graphs of one structure (the same nodes of the same kinds and kernels, the same
    /// edges) join one family ([`Graph::share_executable`]): one instantiation for each
    /// structure, an update for each other graph; a graph the driver refuses to share
    /// instantiates its own ([`GraphInfo::family_result`] says why). `CGC_RESTORE_FAMILIES`.
    pub families: bool,
    /// Host threads that read the checksum (at most 4), check and instantiate the graphs (which
    /// the calling thread builds), the calling thread one of them (at
    /// most 64: more is refused with [`Status::InvalidArgument`]): 0, the default, lets cgc
    /// choose (up to 4, as many as there are CPUs), 1 restores on the calling thread alone.
    /// `cgc_restore_options_t.threads`.
    pub threads: u32,
}

impl RestoreOptions {
    /// The defaults: every graph instantiated on its own, on threads cgc chooses.
    pub fn new() -> Self {
        Self::default()
    }

    /// With graphs of one structure sharing one executable (`CGC_RESTORE_FAMILIES`).
    pub fn with_families(mut self, families: bool) -> Self {
        self.families = families;
        self
    }

    /// With `threads` host threads building and instantiating the graphs, the calling thread
    /// one of them (at most 64): 0 lets cgc choose, 1 restores on the calling thread alone.
    pub fn with_threads(mut self, threads: u32) -> Self {
        self.threads = threads;
        self
    }

    /// The C struct, without room for the generators ([`Context::restore_graphs_with_generators`]
    /// sets `generators` and `n_generators`).
    pub fn to_raw(&self) -> sys::cgc_restore_options_t {
        sys::cgc_restore_options_t {
            struct_size: std::mem::size_of::<sys::cgc_restore_options_t>(),
            flags: if self.families { sys::CGC_RESTORE_FAMILIES } else { 0 },
            threads: self.threads,
            generators: ptr::null_mut(),
            n_generators: 0,
        }
    }
}

impl Context {
    /// 1.6: rebuilds the graphs of `data` (bytes of [`save_graphs`], from this process or
    /// another on the same GPU architecture and driver version) on this device
    /// (`cgc_graphs_restore`): its pools are created again at their bases (as
    /// [`Pool::create_at`]) with the blocks allocated at save time claimed at their addresses,
    /// the application's to free (e.g. [`DeviceBuffer::from_raw`] at the saved address, then
    /// [`DeviceBuffer::free`]), as in the saving process; the rest of their backed memory is kept
    /// for the graphs. Modules are loaded again (embedded images, or those added by key with
    /// [`Context::add_module_image`]), each kernel checked against its saved attributes, and
    /// each graph built and instantiated as a capture's, ready to [`Graph::launch`].
    ///
    /// Returns [`SavedInfo::n_graphs`] graphs and [`SavedInfo::n_pools`] pools, in the saved
    /// order, each owned as a capture's graph and a created pool are: a graph is destroyed on
    /// drop, a pool holds one reference, whose last release (refused while its blocks are
    /// allocated or its graphs live, as for [`Pool::create_at`]'s: see [`Pool::try_release`])
    /// gives its range back. The memory's contents are not restored: write the inputs again.
    /// The generators the graphs draw from are created again with their seed and offset at the
    /// save, so the first replay draws what the saving process's next replay would have drawn;
    /// the graphs alone hold them (each replay advances them as the saved graph's did).
    /// [`Context::restore_graphs_with_generators`] hands them back too.
    ///
    /// Errors: [`Status::SavedMismatch`], naming what differs, for damaged bytes, another format
    /// version, another architecture or driver version, a module key not added, or a kernel
    /// missing or with other attributes; [`Status::InvalidState`] when a pool's range cannot be
    /// reserved here (e.g. the saved pools, or other pools at fixed addresses, still hold it). On
    /// failure nothing is left: no graph, pool or module.
    pub fn restore_graphs(&self, data: &[u8]) -> Result<(Vec<Graph>, Vec<Pool>)> {
        self.restore_graphs_with(data, &RestoreOptions::new())
    }

    /// 1.6: [`Context::restore_graphs`] with options: with [`RestoreOptions::with_families`],
    /// restored graphs of one structure share one executable (as after
    /// [`Graph::share_executable`]: the first of each structure leads, and
    /// [`GraphInfo::family_size`] counts the members), which costs one instantiation for each
    /// structure instead of one for each graph; [`RestoreOptions::with_threads`] sets how many
    /// host threads build and instantiate the graphs (at most 64, else
    /// [`Status::InvalidArgument`]; 0, the default, lets cgc choose).
    pub fn restore_graphs_with(&self, data: &[u8], options: &RestoreOptions) -> Result<(Vec<Graph>, Vec<Pool>)> {
        let (graphs, pools, _) = self.restore(data, options, false)?;
        Ok((graphs, pools))
    }

    /// 1.6: [`Context::restore_graphs_with`] that also hands back the generators the graphs draw
    /// from ([`SavedInfo::n_generators`] of them, in the saved order; `cgc_restore_options_t`'s
    /// `generators`): each created again with the seed and offset it had at the save (see
    /// [`Rng::state`]), so the restored graphs' first replay draws what the saving process's next
    /// replay would have drawn, and each replay advances it as the saved graph's did. Each
    /// [`Rng`] owns a reference of its own, dropped (or [`Rng::destroy`]ed) as a created
    /// generator's; the graphs hold theirs, so dropping it early changes nothing for them. With
    /// it the application can read or set the state the next replay starts from, or draw eagerly.
    pub fn restore_graphs_with_generators(
        &self,
        data: &[u8],
        options: &RestoreOptions,
    ) -> Result<(Vec<Graph>, Vec<Pool>, Vec<Rng>)> {
        self.restore(data, options, true)
    }

    /// `cgc_graphs_restore` with room for the counts of [`SavedInfo::read`], and for the
    /// generators when `with_generators`; what it hands back wrapped and owned.
    fn restore(
        &self,
        data: &[u8],
        options: &RestoreOptions,
        with_generators: bool,
    ) -> Result<(Vec<Graph>, Vec<Pool>, Vec<Rng>)> {
        let info = SavedInfo::read(data)?;
        let mut graphs: Vec<sys::cgc_graph_t> = vec![ptr::null_mut(); info.n_graphs];
        let mut pools: Vec<sys::cgc_pool_t> = vec![ptr::null_mut(); info.n_pools];
        let mut generators: Vec<sys::cgc_rng_t> =
            vec![ptr::null_mut(); if with_generators { info.n_generators } else { 0 }];
        let mut options = options.to_raw();
        if !generators.is_empty() {
            options.generators = generators.as_mut_ptr();
            options.n_generators = generators.len();
        }
        // SAFETY: live context; `data` is data.len() readable bytes; the out arrays hold the
        // counts given (the generators' NULL with a count of 0 when none are asked for).
        check(self.api, unsafe {
            (self.api.cgc_graphs_restore)(self.raw, data.as_ptr() as *const c_void, data.len(), &options,
                                          graphs.as_mut_ptr(), graphs.len(), pools.as_mut_ptr(), pools.len())
        })?;
        // Each pool and generator with the one reference the restore gave the caller.
        let pools: Vec<Pool> = pools.into_iter().map(|raw| Pool { raw, api: self.api }).collect();
        let generators: Vec<Rng> = generators.into_iter().map(|raw| Rng { raw, api: self.api }).collect();
        // New handles, registered as a capture's end registers them (Graph::adopt).
        let owned: Vec<Graph> = graphs.iter().filter_map(|&raw| Graph::adopt(raw, self.api)).collect();
        if owned.len() != graphs.len() || pools.iter().any(|p| p.raw.is_null())
            || generators.iter().any(|g| g.raw.is_null())
        {
            // Dropping what was wrapped destroys and releases it (a NULL generator is skipped).
            return Err(Error::new(
                Status::Internal,
                "cgc_graphs_restore (Rust binding): the restore handed back a NULL or already owned handle",
            ));
        }
        Ok((owned, pools, generators))
    }

    /// 1.6: adds a module image under `key` (`cgc_module_add_image`; up to 255 bytes, no NUL;
    /// the image is copied): [`save_graphs`] names a kernel of a module cgc did not load (the
    /// application's own, a library's) by this key when the image has a kernel of that name with
    /// the same attributes, and [`Context::restore_graphs`] loads the image added under the key a
    /// saved buffer names, so the restoring process adds the same image under the same key first.
    /// `image` is a fatbin, a cubin, or PTX text with its terminating NUL
    /// (`CString::as_bytes_with_nul`). Images stay for the life of the process.
    ///
    /// Errors: [`Status::InvalidState`] for another image under a key already taken (the same
    /// image again is fine); [`Status::Cuda`] when the driver cannot load the image;
    /// [`Status::InvalidArgument`] for a key with a NUL byte (the binding's refusal) or too long.
    pub fn add_module_image(&self, key: &str, image: &[u8]) -> Result<()> {
        let c_key = CString::new(key).map_err(|_| {
            Error::new(
                Status::InvalidArgument,
                format!("cgc_module_add_image: key {:?} contains a NUL byte", key),
            )
        })?;
        // SAFETY: live context, valid C string, `image` is image.len() readable bytes (copied).
        check(self.api, unsafe {
            (self.api.cgc_module_add_image)(self.raw, c_key.as_ptr(), image.as_ptr() as *const c_void, image.len())
        })
    }
}

/// What the record of module images holds ([`module_record`]): how many distinct images it has
/// kept and their size, all together.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RecordedImages {
    /// The images the record holds (each distinct image once).
    pub images: usize,
    /// Their size in bytes, all together.
    pub bytes: usize,
}

/// 1.6: turns the record of module images on or off (`cgc_module_record`), for the whole process;
/// returns what the record holds after the call. With `on`, every module the driver loads in this
/// process from then on, by any library or thread (cuBLAS's, cuDNN's, Triton's, the application's;
/// a lazily loaded one at its first kernel), has its image copied and kept for the life of the
/// process, until `module_record(false)` stops the recording (the images kept stay).
/// [`save_graphs`] finds a kernel of a module cgc did not load among the images added by key
/// ([`Context::add_module_image`]), then among the recorded ones (by name and the same attributes),
/// and embeds a recorded image in the bytes as it embeds [`Module`]'s, so the restoring process
/// needs no record and no key; when different recorded images have a kernel of that name and build,
/// the save is [`Status::NotSavable`] (add the right image by key). Turn it on before the libraries
/// load their modules; each image loaded meanwhile costs a copy (a library's can be many
/// megabytes). Needs no [`Context`]; turning it on again, or off while it is off, changes nothing.
///
/// The record uses CUPTI (`libcupti`, opened at the first call: `CGC_CUPTI_LIBRARY` names it),
/// which serves one client per process. Errors: [`Status::InvalidState`] while a profiler or
/// sanitizer (Nsight Systems, the PyTorch profiler, compute-sanitizer) is subscribed (and while
/// the record is on, such a tool cannot subscribe); [`Status::NotSupported`], naming what was
/// tried, without libcupti (or when CUPTI cannot subscribe, e.g. without a driver). The message
/// names `cgc_module_record`.
pub fn module_record(on: bool) -> Result<RecordedImages> {
    let api = api()?;
    let mut recorded = RecordedImages::default();
    // SAFETY: valid out pointers; the call takes no handle.
    check(api, unsafe {
        (api.cgc_module_record)(c_int::from(on), &mut recorded.images, &mut recorded.bytes)
    })?;
    Ok(recorded)
}
