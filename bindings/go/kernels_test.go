package cgc_test

// The PTX files the GPU tests load, shared with the other bindings' tests: read at run time from
// the repository when the tests run in bindings/go (go test), else from the GPU bundle's tools/
// beside bin/, where tests/make_bundle.sh puts them.

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// bindingTestsPTX reads tests/kernels/binding_tests.ptx, the kernels of the bindings' GPU tests:
// cond_init, cond_step, cond_count and cond_append (the conditional tests), affine (the work
// tests).
func bindingTestsPTX(t *testing.T) []byte {
	return kernelFile(t, filepath.Join("tests", "kernels"), "binding_tests.ptx", "//tests:kernels/binding_tests.ptx")
}

// loopContinuePTX reads the examples' loop_continue kernel (examples/kernels/loop_continue.ptx).
func loopContinuePTX(t *testing.T) []byte {
	return kernelFile(t, filepath.Join("examples", "kernels"), "loop_continue.ptx", "//examples:kernels/loop_continue.ptx")
}

// kernelFile reads the file name from dir of the repository (relative to its root), or from the
// GPU bundle's tools/; label is the Bazel target that the bundle must list for the latter.
func kernelFile(t *testing.T, dir, name, label string) []byte {
	t.Helper()
	candidates := []string{filepath.Join("..", "..", dir, name)}
	if exe, err := os.Executable(); err == nil {
		candidates = append(candidates,
			filepath.Join(filepath.Dir(exe), "..", "tools", name),
			filepath.Join(filepath.Dir(exe), name))
	}
	for _, c := range candidates {
		ptx, err := os.ReadFile(c)
		if err == nil {
			return ptx
		}
		if !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("reading %s: %v", c, err)
		}
	}
	t.Fatalf("cannot find %s (tried %s): the GPU bundle needs %s in its tools/", name,
		strings.Join(candidates, ", "), label)
	return nil
}

// Without a GPU too: the shared kernels are where the GPU tests look, with every kernel they ask
// the module for.
func TestBindingTestKernelsAreFound(t *testing.T) {
	ptx := bindingTestsPTX(t)
	for _, name := range []string{"cond_init", "cond_step", "cond_count", "cond_append", "affine"} {
		if !bytes.Contains(ptx, []byte(".visible .entry "+name+"(")) {
			t.Errorf("binding_tests.ptx has no kernel %s", name)
		}
	}
	if !bytes.Contains(loopContinuePTX(t), []byte(".entry loop_continue(")) {
		t.Error("loop_continue.ptx has no kernel loop_continue")
	}
}
