"""An option is one declaration (`config.declared.Option`): its parsing, its checks, its docs row and
its secrecy come from it. A toy option shows what adding one takes."""

from __future__ import annotations

import pytest

from pyspark_kinesis.config.declared import BOOL, INT, Option, is_secret, markdown_table, parse_declared
from pyspark_kinesis.errors import OptionError

TOY = (
    Option("toyLimit", "How many toys at most.", default=3, kind=INT, minimum=1, field="toy_limit"),
    Option("toyMode", "calm | wild.", default="calm", choices=("calm", "wild"), field="toy_mode"),
    Option("toyOn", "Toys at all.", default=True, kind=BOOL, field="toy_on"),
    Option("toyToken", "A toy secret.", secret=True),
)


def test_a_declared_option_parses_checks_and_documents_itself():
    assert parse_declared({}, TOY) == {"toy_limit": 3, "toy_mode": "calm", "toy_on": True}
    given = {"toyLimit": " 7 ", "toyMode": "WILD", "toyOn": "false"}
    assert parse_declared(given, TOY) == {"toy_limit": 7, "toy_mode": "wild", "toy_on": False}
    with pytest.raises(OptionError, match=r"toyLimit.*below the minimum 1"):
        parse_declared({"toyLimit": "0"}, TOY)
    with pytest.raises(OptionError, match=r"toyMode.*'tame' is not calm or wild.*Use calm or wild"):
        parse_declared({"toyMode": "tame"}, TOY)
    assert markdown_table(TOY).splitlines() == [
        "| `toyLimit` | 3 | How many toys at most. |",
        "| `toyMode` | calm | calm | wild. |",
        "| `toyOn` | true | Toys at all. |",
        "| `toyToken` | (none) | A toy secret. |",
    ]
    assert is_secret("toyToken") and not is_secret("toyLimit")


def test_the_source_and_sink_configs_default_to_their_declarations():
    """The configs' field defaults are read from the declarations, not written again."""
    from pyspark_kinesis.formats import value_options
    from pyspark_kinesis.sink.options import SinkConfig, sink_options
    from pyspark_kinesis.source.options import SOURCE_OPTIONS, SourceConfig

    formats = set(value_options(writing=True))  # (they fill the format's settings: test_declared_defaults)
    sink = [o for o in sink_options().values() if o not in formats]
    for config, declared in ((SourceConfig, SOURCE_OPTIONS), (SinkConfig, sink)):
        fields = config.__dataclass_fields__
        for option in declared:
            if option.field:
                assert fields[option.field].default == option.default, option.key


def test_the_cli_prints_the_docs_rows_from_the_declarations():
    pytest.importorskip("typer")
    from typer.testing import CliRunner

    from pyspark_kinesis.cli.app import app
    from pyspark_kinesis.sink.options import sink_options
    from pyspark_kinesis.source.options import known_options

    listed = CliRunner().invoke(app, ["options", "--markdown"], env={"COLUMNS": ""})
    assert listed.exit_code == 0, listed.output
    assert markdown_table(known_options().values()) in listed.stdout
    assert markdown_table(sink_options().values()) in listed.stdout


def test_consumer_type_allows_exactly_the_registered_ways_of_reading():
    """The driver never imports the executor's read modes (an import contract), so the option's
    values are declared beside it and tied to the registry here."""
    from pyspark_kinesis.source.executor.modes import MODES
    from pyspark_kinesis.source.options import known_options

    assert set(known_options()["consumerType"].choices) == set(MODES)
