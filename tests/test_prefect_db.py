"""Our Prefect servers on a new database: the first migrates it and leaves a copy; the next starts from that copy
(posttrain/prefect_db.py)."""

import os
import sqlite3
import subprocess
import sys

# A `posttrain pipeline`'s server (posttrain.ui.prefect_api), asked for a variable only a seeded database has.
SERVE = """
import sys
from pathlib import Path
from prefect.variables import Variable
from posttrain.ui import prefect_api
with prefect_api(Path(sys.argv[1])):
    print("variable:", Variable.get("seeded", default="absent"))
"""


def serve(home, cache, logs) -> str:
    env = {**os.environ, "PREFECT_HOME": str(home), "XDG_CACHE_HOME": str(cache)}
    env.pop("PREFECT_API_URL", None)
    done = subprocess.run([sys.executable, "-c", SERVE, str(logs)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


def test_the_first_server_leaves_its_migrated_database_and_the_next_starts_from_it(tmp_path):
    cache = tmp_path / "cache"
    assert "variable: absent" in serve(tmp_path / "first", cache, tmp_path)
    [template] = (cache / "posttrain").glob("prefect-*.db")
    with sqlite3.connect(template) as db:  # migrated, and taken before any run existed
        assert db.execute("select count(*) from alembic_version").fetchone() == (1,)
        assert db.execute("select count(*) from flow_run").fetchone() == (0,)
        db.execute("""insert into variable (name, value) values ('seeded', '"from the template"')""")
    db.close()
    assert "variable: from the template" in serve(tmp_path / "second", cache, tmp_path)


# In a fresh process: Prefect reads its settings from the environment when imported, as a CLI command does
# (this worker's settings are whatever its earlier tests left).
WHERE = """
import sys
from pathlib import Path
from posttrain import prefect_db
print(prefect_db.new_default_database(Path(sys.argv[1])))
"""


def new_database(home, **settings) -> str:
    env = {key: value for key, value in os.environ.items() if "DATABASE" not in key} | {"PREFECT_HOME": str(home)}
    done = subprocess.run([sys.executable, "-c", WHERE, str(home)], env=env | settings, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


def test_only_a_new_database_at_prefects_default_place_is_seeded(tmp_path):
    assert new_database(tmp_path) == str(tmp_path / "prefect.db")
    (tmp_path / "prefect.db").write_bytes(b"")
    assert new_database(tmp_path) == "None"  # an existing database is never replaced
    elsewhere = f"sqlite+aiosqlite:///{tmp_path / 'other.db'}"
    assert new_database(tmp_path / "new", PREFECT_API_DATABASE_CONNECTION_URL=elsewhere) == "None"
