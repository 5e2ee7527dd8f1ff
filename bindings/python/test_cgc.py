"""Tests of cgc.py: CI tests (no GPU needed) and GPU tests (skipped with the reason without one).

Run from this folder:  CGC_LIBRARY=/path/libcgc.so.1 python3 -m unittest -v test_cgc
Child processes get this folder on PYTHONPATH, so nothing depends on the repository's layout.
"""

import array
import ctypes
import gc
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import threading
import unittest
import weakref

import cgc

HERE = os.path.dirname(os.path.abspath(cgc.__file__))


def run_child(code, **env):
    """Runs `code` in a fresh interpreter (driver and library loading are once per process) and
    returns the JSON object it printed last."""
    full = dict(os.environ)
    full.update(env)
    full["PYTHONPATH"] = HERE + os.pathsep + full.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", code], env=full, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
    if r.returncode != 0:
        raise AssertionError("child failed (%d): %s%s" % (r.returncode, r.stdout, r.stderr))
    return json.loads(r.stdout.strip().splitlines()[-1])


def read_abi_description(path):
    """tools/abi_describe's lines: (functions [(name, ret class, [param classes])],
    statuses {name: value}, structs {name: (size, [(field, class, offset, size)])},
    callbacks {type: (ret class, [param classes])})."""
    functions, statuses, structs, callbacks = [], {}, {}, {}
    with open(path) as f:
        for line in f:
            words = line.split()
            if not words:
                continue
            if words[0] == "function":
                functions.append((words[2], words[3], [w.split(":", 1)[1] for w in words[4:]]))
            elif words[0] == "status":
                statuses[words[1]] = int(words[2])
            elif words[0] == "struct":
                structs[words[1]] = (int(words[2]), [])
            elif words[0] == "field":
                structs[words[1]][1].append((words[3], words[4], int(words[5]), int(words[6])))
            elif words[0] == "callback":
                callbacks[words[1]] = (words[2], [w.split(":", 1)[1] for w in words[3:]])
    return functions, statuses, structs, callbacks


def abi_key(cls):
    """A class as the ABI sees it: size_t and uint64_t are one 64-bit type on every platform cgc
    supports, so are ssize_t and int64 (ctypes cannot tell them apart either)."""
    return {"usize": "u64", "isize": "i64"}.get(cls, cls)


def compatible(binding, header):
    """True when a binding's class passes what the header's class expects. "ptr(?)" is a
    pointer whose pointee the binding leaves open (ctypes.c_void_p)."""
    binding, header = abi_key(binding), abi_key(header)
    if binding == header:
        return True
    if binding == "ptr(?)":  # ctypes passes every handle as c_void_p: HANDLE_CLASSES covers their kinds
        return header.startswith(("ptr(", "handle:"))
    if binding.startswith("ptr(") and header.startswith("ptr("):
        return compatible(binding[4:-1], header[4:-1])
    return False


STRUCT_NAMES = {cgc.capture_options_t: "cgc_capture_options_t", cgc.graph_info_t: "cgc_graph_info_t",
                cgc.memory_stats_t: "cgc_memory_stats_t", cgc.comm_id_t: "cgc_comm_id_t",
                cgc.access_policy_t: "cgc_access_policy_t", cgc.mem_op_t: "cgc_mem_op_t",
                cgc.segment_info_t: "cgc_segment_info_t", cgc.block_info_t: "cgc_block_info_t",
                cgc.save_options_t: "cgc_save_options_t", cgc.saved_info_t: "cgc_saved_info_t",
                cgc.restore_options_t: "cgc_restore_options_t"}
# The callback types (ctypes caches CFUNCTYPE classes by signature: two callbacks of one signature
# would be one class, and this table would then need another key).
CALLBACK_NAMES = {cgc.capture_fn: "cgc_capture_fn", cgc.host_fn: "cgc_host_fn"}
# The class that wraps each kind of handle: a handle kind the header gains fails the test until
# the binding wraps it.
HANDLE_CLASSES = {"cgc_context_t": cgc.Context, "cgc_stream_t": cgc.Stream, "cgc_event_t": cgc.Event,
                  "cgc_graph_t": cgc.Graph, "cgc_pool_t": cgc.Pool, "cgc_comm_t": cgc.Comm, "cgc_rng_t": cgc.Rng,
                  "cgc_module_t": cgc.Module, "cgc_function_t": cgc.Function}


def ctypes_class(t):
    """The class (as tools/abi_describe names them) of a ctypes type."""
    if t is None:
        return "void"
    if t is ctypes.c_void_p:
        return "ptr(?)"
    if t is ctypes.c_char_p:
        return "ptr(i8)"
    if t in STRUCT_NAMES:
        return "struct:" + STRUCT_NAMES[t]
    if t in CALLBACK_NAMES:
        return "fnptr:" + CALLBACK_NAMES[t]
    if isinstance(t, type) and issubclass(t, ctypes._Pointer):
        return "ptr(%s)" % ctypes_class(t._type_)
    if isinstance(t, type) and issubclass(t, ctypes._CFuncPtr):
        return "fnptr:?"  # a callback type missing from CALLBACK_NAMES: matches no header class
    if isinstance(t, type) and issubclass(t, ctypes.Array):
        return "array(%d,%s)" % (t._length_, ctypes_class(t._type_))
    if t is ctypes.c_float:
        return "f32"
    if t is ctypes.c_char:
        return "i8"
    signed = t(-1).value < 0
    return ("i%d" if signed else "u%d") % (8 * ctypes.sizeof(t))


class AbiDescriptionTest(unittest.TestCase):
    """The module's function table, structs and status codes against capi/cgc.h's own lists, as
    tools/abi_describe prints them: a parameter changed in one place only fails here."""

    @classmethod
    def setUpClass(cls):
        path = os.environ.get("CGC_ABI_DESCRIPTION")
        if not path:
            raise unittest.SkipTest("CGC_ABI_DESCRIPTION is not set (Bazel's test and the GPU bundle set it)")
        cls.functions, cls.statuses, cls.structs, cls.callbacks = read_abi_description(path)

    def test_the_table_has_the_header_functions_in_order_with_their_types(self):
        self.assertEqual([p[0] for p in cgc._PROTOTYPES], [f[0] for f in self.functions])
        for (name, restype, argtypes), (_, ret, params) in zip(cgc._PROTOTYPES, self.functions):
            self.assertTrue(compatible(ctypes_class(restype), ret),
                            "%s returns %s in the header, %s here" % (name, ret, ctypes_class(restype)))
            self.assertEqual(len(argtypes), len(params), "%s: number of parameters" % name)
            for i, (argtype, param) in enumerate(zip(argtypes, params)):
                self.assertTrue(compatible(ctypes_class(argtype), param),
                                "%s parameter %d is %s in the header, %s here" % (name, i, param, ctypes_class(argtype)))

    def test_structs_have_the_header_layout(self):
        self.assertEqual(sorted(STRUCT_NAMES.values()), sorted(self.structs), "the header's public structs")
        for struct_type, c_name in STRUCT_NAMES.items():
            size, fields = self.structs[c_name]
            self.assertEqual(ctypes.sizeof(struct_type), size, c_name)
            self.assertEqual([f[0] for f in struct_type._fields_], [f[0] for f in fields], c_name)
            for (name, ctype), (_, cls, offset, field_size) in zip(struct_type._fields_, fields):
                self.assertEqual(getattr(struct_type, name).offset, offset, "%s.%s" % (c_name, name))
                self.assertEqual(getattr(struct_type, name).size, field_size, "%s.%s" % (c_name, name))
                self.assertTrue(compatible(ctypes_class(ctype), cls), "%s.%s is %s" % (c_name, name, cls))

    def test_status_codes_are_the_header_ones(self):
        self.assertEqual({s.c_name: int(s) for s in cgc.Status}, self.statuses)

    def test_callbacks_have_the_header_signatures(self):
        self.assertEqual(sorted(CALLBACK_NAMES.values()), sorted(self.callbacks), "the header's callback types")
        for fn_type, c_name in CALLBACK_NAMES.items():
            ret, params = self.callbacks[c_name]
            self.assertTrue(compatible(ctypes_class(fn_type._restype_), ret), "%s returns %s" % (c_name, ret))
            self.assertEqual(len(fn_type._argtypes_), len(params), "%s: number of parameters" % c_name)
            for i, (argtype, param) in enumerate(zip(fn_type._argtypes_, params)):
                self.assertTrue(compatible(ctypes_class(argtype), param),
                                "%s parameter %d is %s in the header, %s here" % (c_name, i, param, ctypes_class(argtype)))

    def test_every_handle_kind_has_its_class(self):
        kinds = set()
        for _, ret, params in self.functions:
            for cls in [ret] + params:
                while cls.startswith("ptr("):
                    cls = cls[4:-1]
                if cls.startswith("handle:"):
                    kinds.add(cls[len("handle:"):])
        for _, (ret, params) in self.callbacks.items():
            kinds.update(p[len("handle:"):] for p in params if p.startswith("handle:"))
        self.assertEqual(sorted(HANDLE_CLASSES), sorted(kinds), "the header's handle kinds")

    def test_graph_info_has_the_header_node_kinds(self):
        # GraphInfo is graph_info_t without struct_size, so every count the header adds shows up.
        self.assertEqual(list(cgc.GraphInfo._fields), [f[0] for f in self.structs["cgc_graph_info_t"][1]][1:])

    def test_saved_info_has_the_header_fields(self):
        # SavedInfo is saved_info_t without struct_size, so a field the header appends (1.6's
        # restore_bytes and family_restore_bytes) shows up in it.
        self.assertEqual(list(cgc.SavedInfo._fields), [f[0] for f in self.structs["cgc_saved_info_t"][1]][1:])

    def test_the_module_is_the_headers_version(self):
        # The description's first line is the header's CGC_VERSION; cgc.py's version (also the
        # wheel's) is the ABI version it wraps.
        with open(os.environ["CGC_ABI_DESCRIPTION"]) as f:
            versions = [line.split()[1] for line in f if line.startswith("version ")]
        self.assertEqual(versions, ["%d.%d.%d" % (cgc.VERSION_MAJOR, cgc.VERSION_MINOR, cgc.VERSION_PATCH)])


class LoadingTest(unittest.TestCase):
    def test_library_loads_and_is_version_1(self):
        major, minor, patch = cgc.version()
        self.assertEqual(major, 1)
        self.assertGreaterEqual(minor, 0)
        # The table this module calls through is complete and is the library's own functions.
        lib = cgc.api()
        self.assertGreaterEqual(lib.table.contents.struct_size, ctypes.sizeof(cgc.api_t))
        # 1.0's, then 1.1's, 1.2's, 1.3's, 1.4's, 1.5's and 1.6's
        self.assertEqual(len(cgc._PROTOTYPES), 63 + 29 + 4 + 1 + 3 + 2 + 10)
        for name, _, _ in cgc._PROTOTYPES:
            via_table = ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
            via_dlsym = ctypes.cast(getattr(lib.dll, name), ctypes.c_void_p).value
            self.assertEqual(via_table, via_dlsym, name)

    def test_missing_library_gives_clear_error(self):
        out = run_child(
            "import cgc, json\n"
            "try:\n"
            "    cgc.version(); print(json.dumps({'raised': False}))\n"
            "except cgc.LibraryError as e:\n"
            "    print(json.dumps({'raised': True, 'message': str(e), 'status': e.status}))\n",
            CGC_LIBRARY="/nonexistent/libcgc.so.1")
        self.assertTrue(out["raised"])
        self.assertIsNone(out["status"])
        self.assertIn("/nonexistent/libcgc.so.1", out["message"])
        self.assertIn("CGC_LIBRARY", out["message"])

    def test_import_does_not_load(self):
        # `import cgc` must work without the library; only a call loads it.
        out = run_child("import cgc, json; print(json.dumps({'loaded': cgc._loaded is not None}))",
                        CGC_LIBRARY="/nonexistent/libcgc.so.1")
        self.assertFalse(out["loaded"])


class NoDriverTest(unittest.TestCase):
    def test_device_count_without_driver(self):
        out = run_child(
            "import cgc, json\n"
            "try:\n"
            "    cgc.device_count(); print(json.dumps({'raised': False}))\n"
            "except cgc.NoDriverError as e:\n"
            "    print(json.dumps({'raised': True, 'status': int(e.status), 'message': e.message,\n"
            "                      'is_status': isinstance(e.status, cgc.Status)}))\n",
            CGC_CUDA_DRIVER="/nonexistent/libcuda.so.1")
        self.assertTrue(out["raised"])
        self.assertEqual(out["status"], cgc.Status.NO_DRIVER)
        self.assertTrue(out["is_status"])
        self.assertIn("cgc_device_count", out["message"])
        self.assertIn("CGC_CUDA_DRIVER", out["message"])
        self.assertIn("/nonexistent/libcuda.so.1", out["message"])


class StatusTest(unittest.TestCase):
    def test_every_code_maps_both_ways(self):
        self.assertEqual(len(cgc.Status), 18)
        for code in range(18):
            status = cgc.Status.of(code)
            self.assertIsInstance(status, cgc.Status)
            self.assertEqual(int(status), code)
            self.assertTrue(cgc.status_string(code).startswith(status.c_name), cgc.status_string(code))
            err = cgc.Error(code, "message")
            self.assertEqual(err.status, status)
            self.assertIsInstance(err, cgc.Error)
            if code:
                self.assertIsNot(type(err), cgc.Error)  # its own subclass
        self.assertTrue(cgc.status_string(1).startswith("CGC_ERROR_INVALID_ARGUMENT"))
        self.assertIsInstance(cgc.Error(9, "x"), cgc.CaptureUnjoinedError)
        self.assertIsInstance(cgc.Error(6, "x"), MemoryError)
        self.assertIsInstance(cgc.Error(1, "x"), ValueError)
        # 1.6's saved graphs
        self.assertIsInstance(cgc.Error(16, "x"), cgc.NotSavableError)
        self.assertIsInstance(cgc.Error(17, "x"), cgc.SavedMismatchError)
        self.assertEqual((cgc.Status.NOT_SAVABLE.c_name, cgc.Status.SAVED_MISMATCH.c_name),
                         ("CGC_ERROR_NOT_SAVABLE", "CGC_ERROR_SAVED_MISMATCH"))
        self.assertIn("SavedMismatchError", cgc.__all__)

    def test_unknown_code_is_kept(self):
        self.assertEqual(cgc.Status.of(99), 99)
        self.assertNotIsInstance(cgc.Status.of(99), cgc.Status)
        err = cgc.Error(99, "from a newer library")
        self.assertIs(type(err), cgc.Error)
        self.assertEqual(err.status, 99)
        self.assertIn("99", str(err))
        self.assertIn("UNKNOWN", cgc.status_string(99))


class LastStatusTest(unittest.TestCase):
    """1.6: cgc.last_status() is the status that goes with this thread's last message: after a
    failed call, the status it returned (on each thread apart); a success leaves it."""

    def test_the_table_ends_with_the_1_6_functions(self):
        self.assertEqual([p[0] for p in cgc._PROTOTYPES[63 + 29 + 4 + 1 + 3 + 2:]],
                         ["cgc_last_status", "cgc_memory_snapshot", "cgc_pool_claim", "cgc_pool_create_at",
                          "cgc_graphs_save", "cgc_saved_info", "cgc_graphs_restore", "cgc_module_add_image",
                          "cgc_graph_share_executable", "cgc_module_record"])
        self.assertEqual((cgc.VERSION_MAJOR, cgc.VERSION_MINOR), (1, 6))
        self.assertIn("last_status", cgc.__all__)

    def test_the_failed_calls_status_on_each_thread(self):
        lib, seen = cgc.api(), {}

        def first():
            seen["fresh"] = cgc.last_status()  # nothing failed on this thread yet
            seen["returned"] = lib.cgc_stream_destroy(None)
            seen["after"] = cgc.last_status()
            cgc.free(None)  # succeeds: leaves it
            seen["after success"] = cgc.last_status()
            try:
                cgc.free(0xDEAD00)
            except cgc.Error as e:
                seen["raised"], seen["after raise"] = e.status, cgc.last_status()

        def second():
            seen["other fresh"] = cgc.last_status()  # the first thread's failures are not this one's
            seen["other returned"] = lib.cgc_capture_begin(FOREIGN, None)
            seen["other after"] = cgc.last_status()

        for body in (first, second):
            t = threading.Thread(target=body)
            t.start()
            t.join()
        self.assertIs(seen["fresh"], cgc.Status.SUCCESS)
        self.assertEqual(seen["returned"], cgc.Status.INVALID_ARGUMENT)
        self.assertIs(seen["after"], cgc.Status.INVALID_ARGUMENT)
        self.assertIs(seen["after success"], cgc.Status.INVALID_ARGUMENT)
        self.assertIs(seen["raised"], cgc.Status.INVALID_ARGUMENT)
        self.assertIs(seen["after raise"], seen["raised"])
        self.assertIs(seen["other fresh"], cgc.Status.SUCCESS)
        self.assertEqual(seen["other returned"], cgc.Status.INVALID_HANDLE)
        self.assertIs(seen["other after"], cgc.Status.INVALID_HANDLE)

    def test_without_a_driver(self):
        # cgc_torch_malloc returns no status: NULL, and last_status() says why.
        out = run_child(
            "import cgc, json\n"
            "lib, out = cgc.api(), {}\n"
            "try:\n"
            "    cgc.device_count()\n"
            "except cgc.NoDriverError:\n"
            "    out['device_count'] = int(cgc.last_status())\n"
            "out['null'] = lib.cgc_torch_malloc(1024, 0, None) is None\n"
            "out['torch_malloc'] = int(cgc.last_status())\n"
            "lib.cgc_torch_malloc(-1, 0, None)\n"
            "out['negative'] = int(cgc.last_status())\n"
            "print(json.dumps(out))\n",
            CGC_CUDA_DRIVER="/nonexistent/libcuda.so.1")
        self.assertEqual(out, {"device_count": cgc.Status.NO_DRIVER, "null": True,
                               "torch_malloc": cgc.Status.NO_DRIVER, "negative": cgc.Status.INVALID_ARGUMENT})


class BadCallTest(unittest.TestCase):
    def test_null_handles_are_refused_by_the_library(self):
        lib = cgc.api()
        self.assertEqual(lib.cgc_graph_launch(None, None), cgc.Status.INVALID_ARGUMENT)
        self.assertIn("cgc_graph_launch", lib.cgc_last_error().decode())
        self.assertEqual(lib.cgc_stream_destroy(None), cgc.Status.INVALID_ARGUMENT)
        self.assertEqual(lib.cgc_capture_begin(None, None), cgc.Status.INVALID_ARGUMENT)

    def test_foreign_pointer_free(self):
        with self.assertRaises(cgc.InvalidArgumentError) as cm:
            cgc.free(0xDEAD00)
        self.assertEqual(cm.exception.status, cgc.Status.INVALID_ARGUMENT)
        self.assertIn("cgc_free", cm.exception.message)
        cgc.free(None)  # NULL is a no-op
        cgc.free(0)

    def test_empty_and_closed_graph_are_refused_by_the_binding(self):
        g = cgc.Graph()
        with self.assertRaises(cgc.InvalidStateError):
            g.replay()
        with self.assertRaises(cgc.InvalidStateError):
            g.info()
        with self.assertRaises(cgc.InvalidStateError):
            g.capture_end()
        self.assertEqual(g.native, 0)
        g.close()
        g.close()  # twice is fine
        with self.assertRaises(cgc.InvalidHandleError) as cm:
            g.info()
        self.assertEqual(cm.exception.status, cgc.Status.INVALID_HANDLE)

    def test_bad_capture_mode(self):
        with self.assertRaises(cgc.InvalidArgumentError):
            cgc.graph(cgc.Graph(), stream=None, mode="sometimes")

    def test_structs_carry_their_size(self):
        self.assertEqual(cgc.capture_options_t().struct_size, ctypes.sizeof(cgc.capture_options_t))
        self.assertEqual(cgc.graph_info_t().struct_size, ctypes.sizeof(cgc.graph_info_t))
        self.assertEqual(cgc.memory_stats_t().struct_size, ctypes.sizeof(cgc.memory_stats_t))


# Memory that is not a cgc object (its first word is no cgc magic): what a foreign or wrong-kind
# handle looks like to the library, which reads that word before anything else.
NOT_AN_OBJECT = ctypes.create_string_buffer(b"\x5a" * 256)
FOREIGN = ctypes.addressof(NOT_AN_OBJECT)


def foreign(cls):
    """An object of handle class `cls` around FOREIGN, as a wrong or stale handle would be."""
    obj = cls.__new__(cls)
    obj._h = FOREIGN
    return obj


def forget(*objs):
    """Drops the foreign handles, so that no __del__ hands them to a destroy function."""
    for obj in objs:
        obj._h = None


class ExpectMixin(object):
    """Assertions on refused calls, for the raw table and for the binding."""

    def expect(self, status, function, call, *words):
        """call() returns `status` with a message that names `function` (and `words`)."""
        st = call()
        message = cgc.api().cgc_last_error().decode()
        self.assertEqual(st, status, "%s: %s" % (function, message))
        self.assertIn(function, message)
        for word in words:
            self.assertIn(word, message, function)

    def expect_raise(self, error, function, call, *words):
        """call() raises `error` whose message names `function` (and `words`)."""
        with self.assertRaises(error) as cm:
            call()
        self.assertIn(function, cm.exception.message)
        for word in words:
            self.assertIn(word, cm.exception.message, function)
        return cm.exception


class WorkBadCallTest(ExpectMixin, unittest.TestCase):
    """The 1.1 functions' bad arguments without a GPU: the library checks handles (and the
    arguments before them) first, and this module refuses values ctypes would silently cut. The
    checks after a valid handle (flags, enums, alignment, sizes) run in GpuWorkTest."""

    def test_null_handles_are_invalid_arguments(self):
        lib, A = cgc.api(), cgc.Status.INVALID_ARGUMENT
        i, u, out = ctypes.c_int(), ctypes.c_uint64(), ctypes.c_void_p()
        policy = cgc.access_policy_t()
        op = cgc.mem_op_t(kind=cgc.MemOpKind.WRITE_VALUE_32, address=FOREIGN)
        cases = [
            ("cgc_stream_priority_range", lambda: lib.cgc_stream_priority_range(None, ctypes.byref(i), ctypes.byref(i))),
            ("cgc_stream_priority", lambda: lib.cgc_stream_priority(None, ctypes.byref(i))),
            ("cgc_stream_id", lambda: lib.cgc_stream_id(None, ctypes.byref(u))),
            ("cgc_stream_device", lambda: lib.cgc_stream_device(None, ctypes.byref(i), None)),
            ("cgc_stream_copy_attributes", lambda: lib.cgc_stream_copy_attributes(None, None)),
            ("cgc_stream_set_access_policy", lambda: lib.cgc_stream_set_access_policy(None, ctypes.byref(policy))),
            ("cgc_stream_get_access_policy", lambda: lib.cgc_stream_get_access_policy(None, ctypes.byref(policy))),
            ("cgc_host_alloc", lambda: lib.cgc_host_alloc(None, 64, 0, ctypes.byref(out))),
            ("cgc_host_register", lambda: lib.cgc_host_register(None, FOREIGN, 64, 0)),
            ("cgc_host_unregister", lambda: lib.cgc_host_unregister(None)),
            ("cgc_memcpy_htod_async", lambda: lib.cgc_memcpy_htod_async(FOREIGN, FOREIGN, 4, None)),
            ("cgc_memcpy_dtoh_async", lambda: lib.cgc_memcpy_dtoh_async(FOREIGN, FOREIGN, 4, None)),
            ("cgc_memcpy_dtod_async", lambda: lib.cgc_memcpy_dtod_async(FOREIGN, FOREIGN, 4, None)),
            ("cgc_memset_d8_async", lambda: lib.cgc_memset_d8_async(FOREIGN, 1, 4, None)),
            ("cgc_memset_d16_async", lambda: lib.cgc_memset_d16_async(FOREIGN, 1, 4, None)),
            ("cgc_memset_d32_async", lambda: lib.cgc_memset_d32_async(FOREIGN, 1, 4, None)),
            ("cgc_stream_write_value32", lambda: lib.cgc_stream_write_value32(None, FOREIGN, 1, 0)),
            ("cgc_stream_write_value64", lambda: lib.cgc_stream_write_value64(None, FOREIGN, 1, 0)),
            ("cgc_stream_wait_value32", lambda: lib.cgc_stream_wait_value32(None, FOREIGN, 1, 0)),
            ("cgc_stream_wait_value64", lambda: lib.cgc_stream_wait_value64(None, FOREIGN, 1, 0)),
            ("cgc_stream_batch_mem_op", lambda: lib.cgc_stream_batch_mem_op(None, ctypes.byref(op), 1)),
            ("cgc_module_load", lambda: lib.cgc_module_load(None, b"ptx\\0", ctypes.byref(out))),
            ("cgc_module_unload", lambda: lib.cgc_module_unload(None)),
            ("cgc_module_get_function", lambda: lib.cgc_module_get_function(None, b"scale_add", ctypes.byref(out))),
            ("cgc_function_get_attribute", lambda: lib.cgc_function_get_attribute(None, 0, ctypes.byref(i))),
            ("cgc_function_set_attribute", lambda: lib.cgc_function_set_attribute(None, 8, 0)),
            ("cgc_launch_kernel", lambda: lib.cgc_launch_kernel(None, 1, 1, 1, 1, 1, 1, 0, None, None)),
        ]
        for function, call in cases:
            self.expect(A, function, call, "NULL")
        self.assertEqual(lib.cgc_host_free(None), cgc.Status.SUCCESS)  # like free(NULL)
        # Every 1.1 function is here or in the host-function test below.
        self.assertEqual({c[0] for c in cases} | {"cgc_host_free", "cgc_launch_host_func"},
                         {p[0] for p in cgc._PROTOTYPES[63:63 + 29]})

    def test_foreign_handles_are_invalid_handles_naming_the_kind(self):
        lib, H = cgc.api(), cgc.Status.INVALID_HANDLE
        i, u, out = ctypes.c_int(), ctypes.c_uint64(), ctypes.c_void_p()
        policy = cgc.access_policy_t()
        cases = [
            ("cgc_stream_priority_range", "context", lambda: lib.cgc_stream_priority_range(FOREIGN, ctypes.byref(i), ctypes.byref(i))),
            ("cgc_stream_priority", "stream", lambda: lib.cgc_stream_priority(FOREIGN, ctypes.byref(i))),
            ("cgc_stream_id", "stream", lambda: lib.cgc_stream_id(FOREIGN, ctypes.byref(u))),
            ("cgc_stream_device", "stream", lambda: lib.cgc_stream_device(FOREIGN, None, None)),
            ("cgc_stream_copy_attributes", "stream", lambda: lib.cgc_stream_copy_attributes(FOREIGN, FOREIGN)),
            ("cgc_stream_set_access_policy", "stream", lambda: lib.cgc_stream_set_access_policy(FOREIGN, ctypes.byref(policy))),
            ("cgc_stream_get_access_policy", "stream", lambda: lib.cgc_stream_get_access_policy(FOREIGN, ctypes.byref(policy))),
            ("cgc_host_alloc", "context", lambda: lib.cgc_host_alloc(FOREIGN, 64, 0, ctypes.byref(out))),
            ("cgc_host_register", "context", lambda: lib.cgc_host_register(FOREIGN, FOREIGN, 64, 0)),
            ("cgc_memcpy_htod_async", "stream", lambda: lib.cgc_memcpy_htod_async(FOREIGN, FOREIGN, 4, FOREIGN)),
            ("cgc_memset_d32_async", "stream", lambda: lib.cgc_memset_d32_async(FOREIGN, 1, 4, FOREIGN)),
            ("cgc_stream_write_value32", "stream", lambda: lib.cgc_stream_write_value32(FOREIGN, FOREIGN, 1, 0)),
            ("cgc_module_load", "context", lambda: lib.cgc_module_load(FOREIGN, b"ptx\\0", ctypes.byref(out))),
            ("cgc_module_unload", "module", lambda: lib.cgc_module_unload(FOREIGN)),
            ("cgc_module_get_function", "module", lambda: lib.cgc_module_get_function(FOREIGN, b"f", ctypes.byref(out))),
            ("cgc_function_get_attribute", "function", lambda: lib.cgc_function_get_attribute(FOREIGN, 0, ctypes.byref(i))),
            ("cgc_function_set_attribute", "function", lambda: lib.cgc_function_set_attribute(FOREIGN, 8, 0)),
            ("cgc_launch_kernel", "function", lambda: lib.cgc_launch_kernel(FOREIGN, 1, 1, 1, 1, 1, 1, 0, FOREIGN, None)),
        ]
        for function, kind, call in cases:
            self.expect(H, function, call, "not a live cgc %s handle" % kind)

    def test_null_outputs_are_refused_and_outputs_cleared(self):
        lib, A = cgc.api(), cgc.Status.INVALID_ARGUMENT
        self.expect(A, "cgc_host_alloc", lambda: lib.cgc_host_alloc(FOREIGN, 64, 0, None), "out is NULL")
        self.expect(A, "cgc_module_load", lambda: lib.cgc_module_load(FOREIGN, b"x\\0", None), "out is NULL")
        self.expect(A, "cgc_module_get_function", lambda: lib.cgc_module_get_function(FOREIGN, b"f", None))
        self.expect(A, "cgc_stream_id", lambda: lib.cgc_stream_id(FOREIGN, None))
        self.expect(A, "cgc_function_get_attribute", lambda: lib.cgc_function_get_attribute(FOREIGN, 0, None))
        for function in ("cgc_host_alloc", "cgc_module_load"):
            out = ctypes.c_void_p(FOREIGN)
            if function == "cgc_host_alloc":
                lib.cgc_host_alloc(None, 64, 0, ctypes.byref(out))
            else:
                lib.cgc_module_load(None, b"x\\0", ctypes.byref(out))
            self.assertIsNone(out.value, "%s leaves its output NULL on failure" % function)

    def test_a_failed_host_func_call_releases_once_and_never_calls(self):
        lib = cgc.api()
        calls, releases = [], []
        fn = cgc.host_fn(lambda user: calls.append(user))
        release = cgc.host_fn(lambda user: releases.append(user))
        self.expect(cgc.Status.INVALID_ARGUMENT, "cgc_launch_host_func",
                    lambda: lib.cgc_launch_host_func(None, fn, 42, release), "stream is NULL")
        self.expect(cgc.Status.INVALID_HANDLE, "cgc_launch_host_func",
                    lambda: lib.cgc_launch_host_func(FOREIGN, fn, 43, release), "not a live cgc stream handle")
        self.expect(cgc.Status.INVALID_ARGUMENT, "cgc_launch_host_func",  # a NULL fn as well
                    lambda: lib.cgc_launch_host_func(None, cgc.host_fn(), 44, release))  # host_fn(): NULL
        self.assertEqual(calls, [])
        self.assertEqual(releases, [42, 43, 44])

    def test_the_binding_frees_a_refused_host_function(self):
        stream = foreign(cgc.Stream)
        before = cgc.pending_host_funcs()

        def never_called():
            raise AssertionError("a refused host function ran")
        alive = weakref.ref(never_called)
        with self.assertRaises(cgc.InvalidHandleError) as cm:
            stream.launch_host_func(never_called)
        self.assertIn("cgc_launch_host_func", cm.exception.message)
        del never_called, cm  # the traceback refers to the frame, and so to the callable
        self.assertEqual(cgc.pending_host_funcs(), before)  # the release removed it
        self.assertIsNone(alive(), "the refused callable is still referenced")
        self.expect_raise(cgc.InvalidArgumentError, "cgc_launch_host_func", lambda: stream.launch_host_func(42),
                          "callable")
        forget(stream)

    def test_values_ctypes_would_cut_are_refused_before_the_call(self):
        stream = foreign(cgc.Stream)
        err = cgc.InvalidArgumentError
        self.expect_raise(err, "cgc_memset_d8_async", lambda: stream.memset_d8(FOREIGN, 256, 4), "256")
        self.expect_raise(err, "cgc_memset_d16_async", lambda: stream.memset_d16(FOREIGN, 1 << 16, 4))
        self.expect_raise(err, "cgc_memset_d32_async", lambda: stream.memset_d32(FOREIGN, -1, 4))
        self.expect_raise(err, "cgc_memset_d32_async", lambda: stream.memset_d32(FOREIGN, 1.5, 4), "integer")
        self.expect_raise(err, "cgc_memset_d8_async", lambda: stream.memset_d8(FOREIGN, 0, -1), "count")
        self.expect_raise(err, "cgc_memset_d8_async", lambda: stream.memset_d8(FOREIGN, 0, 1 << 64), "count")
        self.expect_raise(err, "cgc_stream_write_value32", lambda: stream.write_value32(FOREIGN, 1 << 32))
        self.expect_raise(err, "cgc_stream_write_value64", lambda: stream.write_value64(FOREIGN, 1 << 64))
        self.expect_raise(err, "cgc_stream_wait_value32", lambda: stream.wait_value32(FOREIGN, 1, flags=-1), "flags")
        self.expect_raise(err, "cgc_stream_wait_value64", lambda: stream.wait_value64(FOREIGN, -1))
        self.expect_raise(err, "cgc_memcpy_dtod_async", lambda: stream.memcpy_dtod(FOREIGN, FOREIGN, -4), "nbytes")
        self.expect_raise(err, "cgc_stream_set_access_policy",
                          lambda: stream.set_access_policy(FOREIGN, 64, hit_property="sticky"), "sticky", "persisting")
        self.expect_raise(err, "cgc_stream_set_access_policy",
                          lambda: stream.set_access_policy(FOREIGN, 64, miss_property=1 << 40))
        self.expect_raise(err, "cgc_stream_batch_mem_op", lambda: stream.batch_mem_op([(1, FOREIGN, 0, 0)]),
                          "ops[0]", "MemOp")
        self.expect_raise(err, "cgc_stream_batch_mem_op",
                          lambda: stream.batch_mem_op([cgc.MemOp.write32(FOREIGN, 1), cgc.MemOp("poke", FOREIGN)]),
                          "ops[1].kind", "poke")
        self.expect_raise(err, "cgc_stream_batch_mem_op",
                          lambda: stream.batch_mem_op([cgc.MemOp.wait64(FOREIGN, 1 << 64)]), "ops[0].value")
        # What passes these checks reaches the library, which refuses the foreign stream.
        self.expect_raise(cgc.InvalidHandleError, "cgc_memset_d8_async", lambda: stream.memset_d8(FOREIGN, 255, 4))
        self.expect_raise(cgc.InvalidHandleError, "cgc_stream_batch_mem_op",
                          lambda: stream.batch_mem_op([cgc.MemOp.write32(FOREIGN, 1)]))
        forget(stream)

    def test_host_buffers_too_small_or_unusable_are_refused(self):
        stream = foreign(cgc.Stream)
        err = cgc.InvalidArgumentError
        pageable = bytearray(16)
        self.expect_raise(err, "cgc_memcpy_htod_async", lambda: stream.memcpy_htod(FOREIGN, pageable, 17),
                          "nbytes (17)", "16 bytes")
        self.expect_raise(err, "cgc_memcpy_dtoh_async", lambda: stream.memcpy_dtoh((ctypes.c_float * 2)(), FOREIGN, 12),
                          "8 bytes")
        self.expect_raise(err, "cgc_memcpy_dtoh_async", lambda: stream.memcpy_dtoh(b"read only", FOREIGN), "read-only")
        self.expect_raise(err, "cgc_memcpy_htod_async", lambda: stream.memcpy_htod(FOREIGN, 1.5), "float")
        self.expect_raise(err, "cgc_memcpy_htod_async", lambda: stream.memcpy_htod(FOREIGN, FOREIGN), "nbytes is needed")
        self.expect_raise(err, "cgc_memcpy_htod_async",
                          lambda: stream.memcpy_htod(FOREIGN, memoryview(bytearray(16))[::2]), "contiguous")
        # Well-formed copies reach the library; afterwards the buffer is no longer exported.
        for src in (pageable, b"bytes", array.array("f", [1.0, 2.0]), (ctypes.c_uint32 * 4)(), memoryview(b"ro")):
            self.expect_raise(cgc.InvalidHandleError, "cgc_memcpy_htod_async", lambda: stream.memcpy_htod(FOREIGN, src))
        self.expect_raise(cgc.InvalidHandleError, "cgc_memcpy_dtoh_async", lambda: stream.memcpy_dtoh(pageable, FOREIGN))
        pageable.extend(b"resizable again")
        forget(stream)

    def test_module_function_and_host_buffer_arguments(self):
        ctx = foreign(cgc.Context)
        self.expect_raise(cgc.InvalidHandleError, "cgc_module_load", lambda: cgc.Module(ctx, ".version 8.0\n"), "context")
        self.expect_raise(cgc.InvalidArgumentError, "cgc_module_load", lambda: cgc.Module(ctx, 42), "int")
        self.expect_raise(cgc.InvalidHandleError, "cgc_host_alloc", lambda: cgc.HostBuffer(ctx, 64), "context")
        self.expect_raise(cgc.InvalidArgumentError, "cgc_host_alloc", lambda: cgc.HostBuffer(ctx, -1), "nbytes")
        pinned = bytearray(64)
        self.expect_raise(cgc.InvalidHandleError, "cgc_host_register", lambda: cgc.HostBuffer.register(ctx, pinned),
                          "context")
        pinned.extend(b"not exported after the failure")
        self.expect_raise(cgc.InvalidArgumentError, "cgc_host_register", lambda: cgc.HostBuffer.register(ctx, b"ro"),
                          "read-only")
        self.expect_raise(cgc.InvalidArgumentError, "cgc_host_register",
                          lambda: cgc.HostBuffer.register(ctx, bytearray(8), nbytes=9), "nbytes (9)")

        module, stream = foreign(cgc.Module), foreign(cgc.Stream)
        module._functions = {}
        self.expect_raise(cgc.InvalidHandleError, "cgc_module_get_function", lambda: module.function("scale_add"),
                          "module")
        function = cgc.Function(module, "scale_add", FOREIGN)
        err = cgc.InvalidArgumentError
        launch = function.launch
        self.expect_raise(err, "cgc_launch_kernel", lambda: launch(1 << 32, 1, [], stream), "grid dimension 0")
        self.expect_raise(err, "cgc_launch_kernel", lambda: launch((1, 1, 1, 1), 1, [], stream), "4 dimensions")
        self.expect_raise(err, "cgc_launch_kernel", lambda: launch(1, (1, -1), [], stream), "block dimension 1")
        self.expect_raise(err, "cgc_launch_kernel", lambda: launch(1, 1, [ctypes.c_float(1), 7], stream),
                          "args[1] is a int", "ctypes")
        self.expect_raise(err, "cgc_launch_kernel", lambda: launch(1, 1, [], stream, shared_bytes=1 << 32),
                          "shared_bytes")
        self.expect_raise(cgc.InvalidHandleError, "cgc_launch_kernel",
                          lambda: launch((2, 2), 32, [ctypes.c_void_p(FOREIGN), ctypes.c_uint32(4)], stream),
                          "function")
        self.expect_raise(err, "cgc_function_get_attribute", lambda: function.get_attribute("registers"),
                          "num_regs")
        self.expect_raise(err, "cgc_function_set_attribute",
                          lambda: function.set_attribute(cgc.FunctionAttribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, 1 << 31))
        self.expect_raise(cgc.InvalidHandleError, "cgc_function_get_attribute",
                          lambda: function.get_attribute("num_regs"), "function")
        # A closed module's functions are refused here: their handles died with it.
        module._h = None
        with self.assertRaises(cgc.InvalidHandleError) as cm:
            function.launch(1, 1, [], stream)
        self.assertIn("scale_add", cm.exception.message)
        self.assertTrue(function.closed)
        forget(ctx, stream)

    def test_mem_op_and_enum_helpers(self):
        op = cgc.MemOp.wait32(FOREIGN, 7, cgc.WAIT_EQ)
        self.assertEqual(op, (cgc.MemOpKind.WAIT_VALUE_32, FOREIGN, 7, cgc.WAIT_EQ))
        self.assertEqual(cgc.MemOp.flush_remote_writes(), (cgc.MemOpKind.FLUSH_REMOTE_WRITES, None, 0, 0))
        self.assertEqual(cgc.MemOp(cgc.MemOpKind.WRITE_VALUE_64, FOREIGN).value, 0)
        self.assertEqual(cgc.MemOp.barrier(), (cgc.MemOpKind.BARRIER, None, 0, cgc.BARRIER_SYSTEM))
        self.assertEqual(cgc.MemOp.barrier(gpu_scope=True), (cgc.MemOpKind.BARRIER, None, 0, cgc.BARRIER_GPU))
        self.assertEqual(ctypes.sizeof(cgc.mem_op_t), 24)
        self.assertEqual(cgc.access_policy_t().struct_size, ctypes.sizeof(cgc.access_policy_t))
        self.assertEqual(cgc.graph_info_t().struct_size, 176)  # 1.6 appended family_size and family_result
        # The enums carry the header's values (CUDA's own).
        self.assertEqual([int(m) for m in cgc.MemOpKind], [1, 2, 3, 4, 5, 6])
        self.assertEqual(cgc.FunctionAttribute.PREFERRED_SHARED_MEMORY_CARVEOUT, 9)
        self.assertEqual(cgc.AccessProperty.PERSISTING, 2)
        self.assertEqual((cgc.WAIT_GEQ, cgc.WAIT_EQ, cgc.WAIT_AND, cgc.WAIT_NOR, cgc.WAIT_FLUSH),
                         (0, 1, 2, 3, 0x40000000))
        self.assertEqual((cgc.BARRIER_SYSTEM, cgc.BARRIER_GPU), (0, 1))


class UpdateBadCallTest(ExpectMixin, unittest.TestCase):
    """1.2 without a GPU: the per-node updates and a capture that updates a graph refuse NULL and
    foreign handles by name (the library checks handles first), and the binding refuses what it
    can tell is wrong before the call."""

    def test_null_and_foreign_graphs_are_refused_by_name(self):
        lib = cgc.api()
        args = (ctypes.c_void_p * 1)()
        for function, call in (
                ("cgc_graph_kernel_node_set_enabled", lambda g: lib.cgc_graph_kernel_node_set_enabled(g, 0, 0)),
                ("cgc_graph_kernel_node_set_args", lambda g: lib.cgc_graph_kernel_node_set_args(g, 0, args))):
            self.expect(cgc.Status.INVALID_ARGUMENT, function, lambda: call(None), "NULL")
            self.expect(cgc.Status.INVALID_HANDLE, function, lambda: call(FOREIGN), "not a live cgc graph handle")
        # The handle is checked before the arguments: a foreign graph with NULL args names the graph.
        self.expect(cgc.Status.INVALID_HANDLE, "cgc_graph_kernel_node_set_args",
                    lambda: lib.cgc_graph_kernel_node_set_args(FOREIGN, 0, None), "graph")
        # The table's 1.2 entries are these, after 1.1's (1.3's follow them).
        self.assertEqual([p[0] for p in cgc._PROTOTYPES[63 + 29:63 + 29 + 4]],
                         ["cgc_graph_kernel_node_set_enabled", "cgc_graph_kernel_node_set_args",
                          "cgc_capture_conditional_begin", "cgc_capture_conditional_end"])

    def test_the_binding_passes_foreign_graphs_to_the_library(self):
        g = cgc.Graph()
        g._h = FOREIGN
        self.expect_raise(cgc.InvalidHandleError, "cgc_graph_kernel_node_set_enabled",
                          lambda: g.set_kernel_enabled(0, False), "graph")
        self.expect_raise(cgc.InvalidHandleError, "cgc_graph_kernel_node_set_args",
                          lambda: g.set_kernel_args(0, [ctypes.c_void_p(FOREIGN), ctypes.c_uint32(4)]), "graph")
        self.expect_raise(cgc.InvalidHandleError, "cgc_graph_kernel_node_set_args",  # no parameters: still an array
                          lambda: g.set_kernel_args(0, []), "graph")
        # What the binding refuses itself, naming the C function.
        err = cgc.InvalidArgumentError
        self.expect_raise(err, "cgc_graph_kernel_node_set_enabled", lambda: g.set_kernel_enabled(-1), "kernel_index")
        self.expect_raise(err, "cgc_graph_kernel_node_set_args", lambda: g.set_kernel_args(1 << 64, []), "kernel_index")
        self.expect_raise(err, "cgc_graph_kernel_node_set_args", lambda: g.set_kernel_args(0, [ctypes.c_float(1), 7]),
                          "args[1] is a int", "ctypes")
        # An update capture of the foreign graph on a foreign stream: the library refuses the
        # stream first, and nothing is left marked as capturing or updating.
        stream = foreign(cgc.Stream)
        self.expect_raise(cgc.InvalidHandleError, "cgc_capture_begin", lambda: g.capture_begin(stream, update=True),
                          "stream")
        self.assertIsNone(g._capturing)
        self.assertFalse(g._updating)
        forget(g, stream)

    def test_an_update_needs_a_graph_to_update(self):
        g = cgc.Graph()
        stream = foreign(cgc.Stream)
        with self.assertRaises(cgc.InvalidStateError) as cm:
            g.capture_begin(stream, update=True)
        self.assertIn("empty", cm.exception.message)
        with self.assertRaises(cgc.InvalidStateError):
            with cgc.graph(g, stream=stream, update=True):
                self.fail("the body ran without a capture")
        with self.assertRaises(cgc.InvalidStateError) as cm:
            cgc.capture(stream, lambda s: self.fail("the body ran without a capture"), update=g)
        self.assertIn("empty", cm.exception.message)
        self.expect_raise(cgc.InvalidArgumentError, "cgc_capture", lambda: cgc.capture(stream, print, update=42),
                          "cgc.Graph")
        g._h = FOREIGN  # a Graph that holds a graph is recaptured with update=True only
        with self.assertRaises(cgc.InvalidStateError) as cm:
            g.capture_begin(stream)
        self.assertIn("update=True", cm.exception.message)
        # Through cgc_capture the library refuses the foreign stream before the body runs.
        ran = []
        self.expect_raise(cgc.InvalidHandleError, "cgc_capture_begin",
                          lambda: cgc.capture(stream, ran.append, update=g), "stream")
        self.assertEqual(ran, [])
        forget(g, stream)

    def test_options_and_info_carry_the_update_fields(self):
        opts = cgc.capture_options_t(update=FOREIGN)
        self.assertEqual(opts.update, FOREIGN)
        self.assertEqual(cgc.capture_options_t().update, None)  # NULL: a new graph
        self.assertEqual(ctypes.sizeof(cgc.capture_options_t), 40)
        self.assertEqual([int(m) for m in cgc.GraphUpdate], [0, 1, 2])
        # 1.2's fields, then 1.6's (families)
        self.assertEqual(cgc.GraphInfo._fields[-5:-2], ("update_count", "last_update", "last_update_result"))


class AdoptedCaptureBadCallTest(ExpectMixin, unittest.TestCase):
    """1.4 without a GPU: the adoption calls refuse NULL and foreign pools by name, the binding's
    torch entry points say what they need, and cgc.graph checks torch.cuda.graph's arguments."""

    def test_null_and_foreign_pools_are_refused_by_name(self):
        lib = cgc.api()
        for function, call in (
                ("cgc_pool_adopt_capture", lambda p: lib.cgc_pool_adopt_capture(p, None)),
                ("cgc_pool_end_adopted_capture", lambda p: lib.cgc_pool_end_adopted_capture(p))):
            self.expect(cgc.Status.INVALID_ARGUMENT, function, lambda: call(None), "NULL")
            self.expect(cgc.Status.INVALID_HANDLE, function, lambda: call(FOREIGN), "pool")
        self.expect(cgc.Status.INVALID_ARGUMENT, "cgc_record_stream_native",
                    lambda: lib.cgc_record_stream_native(None, None), "ptr is NULL")
        self.expect(cgc.Status.INVALID_ARGUMENT, "cgc_record_stream_native",
                    lambda: lib.cgc_record_stream_native(0x1000, None), "not a live allocation")
        self.assertEqual([p[0] for p in cgc._PROTOTYPES[63 + 29 + 4 + 1:63 + 29 + 4 + 1 + 3]],
                         ["cgc_pool_adopt_capture", "cgc_pool_end_adopted_capture", "cgc_record_stream_native"])

    def test_torch_allocator_choice_is_checked_and_its_sources_are_found(self):
        with self.assertRaises(cgc.InvalidArgumentError) as raised:  # before torch is imported
            cgc.use_as_torch_allocator(backend="cuda-malloc-async")
        self.assertIn("'auto', 'native', 'pluggable'", str(raised.exception))
        import os
        root = cgc._torch_backend_sources()  # the checkout, or the bundle's torch_backend/
        self.assertIsNotNone(root)
        for part in (("bindings", "torch_bridge", "backend.cc"), ("bindings", "torch_bridge", "routes.cc"),
                     ("bindings", "torch_bridge", "routes.h"), ("capi", "cgc.h"), ("capi", "cgc_api.h")):
            self.assertTrue(os.path.isfile(os.path.join(root, *part)), part)

    def test_torch_pool_ids_need_cgc_as_torchs_allocator(self):
        self.assertFalse(cgc.torch_graph_pools())
        with self.assertRaises(cgc.InvalidStateError) as raised:
            cgc.torch_pool((0, 1), device=0)
        self.assertIn("use_as_torch_allocator", str(raised.exception))
        with self.assertRaises(cgc.InvalidArgumentError):  # the id's form is checked first
            cgc.torch_pool([0, 1], device=0)

    def test_graph_takes_torchs_arguments(self):
        g = cgc.Graph()
        self.assertEqual(cgc.graph(g, capture_error_mode="relaxed").mode, cgc.CaptureMode.RELAXED)
        self.assertEqual(cgc.graph(g, mode="thread_local").mode, cgc.CaptureMode.THREAD_LOCAL)
        self.assertEqual(cgc.graph(g).mode, cgc.CaptureMode.GLOBAL)
        with self.assertRaises(cgc.InvalidArgumentError):
            cgc.graph(g, capture_error_mode="relaxed", mode="global")
        with self.assertRaises(cgc.InvalidArgumentError) as raised:
            cgc.graph(g, pool="pool")._resolve_pool(None)
        self.assertIn("torch pool id", str(raised.exception))

        class TorchStream(object):  # what cgc.graph reads of a torch.cuda.Stream
            cuda_stream = 0x1234
        s = TorchStream()
        old_order = cgc.graph(g, s)  # before 1.4 the second argument was the stream
        self.assertIs(old_order.stream, s)
        self.assertIsNone(old_order.pool)


class NcclPoolBadCallTest(ExpectMixin, unittest.TestCase):
    """1.5 without a GPU: cgc_nccl_pool_create and cgc_pool_malloc refuse NULL and foreign
    arguments by name, and Pool.nccl / Pool.malloc refuse what ctypes would cut or cannot name."""

    def test_the_1_5_functions_follow_1_4s(self):
        self.assertEqual([p[0] for p in cgc._PROTOTYPES[63 + 29 + 4 + 1 + 3:63 + 29 + 4 + 1 + 3 + 2]],
                         ["cgc_nccl_pool_create", "cgc_pool_malloc"])
        self.assertEqual([(m.name, int(m)) for m in cgc.NcclMemory],
                         [("PLAIN", 0), ("REGISTERED", 1), ("SYMMETRIC", 2)])

    def test_null_and_foreign_arguments_are_refused_by_name(self):
        lib = cgc.api()
        out, got = ctypes.c_void_p(FOREIGN), ctypes.c_int(-7)
        # out is checked first, before NCCL is loaded: the same answer with or without NCCL.
        self.expect(cgc.Status.INVALID_ARGUMENT, "cgc_nccl_pool_create",
                    lambda: lib.cgc_nccl_pool_create(FOREIGN, 1 << 20, cgc.NcclMemory.REGISTERED, None,
                                                     ctypes.byref(got)), "out is NULL")
        self.assertEqual(got.value, -7, "got is written only on success")
        # A NULL or foreign communicator: refused by its check, or NCCL is not here at all.
        for comm, status in ((None, cgc.Status.INVALID_ARGUMENT), (FOREIGN, cgc.Status.INVALID_HANDLE)):
            st = lib.cgc_nccl_pool_create(comm, 1 << 20, cgc.NcclMemory.REGISTERED, ctypes.byref(out),
                                          ctypes.byref(got))
            message = lib.cgc_last_error().decode()
            self.assertIn(st, (status, cgc.Status.NCCL_UNAVAILABLE), message)
            self.assertIn("cgc_nccl_pool_create", message)
            self.assertIsNone(out.value, "out is cleared on failure")
            self.assertEqual(got.value, -7)
            out.value = FOREIGN

        self.expect(cgc.Status.INVALID_ARGUMENT, "cgc_pool_malloc",
                    lambda: lib.cgc_pool_malloc(FOREIGN, 512, FOREIGN, None), "out is NULL")
        for pool, stream, status, word in ((None, FOREIGN, cgc.Status.INVALID_ARGUMENT, "NULL"),
                                           (FOREIGN, FOREIGN, cgc.Status.INVALID_HANDLE, "pool"),
                                           (None, None, cgc.Status.INVALID_ARGUMENT, "NULL")):
            out.value = FOREIGN
            self.expect(status, "cgc_pool_malloc",
                        lambda: lib.cgc_pool_malloc(pool, 512, stream, ctypes.byref(out)), word)
            self.assertIsNone(out.value, "out is cleared on failure")

    def test_the_binding_refuses_by_name(self):
        pool, stream, comm = foreign(cgc.Pool), foreign(cgc.Stream), foreign(cgc.Comm)
        try:
            self.expect_raise(cgc.InvalidHandleError, "cgc_pool_malloc", lambda: pool.malloc(512, stream), "pool")
            # Sizes ctypes would cut to their low bits are refused here, naming the C function.
            for size in (-1, 1 << 64, 1.5):
                self.expect_raise(cgc.InvalidArgumentError, "cgc_pool_malloc", lambda: pool.malloc(size, stream),
                                  "size")
            self.expect_raise(cgc.InvalidArgumentError, "cgc_nccl_pool_create",
                              lambda: cgc.Pool.nccl(comm, 1 << 20, "pinned"), "wanted", "registered")
            self.expect_raise(cgc.InvalidArgumentError, "cgc_nccl_pool_create",
                              lambda: cgc.Pool.nccl(comm, -1), "capacity")
            self.expect_raise(cgc.InvalidArgumentError, "cgc_nccl_pool_create",
                              lambda: cgc.Pool.nccl(comm, 1 << 20, 1 << 40), "wanted")
            # The foreign communicator reaches the library, which refuses it by name (or has no NCCL).
            for wanted in (cgc.NcclMemory.SYMMETRIC, "registered", 0):
                self.expect_raise((cgc.InvalidHandleError, cgc.NcclUnavailableError), "cgc_nccl_pool_create",
                                  lambda: cgc.Pool.nccl(comm, 1 << 20, wanted))
        finally:
            forget(pool, stream, comm)
        closed = cgc.Pool.__new__(cgc.Pool)
        with self.assertRaises(cgc.InvalidHandleError):
            closed.malloc(512, stream)
        self.assertIsNone(closed.nccl_memory)  # an ordinary pool has no NCCL kind
        self.assertIsNone(closed.comm)
        with self.assertRaises(cgc.InvalidHandleError):  # a closed communicator never reaches C
            cgc.Pool.nccl(cgc.Comm.__new__(cgc.Comm), 1 << 20)


class MemorySnapshotBadCallTest(ExpectMixin, unittest.TestCase):
    """1.6 without a GPU: cgc_memory_snapshot refuses a NULL or foreign context and NULL totals by
    name, and Context.memory_snapshot a closed or foreign context."""

    def test_the_names_and_states(self):
        for name in ("memory_snapshot", "Segment", "Block", "BlockState"):
            self.assertIn(name, cgc.__all__)
        self.assertEqual([(m.name, int(m)) for m in cgc.BlockState], [("FREE", 0), ("ALLOCATED", 1), ("WAITING", 2)])
        self.assertEqual(cgc.Segment._fields, ("address", "size", "allocated_bytes", "pool", "stream_id", "small",
                                               "blocks"))
        self.assertEqual(cgc.Block._fields, ("address", "size", "requested", "state"))

    def test_null_and_foreign_arguments_are_refused_by_name(self):
        lib = cgc.api()
        n_segments, n_blocks = ctypes.c_size_t(7), ctypes.c_size_t(7)
        totals = (ctypes.byref(n_segments), ctypes.byref(n_blocks))
        A, H = cgc.Status.INVALID_ARGUMENT, cgc.Status.INVALID_HANDLE
        self.expect(A, "cgc_memory_snapshot", lambda: lib.cgc_memory_snapshot(None, None, 0, None, 0, *totals), "ctx")
        self.expect(H, "cgc_memory_snapshot", lambda: lib.cgc_memory_snapshot(FOREIGN, None, 0, None, 0, *totals))
        self.expect(A, "cgc_memory_snapshot",
                    lambda: lib.cgc_memory_snapshot(FOREIGN, None, 0, None, 0, None, totals[1]), "n_segments")
        self.expect(A, "cgc_memory_snapshot",
                    lambda: lib.cgc_memory_snapshot(FOREIGN, None, 0, None, 0, totals[0], None), "n_blocks")
        self.assertEqual((n_segments.value, n_blocks.value), (7, 7), "a refused call writes no totals")

    def test_the_binding_refuses_a_closed_or_foreign_context(self):
        ctx = foreign(cgc.Context)
        try:
            self.expect_raise(cgc.InvalidHandleError, "cgc_memory_snapshot", ctx.memory_snapshot)
            self.expect_raise(cgc.InvalidHandleError, "cgc_memory_snapshot", lambda: cgc.memory_snapshot(ctx))
        finally:
            forget(ctx)
        with self.assertRaises(cgc.InvalidHandleError):  # a closed context never reaches C
            cgc.Context.__new__(cgc.Context).memory_snapshot()


class PoolClaimBadCallTest(ExpectMixin, unittest.TestCase):
    """1.6 without a GPU: cgc_pool_claim refuses a NULL or foreign pool by name before it looks at
    the range (whatever the address and size), and Pool.claim a closed or foreign pool and what
    ctypes would cut. The checks after a valid handle (address, size, range) run in
    GpuPoolClaimTest."""

    def test_null_and_foreign_pools_are_refused_by_name(self):
        lib = cgc.api()
        for pool, status, word in ((None, cgc.Status.INVALID_ARGUMENT, "pool is NULL"),
                                   (FOREIGN, cgc.Status.INVALID_HANDLE, "pool")):
            for ptr, size in ((0x10000, 512), (None, 512), (0x10001, 512), (0x10000, 0)):
                self.expect(status, "cgc_pool_claim", lambda: lib.cgc_pool_claim(pool, ptr, size), word)

    def test_the_binding_refuses_by_name(self):
        pool = foreign(cgc.Pool)
        try:
            self.expect_raise(cgc.InvalidHandleError, "cgc_pool_claim", lambda: pool.claim(0x10000, 512), "pool")
            # Sizes ctypes would cut to their low bits are refused here, naming the C function.
            for size in (-1, 1 << 64, 1.5):
                self.expect_raise(cgc.InvalidArgumentError, "cgc_pool_claim", lambda: pool.claim(0x10000, size),
                                  "size")
        finally:
            forget(pool)
        with self.assertRaises(cgc.InvalidHandleError):  # a closed pool never reaches C
            cgc.Pool.__new__(cgc.Pool).claim(0x10000, 512)


class PoolAtBadCallTest(ExpectMixin, unittest.TestCase):
    """1.6 without a GPU: cgc_pool_create_at refuses a NULL out pointer and a NULL or foreign
    context by name before it looks at the range (whatever the base and capacity) and clears
    *out, and Pool.at a closed or foreign context and what ctypes would cut. The checks after a
    valid context (alignment, the range) run in GpuPoolAtTest."""

    BASE = 0x660000000000

    def test_null_and_foreign_contexts_are_refused_by_name(self):
        lib = cgc.api()
        self.expect(cgc.Status.INVALID_ARGUMENT, "cgc_pool_create_at",
                    lambda: lib.cgc_pool_create_at(FOREIGN, self.BASE, 64 << 20, None), "out is NULL")
        for ctx, status, word in ((None, cgc.Status.INVALID_ARGUMENT, "ctx is NULL"),
                                  (FOREIGN, cgc.Status.INVALID_HANDLE, "ctx")):
            for base, capacity in ((self.BASE, 64 << 20), (None, 64 << 20), (self.BASE + 4096, 64 << 20),
                                   (self.BASE, 0), (self.BASE, (64 << 20) + 1)):
                out = ctypes.c_void_p(FOREIGN)  # not NULL: the refusal must clear it
                self.expect(status, "cgc_pool_create_at",
                            lambda: lib.cgc_pool_create_at(ctx, base, capacity, ctypes.byref(out)), word)
                self.assertIsNone(out.value, "*out is cleared on failure")

    def test_the_binding_refuses_by_name(self):
        ctx = foreign(cgc.Context)
        try:
            self.expect_raise(cgc.InvalidHandleError, "cgc_pool_create_at",
                              lambda: cgc.Pool.at(ctx, self.BASE, 64 << 20), "ctx")
            # Values ctypes would cut to their low bits are refused here, naming the C function.
            for capacity in (-1, 1 << 64, 1.5):
                self.expect_raise(cgc.InvalidArgumentError, "cgc_pool_create_at",
                                  lambda: cgc.Pool.at(ctx, self.BASE, capacity), "capacity")
            for base in (-1, 1 << 64):
                self.expect_raise(cgc.InvalidArgumentError, "cgc_pool_create_at",
                                  lambda: cgc.Pool.at(ctx, base, 64 << 20), "base")
        finally:
            forget(ctx)
        with self.assertRaises(cgc.InvalidHandleError):  # a closed context never reaches C
            cgc.Pool.at(cgc.Context.__new__(cgc.Context), self.BASE, 64 << 20)


class SavedGraphsBadCallTest(ExpectMixin, unittest.TestCase):
    """1.6 without a GPU: cgc_graphs_save refuses a NULL size, no graphs, a NULL buffer with a
    capacity, bad options (flags other than SAVE_VERIFY among them), a NULL graph
    (INVALID_ARGUMENT) and a foreign one (INVALID_HANDLE) by name before it needs the driver, and
    takes SAVE_VERIFY, which save_graphs(verify=True) passes; cgc_saved_info needs no driver at
    all: bytes that are no saved buffer are SAVED_MISMATCH; cgc_graphs_restore and
    cgc_module_add_image refuse a NULL and a foreign context by name; and the binding refuses what
    is no Graph, Pool or bytes itself."""

    GARBAGE = bytes((i * 37 + 11) & 0xFF for i in range(256))

    def test_graphs_save_refuses_bad_arguments_by_name(self):
        lib, size = cgc.api(), ctypes.c_size_t(12345)
        null_graphs = (ctypes.c_void_p * 1)(None)
        foreign_graphs, foreign_pools = (ctypes.c_void_p * 1)(FOREIGN), (ctypes.c_void_p * 1)(FOREIGN)
        buffer = ctypes.create_string_buffer(64)

        def options(pools=None, n_pools=0, struct_size=None, flags=0):
            o = cgc.save_options_t(pools=ctypes.cast(pools, ctypes.POINTER(ctypes.c_void_p)) if pools else None,
                                   n_pools=n_pools, flags=flags)
            if struct_size is not None:
                o.struct_size = struct_size
            return ctypes.byref(o)

        self.expect(cgc.Status.INVALID_ARGUMENT, "cgc_graphs_save",
                    lambda: lib.cgc_graphs_save(null_graphs, 1, None, None, 0, None), "size is NULL")
        for graphs, n, opts, buf, capacity, status, words in (
                (None, 1, options(), None, 0, cgc.Status.INVALID_ARGUMENT, "graphs is NULL"),
                (foreign_graphs, 0, options(), None, 0, cgc.Status.INVALID_ARGUMENT, "n_graphs is 0"),
                (foreign_graphs, 1, options(), None, 64, cgc.Status.INVALID_ARGUMENT, "buffer is NULL"),
                (foreign_graphs, 1, options(struct_size=0), buffer, 64, cgc.Status.INVALID_ARGUMENT, "struct_size"),
                (foreign_graphs, 1, options(None, 1), buffer, 64, cgc.Status.INVALID_ARGUMENT, "pools"),
                (null_graphs, 1, options(), None, 0, cgc.Status.INVALID_ARGUMENT, "graphs"),
                (foreign_graphs, 1, options(foreign_pools, 1), buffer, 64, cgc.Status.INVALID_HANDLE, "graphs[0]"),
                # Flags other than SAVE_VERIFY are refused, SAVE_VERIFY is taken (the graphs are
                # checked next), with a buffer or without.
                (foreign_graphs, 1, options(flags=2), buffer, 64, cgc.Status.INVALID_ARGUMENT,
                 "options->flags has unknown bits 0x2"),
                (foreign_graphs, 1, options(flags=cgc.SAVE_VERIFY | 4), None, 0, cgc.Status.INVALID_ARGUMENT,
                 "options->flags has unknown bits 0x4"),
                (foreign_graphs, 1, options(flags=cgc.SAVE_VERIFY), buffer, 64, cgc.Status.INVALID_HANDLE, "graphs[0]"),
                (foreign_graphs, 1, options(foreign_pools, 1, flags=cgc.SAVE_VERIFY), None, 0,
                 cgc.Status.INVALID_HANDLE, "graphs[0]")):
            self.expect(status, "cgc_graphs_save",
                        lambda: lib.cgc_graphs_save(graphs, n, opts, buf, capacity, ctypes.byref(size)), words)

    def test_a_verifying_save_passes_save_verify(self):
        # SAVE_VERIFY is the header's flag; save_graphs(verify=...) hands cgc_graphs_save the
        # options with it (seen by a stand-in that calls the library's own function), and the
        # library then refuses a foreign graph as without it.
        self.assertEqual(cgc.SAVE_VERIFY, 1)
        self.assertIn("SAVE_VERIFY", cgc.__all__)
        opts = cgc.save_options_t()
        self.assertEqual((opts.struct_size, opts.n_pools, opts.flags), (ctypes.sizeof(cgc.save_options_t), 0, 0))
        self.assertEqual(cgc.save_options_t(flags=cgc.SAVE_VERIFY).flags, 1)
        lib = cgc.api()
        real, seen = lib.cgc_graphs_save, []

        def stand_in(graphs, n_graphs, options, buffer, capacity, size):
            seen.append((n_graphs, options._obj.n_pools, options._obj.flags, buffer, capacity))
            return real(graphs, n_graphs, options, buffer, capacity, size)

        graph, pool = cgc.Graph(), foreign(cgc.Pool)
        graph._h = FOREIGN
        lib.cgc_graphs_save = stand_in
        try:
            for verify, flags in ((False, 0), (True, cgc.SAVE_VERIFY)):
                for pools in ((), [pool]):
                    del seen[:]
                    self.expect_raise(cgc.InvalidHandleError, "cgc_graphs_save",
                                      lambda: cgc.save_graphs(graph, pools, verify=verify), "graphs[0]")
                    # The size is asked first (no buffer), and refused there.
                    self.assertEqual(seen, [(1, len(pools), flags, None, 0)], "verify=%r" % verify)
            self.expect_raise(cgc.InvalidArgumentError, "cgc_graphs_save", lambda: cgc.save_graphs([], verify=True),
                              "n_graphs is 0")
        finally:
            lib.cgc_graphs_save = real
            forget(graph, pool)

    def test_saved_info_of_bytes_that_are_no_saved_buffer(self):
        lib, info = cgc.api(), cgc.saved_info_t()
        self.expect(cgc.Status.INVALID_ARGUMENT, "cgc_saved_info",
                    lambda: lib.cgc_saved_info(self.GARBAGE, len(self.GARBAGE), None), "info is NULL")
        self.expect(cgc.Status.INVALID_ARGUMENT, "cgc_saved_info",
                    lambda: lib.cgc_saved_info(None, 64, ctypes.byref(info)), "data is NULL")
        for data in (self.GARBAGE, self.GARBAGE[:7], b"", bytes(256), bytearray(8)):
            self.expect_raise(cgc.SavedMismatchError, "cgc_saved_info", lambda: cgc.saved_info(data))
        with self.assertRaises(cgc.SavedMismatchError) as cm:
            cgc.saved_info(memoryview(self.GARBAGE)[3:])
        self.assertEqual(cm.exception.status, cgc.Status.SAVED_MISMATCH)
        for data in (None, 0x10000, 1.5):
            self.expect_raise(cgc.InvalidArgumentError, "cgc_saved_info", lambda: cgc.saved_info(data), "data")

    def test_saved_info_needs_no_driver(self):
        out = run_child(
            "import cgc, json\n"
            "try:\n"
            "    cgc.saved_info(b'not a saved graph'); print(json.dumps({'raised': None}))\n"
            "except cgc.Error as e:\n"
            "    print(json.dumps({'raised': int(e.status), 'message': e.message}))\n",
            CGC_CUDA_DRIVER="/nonexistent/libcuda.so.1")
        self.assertEqual(out["raised"], cgc.Status.SAVED_MISMATCH)
        self.assertIn("cgc_saved_info", out["message"])

    def test_restore_and_add_image_refuse_null_and_foreign_contexts_by_name(self):
        lib = cgc.api()
        opts = cgc.restore_options_t()
        for ctx, status in ((None, cgc.Status.INVALID_ARGUMENT), (FOREIGN, cgc.Status.INVALID_HANDLE)):
            # Not NULL: a refusal must clear them (outputs are NULL on failure).
            graphs, pools = (ctypes.c_void_p * 1)(FOREIGN), (ctypes.c_void_p * 1)(FOREIGN)
            self.expect(status, "cgc_graphs_restore",
                        lambda: lib.cgc_graphs_restore(ctx, self.GARBAGE, len(self.GARBAGE), ctypes.byref(opts),
                                                       graphs, 1, pools, 1))
            self.assertEqual((graphs[0], pools[0]), (None, None), "a refused restore hands out no handle")
            self.expect(status, "cgc_module_add_image",
                        lambda: lib.cgc_module_add_image(ctx, b"cgc-python-test", self.GARBAGE, len(self.GARBAGE)))

    def test_the_binding_refuses_by_name(self):
        self.expect_raise(cgc.InvalidArgumentError, "cgc_graphs_save", lambda: cgc.save_graphs([]), "n_graphs is 0")
        self.expect_raise(cgc.InvalidArgumentError, "cgc_graphs_save", lambda: cgc.save_graphs([object()]), "graphs[0]")
        self.expect_raise(cgc.InvalidArgumentError, "cgc_graphs_save",
                          lambda: cgc.save_graphs([], [object()]), "pools[0]")
        with self.assertRaises(cgc.InvalidStateError):  # an empty Graph never reaches C
            cgc.save_graphs(cgc.Graph())
        graph, pool = cgc.Graph(), foreign(cgc.Pool)
        graph._h = FOREIGN
        try:
            for pools in ((), [pool], pool):
                self.expect_raise(cgc.InvalidHandleError, "cgc_graphs_save", lambda: cgc.save_graphs(graph, pools),
                                  "graphs[0]")
        finally:
            forget(graph, pool)
        closed = cgc.Context.__new__(cgc.Context)
        with self.assertRaises(cgc.InvalidHandleError):  # a closed context never reaches C
            closed.restore_graphs(self.GARBAGE)
        with self.assertRaises(cgc.InvalidHandleError):
            closed.add_module_image("key", self.GARBAGE)
        ctx = foreign(cgc.Context)
        try:
            # The bytes are read (cgc_saved_info) before the context is asked to restore them.
            self.expect_raise(cgc.SavedMismatchError, "cgc_saved_info", lambda: ctx.restore_graphs(self.GARBAGE))
            self.expect_raise(cgc.InvalidHandleError, "cgc_module_add_image",
                              lambda: ctx.add_module_image("cgc-python-test", self.GARBAGE))
            for key in ("a\0b", b"a\0b", 7):
                self.expect_raise(cgc.InvalidArgumentError, "cgc_module_add_image",
                                  lambda: ctx.add_module_image(key, self.GARBAGE), "key")
            self.expect_raise(cgc.InvalidArgumentError, "cgc_module_add_image",
                              lambda: ctx.add_module_image("key", 1.5), "image")
        finally:
            forget(ctx)

    def test_restore_with_generators_reads_the_bytes_first(self):
        # restore_options_t's generators: NULL and 0 unless set; generators=True reads the bytes
        # (cgc_saved_info, for the count) before the context is asked, as a plain restore does.
        opts = cgc.restore_options_t(flags=cgc.RESTORE_FAMILIES, threads=2)
        self.assertFalse(opts.generators)
        self.assertEqual(opts.n_generators, 0)
        self.assertEqual(cgc.SavedInfo._fields[-1], "n_generators")
        with self.assertRaises(cgc.InvalidHandleError):  # a closed context never reaches C
            cgc.Context.__new__(cgc.Context).restore_graphs(self.GARBAGE, generators=True)
        ctx = foreign(cgc.Context)
        try:
            self.expect_raise(cgc.SavedMismatchError, "cgc_saved_info",
                              lambda: ctx.restore_graphs(self.GARBAGE, generators=True))
            self.expect_raise(cgc.SavedMismatchError, "cgc_saved_info",
                              lambda: ctx.restore_graphs(self.GARBAGE, families=True, threads=1, generators=True))
        finally:
            forget(ctx)

    def test_saved_info_reads_a_file(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "garbage.cgc")
            with open(path, "wb") as f:
                f.write(self.GARBAGE)
            self.expect_raise(cgc.SavedMismatchError, "cgc_saved_info", lambda: cgc.saved_info(path))


class FamiliesBadCallTest(ExpectMixin, unittest.TestCase):
    """1.6 without a GPU: cgc_graph_share_executable refuses a NULL graph or leader
    (INVALID_ARGUMENT) and a foreign one (INVALID_HANDLE) by name, the graph before the leader,
    before it needs the driver; the binding refuses a leader that is no Graph and an empty Graph
    itself; a restore with families=True or threads reads the bytes first, as one without does,
    and a threads count ctypes would cut is refused by the binding."""

    GARBAGE = SavedGraphsBadCallTest.GARBAGE

    def test_null_and_foreign_graphs_are_refused_by_name(self):
        lib, func = cgc.api(), "cgc_graph_share_executable"
        for graph, leader, status, words in (
                (None, None, cgc.Status.INVALID_ARGUMENT, "graph is NULL"),
                (None, FOREIGN, cgc.Status.INVALID_ARGUMENT, "graph is NULL"),
                (FOREIGN, None, cgc.Status.INVALID_HANDLE, "not a live cgc graph handle"),
                (FOREIGN, FOREIGN, cgc.Status.INVALID_HANDLE, "not a live cgc graph handle")):
            self.expect(status, func, lambda: lib.cgc_graph_share_executable(graph, leader), words)

    def test_the_binding_refuses_by_name(self):
        func = "cgc_graph_share_executable"
        graph, leader = cgc.Graph(), cgc.Graph()
        graph._h = FOREIGN
        try:
            self.expect_raise(cgc.InvalidArgumentError, func, lambda: graph.share_executable(object()),
                              "leader is a object")
            self.expect_raise(cgc.InvalidArgumentError, func, lambda: graph.share_executable(None), "leader")
            with self.assertRaises(cgc.InvalidStateError):  # an empty leader never reaches C
                graph.share_executable(leader)
            with self.assertRaises(cgc.InvalidStateError):  # nor an empty graph
                leader.share_executable(graph)
            leader._h = FOREIGN
            self.expect_raise(cgc.InvalidHandleError, func, lambda: graph.share_executable(leader), "graph")
            self.expect_raise(cgc.InvalidHandleError, func, lambda: graph.share_executable(graph), "graph")
        finally:
            forget(graph, leader)

    def test_restore_with_families(self):
        self.assertEqual(cgc.RESTORE_FAMILIES, 1)
        self.assertIn("RESTORE_FAMILIES", cgc.__all__)
        self.assertEqual(cgc.GraphInfo._fields[-2:], ("family_size", "family_result"))
        self.assertIsInstance(cgc.Error(cgc.Status.NOT_SUPPORTED, "x"), cgc.NotSupportedError)
        lib = cgc.api()
        opts = cgc.restore_options_t(flags=cgc.RESTORE_FAMILIES)
        self.assertEqual((opts.struct_size, opts.flags, opts.threads), (ctypes.sizeof(cgc.restore_options_t), 1, 0))
        self.assertEqual(cgc.restore_options_t(threads=3).threads, 3)
        for ctx, status in ((None, cgc.Status.INVALID_ARGUMENT), (FOREIGN, cgc.Status.INVALID_HANDLE)):
            graphs, pools = (ctypes.c_void_p * 1)(FOREIGN), (ctypes.c_void_p * 1)(FOREIGN)
            self.expect(status, "cgc_graphs_restore",
                        lambda: lib.cgc_graphs_restore(ctx, self.GARBAGE, len(self.GARBAGE), ctypes.byref(opts),
                                                       graphs, 1, pools, 1))
            self.assertEqual((graphs[0], pools[0]), (None, None), "a refused restore hands out no handle")
        with self.assertRaises(cgc.InvalidHandleError):  # a closed context never reaches C
            cgc.Context.__new__(cgc.Context).restore_graphs(self.GARBAGE, families=True)
        ctx = foreign(cgc.Context)
        try:
            self.expect_raise(cgc.SavedMismatchError, "cgc_saved_info",
                              lambda: ctx.restore_graphs(self.GARBAGE, families=True))
            # threads goes to the library as given (it refuses more than 64, with a context: on a
            # GPU), after the bytes are read; one ctypes would cut is the binding's refusal.
            for threads in (1, 65):
                self.expect_raise(cgc.SavedMismatchError, "cgc_saved_info",
                                  lambda: ctx.restore_graphs(self.GARBAGE, families=True, threads=threads))
            for threads, words in ((-1, "does not fit"), (1 << 32, "does not fit"), (1.5, "must be an integer")):
                self.expect_raise(cgc.InvalidArgumentError, "cgc_graphs_restore",
                                  lambda: ctx.restore_graphs(self.GARBAGE, threads=threads), "threads", words)
        finally:
            forget(ctx)


class ModuleRecordTest(ExpectMixin, unittest.TestCase):
    """1.6 without a GPU: the record of module images (cgc_module_record) needs no context and the
    library makes no driver call for it, so it runs here for real: off while off succeeds with
    both counts set to 0 (this process never recorded), NULL counts too; on succeeds where CUPTI
    can subscribe (a GPU machine with libcupti) and is otherwise refused by name, NOT_SUPPORTED (no
    libcupti, or CUPTI without a driver) or INVALID_STATE (another CUPTI client subscribed), the
    counts set either way; asked again it answers the same; off again at the end, the counts never
    going down. Without libcupti and without a driver (a child process) it is NOT_SUPPORTED naming
    the path tried. module_record(on) hands the library 1 or 0 and returns its counts."""

    def test_the_record_runs_without_a_gpu_and_is_off_at_the_end(self):
        # The only test of this process that records: off first, then on, then off again.
        lib, func = cgc.api(), "cgc_module_record"
        images, nbytes = ctypes.c_size_t(12345), ctypes.c_size_t(12345)
        self.assertEqual(lib.cgc_module_record(0, ctypes.byref(images), ctypes.byref(nbytes)), cgc.Status.SUCCESS)
        self.assertEqual((images.value, nbytes.value), (0, 0), "nothing was recorded in this process")
        self.assertEqual(lib.cgc_module_record(0, None, None), cgc.Status.SUCCESS)
        self.assertEqual(cgc.module_record(False), (0, 0))

        images, nbytes = ctypes.c_size_t(12345), ctypes.c_size_t(12345)
        on = lib.cgc_module_record(1, ctypes.byref(images), ctypes.byref(nbytes))
        message = lib.cgc_last_error().decode()
        self.assertNotEqual((images.value, nbytes.value), (12345, 12345), "the counts are set whatever the status")
        self.assertEqual(images.value == 0, nbytes.value == 0)
        if on != cgc.Status.SUCCESS:
            self.assertIn(on, (cgc.Status.NOT_SUPPORTED, cgc.Status.INVALID_STATE), message)
            self.assertIn(func, message)
        # Again, through the binding: on while on changes nothing; a refusal stays one.
        if on == cgc.Status.SUCCESS:
            again = cgc.module_record(True)
            self.assertGreaterEqual(again.images, images.value)
            self.assertGreaterEqual(again.bytes, nbytes.value)
        else:
            e = self.expect_raise(cgc.Error, func, lambda: cgc.module_record(True))
            self.assertEqual(e.status, on)
            again = cgc.RecordedImages(images.value, nbytes.value)
        # Off again: what the record holds stays.
        off = cgc.module_record(False)
        self.assertIsInstance(off, cgc.RecordedImages)
        self.assertGreaterEqual(off.images, again.images)
        self.assertGreaterEqual(off.bytes, again.bytes)
        self.assertEqual(cgc.module_record(False), off, "off while off changes nothing")

    def test_without_cupti_and_without_a_driver(self):
        out = run_child(
            "import cgc, ctypes, json\n"
            "out = {'refusals': []}\n"
            "for _ in range(2):\n"
            "    try:\n"
            "        cgc.module_record(True); out['refusals'].append(None)\n"
            "    except cgc.NotSupportedError as e:\n"
            "        out['refusals'].append(e.message)\n"
            "n, b = ctypes.c_size_t(7), ctypes.c_size_t(7)\n"
            "out['raw'] = cgc.api().cgc_module_record(1, ctypes.byref(n), ctypes.byref(b))\n"
            "out['counts'] = [n.value, b.value]\n"
            "out['off'] = list(cgc.module_record(False))\n"
            "try:\n"
            "    cgc.device_count()\n"
            "except cgc.NoDriverError:\n"
            "    out['no_driver'] = True\n"
            "print(json.dumps(out))\n",
            CGC_CUPTI_LIBRARY="/nonexistent/libcupti.so", CGC_CUDA_DRIVER="/nonexistent/libcuda.so.1")
        self.assertEqual(len(out["refusals"]), 2)
        for message in out["refusals"]:
            self.assertIsNotNone(message, "the record needs libcupti")
            for word in ("cgc_module_record", "/nonexistent/libcupti.so", "CGC_CUPTI_LIBRARY"):
                self.assertIn(word, message)
        self.assertEqual((out["raw"], out["counts"]), (cgc.Status.NOT_SUPPORTED, [0, 0]))
        self.assertEqual(out["off"], [0, 0], "off needs neither CUPTI nor the driver")
        self.assertTrue(out.get("no_driver"), "the driver was never needed: it is not there")

    def test_the_binding_hands_the_flag_and_returns_the_counts(self):
        self.assertIn("module_record", cgc.__all__)
        self.assertIn("RecordedImages", cgc.__all__)
        self.assertEqual(cgc.RecordedImages._fields, ("images", "bytes"))
        lib = cgc.api()
        real, seen = lib.cgc_module_record, []

        def stand_in(on, images, nbytes):
            seen.append(on)
            images._obj.value, nbytes._obj.value = 3, 4096
            return cgc.Status.SUCCESS

        lib.cgc_module_record = stand_in
        try:
            for on, flag in ((True, 1), (False, 0), (1, 1), (0, 0), (None, 0)):
                del seen[:]
                self.assertEqual(cgc.module_record(on), cgc.RecordedImages(3, 4096))
                self.assertEqual(seen, [flag], "module_record(%r)" % (on,))
        finally:
            lib.cgc_module_record = real


class ConditionalBadCallTest(ExpectMixin, unittest.TestCase):
    """1.2's conditional nodes without a GPU: NULL and foreign handles are refused by name, the
    binding refuses a kind it cannot name, and the lent body stream cannot be closed."""

    def test_null_and_foreign_handles_are_refused_by_name(self):
        lib, out = cgc.api(), ctypes.c_void_p(FOREIGN)
        begin = "cgc_capture_conditional_begin"
        self.expect(cgc.Status.INVALID_ARGUMENT, begin,
                    lambda: lib.cgc_capture_conditional_begin(None, 1, FOREIGN, ctypes.byref(out)), "NULL")
        self.assertIsNone(out.value, "the body is cleared on failure")
        self.expect(cgc.Status.INVALID_HANDLE, begin,
                    lambda: lib.cgc_capture_conditional_begin(FOREIGN, 1, FOREIGN, ctypes.byref(out)),
                    "not a live cgc stream handle")
        self.expect(cgc.Status.INVALID_ARGUMENT, begin,
                    lambda: lib.cgc_capture_conditional_begin(FOREIGN, 0, FOREIGN, None), "NULL")
        # 1.3: a SWITCH has its bodies from begin_bodies; this begin refuses it before anything else.
        self.expect(cgc.Status.INVALID_ARGUMENT, begin,
                    lambda: lib.cgc_capture_conditional_begin(None, 2, FOREIGN, ctypes.byref(out)),
                    "cgc_capture_conditional_begin_bodies")
        end = "cgc_capture_conditional_end"
        self.expect(cgc.Status.INVALID_ARGUMENT, end, lambda: lib.cgc_capture_conditional_end(None), "NULL")
        self.expect(cgc.Status.INVALID_HANDLE, end, lambda: lib.cgc_capture_conditional_end(FOREIGN),
                    "not a live cgc stream handle")

    def test_the_binding_checks_the_kind_and_passes_foreign_streams_on(self):
        self.assertEqual([(m.name, int(m)) for m in cgc.ConditionalKind], [("IF", 0), ("WHILE", 1), ("SWITCH", 2)])
        stream = foreign(cgc.Stream)
        func = "cgc_capture_conditional_begin"
        ran = []
        for kind in (cgc.ConditionalKind.WHILE, "if", 7):  # 7: the library judges ints (handle first)
            with self.assertRaises(cgc.InvalidHandleError) as cm:
                with stream.conditional(kind, FOREIGN) as body:
                    ran.append(body)
            self.assertIn(func, cm.exception.message)
            self.assertIn("stream", cm.exception.message)
        self.assertEqual(ran, [], "the block ran without a body")
        with self.assertRaises(cgc.InvalidArgumentError) as cm:
            with stream.conditional("until", FOREIGN):
                self.fail("the block ran with a bad kind")
        self.assertIn(func, cm.exception.message)
        self.assertIn("'until' is not one of if, while, switch", cm.exception.message)
        forget(stream)
        with self.assertRaises(cgc.InvalidHandleError):
            with stream.conditional(cgc.ConditionalKind.IF, FOREIGN):
                self.fail("a closed stream began a body")

    def test_a_lent_body_cannot_be_closed_and_is_ended_once(self):
        parent = foreign(cgc.Stream)
        body = cgc._BodyStream._lend(FOREIGN, parent)
        self.assertIsInstance(body, cgc.Stream)
        self.assertFalse(body.owned)
        with self.assertRaises(cgc.InvalidStateError) as cm:
            body.close()
        self.assertIn("conditional", cm.exception.message)
        with self.assertRaises(cgc.InvalidStateError):
            with body:  # a `with` on the body would close it: refused too
                pass
        self.assertFalse(body.closed)
        # Ending it (what the `with stream.conditional` block does) closes the object whatever
        # the library says: here the foreign handle is refused by name.
        self.expect_raise(cgc.InvalidHandleError, "cgc_capture_conditional_end", body._end, "stream")
        self.assertTrue(body.closed)
        body.close()  # ended: nothing left to refuse
        body._end()  # and never ended twice
        forget(parent)


# ---- GPU tests ---------------------------------------------------------------------------------


class Cuda(object):
    """Test-only driver access (the binding itself never calls the driver): host copies, and the
    device-to-device copy of the fork/join test. cgc does not make a context current, so this
    retains device 0's primary context and makes it current on the calling thread."""

    def __init__(self):
        lib = ctypes.CDLL("libcuda.so.1")
        u64, vp, sz = ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t
        protos = {
            "cuInit": [ctypes.c_uint],
            "cuDeviceGet": [ctypes.POINTER(ctypes.c_int), ctypes.c_int],
            "cuDevicePrimaryCtxRetain": [ctypes.POINTER(vp), ctypes.c_int],
            "cuCtxSetCurrent": [vp],
            "cuMemcpyDtoH_v2": [vp, u64, sz],
            "cuMemcpyDtoDAsync_v2": [u64, u64, sz, vp],
        }
        for name, args in protos.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, ctypes.c_int
        self.lib = lib
        self.check(lib.cuInit(0), "cuInit")
        dev, ctx = ctypes.c_int(0), vp()
        self.check(lib.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
        self.check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
        self.ctx = ctx
        self.make_current()

    @staticmethod
    def check(r, what):
        if r != 0:
            raise AssertionError("%s failed: CUresult %d" % (what, r))

    def make_current(self):
        self.check(self.lib.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")

    def to_host(self, ptr, n):
        """n float32 from device address ptr, as bytes (for bitwise comparisons)."""
        buf = ctypes.create_string_buffer(n * 4)
        self.check(self.lib.cuMemcpyDtoH_v2(buf, ptr, n * 4), "cuMemcpyDtoH_v2")
        return buf.raw

    def copy_async(self, dst, src, nbytes, stream):
        self.check(self.lib.cuMemcpyDtoDAsync_v2(dst, src, nbytes, stream.native or None),
                   "cuMemcpyDtoDAsync_v2")


def floats(raw):
    a = array.array("f")
    a.frombytes(raw)
    return a


def require_gpu(test):
    try:
        n = cgc.device_count()
    except cgc.Error as e:
        test.skipTest("no GPU: cgc.device_count() failed: %s" % e)
    if n == 0:
        test.skipTest("no GPU: cgc.device_count() is 0")


N = 1 << 16


class GpuForkJoinTest(unittest.TestCase):
    def setUp(self):
        require_gpu(self)
        self.cuda = Cuda()

    def test_fork_join_with_shared_pool(self):
        cuda = self.cuda
        ctx = cgc.Context(0)
        origin, side1, side2 = cgc.Stream(ctx), cgc.Stream(ctx), cgc.Stream(ctx)
        fork, join1, join2 = cgc.Event(ctx), cgc.Event(ctx), cgc.Event(ctx)
        gen = cgc.Rng(ctx, seed=1234)
        nbytes = N * 4

        g1 = cgc.Graph()
        with cgc.graph(g1, stream=origin, mode="global"):
            a = cgc.malloc(ctx, nbytes, origin)
            gen.uniform(a, N, origin)
            fork.record(origin)
            side1.wait_event(fork)
            side2.wait_event(fork)
            b = cgc.malloc(ctx, nbytes, side1)
            cuda.copy_async(b, a, nbytes, side1)
            c = cgc.malloc(ctx, nbytes, side2)
            gen.normal(c, N, side2, mean=0.0, std=1.0)
            join1.record(side1)
            join2.record(side2)
            origin.wait_event(join1)
            origin.wait_event(join2)
        pool1 = g1.pool()
        g2 = cgc.Graph()
        with cgc.graph(g2, stream=origin, pool=pool1):
            d = cgc.malloc(ctx, nbytes, origin)
            cuda.copy_async(d, b, nbytes, origin)

        previous = None
        for _ in range(3):
            g1.launch(origin)
            g2.launch(origin)
            origin.synchronize()
            cuda.make_current()
            ra, rb, rc, rd = (cuda.to_host(p, N) for p in (a, b, c, d))
            self.assertEqual(rb, ra)
            self.assertEqual(rd, ra)
            fa = floats(ra)
            self.assertTrue(all(0.0 <= x < 1.0 for x in fa))
            self.assertNotEqual(ra, previous)  # fresh numbers every replay
            previous = ra
            fc = floats(rc)
            mean = sum(fc) / N
            std = math.sqrt(sum((x - mean) ** 2 for x in fc) / N)
            self.assertLess(abs(mean), 0.05)
            self.assertLess(abs(std - 1.0), 0.05)

        info = g1.info()
        # 3 work nodes (uniform, copy, normal): allocations, event records and waits add none.
        self.assertGreaterEqual(info.node_count, 3)
        self.assertEqual(info.replay_count, 3)
        self.assertEqual(g2.info().replay_count, 3)
        pool2 = g2.pool()
        self.assertEqual(pool2, pool1)
        self.assertGreater(pool1.memory_stats(ctx).bytes_reserved, 0)

        for p in (a, b, c, d):  # the graphs' outputs: they outlive the graphs, freed by us
            cgc.free(p)
        g2.close()
        g1.close()
        pool2.close()
        pool1.close()
        for obj in (fork, join1, join2, side1, side2, origin, gen, ctx):
            obj.close()
            self.assertTrue(obj.closed)

    def test_unjoined_fork_fails_capture_end(self):
        ctx = cgc.Context(0)
        origin, side1 = cgc.Stream(ctx), cgc.Stream(ctx)
        fork = cgc.Event(ctx)
        gen = cgc.Rng(ctx, seed=7)
        buf = cgc.malloc(ctx, N * 4, origin)
        copy = cgc.malloc(ctx, N * 4, origin)
        g = cgc.Graph()
        with self.assertRaises(cgc.CaptureUnjoinedError) as cm:
            with cgc.graph(g, stream=origin):
                gen.uniform(buf, N, origin)
                fork.record(origin)
                side1.wait_event(fork)
                self.cuda.copy_async(copy, buf, N * 4, side1)  # never joined back
        err = cm.exception
        self.assertEqual(err.status, cgc.Status.CAPTURE_UNJOINED)
        self.assertIn("%x" % side1.native, err.message.lower())
        self.assertEqual(origin.capture_status()[0], cgc.CaptureStatus.NONE)
        self.assertEqual(side1.capture_status()[0], cgc.CaptureStatus.NONE)
        with self.assertRaises(cgc.InvalidStateError):
            g.info()  # nothing captured
        # The origin can capture again, into the same (still empty) Graph.
        with cgc.graph(g, stream=origin):
            gen.uniform(buf, N, origin)
        self.assertGreaterEqual(g.info().node_count, 1)
        g.replay()
        origin.synchronize()
        g.close()
        cgc.free(buf)
        cgc.free(copy)
        for obj in (fork, side1, origin, gen, ctx):
            obj.close()

    def test_body_exception_ends_the_capture(self):
        ctx = cgc.Context(0)
        with cgc.Stream(ctx) as origin, cgc.Rng(ctx, seed=3) as gen:
            buf = cgc.malloc(ctx, N * 4, origin)
            g = cgc.Graph()
            with self.assertRaises(ZeroDivisionError):
                with cgc.graph(g, stream=origin):
                    gen.uniform(buf, N, origin)
                    self.assertTrue(origin.is_capturing())
                    1 / 0
            self.assertFalse(origin.is_capturing())
            self.assertEqual(origin.capture_status(), (cgc.CaptureStatus.NONE, 0))
            with self.assertRaises(cgc.InvalidStateError):
                g.replay()  # the graph was discarded
            with cgc.graph(g, stream=origin):  # and the stream captures again
                gen.uniform(buf, N, origin)
            g.replay()
            origin.synchronize()
            self.assertEqual(g.info().replay_count, 1)
            g.close()
            cgc.free(buf)
        ctx.close()


def kernel_path(folder, file_name, variable):
    """The path of a PTX file that the GPU tests load, <folder>/<file_name> of the repository:
    $<variable> (Bazel's test sets it), else where the repository or the GPU bundle (its tools/
    folder, where tests/make_bundle.sh puts it) keeps it."""
    candidates = [os.environ.get(variable),
                  os.path.join(HERE, "..", "..", folder, file_name),
                  os.path.join(HERE, "..", "tools", file_name),
                  os.path.join(HERE, file_name)]
    for path in candidates:
        if path and os.path.isfile(path):
            return path
    raise AssertionError("%s is not in any of %s: set %s to it" % (file_name, candidates[1:], variable))


def scale_add_ptx():
    """The examples' kernel scale_add (out = in * params[0] + params[1])."""
    return kernel_path(os.path.join("examples", "kernels"), "scale_add.ptx", "CGC_SCALE_ADD_PTX")


def binding_tests_ptx():
    """The bindings' shared test kernels, tests/kernels/binding_tests.ptx (the Go and Rust tests
    load the same file): cond_init, cond_step, cond_count and cond_append for the conditional
    tests (the file says what each does), and affine."""
    return kernel_path(os.path.join("tests", "kernels"), "binding_tests.ptx", "CGC_BINDING_TESTS_PTX")


class KernelFilesTest(unittest.TestCase):
    """Without a GPU too: the PTX files that the GPU tests load are where they look."""

    def test_the_shared_kernels_are_found(self):
        with open(binding_tests_ptx()) as f:
            ptx = f.read()
        for name in ("cond_init", "cond_step", "cond_count", "cond_append", "affine"):
            self.assertIn(".visible .entry %s(" % name, ptx)
        with open(scale_add_ptx()) as f:
            self.assertIn(".visible .entry scale_add(", f.read())


def float_bits(x):
    """The bits of float32 x, for memset_d32."""
    return struct.unpack("<I", struct.pack("<f", x))[0]


class GpuWorkTest(ExpectMixin, unittest.TestCase):
    """1.1 on a GPU: copies, sets, host functions, memory operations and kernels, eagerly and in a
    graph replayed with per-replay values, and the argument checks that need real handles."""

    def setUp(self):
        require_gpu(self)
        self.ctx = cgc.Context(0)
        self.stream = cgc.Stream(self.ctx)
        self.blocks = []

    def tearDown(self):
        for p in self.blocks:
            cgc.free(p)
        self.stream.close()
        self.ctx.close()

    def malloc(self, nbytes):
        p = cgc.malloc(self.ctx, nbytes, self.stream)
        self.blocks.append(p)
        return p

    def read(self, ptr, ctype, n):
        """n values of `ctype` at device address ptr, through a pageable (so synchronous) copy."""
        out = (ctype * n)()
        self.stream.memcpy_dtoh(out, ptr)
        self.stream.synchronize()
        return list(out)

    def test_eager_copies_and_sets_round_trip(self):
        ctx, s, n = self.ctx, self.stream, 1024
        a, b = self.malloc(n * 4), self.malloc(n * 4)
        src = array.array("f", [i * 0.5 for i in range(n)])
        s.memcpy_htod(a, src)  # pageable host memory is fine eagerly
        s.memcpy_dtod(b, a, n * 4)
        out = bytearray(n * 4)
        s.memcpy_dtoh(out, b)
        s.synchronize()
        self.assertEqual(bytes(out), src.tobytes())
        s.memcpy_htod(a, b"", 0)  # nothing to copy: a no-op

        with cgc.HostBuffer(ctx, n * 4) as up, cgc.HostBuffer(ctx, n * 4, write_combined=True) as staging:
            values = up.as_array(ctypes.c_float)
            self.assertEqual(len(values), n)
            for i in range(n):
                values[i] = -float(i)
            s.memcpy_htod(a, up)
            s.memcpy_dtoh(staging, a)  # asynchronous: page-locked memory
            s.synchronize()
            self.assertEqual(staging.as_memoryview("f").tolist(), [-float(i) for i in range(n)])
        self.assertTrue(up.closed)
        with self.assertRaises(cgc.InvalidHandleError):
            up.as_array()

        # Sets of each width, side by side in `a`.
        s.memset_d8(a, 0xAB, 16)
        s.memset_d16(a + 16, 0x1234, 8)
        s.memset_d32(a + 32, float_bits(1.5), n - 8)
        raw = bytes(self.read(a, ctypes.c_ubyte, n * 4))
        self.assertEqual(raw[:16], b"\xab" * 16)
        self.assertEqual(raw[16:32], struct.pack("<8H", *[0x1234] * 8))
        self.assertEqual(array.array("f", raw[32:]).tolist(), [1.5] * (n - 8))

        # A buffer of the caller's, page-locked in place for as long as the HostBuffer is open.
        mine = bytearray(n * 4)
        with cgc.HostBuffer.register(ctx, mine) as pinned:
            self.assertTrue(pinned.registered)
            with self.assertRaises(BufferError):
                mine.append(0)  # it must not move while the driver knows its address
            s.memcpy_dtoh(pinned, b)
            s.synchronize()
            self.assertEqual(bytes(mine), src.tobytes())
        mine.append(0)  # unregistered: a plain bytearray again

    def test_stream_queries_and_access_policy(self):
        ctx, s = self.ctx, self.stream
        least, greatest = ctx.stream_priority_range()
        self.assertLessEqual(greatest, least)
        with cgc.Stream(ctx, priority=greatest) as urgent:
            self.assertEqual(urgent.priority, greatest)
            self.assertEqual(s.priority, 0)
            self.assertNotEqual(urgent.id, s.id)
            self.assertEqual(s.id, s.id)
            self.assertEqual(s.device, 0)
            self.assertNotEqual(s.native_context, 0)
            self.assertEqual(s.native_context, urgent.native_context)  # one primary context
            s.copy_attributes_from(urgent)

        window = self.malloc(1 << 16)
        try:
            s.set_access_policy(window, 1 << 16, hit_ratio=0.5, hit_property="persisting", miss_property="streaming")
        except cgc.NotSupportedError as e:
            self.skipTest("no access-policy window on this device: %s" % e)
        policy = s.access_policy()
        self.assertEqual(policy, cgc.AccessPolicy(window, 1 << 16, 0.5, cgc.AccessProperty.PERSISTING,
                                                  cgc.AccessProperty.STREAMING))
        s.set_access_policy(window, 0)  # off
        self.assertEqual(s.access_policy().nbytes, 0)
        s.set_access_policy(*policy)  # restored from what was read
        self.assertEqual(s.access_policy(), policy)
        s.set_access_policy(window, 0)
        err = cgc.InvalidArgumentError
        self.expect_raise(err, "cgc_stream_set_access_policy", lambda: s.set_access_policy(window, 64, hit_ratio=2.0),
                          "hit_ratio")
        self.expect_raise(err, "cgc_stream_set_access_policy", lambda: s.set_access_policy(window, 64, hit_property=7),
                          "hit_property (7)")
        self.expect_raise(err, "cgc_stream_set_access_policy", lambda: s.set_access_policy(window, 1 << 40),
                          "largest access-policy window")

    def test_captured_graph_replays_with_per_replay_values(self):
        ctx, origin, n, block = self.ctx, self.stream, 4096, 256
        side = cgc.Stream(ctx)
        fork, join = cgc.Event(ctx), cgc.Event(ctx)
        module = cgc.Module.from_file(ctx, scale_add_ptx())
        scale_add = module.function("scale_add")
        self.assertIs(module.function("scale_add"), scale_add)
        self.assertGreaterEqual(scale_add.get_attribute(cgc.FunctionAttribute.MAX_THREADS_PER_BLOCK), block)
        self.assertGreater(scale_add.get_attribute("num_regs"), 0)

        host_in, host_out, host_params = (cgc.HostBuffer(ctx, n * 4), cgc.HostBuffer(ctx, n * 4),
                                          cgc.HostBuffer(ctx, 8))
        inputs, outputs = host_in.as_array(ctypes.c_float), host_out.as_array(ctypes.c_float)
        params = host_params.as_array(ctypes.c_float)
        for i in range(n):
            inputs[i] = (i % 97) * 0.25
        d_in, d_out, d_params, flag = self.malloc(n * 4), self.malloc(n * 4), self.malloc(8), self.malloc(4)
        origin.memcpy_htod(d_in, host_in)
        origin.synchronize()
        for p in (d_in, d_out, d_params, flag):  # used on the side stream too
            cgc.record_stream(p, side)

        replays_seen = []

        def count_replay():  # runs on a driver thread at every replay
            replays_seen.append(len(replays_seen) + 1)
        alive, pending = weakref.ref(count_replay), cgc.pending_host_funcs()

        g = cgc.Graph()
        with cgc.graph(g, stream=origin):
            origin.memset_d32(flag, 0, 1)
            origin.memcpy_htod(d_params, host_params)  # the replay's parameters, read at each replay
            fork.record(origin)
            side.wait_event(fork)
            scale_add.launch((n + block - 1) // block, block,
                             [ctypes.c_void_p(d_out), ctypes.c_void_p(d_in), ctypes.c_void_p(d_params),
                              ctypes.c_uint32(n)], side)
            side.write_value32(flag, 1)
            join.record(side)
            origin.wait_event(join)
            origin.wait_value32(flag, 1, cgc.WAIT_EQ)
            origin.memcpy_dtoh(host_out, d_out)
            origin.launch_host_func(count_replay)
        del count_replay
        self.assertEqual(replays_seen, [])  # a host node runs at replays, not at capture
        self.assertEqual(cgc.pending_host_funcs(), pending + 1)
        self.assertIsNotNone(alive(), "the graph's host function must stay alive")
        # The graph keeps the kernel's code loaded; the handles die with the module.
        module.close()
        with self.assertRaises(cgc.InvalidHandleError):
            scale_add.launch(1, 1, [], origin)

        for r in (1, 2, 3):
            params[0], params[1] = float(r), 10.0 * r  # new values, no recapture
            g.replay()
            origin.synchronize()
            bad = [(i, outputs[i]) for i in range(n)
                   if abs(outputs[i] - (inputs[i] * r + 10.0 * r)) > 1e-4 * abs(inputs[i] * r + 10.0 * r) + 1e-6]
            self.assertEqual(bad[:5], [], "replay %d" % r)
            self.assertEqual(replays_seen, list(range(1, r + 1)))

        info = g.info()
        self.assertEqual((info.kernel_nodes, info.memcpy_nodes, info.memset_nodes, info.host_nodes, info.mem_op_nodes),
                         (1, 2, 1, 1, 2))
        # The kinds split node_count (the fork and join are edges, not nodes).
        counts = [getattr(info, kind) for kind in cgc.GRAPH_NODE_KINDS + ("other_nodes",)]
        self.assertEqual(info.node_count, sum(counts))
        self.assertEqual(info.replay_count, 3)

        g.close()  # its host node's callable goes now, not before
        self.assertEqual(cgc.pending_host_funcs(), pending)
        self.assertIsNone(alive(), "the host function outlived its graph")
        self.assertEqual(len(replays_seen), 3)
        for obj in (host_in, host_out, host_params, fork, join, side):
            obj.close()

    def test_pageable_host_memory_is_refused_in_a_capture(self):
        s, n = self.stream, 16
        d = self.malloc(n * 4)
        g = cgc.Graph()
        with cgc.graph(g, stream=s):
            for copy in (lambda: s.memcpy_htod(d, bytearray(n * 4)),
                         lambda: s.memcpy_dtoh((ctypes.c_float * n)(), d)):
                e = self.expect_raise(cgc.CaptureUnsupportedError, "cgc_memcpy_", copy, "pageable", "cgc_host_alloc")
                self.assertEqual(e.status, cgc.Status.CAPTURE_UNSUPPORTED)
            self.assertEqual(s.capture_status()[0], cgc.CaptureStatus.ACTIVE)  # refused, not broken
            s.memset_d32(d, 7, n)
        info = g.info()
        self.assertEqual((info.memcpy_nodes, info.memset_nodes, info.node_count), (0, 1, 1))
        s.memset_d32(d, 0, n)
        g.replay()
        self.assertEqual(self.read(d, ctypes.c_uint32, n), [7] * n)
        g.close()

    def test_host_functions_eager(self):
        s, before = self.stream, cgc.pending_host_funcs()
        threads = []
        s.launch_host_func(lambda: threads.append(threading.get_ident()))
        s.synchronize()
        self.assertEqual(len(threads), 1)
        self.assertNotEqual(threads[0], threading.get_ident())  # a driver thread
        self.assertEqual(cgc.pending_host_funcs(), before)  # released once it ran

        # cgc refuses to be called from a host function, where the driver forbids CUDA calls.
        d, errors = self.malloc(4), []

        def calls_cgc():
            try:
                s.memset_d32(d, 1, 1)
            except cgc.Error as e:
                errors.append(e)
        s.launch_host_func(calls_cgc)
        s.synchronize()
        self.assertEqual(len(errors), 1)
        self.assertIsInstance(errors[0], cgc.InvalidStateError)
        self.assertIn("host function", errors[0].message)

        # An exception cannot reach the caller: it goes to sys.unraisablehook, and the stream goes on.
        reported, hook = [], sys.unraisablehook
        sys.unraisablehook = lambda args: reported.append(args.exc_type)
        try:
            s.launch_host_func(lambda: 1 / 0)
            s.synchronize()
        finally:
            sys.unraisablehook = hook
        self.assertEqual(reported, [ZeroDivisionError])
        s.memset_d32(d, 2, 1)
        self.assertEqual(self.read(d, ctypes.c_uint32, 1), [2])
        self.assertEqual(cgc.pending_host_funcs(), before)

        # The C contract: a NULL fn is refused and its release still runs, once.
        releases = []
        release = cgc.host_fn(lambda user: releases.append(user))
        st = cgc.api().cgc_launch_host_func(s.handle, cgc.host_fn(), 7, release)
        self.assertEqual(st, cgc.Status.INVALID_ARGUMENT)
        self.assertIn("fn is NULL", cgc.api().cgc_last_error().decode())
        self.assertEqual(releases, [7])

    def test_memory_operations(self):
        s = self.stream
        flags = self.malloc(32)
        s.memset_d32(flags, 0, 8)
        s.write_value32(flags, 5)
        s.wait_value32(flags, 5, cgc.WAIT_EQ)
        s.write_value32(flags + 4, 6)
        s.wait_value32(flags + 4, 4, cgc.WAIT_GEQ)
        s.batch_mem_op([cgc.MemOp.write32(flags + 8, 0x11), cgc.MemOp.barrier(),
                        cgc.MemOp.wait32(flags + 8, 0x10, cgc.WAIT_AND), cgc.MemOp.write32(flags + 12, 0x22),
                        cgc.MemOp.barrier(gpu_scope=True)])
        self.assertEqual(self.read(flags, ctypes.c_uint32, 4), [5, 6, 0x11, 0x22])
        try:
            s.write_value64(flags + 16, 1 << 40)
        except cgc.NotSupportedError as e:
            self.assertIn("64-bit", e.message)
            return
        s.wait_value64(flags + 16, 1 << 40, cgc.WAIT_EQ)
        s.batch_mem_op([cgc.MemOp.write64(flags + 24, (1 << 63) + 1)])
        self.assertEqual(self.read(flags + 16, ctypes.c_uint64, 2), [1 << 40, (1 << 63) + 1])

    def test_bad_arguments_with_real_handles(self):
        lib, ctx, s = cgc.api(), self.ctx, self.stream
        d = self.malloc(1024)
        err = cgc.InvalidArgumentError
        module = cgc.Module.from_file(ctx, scale_add_ptx())
        scale_add = module.function("scale_add")

        # Handles of another kind.
        for function, kind, call in (
                ("cgc_module_unload", "module", lambda: lib.cgc_module_unload(s.handle)),
                ("cgc_memset_d32_async", "stream", lambda: lib.cgc_memset_d32_async(d, 0, 1, ctx.handle)),
                ("cgc_launch_kernel", "function",
                 lambda: lib.cgc_launch_kernel(module.handle, 1, 1, 1, 1, 1, 1, 0, s.handle, None)),
                ("cgc_host_alloc", "context", lambda: lib.cgc_host_alloc(s.handle, 64, 0, ctypes.byref(ctypes.c_void_p())))):
            self.assertEqual(call(), cgc.Status.INVALID_HANDLE, function)
            message = lib.cgc_last_error().decode()
            self.assertIn(function, message)
            self.assertIn("not a live cgc %s handle" % kind, message)
        self.expect_raise(cgc.InvalidHandleError, "cgc_launch_kernel",  # a Context passed as the stream
                          lambda: scale_add.launch(1, 1, [ctypes.c_void_p(d)] * 3 + [ctypes.c_uint32(0)], ctx), "stream")

        # Enums and flags out of range.
        self.expect_raise(err, "cgc_function_get_attribute", lambda: scale_add.get_attribute(99), "attribute 99")
        self.expect_raise(err, "cgc_function_set_attribute", lambda: scale_add.set_attribute("num_regs", 1),
                          "cannot be set")
        self.expect_raise(err, "cgc_stream_batch_mem_op", lambda: s.batch_mem_op([cgc.MemOp(9, d)]), "kind 9")
        self.expect_raise(err, "cgc_stream_wait_value32", lambda: s.wait_value32(d, 1, 0x7), "wait flags")
        self.expect_raise(err, "cgc_stream_write_value32", lambda: s.write_value32(d, 1, 0x1), "writes take 0")
        self.expect_raise(err, "cgc_stream_batch_mem_op", lambda: s.batch_mem_op([cgc.MemOp.write32(d, 1, 0x1)]),
                          "writes take 0")
        self.expect_raise(err, "cgc_stream_batch_mem_op", lambda: s.batch_mem_op([cgc.MemOp(cgc.MemOpKind.BARRIER,
                                                                                             flags=7)]),
                          "barrier's flags")
        A, mine = cgc.Status.INVALID_ARGUMENT, ctypes.create_string_buffer(64)
        self.expect(A, "cgc_host_alloc", lambda: lib.cgc_host_alloc(ctx.handle, 64, 0x80, ctypes.byref(ctypes.c_void_p())),
                    "unknown flag bits 0x80")
        self.expect(A, "cgc_host_register", lambda: lib.cgc_host_register(ctx.handle, ctypes.addressof(mine), 64, 0x8),
                    "unknown flag bits 0x8")
        self.expect(A, "cgc_host_register", lambda: lib.cgc_host_register(ctx.handle, ctypes.addressof(mine), (1 << 64) - 1,
                                                                          0), "past the end")

        # Sizes and alignment.
        self.expect_raise(err, "cgc_memset_d32_async", lambda: s.memset_d32(d + 2, 0, 1), "aligned")
        self.expect_raise(err, "cgc_memset_d16_async", lambda: s.memset_d16(d, 0, 1 << 63), "past the end")
        self.expect_raise(err, "cgc_memcpy_dtod_async", lambda: s.memcpy_dtod(d, d, (1 << 64) - 1), "past the end")
        self.expect_raise(err, "cgc_stream_write_value32", lambda: s.write_value32(d + 2, 1), "aligned")
        self.expect_raise(err, "cgc_stream_batch_mem_op", lambda: s.batch_mem_op([]), "count is 0")
        self.expect_raise(err, "cgc_stream_batch_mem_op", lambda: s.batch_mem_op([cgc.MemOp.write32(d, 1)] * 256),
                          "count is 256")
        self.expect_raise(err, "cgc_stream_batch_mem_op", lambda: s.batch_mem_op([cgc.MemOp.write32(d, 1 << 33)]),
                          "32-bit")
        self.expect_raise(err, "cgc_launch_kernel", lambda: scale_add.launch((1, 0), 1, [], s), "zero dimension")
        self.expect_raise(err, "cgc_module_get_function", lambda: module.function("no_such_kernel"), "no_such_kernel")
        with self.assertRaises(cgc.Error) as cm:
            cgc.Module(ctx, "this is not PTX")
        self.assertIn("cgc_module_load", cm.exception.message)
        self.expect(A, "cgc_host_unregister", lambda: lib.cgc_host_unregister(ctypes.addressof(mine)), "page-locked")
        self.expect(A, "cgc_host_free", lambda: lib.cgc_host_free(ctypes.addressof(mine)), "page-locked")
        module.close()


class ScaleAddGpuCase(ExpectMixin, unittest.TestCase):
    """What GpuUpdateTest and GpuFamiliesTest share: a context, a stream and the examples' kernel
    scale_add (out = in * params[0] + params[1]) over quarters below 25. No tests of its own."""

    def setUp(self):
        require_gpu(self)
        self.ctx = cgc.Context(0)
        self.stream = cgc.Stream(self.ctx)
        self.module = cgc.Module.from_file(self.ctx, scale_add_ptx())
        self.scale_add = self.module.function("scale_add")
        self.n, self.blocks = 4096, []
        self.inputs = array.array("f", [(i % 97) * 0.25 for i in range(self.n)])
        self.input = self.malloc(self.n * 4)
        self.stream.memcpy_htod(self.input, self.inputs)
        self.params = self.params_of(2.0, 1.0)

    def tearDown(self):
        self.stream.synchronize()
        for p in self.blocks:
            cgc.free(p)
        self.module.close()
        self.stream.close()
        self.ctx.close()

    def malloc(self, nbytes):
        p = cgc.malloc(self.ctx, nbytes, self.stream)
        self.blocks.append(p)
        return p

    def params_of(self, scale, shift):
        p = self.malloc(8)
        self.stream.memcpy_htod(p, array.array("f", [scale, shift]))
        return p

    def zeroed(self):
        p = self.malloc(self.n * 4)
        self.stream.memset_d32(p, 0, self.n)
        return p

    def args(self, out, params=None):
        return [ctypes.c_void_p(out), ctypes.c_void_p(self.input), ctypes.c_void_p(params or self.params),
                ctypes.c_uint32(self.n)]

    def launch(self, out, params=None):
        self.scale_add.launch((self.n + 255) // 256, 256, self.args(out, params), self.stream)

    def expect_values(self, buf, scale, shift, what):
        out = (ctypes.c_float * self.n)()
        self.stream.memcpy_dtoh(out, buf)
        self.stream.synchronize()
        # The inputs are quarters below 25: every result is exact in float32.
        want = array.array("f", [x * scale + shift for x in self.inputs])
        bad = [(i, out[i], want[i]) for i in range(self.n) if out[i] != want[i]]
        self.assertEqual(bad[:3], [], what)

    def launch_n(self, out, params, n):
        """scale_add over the first `n` floats only: a grid of n / 256 blocks (rounded up)."""
        args = [ctypes.c_void_p(out), ctypes.c_void_p(self.input), ctypes.c_void_p(params), ctypes.c_uint32(n)]
        self.scale_add.launch((n + 255) // 256, 256, args, self.stream)

    def expect_prefix(self, buf, n, scale, shift, what):
        """buf's first `n` floats are in * scale + shift, the rest 0."""
        out = (ctypes.c_float * self.n)()
        self.stream.memcpy_dtoh(out, buf)
        self.stream.synchronize()
        want = array.array("f", [x * scale + shift if i < n else 0.0 for i, x in enumerate(self.inputs)])
        bad = [(i, out[i], want[i]) for i in range(self.n) if out[i] != want[i]]
        self.assertEqual(bad[:3], [], what)


class GpuUpdateTest(ScaleAddGpuCase):
    """1.2 on a GPU: a recapture that updates a Graph in place or instantiates it anew, and
    per-node updates of its kernels, with scale_add."""

    def test_the_same_topology_updates_in_place(self):
        a, b = self.zeroed(), self.zeroed()
        g = cgc.Graph()
        with cgc.graph(g, stream=self.stream):
            self.launch(a)
        g.replay()
        self.expect_values(a, 2.0, 1.0, "a, first capture")
        self.assertEqual(g.info().last_update, cgc.GraphUpdate.NONE)
        handle, executable = g.handle, g.native_exec
        self.stream.memset_d32(a, 0, self.n)

        with cgc.graph(g, stream=self.stream, update=True) as same:
            self.assertIs(same, g)
            self.launch(b)  # a new pointer, the same topology
        info = g.info()
        self.assertEqual((info.update_count, info.last_update, info.last_update_result),
                         (1, cgc.GraphUpdate.IN_PLACE, 0))
        self.assertIsInstance(info.last_update, cgc.GraphUpdate)
        self.assertEqual(info.kernel_nodes, 1)
        self.assertEqual(g.handle, handle, "the update keeps the graph's handle")
        self.assertEqual(g.native_exec, executable, "in place: the same executable")
        g.replay()
        self.expect_values(b, 2.0, 1.0, "b, written by the updated graph")
        self.expect_values(a, 0.0, 0.0, "a, no longer written")
        g.close()

    def test_a_changed_topology_is_instantiated_anew_and_a_failed_body_discards(self):
        a, b = self.zeroed(), self.zeroed()
        g = cgc.Graph()
        with cgc.graph(g, stream=self.stream):
            self.launch(a)
        other_params = self.params_of(3.0, -1.0)  # made eagerly: a pageable copy is refused in a capture
        with cgc.graph(g, stream=self.stream, update=True):
            self.launch(a, other_params)
            self.launch(b)  # one kernel more
        info = g.info()
        self.assertEqual((info.update_count, info.last_update, info.last_update_result),
                         (1, cgc.GraphUpdate.REINSTANTIATED, 2))  # 2: CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED
        self.assertEqual(info.kernel_nodes, 2)
        g.replay()
        self.expect_values(a, 3.0, -1.0, "a")
        self.expect_values(b, 2.0, 1.0, "b")

        # Through cgc.capture a body that raises leaves the graph as it was.
        with self.assertRaises(ZeroDivisionError):
            cgc.capture(self.stream, lambda s: (self.launch(a), 1 / 0), update=g)
        self.assertFalse(self.stream.is_capturing())
        self.assertEqual(g.info().update_count, 1, "a discarded update counted")
        self.stream.memset_d32(a, 0, self.n)
        self.stream.memset_d32(b, 0, self.n)
        g.replay()
        self.expect_values(a, 3.0, -1.0, "a, after the discarded update")
        self.expect_values(b, 2.0, 1.0, "b, after the discarded update")
        # And a body that ends well updates it: the same Graph comes back.
        self.assertIs(cgc.capture(self.stream, lambda s: self.launch(b), update=g), g)
        self.assertEqual(g.info().last_update, cgc.GraphUpdate.REINSTANTIATED)  # one kernel fewer
        self.assertEqual(g.info().kernel_nodes, 1)

        # A body that raises in an update under with: the half-made recapture is not kept, nor the old graph.
        with self.assertRaises(ZeroDivisionError):
            with cgc.graph(g, stream=self.stream, update=True):
                self.launch(a)
                1 / 0
        self.assertFalse(self.stream.is_capturing())
        with self.assertRaises(cgc.InvalidStateError):
            g.replay()
        with cgc.graph(g, stream=self.stream):  # empty again: it captures anew
            self.launch(a)
        self.assertEqual(g.info().update_count, 0)
        g.close()

    def test_kernels_can_be_disabled_and_given_new_arguments(self):
        a, b, c, d = self.zeroed(), self.zeroed(), self.zeroed(), self.zeroed()
        g = cgc.Graph()
        with cgc.graph(g, stream=self.stream):
            for out in (a, b, c):
                self.launch(out)
        self.assertEqual(g.info().kernel_nodes, 3)
        g.set_kernel_enabled(1, False)  # b's kernel
        g.set_kernel_args(2, self.args(d, self.params_of(3.0, -1.0)))  # c's kernel now writes d
        g.replay()
        self.expect_values(a, 2.0, 1.0, "a")
        self.expect_values(b, 0.0, 0.0, "b (disabled)")
        self.expect_values(c, 0.0, 0.0, "c (its kernel writes d now)")
        self.expect_values(d, 3.0, -1.0, "d (new arguments)")
        g.set_kernel_enabled(1)
        g.replay()
        self.expect_values(b, 2.0, 1.0, "b (enabled again)")

        self.expect_raise(cgc.InvalidArgumentError, "cgc_graph_kernel_node_set_enabled",
                          lambda: g.set_kernel_enabled(3, False), "3 kernel nodes")
        self.expect_raise(cgc.InvalidArgumentError, "cgc_graph_kernel_node_set_args",
                          lambda: g.set_kernel_args(3, self.args(d)), "3 kernel nodes")
        g.reset()
        with self.assertRaises(cgc.InvalidStateError):
            g.set_kernel_enabled(0, False)
        g.close()


class GpuFamiliesTest(ScaleAddGpuCase):
    """1.6 on a GPU: graphs of one structure (scale_add, with other buffers, parameters and grid)
    share one executable after share_executable, each launch running the launched graph's own
    nodes; a graph of another structure (one kernel more) is refused and keeps its own."""

    def launch_and_expect(self, g, out, n, scale, shift, what):
        self.stream.memset_d32(out, 0, self.n)
        g.launch(self.stream)
        self.expect_prefix(out, n, scale, shift, what)

    def family(self, g):
        info = g.info()
        return info.family_size, info.family_result

    def test_graphs_of_one_structure_share_one_executable(self):
        a, b = self.zeroed(), self.zeroed()
        other_params = self.params_of(3.0, -1.0)
        na, nb = self.n, self.n // 2
        leader, member = cgc.Graph(), cgc.Graph()
        with cgc.graph(leader, stream=self.stream):
            self.launch_n(a, self.params, na)
        with cgc.graph(member, stream=self.stream):
            self.launch_n(b, other_params, nb)
        self.assertEqual(self.family(leader), (1, 0), "a graph with its own executable")
        self.assertNotEqual(leader.native_exec, member.native_exec)

        member.share_executable(leader)
        self.assertEqual(self.family(leader), (2, 0), "the leader")
        self.assertEqual(self.family(member), (2, 0), "the member")
        self.assertEqual(leader.native_exec, member.native_exec, "one executable")
        for round_ in range(3):
            self.launch_and_expect(member, b, nb, 3.0, -1.0, "the member, round %d" % round_)
            self.launch_and_expect(leader, a, na, 2.0, 1.0, "the leader, round %d" % round_)
        leader.replay()  # on its capture stream: the executable holds its nodes already
        self.expect_prefix(a, na, 2.0, 1.0, "the leader replayed again")
        member.upload()
        self.launch_and_expect(member, b, nb, 3.0, -1.0, "the member after its upload")
        self.assertEqual((leader.info().replay_count, member.info().replay_count), (4, 4))
        member.share_executable(leader)  # the family it is in already: nothing changes
        self.assertEqual(self.family(member), (2, 0))

        # Refusals: itself as leader; per-node updates and updates by capture of a member.
        self.expect_raise(cgc.InvalidArgumentError, "cgc_graph_share_executable",
                          lambda: leader.share_executable(leader))
        self.expect_raise(cgc.InvalidStateError, "cgc_graph_kernel_node_set_enabled",
                          lambda: member.set_kernel_enabled(0, False), "family")
        with self.assertRaises(cgc.InvalidStateError) as cm:
            with cgc.graph(member, stream=self.stream, update=True):
                self.launch_n(b, self.params, nb)
        self.assertIn("cgc_capture_begin", cm.exception.message)
        self.assertIn("family", cm.exception.message)
        self.assertFalse(self.stream.is_capturing())
        self.launch_and_expect(member, b, nb, 3.0, -1.0, "the member after the refusals")

        # The leader goes first: the member keeps the executable.
        leader.reset()
        self.assertEqual(self.family(member), (1, 0), "the member after the leader's reset")
        self.launch_and_expect(member, b, nb, 3.0, -1.0, "the member after the leader's reset")
        member.close()
        leader.close()

    def test_a_graph_of_another_structure_cannot_share(self):
        a, b, c = self.zeroed(), self.zeroed(), self.zeroed()
        other_params = self.params_of(3.0, -1.0)
        leader, other = cgc.Graph(), cgc.Graph()
        with cgc.graph(leader, stream=self.stream):
            self.launch_n(a, self.params, self.n)
        with cgc.graph(other, stream=self.stream):
            self.launch_n(b, other_params, self.n)
            self.launch_n(c, self.params, self.n)  # one kernel more
        self.expect_raise(cgc.NotSupportedError, "cgc_graph_share_executable", lambda: other.share_executable(leader))
        size, result = self.family(other)
        self.assertEqual(size, 1)
        self.assertNotEqual(result, 0, "family_result says why")
        self.assertEqual(self.family(leader), (1, 0))
        self.assertNotEqual(leader.native_exec, other.native_exec)
        self.launch_and_expect(other, b, self.n, 3.0, -1.0, "b, of the refused graph")
        self.expect_values(c, 2.0, 1.0, "c, of the refused graph")
        self.launch_and_expect(leader, a, self.n, 2.0, 1.0, "a, of the leader")
        other.close()
        leader.close()


class GpuConditionalTest(ExpectMixin, unittest.TestCase):
    """1.2's conditional nodes on a GPU: a WHILE loop that counts on the device to a bound given
    per replay through page-locked memory, an IF that skips its body, and what a body refuses
    (1.3's bodies and what they may hold since: test_conditional_bodies).
    Skipped with a driver older than CUDA 12.4 (the library says NotSupportedError then)."""

    def setUp(self):
        require_gpu(self)
        self.ctx = cgc.Context(0)
        self.stream = cgc.Stream(self.ctx)
        self.module = cgc.Module.from_file(self.ctx, binding_tests_ptx())
        self.init, self.step, self.count = (self.module.function(n) for n in ("cond_init", "cond_step", "cond_count"))
        # Words: 0 counter, 1 n, 2 more (the condition), 3 after-node count, 4 body count.
        self.words = cgc.malloc(self.ctx, 64, self.stream)
        self.stream.memset_d32(self.words, 0, 16)
        self.counter, self.n, self.more, self.after, self.hits = (self.words + 4 * i for i in range(5))
        self.host = cgc.HostBuffer(self.ctx, 4)  # page-locked: the per-replay value, copied in by the graph
        self.value = self.host.as_array(ctypes.c_uint32)
        self.graph = cgc.Graph()
        self.require_conditionals()

    def tearDown(self):
        if self.stream.is_capturing():  # a failed test's capture: end it so everything can close
            try:
                self.graph.capture_end()
            except cgc.Error:
                pass
        self.stream.synchronize()
        self.graph.close()
        cgc.free(self.words)
        self.host.close()
        self.module.close()
        self.stream.close()
        self.ctx.close()

    def require_conditionals(self):
        """Skips the test where the driver predates CUDA 12.4: begin says NotSupportedError then
        (checked after the arguments, before whether the stream captures)."""
        try:
            with self.stream.conditional(cgc.ConditionalKind.IF, self.more):
                self.fail("a body began outside a capture")
        except cgc.NotSupportedError as e:
            self.tearDown()  # a skip in setUp runs no tearDown
            self.skipTest("conditional nodes need a driver for CUDA 12.4: %s" % e.message)
        except cgc.InvalidStateError as e:
            self.assertIn("not capturing", e.message)

    def args(self, *addresses):
        return [ctypes.c_void_p(a) for a in addresses]

    def words_now(self):
        out = (ctypes.c_uint32 * 16)()
        self.stream.synchronize()
        self.stream.memcpy_dtoh(out, self.words)
        self.stream.synchronize()
        return list(out)

    def test_a_while_loop_counts_to_a_bound_given_per_replay(self):
        s, loop = self.stream, self.args(self.counter, self.n, self.more)
        with cgc.graph(self.graph, stream=s):
            s.memcpy_htod(self.n, self.host, 4)  # the bound, read from page-locked memory at each replay
            self.init.launch(1, 1, loop, s)
            with s.conditional(cgc.ConditionalKind.WHILE, self.more) as body:
                self.assertIsInstance(body, cgc.Stream)
                self.assertNotEqual(body.handle, s.handle)
                self.step.launch(1, 1, loop, body)
        self.assertTrue(body.closed, "the block's end gave the body back")
        self.assertEqual(self.graph.info().conditional_nodes, 1)
        for bound in (3, 17, 0, 1, 1000):
            self.value[0] = bound
            self.graph.launch(s)
            self.assertEqual(self.words_now()[0], bound, "the loop ran to this replay's bound")

    def test_an_if_skips_its_body_when_the_condition_is_zero(self):
        s = self.stream
        with cgc.graph(self.graph, stream=s):
            s.memcpy_htod(self.more, self.host, 4)  # the condition itself, per replay
            with s.conditional("if", self.more) as body:
                self.count.launch(1, 1, self.args(self.hits), body)
            self.count.launch(1, 1, self.args(self.after), s)  # after the node: always runs
        want = 0
        for run in (1, 0, 0, 1, 1):
            self.value[0] = run
            self.graph.launch(s)
            want += run
            w = self.words_now()
            self.assertEqual((w[4], w[3]), (want, self.graph.info().replay_count))

    def test_a_body_refuses_a_host_function_and_a_failing_block_ends_the_body(self):
        s = self.stream
        # Not capturing, a kind the library does not know and a SWITCH (whose bodies come from
        # conditional_bodies), with a real stream.
        self.expect_raise(cgc.InvalidStateError, "cgc_capture_conditional_begin",
                          lambda: s.conditional(cgc.ConditionalKind.WHILE, self.more).__enter__(), "not capturing")
        self.expect_raise(cgc.InvalidArgumentError, "cgc_capture_conditional_begin",
                          lambda: s.conditional(7, self.more).__enter__(), "kind 7")
        self.expect_raise(cgc.InvalidArgumentError, "cgc_capture_conditional_begin",
                          lambda: s.conditional(cgc.ConditionalKind.SWITCH, self.more).__enter__(),
                          "cgc_capture_conditional_begin_bodies")
        with cgc.graph(self.graph, stream=s):
            with s.conditional(cgc.ConditionalKind.IF, self.more) as body:
                # (Allocations and draws are allowed in bodies since 1.3: test_conditional_bodies.)
                self.expect_raise(cgc.CaptureUnsupportedError, "cgc_launch_host_func",
                                  lambda: body.launch_host_func(lambda: None))
                with self.assertRaises(cgc.InvalidStateError):
                    body.close()  # lent: the block gives it back
                # What a body may hold still works: a set and a kernel.
                body.memset_d32(self.hits, 7, 1)
                self.count.launch(1, 1, self.args(self.hits), body)
            # A block that raises still ends its body (the capture could not end otherwise), and
            # its exception is the one that comes out. Its condition, n, stays 0: it never runs.
            with self.assertRaises(ZeroDivisionError):
                with s.conditional(cgc.ConditionalKind.WHILE, self.n) as failed:
                    1 / 0
            self.assertTrue(failed.closed)
        self.assertEqual(self.graph.info().conditional_nodes, 2)
        s.memset_d32(self.more, 1, 1)  # the IF runs its body
        self.graph.launch(s)
        self.assertEqual(self.words_now()[4], 8, "the body's set (7) and kernel (+1) ran")


class GpuNcclTest(unittest.TestCase):
    """The NCCL wrappers on one GPU: a 1-rank communicator, eager and captured."""

    def setUp(self):
        require_gpu(self)
        try:
            self.nccl = cgc.nccl_version()
        except cgc.Error as e:
            self.skipTest("no NCCL: %s" % e)
        self.cuda = Cuda()

    def test_one_rank_collectives_eager_and_captured(self):
        self.assertGreaterEqual(self.nccl, 20906)  # cgc's floor, 2.9.6
        cuda = self.cuda
        ctx = cgc.Context(0)
        s = cgc.Stream(ctx)
        gen = cgc.Rng(ctx, seed=11)
        comm = cgc.Comm(ctx, 1, cgc.Comm.unique_id(), 0)
        send, recv = cgc.malloc(ctx, N * 4, s), cgc.malloc(ctx, N * 4, s)
        f32 = cgc.DType.FLOAT32

        def check_copied(what):
            s.synchronize()
            cuda.make_current()
            self.assertEqual(cuda.to_host(recv, N), cuda.to_host(send, N), what)

        # Eager: with one rank every collective copies send into recv (recv is first overwritten
        # with other numbers, so a collective that did nothing would be seen).
        for what, run in (
                ("all_reduce", lambda: comm.all_reduce(send, recv, N, f32, cgc.ReduceOp.SUM, s)),
                ("all_gather", lambda: comm.all_gather(send, recv, N, f32, s)),
                ("broadcast", lambda: comm.broadcast(send, recv, N, f32, 0, s))):
            gen.uniform(send, N, s)
            gen.uniform(recv, N, s)
            run()
            check_copied(what)

        g = cgc.Graph()
        with cgc.graph(g, stream=s):
            comm.all_reduce(send, recv, N, f32, cgc.ReduceOp.SUM, s)
        for _ in range(3):
            gen.uniform(send, N, s)  # new inputs, drawn eagerly
            g.launch(s)
            check_copied("captured all_reduce")

        with self.assertRaises(cgc.InvalidStateError):  # the graph holds the communicator
            comm.close()
        self.assertFalse(comm.closed)
        g.close()
        comm.close()
        cgc.free(send)
        cgc.free(recv)
        for obj in (gen, s, ctx):
            obj.close()

    def test_registered_pool_blocks_in_eager_and_captured_all_reduces(self):
        # 1.5: a pool of memory registered with the communicator, its blocks allocated eagerly
        # (Pool.malloc) and inside a capture into it; the collective's results are exact.
        cuda = self.cuda
        ctx = cgc.Context(0)
        s = cgc.Stream(ctx)
        comm = cgc.Comm(ctx, 1, cgc.Comm.unique_id(), 0)
        capacity = 8 << 20
        pool = cgc.Pool.nccl(comm, capacity - 12345, cgc.NcclMemory.REGISTERED)
        self.assertIn(pool.nccl_memory, (cgc.NcclMemory.PLAIN, cgc.NcclMemory.REGISTERED))
        self.assertIs(pool.comm, comm)
        self.assertIs(pool.context, ctx)
        stats = pool.memory_stats()
        self.assertEqual(stats.bytes_reserved, capacity, "the capacity, rounded up to 2 MiB, at once")
        self.assertEqual(stats.num_driver_allocs, 1)
        f32 = cgc.DType.FLOAT32
        send, recv = pool.malloc(N * 4, s), pool.malloc(N * 4, s)
        self.assertNotEqual(send, 0)
        self.assertGreaterEqual(pool.memory_stats().bytes_allocated, 2 * N * 4)
        self.assertEqual(pool.malloc(0, s), 0)
        with self.assertRaises(cgc.OutOfMemoryError) as raised:  # a fixed arena: never grown
            pool.malloc(capacity, s)
        self.assertIn("cgc_pool_malloc", raised.exception.message)
        self.assertEqual(pool.memory_stats().bytes_reserved, capacity)

        def ones(ptr):  # 1.0f in every element (its bits), eagerly on s
            s.memset_d32(ptr, struct.unpack("<I", struct.pack("<f", 1.0))[0], N)

        ones(send)
        s.memset_d32(recv, 0, N)
        comm.all_reduce(send, recv, N, f32, cgc.ReduceOp.SUM, s)
        s.synchronize()
        cuda.make_current()
        self.assertEqual(set(floats(cuda.to_host(recv, N))), {1.0}, "eager all_reduce on the pool's blocks")

        # Captured into the pool: a temporary of the pool between the input and the result.
        g = cgc.Graph()
        with cgc.graph(g, stream=s, pool=pool):
            with self.assertRaises(cgc.CaptureUnsupportedError):  # eager only: the capture's pool decides
                pool.malloc(512, s)
            tmp = cgc.malloc(ctx, N * 4, s)
            s.memcpy_dtod(tmp, send, N * 4)
            comm.all_reduce(tmp, recv, N, f32, cgc.ReduceOp.SUM, s)
            cgc.free(tmp)
        self.assertEqual(g.pool(), pool)
        for replay, value in enumerate((2.0, -3.5, 7.25)):
            s.memset_d32(send, struct.unpack("<I", struct.pack("<f", value))[0], N)
            s.memset_d32(recv, 0, N)
            g.launch(s)
            s.synchronize()
            cuda.make_current()
            self.assertEqual(set(floats(cuda.to_host(recv, N))), {value}, "replay %d" % replay)

        # The release is refused while the graph or blocks hold the pool, and changes nothing;
        # the pool holds the communicator.
        with self.assertRaises(cgc.InvalidStateError):
            comm.close()
        with self.assertRaises(cgc.InvalidStateError) as raised:
            pool.close()
        self.assertIn("block", raised.exception.message)
        self.assertFalse(pool.closed)
        g.launch(s)
        s.synchronize()
        g.close()
        with self.assertRaises(cgc.InvalidStateError):
            pool.close()  # the blocks still are allocated
        cgc.free(send)
        cgc.free(recv)
        before = ctx.memory_stats().bytes_reserved
        pool.close()
        self.assertTrue(pool.closed)
        self.assertEqual(ctx.memory_stats().bytes_reserved, before - capacity, "the arena went back")
        comm.close()
        s.close()
        ctx.close()


class GpuPoolMallocTest(unittest.TestCase):
    def setUp(self):
        require_gpu(self)

    def test_eager_blocks_of_an_ordinary_pool(self):
        # 1.5's Pool.malloc on a pool of cgc_pool_create: counted in the pool, reused by the same
        # stream's eager allocations, refused inside captures.
        ctx = cgc.Context(0)
        s = cgc.Stream(ctx)
        pool = cgc.Pool(ctx)
        self.assertIsNone(pool.nccl_memory)
        p = pool.malloc(3 << 20, s)
        self.assertEqual(pool.memory_stats().bytes_allocated, 3 << 20)
        cgc.free(p)
        q = pool.malloc(3 << 20, s)
        self.assertEqual(q, p, "the freed eager block serves the same stream again")
        cgc.free(q)
        self.assertEqual(pool.memory_stats().bytes_allocated, 0)
        pool.close()
        s.close()
        ctx.close()


class GpuPoolClaimTest(unittest.TestCase):
    def setUp(self):
        require_gpu(self)

    def test_free_memory_claimed_back_at_its_address(self):
        # 1.6: Pool.claim gives a freed block of a pool back at its address; the same range again
        # is refused (INVALID_STATE: the pool's block holds it), as are address 0 or an unaligned
        # one, size 0 and memory of the device cache; a 512-byte aligned range inside a freed
        # block is cut out of it at its address; claimed blocks are freed with cgc.free.
        ctx = cgc.Context(0)
        s = cgc.Stream(ctx)
        pool = cgc.Pool(ctx)

        def refused(error, ptr, size):
            with self.assertRaises(error) as raised:
                pool.claim(ptr, size)
            self.assertIn("cgc_pool_claim", raised.exception.message)

        first, second = pool.malloc(4096, s), pool.malloc(8192, s)
        cgc.free(first)
        claimed = pool.claim(first, 4096)
        self.assertEqual(claimed, first, "claimed at its address")
        self.assertEqual(pool.memory_stats().bytes_allocated, 4096 + 8192)
        refused(cgc.InvalidStateError, first, 4096)  # the same range again
        refused(cgc.InvalidStateError, first, 512)  # inside the claimed block
        refused(cgc.InvalidArgumentError, first, 0)
        refused(cgc.InvalidArgumentError, first + 256, 512)
        refused(cgc.InvalidArgumentError, 0, 512)
        cached = cgc.malloc(ctx, 4096, s)
        cgc.free(cached)
        refused(cgc.InvalidStateError, cached, 512)  # the device cache's memory is no pool's

        # A sub-range of a freed block, at its address.
        cgc.free(second)
        sub = pool.claim(second + 1024, 1000)
        self.assertEqual(sub, second + 1024)
        self.assertEqual(pool.memory_stats().bytes_allocated, 4096 + 1024, "rounded up to 512")
        refused(cgc.InvalidStateError, second, 2048)  # overlaps the claimed sub-range
        before = pool.claim(second, 1024)
        self.assertEqual(before, second)

        for p in (before, sub, claimed):
            cgc.free(p)
        self.assertEqual(pool.memory_stats().bytes_allocated, 0)
        pool.close()
        s.close()
        ctx.close()


class GpuPoolAtTest(unittest.TestCase):
    # The Python binding's own base (Rust's and Go's tests use others), in case bindings' tests
    # ever share a process.
    BASE = 0x660000000000
    CAPACITY = 64 << 20
    MIB = 1 << 20

    def setUp(self):
        require_gpu(self)

    def test_the_same_addresses_at_the_same_base(self):
        # 1.6: Pool.at reserves its range at exactly the base: the first block of a fresh pool is
        # at the base and every block lies inside the range; allocations beyond the capacity are
        # OUT_OF_MEMORY; close() is refused (the pool stays open) while a block is allocated;
        # once closed, a pool made again at the same base gives the same requests the same
        # addresses. An unaligned base or capacity is refused (INVALID_ARGUMENT, "multiples of"),
        # and so is a pool overlapping a live one (INVALID_STATE, "cannot reserve").
        base, capacity, mib = self.BASE, self.CAPACITY, self.MIB
        ctx = cgc.Context(0)
        s = cgc.Stream(ctx)

        def refused(error, function, call, *words):
            with self.assertRaises(error) as raised:
                call()
            self.assertIn(function, raised.exception.message)
            for word in words:
                self.assertIn(word, raised.exception.message)

        rounds = []
        for round_ in range(2):
            pool = cgc.Pool.at(ctx, base, capacity)
            first, second = pool.malloc(mib, s), pool.malloc(3 * mib, s)
            self.assertEqual(first, base, "round %d: a fresh pool's first block is at its base" % round_)
            for p, size in ((first, mib), (second, 3 * mib)):
                self.assertTrue(base <= p and p + size <= base + capacity,
                                "%#x (+%d) is outside [%#x, %#x)" % (p, size, base, base + capacity))
            rounds.append((first, second))
            if round_ == 0:
                # Beyond the capacity: the range never grows past it.
                refused(cgc.OutOfMemoryError, "cgc_pool_malloc", lambda: pool.malloc(capacity, s))
                # The range is taken while the pool lives: another pool cannot reserve part of it.
                refused(cgc.InvalidStateError, "cgc_pool_create_at",
                        lambda: cgc.Pool.at(ctx, base + 2 * mib, 2 * mib), "cannot reserve")
                # close() is refused while a block is allocated, and the pool stays open.
                refused(cgc.InvalidStateError, "cgc_pool_release", pool.close)
                self.assertFalse(pool.closed)
            cgc.free(first)
            cgc.free(second)
            s.synchronize()
            pool.close()
        self.assertEqual(rounds[0], rounds[1], "the same requests at the same base get the same addresses")

        # Bases and capacities that are not multiples of 2 MiB.
        refused(cgc.InvalidArgumentError, "cgc_pool_create_at", lambda: cgc.Pool.at(ctx, base + 4096, capacity),
                "multiples of")
        refused(cgc.InvalidArgumentError, "cgc_pool_create_at", lambda: cgc.Pool.at(ctx, base, capacity + 4096),
                "multiples of")
        refused(cgc.InvalidArgumentError, "cgc_pool_create_at", lambda: cgc.Pool.at(ctx, base, 0))
        refused(cgc.InvalidArgumentError, "cgc_pool_create_at", lambda: cgc.Pool.at(ctx, 0, capacity))
        s.close()
        ctx.close()


class GpuSavedGraphsTest(unittest.TestCase):
    """1.6 on a GPU: a graph of a pool at fixed addresses, with the bindings' test kernel affine
    (tests/kernels/binding_tests.ptx: out = in * params[0] + params[1] + bias), saved and restored
    at the same addresses, and saved with verification; graphs that reach memory outside such
    pools are not savable; a graph that draws is restored with its generator."""

    # The Python binding's own bases (Rust's and Go's tests use others), in case bindings' tests
    # ever share a process.
    BASE = 0x6A0000000000
    OTHER_BASE = 0x6A4000000000
    FAMILY_BASE = 0x6A8000000000
    VERIFY_BASE = 0x6AC000000000
    GENERATOR_BASE = 0x6E8000000000
    CAPACITY = 64 << 20
    N = 4096

    def setUp(self):
        require_gpu(self)
        self.ctx = cgc.Context(0)
        self.stream = cgc.Stream(self.ctx)
        self.module = cgc.Module.from_file(self.ctx, binding_tests_ptx())
        self.affine = self.module.function("affine")

    def tearDown(self):
        self.stream.synchronize()
        self.module.close()
        self.stream.close()
        self.ctx.close()

    @staticmethod
    def bits(x):
        return struct.unpack("<I", struct.pack("<f", x))[0]

    def launch(self, s, out, inp, params, bias=0.5):
        self.affine.launch((self.N + 255) // 256, 256,
                           [ctypes.c_void_p(out), ctypes.c_void_p(inp), ctypes.c_void_p(params), ctypes.c_float(bias),
                            ctypes.c_uint32(self.N)], s)

    def capture_in(self, pool):
        """affine's work captured into `pool` with everything it reads and writes allocated in
        the capture from that pool: its input (1.5 everywhere) and parameters (scale 2, shift 2)
        written by sets in the graph itself and freed in the capture (kept for the graph), and its
        output, which the graph gives back (1.5 * 2 + 2 + 0.5 = 5.5 everywhere). Nothing outside
        the pool is reached, so the graph can be saved when the pool is at fixed addresses."""
        s, g = self.stream, cgc.Graph()
        with cgc.graph(g, stream=s, pool=pool):
            inp, params = cgc.malloc(self.ctx, self.N * 4, s), cgc.malloc(self.ctx, 8, s)
            out = cgc.malloc(self.ctx, self.N * 4, s)
            s.memset_d32(inp, self.bits(1.5), self.N)
            s.memset_d32(params, self.bits(2.0), 2)
            self.launch(s, out, inp, params)
            cgc.free(inp)
            cgc.free(params)
        return g, out

    def read(self, ptr):
        out = (ctypes.c_float * self.N)()
        self.stream.memcpy_dtoh(out, ptr)
        self.stream.synchronize()
        return list(out)

    def test_a_saved_graph_is_restored_at_the_same_addresses(self):
        # A graph captured into a pool at fixed addresses is saved to bytes (with its kernel's
        # module and the pool's layout), described by saved_info, and, once the graph, its output,
        # its pool (its range given back) and its module are all gone, restored from the bytes:
        # one new Graph and one new Pool at the same base, the output allocated again at its
        # address (the application's to free), and the restored graph, launched, writes there what
        # the first one wrote.
        s, base, capacity = self.stream, self.BASE, self.CAPACITY
        pool = cgc.Pool.at(self.ctx, base, capacity)
        g, out = self.capture_in(pool)
        self.assertTrue(base <= out < base + capacity, "the output at %#x is outside the pool's range" % out)
        g.replay()
        first = self.read(out)
        self.assertEqual(set(first), {5.5}, "1.5 * 2 + 2 + 0.5")

        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "graph.cgc")
            data = cgc.save_graphs([g], path=path)
            with open(path, "rb") as f:
                self.assertEqual(f.read(), data, "save_graphs(path=) writes the bytes it returns")
            self.assertEqual(cgc.saved_info(path), cgc.saved_info(data))
        info = cgc.saved_info(data)
        self.assertIsInstance(info, cgc.SavedInfo)
        self.assertEqual((info.n_graphs, info.n_pools, info.n_modules), (1, 1, 1), info)
        self.assertGreaterEqual(info.pool_bytes, 2 << 20, "the pool backs at least one 2 MiB granule")
        self.assertGreaterEqual(info.n_nodes, 3, info)
        self.assertGreater(info.image_bytes, 0, info)
        self.assertGreater(info.compute_major, 0, info)
        self.assertGreaterEqual(info.driver_version, 12040, "saving needs CUDA 12.4")
        # Only a verifying save measures the device memory a restore takes besides the pools.
        self.assertEqual((info.restore_bytes, info.family_restore_bytes), (0, 0), info)
        # The pool may be named again among the extra pools: it is saved once.
        self.assertEqual(cgc.saved_info(cgc.save_graphs(g, [pool])).n_pools, 1)
        with self.assertRaises(cgc.SavedMismatchError) as cm:
            cgc.saved_info(data[:-1])
        self.assertIn("cgc_saved_info", cm.exception.message)

        # Everything goes: the graph, the output, the pool (its range given back), the module.
        g.close()
        cgc.free(out)
        s.synchronize()
        pool.close()
        self.module.close()

        graphs, pools = self.ctx.restore_graphs(data)
        self.assertEqual((len(graphs), len(pools)), (1, 1))
        (g,), (pool,) = graphs, pools
        self.assertIsInstance(g, cgc.Graph)
        self.assertIsInstance(pool, cgc.Pool)
        self.assertIs(g.context, self.ctx)
        with g.pool() as graph_pool:
            self.assertEqual(graph_pool, pool, "the restored graph allocates from the restored pool")
        with self.assertRaises(cgc.InvalidStateError) as cm:  # no capture stream: launch(s) it
            g.replay()
        self.assertIn("restore", cm.exception.message)
        # The output is allocated again at its address, in the restored pool, the application's.
        blocks = [(seg, b) for seg in self.ctx.memory_snapshot() for b in seg.blocks if b.address == out]
        self.assertEqual(len(blocks), 1, "no block at the saved output's address %#x" % out)
        self.assertEqual((blocks[0][1].state, blocks[0][0].pool), (cgc.BlockState.ALLOCATED, pool.handle))
        # The range is held by the restored pool: a second restore cannot reserve it.
        with self.assertRaises(cgc.InvalidStateError):
            self.ctx.restore_graphs(data)
        s.memset_d32(out, 0, self.N)
        self.assertEqual(set(self.read(out)), {0.0})
        g.launch(s)
        s.synchronize()
        again = self.read(out)
        self.assertEqual([self.bits(x) for x in again], [self.bits(x) for x in first],
                         "the restored graph writes what the first one wrote")

        g.close()
        cgc.free(out)
        s.synchronize()
        pool.close()

        # Restored with a stream, a graph replays on it; dropping the objects destroys the graph
        # and releases the pool (its last block freed first), as for captured ones.
        graphs, pools = self.ctx.restore_graphs(data, stream=s)
        graphs[0].replay()
        s.synchronize()
        self.assertEqual(self.read(out), again)
        cgc.free(out)
        s.synchronize()
        del graphs, pools
        gc.collect()
        pool = cgc.Pool.at(self.ctx, base, capacity)  # the range was given back
        pool.close()

    def test_a_restore_with_families_shares_one_executable(self):
        # 1.6: two graphs of one structure captured into a pool at fixed addresses, saved, and
        # restored with families=True: the restored graphs share one executable (a family of 2)
        # and each launch writes the launched graph's own output; so again with threads=1, and
        # threads=65 is refused.
        s = self.stream
        pool = cgc.Pool.at(self.ctx, self.FAMILY_BASE, self.CAPACITY)
        (g0, out0), (g1, out1) = self.capture_in(pool), self.capture_in(pool)
        outs = (out0, out1)
        data = cgc.save_graphs([g0, g1])
        g0.close()
        g1.close()
        for out in outs:
            cgc.free(out)
        s.synchronize()
        pool.close()
        self.module.close()

        graphs, pools = self.ctx.restore_graphs(data, stream=s, families=True)
        self.assertEqual((len(graphs), len(pools)), (2, 1))
        for i, g in enumerate(graphs):
            info = g.info()
            self.assertEqual((info.family_size, info.family_result), (2, 0), "restored graph %d" % i)
        self.assertEqual(graphs[0].native_exec, graphs[1].native_exec, "one executable")
        for round_ in range(2):
            for i in (1, 0):
                for out in outs:
                    s.memset_d32(out, 0, self.N)
                graphs[i].replay()
                self.assertEqual(set(self.read(outs[i])), {5.5}, "round %d, graph %d" % (round_, i))
                self.assertEqual(set(self.read(outs[1 - i])), {0.0}, "round %d: graph %d wrote the other's" % (round_, i))
        for g in graphs:
            g.close()
        for out in outs:
            cgc.free(out)
        s.synchronize()
        pools[0].close()

        # On the calling thread alone (threads=1) the restore makes the same family and outputs;
        # more than 64 threads are the library's InvalidArgumentError, before anything is made.
        with self.assertRaises(cgc.InvalidArgumentError) as cm:
            self.ctx.restore_graphs(data, families=True, threads=65)
        self.assertIn("options->threads is 65", cm.exception.message)
        graphs, pools = self.ctx.restore_graphs(data, stream=s, families=True, threads=1)
        for i, g in enumerate(graphs):
            self.assertEqual(g.info().family_size, 2, "graph %d restored on one thread" % i)
            s.memset_d32(outs[i], 0, self.N)
            g.replay()
            self.assertEqual(set(self.read(outs[i])), {5.5}, "graph %d restored on one thread" % i)
        for g in graphs:
            g.close()
        for out in outs:
            cgc.free(out)
        s.synchronize()
        pools[0].close()

    def test_a_verifying_save_replays_a_deterministic_graph_beside_its_rebuild(self):
        # save_graphs(verify=True): the graph rebuilt from the saved bytes and replayed beside the
        # graph itself, from the same contents of its pool, writes the same bytes (affine's graph
        # is deterministic: its own sets write the input and parameters its kernel reads, and
        # nothing else runs on the pool meanwhile), so the save succeeds with the bytes of a save
        # without verifying but for the device memory it measured on the rebuild (family_restore_bytes
        # at most restore_bytes, which may be 0: a graph this small fits in memory the driver holds
        # already; both 0 in the plain save), and the pool ends as the graph's own replay left it:
        # the output, zeroed before the save, holds 5.5 again.
        s = self.stream
        pool = cgc.Pool.at(self.ctx, self.VERIFY_BASE, self.CAPACITY)
        g, out = self.capture_in(pool)
        g.replay()
        first = self.read(out)
        self.assertEqual(set(first), {5.5}, "1.5 * 2 + 2 + 0.5")
        plain = cgc.save_graphs(g)

        # The output zeroed, the set finished before the save copies the pool.
        s.memset_d32(out, 0, self.N)
        s.synchronize()
        data = cgc.save_graphs(g, verify=True)
        # Only a verifying save measures what a restore takes on the device besides the pools (its
        # modules and executables): each graph its own, or one executable for each structure.
        measured, unmeasured = cgc.saved_info(data), cgc.saved_info(plain)
        self.assertLessEqual(measured.family_restore_bytes, measured.restore_bytes, measured)
        self.assertEqual((unmeasured.restore_bytes, unmeasured.family_restore_bytes), (0, 0), unmeasured)
        self.assertEqual(measured._replace(restore_bytes=0, family_restore_bytes=0), unmeasured,
                         "the rest of the header is a plain save's")
        # The bytes are the plain save's but for those two 8-byte fields of the header.
        self.assertEqual(len(data), len(plain), "a verifying save writes as many bytes as a plain one")
        differs = next((k for k in range(len(data)) if data[k] != plain[k]), len(data))
        self.assertEqual(data[differs + 16:], plain[differs + 16:],
                         "a verifying save writes other bytes beyond the 16 from offset %d" % differs)
        # Whatever the save copied back to the pool has landed before the stream reads it.
        self.ctx.synchronize()
        self.assertEqual([self.bits(x) for x in self.read(out)], [self.bits(x) for x in first],
                         "the pool ends as the graph's own replay left it")
        # The graph's pool named again among the extra pools: saved once, verified as before.
        again = cgc.saved_info(cgc.save_graphs(g, [pool], verify=True))
        self.assertEqual(again.n_pools, 1)
        self.assertLessEqual(again.family_restore_bytes, again.restore_bytes, again)

        g.close()
        cgc.free(out)
        s.synchronize()
        pool.close()

    def test_a_graph_of_an_ordinary_pool_is_not_savable(self):
        # A graph captured into an ordinary pool (its memory not at fixed addresses) is refused
        # with NotSavableError, naming the call, and so is one whose kernel reads memory outside
        # its pool at fixed addresses (the device cache's).
        s = self.stream
        ordinary = cgc.Pool(self.ctx)
        g, out = self.capture_in(ordinary)
        g.replay()
        self.assertEqual(set(self.read(out)), {5.5})
        with self.assertRaises(cgc.NotSavableError) as cm:
            cgc.save_graphs(g)
        self.assertIn("cgc_graphs_save", cm.exception.message)
        g.close()
        cgc.free(out)
        ordinary.close()

        pool = cgc.Pool.at(self.ctx, self.OTHER_BASE, self.CAPACITY)
        params = cgc.malloc(self.ctx, 8, s)
        s.memcpy_htod(params, array.array("f", [2.0, 1.0]))
        g = cgc.Graph()
        with cgc.graph(g, stream=s, pool=pool):
            inp, out = cgc.malloc(self.ctx, self.N * 4, s), cgc.malloc(self.ctx, self.N * 4, s)
            s.memset_d32(inp, self.bits(1.5), self.N)
            self.launch(s, out, inp, params, 0.0)
            cgc.free(inp)
        with self.assertRaises(cgc.NotSavableError) as cm:
            cgc.save_graphs(g)
        self.assertIn("cgc_graphs_save", cm.exception.message)
        g.close()
        cgc.free(out)
        cgc.free(params)
        s.synchronize()
        pool.close()

    def test_a_graph_that_draws_is_restored_with_its_generator(self):
        # A graph that draws uniform numbers from a generator (seed 1234) into its pool at fixed
        # addresses is saved with the generator's state after one replay (n_generators 1), then
        # replayed twice more, its outputs recorded as 32-bit words. Once the graph, its output,
        # its pool and the generator are all gone, restore_graphs(generators=True) returns the
        # generator created again in that state (seed 1234, offset one replay's draws: DRAWS
        # rounded up to a multiple of 4), and the restored graph's two launches write, word for
        # word, what the saving process's two replays wrote, each advancing the generator by one
        # replay's draws. Closing the Rng leaves the graph drawing; a plain restore_graphs (no
        # generators asked for) draws from the saved state too.
        seed, draws = 1234, 1001
        per_replay = (draws + 3) // 4 * 4  # 1004
        s, base, capacity = self.stream, self.GENERATOR_BASE, self.CAPACITY

        def words(ptr):
            got = (ctypes.c_uint32 * draws)()
            s.memcpy_dtoh(got, ptr)
            s.synchronize()
            return list(got)

        rng = cgc.Rng(self.ctx, seed)
        pool = cgc.Pool.at(self.ctx, base, capacity)
        g = cgc.Graph()
        with cgc.graph(g, stream=s, pool=pool):
            out = cgc.malloc(self.ctx, draws * 4, s)
            rng.uniform(out, draws, s)
        self.assertTrue(base <= out < base + capacity, "the output at %#x is outside the pool's range" % out)
        g.replay()
        s.synchronize()
        self.assertEqual(rng.get_state(), (seed, per_replay), "one replay draws %d numbers" % draws)

        data = cgc.save_graphs(g)
        info = cgc.saved_info(data)
        self.assertEqual((info.n_graphs, info.n_pools, info.n_generators), (1, 1, 1), info)
        # What the saving process's next two replays write.
        want = []
        for _ in range(2):
            g.replay()
            want.append(words(out))
        self.assertNotEqual(want[0], want[1], "two replays drew the same numbers")
        for w in want[0] + want[1]:
            x = struct.unpack("<f", struct.pack("<I", w))[0]
            self.assertTrue(0.0 <= x < 1.0, "a draw outside [0, 1): %r" % x)

        # Everything goes: the graph, the output, the pool (its range given back), the generator.
        g.close()
        cgc.free(out)
        s.synchronize()
        pool.close()
        rng.close()

        restored = self.ctx.restore_graphs(data, generators=True)
        self.assertEqual(len(restored), 3, "graphs, pools and generators")
        graphs, pools, rngs = restored
        self.assertEqual((len(graphs), len(pools), len(rngs)), (1, 1, 1))
        (g,), (pool,), (rng,) = graphs, pools, rngs
        self.assertIsInstance(rng, cgc.Rng)
        self.assertIs(rng.context, self.ctx)
        self.assertEqual(rng.get_state(), (seed, per_replay), "the generator as it was at the save")
        for i, expected in enumerate(want):
            g.launch(s)
            got = words(out)
            first = next((k for k in range(draws) if got[k] != expected[k]), None)
            self.assertIsNone(first, "restored replay %d: word %s is %#010x, the saving process drew %#010x" % (
                i, first, got[first] if first is not None else 0, expected[first] if first is not None else 0))
        self.assertEqual(rng.get_state(), (seed, 3 * per_replay), "each replay advances the generator")
        # The caller's reference goes; the graph keeps its own and draws on.
        rng.close()
        g.launch(s)
        s.synchronize()
        g.close()
        cgc.free(out)
        s.synchronize()
        pool.close()

        # A plain restore leaves the generator to the graph alone, at the same saved state.
        graphs, pools = self.ctx.restore_graphs(data, stream=s)
        graphs[0].replay()
        self.assertEqual(words(out), want[0], "a plain restore's first replay")
        graphs[0].close()
        cgc.free(out)
        s.synchronize()
        pools[0].close()


class GpuMemorySnapshotTest(unittest.TestCase):
    def setUp(self):
        require_gpu(self)

    def test_an_allocated_and_a_freed_block(self):
        # 1.6: two blocks allocated, one freed: the snapshot lists the first ALLOCATED with its
        # rounded size and the size asked, the second's memory FREE (merged with free neighbours,
        # perhaps), a pool's block in a segment of that pool, and the segments add up to the
        # device's reserved bytes.
        ctx = cgc.Context(0)
        s = cgc.Stream(ctx)
        kept = cgc.malloc(ctx, 1000, s)
        freed = cgc.malloc(ctx, 4096, s)
        cgc.free(freed)
        pool = cgc.Pool(ctx)
        pooled = pool.malloc(8192, s)
        s.synchronize()
        snapshot = ctx.memory_snapshot()
        reserved = ctx.memory_stats().bytes_reserved
        try:
            self.assertEqual(sum(seg.size for seg in snapshot), reserved)
            self.assertEqual([seg.address for seg in snapshot], sorted(seg.address for seg in snapshot))
            for seg in snapshot:
                self.assertEqual(sum(b.size for b in seg.blocks), seg.size)
                self.assertEqual(sum(b.size for b in seg.blocks if b.state == cgc.BlockState.ALLOCATED),
                                 seg.allocated_bytes)
                self.assertEqual(seg.blocks[0].address, seg.address)
            blocks = [(seg, b) for seg in snapshot for b in seg.blocks]
            seg, block = next((seg, b) for seg, b in blocks if b.address == kept)
            self.assertEqual((block.size, block.requested), (1024, 1000))
            self.assertIs(block.state, cgc.BlockState.ALLOCATED)
            self.assertTrue(seg.small)
            self.assertIsNone(seg.pool, "the device cache's segment")
            holding = [b for _, b in blocks if b.address <= freed < b.address + b.size]
            self.assertEqual(len(holding), 1)
            self.assertIs(holding[0].state, cgc.BlockState.FREE)
            self.assertEqual(holding[0].requested, 0)
            seg, block = next((seg, b) for seg, b in blocks if b.address == pooled)
            self.assertIs(block.state, cgc.BlockState.ALLOCATED)
            self.assertEqual(seg.pool, pool.handle)
        finally:
            cgc.free(pooled)
            cgc.free(kept)
            pool.close()
            s.close()
            ctx.close()


if __name__ == "__main__":
    unittest.main()
