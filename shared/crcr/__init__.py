"""crcr: Cross-Repository CI Relay (GitHub App backend on AWS serverless)."""

__version__ = "0.1.0"
