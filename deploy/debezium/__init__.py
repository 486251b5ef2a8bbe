"""Interoperability check of the CDC relay against real Debezium (see check.py)."""
