"""``magistrate`` on a PostgreSQL store URL: its password is never shown, however it is
written, and the parameters it passes to libpq reach the server as written."""

from __future__ import annotations

import pytest

from tests.pgsupport import drop_schemas, fresh_prefix, pg_url

from .conftest import Workdir, lines, ok

#: Passwords libpq reads otherwise than written (an '@' or '/' not percent-encoded makes
#: part of it the host, port or database), or cannot read at all (a bad %-escape).
MISREAD = [
    "postgresql://postgres:pw1@hidden2@127.0.0.1:1/test",
    "postgresql://postgres:pw1/hidden2@127.0.0.1:1/test",
    "postgresql://postgres:pw1%ZZhidden2@127.0.0.1:1/test",
]


@pytest.mark.parametrize("url", MISREAD)
def test_a_store_password_libpq_misreads_is_never_shown(workdir: Workdir, url: str) -> None:
    for command in (["runs"], ["submit", "graph.yaml", "--input", "text=hi"]):
        done = ok(workdir.run(*command, "--store", url), 2)
        assert "hidden2" not in done.out + done.err
        assert "pw1" not in done.out + done.err
        assert len(lines(done.err)) == 1 and done.err.startswith("magistrate: error: ")


def test_libpq_parameters_of_a_store_url_reach_the_server_as_written(workdir: Workdir) -> None:
    prefix = fresh_prefix()
    url = (
        f"{pg_url()}?schema={prefix}_cli&application_name=app+1"
        "&options=-c%20statement_timeout%3D60000"
    )
    try:
        submitted = ok(workdir.run("submit", "graph.yaml", "--input", "text=hi", "--store", url))
        assert "submitted" in submitted.out
        listed = ok(workdir.run("runs", "-q", "--store", url))
        assert len(lines(listed.out)) == 1
        empty = url.replace("://postgres@", "://postgres:@")  # an empty password is none
        assert lines(ok(workdir.run("runs", "-q", "--store", empty)).out) == lines(listed.out)
        # As written, a password parameter with a bad %-escape is libpq's to refuse: unshown.
        refused = ok(workdir.run("runs", "--store", f"{url}&password=pw1%ZZhidden2"), 2)
        assert "invalid percent-encoded token" in refused.err and "hidden2" not in refused.err
    finally:
        drop_schemas(prefix)
