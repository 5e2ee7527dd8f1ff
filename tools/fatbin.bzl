"""Compiles CUDA C to one fatbin with nvcc and embeds it as a byte array in a C source.

SASS for sm_80 and sm_90 plus PTX for newer chips (docs/DESIGN.md, kernels), so that the
embedded kernels run on Ampere, Hopper and (through the driver's PTX JIT) later GPUs without
nvcc or libcudart at run time.
"""

NVCC_ARCH_FLAGS = " ".join([
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
])

def embedded_fatbin(name, src, symbol, hdrs = [], visibility = None):
    """Makes `name`.c defining `symbol` (the fatbin bytes) and `symbol`_size."""
    native.genrule(
        name = name + "_fatbin",
        srcs = [src] + hdrs,
        outs = [name + ".fatbin"],
        cmd = "$(location @local_cuda//:nvcc) -fatbin -O3 -std=c++17 %s -o $@ $(location %s)" % (NVCC_ARCH_FLAGS, src),
        tools = ["@local_cuda//:nvcc"],
    )
    native.genrule(
        name = name,
        srcs = [":" + name + "_fatbin"],
        outs = [name + ".c"],
        cmd = "$(location //tools:bin2c) %s $< $@" % symbol,
        tools = ["//tools:bin2c"],
        visibility = visibility,
    )
