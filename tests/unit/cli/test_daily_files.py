"""`kanban attach`, `attachments`, `skills` and `context` from the command line."""

from __future__ import annotations

import json
from pathlib import Path

from kanban.service import Kanban
from tests.unit.cli.conftest import Cli


def home_of(kanban: Kanban) -> Path:
    assert kanban.db.path is not None
    return Path(kanban.db.path).parent


def test_attach_list_show_and_remove(cli: Cli, kanban: Kanban, tmp_path: Path) -> None:
    cli.add("card")
    source = tmp_path / "brief.txt"
    source.write_text("the brief")
    assert cli.ok("attach", "1", str(source)).stdout == "attached brief.txt (9 bytes) to #1\n"
    assert "same content" in cli.ok("attach", "1", str(source)).stdout
    (listed,) = cli.json("attachments", "list", "1")["attachments"]
    assert listed["name"] == "brief.txt" and Path(listed["path"]).read_text() == "the brief"
    assert "brief.txt  9 B · text/plain" in cli.ok("show", "1").stdout
    assert cli.json("show", "1")["attachments"][0]["sha256"] == listed["sha256"]
    assert cli.ok("attachments", "rm", "1", "brief.txt").stdout == "removed brief.txt from #1\n"
    emptied = cli.ok("attachments", "list", "1")
    assert (emptied.stdout, emptied.stderr) == ("", "#1 has no attachments\n")
    assert "no attachment named" in cli.fails("attachments", "rm", "1", "brief.txt")


def test_attachment_size_limit_comes_from_config(cli: Cli, kanban: Kanban,
                                                 tmp_path: Path) -> None:
    (home_of(kanban) / "config.toml").write_text("[limits]\nmax_attachment_mb = 0.001\n")
    cli.add("card")
    big = tmp_path / "big.bin"
    big.write_bytes(b"x" * 2000)
    assert "larger than the attachment limit" in cli.fails("attach", "1", str(big))


def test_skills_list_and_show(cli: Cli, kanban: Kanban) -> None:
    assert "no skills" in cli.ok("skills").stderr
    folder = home_of(kanban) / "skills" / "tone"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text("---\ndescription: House tone\ntags: [writing]\n---\n"
                                     "Short sentences.\n")
    assert cli.ok("skills").stdout == "tone [writing] (project): House tone\n"
    assert "Short sentences." in cli.ok("skills", "tone").stdout
    assert cli.json("skills")["skills"][0]["name"] == "tone"
    assert "unknown skill 'nope'" in cli.fails("skills", "nope")


def test_context_shows_the_workers_prompt_tools_and_masked_environment(
        cli: Cli, kanban: Kanban) -> None:
    folder = home_of(kanban) / "skills" / "tone"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text("---\ndescription: House tone\n---\nShort.\n")
    cli.add("Write docs", "--goal", "document the parser", "--skill", "tone")
    env = {"OPENAI_API_KEY": "sk-live-abcdefghijklmnop"}
    result = cli("context", "1", "--json", env=env)
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["model"] == "openai:gpt-4o-mini" and data["toolsets"] == ["kanban", "skills"]
    assert [m["role"] for m in data["messages"]] == ["user", "user"]
    assert "tone: House tone" in data["messages"][0]["content"]
    assert "Goal: document the parser" in data["messages"][1]["content"]
    assert "skill_view" in [t["name"] for t in data["tools"]]
    assert data["environment"]["OPENAI_API_KEY"] == "[redacted]"
    assert "sk-live" not in result.stdout
    assert data["limits"]["max_turns"] == 20
    text = cli("context", "1", env=env).stdout
    assert "skill_view(name)" in text and "OPENAI_API_KEY=[redacted]" in text


def test_stats_text_and_json(cli: Cli) -> None:
    cli.add("a")
    cli.add("b")
    cli.ok("complete", "1", "--summary", "x")
    data = cli.json("stats")
    assert data["by_state"]["done"] == 1 and data["by_state"]["ready"] == 1
    assert data["last"]["hour"]["done"] == 1 and data["last"]["hour"]["failure_rate"] == 0
    assert (data["cost"], data["unpriced_calls"]) == (0, 0)
    assert data["tokens"] == {"input": 0, "output": 0, "cached": 0}
    text = cli.ok("stats").stdout
    assert "all boards" in text and "oldest ready card waiting" in text
    assert "all time: 0/0/0 tokens · cost $0" in text
    assert "no board named 'x'" in cli.fails("stats", "--board", "x")
