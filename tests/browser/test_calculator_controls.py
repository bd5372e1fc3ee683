"""Controls that cannot produce an invalid state (issue 29, item 2), at 1280 px and on a 390 px phone.

The cases of the issue, each with what Megatron-Core's rules (as the estimator applies them) say:

- Mixtral 8x7B's preset has EP 8 and no sequence parallelism; Megatron-Core requires sequence parallelism with tensor
  and expert parallelism together, so the quick TP 2 brings it, says so, and Undo takes both back. Before: TP 2 was
  refused until sequence parallelism was switched on in the full form.
- Qwen3-30B-A3B (ETP 1, PP 2) on 16 GPUs at TP 4: the expert grid ETP 1 x EP x PP 2 must divide 16, so the EP select
  offers 1, 2, 4, 8, and EP 8 is valid.
- GPUs 1000 on Llama 3 8B (CP 2, global batch 512, micro-batch 1): DP 500 does not divide 512. The note lands on the
  GPU count (not the global batch) with 1,024 (DP 512) and 512 (DP 256) GPUs, and "+" goes to 1,024 although the form
  was refused. Before: the note was on Global batch and the stepper did nothing.
- At Llama 3 8B's 8192-token context (max_position_embeddings 8192) the sequence "+" is disabled.
- Quick toggles for sequence parallelism and PEFT: the LoRA preset shows LoRA at rank 16.
- Beyond the GPU count (test_errors_on_the_field_changed_and_steppers_of_a_refused_form): global batch 130 on
  Llama 3 8B (micro-batch 1 x DP 4) is noted on Global batch with 128 or 132, and its "+" goes to 132 though the form
  is refused (before: inert); a sequence of 1,000,000 (past max_position_embeddings 8192) offers 8,192 (before:
  nothing); TP 2 typed in the full form on Mixtral is noted on TP with "keep 2: sequence parallelism on", which keeps
  TP 2 (before: the note sat on the sequence-parallelism switch).
"""

from __future__ import annotations

import pytest

from _calc import RESULTS, events, field, fill, open_page, quick, settle, shown, viewport_page

VIEWPORTS = [{"width": 1280, "height": 900}, {"width": 390, "height": 844}]
TP, EP, WORLD, SEQ = ("parallelism.tensor_model_parallel_size", "parallelism.expert_model_parallel_size",
                      "training.world_size", "training.seq_length")
GBS = "training.global_batch_size"


def _options(page, path):
    return page.eval_on_selector_all(f"{quick(path)} option", "os => os.map((o) => o.textContent)")


def _selected(page, path):
    return page.eval_on_selector(quick(path), "s => s.options[s.selectedIndex] && s.options[s.selectedIndex].textContent")


def _fixes(page, box: str) -> list[str]:
    """The labels of the "Try" buttons in an error box."""
    return page.eval_on_selector_all(f"{box} button.mme-fix", "bs => bs.map((b) => b.textContent)")


def _advised(page):
    """Wait until Python's advice for the state shown has arrived (the quick selects and steppers follow it)."""
    page.wait_for_function("() => { const c = document.querySelector('[data-mme-calculator]').calculator; "
                           "return c.adviceKey === JSON.stringify(c.state); }", timeout=60_000)


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=["desktop", "phone"])
def test_quick_controls_stay_valid(browser, site_url, viewport):
    with viewport_page(browser, viewport) as page:
        # Mixtral TP 1 -> 2: sequence parallelism comes along, said in an undoable note.
        assert open_page(page, f"{site_url}calculator/?preset=mixtral-8x7b") == "done"
        _advised(page)
        n = events(page)
        page.select_option(quick(TP), label="2")
        assert settle(page, n) == "done", page.inner_text(RESULTS)[:300]
        cfg = shown(page)["config"]
        assert cfg["parallelism"]["tensor_model_parallel_size"] == 2 and cfg["training"]["sequence_parallel"] is True
        note = page.inner_text(".mme-companion")
        assert "TP 2 also set Sequence parallel on" in note and "requires sequence_parallel" in note, note
        n = events(page)
        page.click(".mme-companion button.mme-undo")
        assert settle(page, n) == "done"
        cfg = shown(page)["config"]
        assert cfg["parallelism"].get("tensor_model_parallel_size", 1) == 1
        assert not cfg["training"].get("sequence_parallel")
        assert not page.is_visible(".mme-companion")

        # Qwen3-30B-A3B on 16 GPUs at TP 4: EP offers what divides the GPUs; EP 8 is valid.
        assert open_page(page, f"{site_url}calculator/?preset=qwen3-30b-a3b&training.world_size=16") == "done"
        _advised(page)
        assert _selected(page, TP) == "4"
        assert _options(page, EP) == ["1", "2", "4", "8"]
        n = events(page)
        page.select_option(quick(EP), label="8")
        assert settle(page, n) == "done", page.inner_text(RESULTS)[:300]
        assert shown(page)["config"]["parallelism"]["expert_model_parallel_size"] == 8

        # Llama 3 8B, GPUs 1000: the note is on the GPU count, with 1,024 or 512; "+" goes to 1,024.
        assert open_page(page, f"{site_url}calculator/?preset=llama-3-8b") == "done"
        _advised(page)
        assert page.is_disabled(f".mme-q[data-path='{SEQ}'] .mme-step[data-dir='up']")      # 8192 = the context
        assert not page.is_disabled(f".mme-q[data-path='{SEQ}'] .mme-step[data-dir='down']")
        n = events(page)
        page.fill(quick(WORLD), "1000")
        assert settle(page, n) == "error"
        err = page.inner_text(f"{quick(WORLD)}-err")
        assert "1,024 GPUs" in err and "512 GPUs" in err, err
        assert not page.is_visible(f"{quick('training.global_batch_size')}-err")
        _advised(page)
        n = events(page)
        page.click(f".mme-q[data-path='{WORLD}'] .mme-step[data-dir='up']")
        assert settle(page, n) == "done"
        assert shown(page)["config"]["training"]["world_size"] == 1024

        # PEFT and sequence parallelism as quick controls: the LoRA preset says LoRA, rank 16, SP off.
        assert open_page(page, f"{site_url}calculator/?preset=llama-3-70b-lora") == "done"
        _advised(page)
        assert _selected(page, "training.peft") == "LoRA"
        assert _selected(page, "training.peft_dim") == "16"
        assert _options(page, "training.sequence_parallel") == ["off", "on"]
        n = events(page)
        page.select_option(quick("training.sequence_parallel"), label="on")
        assert settle(page, n) == "done"
        assert shown(page)["config"]["training"]["sequence_parallel"] is True


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=["desktop", "phone"])
def test_errors_on_the_field_changed_and_steppers_of_a_refused_form(browser, site_url, viewport):
    with viewport_page(browser, viewport) as page:
        assert open_page(page, f"{site_url}calculator/?preset=llama-3-8b") == "done"
        _advised(page)
        n = events(page)
        page.fill(quick(GBS), "130")
        assert settle(page, n) == "error"
        assert _fixes(page, f"{quick(GBS)}-err") == ["128", "132"]
        _advised(page)
        n = events(page)
        page.click(f".mme-q[data-path='{GBS}'] .mme-step[data-dir='up']")
        assert settle(page, n) == "done"
        assert shown(page)["config"]["training"]["global_batch_size"] == 132
        n = events(page)
        page.fill(quick(SEQ), "1000000")
        assert settle(page, n) == "error"
        assert _fixes(page, f"{quick(SEQ)}-err") == ["8,192"]

        assert open_page(page, f"{site_url}calculator/?preset=mixtral-8x7b") == "done"
        n = events(page)
        fill(page, TP, "2")
        assert settle(page, n) == "error"
        err = page.inner_text(f"{field(TP)}-err")
        assert "requires sequence_parallel" in err, err
        assert _fixes(page, f"{field(TP)}-err")[0] == "keep 2: sequence parallelism on"
        assert not page.is_visible(f"{field('training.sequence_parallel')}-err")
        n = events(page)
        page.click(f"{field(TP)}-err button.mme-fix >> nth=0")
        assert settle(page, n) == "done", page.inner_text(RESULTS)[:300]
        cfg = shown(page)["config"]
        assert cfg["parallelism"]["tensor_model_parallel_size"] == 2 and cfg["training"]["sequence_parallel"] is True
