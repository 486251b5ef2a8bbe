"""The ranker worker: likes and feature events into post scores and time-invariant rank
keys; a key that moves enough is published for the fan-out to move inbox rows."""
