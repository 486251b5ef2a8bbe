"""What every request goes through: the edge layer, authentication, problem+json, request ids, logs, metrics, readiness, bodies."""
