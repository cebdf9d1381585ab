"""`posttrain pipeline` takes its options from PipelineParams: one declaration, the same validation."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from flows.params import PipelineParams
from posttrain.cli import app


def test_every_pipeline_param_is_an_option_with_its_description():
    help_text = CliRunner().invoke(app, ["pipeline", "--help"], env={"COLUMNS": "200"}).output
    for flag in ("--preset", "--seed", "--store", "--reports", "--nproc", "--from-stage", "--init"):
        assert flag in help_text
    assert PipelineParams.model_fields["nproc"].description in help_text
    assert "sft|reasoning_rl|agentic_rl|general_rl|distill" in help_text  # the Literal's choices


def test_values_the_model_refuses_are_usage_errors_naming_the_flag():
    unknown = CliRunner().invoke(app, ["pipeline", "--from-stage", "nope"], env={"COLUMNS": "200"})
    assert unknown.exit_code == 2 and "--from-stage" in unknown.output
    lonely_init = CliRunner().invoke(app, ["pipeline", "--init", "some-checkpoint"], env={"COLUMNS": "200"})
    assert lonely_init.exit_code == 2 and "give from_stage too" in lonely_init.output
    zero = CliRunner().invoke(app, ["pipeline", "--nproc", "0"], env={"COLUMNS": "200"})
    assert zero.exit_code == 2 and "--nproc" in zero.output


def test_prefect_analytics_are_off_in_every_process_the_cli_starts():
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_SERVER_ANALYTICS_ENABLED", "DO_NOT_TRACK")}
    probe = ("import posttrain.cli, subprocess, sys; "
             "print(subprocess.run([sys.executable, '-c', 'from prefect.settings import get_current_settings; "
             "print(get_current_settings().server.analytics_enabled)'], capture_output=True, text=True).stdout.strip())")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    assert result.stdout.strip() == "False", result.stderr


def test_the_ui_refuses_to_listen_beyond_this_machine_without_a_password(tmp_path):
    exposed = CliRunner().invoke(app, ["ui", "--host", "0.0.0.0", "--logs", str(tmp_path)],
                                 env={"COLUMNS": "200", "PREFECT_SERVER_API_AUTH_STRING": ""})
    assert exposed.exit_code == 1 and "--auth-string" in exposed.output
    assert not list(tmp_path.iterdir())  # refused before anything started


@pytest.mark.parametrize("auth", [":", "nocolon", "user:", ":password"])
def test_the_ui_refuses_an_auth_string_without_a_user_and_a_password(tmp_path, auth):
    refused = CliRunner().invoke(app, ["ui", "--host", "0.0.0.0", "--logs", str(tmp_path), "--auth-string", auth],
                                 env={"COLUMNS": "200"})
    assert refused.exit_code == 1 and "USER:PASSWORD" in refused.output
    assert not list(tmp_path.iterdir())  # refused before anything started
