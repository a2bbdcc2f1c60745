"""MediameshJobsFailing counts expired jobs with the failed ones (an expired job may be the
mesh's fault) and leaves cancelled jobs, their callers' choice, out of both counts, as
README's Alerts table says; it divided FAILED by SUCCEEDED|FAILED only."""

from __future__ import annotations

from test_alerts import WARNING, Case, check_cases

IMAGE = 'mediamesh_jobs_total{queue="image", state="%s"}'
VIDEO = 'mediamesh_jobs_total{queue="video", state="%s"}'

CASES = (
    # Image: 1 expired for 9 succeeded, 10 %; video: 10 cancelled for 9 succeeded, none
    # failed or expired.
    Case(
        "MediameshJobsFailing",
        {
            IMAGE % "EXPIRED": "0+1x30",
            IMAGE % "SUCCEEDED": "0+9x30",
            VIDEO % "CANCELLED": "0+10x30",
            VIDEO % "SUCCEEDED": "0+9x30",
            VIDEO % "FAILED": "0x30",
            VIDEO % "EXPIRED": "0x30",
        },
        {"5m": [], "25m": [{"queue": "image", **WARNING}]},
    ),
    # Cancelled jobs do not dilute failures: 1 failed for 9 succeeded stays 10 % however
    # many jobs were cancelled.
    Case(
        "MediameshJobsFailing",
        {
            IMAGE % "FAILED": "0+1x30",
            IMAGE % "SUCCEEDED": "0+9x30",
            IMAGE % "CANCELLED": "0+500x30",
        },
        {"25m": [{"queue": "image", **WARNING}]},
    ),
)


def test_expired_jobs_count_and_cancelled_ones_do_not(tmp_path):
    check_cases(CASES, tmp_path)
