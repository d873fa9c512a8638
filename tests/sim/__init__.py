"""A deterministic simulation of a query's life: the connector's real driver, ledger and executor code
(not copies) against a model of Kinesis and of Spark's micro-batch protocol, in one process, on a
simulated clock that covers days per run in seconds (FoundationDB's and TigerBeetle's simulation
testing, at this project's scale). What it models and what it does not: docs/design.md
("The simulation"). Entry points: `run.run_one` (a seed or a schedule), `python -m tests.sim.run`
(`scripts/simulate.sh`), the seeds of `test_simulation.py`."""
