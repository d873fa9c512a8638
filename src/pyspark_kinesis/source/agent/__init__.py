"""The enhanced fan-out agent: the process that holds an executor's subscriptions between batches
(`process`, its rules in `hub`), and a Python worker's side of it (`link`)."""
