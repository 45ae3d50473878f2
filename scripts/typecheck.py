"""`make lint`'s mypy step: type-check the installed `kanban` namespace from the source tree.

The repository's top-level folders become `kanban.*` only when installed (setuptools
package-dir), and mypy cannot follow the editable install's import hook. So this builds
the namespace as a tree of symbolic links under build/typecheck/ from pyproject.toml's own
mapping, runs mypy on it, and prints each error with its real path.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TREE = REPO / "build" / "typecheck"


def link_tree() -> Path:
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    shutil.rmtree(TREE, ignore_errors=True)
    root = TREE / "kanban"
    root.mkdir(parents=True)
    for entry in (REPO / "kanban").iterdir():
        if entry.name != "__pycache__":
            (root / entry.name).symlink_to(entry)
    for package, folder in setuptools["package-dir"].items():
        (TREE / package.replace(".", "/")).symlink_to(REPO / folder)
    return root


def main() -> int:
    root = link_tree()
    done = subprocess.run([sys.executable, "-m", "mypy", "--config-file",
                           str(REPO / "pyproject.toml"), str(root.relative_to(REPO))],
                          cwd=REPO, capture_output=True, text=True)
    mapping = {f"build/typecheck/kanban/{p.name}/": f"{p.resolve().relative_to(REPO)}/"
               for p in root.iterdir() if p.is_symlink() and p.is_dir()}
    mapping["build/typecheck/kanban/"] = "kanban/"
    for line in (done.stdout + done.stderr).splitlines():
        for tree_path, real in mapping.items():
            if line.startswith(tree_path):
                line = real + line.removeprefix(tree_path)
                break
        print(line)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
