"""``python -m benchmarks NAME [--quick]`` runs one benchmark; ``all`` runs every one."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
import time
from pathlib import Path


def available() -> list[str]:
    """Every benchmark module in this package (helpers start with an underscore)."""
    here = Path(__file__).parent
    return sorted(m.name for m in pkgutil.iter_modules([str(here)]) if not m.name.startswith("_"))


def main(argv: list[str] | None = None) -> int:
    names = available()
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("name", help=f"one of: all, {', '.join(names)}")
    parser.add_argument("--quick", action="store_true", help="a smaller run (under a minute)")
    args = parser.parse_args(argv)
    chosen = names if args.name == "all" else [args.name]
    unknown = [n for n in chosen if n not in names]
    if unknown:
        parser.error(f"unknown benchmark {unknown[0]!r}; choose from: all, {', '.join(names)}")
    for name in chosen:
        module = importlib.import_module(f"benchmarks.{name}")
        started = time.perf_counter()
        print(f"=== benchmark {name}{' (quick)' if args.quick else ''} ===")
        module.main(args.quick)
        print(f"=== {name} done in {time.perf_counter() - started:.1f}s ===\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
