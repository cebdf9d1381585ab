"""Agent tasks load by name (the `posttrain.tasks` entry point group) or dotted path, and only task classes are built."""

from __future__ import annotations

import pytest

from rollout.agents.envs.catalog import UnknownTaskError, known_tasks, load_task, task_class
from rollout.agents.envs.tasks import CalcTask, SearchTask
from stages.agentic.config import AgenticRlConfig

BUILT: list[str] = []


class Recorder:
    """Not a task: constructing it would leave a trace."""

    def __init__(self):
        BUILT.append("built")


class EchoTask:
    """A researcher's own task, by dotted path."""

    name, tools = "echo", []

    def check_row(self, reference, metadata) -> None:
        pass

    def execute(self, call, episode) -> str:
        return "echo"

    def succeeded(self, episode) -> bool:
        return True


def test_installed_tasks_load_by_entry_point_name():
    assert {"calc", "search"} <= set(known_tasks())
    assert isinstance(load_task("search"), SearchTask) and task_class("calc") is CalcTask


def test_a_task_loads_by_dotted_path_in_either_spelling():
    assert isinstance(load_task("tests.test_task_catalog.EchoTask"), EchoTask)
    assert task_class("tests.test_task_catalog:EchoTask") is EchoTask


def test_what_is_not_a_task_is_refused_and_never_constructed():
    with pytest.raises(UnknownTaskError, match="is not an AgentTask class"):
        load_task("tests.test_task_catalog.Recorder")
    assert BUILT == []
    with pytest.raises(UnknownTaskError, match="cannot be imported"):
        task_class("tests.no_such_module.Task")
    with pytest.raises(UnknownTaskError, match="unknown agent task 'browse'"):
        task_class("browse")


def test_agentic_config_names_the_unknown_task():
    with pytest.raises(ValueError, match="unknown agent task 'browse'"):
        AgenticRlConfig(run_id="r", init_checkpoint="c", datasets=["d"], tasks={"search": 1.0, "browse": 1.0})
