"""pip installs the build tree's package into a throwaway virtual environment; the installed copy
imports without PYTHONPATH or LD_LIBRARY_PATH (libcohort is bundled, found through $ORIGIN) and
trains one step.

    pip_install_check.py [PACKAGE_DIR]   (default: $COHORT_PYTHON_PACKAGE, the build tree's
                                          bindings/python)
"""
import os
import subprocess
import sys
import tempfile
import unittest

PACKAGE = os.environ.get("COHORT_PYTHON_PACKAGE", "")
PYTHON = os.environ.get("COHORT_PYTHON", "/usr/bin/python3")

# Runs inside the venv, from a directory that holds no cohort package.
CHECK = r"""
import array, sys, cohort
assert cohort.__file__.startswith(sys.prefix), cohort.__file__
graph = cohort.models.mlp(batch=4, hidden=(8,))
with cohort.Optimizer() as opt, cohort.Trainer(graph, opt, seed=1) as trainer:
    loss = trainer.step(x=array.array("f", bytes(4 * 4 * 784)), y=array.array("i", [0, 1, 2, 3]))
assert loss > 0
print("installed", cohort.__version__, "loss", round(loss, 4))
"""


class PipInstallTest(unittest.TestCase):
    def test_install_into_venv(self):
        self.assertTrue(os.path.exists(os.path.join(PACKAGE, "pyproject.toml")), f"no package at {PACKAGE!r}")
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH", "PYTHONHOME")}
        env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
        with tempfile.TemporaryDirectory() as tmp:
            venv = os.path.join(tmp, "venv")

            def run(*command):
                done = subprocess.run(command, cwd=tmp, env=env, capture_output=True, text=True, timeout=240)
                self.assertEqual(done.returncode, 0, f"{' '.join(command)}\n{done.stdout}\n{done.stderr}")
                return done.stdout

            run(PYTHON, "-m", "venv", "--system-site-packages", venv)
            python = os.path.join(venv, "bin", "python")
            run(python, "-m", "pip", "install", "--no-index", "--no-build-isolation", "--no-cache-dir", PACKAGE)
            self.assertIn("installed", run(python, "-c", CHECK))
            run(python, "-m", "pip", "uninstall", "--yes", "cohort")


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        PACKAGE = sys.argv.pop(1)
    unittest.main()
