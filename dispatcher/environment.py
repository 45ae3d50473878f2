"""The scrubbed environment a worker gets: its card, locale/PATH/HOME, and only its
profile's credentials."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

PASS_THROUGH = ("PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "USER", "LOGNAME",
                "VIRTUAL_ENV", "PYTHONPATH", "SSL_CERT_FILE", "SSL_CERT_DIR")
CREDENTIALS = {
    "openai": ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"),
    "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
    "scripted": (),
}
CREDENTIALS["openai-responses"] = CREDENTIALS["openai"]


def base_env(env: Mapping[str, str]) -> dict[str, str]:
    """Locale, PATH and HOME: what every worker (and the forkserver) may see."""
    out = {k: env[k] for k in PASS_THROUGH if k in env}
    out.update({k: v for k, v in env.items() if k.startswith("LC_")})
    return out


def worker_env(env: Mapping[str, str], *, model: str, base_url: str | None,
               card: Mapping[str, str], fallback: Sequence[str] = (),
               key_vars: Sequence[str] = ()) -> dict[str, str]:
    """Everything a worker process is given; nothing else of the dispatcher's leaks.

    The credentials are those of the card's model and its profile's fallbacks, plus the
    variables the profile names in `api_key_env`.
    """
    out = base_env(env)
    provider = model.split(":", 1)[0]
    for spec in (model, *fallback):
        for key in CREDENTIALS.get(spec.split(":", 1)[0], ()):
            if env.get(key):
                out[key] = env[key]
    for key in key_vars:
        if env.get(key):
            out[key] = env[key]
    family = "openai" if provider == "openai-responses" else provider
    if base_url and family in ("openai", "anthropic"):
        out[f"{family.upper()}_BASE_URL"] = base_url
    out["KANBAN_MODEL"] = model
    out.update(card)
    return out
