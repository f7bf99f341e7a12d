"""A careless or hostile command line: words that are not UTF-8, files that are binary,
too deep, a directory or a loop of symbolic links, ``--tools`` that name no tools, a heads
file nowhere, a worker bound past what a store takes, a provider without its key. Each is
exit 2 with one error line on stderr, no traceback, and nothing written."""

from __future__ import annotations

import json
import subprocess

import pytest

from .conftest import ALLOW, SCRIPT, Result, Workdir, ok

#: A command-line word whose bytes are not UTF-8 (Python hands it over as a lone
#: surrogate, and the subprocess gives the child the byte back).
NOT_UTF8 = "\udcff"

RUN = ["run", "graph.yaml", "--input", "text=hi", "--provider", "scripted:script.yaml", "-q"]


def _refused(result: Result, says: str) -> None:
    """Exit 2, ``says`` on the last line of stderr, no traceback, nothing on stdout."""
    assert result.code == 2, f"exit {result.code}\n{result.out}\n{result.err}"
    assert result.out == ""
    assert "Traceback" not in result.err and "--debug" not in result.err, result.err
    assert says in result.err.strip().splitlines()[-1], result.err


def _paused(workdir: Workdir, store: str) -> str:
    run_id: str = json.loads(ok(workdir.run(*RUN, "--store", store, "--output", "json"), 3).out)[
        "run_id"
    ]
    return run_id


def _events(workdir: Workdir, store: str, run_id: str) -> str:
    return ok(workdir.run("export", run_id, "--store", store)).out


def test_words_that_are_not_utf8_are_bad_input(workdir: Workdir, store_url: str) -> None:
    run_id = _paused(workdir, store_url)
    before = _events(workdir, store_url, run_id)
    store = ("--store", store_url)
    for args in (
        ("show", NOT_UTF8),
        ("export", NOT_UTF8),
        ("cancel", NOT_UTF8),
        ("fork", NOT_UTF8, "--at", "1", *ALLOW),
        ("replay", NOT_UTF8),
        ("verify", NOT_UTF8),
    ):
        _refused(workdir.run(*args, *store), "argument RUN: not UTF-8 text")
    _refused(workdir.run("cancel", run_id, "--reason", NOT_UTF8, *store), "--reason")
    approve = ("approve", run_id, "--input", "approved_by=x", *ALLOW, *store)
    _refused(workdir.run(*approve, "--by", NOT_UTF8), "--by: not UTF-8")
    _refused(workdir.run(*approve, "--reject", NOT_UTF8), "--reject: not UTF-8")
    # Said of --graph, not of a --cursor nobody gave.
    _refused(workdir.run("runs", "--graph", NOT_UTF8, *store), "--graph: not UTF-8")
    assert _events(workdir, store_url, run_id) == before  # nothing recorded


def test_files_that_are_binary_or_too_deep_are_bad_input(workdir: Workdir) -> None:
    ok(workdir.run(*RUN), 3)
    (workdir.path / "binary.json").write_bytes(b"\x8c\xff\x00\x01 not text")
    (workdir.path / "binary.yaml").write_bytes(b"\x8c\xff\x00\x01 not text")
    workdir.write("deep.json", "[" * 100_000 + "]" * 100_000)
    workdir.write("tabs.yaml", "text:\n\t- hi\n")
    listed = ok(workdir.run("runs", "-q")).out
    for name in ("binary.json", "binary.yaml"):
        _refused(workdir.run(*RUN, "--input-file", name), f"input file {name} is not valid")
    # PyYAML's several lines quoting the text, said on one.
    _refused(
        workdir.run(*RUN, "--input-file", "tabs.yaml"),
        "input file tabs.yaml is not valid: found character '\\t' that cannot start any "
        "token (line 2, column 1)",
    )
    for name in ("binary.yaml", "deep.json"):
        script = ("run", "graph.yaml", "--input", "text=hi", "--provider", f"scripted:{name}")
        _refused(workdir.run(*script), f"script {name} is not valid")
    for name in ("binary.json", "deep.json"):
        _refused(workdir.run("verify", "--all", "--against", name), f"heads file {name}")
    assert ok(workdir.run("runs", "-q")).out == listed  # no run was started


def test_tools_that_name_no_tools_are_bad_input(workdir: Workdir) -> None:
    for reference, says in (
        ("os:path", "--tools 'os:path': a module, not a Tool"),
        ("os:sep", "--tools 'os:sep': a str, not a Tool"),
        ("", "--tools '': names no module"),
        (":lookup", "--tools ':lookup': names no module"),
    ):
        _refused(workdir.run(*RUN, "--tools", reference), says)
    assert not (workdir.path / "magistrate.db").exists()  # refused before the store is made


def test_a_heads_file_no_head_can_be_kept_in_is_bad_input(workdir: Workdir, store_url: str) -> None:
    run_id = _paused(workdir, store_url)
    (workdir.path / "adir").mkdir()
    for heads, says in (
        ("adir", "heads file adir: it is a directory"),
        ("nowhere/heads", "heads file nowhere/heads: its directory nowhere does not exist"),
    ):
        args = ("--store", store_url, "--heads", heads)
        _refused(workdir.run("runs", *args), says)
        _refused(workdir.run(*RUN, *args), says)
        _refused(workdir.run("approve", run_id, "--input", "approved_by=x", *ALLOW, *args), says)
    assert [
        r["run_id"]
        for r in json.loads(ok(workdir.run("runs", "--store", store_url, "--output", "json")).out)[
            "runs"
        ]
    ] == [run_id]
    assert not (workdir.path / "nowhere").exists()


def test_a_worker_bound_past_what_a_store_takes_is_bad_input(workdir: Workdir) -> None:
    try:
        result = workdir.run("worker", "--concurrency", "99999999999999999999", timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail("the worker started, claiming with a limit the store cannot take")
    _refused(result, "--concurrency")
    assert not (workdir.path / "magistrate.db").exists()


def test_a_graph_file_in_a_loop_of_symbolic_links_names_the_loop(workdir: Workdir) -> None:
    (workdir.path / "a.yaml").symlink_to("b.yaml")
    (workdir.path / "b.yaml").symlink_to("a.yaml")
    for command in ("graph", "run", "submit"):
        _refused(
            workdir.run(command, "a.yaml"),
            "a.yaml: cannot read: its symbolic links form a loop: a.yaml -> b.yaml -> a.yaml",
        )
    assert not (workdir.path / "magistrate.db").exists()


@pytest.mark.parametrize(("provider", "key"), [("openai", "OPENAI"), ("anthropic", "ANTHROPIC")])
def test_a_provider_without_its_key_names_the_variable_to_set(
    workdir: Workdir, provider: str, key: str
) -> None:
    workdir.write("script.yaml", SCRIPT)
    result = workdir.run("run", "graph.yaml", "--input", "text=hi", "--provider", provider)
    _refused(
        result, f"--provider {provider}: no API key: set the {key}_API_KEY environment variable"
    )
    assert "api_key=" not in result.err  # the library's argument: no option of the command
    assert not (workdir.path / "magistrate.db").exists()  # refused before the store is made


def test_the_largest_limit_a_store_takes_lists_every_run(workdir: Workdir, store_url: str) -> None:
    run_id = _paused(workdir, store_url)
    largest = str(2**63 - 1)  # --limit's bound: the page asks the store for one more
    listed = ok(workdir.run("runs", "--limit", largest, "-q", "--store", store_url))
    assert listed.out == f"{run_id}\n"
