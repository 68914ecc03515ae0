"""``python -m llm.validate --kind reward|network|imagination|profiling|communication FILE
[--json]``.

Exit status: 0 accepted, 1 rejected (the stage and reason are printed), 2 usage error
(bad arguments, unreadable file), 3 sandbox error (the validator itself could not run the
trial, e.g. the child cannot import JAX; the cause is printed; the code was not judged).
"""

from __future__ import annotations

import argparse
import json
import sys

from llm.validate import SandboxError, validate
from llm.validate.static import KINDS


def main(argv: list[str] | None = None) -> int:
    """Runs the CLI; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m llm.validate",
        description="Validate LLM-generated code for the reward or network slot "
        "(stage 1: static AST allow-list; stage 2: sandboxed trial run).",
    )
    parser.add_argument("--kind", required=True, choices=list(KINDS))
    parser.add_argument("file", help="Python source file with the candidate")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    try:
        with open(args.file, encoding="utf-8") as f:
            code = f.read()
    except (OSError, UnicodeDecodeError) as e:
        print(f"error: cannot read {args.file}: {e}", file=sys.stderr)
        return 2
    try:
        result = validate(code, args.kind)
    except SandboxError as e:
        print(f"error: {e}", file=sys.stderr)
        return 3
    if args.json:
        print(json.dumps(result.to_dict()))
    elif result.ok:
        print(f"accepted: {result.reason}")
    else:
        print(f"rejected at stage {result.stage}: {result.reason}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
