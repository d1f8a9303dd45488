"""Benchmarks (make bench)."""
