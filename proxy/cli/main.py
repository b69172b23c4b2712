"""The ``graphgate`` command line. Every setting is also a flag, which overrides the environment."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from proxy.core.hosts import bind_is_loopback, local_url
from proxy.core.settings import DEFAULTS_IN_WORDS, SETTINGS, Settings, SettingsError, settings_markdown
from proxy.core.settings_rows import settings_rows

log = logging.getLogger("graphgate")

# what `graphgate --help` prints (plain text: the module docstring's markup would show as is)
DESCRIPTION = ("GraphGate: an Ollama-compatible chat gateway that grounds every chat turn in your own documents. "
               "Every setting is also a flag of each command, which overrides its environment variable.")


KB_HELP = "the knowledge base to work on (default: default; docs/knowledge-bases.md)"

def _add_setting_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("settings (each overrides its environment variable)")
    for setting in SETTINGS:
        text = f"{setting.help} [default: {DEFAULTS_IN_WORDS.get(setting.name) or setting.default or 'unset'}]"
        # argparse %-formats help text: a literal "80 %" would crash every --help
        group.add_argument(setting.flag, dest=setting.name, metavar=setting.env, help=text.replace("%", "%%"))


def installed_version() -> str:
    try:
        return version("graphgate")
    except PackageNotFoundError:   # run from a checkout that was never installed
        return "(not installed: run from a checkout)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="graphgate", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"graphgate {installed_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the gateway (Ollama API on GRAPHGATE_HOST:GRAPHGATE_PORT)")
    _add_setting_flags(serve)
    show = commands.add_parser("settings", help="print the effective settings and where each came from")
    show.add_argument("--markdown", action="store_true", help="print the reference table of docs/configuration.md")
    _add_setting_flags(show)
    ingest = commands.add_parser("ingest", help="add files and folders (recursively) to the knowledge store")
    ingest.add_argument("paths", nargs="+", metavar="PATH")
    ingest.add_argument("--kb", metavar="NAME", help=KB_HELP)
    ingest.add_argument("--create", action="store_true",
                        help="when no gateway answers and no store exists yet, create a new store (in "
                             "GRAPHGATE_DATA_DIR) instead of stopping")
    ingest.add_argument("--metadata", metavar="JSON",
                        help='metadata for every file, a JSON object: \'{"category": "hr", "year": 2024}\'')
    ingest.add_argument("--meta", action="append", metavar="KEY=VALUE",
                        help="one metadata value (repeatable; a number reads as a number, a key given again makes "
                             "a list; over --metadata's same key)")
    _add_setting_flags(ingest)
    status = commands.add_parser("status", help="say what the knowledge base holds, what it is working on and "
                                                "what is wrong")
    status.add_argument("--kb", metavar="NAME", help=KB_HELP)
    status.add_argument("--json", action="store_true", help="print the store's counts and the pipeline's work as JSON")
    _add_setting_flags(status)
    query = commands.add_parser("query", help="retrieve for a question and print what chat augmentation would inject")
    query.add_argument("text", metavar="QUESTION")
    query.add_argument("--num-ctx", type=int, help="simulate a model context window of this many tokens")
    query.add_argument("--answer", action="store_true", help="also generate the answer")
    query.add_argument("--json", action="store_true", help="print the whole result as JSON")
    query.add_argument("--kb", metavar="NAME", help=KB_HELP)
    query.add_argument("--filter", metavar="JSON",
                       help='only documents whose metadata match, a JSON object: \'{"category": "hr"}\'')
    _add_setting_flags(query)
    reindex = commands.add_parser("reindex", help="rebuild indexes and graph from the database; first re-embed "
                                                  "everything with GRAPHGATE_EMBED_MODEL when the store's vectors "
                                                  "come from another model (resumable: run it again after an "
                                                  "interruption)")
    reindex.add_argument("--kb", metavar="NAME", help=KB_HELP)
    _add_setting_flags(reindex)
    migrate = commands.add_parser("migrate-store", help="copy every knowledge base between the embedded store "
                                  "(--data-dir) and PostgreSQL, checked table by table (stop the gateway first)",
                                  description="Copy every knowledge base between the embedded store at --data-dir "
                                  "and a PostgreSQL server (a schema kb_<name> each), then check every table (rows "
                                  "and checksum). The gateway must not be running on either store: stop `graphgate "
                                  "serve` first. A target that holds documents is refused unless --replace "
                                  "(docs/postgresql.md).")
    direction = migrate.add_mutually_exclusive_group(required=True)
    direction.add_argument("--to", metavar="URI", help="copy the embedded store into this PostgreSQL server "
                           "(postgresql://user:password@host:5432/db), a schema kb_<name> per base")
    direction.add_argument("--from", dest="source", metavar="URI", help="copy this PostgreSQL server's bases "
                           "back into the embedded store at --data-dir")
    migrate.add_argument("--kb", metavar="NAME", help="only this knowledge base (default: all of them)")
    migrate.add_argument("--replace", action="store_true", help="replace a target base that already holds "
                         "documents (its schema, or its database, made anew) instead of refusing")
    _add_setting_flags(migrate)
    mcp = commands.add_parser("mcp", help="serve the knowledge base to an MCP client over stdio (Claude Desktop...): "
                                          "through the running gateway, else on the store itself (docs/mcp.md)")
    mcp.add_argument("--create", action="store_true",
                     help="when no gateway answers and no store exists yet, create a new store (in "
                          "GRAPHGATE_DATA_DIR) instead of stopping")
    _add_setting_flags(mcp)
    keys = commands.add_parser("keys", help="create, list and revoke API keys limited to knowledge bases and a role "
                                            "(through the running gateway, else on the data directory)")
    actions = keys.add_subparsers(dest="keys_command", required=True)
    create_key = actions.add_parser("create", help="make a key and print it (once: it is not stored)")
    create_key.add_argument("--name", required=True, help="what the key is for (1 to 64 characters)")
    create_key.add_argument("--role", required=True, choices=("read", "write", "admin"),
                            help="read: chat and query; write: also documents and curation; admin: also the base")
    create_key.add_argument("--kb", action="append", metavar="NAME",
                            help="a knowledge base the key may use (repeatable; none given: every base)")
    _add_setting_flags(create_key)
    _add_setting_flags(actions.add_parser("list", help="the stored keys (never their secret)"))
    revoke_key = actions.add_parser("revoke", help="revoke a key: it stops working at once")
    revoke_key.add_argument("id", metavar="ID", help="the key's id (graphgate keys list shows it)")
    _add_setting_flags(revoke_key)
    return parser


def serve(settings: Settings) -> int:
    import uvicorn

    from proxy.app import create_app
    from proxy.cli import serving
    from proxy.core.errors import GraphGateError

    # the store and the port are this process's before anything starts, or one sentence says who has them
    busy = serving.store_in_use(settings)
    if busy is not None:
        advice = ": use it, or stop it before starting another" if busy.startswith("GraphGate is already") else ""
        print(f"graphgate: {busy}{advice}", file=sys.stderr)
        return 1
    try:
        sockets = serving.bind(settings.host, settings.port)
    except OSError as exc:
        print(f"graphgate: {serving.port_problem(settings.host, settings.port, exc)}", file=sys.stderr)
        return 1
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for notice in settings.notices:
        log.warning("%s", notice)
    log.info("knowledge store: %s", settings.data_dir)
    if not bind_is_loopback(settings.host) and not settings.api_key:
        log.warning("listening on %s without GRAPHGATE_API_KEY: anyone who can reach this address can "
                    "use the API", settings.host)
    if not bind_is_loopback(settings.host) and not settings.admin_password:
        log.warning("listening on %s without GRAPHGATE_ADMIN_PASSWORD: the console at /admin/ answers only "
                    "clients on this machine", settings.host)
    if not settings.admin_password:
        log.warning("%s", console_guard_notice(settings))
    try:
        app = create_app(settings)
    except GraphGateError as exc:  # e.g. an installation that lacks the console's files
        for sock in sockets:
            sock.close()
        print(f"graphgate: {exc.message}", file=sys.stderr)
        return 1
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level=settings.log_level,
                            # uvicorn annotates an int, but hands the value to asyncio.wait_for (seconds, a float)
                            timeout_graceful_shutdown=settings.shutdown_grace,  # type: ignore[arg-type]
                            server_header=False, **forwarded_headers(settings))
    with serving.serving_note(settings) as remove_note:
        server = serving.Listening(config, local_url(settings.host, settings.port), stopped=remove_note)
        try:
            server.run(sockets=sockets)
        except KeyboardInterrupt:   # uvicorn re-raises the Ctrl-C it has handled, once shut down
            pass
    return 0 if server.started else 1


def forwarded_headers(settings: Settings) -> dict[str, Any]:
    """uvicorn's handling of X-Forwarded-For and X-Forwarded-Proto: believed only from the proxies the
    operator names (GRAPHGATE_TRUSTED_PROXIES), never by default (uvicorn's own default believes
    127.0.0.1, and FORWARDED_ALLOW_IPS from the environment: neither is a declared setting)."""
    if not settings.trusted_proxies:
        return {"proxy_headers": False}
    return {"proxy_headers": True, "forwarded_allow_ips": list(settings.trusted_proxies)}


def console_guard_notice(settings: Settings) -> str:
    """How the console without GRAPHGATE_ADMIN_PASSWORD is guarded (proxy/guards/auth.py, Auth.mode)."""
    if settings.api_key:
        return ("no GRAPHGATE_ADMIN_PASSWORD: the console at /admin/ asks for an admin key (GRAPHGATE_API_KEY, or "
                "a stored admin key limited to no knowledge base), from this machine as from any other")
    return ("no GRAPHGATE_ADMIN_PASSWORD: the console at /admin/ answers clients on this machine without a login "
            "while no API key is stored; once one is, it asks for an admin key (a stored admin key limited to no "
            "knowledge base)")


def missing_client(args: argparse.Namespace, settings: Settings) -> str | None:
    """Why a command cannot reach the PostgreSQL store it names: this installation lacks the client
    (the `postgresql` extra), said before anything starts rather than as a traceback from start-up."""
    if args.command == "settings" or (settings.store == "embedded" and args.command != "migrate-store"):
        return None
    from proxy.store.preflight import EXTRA, missing_postgresql_client

    module = missing_postgresql_client()
    if module is None:
        return None
    named = ("GRAPHGATE_STORE names a PostgreSQL server" if settings.store != "embedded"
             else "migrate-store copies to or from a PostgreSQL server")
    return f"{named}, but PostgreSQL's client is not installed ({module} is missing): {EXTRA}"


def given_knobs(settings: Settings) -> dict[str, Any]:
    """The retrieval knobs set by a flag or in the environment, as a query's parameters."""
    return {s.name: getattr(settings, s.name) for s in SETTINGS
            if s.knob is not None and settings.sources.get(s.name, "default") != "default"}


def print_settings(settings: Settings, *, markdown: bool) -> int:
    if markdown:
        print(settings_markdown(), end="")
        return 0
    rows = settings_rows(settings)
    width = max((len(setting.env) for setting, _, _ in rows), default=0)   # the longest name sets the column
    for setting, shown, source in rows:
        print(f"{setting.env:<{width}} {shown}  ({source})")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        status = _main(argv)
        sys.stdout.flush()  # inside the try: a reader that left makes this raise, not the exit's flush
        return status
    except BrokenPipeError:
        # the reader of our output went away (`graphgate settings | head`): not an error of ours.
        # Point stdout at devnull so that the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    overrides = {s.name: getattr(args, s.name, None) for s in SETTINGS}
    try:
        settings = Settings.load(overrides=overrides)
    except SettingsError as exc:
        print(f"graphgate: {exc}", file=sys.stderr)
        return 2
    missing = missing_client(args, settings)
    if missing is not None:
        print(f"graphgate: {missing}", file=sys.stderr)
        return 1
    if args.command == "serve":
        return serve(settings)
    if args.command == "settings":
        return print_settings(settings, markdown=args.markdown)
    if args.command == "mcp":  # stdout is the protocol's channel: logs go to stderr
        from proxy.mcp_server import stdio as mcp_stdio

        logging.basicConfig(level=settings.log_level.upper(), stream=sys.stderr,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        for notice in settings.notices:
            log.warning("%s", notice)
        return mcp_stdio.run(settings, args.create)
    from proxy.cli import commands as cli_commands

    logging.basicConfig(level=max(logging.WARNING, logging.getLevelName(settings.log_level.upper())))
    for notice in settings.notices:
        log.warning("%s", notice)
    if args.command == "ingest":
        return cli_commands.run(cli_commands.ingest, settings, args.paths, args.create, args.metadata, args.meta,
                                args.kb)
    if args.command == "status":
        return cli_commands.run(cli_commands.status, settings, args.kb, args.json)
    if args.command == "query":
        # --mode (GRAPHGATE_MODE) picks the retrieval mode, as it does for the gateway; the other knobs
        # go with the query when given (--max-total-tokens...): a running gateway would use its own
        request = {"query": args.text, "mode": settings.mode, "num_ctx": args.num_ctx, "answer": args.answer,
                   "filters": args.filter, **given_knobs(settings)}
        return cli_commands.run(cli_commands.query, settings, {k: v for k, v in request.items() if v is not None},
                                args.json, args.kb)
    if args.command == "reindex":
        return cli_commands.run(cli_commands.reindex, settings, args.kb)
    if args.command == "migrate-store":
        from proxy.cli.migrate_store import migrate_store

        return cli_commands.run(migrate_store, settings, args.to, args.source, args.kb, args.replace)
    if args.command == "keys":
        from proxy.cli import keys as cli_keys

        if args.keys_command == "create":
            return cli_commands.run(cli_keys.create, settings, args.name, args.role, args.kb)
        if args.keys_command == "list":
            return cli_commands.run(cli_keys.list_keys, settings)
        return cli_commands.run(cli_keys.revoke, settings, args.id)
    return 2
