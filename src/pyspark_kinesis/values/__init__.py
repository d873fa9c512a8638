"""Record values as typed columns: the AWS Glue Schema Registry's wire format and the registered
schemas' types (pure: the registry's API is `aws.glue_registry`)."""
