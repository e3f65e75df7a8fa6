"""Packs the cohort package of a CMake build tree: the Python files, the SWIG extension and the
bundled libcohort (which the extension finds through its $ORIGIN rpath). Nothing is compiled
here; metadata lives in pyproject.toml."""
import os
import shutil

import setuptools
from setuptools.dist import Distribution

# A file removed from the package must not survive in a previous build's staging area.
shutil.rmtree(os.path.join(os.path.dirname(os.path.abspath(__file__)), "build"), ignore_errors=True)


class BinaryDistribution(Distribution):
    """The package carries a compiled extension, so its wheel is platform-specific."""

    def has_ext_modules(self):
        return True


setuptools.setup(
    distclass=BinaryDistribution,
    packages=["cohort"],
    package_data={"cohort": ["*.so", "*.so.*"]},
)
