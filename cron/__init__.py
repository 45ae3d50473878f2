"""Cron: jobs that put cards on a board at set times, and deliver what those cards produce.

One home for all of it; the board domain (`kanban/`) imports none of it.

- `schedule`: parse a schedule spec and compute fire times (APScheduler's triggers)
- `kinds`, `jobs`, `targets`, `durations`: job records, their settings and their checks
- `checks`: settings checked against config.toml, the toolsets and this machine
- `store`, `ledger`: every query over `cron_job`, `cron_fire` and `cron_delivery`
- `manage`, `service`: adding, editing and reading jobs (`CronJobs`: one transaction a call)
- `presence`: whether any job will fire (`kanban status` asks before loading the rest)
- `firing`, `chain`: firing due jobs exactly once, with other jobs' results as context
- `senders`, `courier`: delivering results to files, webhooks, commands and cards

Importing this package costs nothing: the CLI imports each module where it is needed.
"""
