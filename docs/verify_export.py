"""Check the hash chain of a ``magistrate export`` file, without magistrate.

Usage: ``python verify_export.py RUN.jsonl`` (or ``-`` for standard input). Needs only
the standard library and msgspec. Prints ``ok: N events`` and exits 0 when every line's
``hash`` is the recipe's hash of that line and ``prev_hash`` is the hash of the line
before it (seqs 1, 2, 3 ... of one run), and every line is exactly as ``magistrate
export`` writes it; otherwise (an empty file too) prints the first bad seq and exits 1.
The hash does not cover ``ts`` and ``position`` (the store sets them): an edited time
is not detected.

The recipe (docs/events.md, "The hash chain"): an event's hash is the hex sha256 of

    header + body

where ``header`` is the MessagePack array ``[prev, run_id, seq, type, version]`` (``prev``
the previous event's hash as 32 raw bytes, empty bytes for seq 1) and ``body`` the event's
stored JSON: compact, ``{"type": TYPE, ...the body's fields in the order exported}``.
"""

from __future__ import annotations

import hashlib
import sys
from typing import Any

import msgspec

_HEADER = msgspec.msgpack.Encoder()
_BODY = msgspec.json.Encoder()


def event_hash(prev_hash: str, record: dict[str, Any]) -> str:
    """The chain hash of one exported event, given the previous event's hash."""
    header = _HEADER.encode(
        (
            bytes.fromhex(prev_hash),
            record["run_id"],
            record["seq"],
            record["type"],
            record["version"],
        )
    )
    body = _BODY.encode({"type": record["type"], **record["body"]})
    return hashlib.sha256(header + body).hexdigest()


def check(lines: list[str]) -> tuple[int, str | None]:
    """How many events chain, and the reason of the first that does not (None: all do)."""
    if not lines:
        return 0, "no events: an export holds at least its run's first event"
    prev = ""
    run_id = None
    for count, line in enumerate(lines):
        try:
            record = msgspec.json.decode(line)
            seq = record.get("seq")
            if run_id is None:
                run_id = record["run_id"]
            if record["run_id"] != run_id or seq != count + 1:
                return count, f"line {count + 1}: expected seq {count + 1} of run {run_id}"
            if record["prev_hash"] != prev:
                return count, f"seq {seq}: prev_hash is not the hash of seq {seq - 1}"
            if event_hash(prev, record) != record["hash"]:
                return count, f"seq {seq}: the hash does not match the event"
        except (msgspec.DecodeError, AttributeError, KeyError, TypeError, ValueError) as exc:
            return count, f"line {count + 1}: not an exported event ({type(exc).__name__}: {exc})"
        if _BODY.encode(record) != line.encode():
            # The hash covers the values as decoded here; a line that spells them otherwise
            # (a key given twice, a number with more digits than a float keeps) may show
            # another reader values its hash does not cover.
            return count, (
                f"seq {seq}: the line is not as magistrate export writes it (a key given "
                f"twice, or a value spelled otherwise); other readers may read other values"
            )
        prev = record["hash"]
    return len(lines), None


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write("usage: python verify_export.py EXPORT.jsonl (or - for stdin)\n")
        return 2
    if argv[1] == "-":
        text = sys.stdin.read()
    else:
        with open(argv[1], encoding="utf-8") as file:
            text = file.read()
    # Lines end at "\n" only: a string in an event may hold U+2028 and other characters
    # that str.splitlines() would also split at.
    lines = [line.strip() for line in text.split("\n") if line.strip()]
    checked, reason = check(lines)
    if reason is not None:
        print(f"BROKEN after {checked} good events: {reason}")
        return 1
    print(f"ok: {checked} events")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
