"""Test servers and fault injection on loopback, for the tests, the chaos suite and the benchmarks (not
part of the package users install)."""
