"""`python -m pyspark_kinesis.cli`: the same as the `pyspark-kinesis` command."""

from . import main

main()
