"""What the apps contribute to the layers below them, found through Django's app registry.

Core and the lower apps name no app above them. An app that contributes to
them (its projections and outbox handlers, its demo data, its step of the
rebuild, its drift checks, the readers of its items, its gauges, the
reader's language) says so on its AppConfig, as a class attribute naming
the object by its dotted path (or a tuple of paths, where an app keeps them
in several modules)::

    class NoticesConfig(AppConfig):
        demo_seed = "notices.demo.seed"
        rebuild_step = "notices.rebuild.REBUILD_STEP"

and the layer that uses them asks ``contributed("rebuild_step")`` for every
app's, in INSTALLED_APPS order (so the accounts' demo users come before the
items addressed to them). There is nothing to call from ``ready()`` and no
registry of our own: the app registry is the list, the attribute the entry.

A path is imported when first asked for; the system check below imports
them all when Django starts (``manage.py check``, ``runserver``, the test
run), so a typo fails there rather than in a request.
"""

from collections.abc import Iterable
from functools import cache
from typing import Any

from django.apps import apps
from django.core import checks
from django.utils.module_loading import import_string

# The attributes an AppConfig may set, with what each names.
KINDS = {
    "demo_seed": "a function seed(stdout) that loads the app's demo data (core.demo)",
    "rebuild_step": "a durability.rebuild.RebuildStep restoring the app's shared part of the read model",
    "drift_checks": "a sequence of durability.drift.DriftCheck",
    "reader_sources": "a sequence of insight.activity.ReaderSource",
    "gauges": "a sequence of insight.metrics.State, gauges read at every scrape",
    "preferred_language": "a function user -> language code or None (core.api.translations)",
    "projections": "a mapping name -> durability.projection.Projection",
    "outbox_handlers": "a mapping topic -> handler(payload, user_id) (durability.outbox)",
}


def _paths(config: Any, kind: str) -> tuple[str, ...]:
    named = getattr(config, kind, None) or ()
    return (named,) if isinstance(named, str) else tuple(named)


@cache
def contributed(kind: str) -> list[Any]:
    """Every installed app's contributions of this kind, in INSTALLED_APPS order."""
    if kind not in KINDS:
        raise ValueError(f"Unknown contribution {kind!r}; choose from {', '.join(KINDS)}.")
    return [import_string(path) for config in apps.get_app_configs() for path in _paths(config, kind)]


def contributed_each(kind: str) -> list[Any]:
    """The contributions of a kind whose entries are sequences, flattened."""
    items: list[Any] = []
    for sequence in contributed(kind):
        items.extend(sequence)
    return items


@cache
def contributed_by_name(kind: str) -> dict[str, Any]:
    """The contributions of a kind whose entries are mappings, merged (a name
    twice is an error: two apps would fight over it)."""
    merged: dict[str, Any] = {}
    for mapping in contributed(kind):
        for name, value in mapping.items():
            if name in merged:
                raise ValueError(f"{kind}: {name!r} is contributed twice.")
            merged[name] = value
    return merged


@checks.register()
def contributions_import(app_configs: Iterable[Any] | None = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Every contribution's path imports (``core.E001`` when one does not)."""
    errors: list[checks.CheckMessage] = []
    for config in apps.get_app_configs():
        for kind in KINDS:
            for path in _paths(config, kind):
                try:
                    import_string(path)
                except ImportError as exc:
                    errors.append(
                        checks.Error(
                            f"{config.name}: {kind} = {path!r} does not import: {exc}",
                            hint=f"{kind} names {KINDS[kind]}.",
                            obj=config,
                            id="core.E001",
                        )
                    )
    return errors
