"""The command table: each command's module, loaded only when that command runs.

`kanban --help` is printed from the short help here, without importing any command;
a test keeps each line equal to the first line of the command's own docstring.
"""

from __future__ import annotations

from typing import NamedTuple


class Entry(NamedTuple):
    target: str  # "module:attribute" of the click command
    help: str


COMMANDS: dict[str, Entry] = {
    "init": Entry("kanban.cli.project:init",
                  "Create .kanban/kanban.db here (or at --db) with a 'default' board."),
    "add": Entry("kanban.cli.cards:add",
                 "Add a card; it is ready at once unless a dependency is unfinished."),
    "triage": Entry("kanban.cli.triage:triage",
                    "Have a decomposer split a card into child cards (--dry-run: only show "
                    "them)."),
    "edit": Entry("kanban.cli.cards:edit",
                  "Change an unfinished card's title, goal, context, priority or limits."),
    "board": Entry("kanban.cli.boards:board",
                   "Show the board: a column per state with counts, pause state and "
                   "dispatchers."),
    "list": Entry("kanban.cli.listing:list_cards",
                  "List a board's cards, newest first (50 unless --limit or --all)."),
    "show": Entry("kanban.cli.cards:show",
                  "Show one card: goal, result, dependencies, children, comments, runs and "
                  "history."),
    "log": Entry("kanban.cli.cards:log",
                 "Show the transcript of each run of a card: messages, tool calls, models, usage, "
                 "cost."),
    "comment": Entry("kanban.cli.cards:comment", "Comment on a card; its next run sees it."),
    "link": Entry("kanban.cli.cards:link", "Make a card wait for another card of its board."),
    "unlink": Entry("kanban.cli.cards:unlink", "Remove a dependency between two cards."),
    "block": Entry("kanban.cli.moves:block", "Block a card until a person unblocks it."),
    "unblock": Entry("kanban.cli.moves:unblock", "Return a blocked card to the queue."),
    "complete": Entry("kanban.cli.moves:complete",
                      "Mark a card done by hand; its dependents may become ready."),
    "cancel": Entry("kanban.cli.moves:cancel", "Cancel an unfinished card."),
    "retry": Entry("kanban.cli.moves:retry",
                   "Queue a done, failed or cancelled card again with fresh attempts."),
    "archive": Entry("kanban.cli.moves:archive", "Hide a finished card from the board and lists."),
    "gc": Entry("kanban.cli.gc:gc", "Archive finished cards past an age; prune their "
                                    "transcripts, events, logs, workspaces."),
    "workspace": Entry("kanban.cli.work:workspace",
                       "Print the directory a card's worker works in (its workspace), and nothing "
                       "else."),
    "inbox": Entry("kanban.cli.inbox:inbox",
                   "List every card waiting on a person, oldest first, with the command that "
                   "answers it."),
    "approve": Entry("kanban.cli.work:approve",
                     "Pass a card's review gate, or approve the command a blocked card waits on."),
    "reject": Entry("kanban.cli.work:reject",
                    "Send a card in review back for another attempt, with feedback."),
    "deny": Entry("kanban.cli.work:deny",
                  "Deny the command a blocked card waits on; its next attempt is told so."),
    "boards": Entry("kanban.cli.boards:boards", "List, create and configure boards."),
    "pause": Entry("kanban.cli.boards:pause", "Stop dispatchers from claiming cards; running "
                                              "cards go on."),
    "resume": Entry("kanban.cli.boards:resume", "Let dispatchers claim cards again."),
    "check": Entry("kanban.cli.maintenance:check",
                   "Verify the database file and the board's invariants (exit 1 if anything is "
                   "wrong)."),
    "backup": Entry("kanban.cli.maintenance:backup",
                    "Write a consistent copy of the database to PATH, safely while dispatchers "
                    "work."),
    "status": Entry("kanban.cli.project:status",
                    "Show the version, database, config, card counts, dispatchers and workers."),
    "dispatch": Entry("kanban.cli.runtime:dispatch",
                      "Run a dispatcher in the foreground: claim ready cards and run workers."),
    "workers": Entry("kanban.cli.runtime:workers",
                     "List live workers: pid, card, attempt, heartbeat age and runtime."),
    "web": Entry("kanban.cli.web:web",
                 "Serve a live board in the browser, on this machine, guarded by a token."),
    "mcp": Entry("kanban.cli.mcp:mcp",
                 "Serve the board to MCP clients (Claude, Cursor): stdio, or HTTP with a token."),
    "run": Entry("kanban.cli.lead:run",
                 "Give a goal to a lead agent: it delegates subtasks as cards, waits, answers."),
    "swarm": Entry("kanban.cli.swarm:swarm",
                   "Create a swarm: workers in parallel, a verifier, a synthesizer's answer."),
    "search": Entry("kanban.cli.search:search",
                    "Search titles, goals, context, results, comments and transcripts; best "
                    "first."),
    "attach": Entry("kanban.cli.attachments:attach",
                    "Store a file with a card; its worker finds it read-only in its workspace."),
    "attachments": Entry("kanban.cli.attachments:attachments",
                         "List and remove the files stored with cards."),
    "skills": Entry("kanban.cli.skills:skills",
                    "List the skills workers can be given, or show one (NAME) in full."),
    "context": Entry("kanban.cli.preview:context",
                     "Print exactly what a worker for this card would be given now (secrets "
                     "masked)."),
    "stats": Entry("kanban.cli.stats:stats",
                   "Cards per state, board and profile; queue age; throughput, failures, "
                   "tokens, cost."),
    "cron": Entry("kanban.cli.cron:cron_app",
                  "Cron jobs: put a card on a board on a schedule (a dispatcher fires them)."),
    "notify": Entry("kanban.cli.notify:notify_app",
                    "Notifications: a card's events sent to a file, a webhook, a command or a "
                    "card."),
    "completion": Entry("kanban.cli.project:completion",
                        "Print the shell completion script for bash, zsh or fish."),
}
