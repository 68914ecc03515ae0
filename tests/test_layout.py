"""The layout's import rules, read from the source with ``ast`` (nothing is imported):

* no import loop among the modules of ``serl_jax`` and ``llm``, counting imports inside
  functions too (a deferred import hides a loop from Python, not from the layout);
* under ``serl_jax``, only the SE-RL loop and the command-line programs import ``llm``
  (anywhere in the module, function bodies included): the JAX core (envs, book, market,
  PPO, metrics) stands alone;
* the JAX core never imports PyTorch, transformers or peft;
* only the Ray executor imports Ray (an optional extra).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("serl_jax", "llm")
# The SE-RL loop, the runs the train CLI drives, and the CLIs: the layers above both sides.
MAY_IMPORT_LLM = (
    "serl_jax.loop",
    "serl_jax.training",
    "serl_jax.train",
    "serl_jax.evaluate",
    "serl_jax.benchmark",
)


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imported(module: str, node: ast.AST) -> list[str]:
    """The project modules one import statement names (``from a import b`` names ``a.b``
    when that is a module, else ``a``)."""
    names = []
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:  # relative import
            package = module.split(".")
            if not MODULES[module].name == "__init__.py":
                package = package[:-1]
            package = package[: len(package) - (node.level - 1)]
            base = ".".join([*package, *([base] if base else [])])
        names = [
            f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
            for alias in node.names
        ]
    out = []
    for name in names:
        while name and name not in MODULES:  # a name inside a module: the module
            name = name.rpartition(".")[0]
        if name:
            out.append(name)
    return out


def _edges(module_level_only: bool) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        nodes = tree.body if module_level_only else list(ast.walk(tree))
        edges[module] = {
            target
            for node in nodes
            for target in _imported(module, node)
            if target != module and not module.startswith(target + ".")
        }
    return edges


def _find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_reader_sees_imports_and_loops():
    """The checker itself, on a hand-made graph and on a known edge of the real one."""
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    edges = _edges(module_level_only=True)
    assert "serl_jax.training.ppo" in edges["serl_jax.train"]
    assert "serl_jax.market.params" in edges["serl_jax.calibrate"]


def test_no_import_loop():
    cycle = _find_cycle(_edges(module_level_only=False))
    assert cycle is None, "import loop: " + " -> ".join(cycle)


def test_only_the_loop_and_the_clis_import_llm():
    offenders = sorted(
        f"{module} imports {', '.join(sorted(t for t in targets if t.startswith('llm')))}"
        for module, targets in _edges(module_level_only=False).items()
        if module.startswith("serl_jax")
        and not any(module == m or module.startswith(m + ".") for m in MAY_IMPORT_LLM)
        and any(t == "llm" or t.startswith("llm.") for t in targets)
    )
    assert not offenders, offenders


def _importers(library: str) -> list[str]:
    """The project modules that import ``library`` (anywhere in the module)."""
    found = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            if any(n == library or n.startswith(library + ".") for n in names):
                found.append(module)
                break
    return found


@pytest.mark.parametrize("library", ["torch", "transformers", "peft"])
def test_the_jax_core_never_imports_torch(library):
    offenders = [m for m in _importers(library) if m.startswith("serl_jax")]
    assert not offenders, offenders


def test_only_the_ray_executor_imports_ray():
    """Ray is an optional extra (``.[distributed]``): one module holds it."""
    assert _importers("ray") == ["serl_jax.loop.ray_pool"]


def test_the_core_floors_never_read_the_run_config():
    """The run config (``serl_jax.config``) turns YAML into the lower floors' objects
    (network, action prior, env params, hybrid and MARL settings): the experiments, the
    loop and the CLIs call it and pass the objects down, so no floor below them imports
    it."""
    core = ("data", "envs", "lob", "market", "rl", "components", "metrics", "baselines")
    offenders = sorted(
        module
        for module, targets in _edges(module_level_only=False).items()
        if any(module == f"serl_jax.{c}" or module.startswith(f"serl_jax.{c}.") for c in core)
        and "serl_jax.config" in targets
    )
    assert not offenders, offenders
