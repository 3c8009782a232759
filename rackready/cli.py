"""The `rackready` command: invoke's own program over the project's tasks.py, told that a
mistyped command line is a person's mistake (exit 2, as every other one) rather than
invoke's 1, which here is the code of a failed node. The stock `invoke` binary runs the
same tasks; only this program knows rackready's exit codes for parse errors."""

from __future__ import annotations

from invoke import Exit, ParseError, Program

from rackready import __version__


class RackreadyProgram(Program):
    """invoke's Program (documented for standalone binaries) whose parse steps turn a
    ParseError (unknown task or flag, a flag's missing value) into one line and exit 2."""

    def parse_core(self, argv: list[str] | None) -> None:
        try:
            super().parse_core(argv)
        except ParseError as exc:
            raise Exit(f"error: {exc}", code=2) from None

    def parse_tasks(self) -> None:
        try:
            super().parse_tasks()
        except ParseError as exc:
            raise Exit(f"error: {exc}", code=2) from None


# namespace=None: finds tasks.py from the working directory, exactly as `invoke` does
program = RackreadyProgram(name="rackready", binary="rackready", binary_names=["rackready"],
                           version=__version__)

if __name__ == "__main__":
    program.run()
