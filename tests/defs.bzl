"""cgc_test: a GoogleTest binary linked statically, so that the GPU bundle can copy it to a
machine without Bazel and run it there as it is."""

load("@rules_cc//cc:defs.bzl", "cc_test")

TEST_COPTS = ["-Wall", "-Wextra", "-Werror", "-Wno-missing-field-initializers"]

def cgc_test(name, srcs, deps = [], tags = [], data = [], gpu = False, own_main = False, **kwargs):
    cc_test(
        name = name,
        srcs = srcs,
        copts = TEST_COPTS,
        linkopts = ["-static-libstdc++", "-static-libgcc", "-ldl", "-pthread"],
        linkstatic = True,
        deps = deps + ["@googletest//:gtest" if own_main else "@googletest//:gtest_main"] +
               (["//tests:gpu_test_util"] if gpu else []),
        tags = tags + (["gpu"] if gpu else []),
        data = data,
        **kwargs
    )
