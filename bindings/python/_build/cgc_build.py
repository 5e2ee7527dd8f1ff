"""The build backend (PEP 517, PEP 660) of the Python binding: `pip install ./bindings/python`.

cgc.py is the whole package: one ctypes module, nothing to compile, so the wheel is pure Python
(py3-none-any) and holds cgc.py and its .dist-info only (not the tests). This backend is standard
library only (pyproject.toml: `requires = []`), so building needs no download: pip's build
isolation works offline. The version is read from cgc.py's `VERSION_MAJOR, VERSION_MINOR,
VERSION_PATCH = ...` line, the one place it is written for Python.

Hooks: build_wheel, build_sdist, build_editable (a .pth file naming this folder),
prepare_metadata_for_build_wheel/_editable and get_requires_for_build_* (nothing).
"""

import base64
import gzip
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile

NAME = "cgc"
SUMMARY = ("CUDA-graph capture with torch.cuda.graph semantics: the ctypes binding of "
           "libcgc.so.1 (loaded at run time)")
LICENSE = "MIT OR Apache-2.0"
REQUIRES_PYTHON = ">=3.8"
CLASSIFIERS = [
    "Programming Language :: Python :: 3",
    "Operating System :: POSIX :: Linux",
    "License :: OSI Approved :: MIT License",
    "License :: OSI Approved :: Apache Software License",
    "Environment :: GPU :: NVIDIA CUDA",
]
TAG = "py3-none-any"
# What the sdist carries, beside PKG-INFO: enough to build the wheel again, and the tests.
SDIST_FILES = ["pyproject.toml", "_build/cgc_build.py", "README.md", "cgc.py", "test_cgc.py",
               "test_conditional_bodies.py", "test_torch.py", "test_torch_graphs.py"]

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # bindings/python


def _read(name):
    with open(os.path.join(HERE, name), "rb") as f:
        return f.read()


def version():
    """cgc.py's VERSION_MAJOR.VERSION_MINOR.VERSION_PATCH, e.g. "1.4.0"."""
    found = re.findall(rb"^VERSION_MAJOR, VERSION_MINOR, VERSION_PATCH = (\d+), (\d+), (\d+)\s*$",
                       _read("cgc.py"), re.MULTILINE)
    if len(found) != 1:
        raise RuntimeError("cgc.py must have one line `VERSION_MAJOR, VERSION_MINOR, VERSION_PATCH = "
                           "<major>, <minor>, <patch>`; found %d" % len(found))
    return ".".join(part.decode() for part in found[0])


def _dist_info():
    return "%s-%s.dist-info" % (NAME, version())


def _metadata():
    lines = ["Metadata-Version: 2.1", "Name: " + NAME, "Version: " + version(),
             "Summary: " + SUMMARY, "License: " + LICENSE, "Requires-Python: " + REQUIRES_PYTHON]
    lines += ["Classifier: " + c for c in CLASSIFIERS]
    lines.append("Description-Content-Type: text/markdown")
    return ("\n".join(lines) + "\n\n").encode() + _read("README.md")


def _dist_info_files():
    """The .dist-info files but RECORD: (name in the wheel, bytes)."""
    wheel = "Wheel-Version: 1.0\nGenerator: cgc_build\nRoot-Is-Purelib: true\nTag: %s\n" % TAG
    d = _dist_info()
    return [(d + "/METADATA", _metadata()), (d + "/WHEEL", wheel.encode()),
            (d + "/top_level.txt", (NAME + "\n").encode())]


def _timestamp():
    # Reproducible: SOURCE_DATE_EPOCH if set, else zip's earliest date.
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    return max(int(epoch), 315532800) if epoch else 315532800  # 1980-01-01


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d\n" % (name, digest, len(data))


def _write_wheel(wheel_directory, files):
    """Writes the wheel of `files` ((name, bytes), the package's first) plus RECORD; its name."""
    files = files + _dist_info_files()
    record_name = _dist_info() + "/RECORD"
    record = "".join(_record_line(n, data) for n, data in files) + record_name + ",,\n"
    files.append((record_name, record.encode()))
    wheel_name = "%s-%s-%s.whl" % (NAME, version(), TAG)
    date = time.gmtime(_timestamp())[:6]
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel_name), "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files:
            info = zipfile.ZipInfo(name, date_time=date)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    return wheel_name


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    for name, data in _dist_info_files():
        path = os.path.join(metadata_directory, *name.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    return _dist_info()


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, [("cgc.py", _read("cgc.py"))])


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    # `pip install -e`: a .pth file puts this folder on sys.path, so `import cgc` is the source
    # file itself (this folder's test modules become importable too).
    return _write_wheel(wheel_directory, [("__editable__.cgc.pth", (HERE + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    base = "%s-%s" % (NAME, version())
    entries = [("PKG-INFO", _metadata())] + [(name, _read(name)) for name in SDIST_FILES]
    path = os.path.join(sdist_directory, base + ".tar.gz")
    with open(path, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", filename="", mtime=_timestamp()) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in entries:
            info = tarfile.TarInfo(base + "/" + name)
            info.size, info.mode, info.mtime = len(data), 0o644, _timestamp()
            tar.addfile(info, io.BytesIO(data))
    return base + ".tar.gz"
