"""Benchmarks: each compares kanban with a baseline measured in the same run (`python -m bench`).

One module per benchmark; each exposes `run(sizes, workdir) -> list[Row]`. The machines
these run on are shared and noisy, so every row is a ratio against its own baseline and
every number is a median over repeats.
"""
