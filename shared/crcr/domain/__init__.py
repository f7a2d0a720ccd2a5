"""Pure domain: levels, allowlist rules, planning, retry and pacing arithmetic (stdlib and pydantic only)."""
