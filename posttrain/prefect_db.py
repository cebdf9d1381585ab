"""A new Prefect database starts as a copy of one already migrated, instead of migrating from nothing.

A Prefect server on a new SQLite database runs its whole Alembic history first: 14.7 s of CPU to be up,
against 4.5 s on a migrated database. Every `posttrain pipeline` in a fresh working directory and every
`posttrain ui` in a new one paid it. The first of our servers to migrate a new database of this Prefect
version leaves a copy in the user's cache (taken with SQLite's backup API once the server answers, before
any run exists); later servers on a new database start from that copy. Only Prefect's default database
(`prefect.db` in its home) is seeded: one configured elsewhere (Postgres, another file) is left to Prefect.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path


@contextmanager
def default_database(home: Path) -> Iterator[None]:
    """Around the start of a Prefect server with this home: its default database, when new, starts as the
    template; or, with no template yet, becomes it once the block ends (the server answered)."""
    database = new_default_database(home)
    seeded = database is not None and seed(database)
    yield
    if database is not None and not seeded:
        keep_as_template(database)


def template() -> Path:
    """The migrated, empty database kept for this Prefect version."""
    import prefect

    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "posttrain" / f"prefect-{prefect.__version__}.db"


def new_default_database(home: Path) -> Path | None:
    """`home`/prefect.db when Prefect's settings leave the database at its default and it does not exist yet."""
    from prefect.settings import get_current_settings

    settings = get_current_settings()
    configured = settings.server.database.connection_url
    if configured is not None and configured.get_secret_value() != f"sqlite+aiosqlite:///{settings.home}/prefect.db":
        return None
    database = home / "prefect.db"
    return None if database.exists() else database


def seed(database: Path) -> bool:
    """Copy the kept template to `database` (whole or not at all); False when there is none yet."""
    source = template()
    if not source.is_file():
        return False
    partial = database.with_name(f".{database.name}.{uuid.uuid4().hex}")
    try:
        shutil.copyfile(source, partial)
        os.replace(partial, database)
    finally:
        partial.unlink(missing_ok=True)
    return True


def keep_as_template(database: Path) -> None:
    """Keep a copy of `database`, just migrated by a server that now answers, unless one is kept already."""
    target = template()
    if target.exists():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{uuid.uuid4().hex}")
    try:
        # The backup API copies a consistent database while its server writes to it (a file copy may not).
        with closing(sqlite3.connect(database)) as live, closing(sqlite3.connect(partial)) as copy:
            live.backup(copy)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
