"""`mediamesh simulate`: a discrete-event simulation of a fleet driving the real scheduler core."""
