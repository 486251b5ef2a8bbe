"""Unit tests: pure logic and in-memory fakes, no stack."""
