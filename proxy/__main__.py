"""The `compaction-proxy` command: serve, check-config, threads, inspect, check-state."""

from __future__ import annotations

# First, before the slow imports below: a SIGHUP while they load is noted for `serve` (which
# reloads once it listens), not the end of the process.
from proxy import hangups as early_hangups

early_hangups.note_early()

import argparse  # noqa: E402 - after the line above, on purpose
import asyncio
import gc
import os
import signal
import sqlite3
import sys
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import yaml
from aiohttp import web

from proxy.settings import (DEFAULT_CONFIG_PATH, ConfigError, Settings, host_port, listen_host,
                            load_settings, load_state_settings, masked, redacted_url)
from proxy.settings_diff import digest
from proxy.settings_reader import shown
from proxy.store.base import StoreError
from proxy.tokens.encoding import KNOWN_ENCODINGS
from proxy.tokens.images import RULES as IMAGE_RULES

if TYPE_CHECKING:
    from proxy.server.reload import Reloader


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.run is not _serve:
        early_hangups.release()
    try:
        settings = _read_config(args)
    except ConfigError as error:
        print(f"compaction-proxy: invalid config {args.config}:", file=sys.stderr)
        for problem in error.problems:
            print(f"  {problem}", file=sys.stderr)
        if args.config == DEFAULT_CONFIG_PATH and not Path(args.config).exists():
            # Run from elsewhere than the project's directory, the default path finds nothing.
            print(f"  {DEFAULT_CONFIG_PATH} is relative to the current directory ({Path.cwd()}): "
                  f"run from the project's directory, or pass --config PATH", file=sys.stderr)
        return 1
    for warning in settings.warnings:
        print(f"compaction-proxy: warning: {args.config}: {warning}", file=sys.stderr)
    try:
        return int(args.run(settings, args) or 0)
    except BrokenPipeError:
        return _reader_left()


def _read_config(args: argparse.Namespace) -> Settings:
    """The file's settings as the command reads them, checked as `check-config` checks them;
    raises ConfigError. `serve` reads them again on SIGHUP (`_reread`)."""
    if args.state_only:
        return load_state_settings(args.config)
    settings = load_settings(args.config)
    _check_token_rules(settings)
    return settings


def _reread(args: argparse.Namespace) -> Settings:
    """A config reload's settings: the file read anew (its `${VAR}`s from the environment the
    process has), the command line's --host and --port over it, as at start."""
    return _read_config(args).with_overrides(args.host, args.port)


def _reader_left() -> int:
    """The reader of the output left early (`threads | head`): it has the lines it wanted, and
    the command ends quietly, with the status a shell gives a tool its reader left (128 +
    SIGPIPE), not a traceback. Python would fail again flushing stdout at exit: it points at
    /dev/null from here on."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 128 + signal.SIGPIPE


def _check_token_rules(settings: Settings) -> None:
    """A profile's `tokenizer` must name an encoding the proxy can load, its `image_rule` a
    family the proxy knows (the settings layer does not know the token rules: checked here, for
    every command, as a config problem)."""
    known = ", ".join(sorted(KNOWN_ENCODINGS))
    problems = [f"models.{p.pattern}.tokenizer: unknown encoding {shown(p.tokenizer)} "
                f"(known: {known})"
                for p in settings.models if p.tokenizer and p.tokenizer not in KNOWN_ENCODINGS]
    families = ", ".join(IMAGE_RULES)
    problems += [f"models.{p.pattern}.image_rule: unknown family {shown(p.image_rule)} "
                 f"(known: {families})"
                 for p in settings.models if p.image_rule and p.image_rule not in IMAGE_RULES]
    if problems:
        raise ConfigError(problems)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="compaction-proxy", description=(
        "A transparent OpenAI-compatible proxy that compacts long agent contexts."))
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the proxy")
    serve.add_argument("--host", type=_address, metavar="H", help="listen address (overrides server.host)")
    serve.add_argument("--port", type=_int_in(0, 65535), metavar="P", help="listen port (overrides server.port)")
    serve.set_defaults(run=_serve)

    check = commands.add_parser("check-config", help="validate the config and print it, secrets masked")
    check.set_defaults(run=_check_config)

    threads = commands.add_parser("threads", help="list the threads the proxy keeps state for")
    threads.add_argument("--limit", type=_int_in(1), default=100, metavar="N",
                         help="how many threads, most recently active first (default 100)")
    threads.set_defaults(run=_threads)

    inspect = commands.add_parser("inspect", help="print one thread's state as JSON")
    inspect.add_argument("thread_id", metavar="THREAD_ID",
                         help="a thread id exactly as `compaction-proxy threads` shows it")
    inspect.set_defaults(run=_inspect)

    check_state = commands.add_parser(
        "check-state", help="check the whole state for damage (read-only; it may run "
                            "beside the proxy)")
    check_state.set_defaults(run=_check_state)

    for command in (serve, check, threads, inspect, check_state):
        # The state commands read only `state`: the rest of the file may not resolve here.
        command.set_defaults(state_only=command in (threads, inspect, check_state))
        command.add_argument("--config", type=_config_path, default=DEFAULT_CONFIG_PATH,
                             metavar="PATH",
                             help=f"YAML config file (default {DEFAULT_CONFIG_PATH}, "
                                  f"relative to the current directory)")
    return parser


def _int_in(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer from `low` to `high` (no upper bound when None)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low or (high is not None and value > high):
            span = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise argparse.ArgumentTypeError(f"must be {span}, got {value}")
        return value
    return parse


def _config_path(text: str) -> str:
    """An argparse type: a config path, not empty (`--config "$UNSET"` read the current
    directory, and said only that a directory cannot be read)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def _address(text: str) -> str:
    """An argparse type: a listen address, not empty (an empty one used to be ignored)."""
    host = listen_host(text)
    if not host.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return host


def _check_config(settings: Settings, args: argparse.Namespace) -> int:
    print(yaml.safe_dump(_plain(masked(settings)), sort_keys=False), end="")
    return 0


def _plain(value: object) -> object:
    if isinstance(value, str):
        # The output is itself a config: a `${` in a value (written `$${`, or from the
        # environment) would be read back as a reference.
        return value.replace("${", "$${")
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _serve(settings: Settings, args: argparse.Namespace) -> int:
    hangups = _Hangups()  # first: a SIGHUP's own action would end the process
    from proxy.server.logs import configure_logging, get_logger

    settings = settings.with_overrides(args.host, args.port)
    configure_logging(settings.logging)
    log = get_logger("proxy")
    try:
        # Loading the serving modules takes a while: a Ctrl-C then is a quiet stop as well.
        from proxy.server.app import build_app
        from proxy.server.reload import Reloader
        from proxy.server.services import SERVICES
        with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
            app = _built_app(build_app, settings)
            reloader = Reloader(app[SERVICES], partial(_reread, args), args.config)
            runner.run(_run(app, settings, log, reloader, hangups))
    except KeyboardInterrupt:
        pass
    except StartupFailed as failed:
        log.error("startup_failed", error=str(failed))
        # The line names what to change: the key (and the file it is in), or the flags.
        state_keys = "state.redis" if settings.state.backend == "redis" else "state.path"
        where = (f"server.host/server.port in {args.config}, or --host/--port"
                 if failed.listening else f"{state_keys} in {args.config}")
        print(f"compaction-proxy: {failed} ({where})", file=sys.stderr)
        return 1
    return 0


class StartupFailed(Exception):
    """The proxy could not open its state or listen: one line for the operator, no traceback."""

    def __init__(self, message: str, *, listening: bool) -> None:
        super().__init__(message)
        self.listening = listening  # else the state could not be opened


class _Hangups:
    """SIGHUP (not on Windows: no reload there) until the proxy serves: remembered, and the
    config is reloaded once it serves (the file may have changed after it was read)."""

    def __init__(self) -> None:
        self.pending = False
        if SIGHUP is not None:
            signal.signal(SIGHUP, self.noted)
        # Read after its own handler is set: one that came before is not lost in between.
        if early_hangups.taken():
            self.pending = True

    def noted(self, *_: object) -> None:
        self.pending = True


SIGHUP: signal.Signals | None = getattr(signal, "SIGHUP", None)


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop when it is installed (it roughly halves the event loop's own cost), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


async def _run(app: web.Application, settings: Settings, log: object, reloader: Reloader,
               hangups: _Hangups) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # From the start: a signal while the state opens (a long quick_check, a migration) stops
    # the proxy once it is open, through the same clean stop, not half-way through opening it.
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, _stop_soon, loop, stop, signum)
    if SIGHUP is not None:
        loop.add_signal_handler(SIGHUP, hangups.noted)
    runner = make_runner(app)
    await _open_state(runner, settings)
    # Open: from here a signal only asks for the stop (two that come at once included); the
    # stop then makes the next one hurry the drain.
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    if not stop.is_set():
        await _listen(runner, settings, log)
        if SIGHUP is not None:
            loop.add_signal_handler(SIGHUP, reloader.requested)
        if hangups.pending:
            reloader.requested()
        await stop.wait()
    await reloader.close()  # a reload under way is not applied; a SIGHUP from now on is ignored
    log.info("shutting_down", grace_s=settings.server.shutdown_grace_s)  # type: ignore[attr-defined]
    # A second signal: the operator will not wait out the grace.
    from proxy.server.services import SERVICES
    hurry = app[SERVICES].drain.hurry
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, hurry)
    await runner.cleanup()
    _ignore_hangups_from_now(loop)
    log.info("stopped")  # type: ignore[attr-defined]


def _ignore_hangups_from_now(loop: asyncio.AbstractEventLoop) -> None:
    """A SIGHUP in the stop's last moments is ignored, as one earlier in it is: closing the
    loop would give SIGHUP its default action back, which ends the process (exit 129 after
    `stopped`). Blocked meanwhile: none lands between the loop's handler and `SIG_IGN`."""
    if SIGHUP is None:
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {SIGHUP})
    try:
        loop.remove_signal_handler(SIGHUP)
        signal.signal(SIGHUP, signal.SIG_IGN)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {SIGHUP})


def _stop_soon(loop: asyncio.AbstractEventLoop, stop: asyncio.Event, signum: int) -> None:
    if stop.is_set():
        # A second signal while the state opens: the operator will not wait for it, so the
        # signal does what it would without a handler (SIGTERM ends the process; SIGINT raises
        # KeyboardInterrupt).
        loop.remove_signal_handler(signum)
        signal.raise_signal(signum)
    stop.set()


def _built_app(build_app: Callable[[Settings], web.Application],
               settings: Settings) -> web.Application:
    try:
        return build_app(settings)
    except StoreError as exc:  # the configured store cannot be made (redis not installed)
        raise StartupFailed(_state_problem(settings, exc), listening=False) from None


async def _open_state(runner: web.AppRunner, settings: Settings) -> None:
    try:
        await runner.setup()  # opens the state store
    except (OSError, sqlite3.Error, StoreError) as exc:
        await runner.cleanup()
        raise StartupFailed(_state_problem(settings, exc), listening=False) from None


def _state_problem(settings: Settings, exc: BaseException) -> str:
    """"cannot open the state in <where>: <why>"; a Redis server by its URL, masked (the
    Redis store's own errors name it already: not twice)."""
    problem = _described(exc)
    if settings.state.backend != "redis":
        return f"cannot open the state in {settings.state.path}: {problem}"
    where = f"Redis at {redacted_url(settings.state.redis.url)}"
    if where in problem:
        return f"cannot open the state: {problem}"
    return f"cannot open the state in {where}: {problem}"


async def _listen(runner: web.AppRunner, settings: Settings, log: object) -> None:
    site = web.TCPSite(runner, settings.server.host, settings.server.port)
    try:
        await site.start()
    except (OSError, UnicodeError) as exc:
        await runner.cleanup()
        raise StartupFailed(f"cannot listen on "
                            f"{host_port(settings.server.host, settings.server.port)}: "
                            f"{_bind_problem(exc)}", listening=True) from None
    # What startup built (modules, settings, tokenizers) lives as long as the process: kept out
    # of the collector's scans, the garbage each request makes costs it far less to collect.
    gc.freeze()
    addresses = [host_port(a[0], a[1]) for a in runner.addresses]
    # Where each upstream is, credentials in a base_url masked: what a new user checks first.
    upstreams = {name: redacted_url(u.base_url) for name, u in sorted(settings.upstreams.items())}
    state = ({"state_redis": redacted_url(settings.state.redis.url)}
             if settings.state.backend == "redis" else {"state_path": settings.state.path})
    log.info("listening", addresses=addresses, upstreams=upstreams,  # type: ignore[attr-defined]
             **state, config_digest=digest(settings))


def _bind_problem(exc: OSError | UnicodeError) -> str:
    if isinstance(exc, UnicodeError):
        # The IDNA codec refused the name before any lookup (an empty label, one over 63
        # characters); its own words name the codec, not the host.
        return f"not a valid host name ({exc.__cause__ or exc})"
    # asyncio's bind error repeats the address as a tuple: the errno's own words will do.
    return os.strerror(exc.errno) if exc.errno and exc.errno > 0 else _described(exc)


def _described(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror}{where}"
    return str(exc) or type(exc).__name__


def make_runner(app: web.Application) -> web.AppRunner:
    from proxy.server.runner import ProxyRunner

    # Long header lines (big thread ids, tokens) are client data to handle, not parser errors.
    # The app's drain gives in-flight requests their grace (proxy/server/drain.py); aiohttp's
    # own shutdown wait only bounds the few handlers still running after the drain's cut.
    return ProxyRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0,
                       max_line_size=65536, max_field_size=65536)


def _threads(settings: Settings, args: argparse.Namespace) -> int:
    from proxy.cli_state import list_threads
    return list_threads(settings, args.limit)


def _inspect(settings: Settings, args: argparse.Namespace) -> int:
    from proxy.cli_state import inspect_thread
    return inspect_thread(settings, args.thread_id)


def _check_state(settings: Settings, args: argparse.Namespace) -> int:
    from proxy.cli_state import check_state
    return check_state(settings)


if __name__ == "__main__":
    sys.exit(main())
