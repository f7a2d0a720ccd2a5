"""Use cases: each receives its ports as arguments and speaks only domain and contract types."""
