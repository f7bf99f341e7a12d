"""A graph id a PostgreSQL store cannot keep (a NUL character, over 2,000 bytes of UTF-8)
is bad input: ``run``, ``submit`` and ``resume --graph`` refuse it in one line, exit 2,
recording nothing (no run, no schema). SQLite keeps the same ids."""

from __future__ import annotations

import json
from collections.abc import Iterator

import psycopg
import pytest

from tests.pgsupport import PG_URL, drop_schemas, fresh_prefix, pg_url

from .conftest import Workdir, lines, ok

#: A graph file of the given id (a YAML double-quoted string: ``\0`` is a NUL).
GRAPH = """
id: "{id}"
entry_node: load
nodes:
  - {{id: load, function: "triage_funcs:load", input_keys: [text], output_keys: [ticket]}}
"""

#: Ids a PostgreSQL store cannot keep, and what the refusal says of each.
BAD = {
    "nul": ("triage\\0x", "holds a NUL character (\\x00), which a PostgreSQL store cannot keep"),
    "long": ("g" * 2001, "is 2001 bytes long (UTF-8); a PostgreSQL store keeps at most 2000"),
    "wide": ("é" * 1000 + "g", "is 2001 bytes long (UTF-8); a PostgreSQL store keeps at most 2000"),
}


@pytest.fixture
def prefix() -> Iterator[str]:
    pg_url()
    name = fresh_prefix()
    yield name
    drop_schemas(name)


def _schemas(prefix: str) -> list[str]:
    with psycopg.connect(PG_URL) as conn:
        rows = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE %s", (prefix + "%",)
        ).fetchall()
    return [str(name) for (name,) in rows]


def _refused(done_err: str, file: str, said: str) -> None:
    assert len(lines(done_err)) == 1, done_err
    assert done_err.startswith(f"magistrate: error: {file}: the graph id "), done_err
    assert said in done_err and "nothing was recorded" in done_err
    assert "ValueError" not in done_err and "--debug" not in done_err


@pytest.mark.parametrize("command", ["run", "submit"])
@pytest.mark.parametrize("kind", sorted(BAD))
def test_a_graph_id_postgresql_cannot_keep_is_refused_creating_nothing(
    workdir: Workdir, prefix: str, command: str, kind: str
) -> None:
    graph_id, said = BAD[kind]
    workdir.write("bad.yaml", GRAPH.format(id=graph_id))
    url = f"{pg_url()}?schema={prefix}_cli"
    done = ok(workdir.run(command, "bad.yaml", "--input", "text=hi", "--store", url), 2)
    assert done.out == ""
    _refused(done.err, "bad.yaml", said)
    assert _schemas(prefix) == []  # refused before the store was created


def test_a_graph_id_of_2000_bytes_is_kept_and_one_more_refused(
    workdir: Workdir, prefix: str
) -> None:
    url = f"{pg_url()}?schema={prefix}_cli"
    workdir.write("edge.yaml", GRAPH.format(id="é" * 1000))
    ran = ok(workdir.run("run", "edge.yaml", "--input", "text=hi", "--store", url, "-q"))
    assert "completed" in ran.out
    workdir.write("past.yaml", GRAPH.format(id="é" * 1000 + "g"))
    refused = ok(workdir.run("submit", "past.yaml", "--input", "text=hi", "--store", url), 2)
    _refused(refused.err, "past.yaml", "is 2001 bytes long")
    listed = json.loads(ok(workdir.run("runs", "--output", "json", "--store", url)).out)
    assert [row["graph_id"] for row in listed["runs"]] == ["é" * 1000]


def test_resume_onto_a_graph_postgresql_cannot_keep_records_nothing(
    workdir: Workdir, prefix: str
) -> None:
    url = f"{pg_url()}?schema={prefix}_cli"
    submitted = ok(workdir.run("submit", "slow.yaml", "--store", url))
    run_id = submitted.out.split()[1].rstrip(":")
    before = ok(workdir.run("export", run_id, "--store", url)).out
    workdir.write("bad.yaml", GRAPH.format(id="g" * 2001))
    done = ok(workdir.run("resume", run_id, "--graph", "bad.yaml", "--store", url), 2)
    _refused(done.err, "bad.yaml", BAD["long"][1])
    assert ok(workdir.run("export", run_id, "--store", url)).out == before


@pytest.mark.parametrize("kind", sorted(BAD))
def test_sqlite_keeps_the_graph_ids_postgresql_refuses(workdir: Workdir, kind: str) -> None:
    graph_id, said = BAD[kind]
    workdir.write("bad.yaml", GRAPH.format(id=graph_id))
    store = str(workdir.path / "runs.db")
    ran = ok(workdir.run("run", "bad.yaml", "--input", "text=hi", "--store", store, "-q"))
    assert "completed" in ran.out
    # The same file on PostgreSQL: refused as bad input, where it used to fail the run.
    pg_store = f"{pg_url()}?schema={fresh_prefix()}_cli"
    try:
        refused = ok(workdir.run("run", "bad.yaml", "--input", "text=hi", "--store", pg_store), 2)
    finally:
        drop_schemas(pg_store.rpartition("=")[2])
    _refused(refused.err, "bad.yaml", said)
