"""The CLI's shared option block (``where_options``): defined once, given to a command in
place of its ``where`` parameter, in the place that parameter stood."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from typer.testing import CliRunner

from oncegraph.cli.session import ANYWHERE, JsonOpt, Where, where_options


def _app() -> tuple[typer.Typer, list[tuple[str, Where, bool]]]:
    app = typer.Typer()
    seen: list[tuple[str, Where, bool]] = []

    @app.command()
    @where_options()
    def look(
        run_id: Annotated[str, typer.Argument(metavar="RUN")],
        where: Where = ANYWHERE,
        as_json: JsonOpt = False,
    ) -> None:
        seen.append((run_id, where, as_json))

    @app.command()
    @where_options(with_app=False)
    def migrate(where: Where = ANYWHERE) -> None:
        seen.append(("", where, False))

    return app, seen


def test_a_command_gets_the_where_its_options_name(tmp_path: Path) -> None:
    app, seen = _app()
    runner = CliRunner()
    db = tmp_path / "og.db"
    done = runner.invoke(app, ["look", "r1", "--sqlite", str(db), "--json"])
    assert done.exit_code == 0, done.output
    done = runner.invoke(app, ["look", "r2", "--app", "pkg.mod:app", "-d", "x.db"])
    assert done.exit_code == 0, done.output
    assert seen == [
        ("r1", Where(sqlite=db), True),
        ("r2", Where(database="x.db", app="pkg.mod:app"), False),
    ]
    assert Where(sqlite=db).db().where == str(db)


def test_the_block_stands_where_the_parameter_stood_and_app_only_where_asked() -> None:
    app, _ = _app()
    runner = CliRunner()
    shown = runner.invoke(app, ["look", "--help"], env={"COLUMNS": "200"}).output
    order = [shown.index(flag) for flag in ("--database ", "--sqlite", "--postgres", "--app")]
    assert order == sorted(order) and order[-1] < shown.index("--json")
    bare = runner.invoke(app, ["migrate", "--help"], env={"COLUMNS": "200"}).output
    assert "--sqlite" in bare and "--app" not in bare
    refused = runner.invoke(app, ["migrate", "--app", "m:a"])
    assert refused.exit_code == 2 and "No such option" in refused.output
