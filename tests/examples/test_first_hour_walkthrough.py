"""A new user's first hour, as they would run it: the README's and the getting-started guide's
files saved in an empty directory, their commands run there with nothing but the installed
``magistrate`` on ``PATH`` (no ``PYTHONPATH``, no ``MAGISTRATE_*`` variable, no API key),
and what the pages say the commands print is what they print.

tests/test_docs.py runs every block and checks exit codes (with the docs' directory on
``PYTHONPATH``); this checks the output the pages show, and that the walk-throughs need no
setting the pages do not give.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.spec import JsonPathVerifier
from tests.test_docs import BIN, ROOT, _sh_script, blocks

README = ROOT / "README.md"
GUIDE = ROOT / "docs" / "getting-started.md"


def _user_env() -> dict[str, str]:
    """A shell as a new user has it: the venv's bin on PATH, nothing else of ours set."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "ANTHROPIC_", "MAGISTRATE_")) and k != "PYTHONPATH"
    }
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def _walk(page: Path, where: Path, section: str = "") -> str:
    """Save the page's files in ``where`` and run its ``sh`` blocks there (from the heading
    ``section`` on, when given); the commands' stdout."""
    text = page.read_text()
    text = text[text.index(section) :] if section else text
    found = [b for b in blocks(page) if b[0] != "sh" or b[2] in text]
    for _, options, body, _ in found:
        if "file" in options:
            (where / options["file"]).write_text(body)
    out = []
    for language, options, body, line in found:
        if language == "sh" and "file" not in options and "make run" not in body:
            done = subprocess.run(
                ["bash", "-c", _sh_script(body, f"{page.name}:{line}")],
                cwd=where,
                env=_user_env(),
                capture_output=True,
                text=True,
                timeout=240,
            )
            assert done.returncode == 0, f"{page.name}:{line}\n{done.stdout}\n{done.stderr}"
            out.append(done.stdout)
    return "\n".join(out)


def _squeezed(text: str) -> list[str]:
    return [" ".join(line.split()) for line in text.splitlines()]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_getting_started_guide_prints_the_timeline_it_shows(tmp_path: Path) -> None:
    out = _squeezed(_walk(GUIDE, tmp_path))
    [shown] = [body for language, _, body, _ in blocks(GUIDE) if language == "text"]
    for line in _squeezed(shown):
        if line and line != "...":
            assert line in out, f"the guide shows {line!r}; the commands printed:\n" + "\n".join(
                out
            )
    assert (tmp_path / "magistrate.db").exists() and (tmp_path / "triage.mmd").exists()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_readme_s_command_line_runs_in_an_empty_directory(tmp_path: Path) -> None:
    out = _walk(README, tmp_path, section="## The command line")
    # approve ran the gated node with the name given to run, and recorded who approved
    assert "greeting: Hello, Ada!" in out
    assert re.search(r"approval\.granted\s+approved by ann", out)
    assert re.search(r"ok: 1 run, \d+ events checked, 1 kept head present", out)
    assert "flowchart TD" in out  # the graph command's Mermaid drawing


@pytest.mark.slow
def test_the_readme_s_embedding_example_prints_the_run_it_approved(tmp_path: Path) -> None:
    [code] = [body for language, options, body, _ in blocks(README) if language == "python"][:1]
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=_user_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "completed clean contents of",
        "{'url': 'https://example.org', 'page': 'contents of https://example.org'}",
    ]


@pytest.mark.slow
def test_the_testing_guide_s_replay_check_prints_what_its_comments_say(tmp_path: Path) -> None:
    page = ROOT / "docs" / "testing.md"
    [code] = [b for language, _, b, _ in blocks(page) if language == "python" and "warnings" in b]
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=_user_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    warnings, *failure = done.stdout.splitlines()
    assert "the recorded answer is still served" in warnings  # the request changed
    assert any("verdict RETRY at level 0 where ACCEPT was recorded" in f for f in failure)


@pytest.mark.slow
def test_the_agreement_example_tells_tool_turns_from_judged_verdicts() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "examples.agreement_analysis"],
        cwd=ROOT,
        env=_user_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    # One Level 0 RETRY (obligations missing) and one ACCEPT; the other two turns set outputs.
    assert "extract: 2 tool turns, judged {'retry': 1, 'accept': 1}" in done.stdout


def test_the_validate_fix_docstring_names_the_check_the_graph_makes() -> None:
    import examples.validate_fix as example

    check = example.build_graph().node("validate").verifier
    assert isinstance(check, JsonPathVerifier) and check.assertion is not None
    assert f"``{check.path}``" in (example.__doc__ or "")
    assert f"``{check.assertion.op}``" in (example.__doc__ or "")
