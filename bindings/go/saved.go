package cgc

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"unsafe"
)

// SavedInfo is what a saved buffer holds and needs (cgc_saved_info_t, 1.6), read by
// ReadSavedInfo without touching the device.
type SavedInfo struct {
	FormatVersion uint32 // the version of the buffer's layout
	ComputeMajor  int    // the architecture it was saved on (e.g. 9, 0)
	ComputeMinor  int
	DriverVersion int    // cuDriverGetVersion of the saving process, e.g. 13000
	NGraphs       int    // the graphs Context.RestoreGraphs rebuilds
	NPools        int    // the pools Context.RestoreGraphs creates, in this order
	NModules      int    // module images, embedded or named by key (Context.AddModuleImage)
	NNodes        int    // the graphs' nodes, all together
	PoolBytes     uint64 // device memory the restored pools back: exactly their backed ranges
	ImageBytes    uint64 // bytes of the embedded module images
	// RestoreBytes is the device memory a restore needs beyond PoolBytes (the modules it loads
	// and an executable for every graph), as a verifying save (SaveOptions.Verify) measured it
	// with cuMemGetInfo around its rebuild in the saving process, so whatever else allocated on
	// the device meanwhile is included. Not included: memory the driver takes once per process,
	// which the saving process had paid and a fresh restoring process may pay too. 0 when the
	// bytes were saved without verifying.
	RestoreBytes uint64
	// FamilyRestoreBytes is RestoreBytes for a restore with RestoreOptions.Families, which
	// instantiates one executable for each structure. 0 when saved without verifying.
	FamilyRestoreBytes uint64
	// NGenerators is how many generators (Rng) the graphs draw from. A restore creates each
	// again with the seed and offset it had at the save; RestoreGraphsWithGenerators returns
	// them.
	NGenerators int
}

// bytesFor is what C gets for data: its first byte, or a byte of its own for an empty slice, so
// that the library judges the bytes (none: not a saved buffer) rather than refusing NULL.
func bytesFor(data []byte) unsafe.Pointer {
	if len(data) == 0 {
		none := new(byte)
		return unsafe.Pointer(none)
	}
	return unsafe.Pointer(&data[0])
}

// ReadSavedInfo (1.6) says what data (bytes of SaveGraphs) holds (cgc_saved_info). It needs no
// driver and allocates nothing on the device, so a server can size the rest of its memory first.
// ErrSavedMismatch for bytes that are not a saved buffer, are damaged or truncated, or of
// another format version.
func ReadSavedInfo(data []byte) (SavedInfo, error) {
	if err := Load(); err != nil {
		return SavedInfo{}, err
	}
	var i C.cgc_saved_info_t
	var msg *C.char
	p := bytesFor(data)
	err := check(C.cgcgo_saved_info(p, C.size_t(len(data)), &i, &msg), msg)
	runtime.KeepAlive(data)
	if err != nil {
		return SavedInfo{}, err
	}
	return SavedInfo{
		FormatVersion: uint32(i.format_version),
		ComputeMajor:  int(i.compute_major),
		ComputeMinor:  int(i.compute_minor),
		DriverVersion: int(i.driver_version),
		NGraphs:       int(i.n_graphs),
		NPools:        int(i.n_pools),
		NModules:      int(i.n_modules),
		NNodes:        int(i.n_nodes),
		PoolBytes:     uint64(i.pool_bytes),
		ImageBytes:    uint64(i.image_bytes),

		RestoreBytes:       uint64(i.restore_bytes),
		FamilyRestoreBytes: uint64(i.family_restore_bytes),
		NGenerators:        int(i.n_generators),
	}, nil
}

// SaveGraphs (1.6) writes graphs (captured by cgc, none reset) and what rebuilding them needs to
// bytes (cgc_graphs_save, asked first for the size, then for the bytes): each graph's nodes and
// edges; its kernels' module images (or the keys of Context.AddModuleImage), names, attributes
// and argument bytes; the layout of every pool the graphs were captured into and of pools (more
// pools at fixed addresses to save, after the graphs' own: the weights and inputs their kernels
// read), namely base, capacity, how far it is backed and its blocks allocated now; the device's
// architecture and the driver's version. Nothing is relocated: every address a graph uses must
// lie in one of those pools, each made by Context.NewPoolAt. The memory's contents are not
// saved. A pool named twice is saved once. A graph's draws from a generator (Rng.Uniform,
// Rng.Normal in the capture) are saved with that generator's seed and offset as they are now
// (SavedInfo.NGenerators counts the generators), so a restored graph draws on from there.
//
// ErrNotSavable when a graph holds what a saved buffer cannot rebuild (a pool not at fixed
// addresses, an argument or operand in memory outside the pools, host or event nodes, memory
// allocation or free nodes, child graphs, conditional nodes, memory operations, NCCL
// collectives, a kernel of a module cgc cannot name, an executable changed by per-node
// updates): the message names the graph, the node, its kind, the kernel and the argument.
// ErrInvalidArgument for no graphs or a nil one, or a pool in pools not at fixed addresses;
// ErrInvalidState for a reset graph; ErrNotSupported before a CUDA 12.4 driver. Not while
// another goroutine updates, resets or destroys one of the graphs. SaveGraphsWith saves with
// options (a verifying save).
func SaveGraphs(graphs []*Graph, pools []*Pool) ([]byte, error) {
	return saveGraphs("SaveGraphs", graphs, pools, nil)
}

// SaveOptions are the options of SaveGraphsWith (cgc_save_options_t; its pools are
// SaveGraphsWith's pools parameter).
type SaveOptions struct {
	// Verify (CGC_SAVE_VERIFY in cgc_save_options_t.flags): after the bytes are written, each
	// graph is rebuilt from them in this process (its modules loaded again from the bytes or by
	// key) and replayed beside the graph itself from the same contents of the saved pools; their
	// replays must leave the pools byte-equal, or the save fails with ErrNotSavable naming the
	// graph, the pool and the first differing offset. It catches what the save's checks cannot
	// see (a launch attribute the driver does not report, an image under a key that builds
	// another kernel). Each graph is replayed twice and the pools are left as the graph's own
	// replay left them; the saved pools' backed bytes are copied to host memory three times over.
	// Only while nothing else runs on the saved pools' memory; graphs whose replays are not
	// deterministic (a timer, a race) fail it. The device memory the rebuild took is recorded in
	// the bytes (SavedInfo.RestoreBytes and FamilyRestoreBytes).
	Verify bool
}

// flags is cgc_save_options_t.flags for opts (nil: the defaults).
func (opts *SaveOptions) flags() C.uint {
	var flags C.uint
	if opts != nil && opts.Verify {
		flags |= C.CGC_SAVE_VERIFY
	}
	return flags
}

// SaveGraphsWith (1.6) is SaveGraphs with options: with opts.Verify (CGC_SAVE_VERIFY), once the
// bytes are written each graph is rebuilt from them and replayed beside the graph itself from
// the same contents of the saved pools, and the save fails with ErrNotSavable (naming the graph,
// the pool and the first differing offset) when their replays leave other bytes; the pools end
// as the graph's own replay left them. The graphs must be deterministic, and nothing else may run
// on the saved pools' memory meanwhile. The bytes are those of a save without verifying but for
// the header's SavedInfo.RestoreBytes and SavedInfo.FamilyRestoreBytes, which a verifying save
// measures on its rebuild (0 without verifying). A nil opts means the defaults.
func SaveGraphsWith(graphs []*Graph, pools []*Pool, opts *SaveOptions) ([]byte, error) {
	return saveGraphs("SaveGraphsWith", graphs, pools, opts)
}

func saveGraphs(op string, graphs []*Graph, pools []*Pool, opts *SaveOptions) ([]byte, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	flags := opts.flags()
	// One entry more than needed, so that C gets an array even for a count of 0: the library
	// then refuses the count itself, not a NULL array.
	gh := make([]C.cgc_graph_t, len(graphs)+1)
	for i, g := range graphs {
		h, err := g.handle(op)
		if err != nil {
			return nil, err
		}
		gh[i] = h
	}
	ph := make([]C.cgc_pool_t, len(pools)+1)
	for i, p := range pools {
		h, err := p.handle(op)
		if err != nil {
			return nil, err
		}
		ph[i] = h
	}
	defer runtime.KeepAlive(graphs)
	defer runtime.KeepAlive(pools)
	var size C.size_t
	var msg *C.char
	// Asking for the size replays nothing, also for a verifying save.
	if err := check(C.cgcgo_graphs_save(&gh[0], C.size_t(len(graphs)), &ph[0], C.size_t(len(pools)), flags, nil, 0,
		&size, &msg), msg); err != nil {
		return nil, err
	}
	for {
		buffer := make([]byte, int(size))
		capacity := size
		var msg *C.char
		st := C.cgcgo_graphs_save(&gh[0], C.size_t(len(graphs)), &ph[0], C.size_t(len(pools)), flags,
			bytesFor(buffer), capacity, &size, &msg)
		if st == C.CGC_ERROR_INVALID_ARGUMENT && size > capacity {
			C.free(unsafe.Pointer(msg))
			continue // the pools' blocks grew in between: size says how much is needed now
		}
		if err := check(st, msg); err != nil {
			return nil, err
		}
		return buffer[:int(size)], nil
	}
}

// RestoreOptions are the options of Context.RestoreGraphsWith (cgc_restore_options_t, 1.6); a
// nil *RestoreOptions means the defaults.
type RestoreOptions struct {
	// Families (CGC_RESTORE_FAMILIES): restored graphs of one structure (the same nodes of the
	// same kinds and kernels, the same edges) join one family, as after Graph.ShareExecutable:
	// one instantiation for each structure, an update for each other graph. A graph the driver
	// refuses to share instantiates its own (GraphInfo.FamilyResult says why).
	Families bool
	// Threads (cgc_restore_options_t.threads): the host threads that read the checksum (at most
	// 4), check and instantiate the graphs (which the calling thread builds), the calling thread
	// one of them. 0, the default, lets cgc choose (up to 4, as many
	// as there are CPUs); 1 restores on the calling thread alone. More than 64 is the library's
	// ErrInvalidArgument, a negative count the binding's.
	Threads int
}

// RestoreGraphs (1.6) rebuilds the graphs of data (bytes of SaveGraphs, from this process or
// another on the same GPU architecture and driver version) on the context's device
// (cgc_graphs_restore). Its pools are created again at their bases, as by NewPoolAt, with the
// blocks allocated at save time claimed at their addresses: they are the application's to free
// (DeviceMemoryAt(ptr, size) then Free, as in the saving process), and they hold their pool
// until then; the rest
// of the pools' backed memory is kept for the graphs. Modules are loaded again (embedded images,
// or those added by key with AddModuleImage), each kernel is checked against its saved
// attributes, and each graph is built and instantiated as a capture's, ready to Launch.
//
// It returns SavedInfo.NGraphs graphs and SavedInfo.NPools pools in the saved order, owned as a
// capture's Graph and NewPoolAt's Pool are: Graph.Destroy destroys a graph, Pool.Close drops the
// pool's one reference and gives its range back, refused (ErrInvalidState, the Pool stays open)
// while a block of it is allocated or a graph holds it. The memory's contents are not restored:
// write the inputs again. The generators the graphs draw from are created again with their seed
// and offset at the save, so the first replay draws what the saving process's next replay would
// have drawn, and each replay advances them as the saved graph's did; the graphs alone hold them
// (RestoreGraphsWithGenerators returns them too).
//
// ErrSavedMismatch, naming what differs, for damaged bytes, another format version, another
// architecture or driver version, a module key not added, or a kernel missing or with other
// attributes; ErrInvalidState when a pool's range cannot be reserved here (e.g. the saved pools,
// or other pools at fixed addresses, still hold it). On failure nothing is left: no graph, pool
// or module.
func (c *Context) RestoreGraphs(data []byte) ([]*Graph, []*Pool, error) {
	graphs, pools, _, err := c.restoreGraphs("Context.RestoreGraphs", data, nil, false)
	return graphs, pools, err
}

// RestoreGraphsWith (1.6) is RestoreGraphs with options: with opts.Families, restored graphs of
// one structure share one executable (GraphInfo.FamilySize counts them), which costs one
// instantiation for each structure instead of one for each graph; opts.Threads sets how many host
// threads build and instantiate the graphs (0 lets cgc choose, at most 64). A nil opts means the
// defaults.
func (c *Context) RestoreGraphsWith(data []byte, opts *RestoreOptions) ([]*Graph, []*Pool, error) {
	graphs, pools, _, err := c.restoreGraphs("Context.RestoreGraphsWith", data, opts, false)
	return graphs, pools, err
}

// RestoreGraphsWithGenerators (1.6) is RestoreGraphsWith that also returns the generators the
// graphs draw from (SavedInfo.NGenerators of them, in the saved order; the generators field of
// cgc_restore_options_t). Each is created again with the seed and offset it had at the save
// (Rng.State), so the first replay of the restored graphs draws what the saving process's next
// replay would have drawn, and each replay advances it as the saved graph's did. Each Rng holds
// a reference of its own, dropped by Rng.Close as NewRng's is; the graphs keep theirs, so closing
// it changes nothing for them. With it the application can read or set the state the next replay
// starts from, or draw eagerly. A nil opts means the defaults.
func (c *Context) RestoreGraphsWithGenerators(data []byte, opts *RestoreOptions) ([]*Graph, []*Pool, []*Rng,
	error) {
	return c.restoreGraphs("Context.RestoreGraphsWithGenerators", data, opts, true)
}

func (c *Context) restoreGraphs(op string, data []byte, opts *RestoreOptions, withGenerators bool) ([]*Graph,
	[]*Pool, []*Rng, error) {
	var flags, threads C.uint
	if opts != nil && opts.Families {
		flags |= C.CGC_RESTORE_FAMILIES
	}
	if opts != nil {
		if opts.Threads < 0 || uint64(opts.Threads) > math.MaxUint32 {
			return nil, nil, nil, &Error{Status: ErrInvalidArgument, Message: fmt.Sprintf(
				"cgc (Go binding): %s: opts.Threads is %d (0 lets cgc choose, at most 64)", op, opts.Threads)}
		}
		threads = C.uint(opts.Threads)
	}
	ch, err := c.handle(op)
	if err != nil {
		return nil, nil, nil, err
	}
	info, err := ReadSavedInfo(data)
	if err != nil {
		return nil, nil, nil, err
	}
	gh := make([]C.cgc_graph_t, info.NGraphs+1)
	ph := make([]C.cgc_pool_t, info.NPools+1)
	// Room for the generators only when asked for: NULL (and 0) leaves them to the graphs.
	var rh []C.cgc_rng_t
	var generators *C.cgc_rng_t
	if withGenerators && info.NGenerators > 0 {
		rh = make([]C.cgc_rng_t, info.NGenerators)
		generators = &rh[0]
	}
	var msg *C.char
	err = check(C.cgcgo_graphs_restore(ch, bytesFor(data), C.size_t(len(data)), flags, threads, generators,
		C.size_t(len(rh)), &gh[0], C.size_t(info.NGraphs), &ph[0], C.size_t(info.NPools), &msg), msg)
	runtime.KeepAlive(c)
	runtime.KeepAlive(data)
	if err != nil {
		return nil, nil, nil, err
	}
	graphs := make([]*Graph, info.NGraphs)
	for i := range graphs {
		graphs[i] = newGraph(gh[i])
	}
	pools := make([]*Pool, info.NPools)
	for i := range pools {
		pools[i] = newPool(ph[i])
	}
	var rngs []*Rng
	if withGenerators {
		rngs = make([]*Rng, len(rh))
		for i := range rngs {
			rngs[i] = newRng(rh[i])
		}
	}
	return graphs, pools, rngs, nil
}

// AddModuleImage (1.6) adds a module image under key (cgc_module_add_image; up to 255 bytes, no
// NUL; the image is copied): SaveGraphs names a kernel of a module cgc did not load (the
// application's own, a library's) by this key when the image has a kernel of that name with the
// same attributes, and RestoreGraphs loads the image added under the key a saved buffer names,
// so the restoring process adds the same image under the same key first. image is a fatbin, a
// cubin, or PTX text, to which a NUL byte is added when it has none. Images stay for the life of
// the process.
//
// ErrInvalidState for another image under a key already taken (the same image again is fine);
// ErrCUDA when the driver cannot load the image; ErrInvalidArgument for a key with a NUL byte
// (the binding's refusal) or one too long.
func (c *Context) AddModuleImage(key string, image []byte) error {
	const op = "Context.AddModuleImage"
	if strings.IndexByte(key, 0) >= 0 {
		return &Error{Status: ErrInvalidArgument, Message: "cgc (Go binding): " + op + ": the key contains a NUL byte"}
	}
	ch, err := c.handle(op)
	if err != nil {
		return err
	}
	if looksLikePTX(image) && image[len(image)-1] != 0 {
		image = append(append(make([]byte, 0, len(image)+1), image...), 0)
	}
	ckey := C.CString(key)
	defer C.free(unsafe.Pointer(ckey))
	var msg *C.char
	err = check(C.cgcgo_module_add_image(ch, ckey, bytesFor(image), C.size_t(len(image)), &msg), msg)
	runtime.KeepAlive(c)
	runtime.KeepAlive(image)
	return err
}

// looksLikePTX tells PTX text from a fatbin or a cubin (which begin with their magic numbers), as
// the library tells them.
func looksLikePTX(image []byte) bool {
	if len(image) == 0 {
		return false
	}
	switch b := image[0]; {
	case b == '/' || b == '.' || b == '\n' || b == '\t' || b == ' ' || b == '\r' || (b >= 'a' && b <= 'z'):
		return true
	}
	return false
}

// ModuleRecord (1.6) turns the record of module images on or off (cgc_module_record), for the whole
// process, and returns what the record holds after the call: how many distinct images it has kept
// and their size in bytes (also when err is not nil: a refusal keeps what was recorded). With on,
// every module the driver loads in this process from then on, by any library or thread (cuBLAS's,
// cuDNN's, Triton's, the application's; a lazily loaded one at its first kernel), has its image
// copied and kept for the life of the process, until ModuleRecord(false) stops the recording (the
// images kept stay). SaveGraphs finds a kernel of a module cgc did not load among the images added
// by key (Context.AddModuleImage), then among the recorded ones (by name and the same attributes),
// and embeds a recorded image in the bytes as it embeds a Module's, so the restoring process needs
// no record and no key; when different recorded images have a kernel of that name and build, the
// save is ErrNotSavable (add the right image by key). Turn it on before the libraries load their
// modules; each image loaded meanwhile costs a copy (a library's can be many megabytes). It needs
// no Context; turning it on again, or off while it is off, changes nothing.
//
// The record uses CUPTI (libcupti, opened at the first call: CGC_CUPTI_LIBRARY names it), which
// serves one client per process: ErrInvalidState while a profiler or sanitizer (Nsight Systems,
// the PyTorch profiler, compute-sanitizer) is subscribed (and while the record is on such a tool
// cannot subscribe); ErrNotSupported, naming what was tried, without libcupti (or when CUPTI
// cannot subscribe, e.g. without a driver). The message names cgc_module_record.
func ModuleRecord(on bool) (images int, bytes uint64, err error) {
	if err := Load(); err != nil {
		return 0, 0, err
	}
	var n, size C.size_t
	var flag C.int
	if on {
		flag = 1
	}
	var msg *C.char
	err = check(C.cgcgo_module_record(flag, &n, &size, &msg), msg)
	return int(n), uint64(size), err
}
