"""Every code block in README.md and docs/*.md runs, in order, in a fresh directory per file.

The conventions, read by this test:

- a block whose info string names a file (```yaml file=triage.yaml) is written to that file;
- ```python blocks run with this interpreter (cwd: the file's directory), exit 0;
- ```sh blocks run line by line in one bash, each line expected to exit 0, or N when it
  ends with ``# exit N`` (``make test`` is skipped: it is this test's own runner, and
  ``make run`` runs from the repository);
- ```expr blocks hold one safe expression per line, each compiled;
- ```yaml and ```toml blocks without a file name are graph specs, each parsed; a
  ```yaml fragment block (a part of a graph: a node, a goal) is parsed as YAML only;
- ```text and ```json blocks show output and are not run.

The ports the docs' commands listen on (8765 for ``serve``, 9464 for a worker's metrics)
are replaced by free ones in what runs, so that two runs of this test at once, or a
server someone left on 8765, do not meet.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from runtime import parse_graph
from runtime.spec import compile_expression

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
NOT_RUN = {"text", "json", "console", "mermaid", ""}
BIN = Path(sys.executable).parent


def blocks(path: Path) -> list[tuple[str, dict[str, str], str, int]]:
    """(language, options, body, line) of every fenced block of ``path``."""
    return blocks_of(path.read_text())


def blocks_of(text: str) -> list[tuple[str, dict[str, str], str, int]]:
    """(language, options, body, line) of every fenced block of ``text``."""
    found = []
    for match in FENCE.finditer(text):
        info = match.group(1).split()
        language = info[0] if info else ""
        options = dict(part.split("=", 1) if "=" in part else (part, "") for part in info[1:])
        found.append((language, options, match.group(2), text.count("\n", 0, match.start()) + 1))
    return found


#: The fixed ports the docs name, each replaced by a free one in the commands run.
DOC_PORTS = re.compile(r"\b(8765|9464)\b")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _sh_script(body: str, where: str) -> str:
    lines: list[str] = ["set -o pipefail"]
    command = ""
    for number, raw in enumerate(body.splitlines(), start=1):
        command += raw
        if raw.endswith("\\"):
            command = command[:-1] + " "
            continue
        line, command = command.strip(), ""
        expected = 0
        marker = re.search(r"#\s*exit (\d+)", line)
        if marker:
            expected = int(marker.group(1))
        line = re.sub(r"\s+#.*$", "", line)  # a trailing comment (docs put none in quotes)
        if not line or line.startswith("#") or line == "make test":
            continue
        if line.startswith("make run"):
            line = f"(cd {shlex.quote(str(ROOT))} && {line})"
        lines.append(line)
        lines.append(
            f'rc=$?; if [ "$rc" != {expected} ]; then echo "{where}, block line {number}: '
            f'exited $rc, expected {expected}" >&2; exit 1; fi'
        )
    return "\n".join(lines) + "\n"


@pytest.mark.slow
@pytest.mark.timeout(600)  # a guide's whole walk-through: many CLI processes, a worker, a server
@pytest.mark.parametrize("path", DOCS, ids=[p.name for p in DOCS])
def test_every_code_block_runs(path: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    env.pop("MAGISTRATE_STORE", None)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT)])
    ran = 0
    ports = {"8765": str(_free_port()), "9464": str(_free_port())}
    found = blocks(path)
    # Files first, so a block may use a file shown further down.
    for _, options, body, _ in found:
        if "file" in options:
            target = tmp_path / options["file"]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(body)
            ran += 1
    for language, options, body, line in found:
        where = f"{path.name}:{line}"
        if "file" in options:
            continue
        if language == "yaml" and "fragment" in options:
            assert yaml.safe_load(body) is not None, f"{where}: an empty fragment"
            ran += 1
        elif language in ("yaml", "toml"):
            parse_graph(body, language)  # type: ignore[arg-type]
            ran += 1
        elif language == "python":
            done = subprocess.run(
                [sys.executable, "-c", body],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, f"{where}\n{done.stdout}\n{done.stderr}"
            ran += 1
        elif language in ("sh", "bash", "shell"):
            script = _sh_script(DOC_PORTS.sub(lambda m: ports[m.group(1)], body), where)
            done = subprocess.run(
                ["bash", "-c", script],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert done.returncode == 0, f"{where}\n{done.stdout}\n{done.stderr}"
            ran += 1
        elif language == "expr":
            for expression in filter(None, (e.strip() for e in body.splitlines())):
                compile_expression(expression)
            ran += 1
        else:
            assert language in NOT_RUN, f"{where}: a ```{language} block that nothing runs"
    assert ran or not found


def test_the_readme_s_operating_recipe_is_the_one_operating_md_runs() -> None:
    """The README shows the recipe's commands in a ```text block (not run there): each of
    them is a line that docs/operating.md runs."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Operating it") :]
    shown = next(body for language, _, body, _ in blocks_of(section) if language == "text")
    run = {
        line.strip()
        for language, options, body, _ in blocks(ROOT / "docs" / "operating.md")
        if language == "sh" and "file" not in options
        for line in body.splitlines()
    }
    commands = [re.sub(r"\s+#.*$", "", line).strip() for line in shown.splitlines()]
    assert commands
    for command in commands:
        assert any(command in line for line in run), command


def test_every_option_of_every_command_is_in_the_documentation() -> None:
    """Each ``--option`` a command's parser takes (``magistrate COMMAND --help``) is named
    in docs/cli.md, or for ``serve`` in docs/server.md."""
    from runtime.cli._app import build_parser
    from runtime.cli._commands import COMMANDS

    cli = (ROOT / "docs" / "cli.md").read_text()
    server = (ROOT / "docs" / "server.md").read_text()
    missing = []
    for name in COMMANDS:
        [commands] = [a for a in build_parser(name)._actions if a.choices and a.dest == "command"]
        parser = commands.choices[name]  # type: ignore[index]
        text = cli + (server if name == "serve" else "")
        for action in parser._actions:
            for option in action.option_strings:
                if option.startswith("--") and option != "--help":
                    if not re.search(rf"{re.escape(option)}(?![\w-])", text):
                        missing.append(f"magistrate {name} {option}")
    assert not missing, missing


#: mypy as a typed project runs it on the docs' Python: unannotated functions checked too.
MYPY = [sys.executable, "-m", "mypy", "--check-untyped-defs", "--no-incremental"]
MYPY += ["--cache-dir", os.devnull, "--no-error-summary"]


@pytest.mark.slow
def test_every_python_block_type_checks(tmp_path: Path) -> None:
    """The docs' Python, copied into a typed project, passes mypy: no attribute of a value
    that may be None (``Runtime.approve``'s handle, ``Runtime.store``), no attribute a type
    lacks. Unannotated functions are checked too (``--check-untyped-defs``)."""
    names = []
    for path in DOCS:
        for language, options, body, line in blocks(path):
            if language != "python":
                continue
            stem = re.sub(r"\W", "_", path.stem)
            name = options.get("file") or f"doc_{stem}_{line}.py"
            (tmp_path / name).write_text(body)
            names.append(name)
    assert names
    done = subprocess.run(
        [*MYPY, *names],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
