"""The rollout engine as an HTTP service: `python -m rollout.engine.server --checkpoint URI --port N`.

Endpoints (SGLang's native names and shapes): `POST /generate`, `POST /update_weights` (also as
`/update_weights_from_disk`), SGLang's distributed weight update (`POST /init_weights_update_group`,
`/update_weights_from_distributed`, `/destroy_weights_update_group`: rollout/weight_push.py), `GET /health`,
`GET /get_model_info`. Every route takes the API key when one is set. Bad input is a 4xx naming the
field or the limit (a body too large to read is a 413 before it is parsed: rollout/engine/request_bodies.py);
a checkpoint that cannot be loaded leaves the served weights as they were, and one that is not
the served architecture, not from a store or a `--weights-dir`, or too large for the memory left is
refused before loading (rollout/engine/weight_updates.py). A weight update group that does not form within
`--weight-group-join-timeout-s` is a 400 naming its master and the timeout.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import shutil
import signal
import tempfile
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import get_args

import torch
import torch.distributed as dist
import uvicorn
from fastapi import FastAPI, HTTPException
from fastapi.responses import JSONResponse

from infra.lifetime import end_process, exit_with_owner
from model.precision import Precision
from model.routing import encode_routed
from rollout.auth import API_KEY_ENV, api_key, require_api_key
from rollout.engine.batching import RequestBatcher
from rollout.engine.generation import Completion, Engine, PromptError
from rollout.engine.main_thread import MainThreadRunner
from rollout.engine.request_bodies import json_body
from rollout.engine.weight_updates import (
    UpdateRefused,
    available_memory,
    check_architecture,
    check_memory,
    inspect,
    receive_into,
)
from rollout.http_errors import install_validation_errors
from rollout.process_group import JOIN_TIMEOUT_S, join_group
from rollout.protocol import (
    ENGINE_HEADER,
    GROUP_NAME,
    MAX_TENSORS,
    WEIGHT_UPDATE_BODY,
    GenerateOutput,
    GenerateRequest,
    InitWeightsUpdateGroup,
    MetaInfo,
    RequestLimits,
    UniformBatch,
    UpdateWeightsFromDistributed,
    UpdateWeightsRequest,
    UpdateWeightsResponse,
)
from rollout.served_checkpoint import NOT_SERVED, local_checkpoint

log = logging.getLogger("rollout.engine.server")


def generate_output(prompt: list[int], completion: Completion, batch: UniformBatch, version: str,
                    request_id: str | None) -> dict:
    """One prompt's answer in SGLang's shape (sglang.api.v1.GenerateResponse)."""
    meta = MetaInfo(id=request_id or uuid.uuid4().hex, prompt_tokens=len(prompt),
                    completion_tokens=len(completion.output_ids), finish_reason=completion.finish_reason,
                    weight_version=version)
    if batch.return_logprob:
        meta.output_token_logprobs = [(lp, t, None) for lp, t in zip(completion.output_logprobs, completion.output_ids, strict=True)]
    if completion.prompt_logprobs is not None:
        start = max(batch.logprob_start_len, 0)
        meta.input_token_logprobs = [(lp, t, None) for lp, t in zip(completion.prompt_logprobs, prompt[start:], strict=True)]
    if completion.routed_experts is not None:
        meta.routed_experts = encode_routed(completion.routed_experts)
    if completion.spec_verify_ct:
        meta.spec_verify_ct = completion.spec_verify_ct
        # Tokens per verification step (1 + the drafts kept): not the completion's length over the steps, which
        # counts the tokens decoded plainly before speculation took over (`speculative_max_rows`).
        meta.spec_accept_length = 1 + completion.spec_num_correct_drafts / completion.spec_verify_ct
        meta.spec_num_proposed_drafts = completion.spec_num_proposed_drafts
        meta.spec_num_correct_drafts = completion.spec_num_correct_drafts
    wire = GenerateOutput(output_ids=completion.output_ids, meta_info=meta).model_dump(exclude_none=True)
    wire["meta_info"]["finish_reason"] = completion.finish_reason.wire()
    return wire


async def _answer(batcher: RequestBatcher, indices: list[int], batch: UniformBatch) -> tuple[list[Completion], str]:
    try:
        return await batcher.generate(batch)
    except PromptError as error:  # named by its position in the request, not in its batch
        raise PromptError(indices[error.index], error.reason) from error


def build_app(engine: Engine, run: Callable[..., Future], workdir: Path, limits: RequestLimits | None = None,
              key: str | None = None, weights_dirs: tuple[Path, ...] = (), advertised_url: str = "",
              group_join_timeout_s: float = JOIN_TIMEOUT_S) -> FastAPI:
    """`run(fn, *args)`: where every computation on the engine happens (the main thread: main_thread.py)."""
    app = require_api_key(install_validation_errors(FastAPI(title="posttrain rollout engine")), key)

    batcher = RequestBatcher(engine, run)

    @app.get("/get_model_info")
    def model_info() -> dict:
        return {"model_path": engine.checkpoint_dir, "weight_version": engine.weight_version,
                "max_context": engine.max_context}

    limits = limits or RequestLimits()
    in_flight = [0]  # requests past the checks and not yet answered (one event loop: no lock needed)

    # Async endpoints run on the event loop, not in the worker threads that blocked requests hold:
    # /health answers at once however many generations are queued (routers time replicas out on it).
    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", "weight_version": engine.weight_version, "in_flight": in_flight[0]}

    # Every route's body: refused past its limits, parsed off the event loop (rollout/engine/request_bodies.py).
    # A parameter's default, not an Annotated type: this module's annotations are strings that FastAPI resolves
    # in its globals, where these are not.
    generate_body = json_body(GenerateRequest, limits.body_limits(), "what --max-request-tokens and --max-prompts allow")

    def weight_update_body(kind: type):
        return json_body(kind, WEIGHT_UPDATE_BODY, f"a weight update lists at most {MAX_TENSORS} tensors")

    @app.post("/generate")
    async def generate(request: GenerateRequest = generate_body):
        if (problem := limits.problem(request)) is not None:
            raise HTTPException(status_code=413, detail=problem)
        if in_flight[0] >= limits.max_in_flight:
            raise HTTPException(status_code=429, detail=f"{in_flight[0]} requests in flight; this engine takes at "
                                                        f"most {limits.max_in_flight} at once (--max-in-flight)")
        in_flight[0] += 1
        parts = request.uniform_batches()
        try:
            answers = await asyncio.gather(*(_answer(batcher, indices, batch) for indices, batch in parts))
        except ValueError as error:
            raise HTTPException(status_code=400, detail=str(error)) from error
        finally:
            in_flight[0] -= 1
        outputs: list[dict] = [{} for _ in request.prompts()]
        request_ids = request.request_ids()
        for (indices, batch), (completions, version) in zip(parts, answers, strict=True):
            for index, prompt, completion in zip(indices, batch.prompts, completions, strict=True):
                outputs[index] = generate_output(prompt, completion, batch, version, request_ids[index])
        return JSONResponse(outputs if request.batched else outputs[0], headers={ENGINE_HEADER: advertised_url})

    downloads: list[Path] = []  # the download the engine serves from, if any: only it is kept

    def update(request: UpdateWeightsRequest = weight_update_body(UpdateWeightsRequest)) -> UpdateWeightsResponse:
        try:
            incoming = inspect(request.model_path, list(weights_dirs), NOT_SERVED)
            check_architecture(request.model_path, engine.model.config.to_dict(), incoming.config)
            check_memory(request.model_path, incoming.weight_bytes,
                         available_memory(next(engine.model.parameters()).device))
        except UpdateRefused as refused:
            log.warning("update_weights refused: %s", refused.detail)
            raise HTTPException(status_code=refused.status_code, detail=refused.detail) from refused
        target = Path(tempfile.mkdtemp(dir=workdir))
        try:
            directory = local_checkpoint(request.model_path, target)
            version = run(engine.update_weights, directory, request.weight_version).result()
        except Exception as error:  # the old weights keep serving; the caller learns why
            shutil.rmtree(target, ignore_errors=True)
            log.exception("update_weights from %s failed", request.model_path)
            raise HTTPException(status_code=400, detail=f"{request.model_path}: {error}") from error
        for old in downloads:
            shutil.rmtree(old, ignore_errors=True)
        downloads[:] = [target]
        log.info("serving %s as weight version %s", request.model_path, version)
        return UpdateWeightsResponse(success=True, message=f"loaded {request.model_path}", weight_version=version)

    app.post("/update_weights")(update)
    app.post("/update_weights_from_disk")(update)

    groups: dict[str, dist.ProcessGroup] = {}  # SGLang's weight update groups this engine joined, by name

    @app.post("/init_weights_update_group")
    def init_group(request: InitWeightsUpdateGroup = weight_update_body(InitWeightsUpdateGroup)):
        try:  # blocks until every member joined (the trainer joins as rank 0 meanwhile), at most the join timeout
            groups[request.group_name] = join_group(request.backend, request.master_address, request.master_port,
                                                    request.rank_offset, request.world_size,
                                                    join_timeout_s=group_join_timeout_s)
        except Exception as error:  # SGLang's answer to a group that did not form: a 400 saying why
            log.exception("joining weight update group %s failed", request.group_name)
            return JSONResponse({"success": False, "message": f"{request.group_name}: {error}"}, status_code=400)
        log.info("joined weight update group %s as rank %d of %d", request.group_name, request.rank_offset,
                 request.world_size)
        return {"success": True, "message": f"joined {request.group_name} as rank {request.rank_offset}"}

    @app.post("/update_weights_from_distributed")
    def update_distributed(request: UpdateWeightsFromDistributed = weight_update_body(UpdateWeightsFromDistributed)) -> dict:
        group = groups.get(request.group_name)
        if group is None:
            raise HTTPException(status_code=400, detail=f"group_name: {request.group_name!r} was not initialised "
                                                        f"(POST /init_weights_update_group first)")
        try:
            version = run(engine.update_weights_in_place, lambda served: receive_into(group, request, served),
                          request.weight_version).result()
        except Exception as error:
            log.exception("update_weights_from_distributed failed")
            return {"success": False, "message": str(error)}
        log.info("serving %d tensors from %s as weight version %s", len(request.names), request.group_name, version)
        return {"success": True, "message": f"received {len(request.names)} tensors", "weight_version": version}

    @app.post("/destroy_weights_update_group")
    def destroy_group(request: dict = weight_update_body(dict)) -> dict:
        groups.pop(request.get("group_name", GROUP_NAME), None)
        return {"success": True, "message": "destroyed"}

    return app


def _exit_on_signal(signum, frame) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True, help="checkpoint URI (file://, s3://) or local directory")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--precision", choices=get_args(Precision), default="auto",
                        help="the weights' dtype when served: auto is bf16 on a GPU, fp32 on a CPU")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="a new or empty folder for downloaded checkpoints, removed when the engine exits "
                             "(default: a new temp folder)")
    parser.add_argument("--weights-dir", type=Path, action="append", default=[],
                        help="a local folder update_weights may load from (repeatable); store URIs always may")
    parser.add_argument("--advertise-url", default=None,
                        help="the URL clients and routers reach this engine at (default http://HOST:PORT)")
    parser.add_argument("--api-key", default=api_key(), help=f"require this bearer token on every route (default ${API_KEY_ENV})")
    defaults = RequestLimits()
    parser.add_argument("--max-prompts", type=int, default=defaults.max_prompts, help="prompts per /generate request")
    parser.add_argument("--max-request-tokens", type=int, default=defaults.max_tokens,
                        help="prompt tokens plus max_new_tokens per /generate request")
    parser.add_argument("--max-in-flight", type=int, default=defaults.max_in_flight,
                        help="/generate requests queued or generating at once")
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU threads the engine computes with (default: torch's, one per core)")
    parser.add_argument("--speculative-num-steps", type=int, default=0,
                        help="draft tokens per decoding step from the checkpoint's MTP layer (SGLang's flag; 0: off)")
    parser.add_argument("--speculative-max-rows", type=int, default=None,
                        help="speculate only while at most this many rows of a batch decode (default: always)")
    parser.add_argument("--weight-group-join-timeout-s", type=float, default=JOIN_TIMEOUT_S,
                        help="how long /init_weights_update_group waits for the trainer's group to form")
    args = parser.parse_args(argv)
    if args.speculative_max_rows is not None and (args.speculative_max_rows < 1 or not args.speculative_num_steps):
        parser.error(f"--speculative-max-rows {args.speculative_max_rows}: give 1 or more, with --speculative-num-steps")
    if not 0 < args.weight_group_join_timeout_s < math.inf:
        parser.error(f"--weight-group-join-timeout-s: {args.weight_group_join_timeout_s}; give a positive number of seconds")
    exit_with_owner()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="posttrain-engine-"))
    workdir.mkdir(parents=True, exist_ok=True)
    if any(workdir.iterdir()):
        parser.error(f"--workdir {workdir} is not empty: the engine removes it when it exits")
    # SIGTERM (and the owner's death, which sends it) becomes an exception on the main thread, where the
    # engine runs: it unwinds through the `finally`s below instead of ending the process where it stands.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        engine = Engine(local_checkpoint(args.checkpoint, workdir), seed=args.seed, precision=args.precision,
                        speculative_steps=args.speculative_num_steps, speculative_max_rows=args.speculative_max_rows)
        limits = RequestLimits(max_prompts=args.max_prompts, max_tokens=args.max_request_tokens,
                               max_in_flight=args.max_in_flight)
        runner = MainThreadRunner()
        app = build_app(engine, runner.submit, workdir, limits, args.api_key, tuple(args.weights_dir),
                        args.advertise_url or f"http://{args.host}:{args.port}", args.weight_group_join_timeout_s)
        server = uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, log_level="warning"))
        http = threading.Thread(target=server.run, name="http", daemon=True)
        http.start()
        try:
            runner.run_while(http)  # the engine computes here, on the thread that loaded it
        finally:
            server.should_exit = True
            http.join(timeout=10)
    finally:  # the downloads go with the engine (SIGTERM, Ctrl-C and its owner's death included)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    # An engine ends on SIGTERM (its owner's stop) as SystemExit, its downloads already removed: what is left,
    # the interpreter's teardown of torch, would hold up every stop for 1.5 s (infra.lifetime.end_process).
    try:
        main()
    except SystemExit as stop:  # SIGTERM's (128 + 15) or argparse's (2, its message printed)
        end_process(stop.code)
    end_process(0)
