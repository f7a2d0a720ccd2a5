"""What one downstream may make the relay keep and do for one dispatch (docs/contracts.md, "Limits")."""

from __future__ import annotations

# Distinct jobs (job name, run and attempt) recorded for one dispatch; CRCR_MAX_JOBS_PER_DISPATCH changes it.
MAX_JOBS_PER_DISPATCH = 1000
# A run's attempts: GitHub re-runs a workflow run at most 50 times, so its attempts are numbered 1 to 51.
MAX_RUN_ATTEMPT = 51
# The bytes kept for one job attempt: the report as sent (without its ticket, the echoed dispatch payload and what
# the relay keeps in its own form) plus the triage verdict and failing tests as kept. A check-run summary of 65,535
# ASCII characters fits with room to spare.
MAX_STORED_BYTES_PER_JOB = 128 * 1024
