"""Storage: files written atomically, dataclasses to and from JSON, and the stored baselines."""
