"""The fault drill: ``python -m bench.drill [--quick] [--outage-seconds N] [--only NAME]``.

Runs the real stack (gunicorn, a Celery worker and beat, a private
redis-server, a private PostgreSQL cluster when the PostgreSQL fault is
selected, else a database of its own on the machine's), puts a steady load on it
from this process, injects one fault at a time and prints, per fault, the
requests, the 5xx, the seconds until the read model answers correctly again
without an operator, and the acknowledged writes lost or doubled.
"""
