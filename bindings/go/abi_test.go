package cgc_test

// The binding compared with the header's ABI description (tools/abi_describe.c; bazel build
// //tools:abi_description writes it, tools/test_all.sh exports its path as
// CGC_ABI_DESCRIPTION). cgo compiles the shim against capi/cgc.h itself, so C types cannot
// drift from the header; what can is the Go side: a function of the header that nothing wraps,
// a class, handle kind or callback the binding has no Go form for, a struct field with no Go
// field, and MemOp, which goes to C as it is.

import (
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	cgc "cgc/bindings/go"
)

// abiDescription returns the description's lines split into fields, or skips the test when
// CGC_ABI_DESCRIPTION is not set.
func abiDescription(t *testing.T) [][]string {
	t.Helper()
	path := os.Getenv("CGC_ABI_DESCRIPTION")
	if path == "" {
		t.Skip("CGC_ABI_DESCRIPTION is not set (tools/test_all.sh sets it)")
	}
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("CGC_ABI_DESCRIPTION: %v", err)
	}
	var lines [][]string
	for _, line := range strings.Split(string(text), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			lines = append(lines, f)
		}
	}
	return lines
}

// notCalledFromGo marks a function of the header that the binding deliberately has no wrapper
// for, with the reason.
type notCalledFromGo string

// goAPIOfFunction names, for every function of the header, the Go API that calls it. A
// function added to the header fails TestEveryFunctionIsWrapped until it is wrapped and
// listed here; the values are real Go functions, so a listed API that does not exist fails to
// compile.
var goAPIOfFunction = map[string]any{
	"cgc_version":       cgc.LibraryVersion,
	"cgc_status_string": cgc.StatusString,
	"cgc_last_error":    notCalledFromGo("every shim copies it into Error.Message in the call that failed"),

	"cgc_device_count":          cgc.DeviceCount,
	"cgc_context_create":        cgc.NewContext,
	"cgc_context_destroy":       (*cgc.Context).Close,
	"cgc_context_synchronize":   (*cgc.Context).Synchronize,
	"cgc_stream_create":         (*cgc.Context).NewStream,
	"cgc_stream_wrap":           (*cgc.Context).WrapStream,
	"cgc_stream_native":         (*cgc.Stream).Native,
	"cgc_stream_destroy":        (*cgc.Stream).Close,
	"cgc_stream_synchronize":    (*cgc.Stream).Synchronize,
	"cgc_stream_query":          (*cgc.Stream).Query,
	"cgc_stream_wait_event":     (*cgc.Stream).WaitEvent,
	"cgc_event_create":          (*cgc.Context).NewEvent,
	"cgc_event_destroy":         (*cgc.Event).Close,
	"cgc_event_record":          (*cgc.Event).Record,
	"cgc_event_synchronize":     (*cgc.Event).Synchronize,
	"cgc_event_query":           (*cgc.Event).Query,
	"cgc_event_elapsed_ms":      (*cgc.Event).ElapsedMs,
	"cgc_capture_begin":         (*cgc.Stream).BeginCapture,
	"cgc_capture_end":           (*cgc.Stream).EndCapture,
	"cgc_capture":               notCalledFromGo("Stream.Capture does begin, body and end in Go, where a panic or Goexit of the body can be handled"),
	"cgc_stream_capture_status": (*cgc.Stream).CaptureStatus,
	"cgc_capture_mode_exchange": cgc.ExchangeCaptureMode,

	"cgc_graph_launch":      (*cgc.Graph).Launch,
	"cgc_graph_upload":      (*cgc.Graph).Upload,
	"cgc_graph_info":        (*cgc.Graph).Info,
	"cgc_graph_pool":        (*cgc.Graph).Pool,
	"cgc_graph_debug_dump":  (*cgc.Graph).DebugDump,
	"cgc_graph_reset":       (*cgc.Graph).Reset,
	"cgc_graph_destroy":     (*cgc.Graph).Destroy,
	"cgc_graph_native":      (*cgc.Graph).Native,
	"cgc_graph_native_exec": (*cgc.Graph).NativeExec,

	"cgc_pool_create":   (*cgc.Context).NewPool,
	"cgc_pool_retain":   (*cgc.Graph).Pool, // the Pool it returns holds a reference of its own
	"cgc_pool_release":  (*cgc.Pool).Close,
	"cgc_malloc":        (*cgc.Context).Malloc,
	"cgc_free":          (*cgc.DeviceMemory).Free,
	"cgc_record_stream": (*cgc.DeviceMemory).RecordStream,
	"cgc_empty_cache":   (*cgc.Context).EmptyCache,
	"cgc_memory_stats":  (*cgc.Context).MemoryStats,
	"cgc_torch_malloc":  notCalledFromGo("PyTorch's allocator entry point: PyTorch calls it"),
	"cgc_torch_free":    notCalledFromGo("PyTorch's allocator entry point: PyTorch calls it"),

	"cgc_nccl_version":   cgc.NCCLVersion,
	"cgc_comm_unique_id": cgc.NewCommID,
	"cgc_comm_create":    (*cgc.Context).NewComm,
	"cgc_comm_destroy":   (*cgc.Comm).Close,
	"cgc_comm_abort":     (*cgc.Comm).Abort,
	"cgc_all_reduce":     (*cgc.Comm).AllReduce,
	"cgc_all_gather":     (*cgc.Comm).AllGather,
	"cgc_reduce_scatter": (*cgc.Comm).ReduceScatter,
	"cgc_broadcast":      (*cgc.Comm).Broadcast,
	"cgc_send":           (*cgc.Comm).Send,
	"cgc_recv":           (*cgc.Comm).Recv,
	"cgc_group_start":    cgc.GroupStart,
	"cgc_group_end":      cgc.GroupEnd,

	"cgc_rng_create":    (*cgc.Context).NewRng,
	"cgc_rng_destroy":   (*cgc.Rng).Close,
	"cgc_rng_uniform":   (*cgc.Rng).Uniform,
	"cgc_rng_normal":    (*cgc.Rng).Normal,
	"cgc_rng_get_state": (*cgc.Rng).State,
	"cgc_rng_set_state": (*cgc.Rng).SetState,

	// 1.1
	"cgc_stream_priority_range":    (*cgc.Context).StreamPriorityRange,
	"cgc_stream_priority":          (*cgc.Stream).Priority,
	"cgc_stream_id":                (*cgc.Stream).ID,
	"cgc_stream_device":            (*cgc.Stream).Device,
	"cgc_stream_copy_attributes":   (*cgc.Stream).CopyAttributes,
	"cgc_stream_set_access_policy": (*cgc.Stream).SetAccessPolicy,
	"cgc_stream_get_access_policy": (*cgc.Stream).AccessPolicy,
	"cgc_host_alloc":               (*cgc.Context).HostAlloc,
	"cgc_host_free":                (*cgc.HostBuffer).Free,
	"cgc_host_register":            (*cgc.Context).HostRegister,
	"cgc_host_unregister":          (*cgc.HostRegistration).Unregister,
	"cgc_memcpy_htod_async":        cgc.CopyHostToDevice[float32],
	"cgc_memcpy_dtoh_async":        cgc.CopyDeviceToHost[float32],
	"cgc_memcpy_dtod_async":        cgc.CopyDeviceToDevice,
	"cgc_memset_d8_async":          cgc.Memset8,
	"cgc_memset_d16_async":         cgc.Memset16,
	"cgc_memset_d32_async":         cgc.Memset32,
	"cgc_launch_host_func":         (*cgc.Stream).LaunchHostFunc,
	"cgc_stream_write_value32":     (*cgc.Stream).WriteValue32,
	"cgc_stream_write_value64":     (*cgc.Stream).WriteValue64,
	"cgc_stream_wait_value32":      (*cgc.Stream).WaitValue32,
	"cgc_stream_wait_value64":      (*cgc.Stream).WaitValue64,
	"cgc_stream_batch_mem_op":      (*cgc.Stream).BatchMemOps,
	"cgc_module_load":              (*cgc.Context).LoadModule,
	"cgc_module_unload":            (*cgc.Module).Close,
	"cgc_module_get_function":      (*cgc.Module).Function,
	"cgc_function_get_attribute":   (*cgc.Function).Attribute,
	"cgc_function_set_attribute":   (*cgc.Function).SetAttribute,
	"cgc_launch_kernel":            (*cgc.Function).Launch,

	// 1.2
	"cgc_graph_kernel_node_set_enabled": (*cgc.Graph).SetKernelEnabled,
	"cgc_graph_kernel_node_set_args":    (*cgc.Graph).SetKernelArgs,
	"cgc_capture_conditional_begin":     (*cgc.Stream).Conditional,
	"cgc_capture_conditional_end":       (*cgc.Stream).Conditional,

	// 1.3
	"cgc_capture_conditional_begin_bodies": (*cgc.Stream).ConditionalBodies,

	// 1.4
	"cgc_pool_adopt_capture":       (*cgc.Pool).AdoptCapture,
	"cgc_pool_end_adopted_capture": (*cgc.Pool).EndAdoptedCapture,
	"cgc_record_stream_native":     (*cgc.DeviceMemory).RecordStreamNative,

	// 1.5
	"cgc_nccl_pool_create": (*cgc.Comm).NewPool,
	"cgc_pool_malloc":      (*cgc.Pool).Malloc,

	// 1.6
	"cgc_last_status":     cgc.LastStatus,
	"cgc_memory_snapshot": (*cgc.Context).MemorySnapshot,
	"cgc_pool_claim":      (*cgc.Pool).Claim,
	"cgc_pool_create_at":  (*cgc.Context).NewPoolAt,

	"cgc_graphs_save":      cgc.SaveGraphsWith, // and SaveGraphs, its defaults
	"cgc_saved_info":       cgc.ReadSavedInfo,
	"cgc_graphs_restore":   (*cgc.Context).RestoreGraphsWithGenerators, // and RestoreGraphs(With): no generators
	"cgc_module_add_image": (*cgc.Context).AddModuleImage,

	"cgc_graph_share_executable": (*cgc.Graph).ShareExecutable,

	"cgc_module_record": cgc.ModuleRecord,
}

// goTypeOfHandle, goTypeOfStruct and goTypeOfCallback are the Go forms of the header's handle
// kinds, structs and callbacks.
var (
	goTypeOfHandle = map[string]reflect.Type{
		"cgc_context_t":  reflect.TypeOf((*cgc.Context)(nil)).Elem(),
		"cgc_stream_t":   reflect.TypeOf((*cgc.Stream)(nil)).Elem(),
		"cgc_event_t":    reflect.TypeOf((*cgc.Event)(nil)).Elem(),
		"cgc_graph_t":    reflect.TypeOf((*cgc.Graph)(nil)).Elem(),
		"cgc_pool_t":     reflect.TypeOf((*cgc.Pool)(nil)).Elem(),
		"cgc_comm_t":     reflect.TypeOf((*cgc.Comm)(nil)).Elem(),
		"cgc_rng_t":      reflect.TypeOf((*cgc.Rng)(nil)).Elem(),
		"cgc_module_t":   reflect.TypeOf((*cgc.Module)(nil)).Elem(),
		"cgc_function_t": reflect.TypeOf((*cgc.Function)(nil)).Elem(),
	}
	goTypeOfStruct = map[string]reflect.Type{
		"cgc_capture_options_t": reflect.TypeOf((*cgc.CaptureOptions)(nil)).Elem(),
		"cgc_graph_info_t":      reflect.TypeOf((*cgc.GraphInfo)(nil)).Elem(),
		"cgc_memory_stats_t":    reflect.TypeOf((*cgc.MemoryStats)(nil)).Elem(),
		"cgc_comm_id_t":         reflect.TypeOf((*cgc.CommID)(nil)).Elem(),
		"cgc_access_policy_t":   reflect.TypeOf((*cgc.AccessPolicy)(nil)).Elem(),
		"cgc_mem_op_t":          reflect.TypeOf((*cgc.MemOp)(nil)).Elem(),
		"cgc_segment_info_t":    reflect.TypeOf((*cgc.Segment)(nil)).Elem(),
		"cgc_block_info_t":      reflect.TypeOf((*cgc.Block)(nil)).Elem(),
		"cgc_saved_info_t":      reflect.TypeOf((*cgc.SavedInfo)(nil)).Elem(),
		// 1.6's save options are SaveGraphsWith's pools parameter and SaveOptions (Verify is the
		// flag CGC_SAVE_VERIFY), its restore options RestoreOptions (Families is the flag
		// CGC_RESTORE_FAMILIES, Threads the field threads) and the generators that
		// RestoreGraphsWithGenerators returns: the shim builds both structs.
		"cgc_save_options_t": reflect.TypeOf(struct {
			Pools []*cgc.Pool
			cgc.SaveOptions
		}{}),
		"cgc_restore_options_t": reflect.TypeOf(struct {
			cgc.RestoreOptions
			Generators []*cgc.Rng
		}{}),
	}
	goTypeOfCallback = map[string]reflect.Type{
		"cgc_capture_fn": reflect.TypeOf(func(*cgc.Stream) error { return nil }), // Stream.Capture's body
		"cgc_host_fn":    reflect.TypeOf(func() {}),                              // Stream.LaunchHostFunc's fn and release
	}
)

// knownClass reports whether the binding has a Go form for an ABI class (the classes are
// listed at the top of tools/abi_describe.c).
func knownClass(class string) bool {
	switch class {
	case "void", "i8", "u8", "u16", "i32", "u32", "u64", "usize", "isize", "f32":
		return true
	}
	if inner := strings.TrimSuffix(strings.TrimPrefix(class, "ptr("), ")"); inner != class {
		return knownClass(inner)
	}
	if inner := strings.TrimSuffix(strings.TrimPrefix(class, "array("), ")"); inner != class {
		comma := strings.Index(inner, ",")
		return comma > 0 && knownClass(inner[comma+1:])
	}
	kind, name, _ := strings.Cut(class, ":")
	switch kind {
	case "handle":
		return goTypeOfHandle[name] != nil
	case "struct":
		return goTypeOfStruct[name] != nil
	case "fnptr":
		return goTypeOfCallback[name] != nil
	}
	return false
}

// paramClasses returns the classes of a function or callback line's "name:class" fields.
func paramClasses(fields []string) []string {
	var classes []string
	for _, f := range fields {
		if _, class, ok := strings.Cut(f, ":"); ok {
			classes = append(classes, class)
		}
	}
	return classes
}

func TestEveryFunctionIsWrapped(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range abiDescription(t) {
		if f[0] != "function" || len(f) < 4 {
			continue
		}
		name := f[2]
		seen[name] = true
		api, ok := goAPIOfFunction[name]
		if !ok {
			t.Errorf("the header's %s has no Go API (wrap it and list it in goAPIOfFunction)", name)
		} else if reason, deliberate := api.(notCalledFromGo); deliberate && reason == "" {
			t.Errorf("%s: not wrapped, without a reason", name)
		}
		for _, class := range append([]string{f[3]}, paramClasses(f[4:])...) {
			if !knownClass(class) {
				t.Errorf("%s: the binding has no Go form for class %q", name, class)
			}
		}
	}
	if len(seen) == 0 {
		t.Fatal("the description lists no functions")
	}
	for name := range goAPIOfFunction {
		if !seen[name] {
			t.Errorf("goAPIOfFunction lists %s, which the header does not have", name)
		}
	}
}

func TestCallbacksMatchTheHeader(t *testing.T) {
	// shim.c's trampolines for Go host functions are cgc_host_fn functions: void(void* user).
	want := map[string]string{"cgc_host_fn": "void user:ptr(void)"}
	callbacks := 0
	for _, f := range abiDescription(t) {
		if f[0] != "callback" || len(f) < 3 {
			continue
		}
		callbacks++
		name := f[1]
		if goTypeOfCallback[name] == nil {
			t.Errorf("callback %s has no Go form", name)
		}
		for _, class := range append([]string{f[2]}, paramClasses(f[3:])...) {
			if !knownClass(class) {
				t.Errorf("callback %s: the binding has no Go form for class %q", name, class)
			}
		}
		if w, ok := want[name]; ok && strings.Join(f[2:], " ") != w {
			t.Errorf("callback %s is %q; the shim's trampolines are written for %q", name, strings.Join(f[2:], " "), w)
		}
	}
	if callbacks != len(goTypeOfCallback) {
		t.Errorf("the header has %d callbacks, the binding knows %d", callbacks, len(goTypeOfCallback))
	}
}

// TestArrayAndOutParametersMatchTheHeader pins the signatures of the functions whose shims hand
// C an array or output memory that the Go side sizes itself: a header that changed one of those
// (an element class, a count's width, an output's size) would otherwise still compile, with at
// most a C warning, and write past what Go allocated. It pins those whose shims pass numbers as
// void* too (1.4's native streams), and 1.5's, whose shims cast kinds and addresses.
func TestArrayAndOutParametersMatchTheHeader(t *testing.T) {
	want := map[string]string{
		// ConditionalBodies: n_bodies+1 stream handles (Go memory) and one uint64 for the handle.
		"cgc_capture_conditional_begin_bodies": "i32 stream:handle:cgc_stream_t kind:i32 condition:ptr(u32) flags:u32 " +
			"n_bodies:usize bodies:ptr(handle:cgc_stream_t) handle:ptr(u64)",
		// Conditional: one stream handle.
		"cgc_capture_conditional_begin": "i32 stream:handle:cgc_stream_t kind:i32 condition:ptr(u32) body:ptr(handle:cgc_stream_t)",
		// AdoptCapture, EndAdoptedCapture, RecordStreamNative (1.4): native streams and device
		// addresses cross as uintptr_t and reach C as void*, which C converts to any pointer
		// parameter without a word, so a parameter that changed class would still compile.
		"cgc_pool_adopt_capture":       "i32 pool:handle:cgc_pool_t native_stream:ptr(void)",
		"cgc_pool_end_adopted_capture": "i32 pool:handle:cgc_pool_t",
		"cgc_record_stream_native":     "i32 ptr:ptr(void) native_stream:ptr(void)",
		// Comm.NewPool, Pool.Malloc (1.5): the kinds cross as int and are cast to the enum, and
		// the block's address comes back as a uintptr_t, so a kind or an output that changed
		// class would still compile.
		"cgc_nccl_pool_create": "i32 comm:handle:cgc_comm_t capacity:usize wanted:i32 out:ptr(handle:cgc_pool_t) got:ptr(i32)",
		"cgc_pool_malloc":      "i32 pool:handle:cgc_pool_t size:usize stream:handle:cgc_stream_t out:ptr(ptr(void))",
		// Context.MemorySnapshot (1.6): the shim sizes its own arrays of the header's structs and
		// copies them field by field into arrays of its own types, which the Go side sizes.
		"cgc_memory_snapshot": "i32 ctx:handle:cgc_context_t segments:ptr(struct:cgc_segment_info_t) " +
			"max_segments:usize blocks:ptr(struct:cgc_block_info_t) max_blocks:usize n_segments:ptr(usize) " +
			"n_blocks:ptr(usize)",
		// Pool.Claim (1.6): the address crosses as a uintptr_t and reaches C as void*, as
		// RecordStreamNative's does.
		"cgc_pool_claim": "i32 pool:handle:cgc_pool_t ptr:ptr(void) size:usize",
		// Context.NewPoolAt (1.6): the base crosses as a uintptr_t and reaches C as void*, and
		// the pool's handle comes back through the out pointer.
		"cgc_pool_create_at": "i32 ctx:handle:cgc_context_t base:ptr(void) capacity:usize out:ptr(handle:cgc_pool_t)",
		// SaveGraphsWith, ReadSavedInfo, RestoreGraphs, AddModuleImage (1.6): arrays of graph,
		// pool and (RestoreGraphsWithGenerators') generator handles in Go memory, byte slices and
		// their lengths, the size written, and the info and options structs the shim fills itself.
		"cgc_graphs_save": "i32 graphs:ptr(handle:cgc_graph_t) n_graphs:usize options:ptr(struct:cgc_save_options_t) " +
			"buffer:ptr(void) capacity:usize size:ptr(usize)",
		"cgc_saved_info": "i32 data:ptr(void) size:usize info:ptr(struct:cgc_saved_info_t)",
		"cgc_graphs_restore": "i32 ctx:handle:cgc_context_t data:ptr(void) size:usize " +
			"options:ptr(struct:cgc_restore_options_t) graphs:ptr(handle:cgc_graph_t) n_graphs:usize " +
			"pools:ptr(handle:cgc_pool_t) n_pools:usize",
		"cgc_module_add_image": "i32 ctx:handle:cgc_context_t key:ptr(i8) image:ptr(void) size:usize",
		// Graph.ShareExecutable (1.6): two graph handles, the graph first.
		"cgc_graph_share_executable": "i32 graph:handle:cgc_graph_t leader:handle:cgc_graph_t",
		// ModuleRecord (1.6): the flag crosses as an int, and the two counts come back through
		// size_t variables of the Go side.
		"cgc_module_record": "i32 on:i32 images:ptr(usize) bytes:ptr(usize)",
	}
	found := 0
	for _, f := range abiDescription(t) {
		if f[0] != "function" || len(f) < 4 {
			continue
		}
		w, ok := want[f[2]]
		if !ok {
			continue
		}
		found++
		if got := strings.Join(f[3:], " "); got != w {
			t.Errorf("%s is %q; the binding's shim and Go side are written for %q", f[2], got, w)
		}
	}
	if found != len(want) {
		t.Errorf("the description has %d of the %d functions pinned here", found, len(want))
	}
}

// goFieldName is the Go name of a C field: node_count -> NodeCount.
func goFieldName(c string) string {
	words := strings.Split(c, "_")
	for i, w := range words {
		words[i] = strings.ToUpper(w[:1]) + w[1:]
	}
	return strings.Join(words, "")
}

// TestStructsMatchTheHeader requires a Go field for every field of the header's structs (so
// that a field appended to the header, like 1.1's node counts, is not silently dropped), and
// MemOp, which is passed to C as it is, to have cgc_mem_op_t's exact layout.
func TestStructsMatchTheHeader(t *testing.T) {
	// Fields whose Go form is not a field of the same name, and why.
	special := map[string]string{
		"cgc_capture_options_t.flags":        "Upload", // CGC_CAPTURE_UPLOAD is the only flag to set (AutoFreeOnLaunch is always on)
		"cgc_comm_id_t.internal":             "",       // CommID is the 128 bytes themselves
		"cgc_segment_info_t.stream_id":       "StreamID",
		"cgc_segment_info_t.first_block":     "Blocks", // the segment's blocks themselves
		"cgc_segment_info_t.n_blocks":        "Blocks",
		"cgc_save_options_t.n_pools":         "Pools",      // the slice's length
		"cgc_save_options_t.flags":           "Verify",     // its one flag, CGC_SAVE_VERIFY
		"cgc_restore_options_t.flags":        "Families",   // its one flag, CGC_RESTORE_FAMILIES
		"cgc_restore_options_t.n_generators": "Generators", // the slice's length
	}
	sizes := map[string]uintptr{}
	structs := 0
	for _, f := range abiDescription(t) {
		switch {
		case f[0] == "struct" && len(f) == 3:
			structs++
			size, err := strconv.ParseUint(f[2], 10, 64)
			if err != nil {
				t.Fatalf("bad line %q", strings.Join(f, " "))
			}
			sizes[f[1]] = uintptr(size)
			if goTypeOfStruct[f[1]] == nil {
				t.Errorf("struct %s has no Go form", f[1])
			}
		case f[0] == "field" && len(f) == 7:
			st, name, class := f[1], f[3], f[4]
			offset, err1 := strconv.ParseUint(f[5], 10, 64)
			size, err2 := strconv.ParseUint(f[6], 10, 64)
			if err1 != nil || err2 != nil {
				t.Fatalf("bad line %q", strings.Join(f, " "))
			}
			if !knownClass(class) {
				t.Errorf("%s.%s: the binding has no Go form for class %q", st, name, class)
			}
			goType := goTypeOfStruct[st]
			if goType == nil || name == "struct_size" { // struct_size is set by the shim
				continue
			}
			goName, isSpecial := special[st+"."+name]
			if !isSpecial {
				goName = goFieldName(name)
			}
			if goName == "" {
				continue
			}
			field, ok := goType.FieldByName(goName)
			if !ok {
				t.Errorf("%s.%s has no Go field %s.%s", st, name, goType.Name(), goName)
				continue
			}
			if st == "cgc_mem_op_t" && (uint64(field.Offset) != offset || uint64(field.Type.Size()) != size) {
				t.Errorf("MemOp.%s at offset %d, %d bytes; cgc_mem_op_t.%s at %d, %d bytes",
					goName, field.Offset, field.Type.Size(), name, offset, size)
			}
		}
	}
	if structs != len(goTypeOfStruct) {
		t.Errorf("the header has %d structs, the binding knows %d", structs, len(goTypeOfStruct))
	}
	if got := reflect.TypeOf((*cgc.MemOp)(nil)).Elem().Size(); got != sizes["cgc_mem_op_t"] {
		t.Errorf("MemOp is %d bytes, cgc_mem_op_t %d", got, sizes["cgc_mem_op_t"])
	}
	if got := reflect.TypeOf((*cgc.CommID)(nil)).Elem().Size(); got != sizes["cgc_comm_id_t"] {
		t.Errorf("CommID is %d bytes, cgc_comm_id_t %d", got, sizes["cgc_comm_id_t"])
	}
}
