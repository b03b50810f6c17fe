"""Does every catalogue case hold on every seed, and by what margin?

Runs every case, broken and fixed, on seeds 0-199 (`--seeds`), and prints per case the worst
margin of each promise its checks measure (`broken_models.checks`; positive: the promise holds,
in the check's units, decades for a loss that spans them):

    broken symptom   the broken script shows the symptom
    broken miss      the broken script misses the target
    fixed clear      the fixed script shows no symptom
    fixed target     the fixed script reaches the target

with the seed of each worst value, and the runs whose diagnosis or health failed (the codes have
no margin: a missing or an unexplained code is a failure). Exit status 1 when any run failed.

CPU heavy (41 cases x 200 seeds x 2 runs of about half a second): `--jobs` processes of one
torch thread each, at nice 10 (`--nice`), and resumable: every result is appended to a cache
(`--cache`, one JSON line per case, seed, script and source hash), so a rerun trains only what
is new or whose code changed (the page, the shared catalogue modules, the library under
`lesson/` outside `lesson/course/`; docstrings, comments and a card's words are not code).

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/bench_case_seeds.py --jobs 2
        [--case NAME ...] [--seeds 0-199] [--which both|broken|fixed] [--no-cache]
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import hashlib
import json
import math
import multiprocessing
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_CACHE = ROOT / "benchmarks" / ".cache" / "case_seeds.jsonl"
#: the promises measured, in the order printed: (script, the SeedRun field, the column heading)
COLUMNS = (("broken", "symptom_margin", "broken symptom"), ("broken", "target_margin", "broken miss"),
           ("fixed", "symptom_margin", "fixed clear"), ("fixed", "target_margin", "fixed target"))


def shared_sources(root: Path = ROOT) -> list[Path]:
    """The files every case's result depends on besides its own page."""
    files = [root / "broken_models" / f for f in ("__init__.py", "case.py", "checks.py",
                                                  "datasets.py", "seeds.py", "tokens.py",
                                                  "corpus.txt")]
    files += [p for p in sorted((root / "lesson").rglob("*.py"))
              if "course" not in p.relative_to(root / "lesson").parts]
    return files


#: a page's card fields that are words for people: no run reads them, so rewording one keeps
#: every cached result (the checks, the codes and the tool are read, and hashed)
TEXT_FIELDS = frozenset({"TITLE", "SYMPTOM", "LESSON", "FIX", "TARGET", "REFERENCE", "EVIDENCE",
                         "CHANGE"})


def code_of(path: Path) -> str:
    """A file's code without its docstrings, comments and card text: rewording any of them
    leaves every cached result valid, changing a line of code does not. A file that is not
    Python (the shipped text) counts as it is."""
    if path.suffix != ".py":
        return path.read_text(encoding="utf-8")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    tree.body = [s for s in tree.body if not (isinstance(s, ast.Assign) and all(
        isinstance(t, ast.Name) and t.id in TEXT_FIELDS for t in s.targets))]
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
    return ast.unparse(tree)


def source_hashes(pages: dict[str, Path], shared: list[Path], root: Path = ROOT) -> dict[str, str]:
    """What a cached result of each page was computed from: the page's code and the shared
    code (each file parsed once)."""
    common = hashlib.sha256()
    for path in shared:
        common.update(str(path.relative_to(root)).encode())
        common.update(code_of(path).encode())
    out = {}
    for name, page in pages.items():
        digest = common.copy()
        digest.update(str(page.relative_to(root)).encode())
        digest.update(code_of(page).encode())
        out[name] = digest.hexdigest()[:16]
    return out


def page_path(module: str) -> Path:
    return ROOT / Path(*module.split(".")).with_suffix(".py")


def case_hashes(names: list[str] | None = None) -> dict[str, str]:
    """The source hash of each case (all of them by default), read from the files now."""
    from broken_models import CATALOGUE

    pages = {n: page_path(c.module) for n, c in CATALOGUE.items() if names is None or n in names}
    return source_hashes(pages, shared_sources())


_HASHES: dict[str, str] = {}


def _init(nice: int) -> None:
    """A worker: one torch thread, niced; it imports every module a result depends on (the
    catalogue, the library under `lesson/`), then hashes the files it imported, so a file
    edited during a sweep never has the old code's results filed under its new hash."""
    import importlib

    import torch

    if nice:
        os.nice(nice)
    torch.set_num_threads(1)
    import broken_models  # noqa: F401  (every page)
    for path in shared_sources():
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__main__" or path.suffix != ".py":   # a script, a text: not imported
            continue
        importlib.import_module(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    _HASHES.update(case_hashes())


def _job(args: tuple[str, int, str]) -> dict:
    from broken_models import CATALOGUE
    from broken_models.seeds import SeedRun, sweep_run

    name, seed, which = args
    source = _HASHES[name]
    start = time.perf_counter()
    try:
        row = dataclasses.asdict(sweep_run(CATALOGUE[name], seed, which))
    except Exception as err:  # a crash is a failing run, not the end of the sweep
        row = dataclasses.asdict(SeedRun(name, seed, which, (f"crashed: {type(err).__name__}: {err}",),
                                         -math.inf, -math.inf, (), time.perf_counter() - start))
    return row | {"source": source}


def _load_cache(path: Path) -> dict[tuple[str, int, str, str], dict]:
    out: dict[tuple[str, int, str, str], dict] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
                out[(row["case"], row["seed"], row["which"], row["source"])] = row
            except (ValueError, KeyError):
                continue  # a line cut short by an interrupted run
    return out


def _number(x: float) -> object:
    return x if math.isfinite(x) else repr(x)   # JSON has no inf or nan


def _float(x: object) -> float:
    return float(x) if isinstance(x, str) else x  # type: ignore[arg-type]


def worst(rows: list[dict], which: str, key: str) -> tuple[float, int | None]:
    """The smallest margin of `key` over the runs of one script, and its seed (nan, None when
    the check has no margin)."""
    values = [(_float(r[key]), r["seed"]) for r in rows if r["which"] == which]
    values = [v for v in values if not math.isnan(v[0])]
    return min(values) if values else (math.nan, None)


def _cell(margin: float, seed: int | None) -> str:
    if seed is None:
        return "n/a"
    text = f"{margin:+.3g}" if math.isfinite(margin) else ("+inf" if margin > 0 else "-inf")
    return f"{text} (s{seed})"


def table(results: dict[str, list[dict]], seeds: list[int]) -> list[str]:
    """One line per case: its worst margins and how many runs failed."""
    lines = [f"{'case':28} {'failed':>7}  " + "  ".join(f"{h:>18}" for _, _, h in COLUMNS)]
    for name, rows in results.items():
        failed = sum(1 for r in rows if r["problems"])
        cells = [_cell(*worst(rows, which, key)) for which, key, _ in COLUMNS]
        lines.append(f"{name:28} {failed:>3}/{len(rows):<3}  " + "  ".join(f"{c:>18}" for c in cells))
    return lines


def main(argv: list[str] | None = None) -> int:
    from broken_models import CATALOGUE
    from broken_models.seeds import parse_seeds

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--case", nargs="*", default=None, help="only these cases")
    parser.add_argument("--seeds", type=parse_seeds, default=tuple(range(200)), help="e.g. 0-199")
    parser.add_argument("--which", choices=("both", "broken", "fixed"), default="both")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--no-cache", action="store_true", help="train everything again")
    parser.add_argument("--nice", type=int, default=10, help="niceness of the workers (0: none)")
    args = parser.parse_args(argv)
    unknown = [n for n in args.case or [] if n not in CATALOGUE]
    if unknown:
        parser.error(f"no case named {', '.join(unknown)}")
    names = args.case or list(CATALOGUE)
    kinds = ("broken", "fixed") if args.which == "both" else (args.which,)
    hashes = case_hashes(names)
    cache = {} if args.no_cache else _load_cache(args.cache)
    results: dict[str, list[dict]] = {n: [] for n in names}
    todo = []
    for name in names:
        for seed in args.seeds:
            for which in kinds:
                row = cache.get((name, seed, which, hashes[name]))
                if row is None:
                    todo.append((name, seed, which))
                else:
                    results[name].append(row)
    print(f"{len(todo)} runs to train, {sum(map(len, results.values()))} from the cache", flush=True)
    start = time.perf_counter()
    if todo:
        args.cache.parent.mkdir(parents=True, exist_ok=True)
        with open(args.cache, "a", encoding="utf-8") as out, \
                multiprocessing.get_context("spawn").Pool(args.jobs, _init, (args.nice,)) as pool:
            for done, row in enumerate(pool.imap_unordered(_job, todo, chunksize=4), 1):
                for key in ("symptom_margin", "target_margin"):
                    row[key] = _number(row[key])
                out.write(json.dumps(row) + "\n")
                out.flush()
                if row["source"] != hashes[row["case"]]:
                    print(f"note: {row['case']} changed during the sweep; its result is cached "
                          f"under the code it ran, not counted here", flush=True)
                    continue
                results[row["case"]].append(row)
                if row["problems"]:
                    print(f"FAIL {row['case']} {row['which']} seed {row['seed']}: "
                          f"{'; '.join(row['problems'])}", flush=True)
                if done % 200 == 0:
                    print(f"  {done}/{len(todo)} in {time.perf_counter() - start:.0f} s", flush=True)
    print(f"\n{sum(map(len, results.values()))} runs of {len(names)} cases on "
          f"{len(args.seeds)} seeds ({args.seeds[0]}-{args.seeds[-1]}); "
          f"{len(todo)} trained in {time.perf_counter() - start:.0f} s\n")
    print("\n".join(table(results, list(args.seeds))))
    failed = sum(1 for rows in results.values() for r in rows if r["problems"])
    print(f"\n{failed} failing runs")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
