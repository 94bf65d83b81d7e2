"""The PEP 517 backend (python/build_backend/streampool_build.py) without building: its refusals
(bad settings, a build folder of another checkout, a harness asked of a build without it, no
Boost.Program_options), the metadata hook, the wheel writer's RECORD (sha256 and size of every
file, as pip checks), and — with CMake, ninja and the extension build faked — which build folder
it picks, the wheel's contents and tags, its progress lines; plus `python -m streampool` with a
fake streampool-bench. No torch, GPU or compiler needed."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib.util
import io
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
import unittest
import zipfile
from pathlib import Path
from unittest import mock

BACKEND_DIR = Path(__file__).resolve().parents[1] / "build_backend"
sys.path.insert(0, str(BACKEND_DIR))
import streampool_build as backend  # noqa: E402
import torch_extension_build  # noqa: E402

sys.path.remove(str(BACKEND_DIR))
backend.TTY = os.devnull  # progress lines stay off the terminal of whoever runs the tests


def fake_build_dir(parent: str, home: str, perf: str = "OFF") -> str:
    build = Path(parent, "build")
    build.mkdir()
    (build / "CMakeCache.txt").write_text(f"CMAKE_HOME_DIRECTORY:INTERNAL={home}\n"
                                          f"STREAMPOOL_BUILD_PERF:BOOL={perf}\n")
    return str(build)


class Refusals(unittest.TestCase):
    def build(self, **env):
        with tempfile.TemporaryDirectory() as out, mock.patch.dict(os.environ, env), \
                contextlib.redirect_stderr(io.StringIO()):
            with self.assertRaises(backend.BuildError) as e:
                backend.build_wheel(out)
        return str(e.exception)

    def test_bad_bench_setting(self):
        self.assertIn("STREAMPOOL_BENCH='maybe'; use auto, on or off", self.build(STREAMPOOL_BENCH="maybe"))

    def test_build_folder_of_another_checkout(self):
        with tempfile.TemporaryDirectory() as d:
            message = self.build(STREAMPOOL_BUILD_DIR=fake_build_dir(d, "/some/other/checkout"))
        self.assertIn("is the build folder of /some/other/checkout", message)

    def test_bench_on_needs_a_build_with_the_harness(self):
        with tempfile.TemporaryDirectory() as d:
            message = self.build(STREAMPOOL_BUILD_DIR=fake_build_dir(d, str(backend.PYTHON_DIR.parent)),
                                 STREAMPOOL_BENCH="on")
        self.assertIn("configured with STREAMPOOL_BUILD_PERF=OFF", message)

    def test_config_settings_override_the_environment(self):
        self.assertEqual(backend._setting({"bench": "off"}, "bench", "auto"), "off")
        with mock.patch.dict(os.environ, {"STREAMPOOL_CMAKE_ARGS": "-DX=1"}):
            self.assertEqual(backend._setting(None, "cmake-args"), "-DX=1")
            self.assertEqual(backend._setting({}, "cmake-args"), "-DX=1")


class Metadata(unittest.TestCase):
    def test_version_comes_from_the_cmake_project(self):
        root = backend._source_dir()
        self.assertRegex(backend._version(root), r"^\d+\.\d+\.\d+$")
        with tempfile.TemporaryDirectory() as d:
            name = backend.prepare_metadata_for_build_wheel(d)
            metadata = Path(d, name, "METADATA").read_text()
        self.assertEqual(name, f"streampool-{backend._version(root)}.dist-info")
        self.assertIn(f"Version: {backend._version(root)}\n", metadata)
        self.assertEqual(backend.get_requires_for_build_wheel(), [])


class WheelWriter(unittest.TestCase):
    def test_record_lists_every_file_with_its_hash(self):
        with tempfile.TemporaryDirectory() as d:
            path = Path(d, "x.whl")
            writer = backend._WheelWriter(path)
            writer.add("pkg/a.py", b"print(1)\n")
            writer.add("pkg/lib.so", b"\x7fELF", executable=True)
            writer.close("pkg-1.dist-info/RECORD")
            with zipfile.ZipFile(path) as z:
                record = z.read("pkg-1.dist-info/RECORD").decode().splitlines()
                self.assertEqual((z.getinfo("pkg/lib.so").external_attr >> 16) & 0o777, 0o755)
                for line in record[:-1]:
                    name, digest, size = line.split(",")
                    data = z.read(name)
                    expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                    self.assertEqual(digest, f"sha256={expected}")
                    self.assertEqual(int(size), len(data))
        self.assertEqual(record[-1], "pkg-1.dist-info/RECORD,,")



# --- faked builds ------------------------------------------------------------------------------

def executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def write_cache(build: Path, home: Path, perf: str = "ON", generator: str = "Ninja", make: str = "") -> None:
    build.mkdir(parents=True, exist_ok=True)
    (build / "CMakeCache.txt").write_text(f"CMAKE_HOME_DIRECTORY:INTERNAL={home}\n"
                                          f"STREAMPOOL_BUILD_PERF:BOOL={perf}\n"
                                          f"CMAKE_GENERATOR:INTERNAL={generator}\n"
                                          f"CMAKE_MAKE_PROGRAM:FILEPATH={make}\n")


class FakeCMake:
    """Stands in for _run: records each command; a configure writes CMakeCache.txt from its -D
    arguments, a build writes libstreampool.so and, when asked, perf/streampool-bench."""

    def __init__(self):
        self.commands = []

    def __call__(self, cmd, what):
        self.commands.append(cmd)
        if cmd[1] == "-S":
            perf = next((a.split("=", 1)[1] for a in cmd if a.startswith("-DSTREAMPOOL_BUILD_PERF=")), "ON")
            write_cache(Path(cmd[4]), Path(cmd[2]), perf)
            return
        build = Path(cmd[2])
        (build / "libstreampool.so").write_bytes(b"\x7fELF library")
        if "streampool-bench" in self.targets():
            (build / "perf").mkdir(exist_ok=True)
            (build / "perf" / "streampool-bench").write_bytes(b"\x7fELF harness")

    def configures(self):
        return [c for c in self.commands if c[1] == "-S"]

    def targets(self):
        build = [c for c in self.commands if c[1] == "--build"][-1]
        rest = build[build.index("--target") + 1:]
        return rest[:rest.index("-j")] if "-j" in rest else rest

    def build_dir(self):
        return Path([c for c in self.commands if c[1] == "--build"][-1][2])


class FakedBuild(unittest.TestCase):
    """A fake checkout (CMakeLists.txt of project streampool 9.8.7) built by FakeCMake; torch absent
    unless a test says otherwise."""

    def setUp(self):
        temp = tempfile.TemporaryDirectory()
        self.addCleanup(temp.cleanup)
        self.temp = Path(temp.name)
        self.root = self.temp / "checkout"
        self.root.mkdir()
        (self.root / "CMakeLists.txt").write_text("project(streampool VERSION 9.8.7 LANGUAGES CXX)\n")
        self.out = self.temp / "wheels"
        self.out.mkdir()
        self.cmake = FakeCMake()
        self.boost = True
        self.stderr = io.StringIO()
        env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMPOOL_")}
        for patch in (mock.patch.object(backend, "_source_dir", lambda: self.root),
                      mock.patch.object(backend, "_run", self.cmake),
                      mock.patch.object(backend, "_have_boost_program_options", lambda root, extra: self.boost),
                      mock.patch.object(backend, "_count_steps", lambda build_dir, targets: None),
                      mock.patch.object(torch_extension_build, "probe_torch", lambda: None),
                      mock.patch.dict(os.environ, env, clear=True),
                      contextlib.redirect_stderr(self.stderr)):
            patch.__enter__()
            self.addCleanup(patch.__exit__, None, None, None)

    def wheel(self, **settings):
        name = backend.build_wheel(str(self.out), settings or None)
        return self.out / name

    def refusal(self, **settings):
        with self.assertRaises(backend.BuildError) as e:
            backend.build_wheel(str(self.out), settings or None)
        return str(e.exception)


class Harness(FakedBuild):
    """Note [The harness or a refusal]."""

    def test_missing_boost_refuses_and_names_the_fix(self):
        self.boost = False
        message = self.refusal()
        for fix in ("Boost.Program_options", "apt-get install libboost-program-options-dev", "STREAMPOOL_BENCH=off",
                    "--config-settings bench=off", "`python -m streampool tune` are then unavailable"):
            self.assertIn(fix, message)
        self.assertEqual(self.cmake.commands, [])
        self.assertIn(message, self.stderr.getvalue())  # what pip shows when the build fails
        self.assertEqual(list(self.out.iterdir()), [])

    def test_the_probe_gets_the_cmake_args(self):
        seen = []
        with mock.patch.object(backend, "_have_boost_program_options", lambda root, extra: seen.append(extra) or True):
            self.wheel(**{"cmake-args": "-DBOOST_ROOT=/opt/boost"})
        self.assertEqual(seen, [["-DBOOST_ROOT=/opt/boost"]])
        self.assertIn("-DBOOST_ROOT=/opt/boost", self.cmake.configures()[0])

    def test_auto_refuses_a_build_folder_configured_without_the_harness(self):
        write_cache(self.temp / "b", self.root, perf="OFF")
        message = self.refusal(**{"build-dir": str(self.temp / "b")})
        self.assertIn("STREAMPOOL_BENCH=auto, but", message)
        self.assertIn("configured with STREAMPOOL_BUILD_PERF=OFF", message)
        self.assertIn("STREAMPOOL_BENCH=off", message)

    def test_default_wheel_carries_the_harness(self):
        with zipfile.ZipFile(self.wheel()) as z:
            info = z.getinfo("streampool-9.8.7.data/scripts/streampool-bench")
            self.assertEqual((info.external_attr >> 16) & 0o777, 0o755)
            self.assertIn("bench = True", z.read("streampool/_build_info.py").decode())
        self.assertIn("-DSTREAMPOOL_BUILD_PERF=ON", self.cmake.configures()[0])
        self.assertEqual(self.cmake.targets(), ["streampool_shared", "streampool-bench"])

    def test_bench_off_builds_without_it_and_records_that(self):
        self.boost = False  # not even looked for
        for settings in ({"bench": "off"}, None):
            with self.subTest(settings=settings), mock.patch.dict(os.environ, {} if settings else
                                                                  {"STREAMPOOL_BENCH": "off"}):
                shutil.rmtree(self.root / "build-python", ignore_errors=True)
                path = self.wheel(**(settings or {}))
                with zipfile.ZipFile(path) as z:
                    self.assertFalse([n for n in z.namelist() if ".data/scripts/" in n])
                    build_info = z.read("streampool/_build_info.py").decode()
                path.unlink()
                self.assertIn("bench = False", build_info)
                self.assertIn("STREAMPOOL_BENCH=off", build_info)
                self.assertIn("-DSTREAMPOOL_BUILD_PERF=OFF", self.cmake.configures()[-1])
                self.assertEqual(self.cmake.targets(), ["streampool_shared"])

    def test_probe_that_fails_for_another_reason_is_not_a_missing_boost(self):
        failed = subprocess.CompletedProcess([], 1, stdout="CMake Error: No CMAKE_CXX_COMPILER could be found.\n")
        with mock.patch.object(backend.subprocess, "run", return_value=failed):
            with self.assertRaisesRegex(backend.BuildError, "probe for Boost.Program_options failed (.|\n)*CMAKE_CXX_COMPILER"):
                REAL_PROBE(self.root)

    def test_probe_reports_missing_boost(self):
        missing = subprocess.CompletedProcess([], 1, stdout="CMake Error at CMakeLists.txt:5 (message):\n"
                                              "  streampool probe: no Boost.Program_options\n")
        with mock.patch.object(backend.subprocess, "run", return_value=missing):
            self.assertFalse(REAL_PROBE(self.root))


REAL_PROBE = backend._have_boost_program_options


class BuildFolder(FakedBuild):
    def test_configured_build_folder_of_this_checkout_is_reused(self):
        write_cache(self.root / "build", self.root)
        self.wheel()
        self.assertEqual(self.cmake.configures(), [])
        self.assertEqual(self.cmake.build_dir(), self.root / "build")
        self.assertIn(f"build folder {self.root / 'build'}: this checkout's configured build/", self.stderr.getvalue())

    def test_otherwise_build_python(self):
        cases = {"no build/": None,
                 "build/ of another tree": dict(home=self.temp / "elsewhere"),
                 "build/ without the harness": dict(perf="OFF")}
        for case, cache in cases.items():
            with self.subTest(case):
                shutil.rmtree(self.root / "build", ignore_errors=True)
                shutil.rmtree(self.root / "build-python", ignore_errors=True)
                if cache is not None:
                    write_cache(self.root / "build", cache.get("home", self.root), cache.get("perf", "ON"))
                self.wheel()
                self.assertEqual(self.cmake.build_dir(), self.root / "build-python")
                self.assertEqual(Path(self.cmake.configures()[-1][4]), self.root / "build-python")

    def test_bench_off_reuses_a_build_folder_without_the_harness(self):
        write_cache(self.root / "build", self.root, perf="OFF")
        self.wheel(bench="off")
        self.assertEqual(self.cmake.build_dir(), self.root / "build")

    def test_cmake_args_leave_build_alone(self):
        write_cache(self.root / "build", self.root)
        self.wheel(**{"cmake-args": "-DCMAKE_BUILD_TYPE=Release"})
        self.assertEqual(self.cmake.build_dir(), self.root / "build-python")
        self.assertIn("STREAMPOOL_CMAKE_ARGS is set", self.stderr.getvalue())

    def test_explicit_build_dir_wins(self):
        write_cache(self.root / "build", self.root)
        self.wheel(**{"build-dir": str(self.temp / "mine")})
        self.assertEqual(self.cmake.build_dir(), self.temp / "mine")


class Tags(FakedBuild):
    """Note [Wheel tags]."""

    def wheel_tag(self, path: Path) -> str:
        with zipfile.ZipFile(path) as z:
            wheel = z.read("streampool-9.8.7.dist-info/WHEEL").decode()
            names = z.namelist()
        tags = [line.split(": ", 1)[1] for line in wheel.splitlines() if line.startswith("Tag: ")]
        self.assertEqual(len(tags), 1, wheel)
        self.assertEqual(path.name, f"streampool-9.8.7-{tags[0]}.whl")  # filename and WHEEL agree
        return tags[0], names

    def test_without_the_extension_any_python3(self):
        tag, names = self.wheel_tag(self.wheel())
        self.assertEqual(tag, f"py3-none-{sysconfig.get_platform().replace('-', '_').replace('.', '_')}")
        self.assertFalse([n for n in names if "_C10" in n])

    def test_with_the_extension_this_cpython(self):
        soabi = sysconfig.get_config_var("SOABI") or "cpython-3x"

        def build(build_dir, out_dir, torch_version, jobs):
            module = out_dir / "streampool" / f"_C10.{soabi}.so"
            module.parent.mkdir(parents=True)
            module.write_bytes(b"\x7fELF extension")
            return module, "torch_version = (2, 11)\n"

        with mock.patch.object(torch_extension_build, "probe_torch", lambda: "2.11.0"), \
                mock.patch.object(torch_extension_build, "build", build):
            tag, names = self.wheel_tag(self.wheel())
        self.assertIn(f"streampool/_C10.{soabi}.so", names)
        self.assertIn("streampool", self.cmake.targets())  # the static library the extension links
        interpreter, abi = backend._python_tags()
        self.assertTrue(tag.startswith(f"{interpreter}-{abi}-"), tag)
        if sys.implementation.name == "cpython" and not hasattr(sys, "gettotalrefcount"):
            version = f"{sys.version_info[0]}{sys.version_info[1]}"
            self.assertEqual(interpreter, f"cp{version}")
            self.assertTrue(abi.startswith(f"cp{version}"), abi)  # cp312, or cp313t free-threaded

    def test_python_tags_as_pip_names_them(self):
        self.assertEqual(backend._python_tags("cpython", (3, 12), "cpython-312-x86_64-linux-gnu"), ("cp312", "cp312"))
        self.assertEqual(backend._python_tags("cpython", (3, 13), "cpython-313t-x86_64-linux-gnu"), ("cp313", "cp313t"))
        self.assertEqual(backend._python_tags("cpython", (3, 12), "cpython-312d-x86_64-linux-gnu"), ("cp312", "cp312d"))
        self.assertEqual(backend._python_tags("cpython", (3, 9), "", debug=False), ("cp39", "cp39"))
        self.assertEqual(backend._python_tags("pypy", (3, 10), "pypy310-pp73-x86_64-linux-gnu"), ("pp310", "pypy310_pp73"))

    def test_metadata_hook_writes_no_tag(self):
        with tempfile.TemporaryDirectory() as d:
            name = backend.prepare_metadata_for_build_wheel(d)
            self.assertEqual(sorted(p.name for p in Path(d, name).iterdir()), ["METADATA"])


class Progress(FakedBuild):
    """Note [Progress through pip]."""

    def test_one_line_per_stage_on_the_terminal(self):
        tty = self.temp / "tty"
        tty.touch()
        with mock.patch.object(backend, "TTY", str(tty)), mock.patch.object(backend, "_tty_used", False), \
                mock.patch.object(backend, "_count_steps", lambda build_dir, targets: 130):
            name = self.wheel().name
        lines = tty.read_bytes().decode().split("\n")
        self.assertEqual(lines[0], "")  # below pip's "Building wheel ..." line
        self.assertEqual(lines.pop(), "")
        lines = lines[1:]
        self.assertTrue(lines[0].startswith("streampool build: "), lines)
        self.assertTrue(all(line.startswith("\rstreampool build: ") for line in lines[1:]), lines)
        text = "\n".join(line.lstrip("\r")[len("streampool build: "):] for line in lines)
        self.assertRegex(text, r"^build folder .*build-python: the default: no build/ configured for this checkout\n"
                               r"configuring \(CMake\)\n"
                               r"building 2 targets \(streampool_shared, streampool-bench\): 130 steps, "
                               r"about 4 min on 2 cores \(less with ccache\)\n"
                               rf"wrote {name} \(libstreampool.so, streampool-bench\)$")
        for line in lines:  # and the same on stderr, for pip -v and pip's failure report
            self.assertIn(line.lstrip("\r"), self.stderr.getvalue())

    def test_no_terminal_is_no_failure(self):
        with mock.patch.object(backend, "TTY", str(self.temp / "no" / "tty")):
            self.wheel()
        self.assertIn("streampool build: wrote streampool-9.8.7-", self.stderr.getvalue())

    def test_step_count_from_a_ninja_dry_run(self):
        ninja = executable(self.temp / "ninja", "#!/bin/sh\necho \"$@\" > \"$(dirname \"$0\")/args\"\n"
                                                "echo '[1/3] Building CXX a.o'\necho '[2/3] Building CXX b.o'\n"
                                                "echo '[3/3] Linking CXX libstreampool.so'\n")
        build = self.temp / "b"
        write_cache(build, self.root, make=str(ninja))
        self.assertIsNone(REAL_COUNT(build, ["streampool_shared"]))  # not generated yet
        (build / "build.ninja").write_text("# rules\n")
        self.assertEqual(REAL_COUNT(build, ["streampool_shared", "streampool-bench"]), 3)
        args = (self.temp / "args").read_text().split()
        self.assertEqual(args[:2], ["-C", str(build)])
        self.assertEqual(args[2], "-f")
        self.assertNotEqual(args[3], str(build / "build.ninja"))  # a copy: no "Re-running CMake" in a dry run
        self.assertEqual(args[4:], ["-n", "streampool_shared", "streampool-bench"])
        write_cache(build, self.root, generator="Unix Makefiles", make=str(ninja))
        self.assertIsNone(REAL_COUNT(build, ["streampool_shared"]))
        self.assertEqual(backend._steps_in("ninja: no work to do.\n"), 0)

    def test_estimates(self):
        self.assertEqual(backend._estimate(None), "")
        self.assertEqual(backend._estimate(0), ": up to date")
        self.assertEqual(backend._estimate(12), ": 12 steps, under a minute on 2 cores (less with ccache)")
        self.assertEqual(backend._estimate(130), ": 130 steps, about 4 min on 2 cores (less with ccache)")


REAL_COUNT = backend._count_steps


# --- python -m streampool ------------------------------------------------------------------------

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "streampool"


def load_bench_module():
    """streampool/_bench.py on its own (not the package: these tests may run beside an installed copy)."""
    spec = importlib.util.spec_from_file_location("_streampool_bench_under_test", PACKAGE_DIR / "_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FAKE_BENCH = "#!/bin/sh\nfor a in \"$@\"; do echo \"[$a]\"; done\nexit 7\n"


class PythonDashM(unittest.TestCase):
    def setUp(self):
        temp = tempfile.TemporaryDirectory()
        self.addCleanup(temp.cleanup)
        self.temp = Path(temp.name)
        self.bench = load_bench_module()

    def test_runs_the_harness_with_the_arguments_and_its_status(self):
        fake = executable(self.temp / "streampool-bench", FAKE_BENCH)
        env = dict(os.environ, PYTHONPATH=str(PACKAGE_DIR.parent), STREAMPOOL_BENCH_EXE=str(fake))
        result = subprocess.run([sys.executable, "-m", "streampool", "tune", "--trace", "my run.pickle"],
                                env=env, cwd=str(self.temp), capture_output=True, text=True)
        self.assertEqual(result.returncode, 7, result.stderr)
        self.assertEqual(result.stdout, "[tune]\n[--trace]\n[my run.pickle]\n")

    def test_lookup_order(self):
        scripts, path_dir = self.temp / "scripts", self.temp / "path"
        scripts.mkdir(), path_dir.mkdir()
        installed = executable(scripts / "streampool-bench", FAKE_BENCH)
        on_path = executable(path_dir / "streampool-bench", FAKE_BENCH)
        explicit = executable(self.temp / "mine", FAKE_BENCH)
        with mock.patch.object(self.bench, "scripts_dirs", lambda: [str(scripts)]), \
                mock.patch.dict(os.environ, {"PATH": str(path_dir)}):
            os.environ.pop("STREAMPOOL_BENCH_EXE", None)
            self.assertEqual(self.bench.find(), str(installed))
            installed.unlink()
            self.assertEqual(self.bench.find(), str(on_path))
            os.environ["STREAMPOOL_BENCH_EXE"] = str(explicit)
            self.assertEqual(self.bench.find(), str(explicit))
            del os.environ["STREAMPOOL_BENCH_EXE"]
            on_path.unlink()
            self.assertIsNone(self.bench.find())
        self.assertEqual(self.bench.scripts_dirs()[0], sysconfig.get_path("scripts"))

    def test_without_the_harness_exit_2_and_one_line(self):
        for built_with, expected in ((False, "was built without streampool-bench (STREAMPOOL_BENCH=off)"),
                                     (None, "streampool-bench not found (looked in")):
            with self.subTest(built_with=built_with), mock.patch.object(self.bench, "find", lambda: None), \
                    mock.patch.object(self.bench, "built_with_bench", lambda: built_with), \
                    contextlib.redirect_stderr(io.StringIO()) as err:
                self.assertEqual(self.bench.main(["tune", "--trace", "x"]), 2)
            self.assertEqual(len(err.getvalue().splitlines()), 1, err.getvalue())
            self.assertIn(expected, err.getvalue())
            self.assertIn("STREAMPOOL_BENCH_EXE", err.getvalue())
        self.assertIn("apt-get install libboost-program-options-dev", self.bench.missing_message(False))

    def test_the_wheels_record_is_read(self):
        copy = self.temp / "site" / "streampool"
        shutil.copytree(PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
        code = "from streampool import _bench; print(_bench.built_with_bench())"
        env = dict(os.environ, PYTHONPATH=str(copy.parent))
        for build_info, expected in ((None, "None"), (backend._build_info(False), "False"),
                                     (backend._build_info(True), "True")):
            if build_info is not None:
                (copy / "_build_info.py").write_text(build_info)
            result = subprocess.run([sys.executable, "-c", code], env=env, cwd=str(self.temp),
                                    capture_output=True, text=True)
            self.assertEqual(result.stdout.strip(), expected, result.stderr)

    def test_signal_becomes_128_plus_n(self):
        fake = executable(self.temp / "streampool-bench", "#!/bin/sh\nkill -TERM $$\n")
        with mock.patch.dict(os.environ, {"STREAMPOOL_BENCH_EXE": str(fake)}):
            self.assertEqual(self.bench.main([]), 128 + 15)

    def test_an_explicit_exe_that_cannot_run(self):
        with mock.patch.dict(os.environ, {"STREAMPOOL_BENCH_EXE": str(self.temp / "nope")}), \
                contextlib.redirect_stderr(io.StringIO()) as err:
            self.assertEqual(self.bench.main(["config"]), 2)
        self.assertIn("(from $STREAMPOOL_BENCH_EXE)", err.getvalue())


if __name__ == "__main__":
    unittest.main()
