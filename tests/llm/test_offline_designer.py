"""The offline designer (llm/backends/offline.py) and its program library (llm/designs).

Every library program goes through the full two-stage validation once per session (each
runtime stage starts a child process, ~3-6 s; two run at a time in :func:`library_results`);
sampled and mutated completions are checked with the static stage, and a few mutated
networks are loaded and run here.
"""

from __future__ import annotations

import ast
import os
import random
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from llm.backends import BackendError, make_backend
from llm.backends.offline import (
    MESSAGE_PART_RANGE,
    MESSAGE_RANGE,
    OfflineDesigner,
    _op_anchor,
    parse_candidates,
)
from llm.designs import library, reward_terms
from llm.parsing import extract_code
from llm.validate import Limits, check_static, load_validated, validate
from serl_jax.components.communication import MAX_MESSAGE_SIZE
from serl_jax.envs import EnvParams, ExecutionEnv
from serl_jax.envs.execution import NUM_PRIVATE_FEATURES
from serl_jax.rl.networks import declared_prior_anchor

PROGRAMS = Path(__file__).parent / "programs"
# Every program validated here must pass, so with the loop's own limits: a network's
# validation takes 8.4 s of CPU on an idle 2-core EPYC and more beside a loaded test run
# (a 10 s limit refused the default network in CI, 2026-12-01).
TEST_LIMITS = Limits()
LIBRARY = [(d.kind, d) for kind in ("reward", "network") for d in library(kind)]
MODULE = {
    "reward": "LLM4Reward",
    "network": "LLM4Agent",
    "imagination": "LLM4Imagine",
    "profiling": "LLM4Profiling",
    "communication": "LLM4Communication",
}
DESCRIPTION = re.compile(r"^(Mutated|Library|Kept) ")


def design_prompt(kind: str, candidates=(), default: str = "") -> str:
    """A prompt in the builder's layout: module line, default block, candidates."""
    parts = ["You design components for optimal execution.", f"MODULE: {MODULE[kind]}"]
    if default:
        parts.append(f"Current default implementation:\n```python\n{default}```")
    if candidates:
        parts.append("## Past candidates (ascending PA, best last)")
        for cid, pa, code in candidates:
            parts.append(
                f"### Candidate {cid} | PA {pa:.2f} bps | WR 0.40 | AFI 0.000\n"
                f"Instruction: improve it\n```python\n{code}```"
            )
    parts.append("## Instructions\nImprove on the best candidates.")
    return "\n\n".join(parts) + "\n"


def code_of(completion: str) -> str:
    return extract_code(completion)


def module_constants(code: str) -> dict[str, float]:
    out = {}
    for stmt in ast.parse(code).body:
        if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name):
            if isinstance(stmt.value, ast.Constant):
                out[stmt.targets[0].id] = stmt.value.value
    return out


def class_fields(code: str, name: str = "Communication") -> dict[str, int | float]:
    """The literal field defaults of the last top-level ``class <name>``."""
    cls = [n for n in ast.parse(code).body if getattr(n, "name", "") == name][-1]
    return {
        stmt.target.id: stmt.value.value
        for stmt in cls.body
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.value, ast.Constant)
    }


def reward_keys(code: str) -> list[str]:
    func = [n for n in ast.parse(code).body if getattr(n, "name", "") == "reward"][-1]
    ret = [n for n in ast.walk(func) if isinstance(n, ast.Return)][-1]
    assert isinstance(ret.value, ast.Dict)
    return [k.value for k in ret.value.keys]


@pytest.fixture(scope="session")
def library_results():
    """Full validation (static + sandboxed runtime) of every library program, 2 at a time."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            (kind, d.name): pool.submit(validate, d.code, kind, limits=TEST_LIMITS)
            for kind, d in LIBRARY
        }
        return {key: f.result() for key, f in futures.items()}


# --------------------------------------------------------------------------- the library


def test_library_size_names_and_form():
    rewards, networks = library("reward"), library("network")
    assert len(rewards) >= 8 and len(networks) >= 4
    names = [d.name for _, d in LIBRARY]
    assert len(set(names)) == len(names)
    for kind, d in LIBRARY:
        assert d.kind == kind
        assert d.code.startswith(f"# {d.name}: ") and d.summary
        check_static(d.code, kind)
    for d in rewards:  # dict form, so per-term statistics can be reported
        assert len(reward_keys(d.code)) >= 2, d.name
    for term in reward_terms():
        assert all(s.startswith(term.key) for s in term.statements), term.key
    with pytest.raises(ValueError, match="no design library"):
        library("optimizer")


@pytest.mark.parametrize("kind,design", LIBRARY, ids=[f"{k}-{d.name}" for k, d in LIBRARY])
def test_every_library_program_validates(kind, design, library_results):
    result = library_results[(kind, design.name)]
    assert result.ok, f"{design.name}: {result.reason}"
    if kind == "reward":
        assert "terms" in result.reason, result.reason


# --------------------------------------------------------------------------- the backend


def test_make_backend_builds_the_designer():
    designer = make_backend("offline")
    assert isinstance(designer, OfflineDesigner)
    assert designer.name == "offline" and designer.seed == 0 and designer.explore == 0.3
    designer = make_backend("offline", seed=7, explore=0.0)
    assert (designer.seed, designer.explore) == (7, 0.0)
    with pytest.raises(BackendError, match="explore"):
        make_backend("offline", explore=1.5)
    with pytest.raises(BackendError, match="bad options"):
        make_backend("offline", model="gpt")


def test_output_shapes_and_format():
    designer = make_backend("offline", seed=1)
    prompts = [design_prompt("reward"), design_prompt("network")]
    out = designer.generate(prompts, n=3)
    assert len(out) == 2 and all(len(c) == 3 for c in out)
    for kind, completions in zip(("reward", "network"), out, strict=True):
        for completion in completions:
            first, rest = completion.split("\n", 1)
            assert DESCRIPTION.match(first), first
            assert rest.startswith("```python\n") and rest.rstrip().endswith("```")
            check_static(code_of(completion), kind)
    assert designer.generate([], n=2) == []


def test_missing_module_line_is_refused():
    with pytest.raises(BackendError, match="MODULE"):
        make_backend("offline").generate(["Write a reward function."])
    # the first known MODULE line wins
    prompt = "MODULE: LLM4Agent\nMODULE: LLM4Reward\n"
    check_static(code_of(make_backend("offline").generate([prompt])[0][0]), "network")


def test_deterministic_given_the_seed():
    parent = library("reward")[0].code
    prompts = [design_prompt("reward", [("a", -5.0, parent)]), design_prompt("network")]

    def run(seed):
        designer = make_backend("offline", seed=seed)
        return designer.generate(prompts, n=4) + designer.generate(prompts, n=2, temperature=1.5)

    assert run(3) == run(3)
    assert run(3) != run(4)


def test_deterministic_across_processes():
    """No hash-order dependence: the same seed gives the same text under any PYTHONHASHSEED."""
    script = (
        "from llm.backends import make_backend\n"
        "import hashlib\n"
        "d = make_backend('offline', seed=11)\n"
        "p = ['MODULE: LLM4Reward\\n', 'MODULE: LLM4Agent\\n']\n"
        "print(hashlib.sha256(repr(d.generate(p, n=6)).encode()).hexdigest())\n"
    )
    digests = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True
        )
        digests.add(out.stdout.strip())
    assert len(digests) == 1


def test_sampled_and_mutated_completions_pass_the_static_stage():
    rewards = [d.code for d in library("reward")]
    networks = [d.code for d in library("network")]
    foreign_reward = (PROGRAMS / "ok_reward_different_penalty.txt").read_text()
    foreign_network = (PROGRAMS / "ok_small_mlp_network.txt").read_text()
    designer = make_backend("offline", seed=5)
    cases = {
        "reward": [
            design_prompt("reward"),
            design_prompt("reward", [("r1", -3.0, rewards[4]), ("r2", -1.0, rewards[8])]),
            design_prompt("reward", [("r3", 2.0, foreign_reward)]),
        ],
        "network": [
            design_prompt("network"),
            design_prompt("network", [("n1", -2.0, networks[4]), ("n2", 1.0, networks[5])]),
            design_prompt("network", [("n3", 0.5, foreign_network)]),
        ],
    }
    count, changed = 0, 0
    for kind, prompts in cases.items():
        for temperature in (0.3, 1.0):
            for completions in designer.generate(prompts, n=5, temperature=temperature):
                for completion in completions:
                    code = code_of(completion)
                    check_static(code, kind)
                    count += 1
                    changed += "unchanged" not in completion.split("\n", 1)[0]
    assert count >= 50
    assert changed >= count - 2


def test_chained_mutations_stay_valid():
    """Children become parents: 40 generations of rewards keep passing the static stage
    and never lose their last term."""
    designer = make_backend("offline", seed=2, explore=0.2)
    population = [("g0", 0.0, library("reward")[0].code)]
    for generation in range(1, 41):
        prompt = design_prompt("reward", population[-4:])
        code = code_of(designer.generate([prompt], temperature=1.2)[0][0])
        check_static(code, "reward")
        assert 1 <= len(reward_keys(code)) <= 8
        population.append((f"g{generation}", float(generation % 7), code))


def test_parent_selection_uses_the_prompt_candidates():
    rewards = library("reward")
    good, bad = rewards[0].code, rewards[4].code
    prompt = design_prompt(
        "reward", [("j1-c0", -20.0, bad), ("j1-c1", -2.5, good)], default=rewards[8].code
    )
    assert [c.id for c in parse_candidates(prompt)] == ["j1-c0", "j1-c1"]
    designer = make_backend("offline", seed=0, explore=0.0)
    [completions] = designer.generate([prompt], n=200)
    parents = []
    for completion in completions:
        m = re.match(r"^Mutated (\S+) \(PA (\S+) bps\)", completion)
        assert m, completion.split("\n", 1)[0]
        parents.append(m.group(1))
        expected = {"j1-c1": "pa_penalty", "j1-c0": "schedule_tracking"}[m.group(1)]
        assert code_of(completion).startswith(f"# {expected}:")
    n_good = parents.count("j1-c1")
    assert n_good + parents.count("j1-c0") == 200
    assert 120 <= n_good <= 185  # a size-2 tournament picks the better one 3 times in 4


def test_explore_samples_the_library():
    prompt = design_prompt("reward", [("only", 1.0, library("reward")[0].code)])
    [completions] = make_backend("offline", seed=0, explore=1.0).generate([prompt], n=20)
    assert all(c.startswith("Library reward '") for c in completions)
    names = {re.match(r"Library reward '(\w+)'", c).group(1) for c in completions}
    assert len(names) >= 5


def test_candidate_parsing_skips_unusable_entries():
    good = library("reward")[0].code
    prompt = (
        "MODULE: LLM4Reward\n"
        "```python\nimport os\n```\n"  # not a candidate (no header)
        "### Candidate bad-1 | PA -1.00 bps\n```python\nimport os\n\n\ndef reward(a, b, c, d):\n"
        "    return 0.0\n```\n"  # fails the static stage: never a parent
        "### Candidate nan-1 | PA nan bps | WR 0.1\n```text\nstats\n```\n```python\n"
        + good
        + "```\n"
        "### Candidate none-1 | PA 3.00 bps\n## Feedback\n```python\n" + good + "```\n"
    )
    parsed = {c.id: c for c in parse_candidates(prompt)}
    assert set(parsed) == {"bad-1", "nan-1"}  # none-1's block is under another heading
    assert parsed["nan-1"].score == -np.inf and parsed["nan-1"].code == good
    [completions] = make_backend("offline", explore=0.0).generate([prompt], n=10)
    assert all(c.startswith("Mutated nan-1 ") for c in completions)


def test_temperature_zero_is_greedy():
    rewards = library("reward")
    prompt = design_prompt("reward", [("lo", -9.0, rewards[1].code), ("hi", 4.0, rewards[2].code)])
    [completions] = make_backend("offline", seed=4).generate([prompt], n=3, temperature=0.0)
    assert all(code_of(c) == rewards[2].code for c in completions)
    assert completions[0].startswith("Kept hi (PA 4.00 bps) unchanged")
    [[completion]] = make_backend("offline").generate([design_prompt("network")], temperature=0)
    assert code_of(completion) == library("network")[0].code


def test_mutated_reward_differs_from_its_parent():
    parent = library("reward")[0].code
    prompt = design_prompt("reward", [("p0", -4.0, parent)])
    [completions] = make_backend("offline", seed=8, explore=0.0).generate([prompt], n=20)
    codes = [code_of(c) for c in completions]
    assert all(code != parent for code in codes)
    before = module_constants(parent)
    changed_constants = [
        code
        for code in codes
        if any(module_constants(code).get(k, v) != v for k, v in before.items())
    ]
    assert len(changed_constants) >= 5
    # term edits happen too, and never drop the protected price-advantage term
    keysets = {tuple(reward_keys(code)) for code in codes}
    assert len(keysets) >= 2
    assert all("pa" in keys for keys in keysets)


def test_single_term_reward_keeps_its_term():
    parent = (
        "import jax.numpy as jnp\n\nWEIGHT = 0.2\n\n\n"
        "def reward(prev_state, action, next_state, params):\n"
        "    q = jnp.maximum(next_state.quantity, 1e-9)\n"
        "    pa = params.side * (next_state.last_price / next_state.benchmark_price - 1.0)\n"
        '    return {"shaping": WEIGHT * pa * 1e4 * next_state.last_qty / q}\n'
    )
    prompt = design_prompt("reward", [("one", 0.0, parent)])
    [completions] = make_backend("offline", seed=1, explore=0.0).generate([prompt], n=20)
    for completion in completions:
        assert "shaping" in reward_keys(code_of(completion))


def test_instruction_refinement_answers_with_a_text_block():
    prompt = (
        "Macro prompt.\n\nMODULE: InstructionRefinement\n\nPast instructions:\n\n"
        "### Instruction 0 | PA -8.00 bps\n```text\nKeep the default reward.\n```\n"
        "### Instruction 1 | PA -1.50 bps\n```text\nPenalize large child orders.\n```\n\n"
        "## Current instruction\n```text\nImprove on the best candidates.\n```\n"
        "Answer with one ```text block.\n"
    )
    designer = make_backend("offline", seed=0)
    [completions] = designer.generate([prompt], n=8)
    for completion in completions:
        assert completion.startswith("Refined ")
        assert "```python" not in completion
        m = re.search(r"```text\n(.*?)\n```", completion, re.S)
        assert m and m.group(1).strip()
        assert "\n- " in m.group(1)  # at least one curated hint was appended
    assert any("Penalize large child orders." in c for c in completions)
    [[greedy]] = designer.generate([prompt], temperature=0)
    assert greedy.startswith("Refined instruction 1 (PA -1.50 bps)")
    assert "```text\nPenalize large child orders.\n- " in greedy


def test_mutated_networks_keep_the_contract(make_trend_market):
    params = EnvParams(data=make_trend_market(n_features=5), lookback=10)
    dim = ExecutionEnv().observation_size(params)
    assert dim == 56
    networks = library("network")
    prompt = design_prompt("network", [("a", -1.0, networks[0].code), ("b", 0.0, networks[5].code)])
    [completions] = make_backend("offline", seed=6, explore=0.0).generate([prompt], n=2)
    obs = jax.random.normal(jax.random.PRNGKey(1), (5, dim))
    for completion in completions:
        code = code_of(completion)
        assert code not in (networks[0].code, networks[5].code)
        net = load_validated(code, "network")
        variables = jax.jit(net.init)(jax.random.PRNGKey(0), obs)
        outputs, value = jax.jit(net.apply)(variables, obs)
        assert outputs.shape == (5, 2) and value.shape == (5,)
        assert outputs.dtype == jnp.float32 and value.dtype == jnp.float32
        assert bool(jnp.all(jnp.isfinite(outputs))) and bool(jnp.all(jnp.isfinite(value)))
        # the residual policy head starts near (0, log 0.5)
        np.testing.assert_allclose(outputs[:, 1], np.log(0.5), atol=0.05)
        assert float(jnp.max(jnp.abs(outputs[:, 0]))) < 0.05
        n_params = sum(x.size for x in jax.tree.leaves(variables))
        assert n_params < 1_000_000


def test_network_widths_and_depths_stay_in_range():
    prompt = design_prompt("network", [("w", 0.0, library("network")[2].code)])
    [completions] = make_backend("offline", seed=9, explore=0.0).generate(
        [prompt], n=30, temperature=3.0
    )
    for completion in completions:
        fields = {}
        tree = ast.parse(code_of(completion))
        network = [n for n in tree.body if getattr(n, "name", "") == "Network"][-1]
        for stmt in network.body:
            if isinstance(stmt, ast.AnnAssign):
                fields[stmt.target.id] = stmt.value.value
        assert isinstance(fields["width"], int) and 8 <= fields["width"] <= 256
        assert fields["width"] % 8 == 0
        assert isinstance(fields["depth"], int) and 1 <= fields["depth"] <= 4


def test_description_names_the_change():
    parent = library("reward")[0].code
    prompt = design_prompt("reward", [("j2-c3", -12.4, parent)])
    [completions] = make_backend("offline", seed=3, explore=0.0).generate([prompt], n=10)
    notes = [c.split("\n", 1)[0] for c in completions]
    assert all(n.startswith("Mutated j2-c3 (PA -12.40 bps): ") for n in notes)
    assert any(re.search(r"[A-Z_]+ [\d.e+-]+ -> [\d.e+-]+", n) for n in notes)


def test_anchor_operator_declares_then_moves_the_prior_anchor():
    rng = random.Random(0)
    no_fields = (
        "import flax.linen as nn\n\n\nclass Network(nn.Module):\n"
        '    """A docstring."""\n\n    @nn.compact\n    def __call__(self, obs):\n'
        "        p = nn.Dense(2)(obs)\n        return p, p[..., 0]\n"
    )
    for code in [d.code for d in library("network")] + [no_fields]:
        declared, note = _op_anchor(code, ast.parse(code), "network", 0.4, rng)
        assert note.startswith("declared Network.prior_anchor_steps = ")
        check_static(declared, "network")
        k = declared_prior_anchor(load_validated(declared, "network"))
        assert 1.0 <= k <= 40.0 and note.endswith(repr(k))
        moved, note = _op_anchor(declared, ast.parse(declared), "network", 0.4, rng)
        k2 = declared_prior_anchor(load_validated(moved, "network"))
        assert k2 != k and note == f"Network.prior_anchor_steps {k!r} -> {k2!r}"
        assert moved.count("prior_anchor_steps") == 1
    docstring_first = _op_anchor(no_fields, ast.parse(no_fields), "network", 0.4, rng)[0]
    network = ast.parse(docstring_first).body[-1]
    assert ast.get_docstring(network) == "A docstring."
    assert network.body[1].target.id == "prior_anchor_steps"
    assert _op_anchor(library("reward")[0].code, ast.parse("x = 1"), "reward", 0.4, rng) is None


def test_shortfall_scores_are_read_and_echoed():
    parent = library("reward")[0].code
    prompt = design_prompt("reward", [("j2-c3", -12.4, parent)]).replace(
        "| PA -12.40 bps", "| shortfall -12.40 bps"
    )
    [candidate] = parse_candidates(prompt)
    assert (candidate.id, candidate.score, candidate.label) == ("j2-c3", -12.4, "shortfall")
    [completions] = make_backend("offline", seed=3, explore=0.0).generate([prompt], n=3)
    assert all(c.startswith("Mutated j2-c3 (shortfall -12.40 bps): ") for c in completions)


def test_a_mutation_moves_the_prior_anchor_at_most_once():
    anchored = library("network")[0].code.replace(
        "    depth: int = 2", "    prior_anchor_steps: float = 6.0\n    depth: int = 2"
    )
    prompt = design_prompt("network", [("j1-c0", -17.0, anchored)])
    [completions] = make_backend("offline", seed=4, explore=0.0).generate([prompt], n=40)
    notes = [c.split("\n", 1)[0] for c in completions]
    moved = [n for n in notes if "prior_anchor_steps" in n]
    assert moved and all(n.count("prior_anchor_steps") == 1 for n in moved)


def test_imagination_programs_are_sampled_and_mutated_by_their_constants():
    designs = library("imagination")
    [[greedy]] = make_backend("offline").generate([design_prompt("imagination")], temperature=0)
    assert code_of(greedy) == designs[0].code
    parent = next(d.code for d in designs if d.name == "trend_regime")
    prompt = design_prompt("imagination", [("j1-c0", -3.0, parent)])
    [completions] = make_backend("offline", seed=2, explore=0.0).generate([prompt], n=6)
    for completion in completions:
        assert completion.startswith("Mutated j1-c0 (PA -3.00 bps): TREND_STDS 1.0 -> ")
        code = code_of(completion)
        check_static(code, "imagination")
        # only the constant moved: the program's body is the parent's
        assert module_constants(code)["TREND_STDS"] != module_constants(parent)["TREND_STDS"]
        strip = [line for line in code.splitlines() if not line.startswith("TREND_STDS")]
        assert strip == [line for line in parent.splitlines() if not line.startswith("TREND_STDS")]
    [fresh] = make_backend("offline", seed=5, explore=1.0).generate(
        [design_prompt("imagination")], n=8
    )
    names = {re.match(r"Library imagination '(\w+)'", c).group(1) for c in fresh}
    assert len(names) >= 3 and names <= {d.name for d in designs}


def test_compact_prompts_are_answered_with_valid_library_programs():
    from llm.prompts import COMPACT_INSTRUCTION, DEFAULT_CODE, compact_prompt

    prompts = [compact_prompt(k, DEFAULT_CODE[k], COMPACT_INSTRUCTION) for k in MODULE]
    out = make_backend("offline", seed=3).generate(prompts, n=2)
    for kind, completions in zip(MODULE, out, strict=True):
        for completion in completions:
            assert completion.startswith(f"Library {kind} '")  # no past candidates shown
            check_static(code_of(completion), kind)


def _mutations(kind: str, name: str, n: int, seed: int = 2, temperature: float = 2.0):
    """``n`` mutations of the library program ``name`` (the prompt's only candidate)."""
    parent = next(d.code for d in library(kind) if d.name == name)
    prompt = design_prompt(kind, [("j1-c0", -3.0, parent)])
    designer = make_backend("offline", seed=seed, explore=0.0)
    [completions] = designer.generate([prompt], n=n, temperature=temperature)
    assert all(c.startswith("Mutated j1-c0 (PA -3.00 bps): ") for c in completions)
    return parent, [code_of(c) for c in completions]


def test_profile_mutations_move_one_constant_and_keep_shares_in_the_day():
    assert code_of(
        make_backend("offline").generate([design_prompt("profiling")], temperature=0)[0][0]
    ) == (
        library("profiling")[0].code  # greedy: independent_days, the single-agent draw
    )
    parent, codes = _mutations("profiling", "staggered_windows", n=24)
    shares = []
    for code in codes:
        check_static(code, "profiling")
        shares.append(module_constants(code)["WINDOW_SHARE"])
        # only the constant moved: the program's body is the parent's
        strip = [line for line in code.splitlines() if not line.startswith("WINDOW_SHARE")]
        assert strip == [
            line for line in parent.splitlines() if not line.startswith("WINDOW_SHARE")
        ]
    assert all(0 < x <= 1.0 for x in shares) and 0.5 not in shares
    assert 1.0 in shares and min(shares) < 0.5  # the share is capped at the whole day
    _, codes = _mutations("profiling", "buyers_and_sellers", n=4)
    assert all(module_constants(c)["BUYER_SIZE"] not in (1.0, None) for c in codes)


def test_communication_mutations_keep_message_sizes_and_widths_in_range():
    assert MESSAGE_RANGE == (1, MAX_MESSAGE_SIZE)
    _, codes = _mutations("communication", "mlp_message", n=40, temperature=4.0)
    fields = [class_fields(c) for c in codes]
    sizes = [f["message_size"] for f in fields]
    widths = [f["width"] for f in fields]
    assert all(type(m) is int and 1 <= m <= MAX_MESSAGE_SIZE for m in sizes)
    assert all(type(w) is int and w % 8 == 0 and 8 <= w <= 256 for w in widths)
    assert {1, MAX_MESSAGE_SIZE} <= set(sizes) and len(set(widths)) > 3  # clipped, not refused
    # inventory_broadcast: the observation's layout (PRIVATE, read in obs[..., :PRIVATE]) is
    # never moved, and the learned part leaves room for the 6 private features
    _, codes = _mutations("communication", "inventory_broadcast", n=24, temperature=4.0)
    parts = [class_fields(c)["market_size"] for c in codes]
    assert all(module_constants(c)["PRIVATE"] == NUM_PRIVATE_FEATURES for c in codes)
    assert all(MESSAGE_PART_RANGE[0] <= p <= MESSAGE_PART_RANGE[1] for p in parts)
    assert max(parts) == MESSAGE_PART_RANGE[1] == MAX_MESSAGE_SIZE - NUM_PRIVATE_FEATURES


@pytest.mark.slow
def test_profile_and_communication_answers_pass_the_full_validator():
    """The most extreme of the mutations above (a window of the whole day, the longest
    message, the widest learned part) and fresh library draws from design prompts built
    by :func:`llm.prompts.design_prompt` pass both stages."""
    from llm.prompts import design_prompt as build
    from llm.prompts import macro_prompt
    from serl_jax.config import MarlConfig

    _, windows = _mutations("profiling", "staggered_windows", n=24)
    _, messages = _mutations("communication", "mlp_message", n=40, temperature=4.0)
    _, parts = _mutations("communication", "inventory_broadcast", n=24, temperature=4.0)
    macro = macro_prompt(54, 5, 10, agents=3, communication=True)
    prompt = build("profiling", macro, "Do it.", marl=MarlConfig(agents=3))
    [fresh] = make_backend("offline", seed=0).generate([prompt], n=8, temperature=1.0)
    moved = [c for c in fresh if "default constants" not in c.split("\n")[0]]
    answers = [
        ("profiling", max(windows, key=lambda c: module_constants(c)["WINDOW_SHARE"])),
        ("communication", max(messages, key=lambda c: class_fields(c)["message_size"])),
        ("communication", max(parts, key=lambda c: class_fields(c)["market_size"])),
        ("profiling", code_of(moved[0])),
    ]
    with ThreadPoolExecutor(max_workers=2) as pool:
        jobs = [pool.submit(validate, code, kind, limits=TEST_LIMITS) for kind, code in answers]
        verdicts = [job.result() for job in jobs]
    for (kind, code), verdict in zip(answers, verdicts, strict=True):
        assert verdict.ok, (kind, verdict.reason, code)
    assert "16-number messages" in verdicts[1].reason and "16-number" in verdicts[2].reason


# --------------------------------------------------------------------------- search kinds


def _search(kind: str, module: str, shots, score_label: str = "PA") -> str:
    """A search prompt (llm.prompts.search) showing ``shots``: ``(id, score, code)``."""
    from llm.prompts import search_prompt
    from serl_jax.loop.islands import Program

    programs = [Program(cid, module, code, score) for cid, score, code in shots]
    return search_prompt(kind, module, programs, score_label=score_label, macro="Execute.")


def masked_program(code: str) -> str:
    """The canonical program with every number replaced by 0: equal for two programs that
    differ only in names, layout and constants."""
    from serl_jax.loop.novelty import canonical_program

    return re.sub(r"Constant\(value=[-+0-9.eE]+\)", "Constant(value=0)", canonical_program(code))


def test_search_parameters_changes_only_constants():
    # a reward reading params.terminal_penalty_bps: constants may lift it into a module
    # constant (a new line and a new name), which parameters must not do
    lifted = "TERMINAL_BPS = 100.0  # bps per unit share of Q left unfilled at the end\n"
    reward = library("reward")[0].code.replace(lifted, "")
    reward = reward.replace("TERMINAL_BPS", "params.terminal_penalty_bps")
    for kind, parent in (("reward", reward), ("network", library("network")[2].code)):
        other = library(kind)[1].code
        prompt = _search("parameters", kind, [("lo", -9.0, other), ("p", -2.0, parent)])
        designer = make_backend("offline", seed=3, explore=1.0)  # explore is not used
        [completions] = designer.generate([prompt], n=24, temperature=1.5)
        codes = {}
        for completion in completions:
            m = re.match(r"^Mutated (\S+) \(PA \S+ bps\): ", completion)
            assert m and "unchanged" not in completion.split("\n")[0], completion
            codes[code_of(completion)] = m.group(1)
        for code, parent_id in codes.items():
            check_static(code, kind)
            source = parent if parent_id == "p" else other
            assert masked_program(code) == masked_program(source) and code != source
        assert len(codes) >= 12 and "p" in codes.values()
    # without the SEARCH line the same parent also gets structural edits (terms, lifts)
    plain = design_prompt("reward", [("p", -2.0, reward)])
    [completions] = make_backend("offline", seed=3, explore=0.0).generate([plain], n=24)
    masked = {masked_program(code_of(c)) for c in completions}
    assert len(masked - {masked_program(reward)}) >= 3


def test_search_form_answers_with_library_programs():
    rewards = library("reward")
    for kind in ("reward", "network"):
        designs = {d.name: d.code for d in library(kind)}
        shown = [("a", -3.0, library(kind)[0].code), ("b", -1.0, library(kind)[1].code)]
        prompt = _search("form", kind, shown)
        designer = make_backend("offline", seed=1, explore=0.0)  # explore is not used
        [completions] = designer.generate([prompt], n=12)
        names = set()
        for completion in completions:
            m = re.match(rf"^Library {kind} '(\w+)' with ", completion)
            assert m, completion.split("\n", 1)[0]
            names.add(m.group(1))
            code = code_of(completion)
            check_static(code, kind)
            if kind == "reward":  # a reward's exploration moves its constants only
                assert masked_program(code) == masked_program(designs[m.group(1)])
        assert len(names) >= 4
    assert all(masked_program(d.code) != masked_program(rewards[0].code) for d in rewards[1:])


def test_search_crossover_adds_a_term_of_the_other_reward():
    from llm.prompts import DEFAULT_CODE

    rewards = {d.name: d.code for d in library("reward")}
    cases = [
        # (worse, better, the term only the worse one has)
        (rewards["participation_penalty"], rewards["pa_penalty"], "participation"),
        # the default reads its helper safe_div and has another `fraction`: both carried,
        # the local renamed
        (DEFAULT_CODE["reward"], rewards["schedule_tracking"], "concentration"),
    ]
    answers = []
    for worse, better, term in cases:
        prompt = _search("crossover", "reward", [("hi", 2.0, better), ("lo", -4.0, worse)])
        assert [c.id for c in parse_candidates(prompt)] == ["lo", "hi"]  # ascending
        [completions] = make_backend("offline", seed=0).generate([prompt], n=4)
        for completion in completions:
            first = completion.split("\n", 1)[0]
            assert first.startswith(
                f"Crossed hi (PA 2.00 bps) with lo (PA -4.00 bps): added term '{term}' of lo"
            ), first
            code = code_of(completion)
            check_static(code, "reward")
            assert reward_keys(code) == [*reward_keys(better), term]
        assert len({code_of(c) for c in completions}) == 1  # one term to take: deterministic
        answers.append(code_of(completions[0]))
    assert "concentration_fraction = safe_div(" in answers[1]
    assert "\ndef safe_div(num, den):" in answers[1]
    assert "TARGET_RATE = 0.1  # participation" in answers[0]
    # the carried code runs: both answers pass the full validator
    with ThreadPoolExecutor(max_workers=2) as pool:
        verdicts = list(pool.map(lambda c: validate(c, "reward", limits=TEST_LIMITS), answers))
    assert all(v.ok for v in verdicts), [v.reason for v in verdicts]


def test_search_crossover_draws_among_the_missing_terms():
    rewards = {d.name: d.code for d in library("reward")}
    donor = rewards["implementation_shortfall"]  # shortfall and opportunity are missing
    prompt = _search(
        "crossover", "reward", [("a", 1.0, rewards["schedule_tracking"]), ("b", 0.0, donor)]
    )
    [completions] = make_backend("offline", seed=5).generate([prompt], n=20)
    added = {re.search(r"added term '(\w+)'", c).group(1) for c in completions}
    assert added == {"shortfall", "opportunity", "concentration"}
    for completion in completions:
        check_static(code_of(completion), "reward")


def test_search_crossover_falls_back_to_a_mutation():
    better = library("reward")[0].code
    # the term reads a tuple constant, which is not carried
    donor = (
        "import jax.numpy as jnp\n\nWEIGHTS = (0.5, 2.0)\n\n\n"
        "def reward(prev_state, action, next_state, params):\n"
        "    q = jnp.maximum(next_state.quantity, 1e-9)\n"
        '    return {"fill": params.reward_scale * WEIGHTS[0] * next_state.last_qty / q}\n'
    )
    check_static(donor, "reward")
    prompt = _search("crossover", "reward", [("a", 3.0, better), ("b", 1.0, donor)])
    [completions] = make_backend("offline", seed=2).generate([prompt], n=6)
    for completion in completions:
        first = completion.split("\n", 1)[0]
        assert re.match(
            r"^Mutated [ab] \(PA \S+ bps\), no crossover \(term 'fill' reads "
            r"'WEIGHTS', which b binds ",
            first,
        ), first
        check_static(code_of(completion), "reward")
    networks = library("network")
    prompt = _search(
        "crossover", "network", [("n1", 1.0, networks[0].code), ("n2", 0.0, networks[1].code)]
    )
    [completions] = make_backend("offline", seed=2).generate([prompt], n=4)
    for completion in completions:
        assert re.match(
            r"^Mutated n[12] \(PA \S+ bps\), no crossover \(crossover combines reward "
            r"programs, not network programs\): ",
            completion,
        ), completion.split("\n", 1)[0]
        check_static(code_of(completion), "network")


def test_search_better_and_unknown_kinds_answer_as_design_prompts():
    rewards = library("reward")
    plain = design_prompt("reward", [("a", -3.0, rewards[3].code), ("b", -1.0, rewards[5].code)])
    variants = [
        plain.replace("## Instructions", "SEARCH: better\n\n## Instructions"),
        plain.replace("## Instructions", "SEARCH: mystery\n\n## Instructions"),
        # a SEARCH line inside a code block is code, not the prompt's operator
        plain.replace("## Instructions", "```text\nSEARCH: form\n```\n\n## Instructions"),
    ]

    def run(prompt):
        return make_backend("offline", seed=9).generate([prompt], n=12, temperature=1.2)

    expected = run(plain)
    assert all(run(p) == expected for p in variants)


def test_search_prompts_with_the_mean_variance_label_are_read():
    code = library("reward")[0].code
    prompt = _search("better", "reward", [("m1", -7.5, code)], score_label="mean-variance")
    [candidate] = parse_candidates(prompt)
    assert (candidate.id, candidate.score, candidate.label) == ("m1", -7.5, "mean-variance")
    [[completion]] = make_backend("offline", seed=0, explore=0.0).generate([prompt])
    assert completion.startswith("Mutated m1 (mean-variance -7.50 bps): ")
