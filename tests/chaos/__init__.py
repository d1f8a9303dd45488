"""Fault injection under load, with Jepsen-style accounting (make chaos; quick run in make test)."""
