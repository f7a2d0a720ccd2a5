"""Participation levels L1-L4 and what each one entitles a downstream repository to."""

from __future__ import annotations

from enum import IntEnum


class Level(IntEnum):
    L1 = 1  # dispatch only; callbacks answered "ignored"
    L2 = 2  # + results recorded and pushed to the HUD
    L3 = 3  # + upstream check runs when the PR carries ciflow/crcr/<device>
    L4 = 4  # + upstream check runs always (meant to be a required check)

    @property
    def records_results(self) -> bool:
        return self >= Level.L2

    @classmethod
    def parse(cls, name: str) -> Level:
        return cls[name.upper()]
