"""The heads file itself: chained lines appended by several writers, checked on read."""

from __future__ import annotations

import threading
from pathlib import Path

from eventstore import HeadsFile, HeadsFileReader, read_heads_file


def test_two_writers_on_one_file_keep_one_chain(tmp_path: Path) -> None:
    path = tmp_path / "store.heads"
    first, second = HeadsFile(path), HeadsFile(path)  # as two processes sharing a store

    def record(heads: HeadsFile, name: str) -> None:
        for seq in range(1, 201):
            heads.record(name, seq, f"{seq:064x}")

    threads = [
        threading.Thread(target=record, args=(first, "a")),
        threading.Thread(target=record, args=(second, "b")),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    first.close()
    second.close()
    kept = read_heads_file(path)
    assert kept.ok, kept.reason
    # A line per run per gathering, its newest head then: each run's seqs only grow, and
    # the last line of each is the newest head recorded.
    for run in ("a", "b"):
        seqs = [h.seq for h in kept.heads if h.run_id == run]
        assert seqs and seqs == sorted(set(seqs)) and seqs[-1] == 200
    assert kept.newest()["b"].seq == 200 and kept.newest()["b"].hash == f"{200:064x}"


def test_a_gathering_keeps_each_runs_newest_head_only(tmp_path: Path) -> None:
    path = tmp_path / "store.heads"
    heads = HeadsFile(path)
    heads.record("first", 1, "aa" * 32)  # wakes the writer, written at once
    assert heads.flush()
    for seq in range(2, 50):  # within one gathering: one line, the newest
        heads.record("first", seq, f"{seq:064x}")
    heads.record("first", 10, "bb" * 32)  # an older head recorded late changes nothing
    heads.close()
    kept = read_heads_file(path)
    assert [(h.run_id, h.seq) for h in kept.heads] == [("first", 1), ("first", 49)]


def test_a_removed_or_inserted_line_breaks_the_chain_at_that_line(tmp_path: Path) -> None:
    path = tmp_path / "store.heads"
    heads = HeadsFile(path)
    for run in range(1, 6):
        heads.record(f"r{run}", 1, "ab" * 32)
    heads.close()
    lines = path.read_text().splitlines(keepends=True)
    assert len(lines) == 5
    path.write_text("".join(lines[:2] + lines[3:]))  # line 3 dropped
    kept = read_heads_file(path)
    assert (kept.broken_line, len(kept.heads)) == (3, 2)
    path.write_text("".join([*lines[:1], '{"run":"r","seq":9}\n', *lines[1:]]))
    kept = read_heads_file(path)
    assert kept.broken_line == 2 and kept.reason is not None
    assert kept.reason.startswith("not a heads record")


def test_no_file_reads_as_no_heads_and_a_closed_writer_records_nothing(tmp_path: Path) -> None:
    path = tmp_path / "none.heads"
    assert read_heads_file(path).ok and read_heads_file(path).heads == []
    heads = HeadsFile(path)
    heads.close()
    heads.record("r", 1, "ab" * 32)
    assert heads.flush(1.0) and not path.exists()


def test_a_line_cut_short_by_a_crash_and_ended_by_the_next_writer_is_passed_over(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.heads"
    heads = HeadsFile(path)
    heads.record("a", 1, "aa" * 32)
    heads.close()
    with open(path, "ab") as file:  # a write the crash cut in the middle of a line
        file.write(b'{"run":"a","seq":2,"ha')
    assert read_heads_file(path).ok  # an unended last line is not read
    later = HeadsFile(path)  # the next process ends it and links on from it
    later.record("a", 3, "cc" * 32)
    later.record("b", 1, "dd" * 32)
    later.close()
    kept = read_heads_file(path)
    assert kept.ok, kept.reason
    assert [(h.run_id, h.seq) for h in kept.heads] == [("a", 1), ("a", 3), ("b", 1)]
    # A line that is not a record and that the next line does not link on from is a break.
    lines = path.read_bytes().split(b"\n")
    path.write_bytes(b"\n".join([*lines[:1], b"not a record", *lines[2:]]))
    edited = read_heads_file(path)
    assert not edited.ok and edited.broken_line == 2
    assert edited.reason is not None and edited.reason.startswith("not a heads record")
    assert [(h.run_id, h.seq) for h in edited.heads] == [("a", 1)]


def _record(path: Path, *heads: tuple[str, int]) -> None:
    writer = HeadsFile(path)
    for run_id, seq in heads:
        writer.record(run_id, seq, f"{seq:064x}")
        assert writer.flush()  # a line each
    writer.close()


def test_a_reader_reads_only_what_the_file_gained_and_agrees_with_a_whole_read(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.heads"
    reader = HeadsFileReader(path)
    assert reader.read() == [] and reader.contents().ok  # no file yet: no heads
    _record(path, ("a", 1), ("b", 1))
    assert [(h.run_id, h.seq) for h in reader.read()] == [("a", 1), ("b", 1)]
    assert reader.read() == []  # nothing new
    _record(path, ("a", 2))
    assert [(h.run_id, h.seq) for h in reader.read()] == [("a", 2)]
    # A write cut short: not read, and read once the next writer ended it and linked on.
    with open(path, "ab") as file:
        file.write(b'{"run":"a","seq":3,"ha')
    assert reader.read() == [] and reader.contents().ok
    _record(path, ("b", 2))
    assert [(h.run_id, h.seq) for h in reader.read()] == [("b", 2)]
    assert reader.contents() == read_heads_file(path)
    assert reader.contents().ok and len(reader.heads) == 4


def test_a_reader_reads_again_a_file_written_over_and_stops_at_a_break(tmp_path: Path) -> None:
    path = tmp_path / "store.heads"
    _record(path, ("a", 1), ("a", 2), ("a", 3))
    reader = HeadsFileReader(path)
    assert len(reader.read()) == 3
    # The last line written over (same length, same inode), then a line appended: the
    # reader sees that its last line is gone and reads the file again from its start.
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join([*lines[:2], lines[2].replace(b'"seq":3', b'"seq":4')]))
    _record(path, ("b", 1))
    again = reader.read()
    assert [(h.run_id, h.seq) for h in again] == [("a", 1), ("a", 2)]
    assert reader.contents() == read_heads_file(path)
    assert reader.contents().broken_line == 3 and not reader.contents().ok
    _record(path, ("b", 2))
    assert reader.read() == []  # nothing after a break is read, as a whole read does not
    # A file replaced (another inode), here a shorter one: read from its start.
    path.unlink()
    _record(path, ("c", 1))
    assert [(h.run_id, h.seq) for h in reader.read()] == [("c", 1)]
    assert reader.contents().ok and reader.heads == read_heads_file(path).heads
