"""The repair pass (``llm.repair``): each rule by hand, nothing else touched, and the
repaired programs pass the validator's static stage where the originals did not."""

from __future__ import annotations

import pytest

from llm.repair import STANDARD_IMPORTS, repair
from llm.validate import check_static

REWARD_BODY = """
def reward(prev_state, action, next_state, params):
    return jnp.where(action > 0.5, 1.0, 0.0)
"""


def test_a_wrong_module_for_a_conventional_name_becomes_its_standard_import():
    code, fixes = repair("import jnp\n" + REWARD_BODY)
    assert code == "import jax.numpy as jnp\n" + REWARD_BODY
    assert fixes == ["line 1: import jnp -> import jax.numpy as jnp"]
    code, fixes = repair("import jax.linen as nn\n\n\nclass Network(nn.Module):\n    pass\n")
    assert code.startswith("import flax.linen as nn\n\n\nclass Network(nn.Module):")
    assert fixes == ["line 1: import jax.linen as nn -> import flax.linen as nn"]


def test_a_missing_import_is_added_after_the_docstring_and_comments():
    code, fixes = repair('"""A reward."""\n# terms: one\n' + REWARD_BODY.lstrip())
    assert code == (
        '"""A reward."""\n# terms: one\nimport jax.numpy as jnp\n\n' + REWARD_BODY.lstrip()
    )
    assert fixes == ["added the missing import jax.numpy as jnp"]
    code, fixes = repair("def f(x):\n    return lax.stop_gradient(jnp.sum(x))\n")
    assert code.startswith("import jax.numpy as jnp\nfrom jax import lax\n\ndef f(x):")
    assert len(fixes) == 2


def test_repeated_and_unused_imports_are_dropped():
    source = "import jax.numpy as jnp\nimport jax.numpy as jnp\nimport math, functools\n"
    code, fixes = repair(source + REWARD_BODY)
    assert code == "import jax.numpy as jnp\n" + REWARD_BODY
    assert fixes == [
        "dropped the repeated import on line 2: import jax.numpy as jnp",
        "dropped the unused import of math on line 3",
        "dropped the unused import of functools on line 3",
    ]
    code, fixes = repair("import math, functools\n\ndef f(x):\n    return math.sqrt(x)\n")
    assert code == "import math\n\ndef f(x):\n    return math.sqrt(x)\n"


def test_unused_imports_of_refused_modules_are_dropped_and_the_result_passes_stage_1():
    # j1-c4 of the 1.5B's imagination run of 2026-11-26 (the contract's example with an
    # unused typing import) and j1-c12 (its retry of another sample, an unused numpy).
    body = (
        "\nVOL_SCALE = 1.5\n\n\ndef imagine(key, price, volume, params):\n"
        "    log_price = jnp.log(price)\n"
        "    return jnp.exp(log_price[0] + VOL_SCALE * (log_price - log_price[0])), volume\n"
    )
    for line, module in (("from typing import Tuple", "Tuple"), ("import numpy as np", "numpy")):
        source = f"import jax.numpy as jnp\n{line}\n{body}"
        with pytest.raises(Exception, match="is not allowed"):
            check_static(source, "imagination")
        code, fixes = repair(source)
        assert code == "import jax.numpy as jnp\n" + body
        assert fixes == [f"dropped the unused import of {module} on line 2"]
        check_static(code, "imagination")


@pytest.mark.parametrize(
    "source",
    [
        "import jax.numpy as jnp\n" + REWARD_BODY,  # nothing to fix
        "from typing import Tuple\nimport jax.numpy as jnp\n"
        + REWARD_BODY.replace("params):", "params) -> Tuple:"),  # read in a hint: refused
        "from jax.numpy import *\n"
        + REWARD_BODY.replace("jnp.where", "where"),  # binds unknown names: refused
        "import os\nimport jax.numpy as jnp\n"
        + REWARD_BODY.replace("jnp.where", "os.getcwd() or jnp.where"),  # for validation
        "def f(:\n",  # does not parse: left to validation
        "def f(jnp):\n    return jnp.sum(1)\n",  # jnp is an argument, not a module
        "jnp = None\n\ndef f():\n    return jnp\n",
    ],
)
def test_everything_else_is_left_alone(source):
    assert repair(source) == (source, [])


def test_repaired_programs_pass_the_static_stage():
    broken = "import jnp\n" + REWARD_BODY
    with pytest.raises(Exception, match="import of 'jnp' is not allowed"):
        check_static(broken, "reward")
    code, _ = repair(broken)
    check_static(code, "reward")
    code, _ = repair(REWARD_BODY)
    check_static(code, "reward")


def test_the_standard_imports_pass_the_validators_allow_list():
    for line in STANDARD_IMPORTS.values():
        check_static(line + "\n\ndef reward(prev_state, action, next_state, params):\n"
                     "    return 0.0\n", "reward")  # fmt: skip


# -- rule 5: definitions borrowed from the programs the prompt showed ----------------------
SHOWN = """import jax.numpy as jnp

DENSE_WEIGHT = 0.2  # weight of the per-fill PA shaping term
SCALE = -(2.0 * 1e4)
ONES = jnp.ones(3)  # not literals: never copied


def safe_div(num, den):
    positive = den > 0
    return jnp.where(positive, num / jnp.where(positive, den, 1.0), 0.0) * SCALE


def reward(prev_state, action, next_state, params):
    return {"pa": DENSE_WEIGHT * next_state.last_qty}
"""
USES_SHOWN = """

def reward(prev_state, action, next_state, params):
    return {"pa": DENSE_WEIGHT * safe_div(next_state.last_qty, params.q)}
"""
BORROWED = """DENSE_WEIGHT = 0.2  # weight of the per-fill PA shaping term
SCALE = -(2.0 * 1e4)


def safe_div(num, den):
    positive = den > 0
    return jnp.where(positive, num / jnp.where(positive, den, 1.0), 0.0) * SCALE
"""
BORROWED_FIXES = [
    "added DENSE_WEIGHT, defined in a program the prompt showed",
    "added SCALE, defined in a program the prompt showed",
    "added safe_div, defined in a program the prompt showed",
]


def test_shown_constants_and_helpers_a_program_reads_are_added_after_its_imports():
    # the 1.5B's j2-c5 (index search, seed 1, 2026-11-28) read DENSE_WEIGHT of its shot
    code, fixes = repair("import jax.numpy as jnp\n" + USES_SHOWN, [SHOWN])
    assert code == "import jax.numpy as jnp\n\n" + BORROWED + USES_SHOWN
    assert fixes == BORROWED_FIXES  # constants first; SCALE because safe_div reads it
    check_static(code, "reward")
    # without imports: the helper's jnp gets its import, the definitions follow it
    code, fixes = repair('"""A reward."""' + USES_SHOWN, [SHOWN])
    assert code == '"""A reward."""\nimport jax.numpy as jnp\n\n' + BORROWED + USES_SHOWN
    assert fixes == ["added the missing import jax.numpy as jnp", *BORROWED_FIXES]


def test_the_last_shown_definition_wins():
    first, last = "LIMIT = 1.0\n", "LIMIT = 2.0  # the best shot, shown last\n"
    body = "\n\ndef f(x):\n    return x * LIMIT\n"
    code, fixes = repair(body, [first + body, last + body])
    assert code == last + body
    assert fixes == ["added LIMIT, defined in a program the prompt showed"]


@pytest.mark.parametrize(
    "source",
    [
        "def f(x):\n    return ONES + x\n",  # shown, but not literals
        "def f(x):\n    return UNKNOWN + x\n",  # no shown program defines it
        "def f(x):\n    return max(x, 1.0)\n",  # a builtin
        "def f(x, SCALE):\n    return SCALE * x\n",  # bound here (an argument)
        "SCALE = 3.0\n\n\ndef f(x):\n    return SCALE * x\n",  # bound here
    ],
)
def test_rule_5_leaves_other_names_to_validation(source):
    assert repair(source, [SHOWN]) == (source, [])
