"""The `dfm` command: thin click commands over spec -> rules -> plan -> backend.

Heavy modules (sagemaker, tensorflow) are imported inside the commands that need them, so `dfm --help`
and `dfm validate` stay fast. Every failure the user can fix is a DfmError: one line, exit code 2 (bad
spec or usage) or 1 (job failed, AWS refused). Any other exception is a bug in dfm: one line naming it,
exit code 3 (`--debug` shows the traceback).
"""

from __future__ import annotations

import sys

import click

from launcher.errors import DfmError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.version_option(package_name="dfm")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Launch distributed DeepFM training on SageMaker from a YAML spec, or run it locally."""
    ctx.obj = {"debug": debug}


def _register() -> None:
    # Each concern keeps its commands beside its code; this module only wires them in.
    from launcher.cli import init as cli_init
    from launcher.cli import jobs as cli_jobs
    from launcher.cli import prepare as cli_prepare
    from launcher.cli import probe as cli_probe
    from launcher.cli import serve as cli_serve
    from launcher.cli import serve_jobs as cli_serve_jobs
    from launcher.cli import spec as cli_spec
    from launcher.cli import tune as cli_tune
    from launcher.cli import data as data_cli
    from launcher.cli import data_layout, data_synth

    for command in (data_synth.synth, data_layout.convert, data_layout.split_command, cli_prepare.prepare):
        data_cli.data.add_command(command)
    for command in (
        *cli_init.COMMANDS,
        *cli_spec.COMMANDS,
        *cli_jobs.COMMANDS,
        *cli_tune.COMMANDS,
        *cli_probe.COMMANDS,
        *cli_serve.COMMANDS,
        *cli_serve_jobs.COMMANDS,
        data_cli.data,
    ):
        cli.add_command(command)


def main(argv: list[str] | None = None) -> int:
    _register()
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        cli.main(args=argv, prog_name="dfm", standalone_mode=False)
    except DfmError as err:
        if debug:
            raise
        click.echo(f"dfm: {err.message}", err=True)
        return err.exit_code
    except click.exceptions.Abort:
        click.echo("dfm: aborted", err=True)
        return 130
    except click.ClickException as err:
        err.show()
        return 2
    except SystemExit as exit_:  # click's own --help / --version
        return int(exit_.code or 0)
    except Exception as err:  # noqa: BLE001 (whatever escaped is a bug: one line, not a traceback)
        if debug:
            raise
        click.echo(bug_message(err), err=True)
        return BUG_EXIT_CODE
    return 0


BUG_EXIT_CODE = 3


def bug_message(err: BaseException) -> str:
    detail = " ".join(str(err).split())
    return (
        f"dfm: internal error (a bug in dfm, not in your spec): {type(err).__name__}"
        f"{': ' + detail if detail else ''}; rerun with --debug for the traceback, and report it"
    )


if __name__ == "__main__":
    sys.exit(main())
