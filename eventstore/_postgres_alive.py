"""Whether an idle PostgreSQL connection still has a server behind it.

A backend that is terminated (``pg_terminate_backend``, a server restart, an idle timeout)
sends its error and closes the socket; a connection that sits idle meanwhile learns of it
only when it is used next, and the statement then fails. Before a cached connection is
used, :func:`spoke_unasked` asks the socket, without a round trip, whether the server sent
anything while the connection was idle (it sends nothing unasked to a healthy connection
that does not LISTEN); only then does the connection need a probe or a replacement.
"""

from __future__ import annotations

import select
from typing import Any

import psycopg

__all__ = ["check_on_checkout", "spoke_unasked"]


def spoke_unasked(conn: psycopg.AsyncConnection[Any]) -> bool:
    """True when ``conn`` is closed, or its server sent something while it was idle (the
    error of a terminated backend, the end of the stream): it may be gone."""
    if conn.closed:
        return True
    poller = select.poll()
    poller.register(conn.pgconn.socket, select.POLLIN | select.POLLERR | select.POLLHUP)
    return bool(poller.poll(0))


async def check_on_checkout(conn: psycopg.AsyncConnection[Any]) -> None:
    """The pool's check of a connection it is about to lend: nothing to do for a quiet
    one; a round trip for one whose server spoke, which raises psycopg.OperationalError
    when the server is gone (the pool then replaces the connection and lends another)."""
    if spoke_unasked(conn):
        await conn.execute("")
