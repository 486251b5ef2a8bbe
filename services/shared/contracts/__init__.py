"""What the parts agree on: topic names and settings, the CDC envelope, and the events each service publishes."""
