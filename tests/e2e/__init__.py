"""End-to-end tests: the four services as processes on the real stack, driven over HTTP."""
