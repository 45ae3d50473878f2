"""The scrubbed environment a worker gets: its card, locale/PATH/HOME, and only its
profile's credentials."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, MutableMapping, Sequence

from kanban.records import Claim
from kanban.state.config import CONFIG_ENV, Config, Profile
from kanban.tools.procctl import seal_environment, undumpable
from kanban.tools.workbench import is_credential
from kanban.workspaces import WORKSPACE_ENV, Workspace

PASS_THROUGH = ("PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "USER", "LOGNAME",
                "VIRTUAL_ENV", "PYTHONPATH", "SSL_CERT_FILE", "SSL_CERT_DIR")
CREDENTIALS = {
    "openai": ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"),
    "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
    "scripted": (),
}
CREDENTIALS["openai-responses"] = CREDENTIALS["openai"]
OTEL = "OTEL_"  # OpenTelemetry's variables: traces (docs/traces.md)


def seal_dispatcher(environ: MutableMapping[str, str] = os.environ) -> None:
    """This process is about to run a dispatcher: non-dumpable, and no credential left in
    its environment block (/proc/PID/environ) nor inherited by what it starts without an
    explicit environment. `environ` (Python's copy) keeps them: a dispatcher copies it and
    hands each worker exactly its profile's credentials from that copy."""
    undumpable()
    seal_environment(environ, is_credential)


def providers_in_use(config: Config, env: Mapping[str, str]) -> set[str]:
    """Model adapters worth preloading (and warming) in the forkserver: those of the
    profiles' models and fallbacks; the Responses API only where a profile uses it. A key
    present but named by no profile loads nothing (the anthropic SDK alone costs about 2 s
    of CPU at every start): the forkserver loads it after the first card that asks for it
    (worker/forkserver.py)."""
    found: set[str] = set()
    for p in config.profiles.values():
        for spec in (p.resolved_model(env), *p.fallback):
            provider = spec.split(":", 1)[0]
            responses = provider == "openai-responses" or (
                provider == "openai" and p.api == "responses")
            found.add("openai-responses" if responses else provider)
    return found & {"openai", "openai-responses", "anthropic"}


def base_env(env: Mapping[str, str]) -> dict[str, str]:
    """Locale, PATH and HOME: what every worker (and the forkserver) may see."""
    out = {k: env[k] for k in PASS_THROUGH if k in env}
    out.update({k: v for k, v in env.items() if k.startswith("LC_")})
    # where traces go (docs/traces.md); OTLP headers hold credentials: workers only
    out.update({k: v for k, v in env.items() if k.startswith(OTEL) and not is_credential(k)})
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
    out.update({k: v for k, v in env.items() if k.startswith(OTEL)})
    family = "openai" if provider == "openai-responses" else provider
    if base_url and family in ("openai", "anthropic"):
        out[f"{family.upper()}_BASE_URL"] = base_url
    out["KANBAN_MODEL"] = model
    out.update(card)
    return out


def card_env(env: Mapping[str, str], config: Config, profile: Profile, claim: Claim,
             workspace: Workspace, *, timeout_s: float, db_target: str, lease_s: float,
             dispatcher: str) -> dict[str, str]:
    """The environment of the worker of `claim`: its card, its claim, its config file and
    workspace, and the credentials of its model and profile (see `worker_env`)."""
    search_key = config.web.search_key_env  # a service key; commands never see it
    keys = (*profile.api_key_env, *([search_key] if search_key else []))
    config_file = config.path if config.path is not None and config.path.is_file() else None
    return worker_env(env, model=claim.model or profile.resolved_model(env),
                      base_url=profile.base_url, fallback=profile.fallback, key_vars=keys,
                      card={
        "KANBAN_DB": db_target, "KANBAN_BOARD": claim.board,
        "KANBAN_CARD": str(claim.card_id), "KANBAN_CLAIM_TOKEN": claim.claim_token,
        "KANBAN_RUN": str(claim.run_id), "KANBAN_LEASE_S": str(lease_s),
        "KANBAN_LEASE_UNTIL": claim.lease_expires_at.isoformat(),
        "KANBAN_TIMEOUT_S": f"{timeout_s:g}", "KANBAN_DISPATCHER": dispatcher,
        CONFIG_ENV: str(config_file or ""),  # the file this dispatcher read ("": none)
        WORKSPACE_ENV: json.dumps(workspace.to_json()),  # the worker need not resolve it
    })
