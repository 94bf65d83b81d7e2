"""What of the PyTorch extension route runs without torch and without a GPU: the version gate, the
build backend's decision to build the extension, the config-variable watch (its warning text and
once-only rule), and install()'s choice of route with a stand-in `torch` module (the extension
route with a stand-in extension; the fallback to the CUDAPluggableAllocator route with its
FallbackWarning). CTest `python.torch_route` (label python); the GPU side is gpu_torch_extension.py."""

from __future__ import annotations

import ctypes
import json
import os
import sys
import types
import unittest
import warnings
from pathlib import Path
from unittest import mock

import streampool
from streampool import _env_watch, _extension, _torch, _version_gate

BACKEND_DIR = Path(__file__).resolve().parents[1] / "build_backend"
sys.path.insert(0, str(BACKEND_DIR))
import torch_extension_build  # noqa: E402

sys.path.remove(str(BACKEND_DIR))


class VersionGate(unittest.TestCase):
    def test_parse(self):
        self.assertEqual(_version_gate.parse("2.11.0+cu130"), (2, 11))
        self.assertEqual(_version_gate.parse("2.12.0a0+git1234"), (2, 12))
        with self.assertRaisesRegex(ValueError, "not a PyTorch version"):
            _version_gate.parse("nightly")

    def test_supported_release_passes(self):
        self.assertIsNone(_version_gate.refusal("2.11.0+cu130"))
        self.assertIsNone(_version_gate.refusal("2.11.3", built_for=(2, 11)))

    def test_other_releases_are_refused_by_name(self):
        for version in ("2.10.0+cu128", "2.12.0", "1.13.1"):
            reason = _version_gate.refusal(version)
            self.assertIn(f"PyTorch {version} is not supported", reason)
            self.assertIn("supported: 2.11", reason)

    def test_extension_built_for_another_release(self):
        reason = _version_gate.refusal("2.11.0", built_for=(2, 10))
        self.assertIn("built against PyTorch 2.10", reason)
        self.assertIn("reinstall", reason)

    def test_unreadable_version(self):
        self.assertIn("cannot tell the PyTorch release", _version_gate.refusal("weird"))


class BuildPlan(unittest.TestCase):
    def test_settings(self):
        self.assertEqual(torch_extension_build.plan("off", "2.11.0"), (False, "STREAMPOOL_TORCH_EXT=off"))
        self.assertEqual(torch_extension_build.plan("auto", "2.11.0+cu130"), (True, "torch 2.11.0+cu130"))
        self.assertEqual(torch_extension_build.plan("", None), (False, "torch is not importable by this Python"))
        build, why = torch_extension_build.plan("auto", "2.9.1")
        self.assertFalse(build)
        self.assertIn("2.9.1 is not supported", why)
        with self.assertRaisesRegex(RuntimeError, "STREAMPOOL_TORCH_EXT=on, but .* torch is not importable"):
            torch_extension_build.plan("on", None)
        with self.assertRaisesRegex(ValueError, "STREAMPOOL_TORCH_EXT='yes'; use auto, on or off"):
            torch_extension_build.plan("yes", "2.11.0")

    def test_probe_without_torch(self):
        try:
            import torch  # noqa: F401
            self.skipTest("torch is installed here")
        except ImportError:
            self.assertIsNone(torch_extension_build.probe_torch())

    def test_link_inputs_add_zlib_only_when_found(self):
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            build = Path(d)
            self.assertEqual(torch_extension_build.link_inputs(build), [str(build / "libstreampool.a")])
            (build / "CMakeCache.txt").write_text("ZLIB_LIBRARY_RELEASE:FILEPATH=/usr/lib/libz.so\n")
            self.assertEqual(torch_extension_build.link_inputs(build)[1], "/usr/lib/libz.so")
            (build / "CMakeCache.txt").write_text("ZLIB_LIBRARY_RELEASE:FILEPATH=ZLIB_LIBRARY_RELEASE-NOTFOUND\n")
            self.assertEqual(len(torch_extension_build.link_inputs(build)), 1)


class EnvWatch(unittest.TestCase):
    def tearDown(self):
        _env_watch.stop()

    def test_no_change_no_warning(self):
        env = {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}
        watch = _env_watch.Watch(_env_watch.read(env), "backend:cudaMallocAsync (from PYTORCH_CUDA_ALLOC_CONF)", env)
        self.assertEqual(watch.mismatches(), [])

    def test_change_is_reported_once_with_name_value_and_config(self):
        env = {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}
        watch = _env_watch.Watch(_env_watch.read(env), _env_watch.describe_config(_env_watch.read(env)), env)
        env["PYTORCH_CUDA_ALLOC_CONF"] = ""
        (message,) = watch.mismatches()
        self.assertIn("PYTORCH_CUDA_ALLOC_CONF is now ''", message)
        self.assertIn("it was 'backend:cudaMallocAsync'", message)
        self.assertIn("in effect is backend:cudaMallocAsync (from PYTORCH_CUDA_ALLOC_CONF)", message)
        self.assertEqual(watch.mismatches(), [])          # once per value
        del env["PYTORCH_CUDA_ALLOC_CONF"]
        (message,) = watch.mismatches()                    # a new value is a new warning
        self.assertIn("PYTORCH_CUDA_ALLOC_CONF is now unset", message)
        env["STREAMPOOL_ALLOC_CONF"] = "backend:native"
        (message,) = watch.mismatches()
        self.assertIn("STREAMPOOL_ALLOC_CONF is now 'backend:native' (it was unset", message)

    def test_describe_config_follows_the_precedence(self):
        self.assertEqual(_env_watch.describe_config({"PYTORCH_ALLOC_CONF": "a:1", "PYTORCH_CUDA_ALLOC_CONF": "b:2"}),
                         "b:2 (from PYTORCH_CUDA_ALLOC_CONF)")
        self.assertEqual(_env_watch.describe_config({}), "(defaults) (no config variable was set)")
        self.assertEqual(_env_watch.describe_config({"PYTORCH_ALLOC_CONF": "a:1"}, explicit="backend:native"),
                         "backend:native (from the config argument)")

    def test_check_warns_and_the_extension_check_takes_over(self):
        env = {}
        _env_watch.start(environ=env)
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.assertEqual(len(_env_watch.check()), 1)
            self.assertEqual(_env_watch.check(), [])
        self.assertEqual([w.category for w in caught], [_env_watch.ConfigVariableChanged])
        _env_watch.use_extension(lambda: "line one\nline two")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.assertEqual(_env_watch.check(), ["line one", "line two"])
        self.assertEqual(len(caught), 2)


def fake_torch(version: str) -> types.ModuleType:
    """Just enough of torch for install(): version, is_initialized, the allocator swap."""
    torch = types.ModuleType("torch")
    torch.__version__ = version
    swaps = []

    class Pluggable:
        def __init__(self, path, alloc, free):
            self.path = path

    memory = types.SimpleNamespace(CUDAPluggableAllocator=Pluggable, change_current_allocator=swaps.append,
                                   _get_current_allocator=lambda: "extension allocator")
    torch.cuda = types.SimpleNamespace(is_initialized=lambda: False, memory=memory)
    torch.swaps = swaps
    return torch


_F = ctypes.CFUNCTYPE


class FakeDelegate(ctypes.Structure):
    """A streampool_delegate (include/streampool/c_api.h) served by Python, standing in for the
    extension's table (python/csrc/c_api_delegate.cpp): it hands out addresses it makes up and
    records the calls the C API forwards to it."""
    _fields_ = [("abi", ctypes.c_uint), ("name", ctypes.c_char_p),
                ("alloc", _F(ctypes.c_int, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p,
                             ctypes.POINTER(ctypes.c_void_p))),
                ("free", _F(ctypes.c_int, ctypes.c_void_p)),
                ("record_stream", _F(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)),
                ("empty_cache", _F(ctypes.c_int)),
                ("set_memory_fraction", _F(ctypes.c_int, ctypes.c_double, ctypes.c_int)),
                ("stats_json", _F(ctypes.c_void_p, ctypes.c_int)),
                ("snapshot_json", _F(ctypes.c_void_p)),
                ("backend_name", _F(ctypes.c_void_p)),
                ("last_error", _F(ctypes.c_void_p))]

    def __init__(self):
        self.calls = []
        self.texts = {k: ctypes.create_string_buffer(v) for k, v in
                      {"stats": b"{}", "snapshot": b"{}", "backend": b"native", "error": b""}.items()}

        def alloc(size, device, stream, out):
            self.calls.append(("alloc", size, device))
            out[0] = 0x7F0000000000 + 512 * len(self.calls)
            return 0

        def free(ptr):
            self.calls.append(("free", ptr))
            return 0

        def text(key):
            return lambda *args: ctypes.addressof(self.texts[key])
        self._keep = [alloc, free]
        super().__init__(1, b"the test's delegate", _F(ctypes.c_int, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p,
                                                         ctypes.POINTER(ctypes.c_void_p))(alloc),
                         _F(ctypes.c_int, ctypes.c_void_p)(free),
                         _F(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)(lambda p, s: 0), _F(ctypes.c_int)(lambda: 0),
                         _F(ctypes.c_int, ctypes.c_double, ctypes.c_int)(lambda f, d: 0),
                         _F(ctypes.c_void_p, ctypes.c_int)(text("stats")), _F(ctypes.c_void_p)(text("snapshot")),
                         _F(ctypes.c_void_p)(text("backend")), _F(ctypes.c_void_p)(text("error")))


class InstallRoute(unittest.TestCase):
    def setUp(self):
        self.saved = (_torch._installed_route, _torch._installed_path, dict(_torch._pluggable), _extension._installed)
        _torch._installed_route = _torch._installed_path = None
        _extension._installed = None

    def tearDown(self):
        _torch._installed_route, _torch._installed_path, pluggable, _extension._installed = self.saved
        _torch._pluggable.clear()
        _torch._pluggable.update(pluggable)
        _env_watch.stop()
        for name in ("streampool._C10", "streampool._C10_build"):
            sys.modules.pop(name, None)

    def test_unsupported_torch_falls_back_with_a_notice(self):
        torch = fake_torch("2.10.0+cu128")
        with mock.patch.dict(sys.modules, {"torch": torch}), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            allocator = streampool.install()
        self.assertEqual(streampool.installed_route(), "pluggable")
        self.assertEqual(torch.swaps, [allocator])
        fallback = [w for w in caught if w.category is streampool.FallbackWarning]
        self.assertEqual(len(fallback), 1)
        self.assertIn("PyTorch 2.10.0+cu128 is not supported", str(fallback[0].message))
        self.assertIn("Falling back to the CUDAPluggableAllocator route", str(fallback[0].message))

    def test_extension_route_refuses_instead_of_falling_back(self):
        with mock.patch.dict(sys.modules, {"torch": fake_torch("2.11.0")}):
            with self.assertRaisesRegex(streampool.StreampoolError, "not built into this install"):
                streampool.install(route="extension")
            with self.assertRaisesRegex(streampool.StreampoolError, "route must be one of"):
                streampool.install(route="sideways")
        self.assertIsNone(streampool.installed_route())

    def test_extension_route_is_chosen_and_answers_the_package_functions(self):
        calls = []
        ext = types.ModuleType("streampool._C10")
        ext.install = lambda config: calls.append(("install", config))
        ext.env_mismatch_warnings = lambda: ""
        ext.stats_json = lambda device: json.dumps({"reserved_bytes.all.current": 4096, "device": device})
        ext.backend_name = lambda: "cudaMallocAsync"
        delegate = FakeDelegate()
        ext.c_api_delegate = lambda: ctypes.addressof(delegate)
        build = types.ModuleType("streampool._C10_build")
        build.torch_version = (2, 11)
        torch = fake_torch("2.11.0+cu130")
        with mock.patch.dict(sys.modules, {"torch": torch, "streampool._C10": ext, "streampool._C10_build": build}):
            self.assertEqual(streampool.install(config="backend:cudaMallocAsync"), "extension allocator")
            self.assertEqual(streampool.installed_route(), "extension")
            self.assertEqual(calls, [("install", "backend:cudaMallocAsync")])
            self.assertEqual(torch.swaps, [])  # the extension swaps in C++
            self.assertEqual(streampool.stats(0), {"reserved_bytes.all.current": 4096, "device": 0})
            # Note [C API delegate]: the C API of libstreampool.so is served by the extension now.
            from streampool._library import library
            lib = library()
            try:
                self.assertEqual(lib.streampool_delegate_name(), b"the test's delegate")
                ptr = lib.streampool_alloc(4096, 0, None)
                self.assertEqual(delegate.calls, [("alloc", 4096, 0)], lib.streampool_last_error())
                self.assertEqual(lib.streampool_free_unsized(ctypes.c_void_p(ptr)), 0, lib.streampool_last_error())
                self.assertEqual(delegate.calls[-1], ("free", ptr))
                self.assertEqual(lib.streampool_backend_name(), b"native")
            finally:
                self.assertEqual(lib.streampool_set_delegate(None), 0, lib.streampool_last_error())
            self.assertEqual(streampool.backend_name(), "cudaMallocAsync")
            with self.assertRaisesRegex(streampool.StreampoolError, "lives as long as the process"):
                streampool.shutdown()
            with self.assertRaisesRegex(streampool.StreampoolError, "already installed through the extension"):
                streampool.install(route="pluggable")

    def test_extension_built_for_another_torch_is_not_loaded(self):
        build = types.ModuleType("streampool._C10_build")
        build.torch_version = (2, 10)
        with mock.patch.dict(sys.modules, {"torch": fake_torch("2.11.0"), "streampool._C10_build": build}):
            module, reason = _extension.load()
        self.assertIsNone(module)
        self.assertIn("built against PyTorch 2.10", reason)


if __name__ == "__main__":
    unittest.main()
