"""`pip install .`: the wheel builds the core and the extension, installs, and works elsewhere."""
import os
import pathlib
import shutil
import subprocess
import sys
import venv

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_wheel_builds_installs_and_runs(tmp_path):
    # Build without isolation: the test venv already holds scikit-build-core and nanobind.
    # Through the compiler launcher (ccache) scripts/build.sh used, with the build's compiler
    # (pip would pick Python's, another name for it here, which the library records): the
    # library's objects are the build's, and what this checks (the wheel's CMake set-up,
    # packaging, install, import) is the same.
    cache = []
    build_cache = ROOT / "build" / "CMakeCache.txt"
    if shutil.which("ccache") and build_cache.exists():
        lines = build_cache.read_text().splitlines()
        for var in ("CMAKE_CXX_COMPILER_LAUNCHER", "CMAKE_CXX_COMPILER"):
            value = [line.split("=", 1)[1] for line in lines if line.startswith(var + ":")]
            if value and value[0]:
                cache.append(f"--config-settings=cmake.define.{var}={value[0]}")
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps",
                    *cache, "-w", str(wheels), str(ROOT)], check=True, cwd=tmp_path)
    (wheel,) = wheels.glob("tessel-*.whl")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, system_site_packages=True, with_pip=True)
    py = env_dir / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True)
    code = ("import numpy as np, tessel\n"
            "from tessel.numpy import Genred\n"
            "assert 'site-packages' in tessel.__file__, tessel.__file__\n"
            "g = Genred('SqDist(X,Y)', ['X = Vi(2)', 'Y = Vj(2)'], reduction_op='ArgMin')\n"
            "x = np.array([[0., 0.], [5., 5.]]); y = np.array([[4., 4.], [0.1, 0.]])\n"
            "print(g(x, y).ravel().tolist())\n"
            # The subpackages ship too, and the README's older paths of the loop tools import.
            "import tessel.loops, tessel.ot, tessel.compat.pykeops.torch.cluster\n"
            "from tessel.checkpoint import MAX_STEPS\n"
            "from tessel.memory import run_isolated\n"
            "assert tessel.loops.checkpoint_loop is tessel.checkpoint.checkpoint_loop\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([str(py), "-c", code], check=True, capture_output=True, text=True,
                         cwd=tmp_path, env=env)
    assert out.stdout.strip() == "[1, 0]"
    # The wheel's `tessel doctor` (the C++ command is not in it) finds the compiler and the cache.
    doctor = subprocess.run([str(env_dir / "bin" / "tessel"), "doctor", "--quick"], check=True,
                            capture_output=True, text=True, cwd=tmp_path, env=env)
    assert "compiler" in doctor.stdout and "cache" in doctor.stdout, doctor.stdout
