"""ChecksQueue's `notice`: a regression's one notice to its downstream's owners (crcr.app.regression_notices)."""

from __future__ import annotations

from crcr.app.budget import Budget
from crcr.app.checks_outcome import SyncOutcome
from crcr.app.regression_notices import NoticeDeps, tell
from crcr.contracts.check_messages import RegressionNotice


def notice(message: RegressionNotice, notices: NoticeDeps | None, budget: Budget) -> SyncOutcome:
    if notices is None:
        return SyncOutcome(detail="notices_off")
    return SyncOutcome(detail=tell(message, notices, budget))
