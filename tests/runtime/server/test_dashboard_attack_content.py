"""The dashboard against hostile and odd run content, in a real headless Chromium: markup,
``javascript:`` URLs, right-to-left overrides, zero-width and control characters, very long
words, a 1 MB value, deep nesting and integers past 2^53, in node ids, run ids, memory,
model text and errors. Nothing of it runs, every page stays inside the window (at a
desktop and a phone's width), an id cannot pass for another, text after a value stays
where it is, and a text the timeline cuts short is shown whole with its event."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from runtime import EdgeSpec, Goal, GraphSpec, NodeSpec, Runtime
from runtime.server import create_app
from runtime.testing import ScriptedProvider, reply, tool_call

from .support import FUNCTIONS, TOKEN, Served, live_server
from .test_dashboard import _need_browser as need_browser
from .test_dashboard import browser_page

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(240)]

XSS = "<img src=x onerror=alert(1)></style><script>alert(2)</script>"
BIG = 10**40 + 1  # far past 2**53: a JS number would round it
WORD = "W" * 400  # a word no line can hold
MODEL_TEXT = "Model says \u202etxet " + "m" * 300 + " END-OF-TEXT"
FEEDBACK = "F" * 600
#: Run ids the library takes (the HTTP API's start takes fewer characters).
MARKUP_RUN = '"><img src=x onerror=alert(3)>javascript:alert(4)' + "R" * 120
SPOOF_RUN = "abc\u202egnp.exe"
GATE = "gate\u202eetag"  # shown as "gategate" if the override is not revealed
ENTRY = XSS + "n" * 300


def hostile(inputs: dict[str, Any]) -> dict[str, Any]:
    nested: Any = "bottom"
    for _ in range(90):
        nested = [nested]
    return {
        "html": XSS,
        "long": WORD,
        "big": BIG,
        "neg": -BIG,
        "rtl": "abc\u202edef tail",
        "zw": "a\u200bb\u200dc\u2060d",
        "ctl": "a\x00b\x07c\x1b[31mred\r\nline",
        "url": "javascript:alert(5)",
        "nested": nested,
        "mega": "z" * 1_000_000,
    }


FUNCTIONS["hostile"] = hostile

HOSTILE = GraphSpec(
    id="hostile<b>graph</b>",
    goal=Goal(description=XSS, success_criteria=[XSS, "q" * 400]),
    nodes=[
        NodeSpec(
            id="talk",
            kind="llm",
            description=XSS,
            output_keys=["said"],
            success_criteria=["Says something."],
        ),
        NodeSpec(id=ENTRY, kind="function", function="hostile", description=XSS),
        NodeSpec(
            id=GATE,
            kind="function",
            function="step",
            description=XSS + "d" * 500,
            input_keys=["html", "long", "big", "nested", "mega"],
        ),
    ],
    edges=[EdgeSpec(source="talk", target=ENTRY), EdgeSpec(source=ENTRY, target=GATE)],
    entry_node="talk",
    pause_nodes=[GATE],
)


def model() -> ScriptedProvider:
    turns: list[Any] = []
    judge: list[str] = []
    for _ in range(2):  # one run each
        turns += [reply("", tool_call("set_output", key="said", value=XSS)), reply(MODEL_TEXT)]
        judge.append(f'{{"verdict": "ACCEPT", "confidence": 0.9, "feedback": "{FEEDBACK}"}}')
    return ScriptedProvider(turns, judge=judge)


@asynccontextmanager
async def hostile_runs(path: Path) -> AsyncIterator[Served]:
    """A server with two runs of HOSTILE paused at its gate: MARKUP_RUN and SPOOF_RUN."""
    async with Runtime(path, provider=model(), functions=FUNCTIONS) as rt:
        app = create_app(rt, graphs=[HOSTILE], token=TOKEN)
        async with live_server(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as c:
            served = Served(url, rt, c)
            for run_id in (MARKUP_RUN, SPOOF_RUN):
                await rt.start(HOSTILE, run_id=run_id, input={"topic": XSS})
                await served.wait_status(quote(run_id, safe=""), "paused")
            yield served


def watch(page: Any) -> list[str]:
    """What the page reports that it should not: dialogs, script errors, console errors."""
    problems: list[str] = []

    async def dismiss(dialog: Any) -> None:
        problems.append(f"dialog: {dialog.message}")
        await dialog.dismiss()

    page.on("dialog", dismiss)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    return problems


async def fits(page: Any, where: str) -> None:
    """The page holds nothing that runs, and nothing sticks out of the window sideways."""
    injected = await page.evaluate(
        "() => document.querySelectorAll('img, iframe, object, embed, script:not([src])').length"
    )
    assert injected == 0, where
    width = await page.evaluate(
        "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert width[0] <= width[1], (where, width)


@pytest.mark.parametrize("width", [1400, 375])
async def test_hostile_content_stays_text_and_every_page_fits_the_window(
    tmp_path: Path, width: int
) -> None:
    need_browser()
    from playwright.async_api import expect

    async with hostile_runs(tmp_path / "runs.db") as s, browser_page() as page:
        await page.set_viewport_size({"width": width, "height": 900})
        problems = watch(page)
        await page.goto(f"{s.url}/#token={TOKEN}")
        await expect(page.locator("#runs tbody tr[data-run]")).to_have_count(2)
        await fits(page, "runs")

        await page.goto(f"{s.url}/runs/{quote(MARKUP_RUN, safe='')}")
        await expect(page.locator("#chain")).to_contain_text("verified")
        await expect(page.locator("h1")).to_have_text(f"Run {MARKUP_RUN}")
        await expect(page.locator("#timeline")).to_contain_text(XSS)
        await page.locator('#timeline tr[data-type="memory.written"]').last.click()
        await expect(page.locator("#state-memory")).to_contain_text("bottom")
        await fits(page, "run")
        # A node's name is cut to its box (the whole id is its tooltip), not drawn over
        # the next node.
        for node in await page.locator("svg.graph g.node").all():
            box = await node.locator("rect").evaluate("r => r.getBBox().width")
            label = await node.locator("text").first.evaluate("t => t.getBBox().width")
            assert label <= box, (await node.get_attribute("data-node"), label, box)
        entry = page.locator("svg.graph g.node").nth(1)
        await expect(entry.locator("title")).to_have_text(ENTRY)

        await page.goto(f"{s.url}/approvals")
        await expect(page.locator("#approvals .card")).to_have_count(2)
        await fits(page, "approvals")
        assert problems == []


async def rect_of(scope: Any, text: str) -> dict[str, float]:
    """Where the characters ``text`` (in one text node inside ``scope``) are drawn."""
    found: dict[str, float] | None = await scope.evaluate(
        """(root, text) => {
            const walk = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
            for (let node = walk.nextNode(); node; node = walk.nextNode()) {
                const at = node.data.indexOf(text);
                if (at < 0) continue;
                const range = document.createRange();
                range.setStart(node, at);
                range.setEnd(node, at + text.length);
                const r = range.getBoundingClientRect();
                return { left: r.left, right: r.right };
            }
            return null;
        }""",
        text,
    )
    assert found is not None, (scope, text)
    return found


async def test_hidden_characters_cannot_disguise_an_id_or_move_the_text_after_a_value(
    tmp_path: Path,
) -> None:
    need_browser()
    from playwright.async_api import expect

    async with hostile_runs(tmp_path / "runs.db") as s, browser_page() as page:
        await page.goto(f"{s.url}/")
        # "abc" RLO "gnp.exe" would read "abcexe.png": the override is shown, not obeyed.
        spoof = page.locator(f'#runs tr[data-run="{SPOOF_RUN}"] td').first
        await expect(spoof).to_contain_text("abc\u27e8U+202E\u27e9gnp.exe")
        # The gate's id reads as it is written, and "(hitl)" stays after it.
        row = page.locator("#runs tbody tr[data-run]").filter(has_text="onerror=alert(3)")
        waiting = row.locator("td").nth(5)
        await expect(waiting).to_contain_text("gate\u27e8U+202E\u27e9etag (hitl)")
        assert (await rect_of(waiting, "(hitl)"))["left"] >= (await rect_of(waiting, "etag"))[
            "right"
        ]

        # Model text holding an override: the token counts after it stay in place.
        await page.goto(f"{s.url}/runs/{quote(MARKUP_RUN, safe='')}")
        turn = page.locator('#timeline tr[data-type="llm.turn"]').last.locator("td").last
        await expect(turn).to_contain_text("txet")
        assert (await rect_of(turn, "tokens"))["left"] >= (await rect_of(turn, "txet"))["right"]
        # The paused card names the gate as written, and what follows it stays after it.
        actions = "#actions p.small"
        await expect(page.locator(actions)).to_contain_text("gate\u27e8U+202E\u27e9etag")


async def test_text_the_timeline_cuts_short_is_shown_whole_with_its_event(
    tmp_path: Path,
) -> None:
    need_browser()
    from playwright.async_api import expect

    async with hostile_runs(tmp_path / "runs.db") as s, browser_page() as page:
        await page.goto(f"{s.url}/runs/{quote(MARKUP_RUN, safe='')}")
        turn = page.locator('#timeline tr[data-type="llm.turn"]').last
        await expect(turn).to_contain_text("Model says")
        await expect(turn).not_to_contain_text("END-OF-TEXT")  # cut: a row is one line
        await turn.click()
        event = page.locator("#event-body")
        await expect(event).to_contain_text(MODEL_TEXT)
        # Integers past 2^53 keep every digit: in the timeline, the event and the state.
        big = page.locator('#timeline tr[data-type="memory.written"]', has_text="big =")
        await expect(big).to_contain_text(f"big = {BIG}")
        await big.click()
        await expect(event).to_contain_text(str(BIG))
        await expect(page.locator("#state-memory")).to_contain_text(f'"big": {BIG}')
        neg = page.locator('#timeline tr[data-type="memory.written"]', has_text="neg =")
        await expect(neg).to_contain_text(f"neg = {-BIG}")
        # The judge's feedback, one long word, wraps inside its card.
        feedback = page.locator("#verdicts .feedback")
        await expect(feedback).to_contain_text(FEEDBACK)
        card = await page.locator("#verdicts").bounding_box()
        shown = await feedback.bounding_box()
        assert card is not None and shown is not None
        assert shown["x"] + shown["width"] <= card["x"] + card["width"]
