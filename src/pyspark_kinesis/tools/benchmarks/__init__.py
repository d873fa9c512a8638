"""Benchmarks that print their figures (run them through the `pyspark-kinesis bench-*` commands)."""
