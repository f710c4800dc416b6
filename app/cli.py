"""Command line: ``switchboard serve``, ``switchboard check-config``,
``switchboard codex-catalog`` (app/codex_catalog.py), ``switchboard usage``
(app/usage.py), ``switchboard keys`` and ``switchboard audit`` (app/keys.py)."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import socket
import sys
from typing import Any

LISTEN_ENV = "SWITCHBOARD_LISTEN"  # the address the server listens on, for its ready line


def version() -> str:
    """The installed distribution's version."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("switchboard")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _bind(host: str, port: int) -> socket.socket:
    """The server's socket, bound and not yet listening (uvicorn listens once the app is
    up): an address in use fails here, before the app starts or says it is ready."""
    family, _, _, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(addr)
    except BaseException:
        sock.close()
        raise
    return sock


def _check(path: str) -> int:
    from app.config import ConfigError, load_config
    from app.secret import machine_secret

    try:
        cfg = load_config(path)
        if not cfg.server.secret and cfg.store.enabled and cfg.store.backend == "redis":
            machine_secret(cfg)  # raises: instances sharing a store must be given one secret
    except ConfigError as e:
        print(f"switchboard: {e}", file=sys.stderr)
        return 2
    open_note = "" if cfg.auth.keys else " (no auth.keys: the proxy will be OPEN)"
    print(f"{path}: OK — {len(cfg.providers)} provider(s), {len(cfg.models)} model(s){open_note}")
    return 0


def _codex_catalog(args: argparse.Namespace) -> int:
    import json

    from app.codex_catalog import CatalogError, build_catalog
    from app.config import ConfigError, load_config

    try:
        cfg = load_config(args.config)
        with open(args.base, encoding="utf-8") as f:
            base = json.load(f)
        out = build_catalog(cfg, base, every_model=args.all)
    except (ConfigError, CatalogError, OSError, ValueError) as e:
        print(f"switchboard: {e}", file=sys.stderr)
        return 2
    text = json.dumps(out, ensure_ascii=False, indent=2) + "\n"
    if args.output == "-":
        sys.stdout.write(text)
    else:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    return 0


def _usage(args: argparse.Namespace) -> int:
    """The usage records of the configured store, summed by key, model or day: read straight
    from the store's backend (no server needed)."""
    import asyncio
    import json
    import time

    from app.config import ConfigError, load_config
    from app.usage import UsageError, UsageOff, aggregate, iso, parse_when, read_usage, table

    try:
        # the store and usage sections only: ${VAR}s elsewhere (provider and client keys)
        # need not be set to read the records
        cfg = load_config(args.config, sections=("store", "usage"))
    except ConfigError as e:
        print(f"switchboard: {e}", file=sys.stderr)
        return 2
    now = time.time()
    try:
        since = parse_when(args.since, now)
        until = parse_when(args.until, now, end=True) if args.until else None
    except ValueError as e:
        print(f"switchboard: --since/--until: {e}", file=sys.stderr)
        return 2
    try:
        records = asyncio.run(read_usage(cfg, since, until))
    except UsageError as e:
        print(f"switchboard: {e}", file=sys.stderr)
        return 2 if isinstance(e, UsageOff) else 1
    rows = aggregate(records, args.by)
    if args.json:
        for row in rows:
            print(json.dumps(row, ensure_ascii=False))
        return 0
    span = f"{iso(since)} .. {iso(until) if until is not None else 'now'}"
    print(f"usage by {args.by}, {span} ({cfg.store.backend} store)")
    print(table(rows, args.by))
    return 0


def _keys(args: argparse.Namespace) -> int:
    """``switchboard keys …`` and ``switchboard audit``: runtime keys (app/keys.py), read and
    changed straight on the configured store's backend (no server needed; every running
    instance sees a change within a second)."""
    import asyncio
    import json
    import time

    from app.config import ConfigError, load_config
    from app.keys import KeysError, cli_actor, open_keys
    from app.usage import parse_when

    try:
        cfg = load_config(args.config)
    except ConfigError as e:
        print(f"switchboard: {e}", file=sys.stderr)
        return 2
    body: dict[str, Any] = {}
    if getattr(args, "models", None) is not None:
        body["models"] = [m.strip() for m in args.models.split(",") if m.strip()]
    if getattr(args, "limits", None) is not None:
        try:
            body["limits"] = json.loads(args.limits)
        except ValueError as e:
            print(f"switchboard: --limits is not JSON: {e}", file=sys.stderr)
            return 2
    if getattr(args, "expires", None) is not None:
        body["expires_at"] = args.expires
    actor = cli_actor()

    async def run() -> Any:
        keys, store = await open_keys(cfg)
        try:
            if args.cmd == "audit":
                since = parse_when(args.since, time.time())
                return await keys.audit(since, args.key, args.limit)
            op = args.op
            if op == "list":
                return await keys.all()
            if op == "show":
                return await keys.show(args.name)
            if op == "create":
                return await keys.create({"name": args.name, **body}, actor)
            if op == "update":
                return await keys.update(args.name, body, actor)
            if op == "rotate":
                return await keys.rotate(args.name, args.grace, actor)
            return await keys.revoke(args.name, actor)
        finally:
            if store is not None:
                await store.aclose()

    try:
        out = asyncio.run(run())
    except KeysError as e:
        print(f"switchboard: {e}", file=sys.stderr)
        return 2 if e.status in (400, 404, 409) else 1
    except ValueError as e:
        print(f"switchboard: --since: {e}", file=sys.stderr)
        return 2
    except Exception as e:
        print(f"switchboard: the store did not answer: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if args.json or isinstance(out, dict):
        for row in out if isinstance(out, list) else [out]:
            print(json.dumps(row, ensure_ascii=False))
        if isinstance(out, dict) and "secret" in out:
            print("the secret above is shown once: only its SHA-256 is kept", file=sys.stderr)
        return 0
    if args.cmd == "audit":
        for entry in out:
            detail = json.dumps(entry.get("detail") or {}, ensure_ascii=False)
            print(f"{entry['at']}  {entry['actor']}  {entry['action']:<7} {entry['key']}  {detail}")
        return 0
    print(f"{'NAME':<24} {'SOURCE':<7} {'HINT':<18} {'EXPIRES':<21} LIMITS")
    for k in out:
        lim = dict(k.get("limits") or {})
        if k.get("models") is not None:
            lim["models"] = k["models"]
        expires = k.get("expires_at") or "-"
        if k.get("expired"):
            expires += " (expired)"
        src = k["source"] + ("*" if k["read_only"] else "")
        print(f"{k['name']:<24} {src:<7} {k.get('hint') or '-':<18} {expires:<21} {json.dumps(lim) if lim else '-'}")
    print("(* read-only: in the config file)")
    return 0


def _serve(args: argparse.Namespace) -> int:
    from app.config import ConfigError, load_config
    from app.secret import machine_secret

    try:
        cfg = load_config(args.config)
        machine_secret(cfg)  # made once here, before any worker starts (each reads it then)
    except ConfigError as e:
        print(f"switchboard: {e}", file=sys.stderr)
        return 2
    import uvicorn

    from app import logs

    logs.setup(args.log_level)
    host = args.host or cfg.server.host
    port = cfg.server.port if args.port is None else args.port
    workers = args.workers or cfg.server.workers
    os.environ["SWITCHBOARD_CONFIG"] = os.path.abspath(args.config)
    os.environ["SWITCHBOARD_LOG_LEVEL"] = args.log_level
    options: dict[str, Any] = dict(
        factory=False,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        access_log=False,
        log_level="warning",
        timeout_keep_alive=75,
        # a backstop only: the drain (app.drain) ends every open answer itself at
        # server.drain.timeout_seconds after SIGTERM; uvicorn's wait starts at announce_seconds
        timeout_graceful_shutdown=math.ceil(cfg.server.drain.timeout_seconds - cfg.server.drain.announce_seconds) + 2,
        # the Responses WebSocket transport (app.ws): frames as large as a request body,
        # pings to find dead peers, compression as Codex offers it
        ws="websockets-sansio",
        ws_max_size=cfg.server.max_body_bytes,
        ws_ping_interval=cfg.server.websocket.ping_interval_seconds or None,
        ws_ping_timeout=cfg.server.websocket.ping_interval_seconds or None,
        ws_per_message_deflate=cfg.server.websocket.per_message_deflate,
        server_header=False,
        date_header=False,
        # nothing reads the client address or scheme (logs carry request ids, not peers):
        # no X-Forwarded-* rewriting layer in front of every request
        proxy_headers=False,
    )
    if args.reuse_port:  # one worker of app.workers.Supervisor: its own socket on the shared port
        from app import workers as supervision

        supervision.die_with_parent()
        # bound, not listening: uvicorn listens once the app is up, so until then the kernel
        # sends new connections to the other workers, not into this one's queue
        sock = supervision.reuseport_socket(host, port, listen=False)
        os.environ[LISTEN_ENV] = _url(host, port)
        uvicorn.Server(uvicorn.Config("app.asgi:app", **options)).run(sockets=[sock])
        return 0
    if workers <= 1:
        # bound here, before the app starts: an address in use is one line and exit 1, as
        # with --workers N (app/workers.py), never a "ready" line then uvicorn's error
        try:
            sock = _bind(host, port)
        except OSError as e:
            print(f"switchboard: cannot bind {host}:{port}: {e.strerror or e}", file=sys.stderr)
            return 1
        os.environ[LISTEN_ENV] = _url(host, sock.getsockname()[1])
        server = uvicorn.Server(uvicorn.Config("app.asgi:app", **options))
        with sock:
            server.run(sockets=[sock])
        # as uvicorn.run: an app that never started (its lifespan failed) exits 3
        return 0 if server.started else 3
    if workers > 1:
        from app import workers as supervision

        if supervision.available():
            # -P: the worker imports the installed app, whatever the current directory holds
            argv = [sys.executable, "-P", "-m", "app.cli", "serve", "--config", os.path.abspath(args.config)]
            argv += ["--workers", "1", "--log-level", args.log_level]
            return supervision.Supervisor(argv, workers, host, port).run()
    with contextlib.ExitStack() as stack:
        # uvicorn's own supervisor (no SO_REUSEPORT here): its workers share a metrics directory too
        from app import workers as supervision

        stack.enter_context(supervision.metrics_env())
        os.environ[LISTEN_ENV] = _url(host, port)
        uvicorn.run("app.asgi:app", host=host, port=port, workers=workers, **options)
    return 0


def _replay(args: argparse.Namespace) -> int:
    import orjson

    from app.replay import replay_line

    try:
        with open(args.file, "rb") as f:
            lines = [orjson.loads(x) for x in f if x.strip()]
    except (OSError, orjson.JSONDecodeError) as e:
        print(f"switchboard: {args.file}: {e}", file=sys.stderr)
        return 2
    chosen = list(enumerate(lines)) if args.index is None else [(args.index, lines[args.index])]
    if args.golden:
        if len(chosen) != 1:
            print("switchboard: --golden writes one line: give --index", file=sys.stderr)
            return 2
        path = os.path.join("tests", "golden", "captured", args.golden + ".json")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(orjson.dumps(chosen[0][1], option=orjson.OPT_INDENT_2) + b"\n")
        print(f"wrote {path}")
    changed = 0
    for i, line in chosen:
        out = replay_line(line, i)
        what = "same" if out.same else "CHANGED"
        print(f"#{i} {out.request_id} {line.get('client')}→{line.get('upstream')} {line.get('model')}: {what}")
        if args.show:
            print(out.client_now)
        if not out.same:
            changed += 1
            print(out.diff())
    return 1 if changed else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="switchboard", description="OpenAI-compatible reverse proxy for coding agents")
    ap.add_argument("--version", action="version", version=f"switchboard {version()}")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="serve the proxy")
    s.add_argument("--config", required=True, help="YAML config file")
    s.add_argument("--host", default=None)
    s.add_argument("--port", type=int, default=None)
    s.add_argument("--workers", type=int, default=None)
    s.add_argument(
        "--reuse-port",
        action="store_true",
        help="bind with SO_REUSEPORT and serve in this one process (how --workers N starts each worker)",
    )
    s.add_argument("--log-level", default=os.environ.get("SWITCHBOARD_LOG_LEVEL", "info"))
    c = sub.add_parser("check-config", help="validate a config file and exit")
    c.add_argument("--config", default=None, help="YAML config file (as every other command takes it)")
    c.add_argument("file", nargs="?", default=None, help="the same, given without --config")
    k = sub.add_parser(
        "codex-catalog",
        help="write a Codex model_catalog_json with an entry for each model that has a codex: block",
    )
    k.add_argument("--config", required=True, help="YAML config file")
    k.add_argument("--base", required=True, help="Codex's own catalogue: codex debug models --bundled > FILE")
    k.add_argument("--all", action="store_true", help="an entry for every configured model, codex: block or not")
    k.add_argument("-o", "--output", default="-", help="output file (default: stdout)")
    u = sub.add_parser(
        "usage",
        help="usage records (tokens, cost, errors) summed by key, model or day, read from the configured store",
    )
    u.add_argument("--config", required=True, help="YAML config file (its store holds the records)")
    u.add_argument("--by", choices=("key", "model", "day"), default="key", help="group by (default: key)")
    u.add_argument(
        "--since", default="30d", help="YYYY-MM-DD, an ISO time, or a span back from now: 7d, 24h (default: 30d)"
    )
    u.add_argument("--until", default=None, help="as --since; a date includes its day (default: now)")
    u.add_argument("--json", action="store_true", help="one JSON object per group and line instead of a table")
    r = sub.add_parser(
        "replay",
        help="run captured exchanges (capture: in the config) through today's code, offline, and show what changed",
    )
    r.add_argument("file", help="a capture file (JSON lines)")
    r.add_argument("--index", type=int, default=None, help="only this line (0-based)")
    r.add_argument("--show", action="store_true", help="print the client bytes of each exchange as they are now")
    r.add_argument("--golden", default=None, metavar="NAME", help="write the line to tests/golden/captured/NAME.json")
    ks = sub.add_parser(
        "keys", help="create, list, show, update, rotate and revoke client keys at run time (in the store's backend)"
    )
    kops = ks.add_subparsers(dest="op", required=True)
    for op, helptext in (
        ("list", "every key: the config's (read-only) and the runtime ones"),
        ("show", "one key"),
        ("create", "a new key: its secret is printed once"),
        ("update", "change a key's models, limits or expiry"),
        ("rotate", "a new secret; the old one keeps working for --grace seconds"),
        ("revoke", "refuse the key from now on, on every instance"),
    ):
        o = kops.add_parser(op, help=helptext)
        o.add_argument("--config", required=True, help="YAML config file (its store holds the keys)")
        o.add_argument("--json", action="store_true", help="JSON lines instead of a table")
        if op != "list":
            o.add_argument("name", help="the key's name")
        if op in ("create", "update"):
            o.add_argument("--models", default=None, help="the models the key may use: names or globs, comma-separated")
            o.add_argument(
                "--limits", default=None, help="limits as JSON, as auth.keys[].limits: '{\"requests_per_minute\": 60}'"
            )
            o.add_argument("--expires", default=None, help="30d, 12h, a date, an ISO time, or never")
        if op == "rotate":
            o.add_argument("--grace", type=float, default=None, help="seconds the old secret still works (3600)")
    au = sub.add_parser("audit", help="who changed which runtime key, and when")
    au.add_argument("--config", required=True, help="YAML config file (its store holds the audit)")
    au.add_argument("--key", default=None, help="only this key's entries")
    au.add_argument("--since", default="30d", help="as switchboard usage --since (default: 30d)")
    au.add_argument("--limit", type=int, default=1000, help="at most this many entries, newest first")
    au.add_argument("--json", action="store_true", help="one JSON object per entry and line")
    args = ap.parse_args(argv)
    if args.cmd in ("keys", "audit"):
        return _keys(args)
    if args.cmd == "replay":
        return _replay(args)
    if args.cmd == "check-config":
        if (args.config is None) == (args.file is None):
            c.error("give the config file once: check-config --config FILE (or check-config FILE)")
        return _check(args.config or args.file)
    if args.cmd == "codex-catalog":
        return _codex_catalog(args)
    if args.cmd == "usage":
        return _usage(args)
    return _serve(args)


if __name__ == "__main__":
    sys.exit(main())
