"""A regular (non-editable) install of this checkout in a fresh venv, offline.

The wheel is built with this venv's setuptools (`--no-build-isolation`) and installed
without dependencies; the new venv finds the dependencies in this venv through a plain
path entry (a .pth line), whose own .pth files, among them the editable install's
import hook, are not processed. What the new venv runs is what `pip install .` gives.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def purelib(python: Path | str) -> str:
    return subprocess.run([str(python), "-c",
                           "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()


def regular_install(work: Path, *, timeout: float = 300) -> Path:
    """Build and install; returns the new venv (its `bin/kanban` is the console script)."""
    wheels, venv, source = work / "wheel", work / "venv", work / "source"
    # A clean copy: setuptools builds in the source tree, and a stale build/ there could
    # put modules that no longer exist into the wheel.
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "*.egg-info", "__pycache__", ".kanban*", "results.md"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "--no-index", "--wheel-dir", str(wheels),
                    str(source)], check=True, capture_output=True, timeout=timeout)
    [wheel] = wheels.glob("kanban_workbench-*.whl")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   capture_output=True, timeout=timeout)
    python = venv / "bin" / "python"
    Path(purelib(python), "kanban-deps.pth").write_text(purelib(sys.executable) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
                    "--no-deps", "--no-index", str(wheel)],
                   check=True, capture_output=True, timeout=timeout)
    return venv
