"""gunicorn hooks for /metrics in multiprocess mode (``-c config/gunicorn_metrics.py``).

With PROMETHEUS_MULTIPROC_DIR set, prometheus-client keeps each worker's
values in files there; a worker that exits must be marked dead so that its
live gauges (open event streams) stop counting. See docs/operating/metrics.md.
"""

import os
from typing import Any

from prometheus_client import multiprocess


def child_exit(_server: Any, worker: Any) -> None:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.mark_process_dead(worker.pid)
