"""Test doubles of external services, written from their public documentation."""
