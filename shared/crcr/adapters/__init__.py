"""Adapters: the ports implemented with boto3, urllib3, PyJWT and Powertools."""
