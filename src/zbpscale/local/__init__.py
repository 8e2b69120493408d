"""The names by which the local queue's drivers of releases before 2026-12-02 (up to 0730d3f) start their ranks
(zbpscale/entry.py holds today's): a driver of such a release that is still running after an upgrade starts the
next ranks with the upgraded files."""
