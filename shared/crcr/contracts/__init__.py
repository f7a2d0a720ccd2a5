"""Wire models: inbound GitHub payloads (lenient) and the relay's own messages (strict, versioned)."""
