package cgc

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"math"
	"runtime"
	"unsafe"
)

// Module is a loaded fatbin, cubin or PTX image (cgc_module_t) whose kernels Function finds.
// Closing it invalidates its Functions at once; the code stays loaded while graphs whose
// captures launched its kernels exist.
type Module struct {
	h      C.cgc_module_t
	closed bool
}

// LoadModule loads a module from an image: a fatbin, a cubin or PTX text (which the driver
// compiles for the device; a compile error comes with the compiler's log in the message). The
// image is copied into C memory with a NUL byte after it, so PTX read from a file needs no
// terminator of its own (binary images carry their own size and ignore it).
func (c *Context) LoadModule(image []byte) (*Module, error) {
	ch, err := c.handle("Context.LoadModule")
	if err != nil {
		return nil, err
	}
	// cgo's C.malloc never returns nil (it aborts when out of memory).
	terminated := C.malloc(C.size_t(len(image) + 1))
	defer C.free(terminated)
	buf := unsafe.Slice((*byte)(terminated), len(image)+1)
	copy(buf, image)
	buf[len(image)] = 0
	var h C.cgc_module_t
	var msg *C.char
	err = check(C.cgcgo_module_load(ch, terminated, &h, &msg), msg)
	runtime.KeepAlive(c)
	if err != nil {
		return nil, err
	}
	m := &Module{h: h}
	runtime.SetFinalizer(m, (*Module).Close) // safety net only; see the package documentation
	return m, nil
}

func (m *Module) handle(op string) (C.cgc_module_t, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, nil
	}
	if m.closed {
		return nil, closedError("module", op)
	}
	return m.h, nil
}

// Function is the kernel named name (its extern "C" or mangled name) in the module; asking
// twice gives the same kernel. ErrInvalidArgument, naming it, when the module has none.
func (m *Module) Function(name string) (*Function, error) {
	h, err := m.handle("Module.Function")
	if err != nil {
		return nil, err
	}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var fh C.cgc_function_t
	var msg *C.char
	err = check(C.cgcgo_module_get_function(h, cname, &fh, &msg), msg)
	runtime.KeepAlive(m)
	if err != nil {
		return nil, err
	}
	return &Function{h: fh, module: m, name: name}, nil
}

// Close drops the module (cgc_module_unload): its Functions are refused from now on, while the
// graphs that launched its kernels keep its code loaded until they are reset or destroyed.
// Idempotent; does nothing on nil.
func (m *Module) Close() error {
	if m == nil || m.closed || m.h == nil {
		return nil
	}
	var msg *C.char
	if err := check(C.cgcgo_module_unload(m.h, &msg), msg); err != nil {
		return err
	}
	m.h, m.closed = nil, true
	runtime.SetFinalizer(m, nil)
	return nil
}

// Function is a kernel of a Module (cgc_function_t). It belongs to its module and is valid as
// long as the module is open; it needs no Close of its own.
type Function struct {
	h      C.cgc_function_t
	module *Module // also keeps the module from being finalized while the Function is in use
	name   string
}

func (f *Function) handle(op string) (C.cgc_function_t, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	if f == nil {
		return nil, nil
	}
	if f.module.closed {
		return nil, closedError("module of kernel '"+f.name+"'", op)
	}
	return f.h, nil
}

// Name is the name the kernel was asked for by.
func (f *Function) Name() string {
	if f == nil {
		return ""
	}
	return f.name
}

// FunctionAttribute is an attribute of a kernel (the values of CUfunction_attribute).
type FunctionAttribute int32

// Kernel attributes. Only FuncMaxDynamicSharedSizeBytes and FuncPreferredSharedMemoryCarveout
// can be set; the others are read only.
const (
	FuncMaxThreadsPerBlock            FunctionAttribute = C.CGC_FUNC_MAX_THREADS_PER_BLOCK
	FuncSharedSizeBytes               FunctionAttribute = C.CGC_FUNC_SHARED_SIZE_BYTES // static shared memory
	FuncConstSizeBytes                FunctionAttribute = C.CGC_FUNC_CONST_SIZE_BYTES
	FuncLocalSizeBytes                FunctionAttribute = C.CGC_FUNC_LOCAL_SIZE_BYTES
	FuncNumRegs                       FunctionAttribute = C.CGC_FUNC_NUM_REGS
	FuncPTXVersion                    FunctionAttribute = C.CGC_FUNC_PTX_VERSION
	FuncBinaryVersion                 FunctionAttribute = C.CGC_FUNC_BINARY_VERSION
	FuncCacheModeCA                   FunctionAttribute = C.CGC_FUNC_CACHE_MODE_CA
	FuncMaxDynamicSharedSizeBytes     FunctionAttribute = C.CGC_FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES    // needed above 48 KiB
	FuncPreferredSharedMemoryCarveout FunctionAttribute = C.CGC_FUNC_PREFERRED_SHARED_MEMORY_CARVEOUT // percent of L1
)

// Attribute reads one of the kernel's attributes.
func (f *Function) Attribute(attribute FunctionAttribute) (int, error) {
	h, err := f.handle("Function.Attribute")
	if err != nil {
		return 0, err
	}
	var v C.int
	var msg *C.char
	err = check(C.cgcgo_function_get_attribute(h, C.int(attribute), &v, &msg), msg)
	runtime.KeepAlive(f)
	return int(v), err
}

// SetAttribute sets FuncMaxDynamicSharedSizeBytes or FuncPreferredSharedMemoryCarveout; other
// attributes are ErrInvalidArgument.
func (f *Function) SetAttribute(attribute FunctionAttribute, value int) error {
	if value < math.MinInt32 || value > math.MaxInt32 {
		return &Error{Status: ErrInvalidArgument, Message: fmt.Sprintf("cgc (Go binding): Function.SetAttribute: value %d does not fit a C int", value)}
	}
	h, err := f.handle("Function.SetAttribute")
	if err != nil {
		return err
	}
	var msg *C.char
	err = check(C.cgcgo_function_set_attribute(h, C.int(attribute), C.int(value), &msg), msg)
	runtime.KeepAlive(f)
	return err
}
