"""One TLS context for all the model clients of a process.

Building one reads the whole CA bundle (about 16 ms); an SDK client left to itself builds
its own, so every worker paid that before its first model call. The forkserver builds it
once (`agent.preload`) and its forked workers share it; a process whose SSL_CERT_FILE or
SSL_CERT_DIR differs from the one it was built under builds its own, as httpx would.
"""

from __future__ import annotations

import os
import ssl
import threading

_lock = threading.Lock()
_built: tuple[tuple[str | None, str | None], ssl.SSLContext] | None = None


def context() -> ssl.SSLContext:
    """The verifying context httpx would build from this environment (certifi's bundle,
    or SSL_CERT_FILE / SSL_CERT_DIR when set)."""
    global _built
    source = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    with _lock:
        if _built is None or _built[0] != source:
            import httpx

            _built = (source, httpx.create_ssl_context())
        return _built[1]
