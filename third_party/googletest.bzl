"""googletest built from the sources Debian's googletest package installs (/usr/src/googletest).

GTEST_SOURCE overrides the location. Nothing is downloaded.
"""

def _googletest_sources_impl(rctx):
    root = rctx.os.environ.get("GTEST_SOURCE", "/usr/src/googletest")
    if not rctx.path(root + "/googletest/src/gtest-all.cc").exists:
        fail("cgc: googletest sources not found at %s; apt-get install googletest, or set GTEST_SOURCE" % root)
    rctx.symlink(root + "/googletest", "googletest")
    rctx.symlink(rctx.attr.build_file, "BUILD")

googletest_sources = repository_rule(
    implementation = _googletest_sources_impl,
    attrs = {"build_file": attr.label(default = "//third_party:googletest.BUILD")},
    environ = ["GTEST_SOURCE"],
    local = True,
)
