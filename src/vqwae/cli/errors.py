"""One way to stop a command with a clear message (no traceback for a user's mistake)."""
import typer


def fail(message: str, code: int = 2) -> None:
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    raise typer.Exit(code)
