"""What crosses processes and outlives them: the offset Spark logs, the tasks' batch-end records, and
the durable store they live in. Plain values and one small storage interface; used by the driver and
the executors alike."""
