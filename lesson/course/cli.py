"""The `nndebug` command line: one subcommand per course activity.

Each subcommand lives in the module that owns its idea; this file only routes. A module
registered here defines `add_arguments(parser, command)` and `run(args) -> int` (the exit
status; `args.command` names the subcommand, for modules that serve several), and is imported
only when its subcommand runs, so `nndebug --help` does not load torch.
"""
from __future__ import annotations

import argparse
import importlib
import sys

#: subcommand -> (module, one-line help), in the order a student meets them
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("lesson.course.demo", "run the lesson's demo: three broken networks and a healthy one"),
    "clinic": ("lesson.course.clinic", "diagnose every case of the broken-model catalogue"),
    "list": ("lesson.course.browse", "list the catalogue's cases by family"),
    "show": ("lesson.course.browse", "show one case: symptom, then diff, fix and lesson section"),
    "exercises": ("lesson.course.learner.commands", "your progress through the exercises"),
    "check": ("lesson.course.learner.commands", "check one exercise notebook and offer a hint"),
    "hint": ("lesson.course.learner.commands", "show the next hint of an exercise"),
    "watch": ("lesson.course.learner.commands", "re-check the current exercise whenever it is saved"),
    "report": ("lesson.course.report", "render a debugger report into the diagnosis prompt"),
    "preflight": ("lesson.course.preflight_catalogue", "run the seven pre-training checks on your model"),
    "grade": ("lesson.course.grading.cli", "grade a class on Dask into nbgrader's gradebook "
              "(instructors)"),
}


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: nndebug COMMAND [options]", "", "commands:"]
    lines += [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "nndebug COMMAND --help shows a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in {"-h", "--help", "help"}:
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"nndebug: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    parser = argparse.ArgumentParser(prog=f"nndebug {name}", description=COMMANDS[name][1])
    module.add_arguments(parser, name)
    args = parser.parse_args(rest)
    args.command = name
    try:
        return int(module.run(args) or 0)
    except BrokenPipeError:  # `nndebug list | head` closed the pipe: not an error
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
