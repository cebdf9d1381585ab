"""Screenshots of what a training lead meets in the UI, from a real browser: the Run form's pickers (a checkpoint's
searchable list, the datasets' multi-select), the pipeline's spec editor, the runs listed by run_id, two runs compared, a run that
failed on its inputs with its one-line message, and a stage run's learning curves.

It starts `posttrain ui` on a free loopback port over a store that holds the demo's artifacts (`make demo` first),
runs reasoning RL from `sft:latest` for a few steps and a run with a dataset that does not exist, and has
Chromium (Debian's package) open each page through Playwright (`uv pip install -e '.[ui-check]'`), writing a
PNG per page into OUT. Nothing is asserted here: the pages are for a person to look at; the tests check what
the API serves (tests/test_general_rl_deployment.py).

    .venv/bin/python bench/ui_screenshots.py --store artifacts --out ui-shots
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from infra.ports import free_port  # noqa: E402
from infra.references import resolve_checkpoint  # noqa: E402
from infra.store import open_store  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]
FINAL = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")


def deployment_with_pickers(api: str, ui: subprocess.Popen, timeout_s: float = 300) -> str:
    """reasoning_rl's deployment id, once its form offers the store's checkpoints (flows/pickers.py)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ui.poll() is not None:
            raise SystemExit("posttrain ui exited; see its log in OUT")
        try:
            answer = requests.get(f"{api}/deployments/name/reasoning_rl/reasoning_rl", timeout=5)
        except requests.ConnectionError:
            answer = None
        if answer is not None and answer.status_code == 200:
            fields = answer.json()["parameter_openapi_schema"]["definitions"]["ReasoningRlConfig"]["properties"]
            if "anyOf" in fields["init_checkpoint"]:
                return answer.json()["id"]
        time.sleep(2)
    raise SystemExit(f"no deployment with pickers within {timeout_s:.0f} s")


def field(page, label: str):
    """The form's field labelled `label` (an optional one's label ends in ' (Optional)')."""
    return page.locator(f".schema-form-property:has(.schema-form-property__label:text-is('{label}'))").last


def finished(api: str, run_id: str) -> dict:
    while (state := requests.get(f"{api}/flow_runs/{run_id}", timeout=10).json()["state"])["type"] not in FINAL:
        time.sleep(2)
    return state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="artifacts", help="a store with the demo's checkpoints and datasets")
    parser.add_argument("--out", type=Path, default=Path("ui-shots"))
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    args.out.mkdir(parents=True, exist_ok=True)
    port = free_port("127.0.0.1")
    base, api = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port}/api"
    env = {**os.environ, "POSTTRAIN_STORE": str(Path(args.store).resolve()), "POSTTRAIN_WORKDIR": str(args.out / "work")}
    env.pop("PREFECT_API_URL", None)
    with (args.out / "ui.log").open("wb") as log:
        ui = subprocess.Popen([str(REPO / ".venv/bin/posttrain"), "ui", "--port", str(port), "--only", "reasoning_rl", "--only", "pipeline",
                               "--logs", str(args.out / "logs")], cwd=args.out, env=env, stdout=log,
                              stderr=subprocess.STDOUT)
    try:
        deployment = deployment_with_pickers(api, ui)

        def run(config: dict) -> str:
            evaluation = {"prompts": 16, "samples_per_prompt": 2, "max_new_tokens": 48}
            return requests.post(f"{api}/deployments/{deployment}/create_flow_run", timeout=30, json={
                "parameters": {"config": config, "eval_settings": evaluation}}).json()["id"]

        earlier = resolve_checkpoint(open_store(env["POSTTRAIN_STORE"]), "reasoning_rl:latest", "earlier run")
        trained = run({"run_id": f"lead-rl-{time.strftime('%H%M%S')}", "init_checkpoint": "sft:latest", "datasets": ["arith:latest"],
                       "max_steps": 6, "prompts_per_step": 2, "group_size": 4, "optimizer": {"warmup_steps": 1}})
        print("trained:", finished(api, trained)["type"], flush=True)
        typo = run({"run_id": f"lead-typo-{time.strftime('%H%M%S')}", "init_checkpoint": "sft:latest", "datasets": ["arihtm:latest"],
                    "max_steps": 6, "optimizer": {"warmup_steps": 1}})
        print("typo:", finished(api, typo).get("message"), flush=True)
        # Compared with the store's earlier reasoning RL run, on the UI's Artifacts page.
        subprocess.run([str(REPO / ".venv/bin/posttrain"), "runs", "compare", earlier, "reasoning_rl:latest", "--publish"],
                       env=env | {"PREFECT_API_URL": api}, check=True, stdout=subprocess.DEVNULL)
        compared = requests.post(f"{api}/artifacts/filter", timeout=10, json={
            "artifacts": {"key": {"any_": ["runs-compare"]}}, "sort": "CREATED_DESC"}).json()
        curves = requests.post(f"{api}/artifacts/filter", timeout=10, json={
            "artifacts": {"key": {"any_": ["reasoning-rl-curves"]}}, "sort": "CREATED_DESC"}).json()
        pages = {"form": f"{base}/deployments/deployment/{deployment}/run", "runs": f"{base}/runs",
                 "failed-run": f"{base}/runs/flow-run/{typo}", "trained-run": f"{base}/runs/flow-run/{trained}",
                 "curves": f"{base}/artifacts/artifact/{curves[0]['id']}",
                 "compare": f"{base}/artifacts/artifact/{compared[0]['id']}"}
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=args.chromium, args=CHROMIUM_FLAGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1100})
            for name, url in pages.items():
                page.goto(url)
                page.wait_for_timeout(4000)  # the UI fetches after its first paint
                page.screenshot(path=str(args.out / f"{name}.png"), full_page=True)
                print(args.out / f"{name}.png", flush=True)
            page.goto(pages["form"])
            page.wait_for_timeout(4000)
            # The pickers, opened (the UI's own select: a button whose list opens from the keyboard).
            for label, shot in (("Init Checkpoint", "form-picker-open"), ("Datasets", "form-datasets-open")):
                field(page, label).locator(".p-select").first.click()
                page.keyboard.press("ArrowDown")
                page.wait_for_timeout(1500)
                page.screenshot(path=str(args.out / f"{shot}.png"))
                print(f"the {label} picker offers:", page.locator("[role=option]").all_inner_texts(), flush=True)
                page.keyboard.press("Escape")
            pipeline = requests.get(f"{api}/deployments/name/pipeline/pipeline", timeout=10).json()["id"]
            page.goto(f"{base}/deployments/deployment/{pipeline}/run")
            page.wait_for_timeout(4000)
            field(page, "Spec (Optional)").locator("textarea").first.click()
            page.keyboard.type("name: mine\nseed: 3\nstages:\n  sft:\n    max_steps: 20\n")
            page.wait_for_timeout(1000)  # the editor grows with its lines after the keys
            page.screenshot(path=str(args.out / "pipeline-form-spec.png"))
            browser.close()
    finally:
        ui.send_signal(2)  # as Ctrl-C: posttrain ui stops its server and deployments
        ui.wait(timeout=120)


if __name__ == "__main__":
    main()
