"""The benchmarks' command (a developer's tool in the repository, not part of the package):
`python -m benchmarks <name> [options]`, or `bash scripts/bench.sh <name> [options]`, which sets up the
environment first. Each starts its own local servers on 127.0.0.1, prints its figures and, with
`--write`, updates its section of docs/performance.md.
"""

from __future__ import annotations

import os

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(add_completion=False, help="pyspark-kinesis benchmarks (figures in docs/performance.md).")
console = Console()


@app.command("assign")
def bench_assign(
    write: str = typer.Option(None, help="Also write the full table as Markdown to this file."),
    seed: int = typer.Option(24639, help="Seed of the simulation."),
) -> None:
    """Overload (FLINK-24639) of every shard assigner over simulated streams."""
    from . import assignment

    rows = assignment.run(seed)
    table = Table(title=f"shard assignment overload ({len(rows) // 3} cases per assigner)")
    columns = (
        "scenarios",
        "assigner",
        "count mean",
        "count worst",
        "bytes mean",
        "bytes worst",
        "capped mean",
        "capped worst",
    )
    for column in columns:
        table.add_column(column)
    for family, name, *figures in assignment.summary(rows):
        table.add_row(family, name, *(f"{f:.2f}" for f in figures))
    console.print(table)
    if write:
        with open(write, "w") as handle:
            handle.write(assignment.markdown(rows))
        console.print(f"wrote {write}")


@app.command("sink")
def bench_sink(
    records: int = typer.Option(50_000, min=1000, max=5_000_000, help="Records per run."),
    size: int = typer.Option(1000, min=1, max=1_000_000, help="Payload bytes per record."),
    concurrency: int = typer.Option(8, min=1, max=64, help="Concurrent PutRecords calls (both sides)."),
    shards: int = typer.Option(4, min=1, max=256, help="Shards of each fresh stream."),
    repeat: int = typer.Option(
        5, min=1, max=20, help="Rounds of the three ways; medians and spread are reported."
    ),
    write: str = typer.Option(None, help="Also write the results as Markdown to this file."),
) -> None:
    """Sink records/s and MB/s against a plain boto3 PutRecords loop on kinesalite."""
    from . import sink

    results = sink.run(records, size, concurrency, shards, repeat)
    ways = sink.spreads(results)
    table = Table(
        title=f"sink throughput: {records} x {size} B, concurrency {concurrency}, {shards} shards: median (lowest-highest)"
    )
    for column in ("way", "records/s", "MB/s", "vs loop"):
        table.add_column(column)
    for way in sink.WAYS:
        spread = ways[way]
        table.add_row(
            way,
            spread.show_rate(records),
            spread.show_rate(records * size, 1e6, 1),
            f"{ways['loop'].median / spread.median:.2f}x",
        )
    console.print(table)
    if write:
        with open(write, "w") as handle:
            handle.write(sink.markdown(results, records, size, concurrency, shards))
        console.print(f"wrote {write}")


DOC = "docs/performance.md"


@app.command("decode")
def bench_decode(
    write: str = typer.Option(None, help=f"Also write the section into this file ({DOC})."),
) -> None:
    """GetRecords decoding per core: botocore's parser against the connector's path, 100 B to 10 KB."""
    from . import decode, report

    rows = decode.run_decode()
    table = Table(title="GetRecords decode, one core: MB/s, median (lowest-highest)")
    for column in ("size", "botocore", "msgspec", "decode", "path", "path vs botocore"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            f"{row.size} B",
            row.mb(row.botocore),
            row.mb(row.msgspec),
            row.mb(row.decode),
            row.mb(row.path),
            f"{row.botocore.median / row.path.median:.1f}x",
        )
    console.print(table)
    if write:
        report.write_section(write, "bench-decode", decode.markdown_decode(rows))


@app.command("memory")
def bench_memory(
    rounds: int = typer.Option(3, min=1, max=20, help="Fresh processes per case."),
    write: str = typer.Option(None, help=f"Also write the section into this file ({DOC})."),
) -> None:
    """Peak resident memory the read path adds: one response's decode, one shard's read at the defaults."""
    from . import memory, report

    rows = memory.run_memory(rounds)
    table = Table(title="Peak resident memory added: MiB, and x payload, median (lowest-highest)")
    for column in ("case", "record size", "payload MiB", "peak grew MiB", "peak / payload"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            memory.LABELS[row.case], f"{row.size} B", f"{row.payload_mib:.1f}", row.show_mib(), row.show()
        )
    console.print(table)
    if write:
        report.write_section(write, "bench-memory", memory.markdown_memory(rows, rounds))


@app.command("glue-decode")
def bench_glue_decode(
    records: int = typer.Option(20_000, min=1000, max=1_000_000, help="Records per case."),
    write: str = typer.Option(None, help=f"Also write the section into this file ({DOC})."),
) -> None:
    """valueFormat=glue decoding per core (Avro, JSON Schema, Protobuf): the connector against the
    format's decoder alone, MB per CPU-second."""
    from . import glue_decode, report

    rows = glue_decode.run(records)
    table = Table(title="Glue Schema Registry decode, one core: MB per CPU-second, median (lowest-highest)")
    for column in ("records", "decoder", "decoder alone", "connector", "connector / decoder"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row.case,
            row.decoder,
            row.mb(row.fastavro),
            row.mb(row.connector),
            f"{row.fastavro.median / row.connector.median:.2f}",
        )
    console.print(table)
    if write:
        report.write_section(write, "bench-glue-decode", glue_decode.markdown(rows))


@app.command("read")
def bench_read(
    shards: str = typer.Option("1,2,4,8,16", help="Comma-separated shard counts, one stream each."),
    records: int = typer.Option(200_000, min=1000, max=5_000_000, help="Records per stream."),
    size: int = typer.Option(1000, min=10, max=1_000_000, help="Payload bytes per record."),
    repeat: int = typer.Option(3, min=1, max=20, help="Rounds of loop and warm query per shard count."),
    write: str = typer.Option(None, help=f"Also write the section into this file ({DOC})."),
    plot: str = typer.Option(None, help="Also draw throughput by shard count into this PNG."),
    tls: bool = typer.Option(
        False, "--tls", help="The server serves HTTPS, as Kinesis does (its own section)."
    ),
) -> None:
    """End to end on kinesalite: the connector (AvailableNow, noop sink) against a boto3 GetRecords loop."""
    import tempfile
    from pathlib import Path

    from . import reading, report

    counts = [int(s) for s in shards.split(",") if s.strip()]
    with tempfile.TemporaryDirectory(prefix="bench-read-") as work:
        rows = reading.run_throughput(counts, records, size, Path(work), repeat, tls)
    table = Table(
        title=f"read throughput, {records:,} x {size} B per stream: records/s, median (lowest-highest)"
    )
    for column in ("shards", "loop", "connector warm", "warm vs loop", "connector cold"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            str(row.shards),
            row.loop.show_rate(row.records),
            row.warm.show_rate(row.records),
            f"{row.ratio():.2f}x",
            f"{row.rows / row.cold_s:,.0f}",
        )
    console.print(table)
    if plot:
        reading.plot_throughput(rows, plot)
    if write:
        command = "bash scripts/bench.sh read"
        if counts != [1, 2, 4, 8, 16] or records != 200_000 or size != 1000 or repeat != 3:
            command += (
                f" --shards {','.join(map(str, counts))} --records {records} --size {size} --repeat {repeat}"
            )
        if plot:
            command += f" --plot {plot}"
        if tls:
            command += " --tls"
        section = "bench-read-tls" if tls else "bench-read"
        report.write_section(write, section, reading.markdown_throughput(rows, plot, command, tls))


@app.command("scheduled")
def bench_scheduled(
    shards: int = typer.Option(4, min=1, max=64, help="Shards of the stream."),
    rounds: int = typer.Option(3, min=1, max=20, help="Jobs of each kind, taking turns."),
    mb: str = typer.Option(
        "",
        help="Instead: sizes in MB (e.g. 100,1000) a fresh job and a fresh boto3 script each read from the "
        "benchmark server, with the break-even size.",
    ),
    write: str = typer.Option(None, help=f"Also write the section into this file ({DOC})."),
) -> None:
    """What a scheduled availableNow job pays in a fresh driver process, beside the same query warm."""
    if mb:
        _scheduled_sizes([int(size) for size in mb.split(",")], rounds, write)
        return
    import tempfile
    from pathlib import Path

    from . import report, scheduled
    from .process_cpu import UNEXPLAINED_LIMIT

    with tempfile.TemporaryDirectory(prefix="bench-scheduled-") as work:
        runs = scheduled.run(shards, rounds, Path(work))
    command = "bash scripts/bench.sh scheduled" + (
        f" --shards {shards} --rounds {rounds}" if (shards, rounds) != (4, 3) else ""
    )
    text = scheduled.markdown(runs, shards, command)
    console.print(text)
    flagged = [run for run in runs if run.usage.flagged()]
    if (
        flagged
    ):  # (a process's time lost: on 2026-11-28 a fresh job's JVM, orphaned and not adopted, counted 0)
        console.print(
            f"FLAGGED: {len(flagged)} of {len(runs)} jobs had more than {UNEXPLAINED_LIMIT:.0%} of the machine's "
            "busy time unexplained, or a process left the tree uncounted: the figures above do not hold"
        )
        raise typer.Exit(1)
    if write:
        report.write_section(write, "bench-scheduled", text)


def _scheduled_sizes(sizes: list[int], rounds: int, write: str | None) -> None:
    import tempfile
    from pathlib import Path

    from . import report, scheduled

    with tempfile.TemporaryDirectory(prefix="bench-scheduled-") as work:
        runs = scheduled.run_sizes(sizes, rounds, Path(work))
    command = f"bash scripts/bench.sh scheduled --mb {','.join(map(str, sizes))}" + (
        f" --rounds {rounds}" if rounds != 3 else ""
    )
    text = scheduled.markdown_sizes(runs, command)
    console.print(text)
    flagged = [run for jobs in runs.values() for run in jobs if run.usage.flagged()]
    if flagged:
        console.print(
            f"FLAGGED: {len(flagged)} runs lost time or left processes: the figures above do not hold"
        )
        raise typer.Exit(1)
    if write:
        report.write_section(write, "bench-scheduled-sizes", text)


@app.command("tunings")
def bench_tunings(
    mb: float = typer.Option(300.0, min=10, max=2000, help="MB of payload per stream."),
    rounds: int = typer.Option(3, min=1, max=20, help="Rounds of loop and query per configuration."),
    write: str = typer.Option(None, help=f"Also write the section into this file ({DOC})."),
) -> None:
    """What each process tuning buys: section 8's query with each switch turned off in turn."""
    from . import report, tunings

    figures = tunings.run(mb, rounds)
    command = (
        "bash scripts/bench.sh tunings"
        + (f" --mb {mb:g}" if mb != 300 else "")
        + (f" --rounds {rounds}" if rounds != 3 else "")
    )
    text = tunings.markdown(figures, command)
    console.print(text)
    if write:
        report.write_section(write, "bench-tunings", text)


@app.command("sink-cpu")
def bench_sink_cpu(
    records: int = typer.Option(100_000, min=1000, max=5_000_000, help="Records per write."),
    size: int = typer.Option(1000, min=10, max=1_000_000, help="Payload bytes per record."),
    concurrency: int = typer.Option(8, min=1, max=64, help="Concurrent PutRecords calls (every way)."),
    shards: int = typer.Option(4, min=1, max=256, help="Shards of the server's stream."),
    rounds: int = typer.Option(3, min=1, max=20, help="Rounds of the four ways."),
    write: str = typer.Option(None, help=f"Also write the section into this file ({DOC})."),
) -> None:
    """The sink's MB per CPU-second (producer, aggregated, a Spark write) against a boto3 loop."""
    from . import report, sink_cpu

    result = sink_cpu.run(records, size, concurrency, shards, rounds)
    defaults = {"records": 100_000, "size": 1000, "concurrency": 8, "shards": 4, "rounds": 3}
    given = {"records": records, "size": size, "concurrency": concurrency, "shards": shards, "rounds": rounds}
    command = "bash scripts/bench.sh sink-cpu" + "".join(
        f" --{name} {value}" for name, value in given.items() if value != defaults[name]
    )
    text = sink_cpu.markdown(result, command)
    console.print(text)
    if write:
        report.write_section(write, "bench-sink-cpu", text)


MASTERS = typer.Option(
    None,
    "--master",
    help="Spark master, repeatable: local[2] (one executor, the default), local-cluster[2,1,1024] (two).",
)


@app.command("latency")
def bench_latency(
    rate: int = typer.Option(100, min=1, max=2000, help="Records put per second."),
    seconds: int = typer.Option(30, min=5, max=600, help="How long records are put."),
    shards: int = typer.Option(4, min=1, max=64, help="Shards of the stream."),
    kind: str = typer.Option("kinesalite", help="kinesalite or kinesis-local."),
    consumer_type: str = typer.Option(
        "polling",
        "--consumer-type",
        help="polling, efo or both (enhanced fan-out needs --kind kinesis-local).",
    ),
    masters: list[str] | None = MASTERS,
    quiet_s: int = typer.Option(
        0, min=0, max=900, help="Seconds the stream stays empty after the query's first batches."
    ),
    repeat: int = typer.Option(
        1, "--runs", min=1, max=9, help="Runs one after another (polling on local[2]: goals on their median)."
    ),
    write: str = typer.Option(None, help=f"Also write the section into this file ({DOC})."),
) -> None:
    """p50/p99 delay from put to foreachBatch with the default trigger."""
    import tempfile
    from pathlib import Path

    from . import latency, report

    if consumer_type not in ("polling", "efo", "both"):
        raise typer.BadParameter("--consumer-type must be polling, efo or both")
    if consumer_type != "polling" and kind != "kinesis-local":
        raise typer.BadParameter(
            "enhanced fan-out needs --kind kinesis-local (kinesalite has no SubscribeToShard)"
        )
    modes = ["polling", "efo"] if consumer_type == "both" else [consumer_type]
    masters = masters or ["local[2]"]
    runs = {}
    for master in masters:
        for mode in modes:
            label = mode if masters == ["local[2]"] else f"{mode} on {master}"
            with tempfile.TemporaryDirectory(prefix="bench-latency-") as work:
                runs[label] = latency.run_latency(
                    rate, seconds, shards, Path(work), kind, mode, master, quiet_s
                )
    if consumer_type == "polling" and masters == ["local[2]"]:
        more = []
        for _again in range(repeat - 1):
            with tempfile.TemporaryDirectory(prefix="bench-latency-") as work:
                more.append(
                    latency.run_latency(rate, seconds, shards, Path(work), kind, "polling", "local[2]", 0)
                )
        text = latency.markdown_latency([runs["polling"], *more], rate, seconds, shards, kind)
        name = "bench-latency"
    else:
        text = latency.markdown_modes(runs, rate, seconds, shards, quiet_s)
        name = "bench-latency-modes" + ("-quiet" if quiet_s else "")
    console.print(text)
    if write:
        report.write_section(write, name, text)


@app.command("flood")
def bench_flood(
    rate: int = typer.Option(50, min=1, max=1000, help="Records put per second."),
    seconds: int = typer.Option(
        60, min=10, max=600, help="Length of the put window (the flood: its second half)."
    ),
    shards: int = typer.Option(4, min=1, max=64, help="Shards of the stream."),
    write: str = typer.Option(None, help=f"Also write the section into this file ({DOC})."),
    json_out: str = typer.Option(
        None, "--json", help="Also write the delays and the attacker's counts here."
    ),
) -> None:
    """An efo query's latency on two executors before and during a flood of relay connections."""
    import tempfile
    from pathlib import Path

    from . import relay_flood, report

    with tempfile.TemporaryDirectory(prefix="bench-flood-") as work:
        flood = relay_flood.run_flood(rate, seconds, shards, Path(work))
    text = relay_flood.markdown_flood(flood, rate, seconds, shards)
    console.print(text)
    if json_out:
        relay_flood.write_json(flood, Path(json_out))
    if write:
        report.write_section(write, "bench-flood", text)


@app.command("api")
def bench_api(
    shards: int = typer.Option(16, min=1, max=256, help="Shards of the idle stream."),
    seconds: int = typer.Option(60, min=10, max=600, help="Length of the counted window."),
    idle_ms: int = typer.Option(500, min=0, max=60_000, help="idlePollIntervalMs of the query."),
    write: str = typer.Option(None, help=f"Also write the section into this file ({DOC})."),
) -> None:
    """Kinesis calls per minute, by caller, while a query reads an idle stream."""
    import tempfile
    from pathlib import Path

    from . import latency, report

    with tempfile.TemporaryDirectory(prefix="bench-api-") as work:
        calls, window, batches, violations = latency.run_api(shards, seconds, Path(work), idle_ms)
    text = latency.markdown_api(calls, window, shards, idle_ms, batches, violations)
    console.print(text)
    if write:
        report.write_section(write, "bench-api", text)


@app.command("wide")
def bench_wide(
    shards: str = typer.Option("100,500,1000,2000", help="Comma-separated shard counts."),
    seconds: int = typer.Option(60, min=10, max=600, help="Length of each counted window."),
    write: str = typer.Option(None, help=f"Also write the section into this file ({DOC})."),
    plot: str = typer.Option("docs/img/wide.png", help="Where the plot goes (with --write)."),
) -> None:
    """A running processingTime query on two executors over ever wider streams (issue #65 item 5)."""
    import tempfile
    from pathlib import Path

    from . import report, wide

    runs = []
    for count in [int(s) for s in shards.split(",") if s.strip()]:
        with tempfile.TemporaryDirectory(prefix="bench-wide-") as work:
            runs.append(wide.run_wide(count, seconds, Path(work)))
        console.print(wide.markdown_wide(runs, "", None).splitlines()[-1])
    command = f"bash scripts/bench.sh wide --shards {shards} --seconds {seconds}"
    drawn = None
    if write:
        Path(plot).parent.mkdir(parents=True, exist_ok=True)
        wide.draw(runs, plot)
        drawn = os.path.relpath(plot, Path(write).parent)
    text = wide.markdown_wide(runs, command, drawn)
    console.print(text)
    if write:
        report.write_section(write, "bench-wide", text)


@app.command("offsets")
def bench_offsets(
    shards: str = typer.Option("100,1000,5000,10000", help="Comma-separated shard counts."),
    batches: int = typer.Option(10, min=2, max=200, help="Batches planned per shard count."),
    write: str = typer.Option(None, help=f"Also write the section into this file ({DOC})."),
) -> None:
    """Offset bytes per shard (format 2 against 3) and the driver's planning time per batch."""
    from . import offsets, report

    counts = [int(s) for s in shards.split(",") if s.strip()]
    rows = [row for count in counts for row in offsets.sizes(count)]
    plan = {count: offsets.planning_times(count, batches) for count in counts}
    text = offsets.markdown(rows, plan, batches)
    console.print(text)
    if write:
        report.write_section(write, "bench-offsets", text)


@app.command("planner")
def bench_planner(
    shards: str = typer.Option("4,16", help="Comma-separated shard counts."),
    rounds: int = typer.Option(
        5, min=1, max=50, help="Fresh planner processes per shard count and bytecode case."
    ),
    write: str = typer.Option(None, help=f"Also write the section into this file ({DOC})."),
) -> None:
    """The connector's CPU in a query's planner process (imports, stream reader, one batch's planning)."""
    from . import planner_share, report

    counts = [int(s) for s in shards.split(",") if s.strip()]
    results = planner_share.run(counts, rounds)
    command = f"bash scripts/bench.sh planner --shards {','.join(map(str, counts))} --rounds {rounds}"
    text = planner_share.markdown(results, rounds, command)
    console.print(text)
    if write:
        report.write_section(write, "bench-planner", text)


_EXTRA_OPTION = typer.Option(None, help="Extra source option KEY=VALUE for the connector (repeatable).")


_ONLY_SECTION = typer.Option(None, help="Only this section (its marker name, repeatable).")


@app.command("page")
def bench_page(
    only: list[str] | None = _ONLY_SECTION,
    list_only: bool = typer.Option(
        False, "--list", help="Print the sections and their commands, run nothing."
    ),
    bound_min: float = typer.Option(90, min=1, help="Minutes one section's command may take."),
    page: str = typer.Option(DOC, help="The page, relative to the repository."),
) -> None:
    """Regenerate the whole performance page: every section's own command, in order (hours)."""
    from . import REPO
    from . import page as whole_page
    from .report import commit

    if list_only:
        for section in whole_page.sections((REPO / page).read_text()):
            print(f"{section.name}: {section.command}")  # (one line each, not wrapped)
        return
    done = whole_page.run(page, only or [], bound_min * 60)
    failed = [(s, code) for s, code, _minutes in done if code != 0]
    for section, code, minutes in done:
        console.print(f"{section.name}: {minutes:.1f} min, {'ok' if code == 0 else f'FAILED (exit {code})'}")
    console.print(f"at commit {commit()}")
    if failed:  # (a flagged or failed section: its figures were not written, or do not hold)
        raise typer.Exit(1)


@app.command("cpu")
def bench_cpu(
    server: str = typer.Option(
        "memory", help="memory (the benchmark server, its own process) or kinesalite."
    ),
    sizes: str = typer.Option("100,1000,10000", help="Comma-separated record sizes in bytes."),
    shards: str = typer.Option("1,4,16", help="Comma-separated shard counts."),
    mb: float = typer.Option(
        100.0, min=1, max=2000, help="MB of payload per stream (one per configuration)."
    ),
    rounds: int = typer.Option(3, min=1, max=20, help="Rounds of loop and warm query per configuration."),
    option: list[str] | None = _EXTRA_OPTION,
    tls: bool = typer.Option(
        False, "--tls", help="The server serves HTTPS, as Kinesis does (its own section)."
    ),
    write: str = typer.Option(None, help=f"Also write the section into this file ({DOC})."),
) -> None:
    """CPU per MB of every Spark process (split by role) against a boto3 loop, and shards per core."""
    import tempfile
    from pathlib import Path

    from . import cpu, near_limit, report
    from .process_cpu import UNEXPLAINED_LIMIT

    if server not in ("memory", "kinesalite"):
        raise typer.BadParameter("--server must be memory or kinesalite")
    size_list = [int(s) for s in sizes.split(",") if s.strip()]
    counts = [int(s) for s in shards.split(",") if s.strip()]
    if any("=" not in o for o in option or []):
        raise typer.BadParameter("--option takes KEY=VALUE")
    extra = dict(o.split("=", 1) for o in option or [])
    with tempfile.TemporaryDirectory(prefix="bench-cpu-") as work:
        rows, cold_s = cpu.run_cpu(server, size_list, counts, mb, rounds, Path(work), extra, tls)
    table = Table(title=f"CPU per MB on {server}: median (lowest-highest) over {rounds} rounds")
    for column in cpu.HEADER:
        table.add_column(column)
    for cells in cpu.table_rows(rows):
        table.add_row(*cells)
    console.print(table)
    for row in rows:
        beyond = row.beyond()
        if beyond is not None:
            near = Table(title=f"Near the limit, {row.size:,} B records on {row.shards} shards")
            for column in near_limit.HEADER:
                near.add_column(column)
            near.add_row(*near_limit.cells(beyond))
            console.print(near)
    for goal, value, met in cpu.goals(rows):
        console.print(f"goal: {goal}: {value}, {'met' if met else 'NOT met'}")
    command = (
        f"bash scripts/bench.sh cpu --server {server} --sizes {','.join(map(str, size_list))} "
        f"--shards {','.join(map(str, counts))} --mb {mb:g} --rounds {rounds}"
        + "".join(f" --option {k}={v}" for k, v in extra.items())
        + (" --tls" if tls else "")
    )  # (printed above the figures: the exact command that regenerates them)
    if write:
        report.write_section(
            write,
            cpu.section_name(server, extra, mb, tls),
            cpu.markdown_cpu(rows, cold_s, command, extra, tls),
        )
    flagged = sum(row.unexplained()[1] for row in rows)
    if flagged:  # a lost process, or another load on the machine: the figures above do not hold
        console.print(
            f"FLAGGED: {flagged} measurements had more than {UNEXPLAINED_LIMIT:.0%} of the machine's busy time "
            "unexplained, or a process left the tree uncounted (stderr names it): measure again on a quiet machine"
        )
        raise typer.Exit(1)


if __name__ == "__main__":
    app()
