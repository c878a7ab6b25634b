"""The command line: ``torchlint [check] PATH...`` (check is the default command), ``rule``,
``rules``, ``verify``, ``lsp``. Exit codes: 0 nothing left to report, 1 diagnostics remain, 2 usage,
configuration or internal error, or a path that cannot be read."""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

import click

from torchlint import __version__

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
FORMATS = ("text", "concise", "full", "json", "jsonl", "sarif", "github")
CLEAR_SCREEN = "\x1b[H\x1b[2J"  # what Ruff's watch mode does before each report on a terminal


# Commands whose modules load only when asked for: a lint does not pay for the harness's imports.
LAZY_COMMANDS = {"verify": ("torchlint.harness.cli", "verify")}


class DefaultGroup(click.Group):
    """A group whose default command is ``check``: ``torchlint --fix src/`` works."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in LAZY_COMMANDS
                        and args[0] not in ("--help", "-h", "--version")):
            args = ["check", *args]
        return super().parse_args(ctx, args)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in LAZY_COMMANDS and name not in self.commands:
            module, attribute = LAZY_COMMANDS[name]
            try:
                command = getattr(importlib.import_module(module), attribute)
            except ImportError:  # an install without the harness's dependencies
                return None
            self.add_command(command, name)
        return super().get_command(ctx, name)


def _split(values: tuple[str, ...]) -> list[str] | None:
    if not values:
        return None
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def _error(message: str) -> None:
    click.echo(f"torchlint: error: {message}", err=True)


def _warning(message: str) -> None:
    click.echo(f"torchlint: warning: {message}", err=True)


def entry_point() -> None:
    """The ``torchlint`` command (console script and ``python -m torchlint``): ``main``, then an exit
    that skips the interpreter's teardown. A run over a large tree leaves millions of objects (trees,
    summaries, the rules' tables) that Python would free one by one at exit: 1.6 s of a 25 s run over
    torch's sources. Everything the run writes is written by then (the cache and fixed files are
    closed as they are written, the process pool is joined); the output streams are flushed here.
    An exception other than SystemExit propagates as usual."""
    try:
        main()
        code: object = 0
    except SystemExit as done:
        code = done.code
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)  # what sys.exit prints for a message
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed pipe: nothing more can be said
        pass
    os._exit(code or 0)


@click.group(cls=DefaultGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="torchlint")
def main() -> None:
    """A linter and autofixer for PyTorch training code."""


@dataclass(frozen=True)
class Run:
    """What one check does with the files: fix them, diff them, or only report."""

    fix: bool = False
    diff: bool = False
    exit_zero: bool = False
    jobs: int = 0
    cache: Path | None = None  # the cache folder; None: no cache


@dataclass(frozen=True)
class Report:
    """How and where a check shows what it found."""

    output_format: str = "text"
    statistics: bool = False
    quiet: bool = False
    show_fixes: bool = False
    color: bool | None = None  # None: on a terminal, unless NO_COLOR is set
    output_file: Path | None = None

    def colored(self, stream) -> bool:
        """Ruff's rule: never into a file; ``--color``/``--no-color`` when given; else a terminal
        without ``NO_COLOR`` (https://no-color.org: set and not empty)."""
        if stream is None:
            return False
        if self.color is not None:
            return self.color
        return not os.environ.get("NO_COLOR") and stream.isatty()

    def render(self, results, settings, fix: bool, errors: int, stream) -> str:
        """The report in its format, for ``stream`` unless it goes to the output file."""
        from torchlint.output import REPORTS, format_statistics, format_text

        color = self.colored(None if self.output_file is not None else stream)
        if self.statistics:
            return format_statistics(results, unsafe_fixes=settings.unsafe_fixes, color=color)
        if self.output_format in REPORTS:
            return REPORTS[self.output_format](results)
        return format_text(results, unsafe_fixes=settings.unsafe_fixes, fix_mode=fix, errors=errors,
                           show_source=self.output_format == "full", summary=not self.quiet,
                           show_fixes=self.show_fixes, color=color)

    def emit(self, text: str, stream) -> bool:
        """Write the report to ``--output-file``, else to ``stream``; False (after saying why)
        when the file cannot be written."""
        if self.output_file is None:
            stream.write(text)
            return True
        try:
            self.output_file.parent.mkdir(parents=True, exist_ok=True)
            self.output_file.write_text(text, encoding="utf-8", newline="")
        except OSError as error:
            _error(f"{self.output_file}: cannot write the report ({error.strerror or error}); "
                   "name a file in a folder you can write to")
            return False
        return True

    def after_diff(self, results, settings) -> None:
        """What ``--diff`` says besides the patch, on stderr: the fix listing and the summary."""
        from torchlint.output import diff_summary, format_fix_listing, paragraphs

        if self.quiet:
            return
        listing = format_fix_listing(results, applied=False, color=self.colored(sys.stderr)) if self.show_fixes else ""
        sys.stderr.write(paragraphs(listing, diff_summary(results, unsafe_fixes=settings.unsafe_fixes)))


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--fix", is_flag=True, help="Apply safe fixes (and unsafe ones with --unsafe-fixes).")
@click.option("--unsafe-fixes/--no-unsafe-fixes", default=None, help="Also apply fixes that may change behaviour.")
@click.option("--diff", is_flag=True, help="Print the fixes as a diff instead of writing them.")
@click.option("--show-fixes", is_flag=True, help="With --fix or --diff: list the fixes per file and rule.")
@click.option("--select", multiple=True, help="Rules to enable: codes, prefixes, names or ALL (comma-separated).")
@click.option("--ignore", multiple=True, help="Rules to disable.")
@click.option("--extend-select", multiple=True, help="Rules to enable in addition to the selection.")
@click.option("--format", "--output-format", "output_format", type=click.Choice(FORMATS), default="text",
              show_default=True, help="text (one line a finding; `concise` is the same), full (with the source "
              "line and a caret), json, jsonl, sarif or github.")
@click.option("-o", "--output-file", type=click.Path(path_type=Path, dir_okay=False),
              help="Write the report to this file instead of stdout (never coloured).")
@click.option("--color/--no-color", default=None,
              help="Colour the report [default: on a terminal, unless NO_COLOR is set].")
@click.option("--statistics", is_flag=True, help="Count diagnostics per rule.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even if diagnostics remain.")
@click.option("-w", "--watch", is_flag=True, help="Check again whenever a checked file or the configuration "
              "changes (Ctrl-C stops).")
@click.option("--config", type=click.Path(path_type=Path, dir_okay=False), help="Configuration file to use.")
@click.option("--isolated", is_flag=True, help="Ignore all configuration files.")
@click.option("--target-torch", help="The torch version the code runs on, e.g. 2.1.")
@click.option("--target-lightning", help="The Lightning version the code runs on, e.g. 2.2.")
@click.option("--target-gpu", help="The GPU the code runs on: sm_80, 8.0 or a name (a100, h100, t4, l4...).")
@click.option("--no-cache", is_flag=True, help="Do not read or write the cache.")
@click.option("--cache-dir", type=click.Path(path_type=Path, file_okay=False), help="Where the cache lives.")
@click.option("--stdin-filename", help="The name of the file read from stdin (path `-`).")
@click.option("--force-exclude", is_flag=True, help="Apply `exclude` to files named explicitly too (pre-commit).")
@click.option("-q", "--quiet", is_flag=True, help="Print diagnostics only, no summary.")
@click.option("-j", "--jobs", type=click.IntRange(min=0), default=0,
              help="Processes to lint with (default 0: one per core for large trees).")
def check(paths, fix, unsafe_fixes, diff, show_fixes, select, ignore, extend_select, output_format, output_file,
          color, statistics, exit_zero, watch, config, isolated, target_torch, target_lightning, target_gpu, no_cache, cache_dir,
          stdin_filename, force_exclude, quiet, jobs) -> None:
    """Lint PATHS (default: the current directory)."""
    from torchlint.config import ConfigError, resolve_settings

    paths = list(paths) or [Path(".")]
    reading_stdin = paths == [Path("-")]
    if stdin_filename and not reading_stdin:
        _error("--stdin-filename goes with `-` as the only path")
        sys.exit(EXIT_ERROR)
    if watch and reading_stdin:
        _error("--watch checks files again when they change; name files or folders, not `-`")
        sys.exit(EXIT_ERROR)
    # A buffer's name need not exist yet (a new file in an editor): its folder's config still counts.
    anchor = Path(stdin_filename) if stdin_filename else paths[0]
    if anchor.is_symlink() and not anchor.exists():  # a broken link or a symlink loop: resolving it fails
        anchor = anchor.parent

    def resolve():
        return resolve_settings(
            anchor, config=config, select=_split(select),
            ignore=_split(ignore), extend_select=_split(extend_select), unsafe_fixes=unsafe_fixes,
            target_torch=target_torch, target_lightning=target_lightning, target_gpu=target_gpu,
            isolated=isolated)

    try:
        settings = resolve()
    except ConfigError as error:
        _error(str(error))
        sys.exit(EXIT_ERROR)
    _warn_about_plugins()
    report = Report(output_format=output_format, statistics=statistics, quiet=quiet, show_fixes=show_fixes,
                    color=color, output_file=output_file)

    def run_for(settings) -> Run:
        cache = None if (no_cache or fix) else (cache_dir or settings.root / ".torchlint_cache")
        return Run(fix=fix, diff=diff, exit_zero=exit_zero, jobs=jobs, cache=cache)

    try:
        if reading_stdin:
            code = _check_stdin(stdin_filename or "-", settings, run_for(settings), report)
        else:
            if force_exclude:
                paths = [p for p in paths if not (p.exists() and settings.is_excluded(p))]
                if not paths:
                    sys.exit(EXIT_CLEAN)
            if watch:
                code = _watch(paths, settings, resolve, lambda settings: _check_paths(
                    paths, settings, run_for(settings), report))
            else:
                code = _check_paths(paths, settings, run_for(settings), report)
    except KeyboardInterrupt:
        _error("interrupted; files already fixed were written whole, the others are untouched")
        sys.exit(130)
    except Exception as error:  # noqa: BLE001 - one clear line, the traceback only on request
        _error(f"internal error: {error.__class__.__name__}: {error}. Please report it "
               "(set TORCHLINT_DEBUG=1 for the traceback).")
        if os.environ.get("TORCHLINT_DEBUG"):
            traceback.print_exc()
        sys.exit(EXIT_ERROR)
    sys.exit(code)


def _warn_about_plugins() -> None:
    """A plugin that cannot be used is skipped, not fatal: say so, and lint with the other rules."""
    from torchlint.rule import plugin_problems

    for problem in plugin_problems():
        _warning(problem)


def _check_paths(paths, settings, run: Run, report: Report) -> int:
    from torchlint.discovery import discover
    from torchlint.output import patch_text
    from torchlint.runner import Cache, Options, check_files, tune_gc

    errors: list[str] = []
    files = discover(paths, settings, errors.append, _warning)
    tune_gc()
    options = Options(fix=run.fix, diff=run.diff, cache=Cache(run.cache, settings.fingerprint) if run.cache else None)
    results = check_files(files, settings, options, run.jobs)
    errors += [r.error for r in results if r.error]
    crashes = [crash for r in results for crash in r.crashes]  # counted apart: the file was checked
    for message in errors + crashes:
        _error(message)

    if run.diff:
        written = report.emit("".join(patch_text(r) for r in results), sys.stdout)
        report.after_diff(results, settings)
        if errors or crashes or not written:
            return EXIT_ERROR
        return EXIT_FINDINGS if any(r.diff for r in results) else EXIT_CLEAN
    text = report.render(results, settings, fix=run.fix, errors=len(errors), stream=sys.stdout)
    if not report.emit(text, sys.stdout) or errors or crashes:
        return EXIT_ERROR
    remaining = any(r.diagnostics for r in results)
    return EXIT_FINDINGS if remaining and not run.exit_zero else EXIT_CLEAN


def _check_stdin(name, settings, run: Run, report: Report) -> int:
    from torchlint.engine import syntax_error
    from torchlint.fileio import SourceDecodeError, decode_source
    from torchlint.output import patch_text
    from torchlint.runner import FileResult, Options, check_text

    raw = sys.stdin.buffer.read()
    try:
        text, _, _ = decode_source(raw)
    except SourceDecodeError as error:
        result = FileResult(name, "", [syntax_error(name, f"cannot decode the input: {error}")])
    else:
        if settings.is_excluded(Path(name)):
            result = FileResult(name, text)
        else:
            result = check_text(text, name, settings, Options(fix=run.fix, diff=run.diff))
    for error in result.errors:
        _error(error)  # before the summary, which refers to it
    if run.diff:
        written = report.emit(patch_text(result), sys.stdout)
        report.after_diff([result], settings)
        if result.errors or not written:
            return EXIT_ERROR
        return EXIT_FINDINGS if result.diff else EXIT_CLEAN
    if run.fix:
        sys.stdout.write(result.source)  # the fixed buffer, for editors; the report goes to stderr
    stream = sys.stderr if run.fix else sys.stdout
    text = report.render([result], settings, fix=run.fix, errors=1 if result.error else 0, stream=stream)
    if not report.emit(text, stream) or result.errors:
        return EXIT_ERROR
    return EXIT_FINDINGS if result.diagnostics and not run.exit_zero else EXIT_CLEAN


def _watch(paths, settings, resolve, check_once) -> int:
    """``--watch``: check now and after every change; on a terminal each report replaces the last."""
    from torchlint.watch import watch

    def check(settings) -> int:
        code = check_once(settings)
        sys.stdout.flush()
        return code

    def clear() -> None:
        if sys.stdout.isatty():
            sys.stdout.write(CLEAR_SCREEN)
            sys.stdout.flush()

    return watch(paths, settings, resolve, check, notify=lambda message: click.echo(message, err=True), clear=clear)


@main.command("lsp")
def language_server() -> None:
    """Run the language server on stdin/stdout (for editors; needs the `lsp` extra: pygls)."""
    try:
        from torchlint.lsp import serve
    except ImportError as error:
        _error(f"the language server needs pygls ({error}); install it into this environment: "
               "pip install 'pygls>=2.0,<3' (what torchlint's `lsp` extra holds; in a clone: pip install '.[lsp]')")
        sys.exit(EXIT_ERROR)
    serve()


@main.command("rules")
@click.option("--format", "output_format", type=click.Choice(("text", "json")), default="text", show_default=True)
@click.option("--all", "show_all", is_flag=True, help="(kept for symmetry) every rule is always listed")
def list_rules(output_format, show_all) -> None:
    """List every rule: code, name, kind, fix, summary; a rule that is off by default says so
    (`--extend-select CODE` turns it on), and a plugin's rule names the package it comes from
    (`origin` in the JSON: "torchlint" or the plugin's distribution and version)."""
    from torchlint.plugins import BUILTIN
    from torchlint.rule import all_rules, rule_origin

    _warn_about_plugins()
    rules = all_rules()
    if output_format == "json":
        click.echo(json.dumps([{
            "code": r.code, "name": r.name, "kind": r.kind, "fix": r.fix_applicability,
            "severity": int(r.severity), "default_enabled": r.default_enabled,
            "torch_versions": r.torch_versions or None, "summary": r.summary, "origin": rule_origin(r)}
            for r in rules], indent=2))
        return
    width = max(len(r.name) for r in rules)
    for r in rules:
        fix = {"safe": "fix", "unsafe": "fix (unsafe)", "none": ""}[r.fix_applicability]
        default = "" if r.default_enabled else " (off by default)"
        origin = "" if rule_origin(r) == BUILTIN else f" [from {rule_origin(r)}]"
        click.echo(f"{r.code}  {r.name:<{width}}  {r.kind:<12} {fix:<13} {r.summary}{default}{origin}")


@main.command("rule")
@click.argument("selector")
def show_rule(selector) -> None:
    """Print a rule's documentation (by code or name)."""
    from torchlint.rule import rule_by_selector, rule_plugin

    _warn_about_plugins()
    rule = rule_by_selector(selector)
    if rule is None:
        _error(f"no rule named `{selector}` (see `torchlint rules`)")
        sys.exit(EXIT_ERROR)
    fix = {"safe": "safe fix available", "unsafe": "unsafe fix available (--unsafe-fixes)",
           "none": "no automatic fix"}[rule.fix_applicability]
    versions = f"; torch {rule.torch_versions}" if rule.torch_versions else ""
    default = "" if rule.default_enabled else f"; off by default (turn it on with `--extend-select {rule.code}`)"
    plugin = rule_plugin(rule)
    origin = f"; from {plugin}" if plugin else ""
    click.echo(f"# {rule.name} ({rule.code})\n\n{rule.kind}; {fix}{versions}{default}{origin}\n\n{rule.docs()}")

