"""The SE-RL loop as a search: the cascade's promotion and budget on hand-made values, its
stage counts, bad input, and a tiny search run end to end, killed in its full stage and
resumed without training any finished stage again.

The end-to-end run designs rewards only, with a scripted designer that answers every
prompt with (a) the default reward with a local variable renamed (a functional duplicate
of the reference: not trained) and (b) the default with its PA scaled by 2 (trained once;
the second time it is an exact duplicate).
"""

from __future__ import annotations

import functools
import json
import math
import random
import re
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

from llm.backends.offline import parse_candidates
from llm.designs import library
from llm.parsing import program_text
from llm.prompts import DEFAULT_CODE
from serl_jax import train
from serl_jax.config import SEARCH_STAGES, ConfigError, SearchConfig, load_config
from serl_jax.loop import Candidate, RunStore, dispatch
from serl_jax.loop.cascade import (
    budget_left,
    designer_cost,
    promoted,
    short_full_agreement,
    stage_counts,
)
from serl_jax.loop.search import round_asks, seed_designs

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "configs" / "tiny.yaml")


# -- promotion, budget, counts -----------------------------------------------------------
def test_promotion_keeps_exactly_the_top_fraction():
    scores = {"a": -3.0, "b": -1.0, "c": -2.0, "d": float("nan"), "e": -1.5, "f": -9.0}
    # 5 finite scores: floor(0.5 * 5) = 2 go on, best first
    assert promoted(scores, 0.5) == ["b", "e"]
    assert promoted(scores, 0.6) == ["b", "e", "c"]
    # never fewer than one
    assert promoted(scores, 0.1) == ["b"]
    # ties: the earlier candidate first
    assert promoted({"x": 1.0, "y": 2.0, "z": 2.0}, 0.34) == ["y"]
    assert promoted({"n": float("nan")}, 0.5) == []
    for bad in (0.0, 1.0, -0.2, 1.5):
        with pytest.raises(ValueError, match="fraction"):
            promoted(scores, bad)


def test_the_budget_ends_on_candidates_or_minutes():
    search = SearchConfig(budget_candidates=10, budget_minutes=5.0, round_candidates=4)
    assert budget_left(search, 0, 0.0) == (4, None)
    assert budget_left(search, 8, 100.0) == (2, None)  # the last, shorter round
    assert budget_left(search, 10, 100.0) == (0, "budget_candidates")
    assert budget_left(search, 3, 300.0) == (0, "budget_minutes")
    assert budget_left(SearchConfig(budget_candidates=10), 3, 1e9) == (7, None)  # no time limit


def _cand(cid: str, status: str, stage: str | None = None, **stages) -> Candidate:
    validation = None if stage is None else {"ok": False, "stage": stage, "reason": "x"}
    return Candidate(cid, 1, 0, "reward", status=status, validation=validation, stages=stages)


def test_stage_counts_by_hand():
    cands = [
        _cand("parse", "rejected", "parse"),
        _cand("static", "rejected", "static"),
        _cand("runtime", "rejected", "runtime"),
        _cand("waiting", "validated"),
        _cand("short-crash", "crashed", short={"score": None, "seconds": 2.0}),
        _cand("short", "screened", short={"score": -3.0, "seconds": 2.0}),
        _cand("copy", "screened", short={"score": -3.0, "duplicate_of": "short"}),
        _cand(
            "full",
            "evaluated",
            short={"score": -2.0, "seconds": 2.0},
            full={"score": -1.0, "seconds": 9.0},
        ),  # fmt: skip
    ]
    seconds = {"validation": 60.0, "short": 360.0, "full": 900.0}
    counts = stage_counts(cands, elapsed_s=1800.0, stage_seconds=seconds)
    assert list(counts) == list(SEARCH_STAGES)
    assert counts["validation"] == {
        "candidates": 8, "passed": 6, "trained": None, "candidates_per_hour": 16.0,
        "seconds": 60.0, "candidates_per_stage_hour": 480.0,
    }  # fmt: skip
    assert counts["trial"] == {
        "candidates": 6, "passed": 5, "trained": None, "candidates_per_hour": 12.0,
        "seconds": 60.0, "candidates_per_stage_hour": 360.0,
    }  # fmt: skip
    assert counts["short"] == {
        "candidates": 4, "passed": 3, "trained": 3, "candidates_per_hour": 8.0,
        "seconds": 360.0, "candidates_per_stage_hour": 40.0,
    }  # fmt: skip
    assert counts["full"] == {
        "candidates": 1, "passed": 1, "trained": 1, "candidates_per_hour": 2.0,
        "seconds": 900.0, "candidates_per_stage_hour": 4.0,
    }  # fmt: skip
    no_time = stage_counts(cands, 0.0)["full"]
    assert no_time["candidates_per_hour"] is None and no_time["candidates_per_stage_hour"] is None


def test_designer_cost_by_hand():
    """Three valid programs answer prompts (one of them crashed in training), a rejected
    one and a library seed (no prompt) do not count: 120 s / 3 valid = 40 s each."""
    cands = [
        _cand("seed", "screened"),
        _cand("ok", "evaluated"),
        _cand("short", "screened"),
        _cand("crash", "crashed"),
        _cand("bad", "rejected", "static"),
    ]
    for i, cand in enumerate(cands[1:]):
        cand.prompt_id = i
    usage = {"calls": 2, "completions": 4, "seconds": 120.0, "tokens": 600}
    assert designer_cost(cands, usage) == {
        **usage, "tokens_per_s": 5.0, "valid": 3, "seconds_per_valid": 40.0,
    }  # fmt: skip
    untimed = designer_cost(cands, {**usage, "tokens": None})
    assert untimed["tokens_per_s"] is None and untimed["seconds_per_valid"] == 40.0
    before = designer_cost(cands, None)  # a run recorded before calls were counted
    assert before["calls"] is None and before["seconds_per_valid"] is None
    assert designer_cost(cands[:1], usage)["seconds_per_valid"] is None  # none valid


def test_short_and_full_agreement_by_hand():
    def both(cid, short, full, **extra):
        return _cand(cid, "evaluated", short={"score": short, **extra}, full={"score": full})

    cands = [
        both("a", -3.0, -2.0),
        both("b", -1.0, -1.5),
        both("c", -2.0, -1.0),
        both("copy", -2.0, -1.0, duplicate_of="c"),  # not a pair of its own
        _cand("short-only", "screened", short={"score": -0.5}),
    ]
    # ranks: short (1, 3, 2), full (1, 2, 3): rho = 1 - 6 * (0 + 1 + 1) / (3 * 8) = 0.5
    assert short_full_agreement(cands) == {"n": 3, "spearman": pytest.approx(0.5)}
    assert short_full_agreement(cands[:2]) is None


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("search.budget_minutes=0", "search.budget_minutes"),
        ("search.budget_minutes=-5", "search.budget_minutes"),
        ("search.budget_candidates=0", "search.budget_candidates"),
        ("search.stages=[validation,trial,medium,full]", "search.stages"),
        ("search.stages=[validation,trial,full,short]", "search.stages"),
        ("search.stages=[validation,trial]", "search.stages"),
        ("search.promote=1.0", "search.promote"),
        ("search.promote=0", "search.promote"),
        ("search.short_fraction=1.5", "search.short_fraction"),
        ("search.prompt_mix=[1,0,0]", "search.prompt_mix"),
    ],
)
def test_bad_search_settings_are_one_line_errors_naming_the_key(override, key):
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    assert str(err.value).startswith(key) and "\n" not in str(err.value)


def test_bad_budget_on_the_command_line(tmp_path, capsys):
    assert train.main(["--budget-minutes", "0", "--out", str(tmp_path), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: search.budget_minutes: must be > 0") and "\n" not in err
    assert not list(tmp_path.iterdir())  # no run folder
    assert train.main(["--budget-candidates", "3", "--llm", "none", "--quiet"]) == 2
    assert "search.enabled" in capsys.readouterr().err


def test_seed_designs_are_the_named_library_programs_and_a_bad_name_makes_no_run_folder(
    tmp_path, capsys
):
    rewards = [d.name for d in library("reward")]
    assert [d.name for d in seed_designs(["reward"], [])] == rewards
    picked = seed_designs(["reward", "network"], ["split_encoder", "clipped_pa"])
    assert [(d.kind, d.name) for d in picked] == [
        ("reward", "clipped_pa"),
        ("network", "split_encoder"),
    ]  # library order, not the names' order
    with pytest.raises(ValueError, match=r"^search.library: unknown program 'split_encoder'"):
        seed_designs(["reward"], ["clipped_pa", "split_encoder"])  # network not designed
    argv = ["--budget-candidates", "3", "--llm", "offline", "--out", str(tmp_path), "--quiet"]
    assert train.main([*argv, "search.library=[clipped_pa,no_such_program]"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: search.library: unknown program 'no_such_program'")
    assert "\n" not in err and not list(tmp_path.iterdir())


# -- a round's prompts -------------------------------------------------------------------
def test_every_module_visits_every_island():
    """Two modules on four islands, 16 candidates: each (module, island) pair twice; the
    old ``i % islands`` gave the reward only islands 0 and 2, the network 1 and 3."""
    drawn = []

    def draw(island, module):
        drawn.append((island, module))
        return "better", [], f"{module} {island} #{len(drawn)}"

    asks = round_asks(16, ["reward", "network"], 4, draw, set())
    pairs = [(module, island) for module, island, *_ in asks]
    assert pairs[:6] == [
        ("reward", 0), ("network", 0), ("reward", 1), ("network", 1), ("reward", 2),
        ("network", 2),
    ]  # fmt: skip
    assert Counter(pairs) == {(m, i): 2 for m in ("reward", "network") for i in range(4)}
    assert len(drawn) == 16  # every text new: no draw again
    # one module: candidate i on island i % islands, as before
    assert [i for _, i, *_ in round_asks(5, ["reward"], 2, draw, set())] == [0, 1, 0, 1, 0]


def test_a_prompt_asked_before_is_drawn_again():
    """Scripted draws: a text asked in an earlier round, then one asked earlier in this
    round, are drawn again; a candidate whose every draw repeats keeps its last draw."""
    queue = iter(["old", "a", "a", "b", "c", "c", "c", "c"])
    calls = []

    def draw(island, module):
        text = next(queue)
        calls.append(text)
        return ("form" if text == "b" else "better"), [], text

    asked = {"old"}
    asks = round_asks(3, ["reward"], 1, draw, asked, redraws=2)
    assert [(kind, text) for *_, kind, _, text in asks] == [
        ("better", "a"), ("form", "b"), ("better", "c"),
    ]  # fmt: skip
    assert calls == ["old", "a", "a", "b", "c"]
    asks = round_asks(1, ["reward"], 1, draw, asked, redraws=2)
    assert [text for *_, text in asks] == ["c"]  # c, c, c: all asked, the last kept
    assert len(calls) == 8 and asked == {"old", "a", "b", "c"}


# -- a search end to end -------------------------------------------------------------------
RENAMED = DEFAULT_CODE["reward"].replace("positive", "is_positive")
SCALED = DEFAULT_CODE["reward"].replace("* 1e4", "* 2e4")
HELPER = DEFAULT_CODE["reward"][
    DEFAULT_CODE["reward"].index("def safe_div") : DEFAULT_CODE["reward"].index("def reward")
]
# as small models write it: the shown programs' helper used without its definition
SCALED_WITHOUT_HELPER = SCALED.replace(HELPER, "")


def _fence(code: str) -> str:
    return f"A new program:\n```python\n{code}```\n"


# Round 1's library seeds: pa_penalty computes the default reward's terms (a functional
# duplicate of the reference), the other two are trained.
SEEDS = ("pa_penalty", "clipped_pa", "implementation_shortfall")


def _scripted_search(tmp: Path, completions: dict[str, list[str]], *options: str) -> list[str]:
    """``train`` arguments of a tiny reward-only search, seeded with :data:`SEEDS`, whose
    designer cycles through ``completions`` (a scripted backend's keyed queues), with
    ``options`` added."""
    script = tmp / "script.json"
    script.write_text(json.dumps({"completions": completions, "cycle": True}))
    return [
        "--config", TINY, "--out", str(tmp / "runs"), "--quiet", "--data", "sample:us_1min",
        "--llm", f"scripted:{script}", "--modules", "reward", "search.islands=2",
        f"search.library=[{','.join(SEEDS)}]", "loop.candidate_batch=8",
        "loop.train_budget_s=0", "eval.n_bootstrap=100", *options,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def search_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("search")
    completions = {"LLM4Reward": [_fence(RENAMED), _fence(SCALED_WITHOUT_HELPER)]}
    args = _scripted_search(
        tmp, completions, "--budget-candidates", "4", "search.round_candidates=2",
        "search.promote=0.5", "search.reset_every=1",
    )  # fmt: skip
    jobs: list[list[str]] = []
    real = dispatch._evaluate_job

    def counting(job):
        dirs = [Path(t[4]) for t in job]
        names = [f"{d.parent.name}/short" if d.name == "short" else f"{d.name}/full" for d in dirs]
        jobs.append(names)
        # killed at the first full-stage job of round 1 (its short stage is done)
        if any(n.startswith("j1-") and n.endswith("/full") for n in names):
            if not any(j for j in jobs[:-1] if j[0].startswith("j1-") and j[0].endswith("full")):
                raise KeyboardInterrupt
        return real(job)

    mp = pytest.MonkeyPatch()
    mp.setattr(dispatch, "_evaluate_job", counting)
    try:
        with pytest.raises(KeyboardInterrupt):
            train.main(args)
        (run_dir,) = list((tmp / "runs").iterdir())
        killed = RunStore.open(run_dir)
        before = {c.id: (c.status, dict(c.stages)) for c in killed.candidates()}
        killed.close()
        assert train.main(["--resume", str(run_dir), "--quiet"]) == 0
    finally:
        mp.undo()
    return run_dir, jobs, before


def test_a_killed_search_resumes_without_training_a_finished_stage_again(search_run):
    run_dir, jobs, before = search_run
    store = RunStore.open(run_dir)
    # round 1: the library seeds search.library names, none other
    assert [c.instruction for c in store.candidates(1)] == [f"library program {n}" for n in SEEDS]
    round1 = [cid for cid in before if cid.startswith("j1-")]
    assert len(round1) == len(SEEDS)
    # killed in round 1's full stage: every seed had its short stage, none its full one
    assert all(before[c][0] == "screened" and "full" not in before[c][1] for c in round1)
    trained = [name for job in jobs for name in job]
    killed_job = next(job for job in jobs if job[0].startswith("j1-") and job[0].endswith("full"))
    once = trained.copy()
    for name in killed_job:  # the killed job trained nothing
        once.remove(name)
    assert Counter(once).most_common(1)[0][1] == 1
    for c in store.candidates():
        for stage, entry in c.stages.items():
            if entry.get("score") is not None and not entry.get("duplicate_of"):
                assert f"{c.id}/{stage}" in once


def test_the_best_short_stage_share_goes_on_to_full_training(search_run):
    store = RunStore.open(search_run[0])
    round1 = store.candidates(1)
    # the library's pa_penalty computes the default reward's terms: it copies the
    # reference's short score and does not compete
    copies = [c for c in round1 if c.duplicate_of]
    assert [c.duplicate_of for c in copies] == ["j0-default"]
    shorts = {c.id: c.stages["short"]["score"] for c in round1 if not c.duplicate_of}
    full = {c.id for c in round1 if "full" in c.stages}
    assert full == set(promoted(shorts, 0.5))
    assert len(full) == math.floor(0.5 * len(shorts))
    assert all(c.status == "evaluated" for c in round1 if c.id in full)
    assert all(c.status == "screened" for c in round1 if c.id not in full)


def test_duplicates_reuse_the_first_score(search_run):
    store = RunStore.open(search_run[0])
    designed = [c for c in store.candidates() if c.iteration >= 2]
    assert [c.iteration for c in designed] == [2, 2, 3, 3]  # the budget: 4 candidates
    renamed = [c for c in designed if c.code.strip() == RENAMED.strip()]
    scaled = [c for c in designed if program_text(c.code) == program_text(SCALED)]
    assert len(renamed) == 2 and len(scaled) == 2
    # the repair pass gave the scaled program the helper its prompt's programs define
    assert all(c.repairs == ["added safe_div, defined in a program the prompt showed"]
               for c in scaled)  # fmt: skip
    assert all(c.validation["ok"] for c in scaled)
    reference = store.candidates(0)[0]
    for c in renamed:  # the same outputs as the reference: its short score, not trained
        assert c.duplicate_of == reference.id
        assert c.stages["short"] == {
            "score": reference.stages["short"]["score"],
            "duplicate_of": reference.id,
        }
    first, second = scaled
    assert first.duplicate_of is None and first.stages["short"]["seconds"] is not None
    assert second.duplicate_of == first.id
    assert second.stages["short"]["score"] == first.stages["short"]["score"]


def test_prompts_show_the_islands_programs_in_score_order(search_run):
    store = RunStore.open(search_run[0])
    by_id = {c.id: c for c in store.candidates()}
    design = [p for p in store.prompts() if p["iteration"] >= 2]
    assert design
    for row in design:
        shown = parse_candidates(row["prompt"])
        assert shown
        scores = [s.score for s in shown]
        assert scores == sorted(scores)
        for s in shown:
            # each shot is a scored program of the run, shown with its short-stage score
            assert math.isclose(s.score, by_id[s.id].stages["short"]["score"], abs_tol=0.006)
        kind = re.search(r"^SEARCH: (\w+)$", row["prompt"], re.M).group(1)
        cand = next(c for c in store.candidates(row["iteration"]) if c.prompt_id == row["id"])
        assert cand.prompt_kind == kind and cand.island in (0, 1)


def test_report_counts_the_stages(search_run):
    run_dir = search_run[0]
    report = json.loads((run_dir / "report.json").read_text())
    assert report["stopped"] == "budget_candidates"
    stages = report["stages"]
    assert list(stages) == list(SEARCH_STAGES)
    store = RunStore.open(run_dir)
    cands = store.candidates()
    assert stages["validation"]["candidates"] == len(cands)
    assert stages["short"]["candidates"] == sum("short" in c.stages for c in cands)
    # not trained: pa_penalty (= the default), 2 renamed defaults, 1 exact copy
    assert stages["short"]["trained"] == stages["short"]["candidates"] - 4
    assert stages["full"]["candidates"] == sum("full" in c.stages for c in cands)
    assert all(e["candidates_per_hour"] > 0 for e in stages.values())
    assert all(e["seconds"] > 0 and e["candidates_per_stage_hour"] > 0 for e in stages.values())
    assert "Cascade: validation" in (run_dir / "report.md").read_text()
    # two rounds of two prompts (reward only), one designer call each, all valid
    designer = report["designer"]
    assert (designer["calls"], designer["completions"], designer["valid"]) == (2, 4, 4)
    assert designer["seconds_per_valid"] == pytest.approx(designer["seconds"] / 4)
    assert designer["tokens"] is None  # the scripted backend counts none
    assert report["designed_valid"] == 4
    pairs = [c for c in cands if "full" in c.stages and not c.duplicate_of]
    assert report["short_vs_full"]["n"] == len(pairs)


def test_a_round_asks_for_every_modules_programs_in_one_call(tmp_path):
    """A round's prompts, a reward's and a network's, go to the designer in one call."""
    completions = {
        "LLM4Reward": [_fence(SCALED)],
        "LLM4Agent": [_fence(DEFAULT_CODE["network"])],
    }
    args = _scripted_search(
        tmp_path, completions, "--budget-candidates", "2", "search.round_candidates=2",
        "search.stages=[validation,trial,short]", "loop.repair_attempts=0",
        "--modules", "reward,network",
    )  # fmt: skip
    assert train.main(args) == 0
    (run_dir,) = list((tmp_path / "runs").iterdir())
    store = RunStore.open(run_dir)
    assert [row["module"] for row in store.prompts(2)] == ["reward", "network"]
    designer = json.loads((run_dir / "report.json").read_text())["designer"]
    assert (designer["calls"], designer["completions"]) == (1, 2)


def test_repeats_go_back_to_the_designer_with_what_they_repeat(tmp_path):
    """search.retry_repeats: a valid program that repeats one (here the default reward
    with a variable renamed) goes back in the self-debugging round with
    ``repeat_prompt``; a new program (the default with its PA scaled) does not; the
    repeat keeps the first program's score and the answer is a retry like any other."""
    from llm.prompts import REPEATED_HEADING
    from serl_jax.loop.novelty import is_copy

    answer = DEFAULT_CODE["reward"].replace("* 1e4", "* 3e4")
    completions = {
        REPEATED_HEADING: [_fence(answer)],
        "LLM4Reward": [_fence(RENAMED), _fence(SCALED)],
    }
    args = _scripted_search(
        tmp_path, completions, "--budget-candidates", "2", "search.round_candidates=2",
        "search.stages=[validation,trial,short]", "search.retry_repeats=true",
        "loop.repair_attempts=1",
    )  # fmt: skip
    assert train.main(args) == 0
    (run_dir,) = list((tmp_path / "runs").iterdir())
    store = RunStore.open(run_dir)
    renamed, scaled, retry = store.candidates(2)
    assert (renamed.code, program_text(scaled.code)) == (RENAMED, program_text(SCALED))
    assert renamed.duplicate_of == "j0-default" and scaled.duplicate_of is None
    assert (retry.retry_of, retry.attempt, retry.code) == (renamed.id, 1, answer)
    # no full stage: the short stage is final, and the report tested its best checkpoint
    assert retry.status == "evaluated" and retry.duplicate_of is None
    prompts = {row["id"]: row["prompt"] for row in store.prompts(2)}
    asked, sent = prompts[renamed.prompt_id], prompts[retry.prompt_id]
    assert sent.startswith(asked.rstrip() + f"\n\n{REPEATED_HEADING}\n```python\n{RENAMED}")
    said = (
        "It is a program shown above with only its names changed."
        if is_copy(RENAMED, asked)
        else "It computes the same outputs as candidate j0-default"
    )
    assert said in sent
    report = json.loads((run_dir / "report.json").read_text())
    assert report["self_debugging"] == {"1": {"sent": 1, "repeats": 1, "passed": 1}}
    assert (report["designed_valid"], report["duplicate_rate"]) == (3, pytest.approx(1 / 3))
    md = (run_dir / "report.md").read_text()
    assert "round 1: 1 sent back (1 repeating a program), 1 passed validation" in md


def test_hints_name_a_change_and_keep_the_draws(tmp_path):
    """search.hints adds one "Make this change to candidate ..." line to a round's prompts
    and changes nothing else: the same kinds, islands and programs are drawn as without
    it. The change is one the novelty probe can see."""
    completions = {"LLM4Reward": [_fence(SCALED)]}
    texts = {}
    for hints in ("false", "true"):
        (tmp_path / hints).mkdir()
        args = _scripted_search(
            tmp_path / hints, completions, "--budget-candidates", "2",
            "search.round_candidates=2", "search.stages=[validation,trial,short]",
            "loop.repair_attempts=0", f"search.hints={hints}",
        )  # fmt: skip
        assert train.main(args) == 0
        (run_dir,) = list((tmp_path / hints / "runs").iterdir())
        texts[hints] = [row["prompt"] for row in RunStore.open(run_dir).prompts(2)]
    plain, hinted = texts["false"], texts["true"]
    assert len(plain) == len(hinted) == 2
    for a, b in zip(plain, hinted, strict=True):
        lines = b.splitlines(keepends=True)
        made = [line for line in lines if line.startswith("Make this change to candidate ")]
        assert len(made) == 1 and "Make this change" not in a
        # the default reward's terminal term is zero on the probe, pace one value there
        assert "terminal" not in made[0] and "pace" not in made[0]
        assert "".join(line for line in lines if line not in made) == a


def test_hints_are_drawn_knowing_the_changes_asked_and_the_values_tried(tmp_path, monkeypatch):
    """Over two designed rounds, every hint draw is told exactly the changes named
    before (earlier rounds and this one) to a program with the same canonical code, and
    the constants' values of the programs valid before its round: replayed here from the
    draws themselves and the finished store."""
    from llm.prompts.hints import values_tried
    from serl_jax.loop import search as search_module
    from serl_jax.loop.novelty import VALID, canonical_program

    calls, rounds = [], []
    real_draw, real_design = search_module.draw_hint, search_module.SERLSearch._design

    def recording(kind, module, shots, rng, **kw):
        hint = real_draw(kind, module, shots, rng, **kw)
        calls.append((rounds[-1], shots[-1], set(kw["asked"]), kw["tried"], hint))
        return hint

    def design(self, j):
        rounds.append(j)
        return real_design(self, j)

    monkeypatch.setattr(search_module, "draw_hint", recording)
    monkeypatch.setattr(search_module.SERLSearch, "_design", design)
    completions = {"LLM4Reward": [_fence(SCALED), _fence(RENAMED)]}
    args = _scripted_search(
        tmp_path, completions, "--budget-candidates", "4", "search.round_candidates=2",
        "search.stages=[validation,trial,short]", "loop.repair_attempts=0",
    )  # fmt: skip
    assert train.main(args) == 0
    (run_dir,) = list((tmp_path / "runs").iterdir())
    cands = RunStore.open(run_dir).candidates()
    assert rounds == [2, 3] and len(calls) >= 4
    named: dict[str, set[str]] = {}
    for j, best, asked, tried, hint in calls:
        key = canonical_program(best)
        assert asked == named.get(key, set())
        valid = [c.reward_code for c in cands if c.iteration < j and c.status in VALID]
        assert tried == values_tried(valid)
        if hint is not None:
            named.setdefault(key, set()).add(hint)
    assert any(asked for _, _, asked, _, _ in calls)  # some program was changed twice


NETWORK_WITHOUT_CONSTANTS = """\
import flax.linen as nn


class Network(nn.Module):
    action_dim: int

    @nn.compact
    def __call__(self, obs):
        x = nn.tanh(nn.Dense(64)(obs))
        return nn.Dense(self.action_dim)(x), nn.Dense(1)(x)[..., 0]
"""


def test_a_crossover_pairs_programs_that_differ():
    """A crossover shows the island's program and another island's program unlike it
    (canonically): with the default network under two rewards on islands 0 and 1, and a
    wider network on island 2, every crossover from island 0 draws island 2's; with only
    twins elsewhere it falls back to the island's own programs."""
    from serl_jax.loop.islands import Program, ProgramDatabase
    from serl_jax.loop.search import SERLSearch

    search = SimpleNamespace(search=SimpleNamespace(shots=2))
    wide = DEFAULT_CODE["network"].replace("64", "256")
    assert wide != DEFAULT_CODE["network"]
    db = ProgramDatabase(num_islands=3, capacity=4)
    db.add(0, Program("a", "network", DEFAULT_CODE["network"], 1.0))
    db.add(1, Program("b", "network", DEFAULT_CODE["network"], 2.0))
    db.add(2, Program("c", "network", wide, 0.5))
    rng = random.Random(0)
    for _ in range(20):
        shots = SERLSearch._shots(search, db, 0, "network", "crossover", rng)
        assert [p.candidate_id for p in shots] == ["c", "a"]  # ascending score
    twins = ProgramDatabase(num_islands=2, capacity=4)
    twins.add(0, Program("a", "network", DEFAULT_CODE["network"], 1.0))
    twins.add(1, Program("b", "network", DEFAULT_CODE["network"], 2.0))
    shots = SERLSearch._shots(search, twins, 0, "network", "crossover", rng)
    assert [p.candidate_id for p in shots] == ["a"]


def test_a_parameters_prompt_without_a_visible_constant_asks_for_a_form():
    """With hints, ``parameters`` on a program without a constant (a network with no
    field default or module constant) becomes ``form``, with a change of form named;
    without hints nothing changes."""
    from serl_jax.loop.islands import Program
    from serl_jax.loop.search import SERLSearch

    shots = [Program("n", "network", NETWORK_WITHOUT_CONSTANTS, 1.0)]
    search = SimpleNamespace(search=SimpleNamespace(hints=True))
    search._hint = lambda *args: SERLSearch._hint(search, *args)
    kind, hint = SERLSearch._kind_and_hint(search, "parameters", "network", shots, random.Random(1))
    assert kind == "form" and hint is not None and "Change `" not in hint
    with_constant = [Program("d", "network", DEFAULT_CODE["network"], 1.0)]
    kind, hint = SERLSearch._kind_and_hint(
        search, "parameters", "network", with_constant, random.Random(1)
    )
    assert kind == "parameters" and hint.startswith("Change `")
    search.search.hints = False
    assert SERLSearch._kind_and_hint(search, "parameters", "network", shots, None) == (
        "parameters",
        None,
    )


def test_a_crossover_hint_leaves_out_the_first_programs_inert_terms():
    """With hints, a reward crossover names a part of the first shown program to carry
    into the best: its live term 'carry', never 'flat', which is zero on the novelty
    probe (so carrying it would make a functional duplicate)."""
    from serl_jax.loop.islands import Program
    from serl_jax.loop.novelty import probe_outputs
    from serl_jax.loop.search import SERLSearch

    donor = (
        "import jax.numpy as jnp\n\n\n"
        "def reward(prev_state, action, next_state, params):\n"
        "    held = next_state.inventory / jnp.maximum(next_state.quantity, 1.0)\n"
        "    return {'carry': -held, 'flat': 0.0 * held}\n"
    )
    shots = [
        Program("d", "reward", donor, -9.0),
        Program("b", "reward", DEFAULT_CODE["reward"], 1.0),
    ]
    assert not probe_outputs(donor, "reward")["flat"].any()
    search = SimpleNamespace(search=SimpleNamespace(hints=True))
    search._probe = functools.cache(probe_outputs)  # as SERLSearch._probe: once per code
    search._hint = lambda *args: SERLSearch._hint(search, *args)
    rng = random.Random(2)
    hints = [
        SERLSearch._kind_and_hint(search, "crossover", "reward", shots, rng) for _ in range(40)
    ]
    assert {kind for kind, _ in hints} == {"crossover"}
    assert any("'carry'" in hint for _, hint in hints)
    assert not any("'flat'" in hint for _, hint in hints)


def test_a_dropped_term_that_returns_a_program_of_the_run_is_not_named():
    """A reward with a term 'extra' added to a program the run has: dropping 'extra'
    would return that program, so no form change drops it; without the run's program
    known, one does."""
    from serl_jax.loop.islands import Program
    from serl_jax.loop.novelty import probe_outputs
    from serl_jax.loop.search import SERLSearch

    base = (
        "def reward(prev_state, action, next_state, params):\n"
        "    held = next_state.inventory * 1e-3\n"
        "    return {'held': held, 'twice': 2.0 * held + next_state.time}\n"
    )
    more = base.replace("return {", "return {'extra': held * held, ")
    shots = [Program("m", "reward", more, 1.0)]
    # probes cached once per code, as SERLSearch._probe does
    search = SimpleNamespace(
        search=SimpleNamespace(hints=True), _probe=functools.cache(probe_outputs)
    )
    search._hint = lambda *args: SERLSearch._hint(search, *args)
    known = [probe_outputs(base, "reward")]

    def drawn(known):
        rng = random.Random(3)
        return {
            SERLSearch._kind_and_hint(search, "form", "reward", shots, rng, known=known)[1]
            for _ in range(200)
        }

    drop = "Drop the term 'extra': delete `'extra': held * held` from the returned dict."
    assert drop not in drawn(known)
    assert "Drop the term 'held': delete `'held': held` from the returned dict." in drawn(known)
    assert drop in drawn([])


def test_a_crossover_with_nothing_to_carry_asks_for_a_form():
    """With hints, a crossover of two networks alike in their activation and layer
    normalization (only widths differ) names no part to carry: it becomes ``form`` of the
    best, with a change of form named."""
    from serl_jax.loop.islands import Program
    from serl_jax.loop.search import SERLSearch

    wide = DEFAULT_CODE["network"].replace("64", "256")
    shots = [
        Program("w", "network", wide, 0.5),
        Program("d", "network", DEFAULT_CODE["network"], 1.0),
    ]
    search = SimpleNamespace(search=SimpleNamespace(hints=True))
    search._hint = lambda *args: SERLSearch._hint(search, *args)
    for seed in range(10):
        kind, hint = SERLSearch._kind_and_hint(
            search, "crossover", "network", shots, random.Random(seed)
        )
        assert kind == "form" and hint is not None and "first program above" not in hint
        assert not hint.startswith("Change `")
