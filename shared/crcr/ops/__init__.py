"""The operator commands (`crcr …`): run on an operator's machine or CI, never shipped in the Lambda layer."""
