"""A file replaced whole, never seen half written: the new content goes to a name of its own
in the same folder, then takes the target's name in one rename."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def replace_file(target: Path, data: bytes, *, mode: int) -> None:
    """`target` now holds `data` with permissions `mode`. The temporary name comes from
    mkstemp (O_EXCL), so no other process sharing the folder (a sharing card's worker, a
    model in the card's folder) can have taken it or linked it elsewhere beforehand."""
    fd, temp = tempfile.mkstemp(dir=target.parent, prefix=".kanban-")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(temp, mode)
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
