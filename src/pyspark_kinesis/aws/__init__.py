"""The only code that talks to AWS. Everything else works on plain values and is testable offline."""
