"""urllib3 connection pools for the relay's HTTP clients (GitHub, Buildkite, the HUD, OIDC issuers), through the
proxy the environment names, as botocore does for the AWS calls; never retrying, never following a redirect."""

from __future__ import annotations

import urllib.request
from urllib.parse import unquote, urlsplit

import urllib3
from urllib3.util import make_headers, parse_url


def proxy_for(url: str) -> str | None:
    """The proxy the environment names for `url` (HTTPS_PROXY / HTTP_PROXY unless NO_PROXY covers the host, read as
    the standard library reads them), or None."""
    parts = urlsplit(url)
    if not parts.hostname or urllib.request.proxy_bypass(parts.hostname):
        return None
    return urllib.request.getproxies().get(parts.scheme) or None


def pool_for(url: str, *, maxsize: int) -> urllib3.PoolManager:
    """Kept-alive connections for requests to `url`'s origin: up to `maxsize` idle ones per host (one per thread of a
    batch calling at once), no retries, no redirects followed."""
    proxy = proxy_for(url)
    if proxy is None:
        return urllib3.PoolManager(num_pools=4, maxsize=maxsize, retries=False)
    parsed = parse_url(proxy if "//" in proxy else f"http://{proxy}")
    headers = make_headers(proxy_basic_auth=unquote(parsed.auth)) if parsed.auth else None
    return urllib3.ProxyManager(
        parsed._replace(auth=None).url, num_pools=4, maxsize=maxsize, retries=False, proxy_headers=headers
    )
