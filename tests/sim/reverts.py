"""Whether the simulation finds what we know: each fix it should see, taken back out of a copy of the
connector, and the default suite's seeds run against that copy until one fails.

`python -m tests.sim.reverts [NAME ...] [--seeds N] [--days D]` prints, per fix, the first seed whose run
fails (and how), or that none of the N did and which of the suite's regression schedules then fails. A fix whose code moved so that its revert no longer applies
says so (the revert is a text replacement in one module: update it with the fix).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "pyspark_kinesis"


@dataclass(frozen=True)
class Revert:
    name: str
    what: str  # the defect the fix removed
    module: str  # under src/pyspark_kinesis
    old: str
    new: str


REVERTS = [
    Revert(
        "quiet-tip-renewal",
        "#61.1: an idle spell longer than the retention ends in a false data loss",
        "source/driver/planner.py",
        "        streams = steps.renewed(streams, self.probe.quiet)\n",
        "",
    ),
    Revert(
        "hostile-hash-key",
        "#61.2: an explicit hash key like '²' fails every read of its shard",
        "model.py",
        "    if _HASH_KEY_DIGITS.fullmatch(text) is None:\n        return None\n    value = int(text)\n    return value if value < HASH_KEY_SPACE else None",
        "    return int(text) if text.isdigit() else None",
    ),
    Revert(
        "replay-ranges-from-the-marker",
        "#61.3: a replay after a restart whose listing fails keeps what its first attempt dropped",
        "source/driver/planner.py",
        "        known = self.ledger.listed(offset.batch)\n        if known is not None:\n            return known\n",
        "        return {ref: info for refs in offset.tasks().values() for ref in refs if (info := self._info_listed(ref)) is not None}\n",
    ),
    Revert(
        "sink-holds-back-behind-a-misplaced-aggregate",
        "#61.4: the sink's re-send breaks per-key order",
        "sink/producing.py",
        "                    self.held.add(entry.order_key)\n",
        "",
    ),
    Revert(
        "sink-repairs-after-every-flush",
        "#61.5: the sink holds every misplaced aggregate until the task's end",
        "sink/packing.py",
        "        producer.auto_flush = False  # (the aggregator flushes: each flush is followed by its repair)\n",
        "",
    ),
    Revert(
        "efo-register-in-one-attempt",
        "#61.6: a stream whose consumer slots are taken costs an efo start minutes",
        "source/driver/discovery.py",
        '    once = proxy_for(spec, agent="planner", max_attempts=1).client',
        "    once = client",
    ),
    Revert(
        "closed-shard-ends-past-its-listed-end",
        "#61.8: against moto an AvailableNow query never ends after a reshard",
        "source/executor/shard_read.py",
        "        if to_end and self._past_listed_end():",
        "        if False:",
    ),
    Revert(
        "commit-keeps-its-own-batch",
        "(earlier fix) Spark's commit of an unchanged offset deleted the records the next planning needs",
        "source/driver/ledger.py",
        "            self.log.collect(end.token, end.batch)",
        "            self.log.collect(end.token, end.batch + 1)",
    ),
    Revert(
        "closed-idle-shard-is-read",
        "(found) a listed-closed idle shard was only looked at, never read to its end",
        "source/driver/planner.py",
        "        idle, found = idle - closed, found - closed\n",
        "        found = found - closed\n",
    ),
    Revert(
        "renewal-outlives-idleness",
        "(found) a closed shard's tip renewal was forgotten once it stopped being idle",
        "source/driver/tip_probe.py",
        "        for ref in [r for r in self.quiet if r not in readable]:",
        "        for ref in [r for r in self.quiet if r not in idle]:",
    ),
    Revert(
        "look-from-the-oldest-record",
        "(found) a look at a trimmed position failed on every trigger: an empty batch each time",
        "aws/tip_look.py",
        "        if position.anchor is None or not is_foreign_sequence_number(exc):",
        "        if True:",
    ),
    Revert(
        "read-when-the-tip-aged",
        "(found) a shard whose tip aged out while the query was down was looked at: its loss unsaid",
        "source/driver/tip_probe.py",
        "            ref for ref in due if not unaged(self.tip_at(ref, due[ref]), now, self._retention_ms(ref[0]))\n",
        "            ref for ref in ()\n",
    ),
    Revert(
        "closed-start-past-its-end",
        "(found) a closed shard whose start aged out was read again in every batch",
        "source/executor/shard_read.py",
        "        for position in (self.cut.resume, self.start):",
        "        for position in (self.cut.resume,):",
    ),
    Revert(
        "available-now-listing-fails-loudly",
        "(found) an AvailableNow run that met a listing outage ended with records unread",
        "source/driver/planner.py",
        "        if len(kept) < len(candidates) and self.cutoff_ms is not None:",
        "        if False:",
    ),
    Revert(
        "oldest-start-after-an-aged-tip",
        "(found) a shard started at its oldest record after its tip aged lost records without a word",
        "source/executor/loss.py",
        "            if self.tip_ms > 0 and not self.unaged(self.tip_ms):",
        "            if False:",
    ),
    Revert(
        "a-found-record-renews-the-tip",
        "(found) a shard a look found records in, kept from a batch's budget, was called a loss",
        "source/driver/tip_probe.py",
        "            if answer.news is False or answer.ended or answer.first_ms > 0:\n",
        "            if answer.news is False:\n",
    ),
    Revert(
        "closed-idle-shard-is-looked-at",
        "(found) a shard that closed while the query was down was never looked at: a false loss",
        "source/driver/planner.py",
        "        readable, idle = self.shape.admit(streams, ends, start_cutoff, self.cutoff_ms, self.clock())\n",
        "        readable, idle = self.shape.admit(streams, ends, start_cutoff, self.cutoff_ms, self.clock())\n"
        "        idle = {ref for ref in idle if not self._listed_closed(ref)}\n",
    ),
]


def copy_with(revert: Revert, into: Path) -> None:
    """The connector's sources with `revert` applied, under `into`/pyspark_kinesis."""
    target = into / "pyspark_kinesis"
    shutil.copytree(SRC, target, ignore=shutil.ignore_patterns("__pycache__"))
    module = target / revert.module
    text = module.read_text()
    if text.count(revert.old) != 1:
        raise LookupError(
            f"{revert.name}: the fix's text is not (once) in {revert.module}: update the revert"
        )
    module.write_text(text.replace(revert.old, revert.new))


def first_failure(revert: Revert, seeds: int, days: float) -> str:
    with tempfile.TemporaryDirectory(prefix="sim-revert-") as tmp:
        try:
            copy_with(revert, Path(tmp))
        except LookupError as exc:
            return f"does not apply: {exc}"
        probe = (
            "import sys, pyspark_kinesis\n"
            f"assert pyspark_kinesis.__file__.startswith({tmp!r}), pyspark_kinesis.__file__\n"
            "from tests.sim.run import run_one\n"
            f"for seed in range({seeds}):\n"
            f"    figures, violation = run_one(seed, {days})\n"
            "    if violation is not None:\n"
            "        print(f'found by seed {seed} (the {seed + 1}th): {violation.kind}: ' + str(violation)[:160])\n"
            "        sys.exit(0)\n"
            "from pathlib import Path\n"
            "from tests.sim.schedule import Schedule\n"
            "from tests.sim.run import run_schedule\n"
            "for path in sorted(Path('tests/sim/regressions').glob('*.json')):\n"
            "    figures, violation = run_schedule(Schedule.from_json(path.read_text()))\n"
            "    if violation is not None:\n"
            f"        print(f'not found in {seeds} seeds; found by the regression {{path.stem}}: {{violation.kind}}')\n"
            "        sys.exit(0)\n"
            f"print('not found in {seeds} seeds nor by a regression')\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", probe],
            cwd=ROOT,
            env={"PYTHONPATH": f"{tmp}:{ROOT}", "PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"},
            capture_output=True,
            text=True,
            timeout=3600,
        )
        out = (done.stdout.strip().splitlines() or [done.stderr.strip()[-300:]])[-1]
        return out


def main(argv: list[str] | None = None) -> int:
    from .test_simulation import CI_DAYS, CI_SEEDS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="which reverts (default: all)")
    parser.add_argument(
        "--seeds", type=int, default=len(CI_SEEDS), help="seeds at most (default: the suite's)"
    )
    parser.add_argument("--days", type=float, default=CI_DAYS)
    args = parser.parse_args(argv)
    chosen = [r for r in REVERTS if not args.names or r.name in args.names]
    for revert in chosen:
        print(f"{revert.name} ({revert.what}): {first_failure(revert, args.seeds, args.days)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
