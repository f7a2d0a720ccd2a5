"""Adapters: the ports implemented with boto3, the relay's own AWS JSON-API client and HTTP transport, urllib3,
PyJWT and Powertools."""
