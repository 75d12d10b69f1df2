"""Root conftest. The specgate plugin is loaded by its `pytest11` entry point, not listed here (pluggy rejects a
second registration)."""
