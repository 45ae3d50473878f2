"""Which profile's endpoint a card's model is reached through.

A profile's endpoint (`base_url`, `api`, `api_key_env`) travels with its model: a card
delegated by another runs on its parent's model unless its own profile names one, and
then it must reach that model where the parent does (a local server, say), with the
parent's keys. So the endpoint is that of the card up the delegation chain whose profile
chose the model: the card's own profile when it names a model or when the card did not
inherit one.
"""

from __future__ import annotations

from dataclasses import replace

from kanban.state.config import Config, Profile
from kanban.state.store import Conn

MAX_CHAIN = 32  # delegation is a few levels deep; this only bounds a corrupt chain


def endpoint_profile(conn: Conn, config: Config, card_id: int) -> Profile | None:
    """The profile whose endpoint `card_id`'s model uses, or None for the card's own."""
    row = conn.one("SELECT parent_id, profile, model FROM card WHERE id = :id", {"id": card_id})
    if row is None:
        return None
    parent_id, name, model = row
    source = None
    for _ in range(MAX_CHAIN):
        own = config.profiles.get(name)
        if parent_id is None or model is None or (own is not None and own.model):
            break  # this card's profile chose its model
        up = conn.one("SELECT parent_id, profile, model FROM card WHERE id = :id",
                      {"id": parent_id})
        if up is None or up[2] != model:
            break
        parent_id, name = up[0], up[1]
        source = config.profiles.get(name, config.profile("default"))
    return source


def with_endpoint(profile: Profile, source: Profile | None) -> Profile:
    """`profile` reaching its model through `source`'s endpoint (None: its own)."""
    if source is None or source is profile:
        return profile
    return replace(profile, base_url=source.base_url, api=source.api,
                   api_key_env=source.api_key_env)
