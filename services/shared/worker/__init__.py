"""The Kafka side of a process: the faust app, batched consumption, the poison guard, the publisher, broker failover."""
