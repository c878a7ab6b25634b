"""The ``torchlint verify`` command. Exit 0: the fixes pass, or no fix applies (nothing to verify);
1: they fail (reasons and the tail of a traceback); 2: the original script does not run or never
steps an optimizer, or the verification could not be set up (usage, configuration). With --each
the exit code is still the verdict on all fixes together; each fix's verdict is in the report."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from torchlint.harness.verdict import CANNOT_VERIFY
from torchlint.harness.verify import DEFAULT_STEPS, DEFAULT_TIMEOUT_S, VerifyError, VerifyOptions
from torchlint.harness.verify import verify as verify_script


def _progress(message: str) -> None:
    click.echo(f"verify: {message}", err=True)


def _selectors(values: tuple[str, ...]) -> list[str] | None:
    selectors = [part.strip() for value in values for part in value.split(",") if part.strip()]
    return selectors or None


@click.command("verify")
@click.argument("script", type=click.Path(path_type=Path, dir_okay=False))
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--steps", type=click.IntRange(min=1), default=DEFAULT_STEPS, show_default=True,
              help="Optimizer steps per run.")
@click.option("--unsafe-fixes", is_flag=True, help="Apply unsafe fixes too; the fixed run must then still train.")
@click.option("--select", multiple=True, help="Rules whose fixes to apply: codes, prefixes, names or ALL.")
@click.option("--nproc", type=click.IntRange(min=1),
              help="Ranks for running a distributed rewrite under torchrun [default: 2 when one is applied].")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
              help="cpu maps a script's CUDA calls to the CPU.")
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False), help="Write the report to FILE.")
@click.option("--plot", type=click.Path(path_type=Path, dir_okay=False),
              help="Draw loss and memory per step to FILE.png (needs matplotlib).")
@click.option("--timeout", type=click.FloatRange(min=1), default=DEFAULT_TIMEOUT_S, show_default=True,
              help="Seconds allowed to each run.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for random, numpy and torch.")
@click.option("--each", is_flag=True,
              help="Also run each fix on its own, and report per fix: verdict, loss drift, step time and memory "
                   "against the original, with run-to-run noise.")
@click.option("--keep", is_flag=True,
              help="Write to SCRIPT (and with --imports its modules) only the fixes that pass and measure no "
                   "worse (implies --each).")
@click.option("--imports", is_flag=True,
              help="Also fix the modules SCRIPT imports from its folder (those its original run imported), as "
                   "`check --fix` would, and judge and measure their fixes with the script's.")
@click.option("--profile", is_flag=True,
              help="Profile a few steps of the original and rank the findings by measured cost per step.")
def verify(script, script_args, steps, unsafe_fixes, select, nproc, device, output_format, out, plot, timeout,
           seed, each, keep, imports, profile) -> None:
    """Run SCRIPT as written and as fixed, for N optimizer steps each, and check that the fixed
    script still trains the same (safe fixes) or at least about as well (unsafe fixes). Arguments
    after `--` go to the script. Your files are not modified (the runs happen in copies), except
    with --keep, which writes the kept fixes to SCRIPT (and, with --imports, to its modules)."""
    from torchlint.config import ConfigError
    from torchlint.engine import FixError
    from torchlint.harness import report as reporting

    options = VerifyOptions(steps=steps, unsafe_fixes=unsafe_fixes, select=_selectors(select), nproc=nproc,
                            device=device, timeout_s=timeout, seed=seed, script_args=list(script_args),
                            each=each, keep=keep, profile=profile, imports=imports)
    try:
        result = verify_script(script, options, progress=_progress)
    except (VerifyError, ConfigError, FixError) as error:
        click.echo(f"torchlint verify: error: {error}", err=True)
        sys.exit(CANNOT_VERIFY)

    text = reporting.format_json(result) if output_format == "json" else reporting.format_text(result)
    if out:
        out.write_text(text + "\n", encoding="utf-8")
        _progress(f"report written to {out}")
    else:
        click.echo(text)
    if plot:
        try:
            reporting.plot(result, plot)
            _progress(f"plot written to {plot}")
        except ImportError:
            click.echo("torchlint verify: --plot needs matplotlib, which is not installed "
                       "(pip install 'torchlint[plot]' or pip install matplotlib); no plot was drawn", err=True)
    sys.exit(result.exit_code)

