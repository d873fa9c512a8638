# Sourced by the scripts that run Spark against the local servers on loopback: dummy credentials (the
# local servers want signed calls; any key will do), no instance metadata probe, Spark on 127.0.0.1, and
# the venv's Python for the driver and the executors.
export PYSPARK_KINESIS_NPM_DIR="$PWD/.local-kinesis"
export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-000000000000}" AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-local}"
export AWS_EC2_METADATA_DISABLED=true AWS_REGION="${AWS_REGION:-us-east-1}" SPARK_LOCAL_IP=127.0.0.1
export PYSPARK_PYTHON="$PWD/.venv/bin/python" PYSPARK_DRIVER_PYTHON="$PWD/.venv/bin/python"
