"""The chaos suite's command: `bash scripts/chaos.sh [--runs N] [--seconds S] [--seed K] [--write F]`.

Runs N chaos runs (see harness.py), prints a table of faults injected and records put / read / lost /
duplicated per run, writes it as Markdown with the date and commit when asked, and exits non-zero if
any run lost, duplicated, reordered or invented a record, could not finish, missed a scheduled fault,
never delivered a fault kind its plan meant to, or broke a service rule (strict mode).
"""

from __future__ import annotations

import contextlib
import os
import platform
import sys
import tempfile
from datetime import date
from pathlib import Path

import typer
from benchmarks.report import commit
from rich.console import Console
from rich.table import Table

from tests.chaos.harness import ChaosRun, Plan, Result
from tests.chaos.plan import MISPLACED

app = typer.Typer(add_completion=False)
console = Console()


def by_kind(results: list[Result]) -> list[str]:
    """Each fault kind: the runs that planned it, the runs it reached, and how many were delivered."""
    kinds = sorted(
        {k for r in results for k in r.faults if k != MISPLACED}
        | {k for r in results for k in r.plan.planned() if k != MISPLACED}
    )
    lines = ["| fault kind | runs that planned it | runs it reached | delivered |", "|---|---|---|---|"]
    for kind in kinds:
        planned = sum(kind in r.plan.planned() for r in results)
        reached = sum(bool(r.faults.get(kind)) for r in results)
        lines.append(f"| {kind} | {planned} | {reached} | {sum(r.faults.get(kind, 0) for r in results):,} |")
    return lines


def markdown(results: list[Result], seed: int, seconds: float) -> str:
    aimed = sum(r.aimed for r in results)
    misplaced = sum(r.faults.get(MISPLACED, 0) for r in results)
    kinds = sorted({k for r in results for k in r.faults if k != MISPLACED})
    lines = [
        "# Chaos runs",
        "",
        f"Measured {date.today().isoformat()} at commit {commit()} on a {os.cpu_count()}-core "
        f"{platform.machine()} machine (Python "
        f"{platform.python_version()}), with `bash scripts/chaos.sh --runs {len(results)} --seconds {seconds:g} "
        f"--seed {seed}`. {len(results)} runs, {aimed:,} faults aimed at the connector, Spark and the "
        f"processes (by kind in the table below), and apart from them {misplaced:,} misplaced KPL user "
        "records the producer wrote (records a reader must drop, counted one by one); "
        f"{sum(len(r.undelivered) for r in results)} planned fault kinds never delivered, "
        f"{sum(sum(r.violations.values()) for r in results)} broken service rules (strict mode), "
        f"{sum(r.lost for r in results)} records lost, {sum(r.duplicated for r in results)} duplicated, "
        f"{sum(r.order_violations for r in results)} per-key order violations, "
        f"{sum(r.lineage_violations for r in results)} child-before-parent batches, "
        f"{sum(len(r.missed) for r in results)} scheduled faults that found nothing to hit, "
        f"{sum(not r.ok for r in results)} failed runs.",
        "",
        "Each run: a local Kinesis (kinesis-local on even runs, kinesalite on odd ones; persistence on; every "
        "fourth run reads by enhanced fan-out, marked efo), a "
        "fault proxy in front of it for the connector, a producer putting numbered records with 12 partition "
        "keys, and the query in its own driver process writing each batch with foreachBatch to Parquet "
        "(overwrite per batch id: idempotent). A seeded schedule says when faults are due; each fires only "
        "once the query is in the state it targets and counts only if delivered (see tests/chaos/harness.py; "
        "the list below says what each one hit). "
        "At the end the producer stops, one AvailableNow run drains the stream (with ten times the run's maxRecordsPerBatch, a budget changed across a restart), and the output is compared "
        "with everything the server holds (`server lost` counts records the producer was told were written "
        "but the server does not hold once). One enhanced fan-out run and one kinesalite run in every eight "
        "run as production does, marked async: Spark's asynchronous progress tracking (offsets durable only "
        "every 1 or 3 s, on fan-out runs every 10 or 15 s, as their batches take seconds; the sink is a `foreach` writer with one file per batch and partition, since Spark "
        "refuses foreachBatch there; the drain is a processingTime run with every offset durable, since it "
        "refuses AvailableNow), and a stop long enough for the head of a shard to age out past retention "
        "(the fault proxy trims it, answering positions below the trim with an iterator at the oldest record "
        "left or, every other time, an InvalidArgumentException), read with failOnDataLoss=false. `aged out` "
        "counts the records that stop took before the query delivered them (not counted as lost) and the "
        'data-loss reports the driver logged for them ("Data loss in batch ...", from the batch-end '
        "records and the loss notes beside them, whichever executor or attempt read the shard; one per "
        "shard and batch, again after a driver restart): a run in which a shard lost records that no "
        "report names fails. The query's shape: `plain` (the source's rows), `stateful` (a watermark and "
        "`applyInPandasWithState` passing every row through, with event-time timeouts: Spark runs no-data "
        "batches and commits offsets that did not move) or `two-source` (a union with Spark's "
        "`rate-micro-batch` source: batches that only the other source has data for; its rows are left "
        "out of the comparison, and a run without any fails).",
        "",
        "Fault kinds: `proxy throttle/internal/unavailable/expired/reset` on GetRecords (reset: a body cut off "
        "mid-way, short of its Content-Length: a closed connection that botocore and the read loop retry); `proxy limit/internal` on ListShards and "
        "GetShardIterator; `proxy subscribe in_use/limit/internal` refused SubscribeToShard calls (efo runs); `proxy "
        "subscription ended/reset` every subscription ended by the proxy after 3-8 events, cleanly as Kinesis "
        "ends each one after 5 minutes or with a TCP reset in the middle of an event (efo runs); `KPL misplaced "
        "record` user records the producer put, every 3rd to 6th chunk, as a KPL with a stale shard map puts "
        "them: in one aggregate (aws-kinesis-agg) with a random explicit hash key, landing in a shard whose hash "
        "range does not hold them, then put again to their own shards (the ground truth opens aggregates and "
        "leaves such copies out, as the KCL does: a reader that emits them duplicates them); `fan-out agent SIGKILL` "
        "the executor's fan-out agent, holding the subscriptions, killed while a batch is in flight (efo "
        "runs); `proxy delay` held-back responses; `proxy "
        "server-down` calls answered 503 while the server restarted; `driver SIGKILL ahead of the durable log` "
        "(async runs: batches had run beyond the last offset Spark made durable, so the restart plans them "
        "again); `stop past retention` (async runs: the driver killed and a shard's head aged out while it "
        "was down); `proxy trimmed position` positions below the trim answered with an error; `driver "
        "SIGKILL before tasks` (a batch "
        "logged, none of its tasks recorded) and `driver SIGKILL mid-batch` (a logged batch, some tasks "
        "recorded, not committed); `executor SIGKILL` while a batch is in flight (local-cluster[2,1,1024] "
        "runs); `task failure` first attempts failed before or after recording their batch end; `speculative "
        "attempt` task attempts Spark's event log marks speculative; `partial batch` batches the foreachBatch "
        "used none of or only partition 0 of; `reshard` split, merge or UpdateShardCount; `server restart` "
        "with its data kept, counted only when calls were refused while down. Speculation was on in the runs "
        "marked spec: the standalone-cluster runs (two workers on 127.0.0.2 and 127.0.0.3), since Spark "
        "speculates only in cluster modes and never onto the host of the running attempt. `lineage` counts child shards with rows in a batch not after every batch of their "
        "parents' rows (order rule 2); `missed` scheduled faults that found no state to hit (a run with one "
        "fails). Every run goes through the proxy's strict mode (tests/support/service_rules.py, "
        "docs/testing.md): it keeps the service's quotas and rules (GetRecords and GetShardIterator rates and "
        "read bytes per shard, page sizes, iterator expiry, ListShards and DescribeStreamSummary rates, the "
        "SubscribeToShard rules), answers a broken one as Kinesis does, and counts it in `quota "
        "violations` (listed per rule below; the injected faults above are not counted there). A "
        "SubscribeToShard refused only because another process (another executor's fan-out agent, a "
        "speculative attempt, a killed executor's replacement) subscribed to the shard just before, or a "
        "shard's GetRecords or GetShardIterator rate broken only by two readers' calls together (a "
        "speculative attempt reading beside the first), is counted apart, as `collisions`: Kinesis refuses "
        "or throttles and neither process can know of the other, so the reader must take the refusal and "
        "try again; one process breaking a rule by its own calls (the planner's looks counted with them) "
        "is a violation.",
        "",
        *by_kind(results),
        "",
        "A run fails when it lost, duplicated, reordered or invented a record, when a scheduled fault "
        "found nothing to hit (`missed`), when a fault kind its plan meant to deliver never was "
        "(`undelivered`: a rare proxy kind not drawn by its family's 6th call is given to the next call "
        "that draws none), or when the connector broke a service rule (`quota violations`).",
        "",
        "| run | server | master | shape | spec | seconds | "
        + " | ".join(kinds)
        + " | faults | misplaced records | put | read | "
        "lost | duplicated | order | lineage | server lost | aged out | driver exits | missed | undelivered | "
        "quota violations | collisions | result |",
        "|" + "---|" * (len(kinds) + 23),
    ]
    for r in results:
        p = r.plan
        lines.append(
            f"| {p.index} | {p.kind}{' (efo)' if p.consumer == 'efo' else ''}"
            f"{f' (async {p.async_ms} ms)' if p.async_ms is not None else ''} | {p.master} | {p.shape} | {'yes' if p.speculation else 'no'} | {r.seconds:.0f} | "
            + " | ".join(str(r.faults.get(k, 0)) for k in kinds)
            + f" | {r.aimed} | {r.faults.get(MISPLACED, 0)} | {r.put} | {r.read} | {r.lost} | {r.duplicated} | "
            f"{r.order_violations} | {r.lineage_violations} | {r.server_lost} | "
            f"{r.aged_out} ({r.loss_warnings} reported"
            f"{'; shards not reported: ' + ', '.join(r.unreported) if r.unreported else ''}) | {r.unplanned_exits} | "
            f"{len(r.missed)} | {', '.join(r.undelivered) or 0} | {sum(r.violations.values())} | "
            f"{sum(r.collisions.values())} | {r.verdict()} |"
        )
    lines += ["", "## Quota violations (strict mode)", ""]
    for r in results:
        broken = ", ".join(f"{rule}: {n}" for rule, n in sorted(r.violations.items())) or "none"
        collided = ", ".join(f"{rule}: {n}" for rule, n in sorted(r.collisions.items()))
        lines.append(f"- run {r.plan.index}: {broken}" + (f" (collisions: {collided})" if collided else ""))
    lines += ["", "## What each scheduled fault hit", ""]
    for r in results:
        lines.append(f"- run {r.plan.index}: " + "; ".join(r.hits + [f"MISSED {m}" for m in r.missed]))
    return "\n".join(lines) + "\n"


@app.command()
def main(
    runs: int = typer.Option(20, min=1, max=500, help="Chaos runs."),
    seconds: float = typer.Option(45, min=10, max=1800, help="Length of each run's faulty phase."),
    seed: int = typer.Option(1, help="Seed of the fault schedules."),
    first: int = typer.Option(0, min=0, help="Index of the first run (to replay one run of a seed)."),
    write: str = typer.Option(None, help="Also write the table as Markdown to this file."),
    keep: str = typer.Option(
        None, help="Keep each run's files (checkpoint, records, output) under this directory."
    ),
) -> None:
    results = []
    with contextlib.nullcontext(keep) if keep else tempfile.TemporaryDirectory(prefix="chaos-") as work:
        for index in range(first, first + runs):
            plan = Plan.draw(index, seed, seconds)
            result = ChaosRun(plan, Path(work) / f"run-{index}").run()
            results.append(result)
            if write:  # after every run, so a long suite that is cut short still leaves its table
                Path(write).write_text(markdown(results, seed, seconds))
            console.print(
                f"run {index} ({plan.kind}, {plan.master}): {sum(result.faults.values())} faults "
                f"{dict(result.faults)}; put {result.put}, read {result.read}, lost {result.lost}, duplicated "
                f"{result.duplicated}, order {result.order_violations}, server lost {result.server_lost}, "
                f"driver exits {result.unplanned_exits}, lineage {result.lineage_violations}, missed "
                f"{result.missed}, undelivered {result.undelivered}, rules broken "
                f"{dict(result.violations)} {result.verdict()}"
            )
    table = Table(title=f"chaos: {len(results)} runs")
    for column in (
        "runs",
        "faults",
        "misplaced records",
        "put",
        "read",
        "lost",
        "duplicated",
        "order",
        "failed runs",
    ):
        table.add_column(column)
    table.add_row(
        str(len(results)),
        str(sum(r.aimed for r in results)),
        str(sum(r.faults.get(MISPLACED, 0) for r in results)),
        str(sum(r.put for r in results)),
        str(sum(r.read for r in results)),
        str(sum(r.lost for r in results)),
        str(sum(r.duplicated for r in results)),
        str(sum(r.order_violations for r in results)),
        str(sum(not r.ok for r in results)),
    )
    console.print(table)
    if write:
        Path(write).write_text(markdown(results, seed, seconds))
        console.print(f"wrote {write}")
    if not all(r.ok for r in results):
        sys.exit(1)


if __name__ == "__main__":
    app()
