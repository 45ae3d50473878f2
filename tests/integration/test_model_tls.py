"""Model clients over HTTPS share one TLS context (agent/tls.py) and still verify: the real
SDK clients against a local HTTPS server whose certificate only SSL_CERT_FILE trusts."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from kanban.agent import Message, RetryPolicy, resolve_model, tls
from kanban.agent.errors import ModelError
from tests.support.llm_server import LLMServer, text_reply
from tests.support.pg import skip_or_fail

WIRES = ["openai", "openai-responses", "anthropic"]


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key."""
    openssl = shutil.which("openssl")
    if openssl is None:
        skip_or_fail("openssl is needed to make a test certificate")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return cert, key


@pytest.fixture
def https_server(certificate: tuple[Path, Path]) -> Iterator[LLMServer]:
    server_side = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_side.load_cert_chain(*certificate)
    with LLMServer(tls=server_side) as server:
        yield server


def _ask(server: LLMServer, wire: str) -> str:
    model = resolve_model(f"{wire}:m", env=server.env(), retry=RetryPolicy(max_retries=0))
    try:
        return model.complete([Message("user", "hello")], []).text
    finally:
        model.close()  # type: ignore[attr-defined]


@pytest.mark.parametrize("wire", WIRES)
def test_a_certificate_trusted_by_ssl_cert_file_is_accepted(
        wire: str, https_server: LLMServer, certificate: tuple[Path, Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate[0]))
    https_server.enqueue(text_reply("over TLS"))
    assert _ask(https_server, wire) == "over TLS"


@pytest.mark.parametrize("wire", WIRES)
def test_an_untrusted_certificate_is_refused(wire: str, https_server: LLMServer,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    https_server.enqueue(text_reply("must not be read"))
    with pytest.raises(ModelError):
        _ask(https_server, wire)
    assert https_server.pending == 1  # no request got through


def test_one_context_per_environment(certificate: tuple[Path, Path],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    default = tls.context()
    assert tls.context() is default  # built once, shared by every client
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate[0]))
    assert tls.context() is not default  # another trust store: another context
    assert tls.context().verify_mode == ssl.CERT_REQUIRED
