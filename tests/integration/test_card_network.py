"""A delegated card has a network (and reaches the host's own services) only when its profile
and every delegating ancestor's do."""

from __future__ import annotations

from pathlib import Path

from kanban.cards import NewCard
from kanban.service import Kanban
from kanban.state import DbLocation, open_database
from kanban.state.config_parse import parse_config
from kanban.worker.sandboxing import card_network, card_reaches_host


def test_children_inherit_a_parents_cut_network(tmp_path: Path) -> None:
    db = open_database(DbLocation(str(tmp_path / "k.db"), "flag"), create=True)
    try:
        kb = Kanban(db)
        kb.ensure_board("default")
        config = parse_config({"profiles": {"offline": {"network": False},
                                            "online": {"network": True}}})
        root = kb.add_card(NewCard("root", profile="offline"))
        child = kb.add_card(NewCard("child", profile="online", parent_id=root.id))
        grandchild = kb.add_card(NewCard("grandchild", profile="online", parent_id=child.id))
        free = kb.add_card(NewCard("free", profile="online"))
        online, offline = config.profile("online"), config.profile("offline")
        assert not card_network(kb, kb.card(root.id), offline, config)
        assert not card_network(kb, kb.card(child.id), online, config)
        assert not card_network(kb, kb.card(grandchild.id), online, config)
        assert card_network(kb, kb.card(free.id), online, config)
    finally:
        db.dispose()


def test_a_childs_list_is_cut_to_what_its_ancestors_lists_allow(tmp_path: Path) -> None:
    db = open_database(DbLocation(str(tmp_path / "k.db"), "flag"), create=True)
    try:
        kb = Kanban(db)
        kb.ensure_board("default")
        config = parse_config({"profiles": {
            "pypi": {"network": ["pypi.org", "*.pythonhosted.org"]},
            "files": {"network": ["files.pythonhosted.org", "example.test"]},
            "other": {"network": ["example.test"]}, "online": {"network": True}}})
        root = kb.add_card(NewCard("root", profile="pypi"))
        child = kb.add_card(NewCard("child", profile="online", parent_id=root.id))
        grandchild = kb.add_card(NewCard("grandchild", profile="files", parent_id=child.id))
        stranger = kb.add_card(NewCard("stranger", profile="other", parent_id=root.id))
        assert card_network(kb, kb.card(child.id), config.profile("online"), config) == (
            "pypi.org", "*.pythonhosted.org")
        assert card_network(kb, kb.card(grandchild.id), config.profile("files"), config) == (
            "files.pythonhosted.org",)
        assert card_network(kb, kb.card(stranger.id), config.profile("other"), config) is False
    finally:
        db.dispose()


def test_a_child_reaches_the_host_only_when_every_ancestor_may(tmp_path: Path) -> None:
    """A lead kept off the host's own services cannot reach them by delegating to a profile
    that may (its instructions would steer that card)."""
    db = open_database(DbLocation(str(tmp_path / "k.db"), "flag"), create=True)
    try:
        kb = Kanban(db)
        kb.ensure_board("default")
        config = parse_config({"profiles": {"kept": {}, "local": {"reach_host": True}}})
        kept, local = config.profile("kept"), config.profile("local")
        root = kb.add_card(NewCard("root", profile="kept"))
        child = kb.add_card(NewCard("child", profile="local", parent_id=root.id))
        lead = kb.add_card(NewCard("lead", profile="local"))
        helper = kb.add_card(NewCard("helper", profile="local", parent_id=lead.id))
        assert not kept.reach_host
        assert not card_reaches_host(kb, kb.card(child.id), local, config)
        assert card_reaches_host(kb, kb.card(helper.id), local, config)
        assert card_reaches_host(kb, kb.card(lead.id), local, config)
        assert not card_reaches_host(kb, kb.card(root.id), kept, config)
    finally:
        db.dispose()
