"""Finds the local CUDA toolkit for cgc.

cgc never links against CUDA: the library loads libcuda.so.1 at run time. The build needs only
the driver API headers (cuda.h, cudaTypedefs.h) and nvcc, which turns kernels/*.cu and the
tests' kernels into fatbins. CUDA_PATH overrides the standard install prefix /usr/local/cuda.
"""

def _cuda_toolkit_impl(rctx):
    root = rctx.os.environ.get("CUDA_PATH", "/usr/local/cuda")
    cuda_h = rctx.path(root + "/include/cuda.h")
    nvcc = rctx.path(root + "/bin/nvcc")
    if not cuda_h.exists:
        fail("cgc: no CUDA toolkit at %s (cuda.h not found); install the CUDA toolkit or set CUDA_PATH" % root)
    rctx.symlink(root + "/include/cuda.h", "include/cuda.h")
    rctx.symlink(root + "/include/cudaTypedefs.h", "include/cudaTypedefs.h")

    # nvcc finds the rest of the toolkit from its own path, so a wrapper that calls it by its
    # absolute path is enough inside Bazel's sandbox.
    if nvcc.exists:
        rctx.file("nvcc.sh", "#!/bin/sh\nexec '%s' \"$@\"\n" % nvcc, executable = True)
    else:
        rctx.file("nvcc.sh", "#!/bin/sh\necho 'cgc: nvcc not found under %s; set CUDA_PATH' >&2\nexit 1\n" % root, executable = True)
    rctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

# Driver API headers only: cgc resolves every driver entry point at run time.
cc_library(
    name = "cuda_headers",
    hdrs = ["include/cuda.h", "include/cudaTypedefs.h"],
    includes = ["include"],
)

sh_binary(
    name = "nvcc",
    srcs = ["nvcc.sh"],
)
""")

cuda_toolkit = repository_rule(
    implementation = _cuda_toolkit_impl,
    environ = ["CUDA_PATH"],
    local = True,
)
