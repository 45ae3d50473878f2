"""Build a pure-Python wheel from a folder, without setuptools: for installing a tiny
package with pip in a test (offline)."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from collections.abc import Mapping
from pathlib import Path


def build_wheel(package_dir: Path, out: Path, *, name: str, version: str,
                entry_points: Mapping[str, Mapping[str, str]]) -> Path:
    """A wheel holding `package_dir` (one import package) and its entry points."""
    dist = f"{name.replace('-', '_')}-{version}"
    files: dict[str, bytes] = {
        f"{package_dir.name}/{p.relative_to(package_dir)}": p.read_bytes()
        for p in sorted(package_dir.rglob("*.py"))}
    info = f"{dist}.dist-info"
    files[f"{info}/METADATA"] = (f"Metadata-Version: 2.1\nName: {name}\n"
                                 f"Version: {version}\n").encode()
    files[f"{info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: kanban-tests\n"
                              b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    files[f"{info}/entry_points.txt"] = "".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in items.items())
        for group, items in entry_points.items()).encode()
    record = [f"{path},sha256={_digest(data)},{len(data)}" for path, data in files.items()]
    files[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    wheel = out / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return wheel


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
