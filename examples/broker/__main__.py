"""Command line of the broker example.

    python -m shoal.examples.broker serve --agent 127.0.0.1:7947 --id b1 --port 9092 \
        [--check broker-b1] [--session-ttl 3] [--check-interval 1]
    python -m shoal.examples.broker create-topic --broker 127.0.0.1:9092 orders --partitions 8
    python -m shoal.examples.broker produce --broker 127.0.0.1:9092 --topic orders --partition 3 hi
    python -m shoal.examples.broker fetch --agent 127.0.0.1:7947 --topic orders --partition 3
    python -m shoal.examples.broker status --broker 127.0.0.1:9092

`create-topic`, `produce` and `fetch` start from `--broker` addresses, or
from the brokers the agent at `--agent` lists; produce and fetch follow
`not_leader` answers to the leader. Exit codes: 0 done, 1 the request failed
or was refused (create-topic prints which: exists, not_applied, unknown),
2 usage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys

from shoal.client import ShoalError

from .broker import Broker
from .client import BrokerClient, BrokerError, call


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        code: int = asyncio.run(args.run(args))
        return code
    except (BrokerError, ShoalError, OSError) as exc:
        print(f"broker: {exc}", file=sys.stderr)
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m shoal.examples.broker")
    sub = parser.add_subparsers(required=True)
    serve = sub.add_parser("serve", help="run a broker beside a shoal agent")
    serve.add_argument("--agent", default="127.0.0.1:7947", help="the local shoal agent's API")
    serve.add_argument("--id", required=True, help="this broker's unique id")
    serve.add_argument("--host", default="127.0.0.1", help="address to serve on")
    serve.add_argument("--port", type=int, required=True, help="TCP port to serve on")
    serve.add_argument("--check", help="the agent's TTL check to keep passing "
                       "(default broker-<id>; declared in the agent's config file)")  # fmt: skip
    serve.add_argument("--session-ttl", type=float, default=3.0,
                       help="seconds a dead or hung broker stays registered")  # fmt: skip
    serve.add_argument("--check-interval", type=float, default=1.0,
                       help="seconds between two check passes (default 1)")  # fmt: skip
    serve.set_defaults(run=_serve)
    for name, run in (("produce", _produce), ("fetch", _fetch), ("create-topic", _create)):
        cmd = sub.add_parser(name, help=f"{name} through any broker")
        where = cmd.add_mutually_exclusive_group(required=True)
        where.add_argument("--broker", action="append", help="HOST:PORT of a broker")
        where.add_argument("--agent", help="start from the brokers this shoal agent lists")
        cmd.add_argument("--timeout", type=float, default=10.0)
        if name == "create-topic":
            cmd.add_argument("topic")
            cmd.add_argument("--partitions", type=int, required=True)
            cmd.add_argument("--token", help="a retry's: the token an `unknown` answer gave")
        else:
            cmd.add_argument("--topic", required=True)
            cmd.add_argument("--partition", type=int, required=True)
        if name == "produce":
            cmd.add_argument("value", help="a string, stored as given")
        elif name == "fetch":
            cmd.add_argument("--offset", type=int, default=0)
        cmd.set_defaults(run=run)
    status = sub.add_parser("status", help="what one broker believes")
    status.add_argument("--broker", required=True, help="HOST:PORT")
    status.set_defaults(run=_status)
    return parser


async def _serve(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s {args.id} %(name)s %(message)s")  # fmt: skip
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    broker = Broker(
        args.id,
        args.host,
        args.port,
        args.agent,
        check_id=args.check,
        session_ttl_s=args.session_ttl,
        check_interval_s=args.check_interval,
    )
    await broker.run(stop)
    return 0


async def _client(args: argparse.Namespace) -> BrokerClient:
    if args.agent:
        return await BrokerClient.from_agent(args.agent, args.timeout)
    return BrokerClient(args.broker, args.timeout)


async def _produce(args: argparse.Namespace) -> int:
    offset = await (await _client(args)).produce(args.topic, args.partition, args.value)
    print(offset)
    return 0


async def _fetch(args: argparse.Namespace) -> int:
    fetched = await (await _client(args)).fetch(args.topic, args.partition, args.offset)
    for offset, value in fetched:
        print(offset, json.dumps(value))
    return 0


async def _create(args: argparse.Namespace) -> int:
    client = await _client(args)
    answer = await client.create_topic(args.topic, args.partitions, args.token,
                                       min(args.timeout, 60.0))  # fmt: skip
    if answer.get("ok"):
        print(f"created {answer['topic']} ({answer['partitions']} partitions) "
              f"at revision {answer['revision']}")  # fmt: skip
        return 0
    print(f"broker: {answer.get('error')}: {json.dumps(answer)}", file=sys.stderr)
    return 1


async def _status(args: argparse.Namespace) -> int:
    print(json.dumps(await call(args.broker, {"op": "status"}), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
