"""The package's front door: every public name resolves, every CLI command is wired."""
from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import lesson
from lesson.course.cli import COMMANDS, main


def test_every_public_name_resolves():
    for name in lesson.__all__:
        assert getattr(lesson, name) is not None, name


def test_unknown_public_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'NetworkDebuger'"):
        lesson.NetworkDebuger  # noqa: B018 (the typo is the point)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_module_defines_add_arguments_and_run(command):
    module = importlib.import_module(COMMANDS[command][0])
    assert callable(module.add_arguments) and callable(module.run)


def test_help_lists_every_command_without_loading_torch():
    code = ("import sys; from lesson.course.cli import main; main(['--help']); "
            "assert 'torch' not in sys.modules, 'nndebug --help imported torch'")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    for command in COMMANDS:
        assert command in out.stdout


def test_unknown_command_exits_2(capsys):
    assert main(["frobnicate"]) == 2
    assert "unknown command 'frobnicate'" in capsys.readouterr().err
