"""The actor core: actors with bounded mailboxes exchanging msgspec messages on anyio.

Nothing here knows about graphs, LLMs or the event log.
"""

from ._actor import Actor, ActorSystem
from ._errors import (
    ActorError,
    ActorStoppedError,
    AskTimeoutError,
    MagistrateError,
    MailboxFullError,
    NotAMessageError,
)
from ._mailbox import MailboxConfig, MailboxStatistics, Waiter, new_waiter
from ._messages import Message, Terminated
from ._ref import ActorRef
from ._shield import finish, settle

__all__ = [
    "Actor",
    "ActorError",
    "ActorRef",
    "ActorStoppedError",
    "ActorSystem",
    "AskTimeoutError",
    "MagistrateError",
    "MailboxConfig",
    "MailboxFullError",
    "MailboxStatistics",
    "Message",
    "NotAMessageError",
    "Terminated",
    "Waiter",
    "finish",
    "new_waiter",
    "settle",
]
