"""SGLang's router in front of engine replicas: `python -m rollout.router --worker-url URL ... --port N`.

The fleet router of every stage that runs more than one engine, started by the stage (or already running
at scale, given by URL). Its policy is consistent hashing on the `X-SMG-Routing-Key` header: every turn of
one rollout goes to the replica that served the rollout so far, whose prefix cache holds the episode. Its
health checks take a replica that stops answering out of rotation and use it again once it answers; a
request that fails on a replica is retried by the router. It does not forward weight updates: the trainer
pushes them to every worker it lists (rollout/fleet.py). Binds to loopback unless told otherwise; its
Prometheus endpoint too.
"""

from __future__ import annotations

import argparse

from infra.lifetime import die_with_parent
from rollout.auth import api_key

ROUTING_KEY_HEADER = "X-SMG-Routing-Key"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker-url", action="append", default=[], help="an engine replica (repeatable)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--metrics-port", type=int, required=True, help="the router's Prometheus endpoint")
    parser.add_argument("--health-check-interval-s", type=int, default=1)
    parser.add_argument("--health-failure-threshold", type=int, default=2,
                        help="failed health checks in a row before a replica is taken out of rotation")
    parser.add_argument("--request-timeout-s", type=int, default=1800)
    args = parser.parse_args(argv)
    # The kernel's parent-death signal, not exit_with_owner's watcher thread: the router's Rust loop holds
    # the interpreter while it serves, so a Python thread would never get to run; SIGTERM shuts it down.
    die_with_parent()
    # Imported here: the router's Rust extension is large, and only this process needs it.
    from sglang_router.launch_router import launch_router
    from sglang_router.router_args import RouterArgs

    launch_router(RouterArgs(
        worker_urls=args.worker_url, host=args.host, port=args.port, policy="consistent_hashing",
        prometheus_host=args.host, prometheus_port=args.metrics_port, api_key=api_key(),
        health_check_interval_secs=args.health_check_interval_s, health_failure_threshold=args.health_failure_threshold,
        health_success_threshold=1, request_timeout_secs=args.request_timeout_s, log_level="warn",
    ))


if __name__ == "__main__":
    main()
