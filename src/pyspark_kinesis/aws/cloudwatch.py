"""CloudWatch PutMetricData for the lag listener (`metrics.LagListener`).

Kept beside the other AWS calls; botocore retries throttling and 5xx. The listener runs in the
driver, on Spark's listener thread, so a failure here is the caller's to log, never the query's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import botocore.session
from botocore.config import Config

MAX_DATA_PER_CALL = 1000  # PutMetricData accepts up to 1,000 metrics per call


def cloudwatch_client(region: str, endpoint_url: str | None = None) -> Any:
    """A CloudWatch client with the default credential chain (the driver's role, profile, env...)."""
    return botocore.session.get_session().create_client(
        "cloudwatch",
        region_name=region,
        endpoint_url=endpoint_url,
        config=Config(
            retries={"mode": "standard", "total_max_attempts": 3}, user_agent_extra="pyspark-kinesis/metrics"
        ),
    )


def put_metrics(client: Any, namespace: str, data: Sequence[dict[str, Any]]) -> None:
    """PutMetricData in calls of up to 1,000 metrics."""
    for start in range(0, len(data), MAX_DATA_PER_CALL):
        client.put_metric_data(Namespace=namespace, MetricData=list(data[start : start + MAX_DATA_PER_CALL]))
