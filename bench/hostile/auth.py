"""Credentials: the UI's password and the fleet's API key."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient
from typer.testing import CliRunner

from bench.hostile.cases import Case


def auth_cases(scratch: Path) -> list[Case]:
    from posttrain.cli import app
    from rollout.agents.envs.service import build_env_app
    from rollout.agents.envs.tasks import CalcTask
    from rollout.auth import require_api_key

    def ui(*options):
        return lambda: CliRunner().invoke(app, ["ui", "--logs", str(scratch / "ui-logs"), *options],
                                          env={"COLUMNS": "200", "PREFECT_SERVER_API_AUTH_STRING": ""})

    service = TestClient(require_api_key(build_env_app(CalcTask()), "s3cret-key"))
    body = {"episode_id": "e", "messages": [{"role": "user", "content": "2 + 2?"}], "reference": "4"}

    def reset(**request):
        return lambda: service.post("/reset", json=body, **request)

    cases = [
        ("UI auth ':' on all interfaces", ui("--host", "0.0.0.0", "--auth-string", ":"), "USER:PASSWORD"),
        ("UI auth without a colon", ui("--host", "0.0.0.0", "--auth-string", "nocolon"), "USER:PASSWORD"),
        ("UI auth with an empty password", ui("--auth-string", "admin:"), "USER:PASSWORD"),
        ("UI on all interfaces without auth", ui("--host", "0.0.0.0"), "--auth-string"),
        ("service request without a key", reset(), "bearer"),
        ("service request with the wrong key", reset(headers={"Authorization": "Bearer guess"}), "bearer"),
        ("the key as a query parameter", reset(params={"api_key": "s3cret-key"}), "bearer"),
        ("the key as basic auth", reset(auth=("user", "s3cret-key")), "bearer"),
    ]
    return [Case("auth", what, attempt, names) for what, attempt, names in cases]
