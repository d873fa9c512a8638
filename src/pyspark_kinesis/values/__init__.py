"""Record values as typed columns: the AWS Glue Schema Registry's wire format and the registered
schemas' types (pure: the registry's API is `aws.glue_registry`)."""


class ValueDoesNotFit(ValueError):
    """A row's value that the schema version cannot encode (a missing field, a wrong type). Here, not in
    `glue_encode`, so that the formats' registry (imported by every query's planning) can name it
    without loading the registry's codecs."""
