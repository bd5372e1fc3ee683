"""Helpers of the calculator's browser tests: open the page, wait for Python's answers, read and fill the form.

Every helper reads what the user sees: the results element's ``data-estimate`` (``Estimate.to_dict()`` as
JSON, set only for a Python-computed result), its ``data-state``, and the events the page fires.
"""

from __future__ import annotations

import json
from contextlib import contextmanager

RESULTS = ".mme-results"
# Counts every answer the page rendered, so a test can wait for the one its own action caused.
EVENTS = """window.__mme = { events: [], searches: 0 };
document.addEventListener("estimate:done", () => window.__mme.events.push("done"), true);
document.addEventListener("estimate:error", () => window.__mme.events.push("error"), true);
document.addEventListener("estimate:failed", () => window.__mme.events.push("failed"), true);
document.addEventListener("search:done", () => window.__mme.searches++, true);"""


def events(page) -> int:
    return page.evaluate("window.__mme.events.length")


def wait(page, after: int = 0) -> str:
    """Wait for the next answer (done, error or failed) after ``after`` of them; its kind."""
    page.wait_for_function(f"() => window.__mme.events.length > {after}", timeout=90_000)
    return page.evaluate(f"window.__mme.events[{after}]")


def settle(page, after: int) -> str:
    """Wait until an answer after ``after`` of them is shown and nothing is pending or held back; the state.

    "Nothing": the calculator's ``quiet()`` (calculator.js): no answer on its way, no error held back while its field
    is typed in (shown 600 ms after the last keystroke), no request to Python in flight or about to be sent (the
    advice of the quick controls, the timeline), no address-bar update waiting. It replaced a fixed 700 ms pause
    after every settle (some 300 of them: minutes of the suite)."""
    # The calculator may be between two instances (Material re-renders the page on Back after a pushState):
    # not settled until the new one exists.
    page.wait_for_function(f"""() => {{ const el = document.querySelector('[data-mme-calculator]');
        const c = el && el.calculator;
        return Boolean(c) && window.__mme.events.length > {after} && c.quiet(); }}""", timeout=90_000)
    return page.get_attribute(RESULTS, "data-state")


def shown(page) -> dict:
    raw = page.get_attribute(RESULTS, "data-estimate")
    assert raw, "no estimate shown"
    return json.loads(raw)


def on_page_gpu(cfg, gpu: str | None = None) -> dict:
    """``cfg`` (a Config or plain data) as the calculator estimates it with ``gpu`` selected (the page's default GPU
    when None): the GPU names the architecture the figures are for (``training.gpu_arch``), as the CLI's ``--gpu``
    does (``estimator.formats.gpus.with_gpu_arch``)."""
    from estimator.formats.gpus import with_gpu_arch
    from estimator.web.state import default_gpu
    data = cfg.to_dict() if hasattr(cfg, "to_dict") else cfg
    return with_gpu_arch(data, gpu or default_gpu())


def numbers(est: dict) -> dict:
    """An estimate without its configuration as written (which may spell an equal configuration differently)."""
    return {k: v for k, v in est.items() if k != "config"}


def open_page(page, url: str) -> str:
    page.add_init_script(EVENTS)
    page.goto(url)
    return wait(page)


def field(path: str) -> str:
    """The CSS selector of a field of the full form."""
    return "#mme-" + path.replace(".", "\\.")


def quick(path: str) -> str:
    """The CSS selector of a quick control."""
    return "#mme-q-" + path.replace(".", "\\.")


def reveal(page, path: str) -> None:
    """Open the collapsed section of the full form that holds ``path`` (the form is built once Python has drawn
    its first estimate: wait for the field)."""
    page.wait_for_selector(field(path), state="attached")
    page.evaluate("(id) => { const d = document.getElementById(id).closest('details'); if (d) d.open = true; }",
                  "mme-" + path)


def fill(page, path: str, value: str) -> None:
    reveal(page, path)
    page.fill(field(path), value)


def calc(page, expr: str):
    """Evaluate ``expr`` with ``c`` bound to the page's calculator."""
    return page.evaluate(f"(() => {{ const c = document.querySelector('[data-mme-calculator]').calculator; "
                         f"return {expr}; }})()")


@contextmanager
def viewport_page(browser, viewport: dict):
    """A page of its own context at ``viewport``; the test fails on an uncaught error in the page."""
    context = browser.new_context(viewport=viewport)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield page
        assert not errors, errors
    finally:
        context.close()
