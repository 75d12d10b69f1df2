"""Measuring: the protocol (warm-up, interleaved arms, rounds), workloads, per-request metrics and the samples a
run is compared and stored as, and the observer that watches memory and power while arms run."""
