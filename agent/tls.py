"""One TLS context for all the model clients of a process.

Building one reads a whole CA bundle (about 16 ms); an SDK client left to itself builds
its own, so every worker paid that before its first model call. The forkserver builds it
once (`agent.preload`) and its forked workers share it; a process whose SSL_CERT_FILE or
SSL_CERT_DIR differs from the one it was built under builds its own.

The context is the one the SDKs' HTTP library builds by default (httpx2 for the current
SDKs, httpx for older ones), so trust works exactly as without sharing.
"""

from __future__ import annotations

import os
import ssl
import threading
from types import ModuleType

_lock = threading.Lock()
_built: tuple[tuple[str | None, str | None], ssl.SSLContext] | None = None


def http_library() -> ModuleType:
    """The HTTP library under the SDKs' clients."""
    try:
        import httpx2
    except ImportError:  # SDKs from before httpx2
        import httpx

        return httpx
    return httpx2


def context() -> ssl.SSLContext:
    """The verifying context the SDKs' HTTP library would build from this environment."""
    global _built
    source = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    with _lock:
        if _built is None or _built[0] != source:
            _built = (source, http_library().create_ssl_context())
        return _built[1]
