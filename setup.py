"""Package discovery (the metadata is in setup.cfg): every package under launcher/ is found, so none can be
left out of the wheel by a hand-kept list; the bundled training scripts (entrypoints/) install as the data
package launcher._bundled, never as a top-level "entrypoints" module (PyPI has one of that name)."""

from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["launcher", "launcher.*"]) + ["launcher._bundled"],
    package_dir={"launcher._bundled": "entrypoints"},
)
