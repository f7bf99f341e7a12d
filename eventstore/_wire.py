"""What the event loop and the writer process say to each other over two pipes.

Every message is a frame: a 4-byte little-endian length, then that many bytes of msgpack.

Loop -> writer: a list of append requests, each ``[run_id, expected_seq, tags, versions,
bodies, status, graph_hash]`` (bodies encoded, as their hashes cover them). The writer
answers requests in the order it got them. Closing the pipe asks it to commit what it
has, answer, merge the WAL and exit.

Writer -> loop:

- ``["ready", settings]`` once connected (settings: the write connection's pragmas), or
  ``["fatal", message]`` (then it exits);
- ``["batch", n, seconds, error, outcomes]`` for the next ``n`` requests, committed in one
  transaction of ``seconds``: ``error`` (a message) when the whole transaction failed,
  else one outcome per request: ``[first_seq, last_seq, last_position, last_hash]``, or
  ``[expected_seq, actual_seq]`` for a request refused by its seq check.
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["FrameReader", "frame"]

_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder()
#: A frame larger than this is refused (a writer gone wrong, not a request).
MAX_FRAME = 1 << 30


def frame(message: Any) -> bytes:
    """One message as a frame."""
    data = _ENCODER.encode(message)
    return len(data).to_bytes(4, "little") + data


class FrameReader:
    """Cuts a byte stream into messages; :meth:`feed` returns the complete ones."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = bytearray()

    @property
    def partial(self) -> bool:
        """True while part of a frame has arrived and the rest has not."""
        return bool(self._buffer)

    def feed(self, data: bytes) -> list[Any]:
        """The messages completed by ``data``. Raises ValueError on a corrupt stream."""
        buffer = self._buffer
        buffer += data
        messages: list[Any] = []
        start = 0
        end = len(buffer)
        with memoryview(buffer) as view:
            while end - start >= 4:
                size = int.from_bytes(view[start : start + 4], "little")
                if size > MAX_FRAME:
                    raise ValueError(f"a frame of {size} bytes")
                if end - start - 4 < size:
                    break
                try:
                    messages.append(_DECODER.decode(view[start + 4 : start + 4 + size]))
                except msgspec.DecodeError as exc:
                    raise ValueError(f"an undecodable frame: {exc}") from exc
                start += 4 + size
        if start:
            del buffer[:start]
        return messages
